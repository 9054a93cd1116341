"""Helpers of the autodiff tests: namespaces by name, NumPy arrays in and out (Dask included)."""

from __future__ import annotations

import numpy as np
import pytest

import ember


def ns(name: str):
    """ember's wrapper namespace of backend ``name`` (skipped with the reason if Dask is absent)."""
    if name == "dask":
        pytest.importorskip("dask.array", reason="dask not installed")
    return ember.autodiff.namespace(name)


def to(xp, a):
    """NumPy data as an untracked float64 Tensor of ``xp``."""
    return xp.asarray(xp._backend.asarray(np.array(a, dtype=np.float64)))


def as_numpy(t):
    """A NumPy array of a Tensor of any backend (lazy ones computed) or a raw array."""
    if isinstance(t, ember.Tensor):
        t = ember.compute(t).raw
    return np.asarray(t)


def central_differences(fun, x, eps: float = 1e-6):
    """The gradient of scalar ``fun(numpy array)`` at ``x`` by central differences."""
    g = np.zeros_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e.reshape(-1)[j] = eps
        g.reshape(-1)[j] = (fun(x + e) - fun(x - e)) / (2 * eps)
    return g


def check_value_and_gradient(backend: str, prog, x0) -> None:
    """``value_and_grad`` of ``prog(xp, x)`` at ``x0`` on ``backend``: the value is the eager
    program's, the gradient its central differences (float64)."""
    xp = ns(backend)

    def f(x):
        return prog(xp, x)

    def eager(a):
        return float(as_numpy(f(to(xp, a))))

    value, g = ember.value_and_grad(f)(to(xp, x0))
    assert float(as_numpy(value)) == pytest.approx(eager(x0), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(as_numpy(g), central_differences(eager, x0), rtol=1e-5, atol=1e-6)
