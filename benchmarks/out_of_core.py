"""Out-of-core gradient throughput: zarr data 10x the cluster's memory against in-memory NumPy.

Workload (issue 38): the full-batch value and gradient of the summed logistic
loss over float32 data (``--size-gb``, default 3.2 GB, 64 features: 10x the cluster's memory) written
to zarr in a temporary directory, on a ``LocalCluster`` of 2 worker processes
of 150 MiB each (``--workers``, ``--memory-mb``), chunked by
``ember.distributed.chunk_bytes`` of that limit. Implementations, timed
interleaved in one run by ``_harness``:

- ``numpy``: ``ember.value_and_grad`` on ``ember.autodiff.numpy`` over an
  in-memory copy of 1/12 of the rows, run 12 times: the same bytes and
  model as one pass, on one core, with nothing read from disk (the reference);
- ``ember-zarr``: ``Dataset.from_zarr(...).value_and_grad``, the streamed pass
  on the cluster (each task reads its chunks from zarr, one at a time).

The ratio ``numpy / ember-zarr`` of times is the throughput of the
out-of-core pass as a fraction of in-memory NumPy's (issue 38's target:
>= 0.5). Below the table: GB/s of both, worker restarts and peak worker
memory (sampled every 0.1 s) against the limit.

Run: ``python benchmarks/out_of_core.py [--quick] [--size-gb 3.2]``
(``--quick``: 0.1 GB, 3 rounds). Needs the ``dask`` extra.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np
from _harness import Skip, Workload, configure_env, ensure_src_on_path, optional_import, reexec_clean_env, run_cli
from dask_throughput import D, logistic_loss

REPEATS = 12  # the NumPy reference: 1/REPEATS of the rows in memory, REPEATS passes


def _labels(block: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (block @ w > 0).astype(np.float32)


class _Setup:
    """The data set and the cluster, made once for both implementations and closed at exit."""

    def __init__(self, size_gb: float, workers: int, memory_mb: int):
        self.size_gb, self.workers, self.limit = size_gb, workers, memory_mb * 2**20
        self.ds = None
        self.report: dict[str, Any] = {}

    def get(self):
        if self.ds is not None:
            return self
        dask = optional_import("dask")
        da = optional_import("dask.array")
        optional_import("zarr")
        optional_import("distributed")
        ensure_src_on_path()
        import ember.distributed as ed

        stack = contextlib.ExitStack()
        atexit.register(stack.close)
        tmp = tempfile.mkdtemp(prefix="ember-ooc-bench-")
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        n = int(self.size_gb * 1e9 / (4 * D))
        rows = max(1, ed.chunk_bytes(self.limit) // (4 * D))
        rng = da.random.default_rng(0)
        X = rng.standard_normal((n, D), chunks=(rows, D), dtype=np.float32)
        w = np.random.default_rng(1).standard_normal(D).astype(np.float32)
        y = X.map_blocks(_labels, w, drop_axis=1, dtype=np.float32)
        path = os.path.join(tmp, "data.zarr")
        kw = {"compressors": None}  # random floats do not compress
        with dask.config.set(scheduler="threads"):  # (written here: the passes are measured)
            dask.compute(X.to_zarr(path, component="X", compute=False, **kw),
                         y.to_zarr(path, component="y", compute=False, **kw))
        # Dask pauses a worker at 80% of its limit, below a 150 MiB worker's own baseline
        stack.enter_context(dask.config.set({"distributed.worker.memory.pause": 0.92}))
        self.client = stack.enter_context(
            ed.client(n_workers=self.workers, threads_per_worker=1, memory_limit=self.limit))
        self.monitor = stack.enter_context(ed.MemoryMonitor(self.client, interval=0.1))
        self.pids = set(self.client.run(os.getpid).values())
        self.ds = ed.Dataset.from_zarr(path, ("X", "y"), progress=False)
        self.report.update(n=n, rows=rows, chunks=len(self.ds.chunks), nbytes=self.ds.nbytes)
        return self

    def restarts(self) -> int:
        return len(set(self.client.run(os.getpid).values()) - self.pids)


def workloads(setup: _Setup) -> list[Workload]:
    params = {"w": (np.random.default_rng(2).standard_normal(D) * 0.1).astype(np.float32),
              "b": np.zeros((), np.float32)}

    def setup_numpy():
        s = setup.get()
        ensure_src_on_path()
        import ember
        import ember.autodiff.numpy as xn

        m = s.report["n"] // REPEATS
        X, y = (xn.asarray(r.read(0, m)) for r in s.ds.readers)  # (read here, not by the workers)
        s.report["numpy_bytes"] = REPEATS * m * (D + 1) * 4
        vg = ember.value_and_grad(logistic_loss)

        def run():
            for _ in range(REPEATS):
                out = vg(params, X, y)
            return out

        return run

    def setup_zarr():
        s = setup.get()
        return lambda: s.ds.value_and_grad(logistic_loss, params)

    return [Workload(
        name="out_of_core_logistic", unit="s/pass",
        description=(f"logistic value+grad, float32 zarr {setup.size_gb:g} GB, {setup.workers} workers x "
                     f"{setup.limit // 2**20} MiB, vs in-memory NumPy on the same bytes"),
        impls={"numpy": setup_numpy, "ember-zarr": setup_zarr}, reference="numpy", warmup=1,
        ratios=[("numpy", "ember-zarr")])]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--size-gb", type=float, default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-mb", type=int, default=150)
    own, rest = ap.parse_known_args(argv)
    quick = "--quick" in rest
    size = own.size_gb if own.size_gb is not None else (0.1 if quick else 3.2)
    setup = _Setup(size, own.workers, own.memory_mb)
    try:
        (res,) = run_cli(workloads(setup), rest, description=__doc__.splitlines()[0])
    except Skip as exc:
        print(f"out_of_core: skipped ({exc})")
        return 0
    r = setup.report
    for name, nbytes in (("numpy", r.get("numpy_bytes")), ("ember-zarr", r.get("nbytes"))):
        med = res.impls[name].median if name in res.impls else None
        if med and nbytes:
            print(f"{name}: {nbytes / 1e9 / med:.2f} GB/s")
    if setup.ds is not None:
        setup.monitor.sample()
        print(f"data: {r['nbytes'] / 1e9:.2f} GB in {r['chunks']} chunks of {r['rows']} rows = "
              f"{r['nbytes'] / (setup.workers * setup.limit):.1f}x the cluster's memory; worker restarts: "
              f"{setup.restarts()}; peak worker memory {setup.monitor.peak / 2**20:.0f} MiB of "
              f"{setup.limit / 2**20:.0f} ({setup.monitor.samples} samples)")
    ratio = res.extra_ratios.get("numpy / ember-zarr")
    print(f"throughput ember-zarr / numpy = {(ratio or float('nan')):.2f} (target >= 0.5)")
    return 0


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    sys.exit(main(sys.argv[1:]))
