"""asarray of text, bytes, datetimes: a DTypeError naming the fix, on every backend.

The array API has numeric and bool dtypes only; NumPy and Dask made a
``<U21`` array of ``xp.asarray(["a", 1])`` without a word (every later op
then failing far from the cause) and array-api-strict raised its own bare
TypeError. Like object arrays and sparse matrices (test_asarray_objects.py),
they are refused where they enter.
"""

from __future__ import annotations

import numpy as np
import pytest
from _arrays import ns

import ember

VALUES = {
    "text list": (["a", 1], "text"),
    "text array": (np.array(["x", "y"]), "text"),
    "bytes": ([b"ab"], "bytes"),
    "datetimes": (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetimes"),
    "time deltas": (np.array([1], dtype="timedelta64[s]"), "time deltas"),
}


@pytest.mark.parametrize("backend", ["numpy", "array_api_strict", "dask"])
@pytest.mark.parametrize("name", sorted(VALUES))
def test_refused_with_the_fix(backend, name):
    xp = ns(backend)
    value, what = VALUES[name]
    with pytest.raises(ember.DTypeError) as e:
        xp.asarray(value)
    msg = str(e.value)
    assert msg.startswith("asarray: ") and f"({what})" in msg and "Fix: convert the values to numbers" in msg
    assert isinstance(e.value, TypeError)


@pytest.mark.parametrize("backend", ["numpy", "array_api_strict", "dask"])
def test_numbers_and_bools_still_convert(backend):
    xp = ns(backend)
    assert xp.asarray([1.0, 2.0]).dtype == xp.float64
    assert xp.asarray([True]).dtype == xp.bool
    assert xp.asarray(np.arange(3)).dtype == xp.int64
