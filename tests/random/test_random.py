"""ember.random: explicit keys, splitting, reproducible draws on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember.autodiff.numpy as xp
import ember.random as er


def test_key_is_deterministic_and_distinct():
    assert er.key(0) == er.key(0)
    assert er.key(0) != er.key(1)
    assert len(set(er.split(er.key(0), 100))) == 100
    assert er.split(er.key(5), 3) == er.split(er.key(5), 3)
    assert er.fold_in(er.key(1), 2) != er.fold_in(er.key(1), 3)
    assert er.split(er.key(0), 2)[0] != er.key(0)


@given(st.integers(min_value=-(2**70), max_value=2**70))
@settings(max_examples=50, deadline=None)
def test_any_int_seed_draws(seed):
    a = er.normal(er.key(seed), (3,))
    np.testing.assert_array_equal(a, er.normal(er.key(seed), (3,)))


def test_errors_name_the_fix():
    with pytest.raises(TypeError, match=r"ember.random.key\(seed\)"):
        er.normal(0, (2,))
    with pytest.raises(TypeError, match="seed must be an int"):
        er.key(1.5)
    with pytest.raises(ValueError, match="positive int"):
        er.split(er.key(0), 0)


def test_distributions():
    k = er.key(3)
    n = er.normal(k, (20000,), mean=2.0, std=3.0)
    assert abs(float(np.mean(n)) - 2.0) < 0.1 and abs(float(np.std(n)) - 3.0) < 0.1
    u = er.uniform(k, (1000,), low=-2.0, high=-1.0)
    assert float(np.min(u)) >= -2.0 and float(np.max(u)) < -1.0
    b = er.bernoulli(k, (10000,), 0.3)
    assert b.dtype == np.bool_ and abs(float(np.mean(b)) - 0.3) < 0.02
    r = er.randint(k, (1000,), 3, 7)
    assert set(np.unique(r).tolist()) == {3, 4, 5, 6}
    assert sorted(er.permutation(k, 10).tolist()) == list(range(10))


def test_dtypes_and_wrapper_namespace():
    k = er.key(0)
    a = er.normal(k, (2, 2), xp.float32, xp=xp)
    assert type(a).__name__ == "Tensor" and a.dtype == xp.float32
    np.testing.assert_array_equal(a.raw, er.normal(k, (2, 2), "float32"))
    assert er.randint(k, (2,), 0, 5, "int32").dtype == np.int32


def test_dask_and_strict_backends_reproducible():
    da = pytest.importorskip("dask.array")
    k = er.key(4)
    d1, d2 = er.normal(k, (4, 3), xp=da), er.normal(k, (4, 3), xp=da)
    assert type(d1).__module__.startswith("dask")
    np.testing.assert_array_equal(d1.compute(), d2.compute())
    strict = pytest.importorskip("array_api_strict")
    s = er.uniform(k, (3,), xp=strict)
    assert type(s).__module__.startswith("array_api_strict")
