"""Machine instructions per call of a workload implementation, counted by valgrind.

Why: on a shared VM wall-clock timings drift by up to 2x within minutes, so a
change worth 3% cannot be seen in ``benchmarks/run``. The number of
instructions a call executes does not depend on the neighbours: it moves only
when the code does. It is a measure of Python overhead (interpreter work,
allocations, NumPy's argument handling), not of cache behaviour, so confirm a
gain with the timed benchmarks in the end.

How: the script runs itself under ``valgrind --tool=callgrind`` twice, making
``--calls`` calls and none, after the same set-up and warm-up, with the
garbage collector paused and a fixed hash seed; the difference divided by
``--calls`` is the count per call. Needs ``valgrind`` on PATH (not a Python
dependency); one count takes about a minute.

Usage::

    python benchmarks/icount.py mlp_float32 numpy ember ember-generic
    python benchmarks/icount.py overhead ember-grad --calls 200

prints ``impl: N instructions/call`` and the ratio to the first impl named.
Workload names are those of ``benchmarks/run`` (e.g. ``overhead``,
``mlp_float32``, ``mlp_float64``, ``graph``, ``cnn``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
#: workload name -> the script that defines it
SCRIPT_OF = {"overhead": "overhead", "mlp_float32": "mlp", "mlp_float64": "mlp", "graph": "graph",
             "cnn": "cnn", "transformer": "transformer", "higher_order": "higher_order",
             "conv2d_float32": "conv", "conv2d_float64": "conv", "jvp_chain": "forward_mode",
             "jvp_mlp": "forward_mode", "jit_chain": "jit", "jit_mlp": "jit", "jit_transformer": "jit"}
NO_VALGRIND = "icount: valgrind is not on PATH; install it (e.g. apt install valgrind) to count instructions"


def _workload(name: str) -> Any:
    if name not in SCRIPT_OF:
        raise SystemExit(f"icount: unknown workload {name!r}; choose from {', '.join(SCRIPT_OF)}")
    sys.path.insert(0, str(HERE))
    from _harness import configure_env, ensure_src_on_path, limit_threads

    configure_env()
    ensure_src_on_path()
    module = importlib.import_module(SCRIPT_OF[name])
    limit_threads()
    for w in module.workloads():
        if w.name == name:
            return w
    raise SystemExit(f"icount: {SCRIPT_OF[name]}.py has no workload {name!r}")


def warmed_up(workload: str, impl: str, prog: str = "icount") -> Callable[[], Any]:
    """``impl`` of ``workload`` set up and called until warm; a missing one stops ``prog``."""
    w = _workload(workload)
    if impl not in w.impls:
        raise SystemExit(f"{prog}: {workload} has no implementation {impl!r}; it has {', '.join(w.impls)}")
    fn = w.impls[impl]()
    for _ in range(max(w.warmup, 3)):
        fn()
    return fn


def _run_inner(workload: str, impl: str, calls: int) -> None:
    """Set up ``impl``, warm it up, then make ``calls`` calls with the collector paused."""
    fn = warmed_up(workload, impl)
    gc.collect()
    gc.disable()
    for _ in range(calls):
        fn()


def _count(workload: str, impl: str, calls: int) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(PYTHONHASHSEED="0", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
           str(Path(__file__).resolve()), "--inner", workload, impl, "--calls", str(calls)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if out.returncode or m is None:
        raise SystemExit(f"icount: {impl} failed under valgrind:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload")
    p.add_argument("impls", nargs="+")
    p.add_argument("--calls", type=int, default=50, help="calls counted (default 50)")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.inner:
        _run_inner(args.workload, args.impls[0], args.calls)
        return 0
    if shutil.which("valgrind") is None:
        print(NO_VALGRIND, file=sys.stderr)
        return 2
    first = None
    for impl in args.impls:
        per_call = (_count(args.workload, impl, args.calls) - _count(args.workload, impl, 0)) / args.calls
        first = first or per_call
        print(f"{args.workload} {impl}: {per_call:,.0f} instructions/call ({per_call / first:.2f}x "
              f"{args.impls[0]})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
