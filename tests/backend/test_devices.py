"""Gradients stay on the input's device, also through linalg, fft and forward mode.

array_api_strict has several devices on one machine, so device handling is
checked without a GPU; mixing devices in one op is a BackendError.
"""

import numpy as np
import pytest

import ember

strict = pytest.importorskip("array_api_strict")
xp = pytest.importorskip("ember.autodiff.array_api_strict")
DEV = strict.Device("device1")


def _mat():
    return xp.asarray(np.random.default_rng(0).random((3, 3)) + 3 * np.eye(3), device=DEV)


def _vec():
    return xp.asarray(np.random.default_rng(1).random(8), device=DEV)


CASES = {
    "linalg.det": (lambda a: xp.linalg.det(a), _mat),
    "linalg.inv": (lambda a: xp.sum(xp.linalg.inv(a)), _mat),
    "linalg.eigvalsh": (lambda a: xp.sum(xp.linalg.eigvalsh(a + a.mT)), _mat),
    "fft.rfft": (lambda v: xp.sum(xp.real(xp.fft.rfft(v))), _vec),
    "fft.irfft(rfft)": (lambda v: xp.sum(xp.fft.irfft(xp.fft.rfft(v), n=8) ** 2), _vec),
    "take": (lambda v: xp.sum(xp.take(v, xp.asarray([0, 0, 3], device=DEV))), _vec),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_stays_on_device(name):
    f, make = CASES[name]
    x = make()
    g = ember.grad(f)(x)
    assert g.device == DEV and g.shape == x.shape


def test_jacfwd_and_hessian_stay_on_device():
    v = _vec()
    assert ember.jacfwd(lambda a: a * 2.0)(v).device == DEV
    assert ember.hessian(lambda a: xp.sum(a ** 3))(v).device == DEV


def test_mixing_devices_is_a_backend_error():
    a = xp.asarray([1.0, 2.0], device=DEV)
    b = xp.asarray([1.0, 2.0])
    with pytest.raises(ember.BackendError, match="add"):
        a + b
