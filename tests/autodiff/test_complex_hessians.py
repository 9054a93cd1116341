"""Second derivatives through every rule that takes or makes complex values.

One generic harness: a real float64 vector ``x`` is split into blocks that
become complex inputs ``z = a + ib`` (``astype`` real -> complex, then
``+ 1j * b``), the op under test runs on them, and a real quadratic head
(a random quadratic form in ``real(y)`` and ``imag(y)``) makes a real scalar
``f(x)``. ``ember.hessian(f)(x)`` must equal central finite differences of
``ember.grad(f)`` (float64), and ``ember.grad(f)`` central differences of
``f``. Because the head is quadratic in ``y``, the Hessian takes both the
op's first derivative (through the head's curvature) and its second (through
the op's VJP being differentiated again), so a VJP built from a
non-differentiable piece (``sign(z)`` for ``z / |z|``) or with an
inconsistent conjugation fails here, as ``abs`` of an ``fft`` did.

Shapes come from hypothesis (0-d where the op takes it, size 0 for
elementwise ops), values from ranges that keep clear of branch cuts and poles.
The Parseval checks pin the exact values: ``sum |fft(x)|^2 = n sum x^2``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
from _gradcheck import assert_close, namespace, to_backend, to_numpy

BACKENDS = ("numpy", "array_api_strict")
EPS = 1e-5
RTOL = 1e-5
ATOL = 1e-6
# Examples per test: every rule on NumPy, and again (fewer: the rules are the same code, this
# checks their backend-array form) on array_api_strict
EXAMPLES = {"numpy": 4, "array_api_strict": 1}


def search(lib, strategy, body):
    """Run ``body(**example)`` on examples of ``strategy`` (a dict of strategies), as many as
    ``EXAMPLES[lib]`` says."""
    settings(max_examples=EXAMPLES[lib], deadline=None, database=None)(
        given(**strategy)(body))()


# ----------------------------------------------------------------- the harness
def _complex(xp, x, k):
    """Block ``k`` of the complex inputs packed in ``x`` (real parts in block 2k, imaginary
    parts in block 2k + 1 of its first axis)."""
    a = xp.astype(x[2 * k, ...], xp.complex128)
    b = xp.astype(x[2 * k + 1, ...], xp.complex128)
    return a + b * 1j


def _head(xp, y, seed):
    """A real scalar with a full random quadratic form in ``real(y)`` and ``imag(y)``."""
    rng = np.random.default_rng(seed)
    shape = tuple(y.shape)
    c = [to_backend(xp, rng.standard_normal(shape) if shape else np.float64(rng.standard_normal()))
         for _ in range(5)]
    if y.dtype == xp.complex128 or y.dtype == xp.complex64:
        re, im = xp.real(y), xp.imag(y)
        return xp.sum(c[0] * re * re + c[1] * im * im + c[2] * re * im + c[3] * re + c[4] * im)
    return xp.sum(c[0] * y * y + c[3] * y)


def check_second_order(xp, op, x, *, seed=0, rtol=RTOL, atol=ATOL):
    """``hessian(f)`` vs FD of ``grad(f)`` and ``grad(f)`` vs FD of ``f`` for
    ``f(x) = head(op(xp, x))``; returns the Hessian (NumPy)."""
    x = np.asarray(x, dtype=np.float64)

    def f(t):
        return _head(xp, op(xp, t), seed)

    grad = ember.grad(f)
    hess = to_numpy(ember.hessian(f)(to_backend(xp, x)))
    g0 = to_numpy(grad(to_backend(xp, x)))
    n = x.size
    hd = np.zeros((n, n))
    gd = np.zeros(n)
    flat = x.reshape(-1)
    for j in range(n):
        e = np.zeros(n)
        e[j] = EPS
        hi, lo = (flat + e).reshape(x.shape), (flat - e).reshape(x.shape)
        hd[:, j] = ((to_numpy(grad(to_backend(xp, hi))) - to_numpy(grad(to_backend(xp, lo))))
                    / (2 * EPS)).reshape(-1)
        gd[j] = (float(to_numpy(f(to_backend(xp, hi)))) - float(to_numpy(f(to_backend(xp, lo))))) / (2 * EPS)
    assert_close(g0.reshape(-1), gd, "grad vs finite differences of f", 1e-5, 1e-6)
    assert_close(hess.reshape(n, n), hd, "hessian vs finite differences of grad", rtol, atol)
    return hess


def _values(lo=-1.0, hi=1.0):
    """Values in [lo, hi], with magnitudes under 1e-3 set to exactly 0: the rules are exact
    at 0, while second derivatives through ``ans / x`` (cumulative_prod) lose
    ``eps / |x|`` absolutely, meaningless against finite differences at 1e-107."""
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64).map(
        lambda v: v if abs(v) >= 1e-3 else 0.0)


def packed(blocks, shape_strategy, lo=-1.0, hi=1.0):
    """float64 arrays of shape ``(2 * blocks,) + s`` for ``s`` drawn from ``shape_strategy``."""
    return shape_strategy.flatmap(
        lambda s: hnp.arrays(np.float64, (2 * blocks,) + tuple(s), elements=_values(lo, hi)))


ELEM = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=2)
NONEMPTY = hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=2)
VEC = hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=3)
# square matrices up to 3 x 3, and a stack of two up to 2 x 2
SQUARE = st.one_of(st.integers(1, 3).map(lambda n: (n, n)), st.integers(1, 2).map(lambda n: (2, n, n)))


def _alternate(xp, z):
    """A fixed mask of ``z``'s shape (True, False, True, ...): where's branches, with no
    boundary for finite differences to cross."""
    n = math.prod(z.shape)
    return xp.reshape(xp.arange(n) % 2 == 0, tuple(z.shape))


# ----------------------------------------------------------------- unary elementwise
# op(z) on one complex input; the argument maps keep clear of branch cuts and poles (|z| <= 1.5)
UNARY = {
    # (abs has a kink at 0, where finite differences mean nothing: see the test at zero)
    "abs": lambda xp, z: xp.abs(z * 0.5 + (1 + 1j)),
    "abs_squared": lambda xp, z: xp.abs(z * 0.5 + (1 - 1j)) ** 2,
    "real": lambda xp, z: xp.real(z),
    "imag": lambda xp, z: xp.imag(z),
    "conj": lambda xp, z: xp.conj(z),
    "negative": lambda xp, z: -z,
    "positive": lambda xp, z: +z,
    "square": lambda xp, z: xp.square(z),
    "sqrt": lambda xp, z: xp.sqrt(z + 2),
    "exp": lambda xp, z: xp.exp(z),
    "expm1": lambda xp, z: xp.expm1(z),
    "log": lambda xp, z: xp.log(z + 2),
    "log1p": lambda xp, z: xp.log1p(z + 1),
    "log2": lambda xp, z: xp.log2(z + 2),
    "log10": lambda xp, z: xp.log10(z + 2),
    "sin": lambda xp, z: xp.sin(z),
    "cos": lambda xp, z: xp.cos(z),
    "tan": lambda xp, z: xp.tan(z * 0.5),
    "sinh": lambda xp, z: xp.sinh(z),
    "cosh": lambda xp, z: xp.cosh(z),
    "tanh": lambda xp, z: xp.tanh(z * 0.5),
    "asin": lambda xp, z: xp.asin(z * 0.5),
    "acos": lambda xp, z: xp.acos(z * 0.5),
    "atan": lambda xp, z: xp.atan(z * 0.5),
    "asinh": lambda xp, z: xp.asinh(z * 0.5),
    "acosh": lambda xp, z: xp.acosh(z * 0.5 + 2),
    "atanh": lambda xp, z: xp.atanh(z * 0.5),
    "reciprocal": lambda xp, z: xp.reciprocal(z + 2),
    "pow_scalar": lambda xp, z: (z + 2) ** 2.5,
    "pow_int": lambda xp, z: z ** 3,
    "angle": lambda xp, z: xp.atan2(xp.imag(z + 2), xp.real(z + 2)),  # the standard has no angle
    "sum": lambda xp, z: xp.sum(z * z),
    "mean": lambda xp, z: xp.mean(z * z) if math.prod(z.shape) else xp.sum(z * z),
    "where": lambda xp, z: xp.where(_alternate(xp, z), z * z, xp.conj(z)),
}


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(lib, name):
    def body(x):
        xp = namespace(lib)
        op = UNARY[name]
        check_second_order(xp, lambda xp, t: op(xp, _complex(xp, t, 0)), x)

    search(lib, dict(x=packed(1, ELEM)), body)


@pytest.mark.parametrize("lib", BACKENDS)
def test_abs_of_complex_at_zero_is_finite(lib):
    """``|z|``'s VJP divides by ``|z|``: at ``z == 0`` the gradient and Hessian are finite
    (the subgradient 0, as PyTorch), no NaN from the discarded branch."""

    def body(x):
        xp = namespace(lib)
        x = x * 0.0

        def f(t):
            return xp.sum(xp.abs(_complex(xp, t, 0)) * 3.0)

        g = to_numpy(ember.grad(f)(to_backend(xp, x)))
        h = to_numpy(ember.hessian(f)(to_backend(xp, x)))
        assert np.all(g == 0) and np.all(np.isfinite(h))

    search(lib, dict(x=packed(1, ELEM)), body)


@pytest.mark.parametrize("name", ["astype_real", "astype_real_then_complex"])
def test_astype_complex_to_real(name):
    """NumPy casts complex to real by dropping the imaginary part (the standard forbids the
    cast, array_api_strict refuses it): its VJP must give the imaginary part no gradient."""

    def body(x):
        xp = namespace("numpy")

        def op(xp, t):
            z = _complex(xp, t, 0)
            r = xp.astype(z * z, xp.float64)
            return r if name == "astype_real" else xp.astype(r, xp.complex128) * (1 + 2j)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            check_second_order(xp, op, x)

    search("numpy", dict(x=packed(1, ELEM)), body)


# ----------------------------------------------------------------- binary elementwise
def _second(xp, t):
    """The second complex input, broadcast against the first (a trailing axis of 1)."""
    z2 = _complex(xp, t, 1)
    return z2[..., :1] if z2.ndim else z2


BINARY = {
    "add": lambda xp, a, b: a + b,
    "subtract": lambda xp, a, b: a - b,
    "multiply": lambda xp, a, b: a * b,
    "divide": lambda xp, a, b: a / (b + 2),
    "pow": lambda xp, a, b: xp.pow(a + 2, b * 0.5),
    "multiply_real": lambda xp, a, b: a * xp.real(b),
    "divide_real_by_complex": lambda xp, a, b: xp.imag(b) / (a + 2),
    "abs_of_product": lambda xp, a, b: xp.abs((a + 2) * (b + 2)),
    "vecdot": lambda xp, a, b: xp.vecdot(a, b + a),
}


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(lib, name):
    def body(x):
        xp = namespace(lib)
        op = BINARY[name]
        if name == "vecdot" and x.ndim < 2:
            x = x.reshape(x.shape + (1,))
        check_second_order(xp, lambda xp, t: op(xp, _complex(xp, t, 0), _second(xp, t)), x)

    search(lib, dict(x=packed(2, NONEMPTY)), body)


# ----------------------------------------------------------------- reductions and products
REDUCE = {
    "prod": lambda xp, z: xp.prod(z, axis=-1),
    "cumulative_sum": lambda xp, z: xp.cumulative_sum(z * z, axis=-1),
    "cumulative_prod": lambda xp, z: xp.cumulative_prod(z, axis=-1),
    "vector_norm_2": lambda xp, z: xp.linalg.vector_norm(z + 2, axis=-1),
    "vector_norm_1": lambda xp, z: xp.linalg.vector_norm(z + 2, ord=1, axis=-1),
    "vector_norm_inf": lambda xp, z: xp.linalg.vector_norm(z + 2 + xp.cumulative_sum(
        xp.ones_like(z), axis=-1), ord=math.inf, axis=-1),
    "vector_norm_3": lambda xp, z: xp.linalg.vector_norm(z + 2, ord=3, axis=-1),
    "getitem": lambda xp, z: z[..., ::-1][..., :1] * z[..., -1:],
    "concat": lambda xp, z: xp.concat([z, xp.conj(z) * z], axis=-1),
    "flip": lambda xp, z: xp.flip(z, axis=-1) * z,
    "roll": lambda xp, z: xp.roll(z, 1, axis=-1) * z,
    "reshape": lambda xp, z: xp.reshape(z, (-1,)) * xp.reshape(z, (-1,)),
}


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions_and_manipulation(lib, name):
    def body(x):
        xp = namespace(lib)
        op = REDUCE[name]
        check_second_order(xp, lambda xp, t: op(xp, _complex(xp, t, 0)), x)

    search(lib, dict(x=packed(1, VEC)), body)


def _wellposed(xp, z):
    """``0.3 z + 2 I``: an invertible complex matrix (diagonally dominant for |z| <= 1.5)."""
    n = z.shape[-1]
    return z * 0.3 + xp.eye(n, dtype=z.dtype) * 2


def _hpd(xp, z):
    """A Hermitian positive definite matrix from ``z``: ``A A^H + I``."""
    a = _wellposed(xp, z)
    return xp.matmul(a, xp.conj(xp.matrix_transpose(a))) + xp.eye(z.shape[-1], dtype=z.dtype)


def _graded(xp, z, axis):
    """``_wellposed(z) + (0.5 + 0.5j)`` (no entry near 0) with its columns (axis -1) or rows
    (axis -2) scaled by 1, 4, 16, ...: the sums of |entries| along them are all distinct."""
    n = z.shape[-1]
    k = xp.astype(xp.pow(4.0, xp.arange(n, dtype=xp.float64)), z.dtype)
    return (_wellposed(xp, z) + (0.5 + 0.5j)) * (k if axis == -1 else xp.reshape(k, (n, 1)))


MATRIX = {
    "matmul": lambda xp, z: xp.matmul(z, z + 1),
    "matmul_conj": lambda xp, z: xp.matmul(xp.conj(xp.matrix_transpose(z)), z),
    "linalg.matmul": lambda xp, z: xp.linalg.matmul(z, xp.conj(z)),
    "tensordot": lambda xp, z: xp.tensordot(z, z * 2, axes=((z.ndim - 1,), (z.ndim - 2,))),
    "linalg.outer": lambda xp, z: xp.linalg.outer(z[..., 0, :], z[..., -1, :]) if z.ndim == 2
    else xp.sum(z, axis=0),
    "matrix_transpose": lambda xp, z: xp.matrix_transpose(z) * z,
    "linalg.trace": lambda xp, z: xp.linalg.trace(xp.matmul(z, z)),
    "linalg.diagonal": lambda xp, z: xp.linalg.diagonal(z) * xp.linalg.diagonal(z),
    "linalg.inv": lambda xp, z: xp.linalg.inv(_wellposed(xp, z)),
    "linalg.det": lambda xp, z: xp.linalg.det(_wellposed(xp, z)),
    "linalg.slogdet.logabsdet": lambda xp, z: xp.linalg.slogdet(_wellposed(xp, z))[1],
    "linalg.slogdet.sign": lambda xp, z: xp.linalg.slogdet(_wellposed(xp, z))[0],
    "linalg.solve": lambda xp, z: xp.linalg.solve(_wellposed(xp, z), z * z),
    "linalg.solve_vector": lambda xp, z: xp.linalg.solve(_wellposed(xp, z), z[..., 0]) if z.ndim == 2
    else xp.sum(z, axis=0),
    "linalg.matrix_power_3": lambda xp, z: xp.linalg.matrix_power(z, 3),
    "linalg.matrix_power_-2": lambda xp, z: xp.linalg.matrix_power(_wellposed(xp, z), -2),
    "linalg.pinv": lambda xp, z: xp.linalg.pinv(_wellposed(xp, z)),
    "linalg.cholesky": lambda xp, z: xp.linalg.cholesky(_hpd(xp, z)),
    "linalg.cholesky_upper": lambda xp, z: xp.linalg.cholesky(_hpd(xp, z), upper=True),
    "linalg.matrix_norm_fro": lambda xp, z: xp.linalg.matrix_norm(_wellposed(xp, z)),
    # (no zero entry, where |.| has its kink, and one column (row) whose sum is the largest by far)
    "linalg.matrix_norm_1": lambda xp, z: xp.linalg.matrix_norm(_graded(xp, z, -1), ord=1),
    "linalg.matrix_norm_inf": lambda xp, z: xp.linalg.matrix_norm(_graded(xp, z, -2), ord=math.inf),
}


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(MATRIX))
def test_matrix_ops(lib, name):
    def body(x):
        xp = namespace(lib)
        op = MATRIX[name]
        check_second_order(xp, lambda xp, t: op(xp, _complex(xp, t, 0)), x, rtol=1e-4, atol=1e-5)

    search(lib, dict(x=packed(1, SQUARE)), body)


@pytest.mark.parametrize("lib", BACKENDS)
def test_linalg_cross(lib):
    def body(x):
        xp = namespace(lib)
        check_second_order(
            xp, lambda xp, t: xp.linalg.cross(_complex(xp, t, 0), _complex(xp, t, 1)), x)

    search(lib, dict(x=packed(2, st.just((2, 3)))), body)


# ----------------------------------------------------------------- fft family
NORMS = ("backward", "ortho", "forward")


def _real_n(z, n):
    """An output length for the real-output transforms (``2 (m - 1)`` is 0 for ``m == 1``)."""
    m = z.shape[-1]
    return 2 * n if n is not None else max(2 * (m - 1), 1)


def _offset(xp, z):
    """``z * 0.1`` plus a signal whose spectrum (any length up to 4, padded or cut) keeps
    every bin at least 0.6 away from 0."""
    m = z.shape[-1]
    base = np.asarray([3.0 + 1j, 0.7 - 0.4j, 0.2 + 0.5j, -0.3 + 0.1j, 0.1j, 0.2][:m])
    return z * 0.1 + to_backend(xp, base)
FFT = {
    "fft": lambda xp, z, n, norm: xp.fft.fft(z, n=n, norm=norm),
    "ifft": lambda xp, z, n, norm: xp.fft.ifft(z, n=n, norm=norm),
    "fftn": lambda xp, z, n, norm: xp.fft.fftn(z, s=None if n is None else (n,), axes=(-1,), norm=norm),
    "ifftn": lambda xp, z, n, norm: xp.fft.ifftn(z, norm=norm),
    "rfft": lambda xp, z, n, norm: xp.fft.rfft(xp.real(z), n=n, norm=norm),
    "rfftn": lambda xp, z, n, norm: xp.fft.rfftn(xp.real(z) * xp.imag(z), norm=norm),
    "ihfft": lambda xp, z, n, norm: xp.fft.ihfft(xp.real(z), n=n, norm=norm),
    "irfft": lambda xp, z, n, norm: xp.fft.irfft(z, n=_real_n(z, n), norm=norm),
    "irfftn": lambda xp, z, n, norm: xp.fft.irfftn(z, s=tuple(z.shape[:-1]) + (_real_n(z, n),),
                                                    axes=tuple(range(z.ndim)), norm=norm),
    "hfft": lambda xp, z, n, norm: xp.fft.hfft(z, n=_real_n(z, n), norm=norm),
    "fftshift": lambda xp, z, n, norm: xp.fft.fftshift(z) * z,
    "ifftshift": lambda xp, z, n, norm: xp.fft.ifftshift(z) * z,
    # (abs's kink at 0: the spectrum of a fixed signal plus z * 0.1 has no zero bin)
    "abs_fft_squared": lambda xp, z, n, norm: xp.abs(xp.fft.fft(_offset(xp, z), n=n, norm=norm)) ** 2,
    "abs_fft": lambda xp, z, n, norm: xp.abs(xp.fft.fft(_offset(xp, z), n=n, norm=norm)),
}


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(FFT))
def test_fft_family(lib, name):
    def body(x, n, norm):
        xp = namespace(lib)
        op = FFT[name]
        check_second_order(xp, lambda xp, t: op(xp, _complex(xp, t, 0), n, norm), x)

    search(lib, dict(x=packed(1, VEC), n=st.sampled_from([None, 1, 2, 4]), norm=st.sampled_from(NORMS)), body)


# ----------------------------------------------------------------- Parseval, exactly
def _parseval(xp, transform, n, weights=None):
    x = np.random.default_rng(n).standard_normal(n)

    def f(t):
        y = transform(xp.astype(t, xp.complex128) if transform is not xp.fft.rfft else t)
        p = xp.abs(y) ** 2
        return xp.sum(p if weights is None else p * to_backend(xp, weights))

    return to_numpy(ember.hessian(f)(to_backend(xp, x)))


def _rfft_weights(n):
    """How often each stored rfft bin appears in the full spectrum: 1, 2, ..., 2, (1)."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_parseval_hessians(lib, n):
    """``sum |fft(x)|^2 = n sum |x|^2``, so its Hessian in real ``x`` is ``2n I``; for ``ifft``
    ``2/n I``, for ``norm="ortho"`` ``2 I``. ``rfft`` stores half the spectrum of real
    ``x``: weighted by how often each bin appears in the full one it is ``2n I`` again,
    unweighted it is ``2 Re(A^H A)`` for the rfft matrix ``A``."""
    xp = namespace(lib)
    eye = np.eye(n)
    assert_close(_parseval(xp, xp.fft.fft, n), 2 * n * eye, "fft", 1e-12, 1e-10)
    assert_close(_parseval(xp, xp.fft.ifft, n), 2 / n * eye, "ifft", 1e-12, 1e-10)
    assert_close(_parseval(xp, lambda z: xp.fft.fft(z, norm="ortho"), n), 2 * eye, "fft ortho",
                 1e-12, 1e-10)
    assert_close(_parseval(xp, xp.fft.rfft, n, _rfft_weights(n)), 2 * n * eye, "rfft weighted",
                 1e-12, 1e-10)
    a = np.fft.rfft(eye, axis=0)
    assert_close(_parseval(xp, xp.fft.rfft, n), 2 * np.real(a.conj().T @ a), "rfft", 1e-12, 1e-10)


def test_issue_parseval_example():
    """The report's own example: length 6, ``fft`` of ``astype(x, complex128)``."""
    xp = namespace("numpy")
    x = xp.asarray(np.random.default_rng(0).standard_normal(6))
    h = ember.hessian(lambda x: xp.sum(xp.abs(xp.fft.fft(xp.astype(x, xp.complex128))) ** 2))(x)
    np.testing.assert_allclose(to_numpy(h), 12 * np.eye(6), atol=1e-10)


# ----------------------------------------------------------------- fixed points hypothesis may miss
@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("values", [
    [0.0, 2.0, 0.5],  # one zero, then nonzeros: their cotangents move with the zero
    [0.5, 0.0, 0.0, 2.0],  # two zeros: the second one's cotangent moves with the first
    [0.0, 0.0, 0.0],
])
def test_cumulative_prod_at_zeros(lib, values):
    """Real and complex scans with exact zeros: the Hessian through the scan's VJP."""
    xp = namespace(lib)
    v = np.asarray(values)
    check_second_order(xp, lambda xp, t: xp.cumulative_prod(t[0, ...], axis=-1), np.stack([v, v]))
    check_second_order(xp, lambda xp, t: xp.cumulative_prod(_complex(xp, t, 0), axis=-1),
                       np.stack([v, v * 0.5]))
    check_second_order(xp, lambda xp, t: xp.prod(_complex(xp, t, 0), axis=-1), np.stack([v, v * 0.5]))


@pytest.mark.parametrize("lib", BACKENDS)
def test_pow_at_zero_exponent(lib):
    """``x ** y`` at ``y == 0``: d/dx is 0 there, but it moves with ``y`` (``x^(y-1)``)."""
    xp = namespace(lib)
    x = np.asarray([[1.5, 2.0, 0.0], [0.0, 0.0, 0.0]])
    check_second_order(xp, lambda xp, t: xp.pow(t[0, ...] + 0.5, t[1, ...]), x)
    check_second_order(xp, lambda xp, t: xp.pow(_complex(xp, t, 0) + 2, 0.0 * _complex(xp, t, 0)),
                       np.concatenate([x, x]))
