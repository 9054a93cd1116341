"""ember.backend.gemm: ``c += alpha * (a @ b)`` in c's buffer by NumPy's own BLAS, for every
layout it takes, and False (c untouched) for every case it does not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember.backend as eb

GEMM = eb.gemm(eb.get("numpy"))
pytestmark = pytest.mark.skipif(GEMM is None, reason="threadpoolctl is not installed (pip install ember[fuse])")
SETTINGS = dict(deadline=None, max_examples=40, suppress_health_check=list(HealthCheck))
ORDERS = st.sampled_from(["C", "F"])


def _array(rng, shape, dtype, order):
    return np.asarray(rng.standard_normal(shape), dtype=dtype, order=order)


@settings(**SETTINGS)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), ORDERS, ORDERS, ORDERS,
       st.sampled_from(["float32", "float64"]), st.floats(-3, 3, allow_nan=False), st.integers(0, 2**32 - 1))
def test_accumulate_equals_numpy_for_every_contiguous_layout(m, n, k, oc, oa, ob, dtype, alpha, seed):
    rng = np.random.default_rng(seed)
    a, b, c = _array(rng, (m, k), dtype, oa), _array(rng, (k, n), dtype, ob), _array(rng, (m, n), dtype, oc)
    want = c + np.asarray(alpha, dtype) * (a @ b)
    at = c.__array_interface__["data"][0]
    assert GEMM.accumulate(c, a, b, alpha)
    assert c.__array_interface__["data"][0] == at and c.flags[f"{oc}_CONTIGUOUS"]
    tol = 1e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * (1 + k * abs(alpha)))


def _refused(c, a, b, alpha=1.0):
    before = c.copy()
    assert GEMM.accumulate(c, a, b, alpha) is False
    np.testing.assert_array_equal(c, before)


def test_what_it_does_not_take_leaves_c_as_it_was():
    rng = np.random.default_rng(0)
    a, b, c = _array(rng, (4, 3), "float64", "C"), _array(rng, (3, 5), "float64", "C"), _array(rng, (4, 5), "float64", "C")
    _refused(c.astype(np.float16), a.astype(np.float16), b.astype(np.float16))  # (a dtype it lacks)
    _refused(c.astype(np.complex128), a.astype(np.complex128), b.astype(np.complex128))
    _refused(c, a.astype(np.float32), b)  # (mixed dtypes: the product promotes)
    _refused(c, a, b[:, :4])  # (shapes that do not match)
    _refused(c[:, 0], a, b[:, :1])  # (not 2-D)
    big = _array(rng, (8, 10), "float64", "C")
    _refused(big[::2, ::2], a, b)  # (c strided)
    _refused(c, big[::2, :3], b)  # (an operand strided)
    _refused(np.zeros((4, 0)), np.zeros((4, 3)), np.zeros((3, 0)))  # (an empty product)
    _refused(np.ones((2, 2)), np.zeros((2, 0)), np.zeros((0, 2)))
    ro = c.copy()
    ro.flags.writeable = False
    _refused(ro, a, b)
    sq = _array(rng, (4, 4), "float64", "C")
    _refused(sq, sq, sq)  # (c is an operand)
    _refused(sq, sq.T, np.eye(4))  # (c seen through a view)


def test_only_numpy_arrays_have_one():
    assert eb.gemm(eb.get("array_api_strict")) is None
    assert GEMM.name == "openblas" and GEMM.dtypes == {"float32", "float64"}
    assert GEMM.min_elements > 0 and GEMM.max_inner > 0
    assert eb.gemm(eb.get("numpy")) is GEMM  # (probed once)


def test_no_gemm_without_threadpoolctl_or_with_a_blas_not_numpys(monkeypatch):
    import sys

    import threadpoolctl

    from ember.backend import _gemm

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # (import fails)
    assert _gemm._probe_numpy(np) is None
    monkeypatch.setitem(sys.modules, "threadpoolctl", threadpoolctl)
    # a BLAS loaded from elsewhere (SciPy's, a system one): its own thread pool, not NumPy's
    info = [dict(i, filepath="/elsewhere/" + i["filepath"].rsplit("/", 1)[-1]) for i in threadpoolctl.threadpool_info()]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: info)
    assert _gemm._probe_numpy(np) is None
