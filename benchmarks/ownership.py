"""Buffer reuse with ``ember.consume``: time and memory of memory-bound inference.

Why: on large arrays an elementwise op costs about one pass over memory, and
a fresh 200 MB result buffer (page faults, cache misses, a second buffer
alive at the peak) costs as much again. ``ember.consume(x)`` lets the op
write its result into x's buffer. This script checks the acceptance numbers
of the ownership layer in one process run:

1. ``chain``: 10 elementwise ops on a 50M float32 array (200 MB) at
   inference. Implementations: NumPy with fresh results, NumPy with
   ``out=`` (hand-written in place), ember without consume, ember with
   consume. Reported: median time over rounds (interleaved), tracemalloc
   peak during the chain (in 200 MB buffers), and the number of fresh result
   buffers (an op whose result is not the array it consumed).
   Targets: ember-consume allocates no buffer after the first, is >= 2x
   faster than ember-fresh, and within 1.15x of numpy-out.
2. ``mlp``: a 784-256-256-10 ReLU MLP inference pass (batch 1024, float32)
   with and without consume. Reported: bytes allocated per pass, the sum
   over ops of tracemalloc's peak growth during each op. Target: >= 40% fewer.

Run: ``benchmarks/run ownership [--quick]`` or ``python benchmarks/ownership.py``.
Results: a table on stdout and ``benchmarks/results/ownership.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
from _harness import configure_env, ensure_src_on_path, reexec_clean_env

N = 50_000_000
BATCH = 1024


# --------------------------------------------------------------------------- #
# the chain: 10 elementwise ops, values stay bounded
# --------------------------------------------------------------------------- #
def numpy_fresh(x: np.ndarray) -> np.ndarray:
    y = np.sin(x)
    y = y * np.float32(0.5)
    y = y + np.float32(1.0)
    y = np.sqrt(y)
    y = np.cos(y)
    y = y * y
    y = y - np.float32(0.25)
    y = np.tanh(y)
    y = np.exp(y)
    y = np.negative(y)
    return y


def numpy_out(x: np.ndarray) -> np.ndarray:
    y = np.sin(x)
    np.multiply(y, np.float32(0.5), out=y)
    np.add(y, np.float32(1.0), out=y)
    np.sqrt(y, out=y)
    np.cos(y, out=y)
    np.multiply(y, y, out=y)
    np.subtract(y, np.float32(0.25), out=y)
    np.tanh(y, out=y)
    np.exp(y, out=y)
    np.negative(y, out=y)
    return y


def ember_fresh(xp: Any, x: Any) -> Any:
    y = xp.sin(x)
    y = y * 0.5
    y = y + 1.0
    y = xp.sqrt(y)
    y = xp.cos(y)
    y = y * y
    y = y - 0.25
    y = xp.tanh(y)
    y = xp.exp(y)
    y = -y
    return y


def ember_consume(xp: Any, x: Any, c: Callable, count: list | None = None) -> Any:
    def fresh(new, old_ptr):  # count results that are not in the consumed buffer
        if count is not None and _ptr(new) != old_ptr:
            count.append(1)
        return new

    y = xp.sin(x)
    if count is not None:
        count.append(1)
    r = _ptr(y) if count is not None else None  # an int: holding y.raw would block reuse
    y = fresh(c(y) * 0.5, r)
    y = fresh(c(y) + 1.0, r)
    y = fresh(xp.sqrt(c(y)), r)
    y = fresh(xp.cos(c(y)), r)
    y = fresh(xp.square(c(y)), r)
    y = fresh(c(y) - 0.25, r)
    y = fresh(xp.tanh(c(y)), r)
    y = fresh(xp.exp(c(y)), r)
    y = fresh(-c(y), r)
    del r
    return y


def _ptr(t: Any) -> int:
    return t.raw.__array_interface__["data"][0]


def _time(fn: Callable[[], Any]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    t = time.perf_counter() - t0
    del out
    return t


def _peak(fn: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    out = fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    del out
    return peak


# --------------------------------------------------------------------------- #
# MLP inference
# --------------------------------------------------------------------------- #
class _Meter:
    """Sum over ops of tracemalloc's peak growth: bytes allocated by each op."""

    def __init__(self) -> None:
        self.total = 0
        self.last = 0

    def start(self) -> None:
        tracemalloc.start()
        self.last = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()

    def tick(self) -> None:
        cur, peak = tracemalloc.get_traced_memory()
        self.total += max(0, peak - self.last)
        tracemalloc.reset_peak()
        self.last = tracemalloc.get_traced_memory()[0]

    def stop(self) -> None:
        tracemalloc.stop()


def mlp(xp: Any, x: Any, p: dict, c: Callable, tick: Callable[[], None]) -> Any:
    """Three layers ``relu(h @ w + b)`` (no ReLU on the last); ``c`` wraps each
    op's input that may be consumed, ``tick`` runs after every op."""
    h = x
    for i in (1, 2, 3):
        h = h @ p[f"w{i}"]
        tick()
        h = xp.add(c(h), p[f"b{i}"])
        tick()
        if i < 3:
            h = xp.maximum(c(h), 0.0)
            tick()
    return h


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5M elements, 3 rounds")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--results-dir", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)
    n = N // 10 if args.quick else N
    rounds = 3 if args.quick else args.rounds

    ensure_src_on_path()
    import ember
    import ember.autodiff.numpy as xp
    from ember.autodiff._ownership import consume

    consume_fn = getattr(ember, "consume", consume)
    x_np = np.random.default_rng(0).uniform(-1.0, 1.0, n).astype(np.float32)
    x = xp.asarray(x_np, copy=True)
    buf = x_np.nbytes

    impls: dict[str, Callable[[], Any]] = {
        "numpy-fresh": lambda: numpy_fresh(x_np),
        "numpy-out": lambda: numpy_out(x_np),
        "ember-fresh": lambda: ember_fresh(xp, x),
        "ember-consume": lambda: ember_consume(xp, x, consume_fn),
    }
    # correctness first: every implementation gives the same values
    ref = numpy_out(x_np)
    for name, fn in impls.items():
        v = fn()
        v = np.asarray(v.raw if hasattr(v, "raw") else v)
        if not np.allclose(v, ref, rtol=1e-5, atol=1e-6):
            print(f"{name}: WRONG VALUES", file=sys.stderr)
            return 1
        del v
    del ref
    count: list = []
    ember_consume(xp, x, consume_fn, count)
    fresh_buffers = {"ember-consume": len(count), "ember-fresh": 10, "numpy-fresh": 10, "numpy-out": 1}
    peaks = {name: _peak(fn) for name, fn in impls.items()}

    samples: dict[str, list[float]] = {k: [] for k in impls}
    names = list(impls)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            samples[name].append(_time(impls[name]))
    med = {k: statistics.median(v) for k, v in samples.items()}

    print(f"ownership chain: 10 elementwise ops on {n:,} float32 ({buf / 1e6:.0f} MB), "
          f"median of {rounds} rounds")
    print(f"  {'impl':<16}{'median s':>10}{'min s':>9}{'max s':>9}{'peak (buffers)':>16}{'fresh results':>15}")
    for k in names:
        print(f"  {k:<16}{med[k]:>10.3f}{min(samples[k]):>9.3f}{max(samples[k]):>9.3f}"
              f"{peaks[k] / buf:>16.2f}{fresh_buffers[k]:>15d}")
    speedup = med["ember-fresh"] / med["ember-consume"]
    vs_out = med["ember-consume"] / med["numpy-out"]
    print(f"  ratio ember-fresh / ember-consume: {speedup:.2f}x (target >= 2)")
    print(f"  ratio ember-consume / numpy-out:   {vs_out:.2f}x (target <= 1.15)")

    # ---- MLP inference --------------------------------------------------
    rng = np.random.default_rng(1)
    sizes = [784, 256, 256, 10]
    p = {}
    for i in range(3):
        p[f"w{i + 1}"] = xp.asarray(rng.standard_normal((sizes[i], sizes[i + 1]), dtype=np.float32) * 0.05)
        p[f"b{i + 1}"] = xp.asarray(np.zeros(sizes[i + 1], np.float32))
    xb = xp.asarray(rng.standard_normal((BATCH, 784), dtype=np.float32))
    bytes_ = {}
    outs = {}
    for name, c in (("ember-fresh", lambda t: t), ("ember-consume", consume_fn)):
        gc.collect()
        m = _Meter()
        m.start()
        outs[name] = np.asarray(mlp(xp, xb, p, c, m.tick).raw)
        m.stop()
        bytes_[name] = m.total
    same = bool(np.allclose(outs["ember-fresh"], outs["ember-consume"]))
    saved = 1 - bytes_["ember-consume"] / bytes_["ember-fresh"]
    print(f"mlp inference 784-256-256-10, batch {BATCH}, float32 (values equal: {same})")
    for k, v in bytes_.items():
        print(f"  {k:<16}{v / 1e6:>10.2f} MB allocated per pass")
    print(f"  ember-consume allocates {saved * 100:.0f}% fewer bytes (target >= 40%)")

    ok = (fresh_buffers["ember-consume"] == 1 and speedup >= 2 and vs_out <= 1.15
          and saved >= 0.40 and same)
    print(f"acceptance: {'PASS' if ok else 'FAIL'}")
    if not args.no_json:
        out_dir = Path(args.results_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "ownership.json"
        path.write_text(json.dumps({
            "workload": "ownership", "n": n, "rounds": rounds, "samples_s": samples,
            "median_s": med, "peak_bytes": peaks, "fresh_results": fresh_buffers,
            "ratio_fresh_over_consume": speedup, "ratio_consume_over_numpy_out": vs_out,
            "mlp_bytes": bytes_, "mlp_saved_fraction": saved, "mlp_values_equal": same,
            "acceptance": ok, "numpy": np.__version__, "python": platform.python_version(),
            "platform": platform.platform(),
        }, indent=1))
        print(f"  -> {path}")
    return 0


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    sys.exit(main())
