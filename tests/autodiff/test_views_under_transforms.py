"""Views made before an in-place write see it inside transforms, as they do outside.

Inside ``grad`` an in-place write is a functional update; a view made before
it kept the old value, so ``value_and_grad(f)`` could return another value
than ``f`` itself (issue 40: 0.454 against 200.3). Now the write reaches the
base and every view (basic indexing), so the value is eager's on every
backend (Dask's views never see writes, eagerly or not) and the gradient
matches finite differences of that same eager program.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember

from _arrays import central_differences, check_value_and_gradient, to

BACKENDS = ("numpy", "array_api_strict", "dask")


def base_write_seen_by_view(xp, x):
    y = x * 1.0
    v = y[0:2]
    y[0] = 100.0 * x[2]
    return xp.sum(v * v)


def view_write_seen_by_base(xp, x):
    y = x * 2.0
    v = y[1:]
    v *= x[0]
    return xp.sum(y * y)


def sibling_views_and_nesting(xp, x):
    y = xp.reshape(x * 1.0, (2, 3))
    row = y[0, ...]
    col = y[:, 1]
    tail = row[1:]
    tail += col[1] * x[0]  # writes y[0, 1:] through a view of a view
    y[1, ...] = row * 0.5  # the base written: row, col and tail follow
    return xp.sum(col * col) + xp.sum(tail) * x[5] + xp.sum(y)


def augmented_slice(xp, x):
    y = x * 1.0
    first = y[:3]
    y[:3] += x[3:] * x[3:]  # y[:3] = y[:3] + ...: first sees the sum
    return xp.sum(first * x[:3])


def loop_over_rows(xp, x):
    y = xp.reshape(x * 1.0, (3, 2))
    rows = [y[i, ...] for i in range(3)]
    for i in range(1, 3):
        y[i, ...] = y[i - 1, ...] * y[i, ...]
    return sum(xp.sum(r) for r in rows)


PROGRAMS = [base_write_seen_by_view, view_write_seen_by_base, sibling_views_and_nesting,
            augmented_slice, loop_over_rows]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_value_is_eagers_and_gradient_matches_finite_differences(backend, prog):
    check_value_and_gradient(backend, prog, np.array([0.7, -1.3, 0.4, 1.1, -0.2, 0.9]))


def test_the_view_really_sees_the_write_on_numpy():
    """The eager fact this mirrors: on NumPy the view sees the base's write."""
    xp = ember.autodiff.namespace("numpy")
    x = to(xp, [1.0, 2.0, 3.0])
    eager = float(base_write_seen_by_view(xp, x))
    assert eager == 300.0 ** 2 + 4.0
    assert float(ember.value_and_grad(lambda t: base_write_seen_by_view(xp, t))(x)[0]) == eager


def test_integer_array_indexing_copies_under_transforms_too():
    xp = ember.autodiff.namespace("numpy")

    def f(x):
        y = x * 1.0
        c = y[xp.asarray([0, 1])]  # a copy, eagerly as well
        y[0] = 50.0
        return xp.sum(c)

    x = to(xp, [1.0, 2.0, 3.0])
    assert float(f(x)) == 3.0
    v, g = ember.value_and_grad(f)(x)
    assert float(v) == 3.0
    np.testing.assert_array_equal(g.raw, [1.0, 1.0, 0.0])


def test_write_to_a_view_whose_base_was_consumed():
    # the base is dead (consumed by cos): the write stays in the view, as eagerly, and the
    # gradient is that program's
    import ember.autodiff.numpy as xp

    def f(x):
        y = xp.cos(x)
        v = y[1:3]
        z = xp.cos(ember.consume(y))
        v += x[0]
        return xp.sum(v * v) + xp.sum(z)

    x0 = np.array([0.3, -0.7, 1.1, 0.5])
    value, g = ember.value_and_grad(f)(xp.asarray(x0))
    assert float(value) == pytest.approx(float(f(xp.asarray(x0))), rel=1e-14)
    fd = central_differences(lambda a: float(f(xp.asarray(a))), x0)
    np.testing.assert_allclose(g.raw, fd, rtol=1e-7, atol=1e-9)
