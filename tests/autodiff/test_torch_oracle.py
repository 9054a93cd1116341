"""Oracle: gradients, JVPs and Hessians of composite functions agree with PyTorch.

Each case is written once against a tiny ops adapter (``o.ns`` is the array
namespace: ember's wrapper or ``torch``; ``o.sumk``/``o.maxk``/``o.c`` hide
the few spelling differences) and compared in float64 to 1e-10 relative.
Complex inputs are compared directly: ember, like PyTorch, returns
``dL/da + i dL/db``. Skipped when torch is not installed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the PyTorch oracle test is skipped")

import ember  # noqa: E402
from ember.func import hessian, jvp  # noqa: E402

RTOL = 1e-10
xp = ember.autodiff.namespace("numpy")
R = np.random.default_rng(42)
X5x4 = R.standard_normal((5, 4))
Y5x3 = R.standard_normal((5, 3))
ONEHOT = np.eye(3)[[0, 2, 1, 1, 0]]
C3 = R.standard_normal((3, 3))
C4 = R.standard_normal((4, 4))
K5 = R.standard_normal(5) + 1j * R.standard_normal(5)
W8 = R.uniform(0.5, 1.5, 8)


class _Ember:
    ns = xp

    @staticmethod
    def c(a):
        return xp.asarray(a)

    @staticmethod
    def sumk(x, axis):
        return xp.sum(x, axis=axis, keepdims=True)

    @staticmethod
    def maxk(x, axis):
        return xp.max(x, axis=axis, keepdims=True)

    @staticmethod
    def meank(x, axis):
        return xp.mean(x, axis=axis, keepdims=True)

    @staticmethod
    def eye(n):
        return xp.eye(n, dtype=xp.float64)

    outer = staticmethod(xp.linalg.outer)
    trace = staticmethod(xp.linalg.trace)


class _Torch:
    ns = torch

    @staticmethod
    def c(a):
        return torch.from_numpy(np.array(a))

    @staticmethod
    def sumk(x, axis):
        return torch.sum(x, dim=axis, keepdim=True)

    @staticmethod
    def maxk(x, axis):
        return torch.amax(x, dim=axis, keepdim=True)

    @staticmethod
    def meank(x, axis):
        return torch.mean(x, dim=axis, keepdim=True)

    @staticmethod
    def eye(n):
        return torch.eye(n, dtype=torch.float64)

    outer = staticmethod(torch.outer)
    trace = staticmethod(torch.trace)


def _spd(o, x):
    n = x.shape[-1]
    return o.ns.matmul(x, o.ns.linalg.matrix_transpose(x) if o is _Ember else x.mT) + n * o.eye(n)


def _mT(o, x):
    return o.ns.linalg.matrix_transpose(x) if o is _Ember else x.mT


def _lse(o, z, axis=-1):
    m = o.maxk(z, axis)
    return m + o.ns.log(o.sumk(o.ns.exp(z - m), axis))


def _abs2(o, z):
    """|z|^2 as real(z * conj(z)) (complex abs's second derivative needs a rule for sign)."""
    return o.ns.real(z * o.ns.conj(z))


def _sym(o, x):
    return (x + _mT(o, x)) * 0.5


CASES = {
    # name: (fn(o, x), x0)
    "mlp_mse": (lambda o, w: o.ns.mean((o.ns.tanh(o.ns.matmul(o.c(X5x4), w)) - o.c(Y5x3)) ** 2),
                R.standard_normal((4, 3))),
    "two_layer_mlp": (lambda o, w: o.ns.sum(o.ns.tanh(o.ns.matmul(o.ns.tanh(o.ns.matmul(o.c(X5x4), w)), _mT(o, w)))
                                            * o.c(X5x4)), R.standard_normal((4, 3)) * 0.5),
    "softmax_xent": (lambda o, w: o.ns.mean(_lse(o, o.ns.matmul(o.c(X5x4), w))[:, 0]
                                            - o.ns.sum(o.ns.matmul(o.c(X5x4), w) * o.c(ONEHOT), axis=-1)),
                     R.standard_normal((4, 3))),
    "layer_norm": (lambda o, x: o.ns.sum(((x - o.meank(x, -1)) / o.ns.sqrt(o.meank((x - o.meank(x, -1)) ** 2, -1) + 1e-5))
                                         * o.c(X5x4)), R.standard_normal((5, 4))),
    "logdet_spd_cholesky": (lambda o, x: 2 * o.ns.sum(o.ns.log(o.ns.linalg.diagonal(o.ns.linalg.cholesky(_spd(o, x))))),
                            R.standard_normal((3, 3))),
    "logdet_spd_slogdet": (lambda o, x: o.ns.linalg.slogdet(_spd(o, x))[1], R.standard_normal((3, 3))),
    "cholesky_upper": (lambda o, x: o.ns.sum(o.ns.linalg.cholesky(_spd(o, x), upper=True) * o.c(C3)),
                       R.standard_normal((3, 3))),
    "spectral_norm": (lambda o, x: o.ns.linalg.matrix_norm(x, ord=2), R.standard_normal((3, 4))),
    "min_singular": (lambda o, x: o.ns.linalg.matrix_norm(x, ord=-2), R.standard_normal((4, 3))),
    "nuclear_norm": (lambda o, x: o.ns.linalg.matrix_norm(x, ord="nuc"), R.standard_normal((3, 4))),
    "fro_norm": (lambda o, x: o.ns.linalg.matrix_norm(x) * o.ns.sum(x), R.standard_normal((3, 4))),
    "norm_1": (lambda o, x: o.ns.linalg.matrix_norm(x, ord=1), R.standard_normal((3, 4))),
    "norm_inf": (lambda o, x: o.ns.linalg.matrix_norm(x, ord=math.inf), R.standard_normal((3, 4))),
    "vector_norm_3": (lambda o, x: o.ns.linalg.vector_norm(x, ord=3), R.standard_normal(6)),
    "vector_norm_inf": (lambda o, x: o.ns.linalg.vector_norm(x, ord=math.inf) * o.ns.sum(x), R.standard_normal(6)),
    "vector_norm_axis": (lambda o, x: o.ns.sum(o.ns.linalg.vector_norm(x, axis=0) ** 3), R.standard_normal((3, 2))),
    "det": (lambda o, x: o.ns.linalg.det(x + 3 * o.eye(3)), R.standard_normal((3, 3))),
    "inv": (lambda o, x: o.ns.sum(o.ns.linalg.inv(x + 3 * o.eye(3)) * o.c(C3)), R.standard_normal((3, 3))),
    "solve": (lambda o, x: o.ns.sum(o.ns.linalg.solve(x + 3 * o.eye(3), o.c(C3)) ** 2), R.standard_normal((3, 3))),
    "pinv": (lambda o, x: o.ns.sum(o.ns.linalg.pinv(x) * o.c(C3[:2])), R.standard_normal((3, 2)) + np.eye(3, 2) * 2),
    "qr": (lambda o, x: o.ns.sum(o.ns.linalg.qr(x)[0] * o.c(C3[:, :2])) + o.ns.sum(o.ns.linalg.qr(x)[1] ** 2),
           R.standard_normal((3, 2))),
    "svdvals_cubed": (lambda o, x: o.ns.sum(o.ns.linalg.svdvals(x) ** 3), R.standard_normal((4, 3))),
    "svd_top_pair": (lambda o, x: o.ns.sum(o.ns.linalg.svd(x, full_matrices=False)[0][:, :1]
                                           * o.ns.linalg.svd(x, full_matrices=False)[2][:1, :] * o.c(C4[:3])),
                     R.standard_normal((3, 4))),
    "eigvalsh_weighted": (lambda o, x: o.ns.sum(o.ns.linalg.eigvalsh(_sym(o, x)) * o.c(np.arange(1.0, 5.0))),
                          R.standard_normal((4, 4))),
    "eigh_top_projector": (lambda o, x: o.ns.sum(o.ns.linalg.eigh(_sym(o, x))[1][:, -1:]
                                                 * _mT(o, o.ns.linalg.eigh(_sym(o, x))[1][:, -1:]) * o.c(C4)),
                           R.standard_normal((4, 4))),
    "matrix_power_3": (lambda o, x: o.ns.sum(o.ns.linalg.matrix_power(x, 3) * o.c(C3)), R.standard_normal((3, 3))),
    "matrix_power_-2": (lambda o, x: o.ns.sum(o.ns.linalg.matrix_power(x + 3 * o.eye(3), -2) * o.c(C3)),
                        R.standard_normal((3, 3))),
    "cross": (lambda o, x: o.ns.sum(o.ns.linalg.cross(x[0], x[1]) ** 2), R.standard_normal((2, 3))),
    "trace_diag": (lambda o, x: o.trace(o.ns.matmul(x, x)) + o.ns.sum(o.ns.linalg.diagonal(x, offset=1) ** 3),
                   R.standard_normal((3, 3))),
    "outer": (lambda o, x: o.ns.sum(o.outer(x, o.ns.sin(x)) * o.c(C4)), R.standard_normal(4)),
    "power_spectrum": (lambda o, x: o.ns.sum(_abs2(o, o.ns.fft.rfft(x, n=8)) * o.c(W8[:5])), R.standard_normal(6)),
    "fft_abs": (lambda o, x: o.ns.sum(o.ns.sqrt(_abs2(o, o.ns.fft.fftshift(o.ns.fft.fft(x + 0j)))) * o.c(W8[:7])),
                R.standard_normal(7)),
    "rfftn_irfftn": (lambda o, x: o.ns.sum(o.ns.fft.irfftn(o.ns.fft.rfftn(x * x) * 0.5, s=(3, 4)) ** 2),
                     R.standard_normal((3, 4))),
    "ihfft_hfft": (lambda o, x: o.ns.sum(o.ns.fft.hfft(o.ns.fft.ihfft(x), n=6) * o.ns.cos(x)), R.standard_normal(6)),
    "fft_conv": (lambda o, x: o.ns.sum(o.ns.fft.irfft(o.ns.fft.rfft(x) * o.c(K5), n=8) ** 2), R.standard_normal(8)),
}

#: Cases whose gradient multiplies two complex values with a core rule.
NEEDS_CORE_COMPLEX = {"fft_conv"}
#: Cases with complex intermediates: their JVP/Hessian (transposed or second-order
#: reverse passes) run the core's complex multiply rule.
COMPLEX_INTERMEDIATE = {"power_spectrum", "fft_abs", "rfftn_irfftn", "ihfft_hfft", "fft_conv"}


def _core_complex_is_pytorch() -> bool:
    """Whether the core's complex multiply follows PyTorch's convention (conj of the other factor)."""
    z = xp.asarray(np.array([1.0 + 2.0j]))
    w = np.array([0.5 + 1.0j])
    g = ember.grad(lambda z: xp.sum(xp.real(z * xp.asarray(w))))(z)
    return bool(np.allclose(g.raw, np.conj(w)))


def _t(a):
    return torch.from_numpy(np.array(a)).requires_grad_(True)


def _close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def _skip_if_core(name, needs=NEEDS_CORE_COMPLEX):
    if name in needs and not _core_complex_is_pytorch():
        pytest.xfail("the core's complex multiply rule does not follow PyTorch's convention yet "
                     "(ember.autodiff._rules.elementwise 'multiply' should use conj(other))")


def test_at_least_30_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_jvp_hessian_match_torch(name):
    _skip_if_core(name)
    fn, x0 = CASES[name]
    x0 = np.asarray(x0, dtype=np.float64)
    v0 = np.random.default_rng(len(name)).standard_normal(x0.shape)
    fe = lambda x: fn(_Ember, x)  # noqa: E731
    ft = lambda x: fn(_Torch, x)  # noqa: E731
    # value and gradient
    xt = _t(x0)
    yt = ft(xt)
    (gt,) = torch.autograd.grad(yt, xt)
    ye, ge = ember.value_and_grad(fe)(x0)
    _close(ye, yt.detach().numpy(), f"{name}: value")
    _close(ge, gt.numpy(), f"{name}: gradient")
    _skip_if_core(name, COMPLEX_INTERMEDIATE)
    # JVP
    _, jt = torch.func.jvp(ft, (torch.from_numpy(x0),), (torch.from_numpy(v0),))
    _, je = jvp(fe, (x0,), (v0,))
    _close(je, jt.numpy(), f"{name}: jvp")
    # Hessian
    ht = torch.autograd.functional.hessian(ft, torch.from_numpy(x0))
    he = hessian(fe)(x0)
    _close(he, ht.numpy(), f"{name}: hessian")


COMPLEX_CASES = {
    "fft_energy": (lambda o, z: o.ns.sum(o.ns.abs(o.ns.fft.fft(z, norm="ortho")) ** 3)),
    "ifftn_real": (lambda o, z: o.ns.sum(o.ns.real(o.ns.fft.ifftn(z)) ** 2)),
    "irfft_sq": (lambda o, z: o.ns.sum(o.ns.fft.irfft(z, n=6) ** 2 * o.ns.fft.irfft(z, n=6))),
    "hfft": (lambda o, z: o.ns.sum(o.ns.sin(o.ns.fft.hfft(z, n=5)))),
    "det_abs": (lambda o, z: o.ns.abs(o.ns.linalg.det(z))),
    "slogdet_complex": (lambda o, z: o.ns.linalg.slogdet(z)[1]),
    "inv_abs": (lambda o, z: o.ns.sum(o.ns.abs(o.ns.linalg.inv(z)))),
    "vector_norm_complex": (lambda o, z: o.ns.linalg.vector_norm(z, ord=3)),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_CASES))
def test_complex_gradients_match_torch(name):
    fn = COMPLEX_CASES[name]
    r = np.random.default_rng(len(name))
    z0 = r.standard_normal((3, 3)) + 1j * r.standard_normal((3, 3)) + 3 * np.eye(3)
    if name == "irfft_sq" or name == "hfft":
        z0 = z0[0]
    zt = _t(z0)
    (gt,) = torch.autograd.grad(fn(_Torch, zt), zt)
    ge = ember.grad(lambda z: fn(_Ember, z))(z0)
    _close(ge, gt.resolve_conj().numpy(), f"{name}: complex gradient")
