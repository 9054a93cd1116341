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
