"""``ember.jit``: staged and replayed steps against raw NumPy, JAX jit and PyTorch eager.

Why: issue 37 asks that a jitted function run close to the backend's own
cost: the 100-op chain's forward + backward at <= 0.6 us/op and <= 2.5x JAX
jit; the MLP train step at <= 0.97x hand-written NumPy float32 (fused ``nn``
step and the same step in plain array-API ops) with fewer bytes allocated
per step than the eager step; the transformer block step at <= 0.9x PyTorch
eager. All in one run, interleaved rounds, medians.

Workloads:

- ``jit_chain`` (us/op): ``grad(sum(chain(x)))`` of ``overhead.py``'s chain on
  float64 (8,): ``ember-jit`` (``jit(grad(f))``), ``ember-grad`` (eager),
  ``numpy`` (the raw forward chain: NumPy's own per-op cost), ``jax-jit``;
  ``ember-jit-vg`` / ``jax-jit-vg``: ``value_and_grad`` jitted (the value is a
  second output, so the forward's values are read by two fused regions).
- ``jit_mlp`` (ms/step): MLP 784-256-256-10, batch 128, SGD, float32:
  ``numpy-hand`` (``mlp.py``'s in-place hand-written step), ``numpy`` (its plain
  hand-written step, the issue's reference), ``ember-step``
  (eager ``train_step`` with ``nn.linear``), ``ember-jit-step`` (that step
  jitted), ``ember-generic`` / ``ember-jit-generic`` (plain ops: matmul,
  maximum, log-softmax, ``tree.map`` update), ``ember-adam`` /
  ``ember-jit-adam`` (the ``train_step`` with Adam). The ``train_step``
  loops carry the optimizer state from step to step, as a training loop
  does: its step counters change every call.
- ``jit_transformer`` (ms/step): ``transformer.py``'s block step, eager and
  jitted, against ``torch``.

After the tables it prints the bytes allocated per MLP step (tracemalloc) for
the eager and jitted steps; ``--no-bytes`` skips that.

Run: ``python benchmarks/jit.py [--quick]``.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, reexec_clean_env, run_cli
import _peers as peers
from mlp import LR, loss_fn, make_problem, out_in, setup_numpy, setup_numpy_inplace
from overhead import N_OPS, _input, chain, import_ember


# ------------------------------------------------------------------ chain
def _chain_setups() -> dict[str, Callable[[], Callable[[], Any]]]:
    def ember_impl(jit: bool, value: bool = False) -> Callable[[], Any]:
        ember, xp = import_ember()
        with peers.ember_ready():
            x = xp.asarray(_input())
            g = (ember.value_and_grad if value else ember.grad)(lambda a: xp.sum(chain(a, xp)))
            call = ember.jit(g) if jit else g
            call(x)
        return lambda: call(x)

    def numpy_impl() -> Callable[[], Any]:
        x = _input()
        return lambda: chain(x, np)

    def jax_impl(value: bool = False) -> Callable[[], Any]:
        jax, jnp = peers.import_jax()
        x = jnp.asarray(_input())
        g = jax.jit((jax.value_and_grad if value else jax.grad)(lambda a: jnp.sum(chain(a, jnp))))
        jax.block_until_ready(g(x))
        return lambda: jax.block_until_ready(g(x))

    return {"ember-jit": lambda: ember_impl(True), "ember-grad": lambda: ember_impl(False),
            "numpy": numpy_impl, "jax-jit": jax_impl,
            "ember-jit-vg": lambda: ember_impl(True, value=True), "jax-jit-vg": lambda: jax_impl(True)}


# ------------------------------------------------------------------ MLP
def _mlp_step(kind: str) -> Callable[[], Any]:
    """An ember MLP step: ``step`` / ``adam`` (train_step, nn.linear, SGD / Adam) or
    ``generic`` (plain ops, SGD by hand); ``-jit`` jitted."""
    ember, xp = import_ember()
    fused, jit = not kind.startswith("generic"), kind.endswith("jit")
    with peers.ember_ready():
        params, x, y = make_problem(np.float32)
        xt, yt = xp.asarray(x), xp.asarray(y)
        if fused:
            nn = ember.nn

            def loss(p: dict[str, Any], xt: Any, yt: Any) -> Any:
                h = nn.linear(xt, p["W1"], p["b1"], activation=nn.relu)
                h = nn.linear(h, p["W2"], p["b2"], activation=nn.relu)
                return nn.cross_entropy(nn.linear(h, p["W3"], p["b3"]), yt)

            opt = ember.optim.Adam(1e-3) if kind.startswith("adam") else ember.optim.SGD(LR)
            p = {k: xp.asarray(v) for k, v in out_in(params).items()}
            p = (p, opt.init(p))
            train = ember.training.train_step(loss, opt)

            def one(ps: Any) -> Any:
                val, p, s = train(*ps, xt, yt)
                return val, (p, s)
        else:
            p = {k: xp.asarray(v) for k, v in params.items()}

            def one(p: Any) -> Any:
                val, g = ember.value_and_grad(lambda q: loss_fn(q, xt, yt, xp))(p)
                return val, ember.tree.map(lambda a, b: a - LR * b, p, g)

        fn = ember.jit(one, donate=0) if jit else one
        state = {"p": p}

        def step() -> Any:
            val, state["p"] = fn(state["p"])
            return val

        step()
    return step


def _mlp_setups() -> dict[str, Callable[[], Callable[[], Any]]]:
    return {"numpy-hand": lambda: setup_numpy_inplace(np.float32), "numpy": lambda: setup_numpy(np.float32),
            "ember-step": lambda: _mlp_step("step"), "ember-jit-step": lambda: _mlp_step("step-jit"),
            "ember-generic": lambda: _mlp_step("generic"),
            "ember-jit-generic": lambda: _mlp_step("generic-jit"),
            "ember-adam": lambda: _mlp_step("adam"), "ember-jit-adam": lambda: _mlp_step("adam-jit")}


def bytes_per_step(make: Callable[[], Callable[[], Any]], steps: int = 3) -> int:
    """Bytes allocated per step (tracemalloc: every allocation, freed or not)."""
    step = make()
    step()
    tracemalloc.start()
    try:
        total = 0
        for _ in range(steps):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            step()
            total += tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return total // steps


# ------------------------------------------------------------------ transformer
def _transformer_setups(quick: bool) -> dict[str, Callable[[], Callable[[], Any]]]:
    import transformer as tb

    def problem() -> Any:
        if quick:
            return tb.make_problem(2, 16, 32, 4, 64)
        return tb.make_problem(tb.BATCH, tb.SEQ, tb.DIM, tb.HEADS, tb.HIDDEN)

    def ember_impl(jit: bool) -> Callable[[], Any]:
        ember, xp = import_ember()
        prob = problem()
        with peers.ember_ready():
            import ember.nn as nn

            p = {k: xp.asarray(v) for k, v in prob["params"].items()}
            dim = int(p["ln1_w"].shape[0])
            model = {
                "ln1": nn.LayerNorm(p["ln1_w"], p["ln1_b"], (dim,), tb.EPS),
                "attn": nn.MultiHeadAttention(*(nn.Linear(p[f"{n}_w"], p[f"{n}_b"]) for n in "qkvo"),
                                              num_heads=prob["heads"]),
                "ln2": nn.LayerNorm(p["ln2_w"], p["ln2_b"], (dim,), tb.EPS),
                "fc1": nn.Linear(p["fc1_w"], p["fc1_b"]),
                "fc2": nn.Linear(p["fc2_w"], p["fc2_b"]),
            }
            x, t = xp.asarray(prob["x"]), xp.asarray(prob["t"])

            def loss(m: Any, x: Any, t: Any) -> Any:
                h = x + m["attn"](m["ln1"](x))
                y = h + m["fc2"](nn.gelu(m["fc1"](m["ln2"](h)), approximate=True))
                d = y - t
                return xp.mean(d * d)

            def one(m: Any) -> Any:
                val, g = ember.value_and_grad(loss)(m, x, t)
                return val, ember.tree.map(lambda a, b: a - tb.LR * b, m, g)

            fn = ember.jit(one, donate=0) if jit else one
            state = {"m": model}

            def step() -> Any:
                val, state["m"] = fn(state["m"])
                return val

            step()
        return step

    return {"ember": lambda: ember_impl(False), "ember-jit": lambda: ember_impl(True),
            "torch": lambda: tb.setup_torch(problem())}


def workloads(quick: bool = False) -> list[Workload]:
    return [
        Workload(name="jit_chain", unit="us/op", impls=_chain_setups(), reference="numpy",
                 ops_per_call=N_OPS,
                 description=f"grad of sum(chain) ({N_OPS} ops, float64 (8,)), forward + backward",
                 ratios=[("ember-jit", "jax-jit"), ("ember-jit", "ember-grad"),
                         ("ember-jit-vg", "jax-jit-vg")]),
        Workload(name="jit_mlp", unit="ms/step", impls=_mlp_setups(), reference="numpy-hand",
                 description="MLP 784-256-256-10 ReLU, batch 128, SGD step, float32",
                 ratios=[("ember-jit-step", "numpy-hand"), ("ember-jit-step", "numpy"),
                         ("ember-jit-generic", "numpy-hand"), ("ember-jit-generic", "numpy"),
                         ("ember-jit-step", "ember-step"), ("ember-jit-generic", "ember-generic"),
                         ("ember-jit-adam", "ember-adam")]),
        Workload(name="jit_transformer", unit="ms/step", impls=_transformer_setups(quick), reference="torch",
                 description="pre-LN transformer block step (transformer.py), SGD, float32",
                 ratios=[("ember-jit", "torch"), ("ember", "torch")]),
    ]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    argv = sys.argv[1:]
    count_bytes = "--no-bytes" not in argv
    argv = [a for a in argv if a != "--no-bytes"]  # (ours, not the harness's)
    run_cli(workloads("--quick" in argv), argv, description=__doc__.splitlines()[0])
    if count_bytes:
        print("\nbytes allocated per MLP step (tracemalloc):")
        for name, make in _mlp_setups().items():
            print(f"  {name:18s} {bytes_per_step(make) / 1e6:8.2f} MB")
