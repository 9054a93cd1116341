"""Views made by functions (reshape, permute_dims, .T, .mT, expand_dims, squeeze, flip,
broadcast_to) see in-place writes inside transforms, as NumPy's views do outside them.

``test_views_under_transforms.py`` covers basic indexing; issue 40 asks that no
transform return another value than the eager program, and NumPy makes views
with these functions too (``reshape`` only when the layout allows one). Each
program below runs eagerly and under ``value_and_grad`` on hypothesis shapes,
0-d and empty ones included: the values must be eager's and the gradient
must match central differences of the eager program, in float64, on NumPy,
array-api-strict and Dask (whose arrays never alias: no view sees a write,
eagerly or not).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import ember

from _arrays import as_numpy, central_differences, check_value_and_gradient, ns, to

BACKENDS = ("numpy", "array_api_strict", "dask")
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _rev(n):
    return tuple(range(n))[::-1]


def reshape_both_ways(xp, x):
    y = x * 1.0
    r = xp.reshape(y, (-1,))
    y[...] = y * y * 3.0  # the base written: r sees it
    r += xp.reshape(x, (-1,))  # the view written: y sees it
    return xp.sum(y * x) + xp.sum(r * r)


def permute_both_ways(xp, x):
    y = x * 1.0
    p = xp.permute_dims(y, _rev(x.ndim))
    p *= xp.permute_dims(x, _rev(x.ndim)) * 2.0
    y += 1.0
    return xp.sum(p * xp.permute_dims(x, _rev(x.ndim))) + xp.sum(y * y)


def transpose_attribute(xp, x):
    y = x * 1.0
    t = y.T
    y[...] = y * x
    t += 0.5 * x.T
    return xp.sum(t * t * x.T) + xp.sum(y)


def expand_squeeze_flip(xp, x):
    y = x * 1.0
    e = xp.expand_dims(y, axis=0)
    s = xp.squeeze(e, axis=0)
    f = xp.flip(s) if x.ndim else s
    f[...] = f * (xp.flip(x) if x.ndim else x)  # through three levels of views
    y -= 0.25 * x * x
    return xp.sum(e * e) + xp.sum(s * x) + xp.sum(f)


def broadcast_sees_the_base(xp, x):
    y = x * 1.0
    b = xp.broadcast_to(y, (2,) + tuple(x.shape))
    y *= x
    return xp.sum(b * b)


def chain_reshape_of_transpose(xp, x):
    y = x * 1.0
    r = xp.reshape(y.T, (-1,))  # a copy on NumPy when y.T is not contiguous: as eagerly
    q = xp.permute_dims(xp.reshape(r, tuple(x.shape)[::-1]), _rev(x.ndim))
    y[...] = y * x
    q += x
    return xp.sum(r * r) + xp.sum(q * y) + xp.sum(y)


PROGRAMS = [reshape_both_ways, permute_both_ways, transpose_attribute, expand_squeeze_flip,
            broadcast_sees_the_base, chain_reshape_of_transpose]


@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_value_is_eagers_and_gradient_matches_finite_differences(backend, prog):
    @settings(max_examples=4 if backend == "dask" else 25, **SETTINGS)
    @given(shape=array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), seed=st.integers(0, 2**16))
    def run(shape, seed):
        check_value_and_gradient(backend, prog, np.random.default_rng(seed).standard_normal(shape))

    run()


@pytest.mark.parametrize("backend", ("numpy", "array_api_strict"))
def test_matrix_transpose_view(backend):
    """``.mT`` (2-d and more) is a view too; the classic case: write the base, read the view."""
    xp = ns(backend)

    def f(x):
        y = x * 1.0
        m = y.mT
        y[..., 0, :] = 10.0 * x[..., 1, :]
        m *= x.mT
        return xp.sum(m * m) + xp.sum(y)

    x0 = np.random.default_rng(1).standard_normal((2, 3, 2))
    check_value_and_gradient(backend, lambda _xp, x: f(x), x0)


def test_the_issue_program_value_is_eagers():
    """A transpose and a reshape made before the writes: eager's value, not the stale one."""
    xp = ns("numpy")

    def f(x):
        y = x * 1.0
        r = xp.reshape(y, (2, 3))
        p = xp.permute_dims(r, (1, 0))
        t = r.T
        y[0] = 100.0 * x[2]
        p[1, 1] = 7.0 * x[1]  # r[1, 1], which is y[4]
        return xp.sum(r * r) + xp.sum(t) + xp.sum(y)

    x = to(xp, np.arange(6.0) + 1)
    eager = float(f(x))
    assert eager == 90919.0
    value, g = ember.value_and_grad(f)(x)
    assert float(value) == eager
    np.testing.assert_allclose(as_numpy(g), central_differences(lambda a: float(f(to(xp, a))),
                                                                 np.arange(6.0) + 1), rtol=1e-5, atol=1e-4)


def test_writing_through_a_broadcast_view_raises_as_eagerly():
    xp = ns("numpy")

    def f(x):
        y = x * 1.0
        b = xp.broadcast_to(y, (2, 3))
        b[0] = 1.0
        return xp.sum(y)

    x = to(xp, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"^__setitem__: .*shape \(2, 3\), float64\) is read-only.*Fix") as e:
        f(x)  # eagerly: NumPy's bare "assignment destination is read-only", told as ember's
    assert isinstance(e.value, ember.EmberError)
    with pytest.raises(ValueError, match=r"__setitem__.*broadcast_to.*shape \(3,\).*Fix") as e:
        ember.grad(f)(x)
    assert isinstance(e.value, ember.EmberError)

    def g(x):
        b = xp.broadcast_to(x * 1.0, (2, 3))
        b += 1.0
        return xp.sum(b)

    with pytest.raises(ValueError, match=r"^__iadd__: .*read-only.*Fix"):
        g(x)
    with pytest.raises(ValueError, match=r"^__iadd__: .*read-only.*Fix"):
        ember.grad(g)(x)


def test_a_reshape_copy_is_not_a_view():
    """NumPy copies a reshape of a transposed matrix; a write to the matrix does not reach it."""
    xp = ns("numpy")

    def f(x):
        y = x * 1.0
        r = xp.reshape(y.T, (-1,))
        y[0, 0] = 50.0
        return xp.sum(r)

    x = to(xp, np.arange(6.0).reshape(2, 3))
    assert float(f(x)) == 15.0
    value, g = ember.value_and_grad(f)(x)
    assert float(value) == 15.0
    np.testing.assert_array_equal(as_numpy(g), np.ones((2, 3)))


def test_dask_views_never_see_writes_eagerly_either():
    """Dask's reshape to the same shape returns its input object: an eager write into one
    handle reached the other (Dask's setitem mutates the object), unlike under grad."""
    xp = ns("dask")
    y = xp.ones(3)
    r = xp.reshape(y, (3,))
    y[0] = 7.0
    y += 1.0
    np.testing.assert_array_equal(as_numpy(r), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(as_numpy(y), [8.0, 2.0, 2.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_into_an_empty_array_writes_nothing(backend):
    """NumPy writes nothing into an empty array; Dask refused even ``x[...] = x``."""
    xp = ns(backend)

    def f(x):
        y = x * 1.0
        y[...] = y * 2.0
        y[0:0, ...] = 1.0
        return xp.sum(y)

    x = to(xp, np.zeros((0, 2)))
    assert float(as_numpy(f(x))) == 0.0
    value, g = ember.value_and_grad(f)(x)
    assert float(as_numpy(value)) == 0.0 and as_numpy(g).shape == (0, 2)
    with pytest.raises(ValueError):  # a value that does not broadcast still fails
        y = x * 1.0
        y[...] = to(xp, np.zeros((3,)))


@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_jvp_and_hessian_see_the_writes_too(prog):
    """Forward mode and second order follow the same recorded updates."""
    xp = ns("numpy")
    x0 = np.random.default_rng(3).standard_normal((2, 3))
    v = np.random.default_rng(4).standard_normal((2, 3))

    def f(x):
        return prog(xp, x)

    def eager(a):
        return float(as_numpy(f(to(xp, a))))

    out, tan = ember.jvp(f, (to(xp, x0),), (to(xp, v),))
    assert float(as_numpy(out)) == pytest.approx(eager(x0), rel=1e-12, abs=1e-12)
    assert float(as_numpy(tan)) == pytest.approx((eager(x0 + 1e-6 * v) - eager(x0 - 1e-6 * v)) / 2e-6,
                                                 rel=1e-5, abs=1e-6)
    hv = as_numpy(ember.hvp(f, (to(xp, x0),), (to(xp, v),))[0])

    def g(a):
        return as_numpy(ember.grad(f)(to(xp, a)))

    np.testing.assert_allclose(hv, (g(x0 + 1e-5 * v) - g(x0 - 1e-5 * v)) / 2e-5, rtol=1e-4, atol=1e-4)


def _through_a_slice(xp, x):
    v = x[0:2]
    v[0] = 5.0
    return xp.sum(x * x)


def _through_a_reshape(xp, x):
    v = xp.reshape(x, (-1,))
    v[0] = 5.0
    w = x[1:]  # a view of x made before x's own write
    x[2] = 4.0
    return xp.sum(x * x) + xp.sum(v) + xp.sum(w)


@pytest.mark.parametrize("prog", [_through_a_slice, _through_a_reshape], ids=["slice", "reshape"])
@pytest.mark.parametrize("borrowed", [True, False], ids=["borrowed", "owned"])
def test_a_write_into_borrowed_memory_reaches_no_view_as_eagerly(prog, borrowed):
    """``xp.asarray(numpy_array)`` borrows the caller's memory; eagerly a write copies it first
    (the caller's array never changes), so the array and its views part ways. Under grad the
    argument is that same memory: the value must be eager's either way."""
    xp = ns("numpy")
    a = np.array([1.0, 2.0, 3.0])

    def make():
        return xp.asarray(a) if borrowed else xp.asarray(a, copy=True) * 1.0

    def eager(arr):
        return float(prog(xp, xp.asarray(arr) if borrowed else xp.asarray(arr, copy=True) * 1.0))

    expected = float(prog(xp, make()))
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])
    value, g = ember.value_and_grad(lambda x: prog(xp, x))(make())
    assert float(value) == expected
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(as_numpy(g), central_differences(eager, a), rtol=1e-6, atol=1e-6)
