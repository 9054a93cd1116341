"""Finite-difference checks of ember's reverse mode, reusable by every test file.

``check_vjp(xp, f, args)`` compares ``ember.vjp`` of ``f`` (a function of
ember Tensors) with central finite differences in float64, for a random
cotangent: the FD reference of ``<ct, f(x)>`` w.r.t. each element of each
input. A 0-d output is also checked through ``ember.grad``.
``check_hvp(xp, f, x, v)`` compares ``grad(<grad f, v>)`` (grad of grad)
with the central difference of the gradient along ``v``.
``check_complex_grad`` checks PyTorch's convention for complex inputs:
the gradient of a real loss ``L`` w.r.t. ``z = a + ib`` is
``dL/da + i dL/db``.

Inputs are NumPy float64/complex128 arrays; they are converted to the
backend of ``xp`` (ember.autodiff.numpy or ember.autodiff.array_api_strict).
The hypothesis strategies below make shapes including 0-d, size-0 and
mutually broadcastable ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember

BACKENDS = ("numpy", "array_api_strict")
EPS = 1e-6
RTOL = 1e-5
ATOL = 1e-6


def namespace(name: str):
    """The ready-made ember wrapper namespace of backend ``name``."""
    return ember.autodiff.namespace(name)


def namespace_or_skip(name: str):
    """``namespace(name)``, skipping the test where that backend is not installed."""
    pytest.importorskip(name)
    return ember.autodiff.namespace(name)


def to_numpy(x):
    """A NumPy array (or a tuple of them) from a Tensor / backend array / scalar."""
    if isinstance(x, (tuple, list)):
        return type(x)(to_numpy(a) for a in x) if not hasattr(x, "_fields") else tuple(
            to_numpy(a) for a in x
        )
    if isinstance(x, ember.Tensor):
        x = x.raw
    if isinstance(x, np.ndarray) or np.isscalar(x):
        return np.asarray(x)
    return np.asarray(np.from_dlpack(x))


def to_backend(xp, a):
    """NumPy array (or Python value, or a list of arrays) as untracked Tensors of ``xp``."""
    if isinstance(a, list):
        return [to_backend(xp, b) for b in a]
    if isinstance(a, (np.ndarray, np.generic)):
        return xp.asarray(xp._backend.asarray(np.array(a)))
    return a


# ----------------------------------------------------------------- strategies
SMALL = dict(min_dims=0, max_dims=3, min_side=0, max_side=3)


def shapes(**kw):
    """Shapes incl. 0-d and size-0 (override with min_dims/min_side...)."""
    return hnp.array_shapes(**{**SMALL, **kw})


def floats(lo=-2.0, hi=2.0):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64)


def arrays(shape, lo=-2.0, hi=2.0, *, away_from=None, gap=0.05):
    """float64 arrays of ``shape`` (a shape or a strategy) with values in [lo, hi].

    ``away_from``: values closer than ``gap`` to it are pushed away (kinks).
    """
    elems = floats(lo, hi)
    if away_from is not None:
        elems = elems.map(lambda v: v if abs(v - away_from) >= gap else away_from + gap * (1 if v >= away_from else -1))
    return hnp.arrays(np.float64, shape, elements=elems)


def distinct(shape, scale=0.25):
    """float64 arrays with pairwise distinct values (no ties for max/sort/maximum)."""

    def build(shape_):
        n = int(np.prod(shape_))
        return st.permutations(list(range(-n, n, 2))).map(
            lambda p: (np.asarray(p[:n] if n else [], dtype=np.float64).reshape(shape_) * scale + 0.1)
        ) if n else st.just(np.zeros(shape_))

    if isinstance(shape, tuple):
        return build(shape)
    return shape.flatmap(build)


def broadcast_pair(n=2, **kw):
    """``n`` mutually broadcastable shapes (incl. 0-d and size 0)."""
    opts = dict(num_shapes=n, min_dims=0, max_dims=3, min_side=0, max_side=3)
    opts.update(kw)
    return hnp.mutually_broadcastable_shapes(**opts).map(lambda r: r.input_shapes)


# ----------------------------------------------------------------- checks
def _fd(fun, arrs, i, eps):
    """Central FD gradient of scalar ``fun(list of numpy arrays)`` w.r.t. arrs[i]."""
    x = arrs[i]
    g = np.zeros_like(x)
    flat = x.reshape(-1)
    gf = g.reshape(-1)
    for j in range(flat.size):
        for dv, sgn in ((1.0, 1.0), (1j, 1j)) if np.iscomplexobj(x) else ((1.0, 1.0),):
            old = flat[j]
            flat[j] = old + eps * dv
            hi = fun(arrs)
            flat[j] = old - eps * dv
            lo = fun(arrs)
            flat[j] = old
            gf[j] += sgn * (hi - lo) / (2 * eps)
    return g


def assert_close(actual, expected, what, rtol=RTOL, atol=ATOL):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def check_vjp(xp, f, args, *, argnums=None, eps=EPS, rtol=RTOL, atol=ATOL, seed=0):
    """Check ember's VJP of ``f`` at ``args`` against central finite differences.

    ``args``: NumPy arrays (float64/complex128, differentiated unless
    ``argnums`` says otherwise) or other values (passed as they are).
    Returns the ember gradients as NumPy arrays.
    """
    args = [np.array(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
    if argnums is None:
        argnums = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind in "fc"]
    t_args = [to_backend(xp, a) for a in args]
    out = f(*t_args)
    out_np = to_numpy(out)
    rng = np.random.default_rng(seed)
    ct = rng.standard_normal(out_np.shape)
    if np.iscomplexobj(out_np):
        ct = ct + 1j * rng.standard_normal(out_np.shape)

    def loss(arrs):
        y = to_numpy(f(*[to_backend(xp, a) for a in arrs]))
        if np.iscomplexobj(y):  # real loss: Re <ct, y>; its grad wrt y is ct
            return float(np.sum(np.real(np.conj(ct) * y)))
        return float(np.sum(ct * y))

    def g_of(*diff):
        full = list(t_args)
        for i, d in zip(argnums, diff):
            full[i] = d
        return f(*full)

    _, pull = ember.vjp(g_of, *[t_args[i] for i in argnums])
    grads = pull(xp.asarray(xp._backend.asarray(ct.astype(out_np.dtype) if out_np.dtype.kind in "fc" else ct)))
    res = []
    for k, i in enumerate(argnums):
        got = to_numpy(grads[k])
        want = _fd(loss, args, i, eps)
        assert_close(got, want, f"vjp wrt arg {i}", rtol, atol)
        res.append(got)
    if out_np.ndim == 0 and not np.iscomplexobj(out_np):
        gs = ember.grad(lambda *d: g_of(*d) * float(ct), argnums=tuple(range(len(argnums))))(
            *[t_args[i] for i in argnums]
        )
        for k, i in enumerate(argnums):
            assert_close(to_numpy(gs[k]), res[k], f"grad wrt arg {i} vs vjp", rtol, atol)
    return res


def check_grad(xp, f, args, **kw):
    """Like :func:`check_vjp`, for a scalar-valued ``f`` (also runs ``ember.grad``)."""
    return check_vjp(xp, f, args, **kw)


def check_hvp(xp, f, x, v, *, eps=1e-5, rtol=1e-4, atol=1e-5):
    """Hessian-vector product of scalar ``f`` via grad-of-grad vs FD of the gradient."""
    tx, tv = to_backend(xp, x), to_backend(xp, v)
    gradf = ember.grad(f)

    def gv(t):
        return xp.sum(gradf(t) * tv)

    hvp = to_numpy(ember.grad(gv)(tx))
    hi = to_numpy(gradf(to_backend(xp, x + eps * v)))
    lo = to_numpy(gradf(to_backend(xp, x - eps * v)))
    assert_close(hvp, (hi - lo) / (2 * eps), "hvp", rtol, atol)
    return hvp


def check_complex_grad(xp, f, z, *, eps=EPS, rtol=RTOL, atol=ATOL):
    """Gradient of real-valued ``f`` at complex ``z`` equals dL/da + i dL/db (PyTorch's)."""
    tz = to_backend(xp, z)
    got = to_numpy(ember.grad(f)(tz))

    def loss(arrs):
        return float(to_numpy(f(to_backend(xp, arrs[0]))))

    want = _fd(loss, [np.array(z)], 0, eps)
    assert_close(got, want, "complex grad", rtol, atol)
    return got


def check_jvp(xp, f, args, *, argnums=None, eps=EPS, rtol=RTOL, atol=ATOL, seed=0):
    """Check ``ember.jvp`` of ``f`` at ``args`` against central differences along random
    tangents (float64/complex128 arguments, or those of ``argnums``): forward mode's own
    rules, independent of the VJPs that :func:`check_vjp` checks."""
    args = [np.array(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
    if argnums is None:
        argnums = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind in "fc"]
    rng = np.random.default_rng(seed)
    dirs = {}
    for i in argnums:
        d = rng.standard_normal(args[i].shape)
        if np.iscomplexobj(args[i]):
            d = d + 1j * rng.standard_normal(args[i].shape)
        dirs[i] = d.astype(args[i].dtype)
    t_args = [to_backend(xp, a) for a in args]

    def g_of(*diff):
        full = list(t_args)
        for i, d in zip(argnums, diff):
            full[i] = d
        return f(*full)

    _, tangent = ember.jvp(g_of, tuple(t_args[i] for i in argnums),
                           tuple(to_backend(xp, dirs[i]) for i in argnums))

    def at(step):
        moved = [a + step * dirs[i] if i in dirs else a for i, a in enumerate(args)]
        return to_numpy(f(*[to_backend(xp, a) for a in moved]))

    want = (np.asarray(at(eps), dtype=np.complex128) - np.asarray(at(-eps), dtype=np.complex128)) / (2 * eps)
    got = to_numpy(tangent)
    if not np.iscomplexobj(got):
        want = want.real
    assert_close(got, want, "jvp", rtol, atol)
    return got


# ----------------------------------------------------------------- several outputs
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
    outs = [to_numpy(o) for o in _leaves(f(*[T(a) for a in args]))]
    rng = np.random.default_rng(seed)
    cts = []
    for o in outs:
        c = rng.standard_normal(o.shape)
        if np.iscomplexobj(o):
            c = c + 1j * rng.standard_normal(o.shape)
        cts.append(np.asarray(c, dtype=o.dtype) if o.dtype.kind in "fc" else c)

    def loss(arrs):
        ys = [to_numpy(o) for o in _leaves(f(*[T(a) for a in arrs]))]
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
        got = to_numpy(grads[k])
        want = _fd(loss, args, i, eps)
        assert got.shape == want.shape, f"arg {i}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"arg {i}")
