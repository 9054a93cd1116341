"""Finite-difference checks of the ``fft`` VJP rules (PyTorch's complex convention).

For a complex input ``z = a + ib`` and the real scalar ``L = Re <c, f(z)>``
the expected cotangent is ``dL/da + i dL/db`` (each part by central finite
differences), for random complex cotangents ``c``. Sizes, ``n``/``s``
(padding and truncation), axes and every ``norm`` are drawn by hypothesis.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from test_grad_linalg import BACKENDS, _ns, fd_check

# every test twice: VJPs on backend arrays and on Tensors (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("backward_loop")

NORMS = ["backward", "ortho", "forward"]
EX = settings(max_examples=8, deadline=None)


def _data(seed, shape, cplx):
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape)
    return x + 1j * r.standard_normal(shape) if cplx else x


seeds = st.integers(0, 2**31 - 1)
lengths = st.integers(1, 6)
norms = st.sampled_from(NORMS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["fft", "ifft"])
@EX
@given(seed=seeds, m=lengths, n=st.one_of(st.none(), lengths), norm=norms, axis=st.sampled_from([-1, 0]))
def test_c2c_1d(backend, name, seed, m, n, norm, axis):
    xp = _ns(backend)
    fn = getattr(xp.fft, name)
    x = _data(seed, (m, 3) if axis == 0 else (2, m), True)
    fd_check(xp, lambda z: fn(z, n=n, axis=axis, norm=norm), [x])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["fftn", "ifftn"])
@EX
@given(seed=seeds, a=lengths, b=lengths, norm=norms,
       sa=st.sampled_from([None, "s", "axes", "both"]))
def test_c2c_nd(backend, name, seed, a, b, norm, sa):
    xp = _ns(backend)
    fn = getattr(xp.fft, name)
    x = _data(seed, (2, a, b), True)
    kw = {"norm": norm}
    if sa in ("s", "both"):
        kw["s"], kw["axes"] = (max(1, a - 1), b + 1), (1, 2)
    if sa in ("axes", "both"):
        kw["axes"] = (0, 2)
        if "s" in kw:
            kw["s"] = (3, max(1, b - 1))
    fd_check(xp, lambda z: fn(z, **kw), [x])


@pytest.mark.parametrize("backend", BACKENDS)
@EX
@given(seed=seeds, m=lengths, n=st.one_of(st.none(), lengths), norm=norms)
def test_rfft_irfft_hfft_ihfft(backend, seed, m, n, norm):
    xp = _ns(backend)
    real = _data(seed, (2, m), False)
    cplx = _data(seed + 1, (2, m), True)
    fd_check(xp, lambda x: xp.fft.rfft(x, n=n, norm=norm), [real])
    fd_check(xp, lambda x: xp.fft.ihfft(x, n=n, norm=norm), [real])
    if n is not None or m > 1:  # irfft/hfft need n >= 1 output points
        fd_check(xp, lambda z: xp.fft.irfft(z, n=n, norm=norm), [cplx])
        fd_check(xp, lambda z: xp.fft.hfft(z, n=n, norm=norm), [cplx])


@pytest.mark.parametrize("backend", BACKENDS)
@EX
@given(seed=seeds, a=lengths, b=lengths, norm=norms, use_s=st.booleans())
def test_rfftn_irfftn(backend, seed, a, b, norm, use_s):
    xp = _ns(backend)
    real = _data(seed, (a, b), False)
    cplx = _data(seed + 1, (a, b), True)
    kw = {"norm": norm}
    if use_s:
        kw["s"], kw["axes"] = (a + 1, max(2, b - 1)), (0, 1)
    fd_check(xp, lambda x: xp.fft.rfftn(x, **kw), [real])
    if use_s or b > 1:
        fd_check(xp, lambda z: xp.fft.irfftn(z, **kw), [cplx])
    # 3-d with explicit axes
    real3 = _data(seed, (2, a, b), False)
    fd_check(xp, lambda x: xp.fft.rfftn(x, axes=(0, 1), norm=norm), [real3])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axes", [None, (0,), (1, 0)])
@pytest.mark.parametrize("cplx", [False, True])
def test_shifts(backend, axes, cplx):
    xp = _ns(backend)
    x = _data(0, (3, 4), cplx)
    fd_check(xp, lambda z: xp.fft.fftshift(z, axes=axes), [x])
    fd_check(xp, lambda z: xp.fft.ifftshift(z, axes=axes), [x])


def test_fft_of_real_input_gives_real_gradient():
    xp = ember.autodiff.namespace("numpy")
    x = _data(1, (5,), False)
    fd_check(xp, xp.fft.fft, [x])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fft_second_order(backend):
    """Reverse-over-reverse through fft rules: Hessian-vector product vs FD."""
    xp = _ns(backend)
    r = np.random.default_rng(3)
    x0, v0 = r.standard_normal(6), r.standard_normal(6)
    T = lambda a: xp.asarray(xp._backend.asarray(a))  # noqa: E731

    def f(x):
        y = xp.fft.rfft(x * x, norm="ortho")
        re = xp.fft.irfft(y * xp.fft.rfft(x), n=6)
        c = xp.real(xp.fft.fft(xp.fft.ifftshift(x) + 0j))
        return xp.sum(re * re) + xp.sum(c * c * c)

    gf = ember.grad(f)
    hv = ember.grad(lambda x: xp.sum(gf(x) * T(v0)))(T(x0))
    eps = 1e-5
    fd = (np.asarray(gf(T(x0 + eps * v0)).raw) - np.asarray(gf(T(x0 - eps * v0)).raw)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(hv.raw), fd, rtol=1e-5, atol=1e-6)
