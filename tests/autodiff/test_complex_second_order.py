"""Second derivatives through complex values: Parseval's identity through the FFTs, and every
complex-capable rule's Hessian against finite differences of its own gradient (float64,
complex128, generated inputs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
from _arrays import as_numpy, ns, to

BACKENDS = ("numpy", "array_api_strict")
EPS = 1e-6





_lengths = st.integers(1, 7)


@pytest.mark.parametrize("backend", BACKENDS)
@given(n=_lengths, data=st.data())
@settings(max_examples=15, deadline=None)
def test_parseval_hessians(backend, n, data):
    """sum |fft(x)|^2 = n sum x^2, sum |ifft(x)|^2 = sum x^2 / n, and rfft's half spectrum
    with its doubled bins: Hessians 2n I, (2/n) I and 2n I."""
    xp = ns(backend)
    x = data.draw(hnp.arrays(np.float64, (n,), elements=st.floats(-2, 2, width=64)))
    # |.| has no second derivative at 0: a spectrum bin that is exactly zero is a kink
    assume(np.all(np.abs(np.fft.fft(x)) > 1e-3))
    tx = to(xp, x)
    m = n // 2 + 1
    w = np.full(m, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    tw = to(xp, w)
    cases = {
        "fft": (lambda t: xp.sum(xp.abs(xp.fft.fft(xp.astype(t, xp.complex128))) ** 2), 2.0 * n),
        "ifft": (lambda t: xp.sum(xp.abs(xp.fft.ifft(xp.astype(t, xp.complex128))) ** 2), 2.0 / n),
        "rfft": (lambda t: xp.sum(tw * xp.abs(xp.fft.rfft(t)) ** 2), 2.0 * n),
    }
    for name, (f, scale) in cases.items():
        h = as_numpy(ember.hessian(f)(tx))
        np.testing.assert_allclose(h, scale * np.eye(n), rtol=1e-9, atol=1e-9, err_msg=name)


def _split(xp, t, n):
    """The complex vector whose real and imaginary parts are t[:n] and t[n:]."""
    c = xp.complex128
    return xp.astype(t[:n], c) + 1j * xp.astype(t[n:], c)


#: name -> u(xp, z): a complex-capable op on a complex vector z (length n, values away from the
#: ops' singular points); each is checked through two real losses of its result
OPS = {
    "abs": lambda xp, z: xp.abs(z),
    "real": lambda xp, z: xp.real(z),
    "imag": lambda xp, z: xp.imag(z),
    "conj": lambda xp, z: xp.conj(z),
    "exp": lambda xp, z: xp.exp(z),
    "log": lambda xp, z: xp.log(z),
    "sqrt": lambda xp, z: xp.sqrt(z),
    "sin": lambda xp, z: xp.sin(z),
    "cos": lambda xp, z: xp.cos(z),
    "tanh": lambda xp, z: xp.tanh(z),
    "square": lambda xp, z: xp.square(z),
    "reciprocal": lambda xp, z: xp.reciprocal(z),
    "multiply": lambda xp, z: z * xp.flip(z),
    "divide": lambda xp, z: z / (xp.flip(z) + 3.0),
    "pow": lambda xp, z: z ** 3,
    "sum": lambda xp, z: xp.sum(z * z, keepdims=True),
    "matmul": lambda xp, z: xp.matmul(xp.reshape(z, (1, -1)), xp.reshape(xp.flip(z), (-1, 1))),
    "astype": lambda xp, z: xp.astype(xp.real(z), xp.complex128) * z,
    "fft": lambda xp, z: xp.fft.fft(z),
    "ifft": lambda xp, z: xp.fft.ifft(z),
    "fftn": lambda xp, z: xp.fft.fftn(z),
    "hfft": lambda xp, z: xp.fft.hfft(z),
    "irfft": lambda xp, z: xp.fft.irfft(z),
    "rfft": lambda xp, z: xp.fft.rfft(xp.real(z) * xp.imag(z)),
    "ihfft": lambda xp, z: xp.fft.ihfft(xp.real(z) + xp.imag(z)),
    "det": lambda xp, z: xp.linalg.det(xp.reshape(xp.concat([z[:1] + 3.0, z[1:2], z[1:2] * 0.5,
                                                             z[:1] * z[:1] + 4.0]), (2, 2))),
    "inv": lambda xp, z: xp.linalg.inv(xp.reshape(xp.concat([z[:1] + 3.0, z[1:2], z[1:2] * 0.5,
                                                             z[:1] + 4.0]), (2, 2))),
    "vector_norm": lambda xp, z: xp.linalg.vector_norm(z),
}


def _losses(xp):
    """Two real losses of a complex result u: polynomial in its parts, and through |u|^2."""
    def parts(u):
        if not xp.isdtype(u.dtype, "complex floating"):
            return xp.sum(u ** 2 + xp.sin(u))
        return xp.sum(xp.real(u) ** 2 + xp.real(u) * xp.imag(u) * 0.5)

    return {"parts": parts, "abs2": lambda u: xp.sum(xp.abs(u) ** 2)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", sorted(OPS))
@given(data=st.data())
@settings(max_examples=6, deadline=None)
def test_complex_rule_hessian_matches_differences_of_its_gradient(backend, op, data):
    xp = ns(backend)
    n = 2 if op in ("det", "inv") else data.draw(st.integers(2 if op in ("hfft", "irfft") else 1, 4))
    re = data.draw(hnp.arrays(np.float64, (n,), elements=st.floats(0.5, 1.5, width=64)))
    im = data.draw(hnp.arrays(np.float64, (n,), elements=st.floats(0.2, 1.0, width=64)))
    x = np.concatenate([re, im])
    u = as_numpy(OPS[op](xp, _split(xp, to(xp, x), n)))
    assume(np.all(np.abs(u) > 1e-3))  # |u|^2 through abs: no kink of abs at u = 0
    for lname, loss in _losses(xp).items():
        def f(t):
            return loss(OPS[op](xp, _split(xp, t, n)))

        g = ember.grad(f)
        h = as_numpy(ember.hessian(f)(to(xp, x)))
        fd = np.empty((2 * n, 2 * n))
        for j in range(2 * n):
            e = np.zeros(2 * n)
            e[j] = EPS
            fd[:, j] = (as_numpy(g(to(xp, x + e))) - as_numpy(g(to(xp, x - e)))) / (2 * EPS)
        np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-5, err_msg=f"{op} / {lname}")
