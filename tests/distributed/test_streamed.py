"""Streamed full-batch gradients over zarr: tasks read their chunks from storage one at a time."""

from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
zarr = pytest.importorskip("zarr")

import ember  # noqa: E402
import ember.autodiff.numpy as xn  # noqa: E402
import ember.distributed as ed  # noqa: E402
from ember.distributed._chunked import ZarrRows, streamed_value_and_grad  # noqa: E402


def _loss(p, X, y):
    xp = X.__array_namespace__()
    z = X @ p["w"] + p["b"]
    return xp.sum(xp.logaddexp(xp.zeros_like(z), z) - y * z)


def _data(n=70, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) > 0.5).astype(np.float64)
    p = {"w": rng.standard_normal(d), "b": np.asarray(0.3)}
    return X, y, p


def _zarr_dataset(tmp_path, X, y, rows):
    path = str(tmp_path / "d.zarr")
    da.from_array(X, chunks=(rows, X.shape[1])).to_zarr(path, component="X")
    da.from_array(y, chunks=rows).to_zarr(path, component="y")
    return ed.Dataset.from_zarr(path, progress=False)


def _expected(p, X, y, rows=None):
    v, g = ember.value_and_grad(_loss)(p, xn.asarray(X), xn.asarray(y))
    return float(v), {k: np.asarray(g[k]._value if hasattr(g[k], "_value") else g[k]) for k in g}


@pytest.mark.parametrize("tasks", [None, 1, 3, 100])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_streamed_pass_equals_the_in_memory_gradient(tmp_path, tasks, reduce):
    X, y, p = _data()
    ds = _zarr_dataset(tmp_path, X, y, rows=16)  # 5 chunks, the last one short
    assert ds.readers is not None and len(ds.chunks) == 5
    with dask.config.set(scheduler="threads"):
        v, g = ds.value_and_grad(_loss, p, reduce=reduce, tasks=tasks)
    ev, eg = _expected(p, X, y)
    scale = 1 / len(X) if reduce == "mean" else 1
    np.testing.assert_allclose(float(v), ev * scale, rtol=1e-12)
    for k in p:
        np.testing.assert_allclose(np.asarray(g[k]), eg[k] * scale, rtol=1e-12, atol=1e-14)


def test_streamed_pass_over_some_chunks_in_any_order(tmp_path):
    X, y, p = _data()
    ds = _zarr_dataset(tmp_path, X, y, rows=16)
    rows = np.concatenate([np.arange(48, 64), np.arange(0, 16)])  # chunks 3 then 0
    with dask.config.set(scheduler="sync"):
        v, g = ds.value_and_grad(_loss, p, chunks=[3, 0], tasks=2)
    ev, eg = _expected(p, X[rows], y[rows])
    np.testing.assert_allclose(float(v), ev, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g["w"]), eg["w"], rtol=1e-12)


def test_streamed_and_chunked_passes_agree(tmp_path):
    """The same Dataset over dask arrays (one task per chunk) and over zarr (streamed)."""
    X, y, p = _data(n=64)
    zds = _zarr_dataset(tmp_path, X, y, rows=16)
    dds = ed.Dataset(da.from_array(X, chunks=(16, 5)), da.from_array(y, chunks=16), progress=False)
    assert dds.readers is None
    with dask.config.set(scheduler="threads"):
        zv, zg = zds.value_and_grad(_loss, p, reduce="mean")
        dv, dg = dds.value_and_grad(_loss, p, reduce="mean", tasks=3)  # (tasks: ignored here)
    np.testing.assert_allclose(float(zv), float(dv), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(zg["w"]), np.asarray(dg["w"]), rtol=1e-12)


def test_a_task_holds_one_range_at_a_time():
    """Each task reads its ranges in order and the features of a range are gone before the
    next range is read; the labels (5x smaller rows here) are read ahead over the next
    contiguous ranges, up to the bytes of one range of features."""
    import weakref

    X, y, p = _data(n=40)
    seen, alive = [], []

    class Rows:
        def __init__(self, a, name):
            self.a, self.name = a, name

        def read(self, start, stop):
            held = [rng for ref, rng in alive if ref() is not None and rng[0] != start]
            assert not held, f"features of {held} still alive when reading {(start, stop)}"
            seen.append((self.name, start, stop))
            out = self.a[start:stop].copy()
            if self.name == "X":
                alive.append((weakref.ref(out), (start, stop)))
            return out

    ranges = [(0, 10), (10, 20), (20, 30), (30, 40)]
    with dask.config.set(scheduler="sync"):
        v, g = streamed_value_and_grad(_loss, p, [Rows(X, "X"), Rows(y, "y")], ranges, tasks=1)
    # labels: 8 bytes a row against 40, so one read of 50 rows at most (400 bytes)
    assert seen == [("X", 0, 10), ("y", 0, 10), ("X", 10, 20), ("y", 10, 40), ("X", 20, 30), ("X", 30, 40)]
    ev, eg = _expected(p, X, y)
    np.testing.assert_allclose(float(v), ev, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g["w"]), eg["w"], rtol=1e-12)


def test_read_ahead_stops_at_a_gap_between_ranges():
    X, y, p = _data(n=40)
    seen = []

    class Rows:
        def __init__(self, a, name):
            self.a, self.name = a, name

        def read(self, start, stop):
            seen.append((self.name, start, stop))
            return self.a[start:stop]

    ranges = [(30, 40), (0, 10), (10, 20)]  # shuffled chunks: (0, 10) does not follow (30, 40)
    with dask.config.set(scheduler="sync"):
        v, g = streamed_value_and_grad(_loss, p, [Rows(X, "X"), Rows(y, "y")], ranges, tasks=1)
    assert [r for r in seen if r[0] == "y"] == [("y", 30, 40), ("y", 0, 20)]
    rows = np.r_[30:40, 0:20]
    ev, eg = _expected(p, X[rows], y[rows])
    np.testing.assert_allclose(float(v), ev, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g["w"]), eg["w"], rtol=1e-12)


def test_zarr_rows_reads_a_row_range(tmp_path):
    X, _, _ = _data(n=30)
    z = zarr.open_array(str(tmp_path / "a.zarr"), mode="w", shape=X.shape, chunks=(7, 5), dtype=X.dtype)
    z[:] = X
    np.testing.assert_array_equal(ZarrRows(z).read(5, 19), X[5:19])


def test_streamed_pass_rejects_a_bad_reduce(tmp_path):
    X, y, p = _data()
    ds = _zarr_dataset(tmp_path, X, y, rows=16)
    with pytest.raises(ValueError, match="reduce must be 'sum' or 'mean'"):
        ds.value_and_grad(_loss, p, reduce="max")


def _trim_threshold():
    with ember.config() as current:
        return current["malloc_trim_threshold"]


def test_tasks_keep_freed_memory_only_while_they_run_in_a_worker(monkeypatch):
    from ember.distributed import _chunked

    keep_freed = _chunked._KeepFreed()
    released = []
    monkeypatch.setattr(keep_freed, "_release", lambda: released.append(1))
    monkeypatch.setattr(_chunked, "_in_worker", lambda: True)
    assert _trim_threshold() is None
    with keep_freed() as keep:
        assert released == [1]  # the first task hands back what earlier tasks left freed
        keep(3 << 20)
        assert _trim_threshold() == 3 << 20
        with keep_freed() as inner:  # a second task in another thread of the worker
            inner(5 << 20)
            assert _trim_threshold() == 5 << 20
        assert _trim_threshold() == 5 << 20  # until the last task ends
    assert _trim_threshold() is None and released == [1]

    with ember.config(malloc_trim_threshold=1 << 20):  # the user's own setting stays
        with keep_freed() as keep:
            keep(3 << 20)
            assert _trim_threshold() == 1 << 20
        assert _trim_threshold() == 1 << 20

    monkeypatch.setattr(_chunked, "_in_worker", lambda: False)  # the user's process: untouched
    with keep_freed() as keep:
        keep(3 << 20)
        assert _trim_threshold() is None


def test_a_worker_near_its_pause_threshold_keeps_nothing(monkeypatch):
    from ember.distributed import _chunked

    keep_freed = _chunked._KeepFreed()
    released = []
    monkeypatch.setattr(keep_freed, "_release", lambda: released.append(1))
    monkeypatch.setattr(_chunked, "_in_worker", lambda: True)
    near = [False]
    monkeypatch.setattr(_chunked, "_near_limit", lambda near_at: near[0])
    with keep_freed() as keep:
        keep(3 << 20)
        assert _trim_threshold() == 3 << 20 and released == [1]
        near[0] = True  # memory rose: what was kept goes back, and nothing more is kept
        keep(3 << 20)
        assert _trim_threshold() is None and released == [1]
        for _ in range(2 * _chunked._TRIM_EVERY):  # still near: what is freed goes back every few
            keep(3 << 20)
        assert released == [1, 1, 1]
        near[0] = False
        keep(4 << 20)
        assert _trim_threshold() is None
    assert _trim_threshold() is None
    with keep_freed() as keep:  # a later task, with memory to spare again, keeps
        keep(3 << 20)
        assert _trim_threshold() == 3 << 20
    assert _trim_threshold() is None
