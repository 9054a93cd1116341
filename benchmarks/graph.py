"""Forward + backward of a random DAG of 10,000 elementwise ops on small float64 arrays.

Why: ``overhead.py`` is a straight chain; real programs are graphs where a
value feeds many later ops (fan-out, so gradients accumulate) and long-range
edges keep many values alive. This measures per-op cost of recording and of
a backward pass over such a tape.

The program is generated once from a fixed seed: 4 inputs of shape ``(16,)``,
then ``N`` ops, each either unary (``sin``, ``cos``, ``tanh``, ``x * 0.5``) or
binary (``+``, ``-``, ``*``, ``maximum``). The first operand is one of the 16
most recent values, the second (binary ops) any earlier value. The output
is the sum of the last 8 values' sums; gradients are taken with respect to
all 4 inputs. Values stay finite and bounded (checked when generated).
Reported in microseconds per op (call time / N). Implementations:

- ``numpy``      raw NumPy, forward only (reference: the arithmetic itself)
- ``ember-grad`` ``ember.grad`` over the list of inputs
- ``torch``      eager CPU, ``requires_grad`` leaves + ``.backward()``
- ``autograd``   HIPS autograd ``grad``
- ``mygrad``     MyGrad tensors + ``.backward()``

(JAX is left out: eagerly a 10k-op graph takes seconds per call, and
compiling it takes longer than the rest of the benchmark.)

Run: ``python benchmarks/graph.py [--quick]`` or ``benchmarks/run graph``.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, optional_import, reexec_clean_env, run_cli
from _peers import ember_ready, import_autograd, import_torch
from overhead import import_ember

N_OPS = 10_000
N_INPUTS = 4
SHAPE = (16,)
RECENT = 16
N_OUT = 8

#: Op kinds, in program encoding order; unary ops ignore their second operand.
UNARY = ("sin", "cos", "tanh", "half")
BINARY = ("add", "sub", "mul", "maximum")
OPS = UNARY + BINARY

Program = list[tuple[int, int, int]]


def make_program(n_ops: int = N_OPS, seed: int = 0) -> Program:
    """``n_ops`` instructions ``(op index, operand i, operand j)`` over earlier values.

    Value ``k`` (``k >= N_INPUTS``) is instruction ``k - N_INPUTS``'s result.
    """
    rng = np.random.default_rng(seed)
    prog: Program = []
    for k in range(N_INPUTS, N_INPUTS + n_ops):
        unary = rng.random() < 0.5
        op = int(rng.integers(0, len(UNARY))) if unary else len(UNARY) + int(rng.integers(0, len(BINARY)))
        i = k - 1 - int(rng.integers(0, min(RECENT, k)))
        j = int(rng.integers(0, k))
        prog.append((op, i, j))
    return prog


def make_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(-1.0, 1.0, SHAPE) for _ in range(N_INPUTS)]


def op_table(ns: Any) -> list[Callable[[Any, Any], Any]]:
    """The op kinds as two-argument callables on namespace ``ns`` (same order as OPS)."""
    sin, cos, tanh, maximum = ns.sin, ns.cos, ns.tanh, ns.maximum
    return [
        lambda a, b: sin(a),
        lambda a, b: cos(a),
        lambda a, b: tanh(a),
        lambda a, b: a * 0.5,
        operator.add,
        operator.sub,
        operator.mul,
        lambda a, b: maximum(a, b),
    ]


def run_program(prog: Program, inputs: list[Any], table: list[Callable[[Any, Any], Any]]) -> list[Any]:
    """Evaluate the program; returns the last ``N_OUT`` values."""
    vals = list(inputs)
    append = vals.append
    for op, i, j in prog:
        append(table[op](vals[i], vals[j]))
    return vals[-N_OUT:]


def output(prog: Program, inputs: list[Any], ns: Any) -> Any:
    """Scalar output: sum of the last values' sums."""
    table = op_table(ns)
    outs = run_program(prog, inputs, table)
    total = ns.sum(outs[0])
    for v in outs[1:]:
        total = total + ns.sum(v)
    return total


def check_program(prog: Program) -> float:
    """Largest absolute value the program produces (raises if any is not finite)."""
    vals = list(make_inputs())
    table = op_table(np)
    for op, i, j in prog:
        vals.append(table[op](vals[i], vals[j]))
    big = max(float(np.max(np.abs(v))) for v in vals)
    if not np.isfinite(big):
        raise ValueError("graph: the generated program overflows; pick another seed")
    return big


# ------------------------------------------------------------------ impl setups


def setup_numpy(prog: Program) -> Callable[[], Any]:
    xs = make_inputs()
    table = op_table(np)
    return lambda: run_program(prog, xs, table)


def setup_ember(prog: Program) -> Callable[[], Any]:
    ember, xp = import_ember()
    with ember_ready():
        xs = [xp.asarray(x) for x in make_inputs()]
        g = ember.grad(lambda ins: output(prog, ins, xp))
        g(xs)
    return lambda: g(xs)


def setup_torch(prog: Program) -> Callable[[], Any]:
    torch = import_torch()
    xs = [torch.tensor(x, requires_grad=True) for x in make_inputs()]

    def step() -> Any:
        for x in xs:
            x.grad = None
        output(prog, xs, torch).backward()
        return [x.grad for x in xs]

    return step


def setup_autograd(prog: Program) -> Callable[[], Any]:
    autograd, anp = import_autograd()
    xs = make_inputs()
    g = autograd.grad(lambda ins: output(prog, ins, anp))
    return lambda: g(xs)


def setup_mygrad(prog: Program) -> Callable[[], Any]:
    mg = optional_import("mygrad")
    xs = make_inputs()

    def step() -> Any:
        ts = [mg.tensor(x) for x in xs]
        output(prog, ts, mg).backward()
        return [t.grad for t in ts]

    return step


def workloads(n_ops: int = N_OPS) -> list[Workload]:
    """The ``graph`` workload; ``n_ops`` shrinks it for smoke tests."""
    prog = make_program(n_ops)
    check_program(prog)

    def bind(f: Callable[[Program], Callable[[], Any]]) -> Callable[[], Callable[[], Any]]:
        return lambda: f(prog)

    return [
        Workload(
            name="graph",
            unit="us/op",
            description=f"random DAG of {n_ops} elementwise ops on float64 {SHAPE}, fwd+bwd",
            impls={
                "numpy": bind(setup_numpy),
                "ember-grad": bind(setup_ember),
                "torch": bind(setup_torch),
                "autograd": bind(setup_autograd),
                "mygrad": bind(setup_mygrad),
            },
            reference="numpy",
            ops_per_call=n_ops,
            ratios=[("ember-grad", "torch"), ("ember-grad", "autograd")],
            warmup=1,
        )
    ]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
