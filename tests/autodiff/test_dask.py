"""ember on Dask: lazy gradients, ember.compute/persist, sharding, NaN sizes, Dataset, faults."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import ember  # noqa: E402
import ember.autodiff.dask as xd  # noqa: E402
import ember.autodiff.numpy as xn  # noqa: E402
from ember import _compute  # noqa: E402
from ember import distributed as ed  # noqa: E402
from ember._errors import EmberError, ShapeError  # noqa: E402

compute, persist = _compute.compute, _compute.persist


# --------------------------------------------------------------------------- models
def logistic_loss(params, X, y):
    """Sum over rows of the logistic loss (log(1 + e^z) - y z)."""
    xp = X.__array_namespace__()
    z = X @ params["w"] + params["b"]
    return xp.sum(xp.logaddexp(xp.zeros_like(z), z) - y * z)


def mlp_loss(params, X, y):
    """Sum over rows of the logistic loss of a 1-hidden-layer tanh MLP."""
    xp = X.__array_namespace__()
    h = xp.tanh(X @ params["W1"] + params["b1"])
    z = h @ params["w2"] + params["b2"]
    return xp.sum(xp.logaddexp(xp.zeros_like(z), z) - y * z)


def _data(n=240, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0).astype(np.float64)
    return X, y


def _params(kind, d=6, h=5, seed=1):
    rng = np.random.default_rng(seed)
    if kind == "logistic":
        return {"w": rng.standard_normal(d) * 0.3, "b": np.asarray(0.1)}
    return {
        "W1": rng.standard_normal((d, h)) * 0.4,
        "b1": rng.standard_normal(h) * 0.1,
        "w2": rng.standard_normal(h) * 0.4,
        "b2": np.asarray(-0.2),
    }


LOSSES = {"logistic": logistic_loss, "mlp": mlp_loss}


def _numpy_reference(kind, X, y):
    p = {k: xn.asarray(v) for k, v in _params(kind).items()}
    v, g = ember.value_and_grad(LOSSES[kind])(p, xn.asarray(X), xn.asarray(y))
    return float(v), {k: t.raw for k, t in g.items()}


# --------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_lazy_dask_gradient_equals_numpy(kind):
    X, y = _data()
    v_ref, g_ref = _numpy_reference(kind, X, y)
    p = {k: xd.asarray(v) for k, v in _params(kind).items()}
    Xd = xd.asarray(da.from_array(X, chunks=(50, 6)))
    yd = xd.asarray(da.from_array(y, chunks=50))
    v, g = ember.value_and_grad(LOSSES[kind])(p, Xd, yd)
    assert all(_compute.is_lazy(t) for t in [v, *g.values()])  # nothing computed yet
    out = compute({"v": v, "g": g})
    assert abs(float(out["v"]) - v_ref) <= 1e-10 * abs(v_ref)
    for k in g_ref:
        np.testing.assert_allclose(out["g"][k].raw, g_ref[k], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_chunked_gradient_numpy_params_dask_data(kind):
    X, y = _data()
    v_ref, g_ref = _numpy_reference(kind, X, y)
    Xd, yd = da.from_array(X, chunks=(35, 3)), da.from_array(y, chunks=60)  # misaligned on purpose
    v, g = ed.chunked_value_and_grad(LOSSES[kind], _params(kind), Xd, yd, split_every=3)
    assert isinstance(g[next(iter(g))], np.ndarray)
    assert abs(float(v) - v_ref) <= 1e-10 * abs(v_ref)
    for k in g_ref:
        np.testing.assert_allclose(g[k], g_ref[k], rtol=1e-10, atol=1e-12)
    vm, gm = ed.chunked_value_and_grad(LOSSES[kind], _params(kind), Xd, yd, reduce="mean")
    assert abs(float(vm) - v_ref / len(X)) <= 1e-12
    # Dataset gives the same full-batch gradient
    ds = ed.Dataset(Xd, yd, progress=False)
    _, g2 = ds.value_and_grad(LOSSES[kind], _params(kind))
    for k in g_ref:
        np.testing.assert_allclose(g2[k], g_ref[k], rtol=1e-10, atol=1e-12)


def test_lazy_until_compute_no_task_runs():
    calls = []

    class Count(dask.callbacks.Callback):
        def _start(self, dsk):
            calls.append(1)

    X, y = _data()
    p = {k: xd.asarray(v) for k, v in _params("mlp").items()}
    with Count():
        v, g = ember.value_and_grad(mlp_loss)(
            p, xd.asarray(da.from_array(X, chunks=(60, 6))), xd.asarray(da.from_array(y, chunks=60))
        )
        persisted = persist(g)
        assert len(calls) == 1  # only the persist
        assert all(_compute.is_lazy(t) for t in persisted.values())
        out = compute(v)
    assert len(calls) == 2
    assert isinstance(out.raw, np.ndarray)


# --------------------------------------------------------------------------- compute
def test_compute_runs_shared_intermediates_once():
    lock = threading.Lock()
    count = [0]

    def expensive(b):
        with lock:
            count[0] += b.size > 0  # dask may call it once on an empty "meta" block
        return b * 2.0

    base = da.from_array(np.arange(12.0), chunks=4)
    shared = xd.asarray(base.map_blocks(expensive, dtype=float))
    tree = {"a": xd.sin(shared), "b": [shared * 3.0, xd.sum(shared)], "c": "static", "d": None}
    out = compute(tree)
    assert count[0] == 3  # three blocks, once each, though four leaves use them
    assert out["c"] == "static" and out["d"] is None
    np.testing.assert_allclose(out["b"][0].raw, np.arange(12.0) * 6.0)
    assert float(out["b"][1]) == pytest.approx(132.0)
    count[0] = 0
    kept = compute(tree, keep_backend=True)
    assert count[0] == 3 and kept["a"].__array_namespace__() is xd
    np.testing.assert_allclose(kept["a"].raw.compute(), np.sin(np.arange(12.0) * 2.0))


def test_compute_refuses_tracked_tensor():
    def f(x):
        compute(x * 2.0)
        return xd.sum(x)

    with pytest.raises(EmberError, match="tracked by an open transform"):
        ember.grad(f)(xd.ones(3))


# --------------------------------------------------------------------------- sharding
def test_with_sharding_gradient_passes_through():
    x = xd.asarray(da.from_array(np.arange(12.0).reshape(6, 2), chunks=(2, 2)))

    def f(x):
        y = ed.with_sharding(x, (3, 1))
        assert ed.sharding(y) == ((3, 3), (1, 1))
        return xd.sum(y * y)

    g = ember.grad(f)(x)
    assert ed.sharding(g) == ((2, 2, 2), (2,))  # back to the input's chunks
    np.testing.assert_array_equal(compute(g).raw, 2.0 * np.arange(12.0).reshape(6, 2))
    # second order through the reshard
    h = ember.grad(lambda x: xd.sum(ember.grad(f)(x) * x))(x)
    np.testing.assert_array_equal(compute(h).raw, 4.0 * np.arange(12.0).reshape(6, 2))
    # eager backends: no-op
    a = xn.ones(3)
    assert ed.with_sharding(a, 1) is a and ed.sharding(a) is None


# --------------------------------------------------------------------------- NaN sizes
@pytest.mark.parametrize("make", [
    lambda x: x[x > 0.0],
    lambda x: xd.unique_values(x),
    lambda x: xd.nonzero(x > 0.0)[0],
])
def test_unknown_sizes_give_clear_errors(make):
    x = xd.asarray(da.from_array(np.array([-1.0, 2.0, 3.0, -4.0, 5.0, 2.0]), chunks=2))
    m = make(x)
    assert m.shape[0] != m.shape[0]  # NaN: unknown
    with pytest.raises(ShapeError, match=r"reshape: .*unknown \(NaN\).*resolve_sizes"):
        xd.reshape(m, (-1, 1))
    with pytest.raises(TypeError, match="unknown"):
        len(m)
    with pytest.raises(ShapeError, match="resolve_sizes"):
        ed.with_sharding(m, 2)
    with pytest.raises(ShapeError, match="resolve_sizes"):
        ed.chunked_value_and_grad(logistic_loss, {}, m)
    ed.resolve_sizes({"m": m})  # explicit resolution: in place
    n = m.shape[0]
    assert n == n and xd.reshape(m, (-1, 1)).shape == (n, 1)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), rows=st.integers(0, 7), cols=st.sampled_from([None, 1, 3]),
       kind=st.sampled_from(["full", "rows", "nested"]))
def test_gradient_through_a_boolean_mask_of_unknown_size(data, rows, cols, kind):
    # x[mask] on Dask has a NaN size until computed; its gradient goes back block by block
    # (chunks of x and of the mask may differ; empty and all-kept masks too)
    shape = (rows,) if cols is None else (rows, cols)
    a = data.draw(arrays(np.float64, shape, elements=st.floats(-3, 3)))
    xc, mc = (data.draw(st.integers(1, max(rows, 1))) for _ in range(2))
    x = xd.asarray(da.from_array(a, chunks=(xc,) + shape[1:]))
    if kind == "nested":  # x itself of unknown size (the rows a first mask kept), masked by value
        if cols is not None:
            return  # (Dask lists an N-d selection of unknown size in its own order: not supported)
        keep = data.draw(arrays(np.bool_, (rows,)))
        x = xd.asarray(x.raw[da.from_array(keep, chunks=mc)])
        a = a[keep]
        rmask = a > 0.5
    else:
        rmask = data.draw(arrays(np.bool_, shape if kind == "full" else (rows,)))
        mask = da.from_array(rmask, chunks=(mc,) + rmask.shape[1:])

    def loss(t):
        u = t[t > 0.5] if kind == "nested" else t[mask]
        return xd.sum(xd.sin(u) * u)

    g = compute(ember.grad(loss)(x))
    where = rmask if rmask.ndim == a.ndim else rmask[:, None]
    np.testing.assert_allclose(g.raw, np.where(where, np.cos(a) * a + np.sin(a), 0.0), rtol=1e-12, atol=1e-12)
    # and central finite differences of the same loss on NumPy
    def f(v):
        u = v[where if kind != "rows" else rmask]
        return np.sum(np.sin(u) * u)

    eps = 1e-6
    fd = np.array([(f(a + eps * e) - f(a - eps * e)) / (2 * eps) for e in np.eye(a.size).reshape((a.size,) + a.shape)])
    np.testing.assert_allclose(g.raw.reshape(-1), fd.reshape(-1), rtol=1e-6, atol=1e-6)


def test_second_order_through_a_boolean_mask_of_unknown_size():
    a = np.array([1.0, -2.0, 3.0, 0.5, 2.0, -1.0])
    x = xd.asarray(da.from_array(a, chunks=4))
    mask = da.from_array(a > 0, chunks=3)  # (other chunks than x's)
    inner = ember.grad(lambda t: xd.sum(t[mask] ** 3))
    h = ember.grad(lambda t: xd.sum(inner(t)))(x)
    np.testing.assert_allclose(compute(h).raw, np.where(a > 0, 6 * a, 0.0))


def test_gradient_through_a_lazy_mask_it_cannot_scatter_names_the_two_ways_that_work():
    # a cotangent that lost the selection's blocks (here one broadcast block) cannot go back
    # block by block: the error says how to write it instead; both ways give the masked gradient
    a = np.array([1.0, -2.0, 3.0, 0.5, 2.0, -0.5])
    x = xd.asarray(da.from_array(a, chunks=4))
    with pytest.raises(ShapeError, match=r"getitem: x\[mask\].*unknown.*xp\.where\(mask.*ember\.compute\(mask\)"):
        ember.vjp(lambda t: t[t > 0.0], x)[1](xd.asarray(da.broadcast_to(da.asarray(2.0), (np.nan,))))
    want = np.where(a > 0, 2.0 * np.cos(a), 0.0)
    g = ember.grad(lambda t: xd.sum(xd.where(t > 0.0, xd.sin(t) * 2.0, 0.0)))(x)
    np.testing.assert_allclose(compute(g).raw, want, rtol=1e-13)
    g = ember.grad(lambda t: xd.sum(xd.sin(t[np.asarray(compute(t > 0.0).raw)]) * 2.0))(x)
    np.testing.assert_allclose(compute(g).raw, want, rtol=1e-13)


def test_unknown_sizes_in_gradient_give_clear_error():
    x = xd.asarray(da.from_array(np.array([-1.0, 2.0, 3.0, -4.0]), chunks=2))
    with pytest.raises(ShapeError, match="unknown"):
        ember.grad(lambda x: xd.sum(xd.reshape(x[x > 0.0], (-1,)) ** 2))(x)


@pytest.mark.parametrize("keep", [[1, 0, 1, 1, 0, 1], [1, 1, 0, 0, 0, 0]], ids=["rows in each chunk", "a chunk emptied"])
@pytest.mark.parametrize("targets", ["probabilities", "indices"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradient_with_unknown_row_count(reduction, targets, keep):
    # rows picked by a boolean mask: Dask knows their number only after computing (NaN);
    # the mean's gradient counts them lazily instead of dividing by NaN, and class indices
    # become one-hot rows without a reshape (which needs the sizes)
    rng = np.random.default_rng(0)
    labels = np.array([0, 1, 2, 0, 1, 2])
    z, t = rng.standard_normal((6, 3)), (np.eye(3)[labels] if targets == "probabilities" else labels)
    keep = np.array(keep, bool)
    mask = da.from_array(keep, chunks=3)
    zd = xd.asarray(da.from_array(z, chunks=3)[mask])
    td = xd.asarray(da.from_array(t, chunks=3)[mask])
    assert zd.shape[0] != zd.shape[0]  # NaN

    def loss(ns, targets):
        return lambda z: ns.sum(ember.nn.cross_entropy(z, targets, reduction=reduction))

    value, g = ember.value_and_grad(loss(xd, td))(zd)
    want_value, want = ember.value_and_grad(loss(xn, xn.asarray(t[keep])))(xn.asarray(z[keep]))
    np.testing.assert_allclose(float(ember.compute(value).raw), float(want_value))
    np.testing.assert_allclose(ember.compute(g).raw, want.raw, rtol=1e-12)


@pytest.mark.parametrize("axis", [0, 1, -1, 2, -3])
def test_expand_dims_and_its_gradient_at_unknown_sizes(axis):
    x = np.random.default_rng(2).standard_normal((6, 2))
    keep = np.array([1, 0, 1, 1, 0, 1], bool)
    m = xd.asarray(da.from_array(x, chunks=3)[da.from_array(keep, chunks=3)])

    def f(ns, v):
        e = ns.expand_dims(v * v, axis=axis)
        return ns.sum(ns.sin(e) * e), e

    (_, e), g = ember.value_and_grad(lambda v: f(xd, v), has_aux=True)(m)
    (_, want_e), want = ember.value_and_grad(lambda v: f(xn, v), has_aux=True)(xn.asarray(x[keep]))
    np.testing.assert_array_equal(ember.compute(e).raw, want_e.raw)
    np.testing.assert_allclose(ember.compute(g).raw, want.raw, rtol=1e-12)
    with pytest.raises(IndexError, match="axis 3 is out of range"):
        xd.expand_dims(m, axis=3)


def test_classifier_gradient_on_filtered_rows():
    # the realistic case: a linear classifier on rows a filter picked, one block emptied,
    # integer labels; equal to NumPy on the same rows
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((8, 4)), rng.integers(0, 3, 8)
    keep = np.array([1, 1, 0, 0, 1, 0, 1, 1], bool)
    mask = da.from_array(keep, chunks=2)
    W, b = rng.standard_normal((3, 4)), rng.standard_normal(3)

    def loss(X, y):
        return lambda p: ember.nn.cross_entropy(ember.nn.linear(X, p["W"], p["b"]), y)

    Xd, yd = (xd.asarray(da.from_array(a, chunks=2)[mask]) for a in (X, y))
    value, g = ember.value_and_grad(loss(Xd, yd))({"W": xd.asarray(W), "b": xd.asarray(b)})
    want_value, want = ember.value_and_grad(loss(xn.asarray(X[keep]), xn.asarray(y[keep])))(
        {"W": xn.asarray(W), "b": xn.asarray(b)})
    np.testing.assert_allclose(float(ember.compute(value).raw), float(want_value), rtol=1e-14)
    for k in ("W", "b"):
        np.testing.assert_allclose(ember.compute(g[k]).raw, want[k].raw, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("axis,keepdims", [(1, False), (-1, True), ((1,), False)])
def test_extrema_with_a_chunk_emptied_by_a_mask(name, axis, keepdims):
    # Dask's own tree reduction fails on an emptied block; along axes of one chunk (the
    # classes of cross-entropy's row-wise shift) ember reduces each block on its own
    x = np.random.default_rng(3).standard_normal((6, 3))
    keep = np.array([0, 1, 1, 0, 0, 0], bool)
    m = xd.asarray(da.from_array(x, chunks=3)[da.from_array(keep, chunks=3)])
    f = lambda ns, v: getattr(ns, name)(v * v, axis=axis, keepdims=keepdims)  # noqa: E731
    got, pull = ember.vjp(lambda v: f(xd, v), m)
    want, want_pull = ember.vjp(lambda v: f(xn, v), xn.asarray(x[keep]))
    np.testing.assert_array_equal(ember.compute(got).raw, want.raw)
    g, want_g = pull(xd.ones_like(got))[0], want_pull(xn.ones_like(want))[0]
    np.testing.assert_array_equal(ember.compute(g).raw, want_g.raw)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("axis,keepdims", [(0, False), (None, False), ((0, 1), True), (1, False),
                                           (-2, True)])
@pytest.mark.parametrize("keep", [[0, 0, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0]], ids=["first chunk emptied", "two chunks emptied"])
def test_extrema_down_unknown_rows(name, axis, keepdims, keep):
    # down the rows a mask picked (their number unknown), one or two of three row blocks
    # emptied, columns in two chunks: Dask's own reduction fails there; values and gradients
    # equal NumPy's on the same rows (ties of v * v included: -x and x)
    x = np.random.default_rng(6).standard_normal((6, 4))
    x[4] = -x[3]
    keep = np.array(keep, bool)
    m = xd.asarray(da.from_array(x, chunks=(2, 2))[da.from_array(keep, chunks=2)])
    f = lambda ns, v: getattr(ns, name)(v * v, axis=axis, keepdims=keepdims)  # noqa: E731
    got, pull = ember.vjp(lambda v: f(xd, v), m)
    want, want_pull = ember.vjp(lambda v: f(xn, v), xn.asarray(x[keep]))
    np.testing.assert_array_equal(ember.compute(got).raw, want.raw)
    g, want_g = pull(xd.ones_like(got))[0], want_pull(xn.ones_like(want))[0]
    np.testing.assert_allclose(ember.compute(g).raw, want_g.raw, rtol=1e-15)


@pytest.mark.parametrize("dtype", ["int16", "uint8", "bool", "float32"])
def test_extrema_down_unknown_rows_keep_the_dtype(dtype):
    # the identity an emptied block stands for is the dtype's own (iinfo, False/True, inf)
    x = (np.arange(12).reshape(6, 2) % 5).astype(dtype)
    keep = da.from_array(np.array([0, 0, 1, 1, 0, 1], bool), chunks=2)
    m = xd.asarray(da.from_array(x, chunks=2)[keep])
    rows = x[[2, 3, 5]]
    for name in ("max", "min"):
        got = ember.compute(getattr(xd, name)(m, axis=0)).raw
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, getattr(np, name)(rows, axis=0))


def test_extrema_of_no_rows_raise_at_compute():
    # a mask that keeps nothing: NumPy's max of an empty axis raises, so does ember's, lazily
    x = xd.asarray(da.from_array(np.ones((4, 3)), chunks=2)[da.zeros(4, dtype=bool, chunks=2)])
    r = xd.max(x, axis=0)
    with pytest.raises(ValueError, match="max: the reduced axes hold no elements"):
        ember.compute(r)
    assert ember.compute(xd.min(x, axis=1)).raw.shape == (0,)  # empty result: nothing to raise
    # no rows and no columns: the reduced axis is empty, so NumPy raises although the result
    # (of the empty kept axis) is empty too; ember as well
    assert np.max(np.ones((0, 3)), axis=1).shape == (0,)
    with pytest.raises(ValueError):
        np.max(np.ones((0, 0)), axis=0)
    empty = xd.asarray(da.from_array(np.ones((4, 0)), chunks=2)[da.zeros(4, dtype=bool, chunks=2)])
    with pytest.raises(ValueError, match="min: the reduced axes hold no elements"):
        ember.compute(xd.min(empty, axis=0))


def test_extrema_at_unknown_sizes_reject_an_axis_out_of_range():
    # axis 4 of a 3-d array must not wrap around to axis 1 (known, one chunk)
    x = np.random.default_rng(5).standard_normal((6, 3, 2))
    m = xd.asarray(da.from_array(x, chunks=3)[da.from_array(np.arange(6) > 2, chunks=3)])
    for axis in (4, -4, (1, 3)):
        with pytest.raises(IndexError, match="out of bounds"):
            xd.max(m, axis=axis)


_REDUCTIONS_OF_UNKNOWN_ROWS = {
    "sum": lambda ns, x: ns.sum(ns.sin(x)),
    "sum over rows": lambda ns, x: ns.sum(ns.sum(x, axis=1) ** 2),
    "mean": lambda ns, x: ns.mean(x * x),
    "mean over rows": lambda ns, x: ns.sum(ns.sin(ns.mean(x, axis=1))),
    "mean over columns": lambda ns, x: ns.sum(ns.mean(x * x, axis=0)),
    "var": lambda ns, x: ns.sum(ns.var(x, axis=0, correction=1)),
    "std": lambda ns, x: ns.std(x),
    "prod over rows": lambda ns, x: ns.sum(ns.sin(ns.prod(x, axis=1))),
    "prod over rows, kept": lambda ns, x: ns.sum(ns.prod(x, axis=-1, keepdims=True) * x),
    "cumulative_sum along rows": lambda ns, x: ns.sum(ns.sin(ns.cumulative_sum(x, axis=1))),
    "cumulative_prod along rows": lambda ns, x: ns.sum(ns.cumulative_prod(x, axis=1)),
}


@pytest.mark.parametrize("name", list(_REDUCTIONS_OF_UNKNOWN_ROWS))
def test_reduction_gradients_with_unknown_row_count(name):
    # counts and broadcasts are lazy where Dask reports NaN sizes: no NaN gradient, no
    # failure at compute time
    f = _REDUCTIONS_OF_UNKNOWN_ROWS[name]
    x = np.random.default_rng(1).standard_normal((6, 4))
    x[2, 1] = x[3, 0] = x[3, 3] = 0.0  # (prod's gradient at zeros: the products of the others)
    for keep in ([1, 0, 1, 1, 0, 1], [0, 0, 0, 1, 1, 1]):  # rows in each chunk, a chunk emptied
        keep = np.array(keep, bool)
        xd_ = xd.asarray(da.from_array(x, chunks=(3, 2))[da.from_array(keep, chunks=3)])
        assert xd_.shape[0] != xd_.shape[0]  # NaN
        v, g = ember.compute(ember.value_and_grad(lambda v: f(xd, v))(xd_))
        want_v, want = ember.value_and_grad(lambda v: f(xn, v))(xn.asarray(x[keep]))
        np.testing.assert_allclose(v.raw, want_v.raw, rtol=1e-12)
        np.testing.assert_allclose(g.raw, want.raw, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("axis,keepdims", [((1, 2), False), ((-1, 1), True), (None, False),
                                           (0, False), ((0, 2), True)])
def test_prod_at_unknown_rows(axis, keepdims):
    # prod's gradient over several known axes scans them one by one (no reshape into one axis,
    # which needs the row count); down the unknown axis its exclusive scans divide each element
    # out of an inclusive one (no slice). Exact at zeros: one zero in a slab, two in another
    x = np.random.default_rng(3).uniform(0.5, 1.5, (6, 3, 4))
    x[1, 2, 0] = x[3, 0, 1] = x[3, 2, 2] = 0.0
    keep = np.array([0, 1, 1, 1, 0, 1], bool)
    m = xd.asarray(da.from_array(x, chunks=(3, 2, 4))[da.from_array(keep, chunks=3)])

    def f(ns, v):
        return ns.sum(ns.sin(ns.prod(v, axis=axis, keepdims=keepdims)))

    v, g = ember.compute(ember.value_and_grad(lambda v: f(xd, v))(m))
    want_v, want = ember.value_and_grad(lambda v: f(xn, v))(xn.asarray(x[keep]))
    np.testing.assert_allclose(v.raw, want_v.raw, rtol=1e-12)
    np.testing.assert_allclose(g.raw, want.raw, rtol=1e-12, atol=1e-15)
    if axis == (1, 2):
        assert np.count_nonzero(want.raw[0]) == 1 and not want.raw[2].any()  # (the zeros' cases)
    if axis == 0:  # a column with one zero (its gradient: the others' product), one with none
        assert np.count_nonzero(want.raw[:, 2, 0]) == 1 and np.count_nonzero(want.raw[:, 1, 1]) == 4


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_prod_gradient_down_unknown_rows_matches_numpy(data):
    # 1-d and 2-d, any chunking, masks that empty blocks or keep nothing, zeros anywhere
    shape = data.draw(st.sampled_from([(7,), (6, 3)]))
    x = data.draw(arrays(np.float64, shape, elements=st.sampled_from([0.0, 0.5, -1.25, 2.0, 3.0])))
    keep = data.draw(arrays(bool, shape[:1]))
    chunks = data.draw(st.integers(1, shape[0]))
    m = xd.asarray(da.from_array(x, chunks=chunks)[da.from_array(keep, chunks=chunks)])
    got = ember.compute(ember.grad(lambda v: xd.sum(xd.prod(v, axis=0) * 1.5))(m)).raw
    want = ember.grad(lambda v: xn.sum(xn.prod(v, axis=0) * 1.5))(xn.asarray(x[keep])).raw
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_prod_second_order_down_unknown_rows_needs_the_sizes():
    # the first-order form's own derivative at a zero is not the others' product: a recorded
    # backward keeps the exclusive scan's slice, so the second order says it needs the sizes
    # instead of giving 0 where NumPy gives the product of the other two
    a = np.array([1.5, -2.0, 0.5, 3.0, 0.0, 2.0])
    m = xd.asarray(da.from_array(a, chunks=3))
    m = m[m > -1.5]
    with pytest.raises(ShapeError, match=r"(?s)unknown \(NaN\).*resolve_sizes"):
        ember.grad(lambda v: xd.sum(xd.sin(ember.grad(lambda u: xd.prod(u))(v))))(m)
    sized = ed.resolve_sizes(m)
    got = ember.grad(lambda v: xd.sum(xd.sin(ember.grad(lambda u: xd.prod(u))(v))))(sized)
    want = ember.grad(lambda v: xn.sum(xn.sin(ember.grad(lambda u: xn.prod(u))(v))))(xn.asarray(a[a > -1.5]))
    np.testing.assert_allclose(ember.compute(got).raw, want.raw, rtol=1e-12)
    assert want.raw[3] != 0  # (the zero's entry: what the division form would have lost)


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
def test_scans_at_unknown_sizes(name):
    # Dask's default (sequential) scan fails at compute time at NaN sizes; ember's runs, and
    # include_initial prepends the identity as a block of its own (the compat layer's ones and
    # concatenation need the sizes). The gradient down the unknown axis flips along it (block
    # by block); with include_initial it drops that first block of the cotangent
    x = np.random.default_rng(2).standard_normal((6, 3))
    keep = np.array([0, 1, 1, 0, 0, 1], bool)
    m = xd.asarray(da.from_array(x, chunks=(3, 2))[da.from_array(keep, chunks=3)])
    scan, np_scan = getattr(xd, name), getattr(np, name.replace("ulative_", ""))
    identity = 0.0 if name == "cumulative_sum" else 1.0
    for axis, v in ((0, m), (0, m[:, 1]), (1, m), (-1, m)):
        want = np_scan(v.raw.compute(), axis=axis)
        np.testing.assert_allclose(ember.compute(scan(v, axis=axis)).raw, want, rtol=1e-12)
        got = ember.compute(scan(v, axis=axis, include_initial=True)).raw
        first = np.full(want.shape[:-1] + (1,) if axis else (1,) + want.shape[1:], identity)
        np.testing.assert_allclose(got, np.concatenate([first, want], axis=axis), rtol=1e-12)
    for axis in (0, 1):
        for initial in (False, True):
            got = ember.grad(lambda v: xd.sum(xd.sin(scan(v, axis=axis, include_initial=initial))))(m)
            want = ember.grad(lambda v: xn.sum(xn.sin(getattr(xn, name)(v, axis=axis, include_initial=initial))))(
                xn.asarray(x[keep]))
            np.testing.assert_allclose(ember.compute(got).raw, want.raw, rtol=1e-12, atol=1e-15)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_scan_down_unknown_rows_matches_numpy(data):
    # values and gradients, with and without include_initial, 1-d and 2-d, any chunking,
    # masks that empty blocks (the first one too: the identity's block is made from x's
    # first blocks, not sliced out of x) or keep nothing
    name = data.draw(st.sampled_from(["cumulative_sum", "cumulative_prod"]))
    shape = data.draw(st.sampled_from([(7,), (6, 3)]))
    x = data.draw(arrays(np.float64, shape, elements=st.sampled_from([0.0, 0.5, -1.25, 2.0, 0.75])))
    keep = data.draw(arrays(bool, shape[:1]))
    chunks = data.draw(st.integers(1, shape[0]))
    axis = data.draw(st.sampled_from([0, -1] if len(shape) == 2 else [0, None]))
    initial = data.draw(st.booleans())
    m = xd.asarray(da.from_array(x, chunks=chunks)[da.from_array(keep, chunks=chunks)])

    def f(ns, v):
        return ns.sum(ns.sin(getattr(ns, name)(v, axis=axis, include_initial=initial)))

    got_v, got = ember.compute(ember.value_and_grad(lambda v: f(xd, v))(m))
    want_v, want = ember.value_and_grad(lambda v: f(xn, v))(xn.asarray(x[keep]))
    np.testing.assert_allclose(got_v.raw, want_v.raw, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got.raw, want.raw, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
def test_scan_second_order_down_unknown_rows_needs_the_sizes(name):
    # a recorded backward drops the identity's cotangent by slicing (the block form is for
    # backend arrays): the clear error, and with the sizes resolved NumPy's values
    a = np.array([1.5, -2.0, 0.5, 3.0, 0.25, 2.0])
    m = xd.asarray(da.from_array(a, chunks=3))
    m = m[m > -1.5]

    def f(ns, v):
        inner = ember.grad(lambda u: ns.sum(ns.sin(getattr(ns, name)(u, include_initial=True))))
        return ns.sum(ns.sin(inner(v)))

    with pytest.raises(ShapeError, match=r"(?s)unknown \(NaN\).*resolve_sizes"):
        ember.grad(lambda v: f(xd, v))(m)
    got = ember.grad(lambda v: f(xd, v))(ed.resolve_sizes(m))
    want = ember.grad(lambda v: f(xn, v))(xn.asarray(a[a > -1.5]))
    np.testing.assert_allclose(ember.compute(got).raw, want.raw, rtol=1e-12)


@pytest.mark.parametrize("axis", [0, -2, None, (0, 1), (1,), (1, 0)])
@pytest.mark.parametrize("keep", [[0, 1, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0], [0] * 6],
                         ids=["rows in two chunks", "one row", "no rows"])
def test_flip_at_unknown_sizes(axis, keep):
    # Dask flips by slicing, which needs the sizes; ember reverses the blocks and flips each
    # (emptied blocks included); its gradient is a flip of the cotangent
    x = np.random.default_rng(4).standard_normal((6, 4))
    keep = np.array(keep, bool)
    m = xd.asarray(da.from_array(x, chunks=(2, 3))[da.from_array(keep, chunks=2)])
    np.testing.assert_array_equal(ember.compute(xd.flip(m, axis=axis)).raw,
                                  np.flip(x[keep], axis=axis))
    w = np.arange(4.0)
    got = ember.grad(lambda v: xd.sum(xd.flip(v, axis=axis) * xd.asarray(w)))(m)
    np.testing.assert_array_equal(ember.compute(got).raw,
                                  np.flip(np.broadcast_to(w, x[keep].shape), axis=axis))
    with pytest.raises(ValueError):
        xd.flip(m, axis=(0, 0))  # Dask's own errors stand


def test_operators_with_numpy_operands():
    # a NumPy array is another library's: the operator raises the mixing error on either side
    # (NumPy's reflected method computed the Dask graph into a NumPy array and dropped the
    # gradient); a NumPy scalar is a 0-d array with NumPy's dtype, as raw Dask takes it
    x = np.random.default_rng(8).standard_normal((4, 3))
    v = xd.asarray(da.from_array(x, chunks=2))
    w = np.arange(3.0)
    for f in (lambda v: v * w, lambda v: w * v, lambda v: v @ np.ones((3, 2)), lambda v: w - v):
        with pytest.raises(ember.BackendError, match=r"cannot mix a tensor of namespace 'dask'.*numpy"):
            f(v)
        with pytest.raises(ember.BackendError, match=r"cannot mix"):
            ember.grad(lambda v: xd.sum(f(v)))(v)
    g = ember.grad(lambda v: xd.sum(v / np.sqrt(4) + np.float32(2.0) * v))(v)
    np.testing.assert_allclose(ember.compute(g).raw, np.full((4, 3), 2.5))
    assert (xd.asarray(da.from_array(x.astype("float32"), chunks=2)) * np.float64(2)).dtype == xd.float64


# --------------------------------------------------------------------------- Dataset
def test_dataset_order_sequential_and_shuffled():
    n = 23
    X = da.from_array(np.arange(n * 2).reshape(n, 2), chunks=(5, 1))
    y = da.from_array(np.arange(n), chunks=7)
    ds = ed.Dataset(X, y, batch_size=4, progress=False)
    assert ds.chunks == (5, 5, 5, 5, 3) and len(ds) == 6
    batches = list(ds)
    assert [len(b[1]) for b in batches] == [4, 4, 4, 4, 4, 3]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), np.arange(n))
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches])[:, 0], 2 * np.arange(n))

    sh = ed.Dataset(X, y, batch_size=4, shuffle=True, seed=3, drop_last=True, progress=False)
    for epoch in (0, 1):
        got = np.concatenate([b[1] for b in sh.batches(epoch)])
        np.testing.assert_array_equal(got, sh.order(epoch))
        assert len(got) == 20 and len(set(got.tolist())) == 20
    # documented order: chunk permutation, then a row permutation per visited chunk
    rng = np.random.default_rng([3, 1])
    visit = rng.permutation(5)
    expect = np.concatenate([5 * i + rng.permutation(ds.chunks[i]) for i in visit])[:20]
    np.testing.assert_array_equal(sh.order(1), expect)
    assert not np.array_equal(sh.order(0), sh.order(1))
    # rows stay aligned across arrays
    for bx, by in sh.batches(0):
        np.testing.assert_array_equal(bx[:, 0], 2 * by)


def test_dataset_progress_bar_and_zarr(tmp_path):
    zarr = pytest.importorskip("zarr")
    X, y = _data(n=50)
    da.from_array(X, chunks=(16, 6)).to_zarr(str(tmp_path / "d.zarr"), component="X")
    da.from_array(y, chunks=16).to_zarr(str(tmp_path / "d.zarr"), component="y")
    ds = ed.Dataset.from_zarr(str(tmp_path / "d.zarr"), batch_size=20, progress=True)
    got = list(ds)
    assert [len(b[0]) for b in got] == [20, 20, 10] and ds.epoch == 1
    np.testing.assert_array_equal(np.concatenate([b[0] for b in got]), X)
    assert isinstance(zarr.open_array(str(tmp_path / "d.zarr"), path="X").shape, tuple)


# --------------------------------------------------------------------------- cluster
def _squares_loss(params, X, y):
    """Least squares; on small integer data every operation is exact, so results are bitwise
    reproducible whichever worker (and memory alignment, BLAS kernel) computes a chunk."""
    xp = X.__array_namespace__()
    r = X @ params["w"] + params["b"] - y
    return xp.sum(r * r)


def _slow_loss(params, X, y):
    time.sleep(0.15)
    return _squares_loss(params, X, y)


def test_worker_killed_mid_computation_does_not_lose_the_job():
    pytest.importorskip("distributed")
    rng = np.random.default_rng(5)
    X = rng.integers(-4, 5, (320, 6)).astype(np.float64)
    y = rng.integers(-4, 5, 320).astype(np.float64)
    Xd, yd = da.from_array(X, chunks=(20, 6)), da.from_array(y, chunks=20)  # 16 tasks
    params = {"w": np.arange(6.0) - 2.0, "b": np.asarray(1.0)}
    with ed.client(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GB") as c:
        expected = c.compute(ed.chunked_value_and_grad(_squares_loss, params, Xd, yd, compute=False)).result()
        job = c.compute(ed.chunked_value_and_grad(_slow_loss, params, Xd, yd, compute=False))
        deadline = time.time() + 20
        victim = None
        while victim is None and time.time() < deadline:  # wait until a worker holds results
            held = {w: keys for w, keys in c.has_what().items() if keys}
            if held:
                victim = next(iter(held))
            else:
                time.sleep(0.05)
        assert victim is not None and not job.done()
        pid = c.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        v, g = job.result(timeout=60)
    assert float(v) == float(expected[0])
    for k in g:
        np.testing.assert_array_equal(g[k], expected[1][k])
    ref = 2.0 * X.T @ (X @ params["w"] + 1.0 - y)
    np.testing.assert_array_equal(g["w"], ref)


def test_matmul_refuses_the_shapes_numpy_refuses():
    # Dask multiplied a 1-D x1 without comparing its length with x2's rows (conformance, seed 5)
    import itertools

    import ember.autodiff.dask as dxp

    shapes = [(0,), (1,), (2,), (0, 0), (1, 0), (2, 3), (3, 2), (1, 1), (2, 0), (1, 2, 3), (2, 3, 1),
              (3, 1, 2), (2, 2, 3), (3, 2, 3)]
    for a, b in itertools.product(shapes, repeat=2):
        try:
            want = np.matmul(np.ones(a), np.ones(b)).shape
        except ValueError:
            with pytest.raises(ValueError, match="matmul"):
                dxp.matmul(dxp.ones(a), dxp.ones(b))
            continue
        assert tuple(dxp.matmul(dxp.ones(a), dxp.ones(b)).shape) == want, (a, b)


def test_asarray_without_copy_sees_later_writes():
    # copy=False promises no copy: a write through x shows in the result, as on NumPy
    import ember.autodiff.dask as dxp

    x = dxp.zeros((3,), dtype=dxp.uint8)
    y = dxp.asarray(x, copy=False)
    x[1] = 7
    assert np.asarray(ember.compute(y).raw).tolist() == [0, 7, 0]
    z = dxp.asarray(x, copy=True)
    x[0] = 5
    assert np.asarray(ember.compute(z).raw).tolist() == [0, 7, 0]
