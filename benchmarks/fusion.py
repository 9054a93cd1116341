"""Elementwise fusion: NumPy's calls against one call of ember's numexpr program, by size.

Why: ``ember.jit`` runs a graph of elementwise ops as one call of the backend's
fuser (``ember.backend.fuser``) only up to ``Fuser.max_elements`` elements per
function. Below that the fixed cost of each NumPy call dominates; above it
NumPy's vector loops for ``sin``, ``exp``, ``tanh``, ... beat numexpr's per
element, while one-instruction functions (``+``, ``*``, ``where``) keep winning
longer. This measures both kinds on the machine at hand, so the thresholds
rest on its numbers.

Implementations, per dtype and size ``n`` (float ``(n,)`` arrays ``x``, ``y``):

- ``transc-<n>-calls``  ``tanh(sin(exp(tanh(cos(sin(x) * 0.9) + y)) * 0.5) + 0.1)``
  as 10 NumPy calls, each after the first writing in place (as jit's buffer
  planning replays them);
- ``transc-<n>-fused``  the same as one call of the fuser's program;
- ``arith-<n>-calls`` / ``arith-<n>-fused``: ``((x * 0.9 + y) * y - x) * 0.5``
  (5 one-instruction functions).

Run: ``benchmarks/run fusion [--quick]``. Not part of ``benchmarks/run all``
(no acceptance criterion reads it). Needs numexpr (``pip install ember[fuse]``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Skip, configure_env, ensure_src_on_path, reexec_clean_env, run_cli
import _peers as peers

SIZES = (8, 64, 256, 512, 1024, 4096)

#: (function, operands) in order; an int operand is an earlier instruction's result
TRANSCENDENTAL = [("sin", ["x"]), ("multiply", [0, 0.9]), ("cos", [1]), ("add", [2, "y"]), ("tanh", [3]),
                  ("exp", [4]), ("multiply", [5, 0.5]), ("sin", [6]), ("add", [7, 0.1]), ("tanh", [8])]
ARITHMETIC = [("multiply", ["x", 0.9]), ("add", [0, "y"]), ("multiply", [1, "y"]), ("subtract", [2, "x"]),
              ("multiply", [3, 0.5])]


def _program(steps: list, dtype: str) -> list:
    """``steps`` as the fuser's program over inputs x (0) and y (1)."""
    def arg(a):
        if isinstance(a, str):
            return ("in", "xy".index(a))
        return ("node", a) if isinstance(a, int) else ("const", a)

    return [(name, dtype, [arg(a) for a in args]) for name, args in steps]


def setup(dtype: Any, steps: list, n: int, how: str) -> Callable[[], Any]:
    """One evaluation of ``steps`` on ``(n,)`` arrays: NumPy calls or one fused call."""
    rng = np.random.default_rng(0)
    x, y = (rng.uniform(-1, 1, n).astype(dtype) for _ in range(2))
    if how == "fused":
        ensure_src_on_path()
        import ember.backend as eb

        fz = eb.fuser(eb.get("numpy"))
        if fz is None:
            raise Skip("numexpr is not installed (pip install ember[fuse])")
        f = fz.compile(_program(steps, np.dtype(dtype).name), [np.dtype(dtype).name] * 2)
        return lambda: f(x, y)
    # straight-line code, as jit's replay generates it: t = sin(x); multiply(t, c1, out=t); ...
    env: dict = {"np": np, "x": x, "y": y}
    lines = ["def calls():"]
    for i, (name, args) in enumerate(steps):
        ops = []
        for a in args:
            if isinstance(a, float):
                env[f"c{i}"] = np.dtype(dtype).type(a)
                a = f"c{i}"
            ops.append("t" if isinstance(a, int) else a)
        lines.append(f"    {'t = ' if i == 0 else ''}np.{name}({', '.join(ops)}{'' if i == 0 else ', out=t'})")
    lines.append("    return t")
    exec("\n".join(lines), env)
    return env["calls"]


def workloads() -> list:
    """``fusion_float32`` and ``fusion_float64``."""
    def impl(steps: list, n: int, how: str):
        return lambda dtype: setup(dtype, steps, n, how)

    impls = {f"{kind}-{n}-{how}": impl(steps, n, how)
             for kind, steps in (("transc", TRANSCENDENTAL), ("arith", ARITHMETIC))
             for n in SIZES for how in ("calls", "fused")}
    ratios = [(f"{kind}-{n}-fused", f"{kind}-{n}-calls") for kind in ("transc", "arith") for n in SIZES]
    return peers.dtype_workloads(
        "fusion", impls, "10 transcendental / 5 arithmetic elementwise ops on (n,) {dtype}: NumPy calls vs one fused call",
        unit="us/call", reference="transc-8-calls", ratios=ratios, rounds=9,
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
