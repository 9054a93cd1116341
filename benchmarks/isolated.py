"""Paired rounds with each implementation in worker processes of its own.

Why: ``benchmarks/run`` times every implementation of a workload in one
process, interleaved, which cancels the machine's drift best. But a process's
state (where its heap put the long-lived buffers, what else it allocated)
moves a kernel-bound step by several percent: on the MLP float32 step the
NumPy floor (``numpy-inplace``, plain NumPy code) measured 0.91x the reference
next to the other implementations and 0.76-0.92x in processes of its own.
This script measures the other way, as a user runs one library per program:
each implementation in ``--procs`` fresh processes (their layouts differ, so
the median over them is less a matter of luck), the processes called in turn,
one at a time, round after round; per round an implementation's time is the
median over its processes and its ratio is taken against the first
implementation's. It is a diagnostic, not the acceptance measure: six runs of
ember's MLP float32 step gave 0.95-1.08x the reference by process layout.

Usage::

    python benchmarks/isolated.py mlp_float32 numpy ember-step numpy-inplace --procs 3 --rounds 20
    python benchmarks/isolated.py overhead ember-grad@../base/src ember-grad   # A/B of two trees

``IMPL@SRC`` runs ``IMPL`` with ember imported from the source tree ``SRC`` (a
checkout of another commit: ``git worktree add ../base COMMIT``), so a change is
measured against the commit before it in one run.

prints each implementation's median time per call, its median per-round ratio
to the first one named, and the median of each process (the spread of layouts).
Workload names are those of ``icount.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import reexec_clean_env
from icount import warmed_up


def _serve(workload: str, impl: str) -> None:
    """Worker: set up ``impl``, warm it up, then per line ``n`` on stdin time ``n`` calls."""
    fn = warmed_up(workload, impl, "isolated")
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        print((time.perf_counter() - t0) / n, flush=True)


def measure(workload: str, impls: list[str], procs: int, rounds: int, calls: int) -> dict[str, dict]:
    """``{impl: {"time": median s/call, "ratio": median per-round ratio to impls[0], "per_process": [...]}}``."""
    me = str(Path(__file__).resolve())
    workers = []  # (impl, Popen)
    try:
        for impl in impls:
            for _ in range(procs):
                name, _, src = impl.partition("@")
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                    [str(Path(src).resolve())] + os.environ.get("PYTHONPATH", "").split(os.pathsep))} \
                    if src else None
                p = subprocess.Popen([sys.executable, me, "--serve", workload, name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                workers.append((impl, p))
        for impl, p in workers:
            if p.stdout.readline().strip() != "ready":
                raise SystemExit(f"isolated: the worker of {impl} failed to start (see its error above)")
        times: dict[int, list[float]] = {i: [] for i in range(len(workers))}
        for r in range(rounds):
            order = range(len(workers)) if r % 2 == 0 else reversed(range(len(workers)))
            for i in order:  # (alternating the order: no implementation always runs first)
                p = workers[i][1]
                p.stdin.write(f"{calls}\n")
                p.stdin.flush()
                times[i].append(float(p.stdout.readline()))
    finally:
        for _, p in workers:
            if p.stdin:
                p.stdin.close()
            p.wait()
            if p.stdout:  # (an open pipe left to the garbage collector is a ResourceWarning)
                p.stdout.close()
    rows = {impl: [times[i] for i, (name, _) in enumerate(workers) if name == impl] for impl in impls}
    per_round = {impl: [statistics.median(t[r] for t in ts) for r in range(rounds)] for impl, ts in rows.items()}
    ref = per_round[impls[0]]
    return {impl: {"time": statistics.median(v),
                   "ratio": statistics.median(a / b for a, b in zip(v, ref)),
                   "per_process": [statistics.median(t) for t in rows[impl]]}
            for impl, v in per_round.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload")
    p.add_argument("impls", nargs="+")
    p.add_argument("--procs", type=int, default=3, help="worker processes per implementation (default 3)")
    p.add_argument("--rounds", type=int, default=20, help="rounds (default 20)")
    p.add_argument("--calls", type=int, default=10, help="calls per process and round (default 10)")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        _serve(args.workload, args.impls[0])
        return 0
    res = measure(args.workload, args.impls, args.procs, args.rounds, args.calls)
    for impl, r in res.items():
        spread = ", ".join(f"{t * 1e3:.3f}" for t in r["per_process"])
        print(f"{args.workload} {impl}: {r['time'] * 1e3:.3f} ms/call, {r['ratio']:.3f}x {args.impls[0]} "
              f"(per process: {spread} ms)", flush=True)
    return 0


if __name__ == "__main__":
    reexec_clean_env()  # (the workers inherit the environment without the OpenBLAS variables)
    sys.exit(main())
