"""ember.distributed.fit: data-parallel training on a LocalCluster of processes that loses a worker."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import ember.autodiff.numpy as xn  # noqa: E402,F401
import ember.distributed as ed  # noqa: E402
import ember.optim as optim  # noqa: E402


def _squares_loss(params, X, y):
    """Least squares on small integer data: every sum is exact, so the result is bitwise
    the same whichever worker computes a chunk."""
    xp = X.__array_namespace__()
    r = X @ params["w"] + params["b"] - y
    return xp.sum(r * r)


def _slow_loss(params, X, y):
    time.sleep(0.1)  # long enough that a kill lands while chunk tasks run
    return _squares_loss(params, X, y)


def _data():
    rng = np.random.default_rng(5)
    X = rng.integers(-4, 5, (192, 6)).astype(np.float64)
    y = X @ np.array([1.0, -1.0, 2.0, 0.0, 1.0, -2.0]) + 1.0  # learnable, still integers
    return da.from_array(X, chunks=(16, 6)), da.from_array(y, chunks=16)  # 12 chunks


def _params():
    return {"w": np.zeros(6), "b": np.zeros(())}


def _dataset(source, tmp_path):
    """The data as dask arrays (one task per chunk) or written to zarr (streamed passes)."""
    X, y = _data()
    if source == "zarr":
        pytest.importorskip("zarr")
        path = str(tmp_path / "data.zarr")
        if not os.path.exists(path):
            X.to_zarr(path, component="X")
            y.to_zarr(path, component="y")
        return ed.Dataset.from_zarr(path, shuffle=True, seed=3, progress=False)
    return ed.Dataset(X, y, shuffle=True, seed=3, progress=False)


def _fit(loss, source="dask", tmp_path=None, **kw):
    ds = _dataset(source, tmp_path)
    # 64 rows a step and a learning rate that are powers of two: over these 3 steps every
    # value stays exact in float64, so any worker computing any chunk gives the same bits
    return ed.fit(loss, _params(), ds, optim.SGD(2.0 ** -5), epochs=1, chunks_per_step=4,
                  reduce="mean", **kw)


@pytest.mark.parametrize("source", ["dask", "zarr"])
def test_fit_survives_a_killed_worker_with_the_same_result(tmp_path, source):
    expected = _fit(_squares_loss, source, tmp_path)  # undisturbed, Dask's threads in this process
    assert expected.steps == 3 and expected.losses[-1] < expected.losses[0]
    killed = []

    with ed.client(n_workers=2, threads_per_worker=1, memory_limit="400MB") as c:
        assert all(a.startswith("tcp://127.0.0.1:") for a in c.scheduler_info()["workers"])
        pids = c.run(os.getpid)

        def kill_soon(step, loss):
            if step == 1:  # mid-epoch (3 steps an epoch): kill while step 2's chunks run
                def kill():
                    time.sleep(0.15)
                    addr, pid = sorted(pids.items())[0]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                threading.Thread(target=kill, daemon=True).start()

        got = _fit(_slow_loss, source, tmp_path, callback=kill_soon,
                   checkpoint=str(tmp_path / "ck.safetensors"))
        deadline = time.time() + 30
        while time.time() < deadline and len(c.scheduler_info()["workers"]) < 2:
            time.sleep(0.1)  # the nanny restarts the killed worker
        now = set(c.run(os.getpid).values())
    assert killed and killed[0] not in now  # the worker process really died
    assert got.steps == expected.steps and got.losses == expected.losses
    for k in expected.params:
        np.testing.assert_array_equal(got.params[k], expected.params[k])


def test_fit_resumes_from_its_checkpoint(tmp_path):
    ck = str(tmp_path / "ck.safetensors")
    full = _fit(_squares_loss)

    class Stop(Exception):
        pass

    def stop_at_2(step, loss):
        if step == 2:
            raise Stop  # the client dies after step 2's checkpoint

    with pytest.raises(Stop):
        _fit(_squares_loss, checkpoint=ck, callback=stop_at_2)
    resumed = _fit(_squares_loss, checkpoint=ck)
    assert resumed.resumed_from == 2 and resumed.steps == 3
    assert resumed.losses == full.losses
    for k in full.params:
        np.testing.assert_array_equal(resumed.params[k], full.params[k])


def test_fit_rejects_bad_options():
    X, y = _data()
    ds = ed.Dataset(X, y, progress=False)
    with pytest.raises(ValueError, match="chunks_per_step"):
        ed.fit(_squares_loss, _params(), ds, optim.SGD(0.1), chunks_per_step=0)
    with pytest.raises(ValueError, match="epochs"):
        ed.fit(_squares_loss, _params(), ds, optim.SGD(0.1), epochs=-1)
