"""Symbolic zeros: a cotangent known to be exactly zero (what ``x[mask] = v`` overwrote, the
side ``where`` did not take) is not propagated, so a NaN or inf that the forward pass
computed and then discarded stays out of the gradient; against finite differences in
float64 on generated shapes, on numpy, array_api_strict and dask."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
from _arrays import as_numpy, central_differences, ns, to

BACKENDS = ("numpy", "array_api_strict", "dask")

_shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4)
_vals = st.floats(0.5, 3.0, allow_nan=False, width=64)


@st.composite
def _case(draw):
    shape = draw(_shapes)
    a = draw(hnp.arrays(np.float64, shape, elements=_vals))
    b = draw(hnp.arrays(np.float64, shape, elements=_vals))
    zero = draw(hnp.arrays(np.bool_, shape))
    b = np.where(zero, 0.0, b)  # a / b is inf or NaN exactly where b is 0
    w = draw(hnp.arrays(np.float64, shape, elements=_vals))
    return a, b, w


def _masked(xp, a, b, w, how):
    s = a / b
    if how == "setitem":
        s[b == 0] = 5.0
    elif how == "iadd":  # an in-place update of the overwritten elements only
        s[b == 0] = 0.0
        s[b == 0] += 5.0
    else:
        s = xp.where(b == 0, 5.0, s)
    return xp.sum(w * s * s)


def _reference(a, b, w):
    with np.errstate(all="ignore"):
        s = np.where(b == 0, 5.0, a / b)
    return float(np.sum(w * s * s))


@pytest.mark.parametrize("how", ["setitem", "iadd", "where"])
@pytest.mark.parametrize("backend", BACKENDS)
@given(case=_case())
@settings(max_examples=20, deadline=None)
def test_overwritten_nan_gives_finite_gradient_equal_to_finite_differences(backend, how, case):
    if backend == "dask" and how == "iadd":
        pytest.skip("Dask cannot write x[mask] + v (a value of unknown size) back into x[mask]: "
                    "a Dask limit; numpy and array_api_strict run the same rules")
    xp = ns(backend)
    a, b, w = case
    tw = to(xp, w)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the forward's own 1/0
        ga, gb = (as_numpy(g) for g in ember.grad(lambda x, y: _masked(xp, x, y, tw, how),
                                             argnums=(0, 1))(to(xp, a), to(xp, b)))
        for ck in ("balanced",):  # recomputation keeps the zeros
            ga2, gb2 = (as_numpy(g) for g in ember.grad(lambda x, y: _masked(xp, x, y, tw, how),
                                                   argnums=(0, 1), checkpointing=ck)(
                to(xp, a), to(xp, b)))
            np.testing.assert_array_equal(ga2, ga)
            np.testing.assert_array_equal(gb2, gb)
    assert np.all(np.isfinite(ga)) and np.all(np.isfinite(gb))
    np.testing.assert_allclose(ga, central_differences(lambda x: _reference(x, b, w), a), rtol=1e-5, atol=1e-6)
    # b: away from its zeros a small step keeps the mask, so differences are the truth there
    live = b != 0
    want_b = central_differences(lambda y: _reference(a, np.where(live, y, 0.0), w), b)
    np.testing.assert_allclose(gb[live], want_b[live], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(gb[~live], 0.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_order_through_an_overwritten_nan_is_finite(backend):
    xp = ns(backend)
    a = np.array([1.0, 2.0, 3.0])
    b = to(xp, np.array([2.0, 0.0, 4.0]))
    w = to(xp, np.ones(3))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        h = as_numpy(ember.hessian(lambda x: _masked(xp, x, b, w, "setitem"))(to(xp, a)))
    np.testing.assert_allclose(h, np.diag([2 / 4, 0.0, 2 / 16]))


@pytest.mark.parametrize("n", [1, 3])
def test_known_zeros_do_not_leak_through_a_non_elementwise_op(n):
    """A square matmul's output zeros say nothing about its input's elements."""
    xp = ns("numpy")
    rng = np.random.default_rng(n)
    x, m = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    mask = np.eye(n, dtype=bool)

    def f(t):
        s = t @ to(xp, m)
        s[xp.asarray(mask)] = 0.0
        return xp.sum(s * s)

    def ref(t):
        s = t @ m
        s[mask] = 0.0
        return float(np.sum(s * s))

    np.testing.assert_allclose(as_numpy(ember.grad(f)(to(xp, x))), central_differences(ref, x), rtol=1e-5, atol=1e-6)
