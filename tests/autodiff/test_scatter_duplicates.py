"""Writes through integer-array keys with repeated indices: gradients follow the forward.

NumPy keeps the last write to an element (``y[[0, 0]] = v`` keeps ``v[1]``),
and ``y[i] += v`` is ``y[i] = y[i] + v`` (not ``add.at``), so an overwritten
position of ``v`` has no effect on the result and its gradient is zero. The
VJP and the JVP (ember's JVP is the transposed VJP) are checked against
central finite differences on generated index arrays with duplicates, on
NumPy, array-api-strict (whose arrays refuse integer-array writes: ember
writes them with array-API ops) and Dask.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember

BACKENDS = ("numpy", "array_api_strict", "dask")
EPS = 1e-6
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _np(t):
    return np.asarray(ember.compute(t).raw if isinstance(t, ember.Tensor) else t)


def _t(xp, a):
    return xp.asarray(xp._backend.asarray(np.array(a)))


@st.composite
def _cases(draw, min_k=0):
    """(x, idx, v, w): x of 1 or 2 dims, idx with repeats (negative too), v full or broadcast."""
    n = draw(st.integers(1, 4))
    cols = draw(st.sampled_from([None, 1, 3]))
    xshape = (n,) if cols is None else (n, cols)
    k = draw(st.integers(min_k, 7))
    idx = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=k, max_size=k)), dtype=np.int64)
    full = (k,) + xshape[1:]
    vshape = draw(st.sampled_from([full, full[1:], (1,) * len(full)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal(xshape)
    v = rng.standard_normal(vshape)
    w = rng.standard_normal(xshape)
    return x, idx, v, w


def _key(xp, backend, idx, shape):
    """``x[idx]`` on 1-d x; rows ``idx`` of 2-d x, as each backend takes it: array-api-strict
    takes integer arrays only with integer indices (so a column index array), Dask only one
    integer array (so ``...``)."""
    if len(shape) == 1:
        return _t(xp, idx)
    if backend == "array_api_strict":
        return _t(xp, idx[:, None]), _t(xp, np.arange(shape[1])[None, :])
    return _t(xp, idx), ...


def _set(xp, x, idx, v, w):
    y = x * 1.0
    y[idx] = v
    return xp.sum(y * y * w)


def _add(xp, x, idx, v, w):
    y = x * 1.0
    y[idx] += v * v
    return xp.sum(y * w)


def _fd_dir(fun, x, v, dx, dv):
    """Central difference of scalar ``fun(x, v)`` along (dx, dv)."""
    return (fun(x + EPS * dx, v + EPS * dv) - fun(x - EPS * dx, v - EPS * dv)) / (2 * EPS)


def _fd_grad(fun, x, v):
    out = []
    for which in (0, 1):
        a = (x, v)[which]
        g = np.zeros(a.shape)
        for j in range(a.size):
            e = np.zeros(a.size)
            e[j] = 1.0
            e = e.reshape(a.shape)
            dx, dv = (e, np.zeros(v.shape)) if which == 0 else (np.zeros(x.shape), e)
            g.reshape(-1)[j] = _fd_dir(fun, x, v, dx, dv)
        out.append(g)
    return out


@pytest.mark.parametrize("backend", ["numpy", "array_api_strict"])
@pytest.mark.parametrize("op", [_set, _add], ids=["set", "iadd"])
@settings(max_examples=30, **SETTINGS)
@given(data=st.data())
def test_grad_and_jvp_match_finite_differences(backend, op, data):
    _check(backend, op, data)


@pytest.mark.parametrize("op", [_set, _add], ids=["set", "iadd"])
@settings(max_examples=6, **SETTINGS)  # (each finite difference is a Dask compute: fewer cases)
@given(data=st.data())
def test_grad_and_jvp_match_finite_differences_on_dask(op, data):
    _check("dask", op, data)


def _check(backend, op, data):
    xp = ember.autodiff.namespace(backend)
    # Dask draws at least two indices: its own setitem refuses an empty integer key with a
    # value of the (empty) result's shape ("(0, 3) could not be broadcast to (0, 3)"), and for
    # a one-element integer array it reports x[i] with x's length (a chunk of size 1 broadcasts
    # in its blockwise), which the transposed pass of jvp then reshapes; neither repeats
    x, idx, v, w = data.draw(_cases(min_k=2 if backend == "dask" else 0))
    ti, tw = _key(xp, backend, idx, x.shape), _t(xp, w)

    def f(a, b):
        return op(xp, a, ti, b, tw)

    def fnp(a, b):
        return float(_np(f(_t(xp, a), _t(xp, b))))

    # the forward is NumPy's (last write wins; += is a read, an add and a write)
    y = x.copy()
    if op is _set:
        y[idx] = v
        want = float(np.sum(y * y * w))
    else:
        y[idx] += v * v
        want = float(np.sum(y * w))
    np.testing.assert_allclose(fnp(x, v), want, rtol=1e-12, atol=1e-12)

    gx, gv = ember.grad(f, argnums=(0, 1))(_t(xp, x), _t(xp, v))
    fx, fv = _fd_grad(fnp, x, v)
    np.testing.assert_allclose(_np(gx), fx, rtol=1e-5, atol=1e-6, err_msg="grad wrt x")
    np.testing.assert_allclose(_np(gv), fv, rtol=1e-5, atol=1e-6, err_msg="grad wrt v")

    rng = np.random.default_rng(1)
    dx, dv = rng.standard_normal(x.shape), rng.standard_normal(v.shape)
    out, tan = ember.jvp(f, (_t(xp, x), _t(xp, v)), (_t(xp, dx), _t(xp, dv)))
    np.testing.assert_allclose(float(_np(out)), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(_np(tan)), _fd_dir(fnp, x, v, dx, dv), rtol=1e-5, atol=1e-6,
                               err_msg="jvp")


@pytest.mark.parametrize("backend", BACKENDS)
def test_issue_example(backend):
    """The reported case: w = [1, 2, 3], idx = [0, 0, 2]: the first write to 0 is lost."""
    xp = ember.autodiff.namespace(backend)
    idx, w = _t(xp, [0, 0, 2]), _t(xp, [1.0, 2.0, 3.0])

    def f(v):
        y = xp.zeros(3) + 0.0
        y[idx] = v
        return xp.sum(y * w)

    def g(v):
        y = xp.zeros(3) + 0.0
        y[idx] += v
        return xp.sum(y * w)

    v = _t(xp, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(_np(ember.grad(f)(v)), [0.0, 1.0, 3.0])
    np.testing.assert_array_equal(_np(ember.grad(g)(v)), [0.0, 1.0, 3.0])
    _, tan = ember.jvp(f, (v,), (_t(xp, [1.0, 10.0, 100.0]),))
    assert float(_np(tan)) == 10.0 + 300.0


def test_two_integer_arrays_keep_the_last_write_in_c_order():
    """A 2-d key: the duplicate pairs are found on the broadcast index (NumPy only: Dask has no
    n-d integer indexing)."""
    xp = ember.autodiff.namespace("numpy")
    i, j = np.array([[0], [0]]), np.array([1, 1, 0])  # broadcast (2, 3): (0, 1) written 4 times, (0, 0) twice

    def f(v):
        y = xp.zeros((2, 2)) + 0.0
        y[_t(xp, i), _t(xp, j)] = v
        return xp.sum(y * _t(xp, [[1.0, 2.0], [3.0, 4.0]]))

    g = _np(ember.grad(f)(_t(xp, np.arange(6.0).reshape(2, 3))))
    np.testing.assert_array_equal(g, [[0.0, 0.0, 0.0], [0.0, 2.0, 1.0]])
