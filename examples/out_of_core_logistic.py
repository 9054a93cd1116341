"""Out-of-core training on Dask: logistic regression and a small MLP, full-batch gradients.

The data set (float32 features, 0/1 labels) is written to zarr on disk,
chunk by chunk, and is larger in total than the memory the Dask workers are
allowed (``--memory-limit``, for all workers together). Training never loads
it: every full-batch gradient is one pass in which each worker reads one row
chunk, computes the loss gradient on it with ember (parameters are NumPy,
shipped to the workers), and partial gradients are summed in a tree
(``ember.distributed.chunked_value_and_grad``). Accuracy of both models is
computed lazily with the *same* model code on ``ember.autodiff.dask`` and
evaluated in one ``ember.compute`` call (the features are read once for both).

Reports: throughput of the gradient passes (GB of data per second), accuracy,
and peak resident memory of any worker (sampled from the cluster) against the
per-worker limit.

    python examples/out_of_core_logistic.py --quick          # CI: ~20 MB, a few seconds
    python examples/out_of_core_logistic.py                  # 8 GB on disk, workers 2 x 1 GB
    python examples/out_of_core_logistic.py --size-gb 3.2 --memory-limit 300MiB --epochs 2
                                             # 10x the memory of 2 workers of 150 MiB
    python examples/out_of_core_logistic.py --size-gb 4 --memory-limit 1GB --workers 2
    python examples/out_of_core_logistic.py --scheduler threads --quick  # no cluster
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# One BLAS thread per task: Dask already runs one task per core, and a
# multithreaded BLAS under it oversubscribes the cores (10-50x slower here).
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

NEEDS_DASK = ('this example needs the dask extra ({missing} is not installed): '
              'pip install -e ".[dask]" in the ember checkout')
try:
    import dask  # noqa: E402
    import dask.array as da  # noqa: E402
    import zarr  # noqa: E402,F401  (the data set is written to and read from zarr)
except ImportError as _e:
    sys.exit(NEEDS_DASK.format(missing=_e.name or "dask"))

import ember  # noqa: E402
import ember.autodiff.dask as xd  # noqa: E402
import ember.distributed as ed  # noqa: E402
from ember._compute import compute  # noqa: E402  (ember.compute once re-exported)


# ----------------------------------------------------------------------------- models
# Written against the array API only: the same functions run on NumPy blocks
# (inside the workers) and on lazy dask tensors (accuracy below).
def logistic_logits(p, X):
    return X @ p["w"] + p["b"]


def mlp_logits(p, X):
    xp = X.__array_namespace__()
    return xp.tanh(X @ p["W1"] + p["b1"]) @ p["w2"] + p["b2"]


def _bce_sum(z, y):
    xp = z.__array_namespace__()
    return xp.sum(xp.logaddexp(xp.zeros_like(z), z) - y * z)


def logistic_loss(p, X, y):
    """Sum over the rows of a block of the logistic loss."""
    return _bce_sum(logistic_logits(p, X), y)


def mlp_loss(p, X, y):
    return _bce_sum(mlp_logits(p, X), y)


def accuracy(logits, p, X, y):
    xp = X.__array_namespace__()
    z = logits(p, X)
    return xp.mean(xp.astype((z > 0.0) == (y > 0.5), z.dtype))


# ----------------------------------------------------------------------------- data
def _labels(block, w_true, seed):
    rng = np.random.default_rng([seed, int(abs(block[0, 0]) * 1e6)])
    z = block @ w_true + rng.logistic(size=len(block)).astype(np.float32) * 0.5
    return (z > 0).astype(np.float32)


def write_dataset(path: str, n: int, d: int, rows: int, seed: int = 0) -> None:
    """Write X (n, d) float32 and y (n,) to a zarr group, chunked by ``rows`` rows."""
    rng = da.random.default_rng(seed)
    X = rng.standard_normal((n, d), chunks=(rows, d), dtype=np.float32)
    w_true = (np.random.default_rng(seed + 1).standard_normal(d) * 2 / np.sqrt(d)).astype(np.float32)
    y = X.map_blocks(_labels, w_true, seed, drop_axis=1, dtype=np.float32)
    # random floats do not compress; skip the CPU cost
    kw = {"compressors": None} if int(zarr.__version__.split(".")[0]) >= 3 else {"compressor": None}
    dask.compute(
        X.to_zarr(path, component="X", compute=False, overwrite=True, **kw),
        y.to_zarr(path, component="y", compute=False, overwrite=True, **kw),
    )


# ----------------------------------------------------------------------------- training
def train(name, loss, params, ds, epochs, lr, momentum=0.9):
    """Full-batch gradient descent with momentum; returns params and seconds per pass."""
    vel = {k: np.zeros_like(v) for k, v in params.items()}
    times = []
    for e in range(epochs):
        t0 = time.perf_counter()
        value, g = ds.value_and_grad(loss, params, reduce="mean")
        times.append(time.perf_counter() - t0)
        for k in params:
            vel[k] = momentum * vel[k] - lr * g[k]
            params[k] = (params[k] + vel[k]).astype(params[k].dtype)
        print(f"  {name} epoch {e + 1}/{epochs}: loss {float(value):.4f}  ({times[-1]:.2f} s)", flush=True)
    return params, times


def _gb(b: float) -> float:
    return b / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small data (CI smoke run)")
    ap.add_argument("--size-gb", type=float, default=8.0, help="size of X on disk (default 8)")
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--chunk-mb", type=float, default=None,
                    help="size of one row chunk of X (default: from the worker memory limit, "
                         "ember.distributed.chunk_bytes)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="2GB", help="memory of ALL workers together")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--path", default=None, help="zarr directory (default: a temp dir, removed)")
    ap.add_argument("--scheduler", choices=["cluster", "threads"], default="cluster")
    args = ap.parse_args(argv)
    if args.quick:
        args.size_gb, args.features, args.epochs = 0.02, 16, 3
        if args.memory_limit == "2GB":
            args.memory_limit = "1GB"

    d = args.features
    n = int(args.size_gb * 1e9 / (4 * d))
    tmp = None
    path = args.path
    if path is None:
        tmp = tempfile.mkdtemp(prefix="ember-ooc-")
        path = os.path.join(tmp, "data.zarr")

    total_limit = dask.utils.parse_bytes(args.memory_limit)
    per_worker = total_limit // args.workers
    # one row chunk of X: a small share of what a worker may hold beyond its own code
    chunk = args.chunk_mb * 1e6 if args.chunk_mb else ed.chunk_bytes(per_worker)
    rows = max(1, int(chunk / (4 * d)))
    with contextlib.ExitStack() as stack:
        if tmp is not None:
            stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        mon = None
        if args.scheduler == "cluster":
            # Dask pauses a worker at 80% of its limit; a worker's own code takes ~110 MiB, so
            # small workers (150 MiB) would sit paused forever: pause at 92% (restart: 95%)
            stack.enter_context(dask.config.set({"distributed.worker.memory.pause": 0.92}))
            client = stack.enter_context(
                ed.client(n_workers=args.workers, threads_per_worker=1, memory_limit=per_worker)
            )
            mon = stack.enter_context(ed.MemoryMonitor(client, interval=0.25))
            pids = set(client.run(os.getpid).values())  # a restarted worker gets a new pid
            print(f"cluster: {args.workers} worker processes x {per_worker / 2**20:.0f} MiB "
                  f"(total {total_limit / 2**30:.2f} GiB)")
        else:
            print("scheduler: dask threads (no cluster)")

        t0 = time.perf_counter()
        write_dataset(path, n, d, rows)
        ds = ed.Dataset.from_zarr(path, ("X", "y"), progress=False)
        print(f"data: X {n} x {d} float32 = {_gb(ds.arrays[0].nbytes):.2f} GB on disk in "
              f"{len(ds.chunks)} chunks of {rows} rows; written in {time.perf_counter() - t0:.1f} s")

        rng = np.random.default_rng(0)
        lr_params = {"w": np.zeros(d, np.float32), "b": np.zeros((), np.float32)}
        h = 32
        mlp_params = {
            "W1": (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32),
            "b1": np.zeros(h, np.float32),
            "w2": (rng.standard_normal(h) / np.sqrt(h)).astype(np.float32),
            "b2": np.zeros((), np.float32),
        }
        lr_params, t_lr = train("logistic", logistic_loss, lr_params, ds, args.epochs, lr=1.0)
        mlp_params, t_mlp = train("mlp", mlp_loss, mlp_params, ds, args.epochs, lr=1.0)

        # accuracy of each model: the same model code on lazy dask tensors, one pass each (one
        # graph for both would keep every chunk's labels until both models had read them)
        X = xd.asarray(ds.arrays[0])
        y = xd.asarray(ds.arrays[1])
        acc = {
            "logistic": compute(accuracy(logistic_logits, {k: xd.asarray(v) for k, v in lr_params.items()}, X, y)),
            "mlp": compute(accuracy(mlp_logits, {k: xd.asarray(v) for k, v in mlp_params.items()}, X, y)),
        }

        data_bytes = ds.nbytes
        for name, ts in (("logistic", t_lr), ("mlp", t_mlp)):
            best = min(ts)
            print(f"{name}: accuracy {float(acc[name]):.4f}; gradient pass {best:.2f} s "
                  f"(best of {len(ts)}) = {_gb(data_bytes) / best:.2f} GB/s")
        if mon is not None:
            mon.sample()
            limit = mon.limit
            restarts = len(set(client.run(os.getpid).values()) - pids)
            ok = (limit is None or mon.peak < limit) and restarts == 0
            print(f"worker restarts: {restarts}")
            print(f"peak worker memory: {mon.peak / 2**20:.0f} MiB (limit per worker "
                  f"{(limit or 0) / 2**20:.0f} MiB; {mon.samples} samples) -> "
                  f"{'under the limit' if ok else 'OVER THE LIMIT'}; data / total worker memory = "
                  f"{data_bytes / total_limit:.1f}x")
            if not ok:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
