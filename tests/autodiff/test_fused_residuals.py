"""The cross-entropy's residual forward (written out for speed) computes bit for bit what the
rules' helpers compose: the loss of ``_ce_loss`` and the gradient of ``shifted_exp`` and
``ce_dz``, which the VJP recomputes where no residual was kept (checkpointing)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember.autodiff import fused, namespace
from ember.autodiff._rules import elementwise as ew


def _rows(z, t, axis):
    """The rows a mean divides by (None: no rows)."""
    return fused._mean_rows(np.broadcast_shapes(z.shape, t.shape), axis)


def _composed(xp, z, t, axis, reduction):
    s, e, total = ew.shifted_exp(xp, z, axis)
    dz = ew.ce_dz(xp, t, e, total, axis)
    loss = fused._ce_loss(xp, t * (s - xp.log(total)), axis, reduction)
    n = _rows(z, t, axis) if reduction == "mean" else None
    return loss, (dz / n if n else dz)


@st.composite
def _problem(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    z = draw(hnp.arrays(dtype, shape, elements=st.floats(-30, 30, width=32)))
    tshape = draw(st.sampled_from([shape, shape[-1:]]))  # (targets may broadcast)
    tdtype = draw(st.sampled_from([dtype, np.float64]))
    t = draw(hnp.arrays(tdtype, tshape, elements=st.floats(0, 1, width=32)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return z, t, axis, draw(st.sampled_from(["none", "sum", "mean"]))


@pytest.mark.parametrize("lib", ["numpy", "array_api_strict"])
@given(problem=_problem())
@settings(max_examples=60, deadline=None)
def test_cross_entropy_residuals_equal_the_composed_rules(lib, problem):
    z, t, axis, reduction = problem
    xp = namespace(lib)._dispatch.raw_ns
    z, t = xp.asarray(z), xp.asarray(t)
    results = []
    for f in (fused._ce_forward_and_dz, _composed):
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")  # (the mean of no rows)
                results.append(f(xp, z, t, axis, reduction))
        except ValueError as e:  # (the maximum of an empty row: both raise)
            results.append(type(e))
    got, want = results
    if isinstance(want, type):
        assert got is want
        return
    loss, kept = got
    (key, dz), = kept.items()
    per_row = reduction == "none" or (reduction == "mean" and not _rows(z, t, axis))
    assert key == ("dz" if per_row else "dz_unit")
    for a, b in ((loss, want[0]), (dz, want[1])):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
