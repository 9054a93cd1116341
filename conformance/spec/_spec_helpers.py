"""Helpers shared by the spec checks in ``conformance/spec`` (imported by the test files)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

#: Backend wrappers under test, in report order: name -> module of the wrapper.
_ALL_BACKENDS = {
    "numpy": "ember.autodiff.numpy",
    "array_api_strict": "ember.autodiff.array_api_strict",
    "dask": "ember.autodiff.dask",
    "cupy": "ember.autodiff.cupy",
}


def _selected() -> dict:
    """The backends to check: ``EMBER_TEST_BACKENDS`` (as in tests/conftest.py) or the CPU three.

    ``EMBER_TEST_BACKENDS=cupy`` runs the spec checks on the GPU (tests/gpu/run.sh).
    """
    import os

    want = os.environ.get("EMBER_TEST_BACKENDS", "").strip()
    if not want:
        return {k: v for k, v in _ALL_BACKENDS.items() if k != "cupy"}
    if want == "all":
        return dict(_ALL_BACKENDS)
    names = [n.strip() for n in want.split(",") if n.strip()]
    return {n: _ALL_BACKENDS[n] for n in names if n in _ALL_BACKENDS}


SPEC_BACKENDS = _selected()

_loaded: dict = {}


def load(name: str):
    """The wrapper namespace of backend ``name``; pytest.skip with the reason if it cannot load."""
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(SPEC_BACKENDS[name])
        except ImportError as e:  # the backend library is not installed
            _loaded[name] = f"backend {name!r} is not installed ({e})"
    mod = _loaded[name]
    if isinstance(mod, str):
        pytest.skip(mod)
    return mod


def to_numpy(t) -> np.ndarray:
    """A NumPy copy of an ember Tensor (dask computed), for value comparisons."""
    v = t.raw if hasattr(t, "raw") else t
    if hasattr(v, "compute"):
        v = v.compute()
    return np.asarray(v)


def same_values(a, b) -> bool:
    """Elementwise identical: NaN equals NaN and the sign of zero counts."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "c":
        return same_values(a.real, b.real) and same_values(a.imag, b.imag)
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        return bool(
            np.array_equal(nan, np.isnan(b))
            and np.array_equal(a[~nan], b[~nan])
            and np.array_equal(np.signbit(a[~nan]), np.signbit(b[~nan]))
        )
    return bool(np.array_equal(a, b))
