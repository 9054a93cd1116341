"""Backward of a 1,000,000-op chain: no RecursionError, and linear time per op.

Why: a tape must scale. Backward has to be iterative (a recursive walk hits
Python's recursion limit, or the C stack when a deep graph is freed), cost
linear in the number of recorded ops, and release the tape as it goes. So
the time per op of one very long chain is compared with that of many short
chains doing the same total number of ops.

The chain cycles ``sin``, ``* 0.9``, ``cos``, ``+ 0.1`` on a float64 ``(8,)``
vector; ``grad`` of the sum of its end. Every call does ``L`` ops in total
(``L`` = 1,000,000; ``--quick``: 100,000; ``--length L`` to choose):

- ``ember-1k``    ``L / 1000`` gradients of a 1,000-op chain (reference)
- ``ember-long``  one gradient of an ``L``-op chain
- ``torch-1k``, ``torch-long``  the same with PyTorch eager, for reference

Reported in microseconds per op; the acceptance ratio is
``ember-long / ember-1k`` (target <= 1.5). A call takes seconds, so the
default is 5 rounds (``--rounds`` to change). An ember failure (e.g.
``RecursionError``) is reported as ``n/a (RecursionError: ...)`` in the table
and the JSON.

Run: ``python benchmarks/long_chain.py [--quick] [--length L]`` or ``benchmarks/run long_chain``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _harness import Skip, Workload, configure_env, optional_import, reexec_clean_env, run_cli
from overhead import import_ember

LENGTH = 1_000_000
QUICK_LENGTH = 100_000
SHORT = 1_000
SHAPE = (8,)
DEFAULT_ROUNDS = 5


def chain(x: Any, n: int, ns: Any) -> Any:
    """``n`` elementwise ops (n a multiple of 4) in namespace ``ns``; values stay in [-1, 1.1]."""
    sin, cos = ns.sin, ns.cos
    y = x
    for _ in range(n // 4):
        y = cos(sin(y) * 0.9) + 0.1
    return y


def _input() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1.0, 1.0, SHAPE)


def setup_ember(n: int, reps: int) -> Callable[[], Any]:
    ember, xp = import_ember()
    try:
        x = xp.asarray(_input())
        g = ember.grad(lambda t: xp.sum(chain(t, n, xp)))
    except Exception as exc:
        raise Skip(f"ember API not ready: {type(exc).__name__}: {exc}") from exc

    def step() -> Any:
        for _ in range(reps):
            out = g(x)
        return out

    return step


def setup_torch(n: int, reps: int) -> Callable[[], Any]:
    torch = optional_import("torch")
    torch.set_num_threads(1)
    x = torch.tensor(_input(), requires_grad=True)

    def step() -> Any:
        for _ in range(reps):
            x.grad = None
            torch.sum(chain(x, n, torch)).backward()
        return x.grad

    return step


def workloads(length: int = LENGTH, short: int = SHORT) -> list[Workload]:
    """The ``long_chain`` workload: every call does ``length`` ops in total."""
    if length % short or short % 4:
        raise ValueError(
            f"long_chain: length {length} must be a multiple of the short chain ({short}), "
            "itself a multiple of 4"
        )
    reps = length // short

    def bind(f: Callable[[int, int], Callable[[], Any]], n: int, r: int) -> Callable[[], Callable[[], Any]]:
        return lambda: f(n, r)

    return [
        Workload(
            name="long_chain",
            unit="us/op",
            description=(
                f"grad of one {length:,}-op chain vs {reps:,} grads of {short:,}-op chains, "
                f"float64 {SHAPE}"
            ),
            impls={
                "ember-1k": bind(setup_ember, short, reps),
                "ember-long": bind(setup_ember, length, 1),
                "torch-1k": bind(setup_torch, short, reps),
                "torch-long": bind(setup_torch, length, 1),
            },
            reference="ember-1k",
            ops_per_call=length,
            ratios=[("ember-long", "ember-1k"), ("torch-long", "torch-1k"), ("ember-long", "torch-long")],
            warmup=1,
        )
    ]


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``--length`` (and the harness flags), then run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--length", type=int, default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=None)
    known, rest = p.parse_known_args(argv)
    length = known.length or (QUICK_LENGTH if known.quick else LENGTH)
    rest += ["--quick"] if known.quick else []
    rest += ["--rounds", str(known.rounds or DEFAULT_ROUNDS)]
    run_cli(workloads(length), rest, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    sys.setrecursionlimit(1000)  # the default: a recursive backward must not be rescued
    main()
