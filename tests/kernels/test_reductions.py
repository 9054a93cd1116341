"""kernels.sum_last / mean_last / max_last / sum_leading: the namespace's sum, mean and max, by
a product with ones or over a transposed copy's columns where that applies (C-contiguous
float32/float64 backend arrays, the last axis alone or the leading axes)."""

from __future__ import annotations

import warnings
from unittest import mock

import array_api_compat.numpy as cnp
import array_api_strict
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember.kernels import max_last, mean_last, reductions, sum_last, sum_leading

finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)


@settings(deadline=None, max_examples=60)
@given(x=hnp.arrays(st.sampled_from([np.float32, np.float64]), hnp.array_shapes(min_dims=1, max_dims=4, min_side=0),
                    elements=finite),
       keepdims=st.booleans(), as_tuple=st.booleans())
def test_equal_to_sum_and_mean_along_the_last_axis(x, keepdims, as_tuple):
    axis = (x.ndim - 1,) if as_tuple else -1
    tol = dict(rtol=1e-5, atol=1e-2) if x.dtype == np.float32 else dict(rtol=1e-12, atol=1e-9)
    for ours, theirs in ((sum_last, np.sum), (mean_last, np.mean)):
        with warnings.catch_warnings(), mock.patch.object(reductions, "MIN_ROWS", 1):
            warnings.simplefilter("ignore", RuntimeWarning)  # (the mean of an empty row: NaN)
            got, want = ours(cnp, x, axis, keepdims), theirs(x, axis=axis, keepdims=keepdims)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **tol)


def test_the_rows_of_a_softmax_over_attention_scores_are_one_product():
    x = np.random.default_rng(0).standard_normal((2, 4, 64, 64)).astype(np.float32)
    with mock.patch.object(cnp, "sum", side_effect=AssertionError("the reduction ran")):
        got = sum_last(cnp, x, -1, keepdims=True)
    np.testing.assert_allclose(got, x.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_inf_and_nan_propagate_as_in_sum():
    x = np.tile(np.array([[1.0, np.inf, 2.0], [np.nan, 0.0, 1.0], [np.inf, -np.inf, 0.0]]), (200, 1))
    assert x.shape[0] >= reductions.MIN_ROWS
    np.testing.assert_array_equal(sum_last(cnp, x, -1), [np.inf, np.nan, np.nan] * 200)
    np.testing.assert_array_equal(mean_last(cnp, x, -1), [np.inf, np.nan, np.nan] * 200)


@pytest.mark.parametrize("case", ["other axis", "two axes", "not contiguous", "integers", "strict", "few rows"])
def test_everything_else_is_the_namespaces_own_reduction(case):
    # bit for bit: no product where the conditions do not hold
    x = np.random.default_rng(0).standard_normal((30, 40, 5))
    ns, axis = cnp, -1
    if case == "other axis":
        axis = 1
    elif case == "two axes":
        axis = (1, 2)
    elif case == "not contiguous":
        x = x.transpose(0, 2, 1)
    elif case == "integers":
        x = np.arange(6000).reshape(30, 40, 5)
    elif case == "few rows":  # (of more than SHORT elements)
        x = np.random.default_rng(0).standard_normal((3, 7, reductions.SHORT + 1))
    else:
        ns, x = array_api_strict, array_api_strict.asarray(x)
    for ours, theirs in ((sum_last, ns.sum), (mean_last, ns.mean), (max_last, ns.max)):
        if case == "integers" and ours is mean_last:
            continue
        np.testing.assert_array_equal(np.asarray(ours(ns, x, axis, True)),
                                      np.asarray(theirs(x, axis=axis, keepdims=True)))


@settings(deadline=None, max_examples=60)
@given(x=hnp.arrays(st.sampled_from([np.float32, np.float64]),
                    hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=reductions.SHORT + 2),
                    elements=st.one_of(finite, st.sampled_from([np.inf, -np.inf, np.nan, -0.0]))),
       keepdims=st.booleans())
def test_short_rows_reduce_as_columns_to_the_same_values(x, keepdims):
    # rows of at most SHORT elements: the max exactly, the sum to rounding (another order)
    with warnings.catch_warnings(), mock.patch.object(reductions, "COLUMN_ROWS", 1):
        warnings.simplefilter("ignore", RuntimeWarning)
        if x.size:
            want = np.max(x, axis=-1, keepdims=keepdims) if x.shape[-1] else None
            if want is not None:
                got = max_last(cnp, x, -1, keepdims)
                assert got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
        got, want = sum_last(cnp, x, -1, keepdims), np.sum(x, axis=-1, keepdims=keepdims)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = dict(rtol=1e-5, atol=1e-2) if x.dtype == np.float32 else dict(rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got, want, **tol)


def test_the_max_and_sum_of_a_classifiers_logits_run_along_the_columns():
    # 300 rows of 10: one reduction over the first axis of the (10, 300) copy, not 300 short ones
    x = np.random.default_rng(0).standard_normal((300, 10)).astype(np.float32)
    for ours, name, theirs in ((max_last, "max", np.max), (sum_last, "sum", np.sum)):
        real = getattr(cnp, name)
        axes = []

        def spy(a, axis=None, keepdims=False, real=real, axes=axes):
            axes.append((a.shape, axis))
            return real(a, axis=axis, keepdims=keepdims)

        with mock.patch.object(cnp, name, side_effect=spy):
            got = ours(cnp, x, -1, keepdims=True)
        assert axes == [((10, 300), 0)]
        np.testing.assert_allclose(got, theirs(x, axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)


@settings(deadline=None, max_examples=80)
@given(x=hnp.arrays(st.sampled_from([np.float32, np.float64]), hnp.array_shapes(min_dims=1, max_dims=4, min_side=0),
                    elements=st.one_of(finite, st.sampled_from([np.inf, -np.inf, np.nan]))),
       data=st.data())
def test_sum_leading_equals_the_sum_over_the_leading_axes(x, data):
    lead = data.draw(st.integers(1, x.ndim), label="lead")
    axis = 0 if lead == 1 else tuple(range(lead))
    with mock.patch.object(reductions, "LEADING_ROWS", 2):
        got = sum_leading(cnp, x, lead)
    want = np.sum(x, axis=axis)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = dict(rtol=1e-5, atol=1e-2) if x.dtype == np.float32 else dict(rtol=1e-12, atol=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (inf - inf in the comparison)
        np.testing.assert_allclose(got, want, **tol)


def test_sum_leading_is_one_product_for_a_bias_gradient():
    x = np.random.default_rng(0).standard_normal((16, 64, 128)).astype(np.float32)
    with mock.patch.object(cnp, "sum", side_effect=AssertionError("the reduction ran")):
        got = sum_leading(cnp, x, 2)
    np.testing.assert_allclose(got, x.sum(axis=(0, 1)), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", ["every axis", "not contiguous", "integers", "strict", "few rows"])
def test_sum_leading_elsewhere_is_the_namespaces_sum(case):
    x, ns, lead = np.random.default_rng(0).standard_normal((30, 40, 5)), cnp, 2
    if case == "every axis":
        lead = 3
    elif case == "not contiguous":
        x = x.transpose(0, 2, 1)
    elif case == "integers":
        x = np.arange(6000).reshape(30, 40, 5)
    elif case == "few rows":
        lead = 1
        assert x.shape[0] < reductions.LEADING_ROWS
    else:
        ns, x = array_api_strict, array_api_strict.asarray(x)
    axis = 0 if lead == 1 else tuple(range(lead))
    np.testing.assert_array_equal(np.asarray(sum_leading(ns, x, lead)), np.asarray(ns.sum(x, axis=axis)))


def test_a_tensor_takes_the_method_of_the_array_under_it():
    # rules run on Tensors where checkpointing or a higher order records the backward pass:
    # the same method as on the raw array, so the same bits
    import ember.autodiff.numpy as xp

    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 24))
    t = xp.asarray(x)
    np.testing.assert_array_equal(sum_leading(xp, t, 1).raw, sum_leading(cnp, x, 1))
    np.testing.assert_array_equal(sum_last(xp, t, -1).raw, sum_last(cnp, x, -1))
    np.testing.assert_array_equal(mean_last(xp, t, -1).raw, mean_last(cnp, x, -1))
    assert not np.array_equal(sum_leading(cnp, x, 1), np.sum(x, axis=0))  # (else this proves nothing)
    v = xp.asarray(np.asfortranarray(x))  # the array under decides: not C-contiguous, the sum
    assert not v.raw.flags.c_contiguous
    np.testing.assert_array_equal(sum_leading(xp, v, 1).raw, np.sum(v.raw, axis=0))
