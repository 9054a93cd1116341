"""Full-batch gradient throughput: ember on Dask vs the same computation on in-memory NumPy.

Workload: value and gradient of the summed logistic loss (and of a
64-32-1 tanh MLP) over a float32 data set that fits in memory (default
400,000 x 64 = 102 MB, 8 row chunks). Implementations, timed interleaved in
one run by ``_harness``:

- ``numpy``: ``ember.value_and_grad`` on ``ember.autodiff.numpy`` over the
  whole in-memory arrays (the reference);
- ``ember-dask``: ``ember.distributed.chunked_value_and_grad`` (one task per
  chunk, NumPy parameters, Dask data) on Dask's threaded scheduler (one
  thread per core);
- ``ember-dask-1thread``: the same on the synchronous scheduler, i.e. the
  same single core as ``numpy`` (the cost of chunking alone);
- ``ember-dask-lazy``: the whole loss and gradient as one lazy graph on
  ``ember.autodiff.dask``, evaluated with one ``ember.compute``.

BLAS runs single-threaded in every implementation (harness convention).
The acceptance target is ``numpy / ember-dask`` time >= 0.5 (at least half
of NumPy's throughput); the extra ratios print it, and GB/s are printed
below the tables.

Run: ``python benchmarks/dask_throughput.py [--quick]`` or ``benchmarks/run dask_throughput``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from _harness import Skip, Workload, configure_env, ensure_src_on_path, optional_import, reexec_clean_env, run_cli

N, D, H, CHUNKS = 400_000, 64, 32, 8


def logistic_loss(p: Any, X: Any, y: Any) -> Any:
    xp = X.__array_namespace__()
    z = X @ p["w"] + p["b"]
    return xp.sum(xp.logaddexp(xp.zeros_like(z), z) - y * z)


def mlp_loss(p: Any, X: Any, y: Any) -> Any:
    xp = X.__array_namespace__()
    z = xp.tanh(X @ p["W1"] + p["b1"]) @ p["w2"] + p["b2"]
    return xp.sum(xp.logaddexp(xp.zeros_like(z), z) - y * z)


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, D), dtype=np.float32)
    y = (X @ rng.standard_normal(D).astype(np.float32) > 0).astype(np.float32)
    return X, y


def _params(model: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    if model == "logistic":
        return {"w": (rng.standard_normal(D) * 0.1).astype(np.float32), "b": np.zeros((), np.float32)}
    return {
        "W1": (rng.standard_normal((D, H)) / 8).astype(np.float32),
        "b1": np.zeros(H, np.float32),
        "w2": (rng.standard_normal(H) / 6).astype(np.float32),
        "b2": np.zeros((), np.float32),
    }


def _ember():
    ensure_src_on_path()
    try:
        import ember
        import ember.autodiff.numpy as xn
        import ember.distributed as ed
    except Exception as exc:  # noqa: BLE001
        raise Skip(f"ember not ready: {exc}") from exc
    return ember, xn, ed


def workloads(n: int) -> list[Workload]:
    X, y = _data(n)
    gb = (X.nbytes + y.nbytes) / 1e9
    out = []
    for model, loss in (("logistic", logistic_loss), ("mlp", mlp_loss)):
        params = _params(model)

        def setup_numpy(loss=loss, params=params):
            ember, xn, _ = _ember()
            Xt, yt = xn.asarray(X), xn.asarray(y)
            vg = ember.value_and_grad(loss)
            return lambda: vg(params, Xt, yt)

        def setup_dask(scheduler, loss=loss, params=params):
            def setup():
                da = optional_import("dask.array")
                dask = optional_import("dask")
                _, _, ed = _ember()
                rows = -(-n // CHUNKS)
                Xd, yd = da.from_array(X, chunks=(rows, D)), da.from_array(y, chunks=rows)

                def run():
                    with dask.config.set(scheduler=scheduler):
                        return ed.chunked_value_and_grad(loss, params, Xd, yd)

                return run

            return setup

        def setup_lazy(loss=loss, params=params):
            da = optional_import("dask.array")
            dask = optional_import("dask")
            ember, _, _ = _ember()
            import ember.autodiff.dask as xd
            from ember._compute import compute

            rows = -(-n // CHUNKS)
            Xd = xd.asarray(da.from_array(X, chunks=(rows, D)))
            yd = xd.asarray(da.from_array(y, chunks=rows))
            pd = {k: xd.asarray(v) for k, v in params.items()}
            vg = ember.value_and_grad(loss)

            def run():
                with dask.config.set(scheduler="threads"):
                    return compute(vg(pd, Xd, yd))

            return run

        out.append(
            Workload(
                name=f"dask_throughput_{model}",
                unit="ms/pass",
                description=f"full-batch value+grad, {model}, float32 {n}x{D} ({gb * 1e3:.0f} MB), {CHUNKS} chunks",
                impls={
                    "numpy": setup_numpy,
                    "ember-dask": setup_dask("threads"),
                    "ember-dask-1thread": setup_dask("sync"),
                    "ember-dask-lazy": setup_lazy,
                },
                reference="numpy",
                warmup=1,
                ratios=[("numpy", "ember-dask"), ("numpy", "ember-dask-1thread"), ("numpy", "ember-dask-lazy")],
            )
        )
    return out


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    quick = "--quick" in sys.argv[1:]
    n = N // 8 if quick else N
    X_bytes = n * (D + 1) * 4
    results = run_cli(workloads(n), sys.argv[1:], description=__doc__.splitlines()[0])
    for res in results:
        for name, r in res.impls.items():
            if r.median:
                print(f"{res.workload.name} {name}: {X_bytes / 1e9 / (r.median / 1e3):.2f} GB/s")
        print(f"{res.workload.name}: throughput ember-dask / numpy = "
              f"{(res.extra_ratios.get('numpy / ember-dask') or float('nan')):.2f} (target >= 0.5)")
