"""Finite-difference checks of the ``linalg`` VJP rules, on NumPy and array_api_strict.

Inputs are drawn by hypothesis (shape and a seed) and made well conditioned
(diagonally dominant, SPD, or with separated singular values/eigenvalues).
Outputs that are unique only up to sign (eigenvectors, singular vectors) are
sign-normalized inside the tested function, so finite differences see a
smooth function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember._errors import NotDifferentiableError

# every test twice: VJPs on backend arrays and on Tensors (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("backward_loop")

BACKENDS = ("numpy", "array_api_strict")
EXAMPLES = settings(max_examples=6, deadline=None)


# ----------------------------------------------------------------- private FD helper
def _np(x):
    if isinstance(x, ember.Tensor):
        x = x.raw
    return np.asarray(np.from_dlpack(x)) if not isinstance(x, np.ndarray) else x


def _leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def fd_check(xp, f, args, *, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0, argnums=None):
    """Compare ``ember.vjp`` of ``f`` (returning one or several arrays) with central FD.

    The scalar checked is ``L = sum_k Re <c_k, y_k>`` for random cotangents
    ``c_k``; the FD gradient of a complex input is ``dL/da + i dL/db``.
    """
    args = [np.array(a) for a in args]
    argnums = list(range(len(args))) if argnums is None else list(argnums)
    T = lambda a: xp.asarray(xp._backend.asarray(a.copy()))  # noqa: E731
    outs = [_np(o) for o in _leaves(f(*[T(a) for a in args]))]
    rng = np.random.default_rng(seed)
    cts = []
    for o in outs:
        c = rng.standard_normal(o.shape)
        if np.iscomplexobj(o):
            c = c + 1j * rng.standard_normal(o.shape)
        cts.append(np.asarray(c, dtype=o.dtype) if o.dtype.kind in "fc" else c)

    def loss(arrs):
        ys = [_np(o) for o in _leaves(f(*[T(a) for a in arrs]))]
        return sum(float(np.sum(np.real(np.conj(c) * y))) for c, y in zip(cts, ys) if y.dtype.kind in "fc")

    def g_of(*diff):
        full = [T(a) for a in args]
        for i, d in zip(argnums, diff):
            full[i] = d
        return f(*full)

    out, pull = ember.vjp(g_of, *[T(args[i]) for i in argnums])
    ct = [T(c) for c in cts]
    grads = pull(tuple(ct) if isinstance(out, (tuple, list)) else ct[0])
    for k, i in enumerate(argnums):
        got = _np(grads[k])
        x = args[i]
        want = np.zeros_like(x)
        flat, wf = x.reshape(-1), want.reshape(-1)
        for j in range(flat.size):
            for dv in ((1.0, 1j) if np.iscomplexobj(x) else (1.0,)):
                old = flat[j]
                flat[j] = old + eps * dv
                hi = loss(args)
                flat[j] = old - eps * dv
                lo = loss(args)
                flat[j] = old
                wf[j] += dv * (hi - lo) / (2 * eps)
        assert got.shape == want.shape, f"arg {i}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"arg {i}")


# ----------------------------------------------------------------- input builders
def _rng(seed):
    return np.random.default_rng(seed)


def general(seed, shape, cplx=False):
    """Diagonally dominant (well-conditioned) square matrices."""
    r = _rng(seed)
    a = r.uniform(-1, 1, shape)
    if cplx:
        a = a + 1j * r.uniform(-1, 1, shape)
    n = shape[-1]
    return a + 2 * n * np.eye(n) * (r.choice([-1, 1]))


def spd_param(xp, x):
    """An SPD matrix built from x (differentiable), so gradients stay symmetric."""
    n = x.shape[-1]
    return xp.matmul(x, xp.matrix_transpose(x)) + n * xp.eye(n, dtype=x.dtype)


def sym_param(xp, x):
    return (x + xp.matrix_transpose(x)) * 0.5


def separated(seed, shape, gap=0.3):
    """Matrices whose singular values are >= gap apart (and >= gap)."""
    r = _rng(seed)
    m, n = shape[-2], shape[-1]
    k = min(m, n)
    batch = shape[:-2]
    qa, _ = np.linalg.qr(r.standard_normal(batch + (m, m)))
    qb, _ = np.linalg.qr(r.standard_normal(batch + (n, n)))
    s = 1.0 + gap * np.arange(k)[::-1] + r.uniform(0, 0.1, batch + (k,))
    mid = np.zeros(batch + (m, n))
    idx = np.arange(k)
    mid[..., idx, idx] = s
    return qa @ mid @ qb


batch = st.sampled_from([(), (2,)])
seeds = st.integers(0, 2**31 - 1)
sizes = st.integers(1, 4)


def _ns(name):
    pytest.importorskip(name)
    return ember.autodiff.namespace(name)


def _sign_fix(xp, v, axis):
    """Multiply eigen/singular vectors by a constant sign so they are locally smooth."""
    ref = v[..., :1, :] if axis == -2 else v[..., :, :1]
    s = ember.stop_gradient(xp.sign(ref))
    return v * xp.where(s == 0, 1.0, s)


# ----------------------------------------------------------------- tests
@pytest.mark.parametrize("backend", BACKENDS)
@EXAMPLES
@given(seed=seeds, n=sizes, b=batch)
def test_inv_det_slogdet_solve(backend, seed, n, b):
    xp = _ns(backend)
    a = general(seed, b + (n, n))
    fd_check(xp, xp.linalg.inv, [a])
    fd_check(xp, xp.linalg.det, [a])
    fd_check(xp, lambda x: xp.linalg.slogdet(x), [a])
    rhs = _rng(seed + 1).standard_normal(b + (n, 2))
    fd_check(xp, xp.linalg.solve, [a, rhs])
    vec = _rng(seed + 2).standard_normal((n,))
    fd_check(xp, xp.linalg.solve, [a, vec])


@pytest.mark.parametrize("backend", BACKENDS)
def test_solve_broadcast_rhs(backend):
    xp = _ns(backend)
    a = general(3, (3, 3))
    rhs = _rng(4).standard_normal((2, 3, 2))
    fd_check(xp, xp.linalg.solve, [a, rhs])


@pytest.mark.parametrize("backend", BACKENDS)
@EXAMPLES
@given(seed=seeds, n=sizes, b=batch)
def test_complex_inv_det_slogdet_solve(backend, seed, n, b):
    xp = _ns(backend)
    a = general(seed, b + (n, n), cplx=True)
    fd_check(xp, xp.linalg.inv, [a])
    fd_check(xp, xp.linalg.det, [a])
    fd_check(xp, lambda x: xp.linalg.slogdet(x), [a])
    rhs = _rng(seed).standard_normal(b + (n, 1)) + 1j
    fd_check(xp, xp.linalg.solve, [a, rhs])


@pytest.mark.parametrize("backend", BACKENDS)
@EXAMPLES
@given(seed=seeds, n=sizes, b=batch, upper=st.booleans())
def test_cholesky(backend, seed, n, b, upper):
    xp = _ns(backend)
    x = _rng(seed).uniform(-1, 1, b + (n, n))
    kw = {"upper": True} if upper else {}
    fd_check(xp, lambda x: xp.linalg.cholesky(spd_param(xp, x), **kw), [x])


@pytest.mark.parametrize("backend", BACKENDS)
@EXAMPLES
@given(seed=seeds, m=sizes, n=sizes, b=batch)
def test_pinv_qr(backend, seed, m, n, b):
    xp = _ns(backend)
    a = separated(seed, b + (m, n))
    fd_check(xp, xp.linalg.pinv, [a])
    fd_check(xp, lambda x: xp.linalg.qr(x), [a])


def test_qr_complete_tall_is_not_differentiable():
    xp = ember.autodiff.namespace("numpy")
    a = xp.asarray(separated(0, (3, 2)))
    with pytest.raises(NotDifferentiableError, match="mode='reduced'"):
        ember.grad(lambda x: xp.sum(xp.linalg.qr(x, mode="complete")[0]))(a)


@pytest.mark.parametrize("backend", BACKENDS)
@EXAMPLES
@given(seed=seeds, m=sizes, n=sizes, b=batch, full=st.booleans())
def test_svd(backend, seed, m, n, b, full):
    xp = _ns(backend)
    a = separated(seed, b + (m, n))

    def f(x):
        u, s, vh = xp.linalg.svd(x, full_matrices=full)
        k = s.shape[-1]
        u, vh = u[..., :, :k], vh[..., :k, :]
        return _sign_fix(xp, u, -2), s, _sign_fix(xp, vh, -1)

    fd_check(xp, f, [a])
    fd_check(xp, xp.linalg.svdvals, [a])


@pytest.mark.parametrize("backend", BACKENDS)
@EXAMPLES
@given(seed=seeds, n=sizes, b=batch)
def test_eigh(backend, seed, n, b):
    xp = _ns(backend)
    r = _rng(seed)
    q, _ = np.linalg.qr(r.standard_normal(b + (n, n)))
    w = np.arange(n) * 0.5 + r.uniform(0, 0.1, b + (n,))
    a = (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)

    def f(x):
        w, v = xp.linalg.eigh(sym_param(xp, x))
        return w, _sign_fix(xp, v, -2)

    fd_check(xp, f, [a])
    fd_check(xp, lambda x: xp.linalg.eigvalsh(sym_param(xp, x)), [a])


def test_eigh_degenerate_eigenvalues_documented_case():
    """Exactly repeated eigenvalues: losses of the eigenvalues and of the eigenvectors
    of the *simple* eigenvalues are smooth, and the zero-coupling rule gets them right."""
    xp = ember.autodiff.namespace("numpy")
    q, _ = np.linalg.qr(_rng(0).standard_normal((3, 3)))
    a = (q * np.array([1.0, 1.0, 3.0])) @ q.T
    c = np.arange(9.0).reshape(3, 3)

    def f(x):
        w, v = xp.linalg.eigh(sym_param(xp, x))
        top = v[:, 2:]
        return xp.sum(w ** 2) + xp.sum(xp.matmul(top, xp.matrix_transpose(top)) * xp.asarray(c))

    fd_check(xp, f, [a])
    assert np.all(np.isfinite(ember.grad(f)(xp.asarray(a)).raw))


MATRIX_ORDS = ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ord", MATRIX_ORDS)
@settings(max_examples=4, deadline=None)
@given(seed=seeds, m=sizes, n=sizes, keep=st.booleans())
def test_matrix_norm(backend, ord, seed, m, n, keep):
    xp = _ns(backend)
    a = separated(seed, (2, m, n))
    a = a + _rng(seed).uniform(0.3, 1.0, a.shape) * np.sign(a + 1e-3)  # distinct row/col sums
    fd_check(xp, lambda x: xp.linalg.matrix_norm(x, keepdims=keep, ord=ord), [a], rtol=1e-4, atol=1e-5)


VECTOR_ORDS = [2, 1, 3, 0.5, -1, math.inf, -math.inf, 0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ord", VECTOR_ORDS)
@settings(max_examples=4, deadline=None)
@given(seed=seeds, axis=st.sampled_from([None, -1, 0, (0, 1)]), keep=st.booleans())
def test_vector_norm(backend, ord, seed, axis, keep):
    xp = _ns(backend)
    r = _rng(seed)
    a = r.permutation(24).reshape(2, 3, 4) * 0.1 + 0.05
    a = a * r.choice([-1.0, 1.0], a.shape)
    fd_check(xp, lambda x: xp.linalg.vector_norm(x, axis=axis, keepdims=keep, ord=ord), [a], rtol=1e-4)


@pytest.mark.parametrize("ord", [2, 1, 3, 0.5, math.inf, 0])
def test_vector_norm_at_zero_is_zero(ord):
    xp = ember.autodiff.namespace("numpy")
    g = ember.grad(lambda x: xp.linalg.vector_norm(x, ord=ord))(xp.zeros((3,)))
    assert np.all(g.raw == 0)


def test_vector_norm_complex():
    xp = ember.autodiff.namespace("numpy")
    z = np.array([1 + 2j, -0.5 + 0.3j, 0.2 - 1j])
    for ord in (2, 1, 3, math.inf):
        fd_check(xp, lambda x: xp.linalg.vector_norm(x, ord=ord), [z])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("power", [0, 1, 2, 3, -1, -2])
def test_matrix_power(backend, power):
    xp = _ns(backend)
    a = general(power + 10, (2, 3, 3)) / 6.0
    fd_check(xp, lambda x: xp.linalg.matrix_power(x, power), [a])


@pytest.mark.parametrize("backend", BACKENDS)
@EXAMPLES
@given(seed=seeds, off=st.integers(-2, 2), m=sizes, n=sizes)
def test_trace_diagonal_outer_cross(backend, seed, off, m, n):
    xp = _ns(backend)
    r = _rng(seed)
    a = r.standard_normal((2, m, n))
    fd_check(xp, lambda x: xp.linalg.trace(x, offset=off), [a])
    fd_check(xp, lambda x: xp.linalg.diagonal(x, offset=off), [a])
    fd_check(xp, xp.linalg.outer, [r.standard_normal(m), r.standard_normal(n)])
    fd_check(xp, lambda u, v: xp.linalg.cross(u, v, axis=-2), [r.standard_normal((3, 2)), r.standard_normal((3, 1))])
    fd_check(xp, xp.linalg.cross, [r.standard_normal((2, 3)), r.standard_normal((3,))])


def test_complex_outer_cross_trace():
    xp = ember.autodiff.namespace("numpy")
    r = _rng(0)
    c = lambda *s: r.standard_normal(s) + 1j * r.standard_normal(s)  # noqa: E731
    fd_check(xp, xp.linalg.outer, [c(3), c(2)])
    fd_check(xp, xp.linalg.cross, [c(3), c(3)])
    fd_check(xp, xp.linalg.trace, [c(3, 3)])
    herm = lambda z: xp.matmul(z, xp.conj(xp.matrix_transpose(z))) + 3 * xp.eye(3)  # noqa: E731
    fd_check(xp, lambda z: xp.linalg.cholesky(herm(z)), [c(3, 3)])
    fd_check(xp, lambda z: xp.linalg.cholesky(herm(z), upper=True), [c(3, 3)])
    fd_check(xp, lambda z: xp.linalg.pinv(z), [c(3, 2) + np.eye(3, 2) * 3])
    fd_check(xp, lambda z: xp.linalg.matrix_power(z, 3), [c(3, 3)])
    fd_check(xp, lambda z: xp.linalg.matrix_norm(z, ord=1), [c(3, 3)])


def test_complex_svd_is_refused():
    xp = ember.autodiff.namespace("numpy")
    z = xp.asarray(np.eye(2) + 1j)
    with pytest.raises(NotDifferentiableError, match="complex"):
        ember.grad(lambda x: xp.sum(xp.linalg.svdvals(x)))(z)


# ----------------------------------------------------------------- higher order
@pytest.mark.parametrize("backend", BACKENDS)
def test_second_order_reverse_over_reverse(backend):
    """grad of (grad . v) equals FD of the gradient along v, through several rules."""
    xp = _ns(backend)
    r = _rng(5)
    x0 = r.uniform(-1, 1, (3, 3))
    v0 = r.standard_normal((3, 3))

    def f(x):
        a = spd_param(xp, x)
        s = xp.linalg.slogdet(a)[1] + xp.sum(xp.linalg.inv(a) * a[0, 0])
        s = s + xp.linalg.matrix_norm(x, ord="nuc") + xp.sum(xp.linalg.eigvalsh(a) * xp.linalg.eigvalsh(a))
        return s + xp.sum(xp.linalg.cholesky(a)) + xp.linalg.det(a + x)

    T = lambda a: xp.asarray(xp._backend.asarray(a))  # noqa: E731
    gradf = ember.grad(f)
    hv = ember.grad(lambda x: xp.sum(gradf(x) * T(v0)))(T(x0))
    eps = 1e-5
    fd = (_np(gradf(T(x0 + eps * v0))) - _np(gradf(T(x0 - eps * v0)))) / (2 * eps)
    np.testing.assert_allclose(_np(hv), fd, rtol=1e-5, atol=1e-6)


def test_rules_are_compute_bound_and_registered():
    from ember.autodiff._rules import COMPUTE, RULES

    for name in ("cholesky", "det", "slogdet", "inv", "solve", "pinv", "qr", "svd", "svdvals",
                 "eigh", "eigvalsh", "matrix_norm", "matrix_power"):
        assert RULES[f"linalg.{name}"].bound == COMPUTE, name
    for name in ("vector_norm", "cross", "outer", "trace", "diagonal", "tensordot", "vecdot"):
        assert f"linalg.{name}" in RULES, name
