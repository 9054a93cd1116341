"""Where ember's MLP step spends its time beyond NumPy's: phase by phase, against ``numpy-inplace``.

Why: ``mlp.py`` says how much slower ``ember-step`` is than NumPy with the
same kernels (``numpy-inplace``), not where. This times both steps with clock
marks between their phases, interleaved round by round, and prints each
phase's median: tracing the parameters (``setup``), the three layers, the
loss, the backward pass and the update (everything after it). The marks cost
about 0.1 us each, the same in both. A diagnostic, not in ``run all``.

How: the ember loss is ``mlp.py``'s with marks between its layers; the end
of the backward pass is marked by wrapping the backward functions
``ember.func._transforms`` calls (``_backward_raw``, ``backward_quiet``) while
the script runs (ember's private names: the script stops with a message if
they move).

Run: ``python benchmarks/mlp_phases.py [--dtype float64] [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from typing import Any, Callable, Iterator

import numpy as np
from _harness import configure_env, limit_threads, reexec_clean_env
import _peers as peers
import mlp
from overhead import import_ember

PHASES = ("setup", "linear1", "linear2", "linear3", "loss", "backward", "update")


#: ember's private names for its backward pass, as the transforms module calls them (the
#: first-order raw loop directly, anything else through backward_quiet)
_BACKWARDS = ("_backward_raw", "backward_quiet")


@contextlib.contextmanager
def backward_marked(mark: Callable[[], None]) -> Iterator[None]:
    """Within the block, a mark after each backward pass of ember's transforms."""
    import ember.func._transforms as transforms

    saved = {name: getattr(transforms, name, None) for name in _BACKWARDS}
    if None in saved.values():
        raise SystemExit(f"mlp_phases: ember.func._transforms lost one of {_BACKWARDS}; update this script")

    def bracketed(backward: Callable[..., Any]) -> Callable[..., Any]:
        def marked(*args: Any, **kwargs: Any) -> Any:
            out = backward(*args, **kwargs)
            mark()
            return out

        return marked

    for name, backward in saved.items():
        setattr(transforms, name, bracketed(backward))
    try:
        yield
    finally:
        for name, backward in saved.items():
            setattr(transforms, name, backward)


def ember_step(dtype: Any, mark: Callable[[], None]) -> Callable[[], Any]:
    """``mlp.py``'s ``ember-step`` (``training.train_step``), with marks between the phases
    (the backward pass's end: :func:`backward_marked`)."""
    ember, xp = import_ember()
    params, x, y = mlp.make_problem(dtype)
    xt, yt = xp.asarray(x), xp.asarray(y)
    nn = ember.nn

    def loss(p: dict[str, Any]) -> Any:
        mark()
        h = nn.linear(xt, p["W1"], p["b1"], activation=nn.relu)
        mark()
        h = nn.linear(h, p["W2"], p["b2"], activation=nn.relu)
        mark()
        z = nn.linear(h, p["W3"], p["b3"])
        mark()
        out = nn.cross_entropy(z, yt)
        mark()
        return out

    step = peers.ember_train_step(ember, loss, {k: xp.asarray(v) for k, v in mlp.out_in(params).items()},
                                  mlp.LR)

    def timed() -> Any:
        mark()
        out = step()
        mark()
        return out

    return timed


def numpy_step(dtype: Any, mark: Callable[[], None]) -> Callable[[], Any]:
    """``mlp.py``'s ``numpy-inplace`` with the same marks (its setup phase is empty)."""
    params, x, y = mlp.make_problem(dtype)
    state = {"p": mlp.out_in(params)}

    def timed() -> Any:
        mark()
        p = state["p"]
        mark()
        h1 = mlp._linear_into(x, p["W1"], p["b1"], True)
        mark()
        h2 = mlp._linear_into(h1, p["W2"], p["b2"], True)
        mark()
        z = mlp._linear_into(h2, p["W3"], p["b3"], False)
        mark()
        loss, e, s = mlp._xent(z, y)
        mark()
        dz = e / s
        dz -= y
        dz /= mlp.BATCH
        g = {"W3": (h2.T @ dz).T, "b3": dz.sum(axis=0)}
        d2 = np.multiply(dz @ p["W3"], h2 > 0)
        g["W2"], g["b2"] = (h1.T @ d2).T, d2.sum(axis=0)
        d1 = np.multiply(d2 @ p["W2"], h1 > 0)
        g["W1"], g["b1"] = (x.T @ d1).T, d1.sum(axis=0)
        mark()
        state["p"] = mlp._sgd_into(p, g)
        mark()
        return loss

    return timed


def phase_times(step: Callable[[], Any], marks: list[float], steps: int) -> list[float]:
    """Median seconds of each phase over ``steps`` calls."""
    marks.clear()
    for _ in range(steps):
        step()
    n = len(PHASES) + 1
    if len(marks) != steps * n:
        raise SystemExit(f"mlp_phases: {len(marks) // steps} marks per step, expected {n}")
    per_step = [marks[i * n:(i + 1) * n] for i in range(steps)]
    return [statistics.median(m[k + 1] - m[k] for m in per_step) for k in range(len(PHASES))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=50, help="steps per implementation and round")
    args = p.parse_args(argv)
    marks: list[float] = []
    clock = time.perf_counter

    def mark() -> None:
        marks.append(clock())

    dtype = np.dtype(args.dtype)
    impls = {"ember-step": ember_step(dtype, mark), "numpy-inplace": numpy_step(dtype, mark)}
    limit_threads()  # (one BLAS thread, as in mlp.py)
    rounds: dict[str, list[list[float]]] = {name: [] for name in impls}
    with backward_marked(mark):
        for step in impls.values():
            phase_times(step, marks, 10)  # warm-up
        for _ in range(args.rounds):
            for name, step in impls.items():
                rounds[name].append(phase_times(step, marks, args.steps))
    med = {name: [statistics.median(r[k] for r in rs) * 1e3 for k in range(len(PHASES))]
           for name, rs in rounds.items()}
    e, n = med["ember-step"], med["numpy-inplace"]
    print(f"MLP step {args.dtype}, median of {args.rounds} rounds x {args.steps} steps (ms)")
    print(f"  {'phase':10s} {'ember-step':>11s} {'numpy-inplace':>14s} {'excess':>8s}")
    for k, phase in enumerate(PHASES):
        print(f"  {phase:10s} {e[k]:11.3f} {n[k]:14.3f} {e[k] - n[k]:+8.3f}")
    print(f"  {'total':10s} {sum(e):11.3f} {sum(n):14.3f} {sum(e) - sum(n):+8.3f}")
    return 0


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    sys.exit(main())
