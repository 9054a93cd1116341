"""``x op= y`` whose promoted dtype is not x's: one behaviour, eager and traced.

The array API standard allows no in-place operation that would change the
target's dtype. Traced, ember raised DTypeError; eager NumPy cast float64 back
to float32 silently. Both raise now, on every backend, with the same text;
promotions that keep the target's dtype (f64 += f32, i64 += i8, f32 += 0.5)
work as before.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember

BACKENDS = ("numpy", "array_api_strict", "dask")
OPS = ["+=", "-=", "*=", "/="]


def _apply(x, op, y):
    if op == "+=":
        x += y
    elif op == "-=":
        x -= y
    elif op == "*=":
        x *= y
    else:
        x /= y
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", OPS)
def test_f32_op_f64_raises_eager_and_traced_alike(backend, op):
    xp = ember.autodiff.namespace(backend)
    with pytest.raises(ember.DTypeError, match="differs from the target dtype") as eager:
        _apply(xp.ones(2, dtype=xp.float32), op, xp.ones(2, dtype=xp.float64))

    def f(t):
        u = xp.astype(t, xp.float32)
        _apply(u, op, t)
        return xp.sum(u)

    with pytest.raises(ember.DTypeError, match="differs from the target dtype") as traced:
        ember.grad(f)(xp.ones(2, dtype=xp.float64))
    assert str(eager.value) == str(traced.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_promotions_that_keep_the_target_dtype_still_work(backend):
    xp = ember.autodiff.namespace(backend)
    x = xp.ones(2, dtype=xp.float64)
    x += xp.ones(2, dtype=xp.float32)
    assert x.dtype == xp.float64
    i = xp.ones(2, dtype=xp.int64)
    i += xp.ones(2, dtype=xp.int8)
    assert i.dtype == xp.int64
    s = xp.ones(2, dtype=xp.float32)
    s += 0.5
    assert s.dtype == xp.float32
    np.testing.assert_array_equal(np.asarray(ember.compute(s).raw), [1.5, 1.5])


def test_the_target_is_unchanged_after_the_error():
    xp = ember.autodiff.namespace("numpy")
    x = xp.ones(2, dtype=xp.float32)
    with pytest.raises(ember.DTypeError):
        x += xp.asarray([2.0, 3.0], dtype=xp.float64)
    np.testing.assert_array_equal(x.raw, [1.0, 1.0])
