"""Errors that name their real cause: a negative size, an empty reduction, an axis out of
range, a Python int that does not fit the array's dtype (issue 40, "Errors and exposure").

Each is an ember error that still derives from the builtin the backend raised,
so array-API callers catching ValueError / IndexError / OverflowError keep
working, and none advises "make the shapes broadcast-compatible".
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn as nn
from ember.autodiff._error_causes import (
    AXIS_OUT_OF_RANGE,
    EMPTY_NORMALIZATION,
    EMPTY_REDUCTION,
    INT_OUT_OF_RANGE,
    NEGATIVE_SIZE,
)
from _gradcheck import namespace, to_backend

EAGER = ("numpy", "array_api_strict")
ALL = ("numpy", "array_api_strict", "dask")
BROADCAST_ADVICE = "broadcast-compatible"


def _head(template: str) -> str:
    """The fixed text of an error template after its first field (what every message shows)."""
    return template.split("}", 1)[1].split("{", 1)[0]


@pytest.mark.parametrize("lib", ALL)
@pytest.mark.parametrize("make", [
    lambda xp: xp.ones(-1),
    lambda xp: xp.zeros((2, -3)),
    _FULL := lambda xp: xp.full((-1,), 1.0),
])
def test_negative_size_says_so(lib, make):
    xp = namespace(lib)
    if lib == "dask" and make is _FULL:
        pytest.skip("dask builds full((-1,), v) lazily: it fails only when computed, outside ember")
    with pytest.raises(ember.ShapeError) as info:
        make(xp)
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert _head(NEGATIVE_SIZE) in msg and "-" in msg and "Fix: pass sizes >= 0" in msg
    assert BROADCAST_ADVICE not in msg


@pytest.mark.parametrize("lib", EAGER)
@pytest.mark.parametrize("op, what", [("max", "maximum"), ("min", "minimum")])
def test_empty_reduction_says_so(lib, op, what):
    xp = namespace(lib)
    x = to_backend(xp, np.zeros((3, 0)))
    with pytest.raises(ember.ShapeError) as info:
        getattr(xp, op)(x, axis=1)
    msg = str(info.value)
    assert msg.startswith(f"{op}: ") and "(3, 0)" in msg and f"a {what} of no elements" in msg
    assert _head(EMPTY_REDUCTION) in msg and BROADCAST_ADVICE not in msg
    # under a transform too (the recording path)
    with pytest.raises(ember.ShapeError, match="no elements"):
        ember.grad(lambda t: xp.sum(getattr(xp, op)(t)))(x)


@pytest.mark.parametrize("lib", EAGER)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis_says_so(lib, fn):
    xp = namespace(lib)
    x = to_backend(xp, np.zeros((2, 0)))
    for call in (lambda: getattr(nn, fn)(x, axis=-1),
                 lambda: ember.grad(lambda t: xp.sum(getattr(nn, fn)(t, axis=-1)))(x)):
        with pytest.raises(ember.ShapeError) as info:
            call()
        msg = str(info.value)
        assert msg.startswith(f"nn.{fn}: ") and "(2, 0)" in msg, msg
        assert _head(EMPTY_NORMALIZATION) in msg and BROADCAST_ADVICE not in msg


@pytest.mark.parametrize("lib", ALL)
@pytest.mark.parametrize("call, axis", [
    (lambda xp, x: xp.sum(x, axis=5), 5),
    (lambda xp, x: xp.mean(x, axis=-3), -3),
    (lambda xp, x: xp.max(x, axis=(0, 2)), 2),
])
def test_axis_out_of_range(lib, call, axis):
    xp = namespace(lib)
    x = to_backend(xp, np.ones((2, 3)))
    with pytest.raises(ember.AxisError) as info:
        call(xp, x)
    err = info.value
    # what numpy's AxisError is, so either except clause keeps catching it
    assert isinstance(err, ember.ShapeError) and isinstance(err, ValueError) and isinstance(err, IndexError)
    msg = str(err)
    assert f"axis {axis} is out of bounds" in msg and "(2, 3)" in msg and "[-2, 1]" in msg
    assert AXIS_OUT_OF_RANGE.split("{op}: ")[1].split("{")[0] in msg


def test_axis_out_of_range_under_grad():
    xp = namespace("numpy")
    x = to_backend(xp, np.ones((2, 3)))
    with pytest.raises(ember.AxisError, match=r"sum: axis 5 is out of bounds"):
        ember.grad(lambda t: xp.sum(xp.sum(t, axis=5)))(x)


def test_an_index_out_of_bounds_stays_an_index_error():
    """Indexing errors are not axis errors (the array API expects IndexError)."""
    xp = namespace("numpy")
    x = to_backend(xp, np.ones(3))
    with pytest.raises(IndexError) as info:
        x[5]
    assert not isinstance(info.value, ember.AxisError)


@pytest.mark.parametrize("lib", ALL)
@pytest.mark.parametrize("dtype, value", [("int64", 2 ** 70), ("int64", -(2 ** 64)), ("int8", 300)])
def test_python_int_out_of_range(lib, dtype, value):
    xp = namespace(lib)
    x = to_backend(xp, np.zeros(3, dtype=dtype))
    with pytest.raises(ember.OutOfRangeError) as info:
        x + value
    err = info.value
    assert isinstance(err, OverflowError)
    msg = str(err)
    assert msg.startswith("add: ") and str(value) in msg and dtype in msg and "(3,)" in msg
    assert _head(INT_OUT_OF_RANGE) in msg and "xp.astype" in msg
