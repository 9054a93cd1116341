"""Per-example gradients: ``vmap(grad(loss))`` of the MLP against torch.func and a loop.

Why: issue 37 asks that ember's batching transform give per-example
gradients of the MLP 784-256-256-10 (batch 128, float32) at most as slow as
``torch.func.vmap(torch.func.grad(loss))`` in the same run. The loop of one
``ember.grad`` per example shows what vmap saves.

Workload ``vmap_mlp`` (ms/call): every parameter's gradient for each of the
128 examples (``loss`` of one example: ``nn.linear`` layers with ReLU,
``nn.cross_entropy`` against a one-hot label), as a structure of arrays with
the batch axis in front.

Implementations: ``ember-vmap`` (``ember.vmap(ember.grad(loss), in_axes=(None,
0, 0))``), ``ember-loop`` (``ember.grad`` once per example), ``torch-vmap``
(``torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))``),
``jax-vmap`` (eager ``jax.vmap(jax.grad(loss))``).

Run: ``python benchmarks/vmap.py [--quick]`` or ``benchmarks/run vmap``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, reexec_clean_env, run_cli
from _peers import ember_ready, import_jax, import_torch
from mlp import make_problem, out_in
from overhead import import_ember


def _problem(batch: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    params, x, y = make_problem(np.float32)
    return out_in(params), x[:batch], y[:batch]


def setup_ember(batch: int, loop: bool = False) -> Callable[[], Any]:
    ember, xp = import_ember()
    nn = ember.nn
    with ember_ready():
        params, x, y = _problem(batch)
        p = {k: xp.asarray(a) for k, a in params.items()}
        xt, yt = xp.asarray(x), xp.asarray(y)

        def loss(q: dict[str, Any], a: Any, t: Any) -> Any:
            h = nn.linear(a, q["W1"], q["b1"], activation=nn.relu)
            h = nn.linear(h, q["W2"], q["b2"], activation=nn.relu)
            return nn.cross_entropy(nn.linear(h, q["W3"], q["b3"]), t)

        if loop:
            g = ember.grad(loss)
            rows = [(xt[i, ...], yt[i, ...]) for i in range(x.shape[0])]

            def call() -> Any:
                return [g(p, a, t) for a, t in rows]
        else:
            per_example = ember.vmap(ember.grad(loss), in_axes=(None, 0, 0))

            def call() -> Any:
                return per_example(p, xt, yt)
        call()
    return call


def setup_torch(batch: int) -> Callable[[], Any]:
    torch = import_torch()
    F = torch.nn.functional
    params, x, y = _problem(batch)
    p = {k: torch.tensor(np.ascontiguousarray(a)) for k, a in params.items()}
    xt, yt = torch.tensor(x), torch.tensor(y)

    def loss(q: dict[str, Any], a: Any, t: Any) -> Any:
        h = torch.relu(F.linear(a, q["W1"], q["b1"]))
        h = torch.relu(F.linear(h, q["W2"], q["b2"]))
        return F.cross_entropy(F.linear(h, q["W3"], q["b3"]), t)

    per_example = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))
    return lambda: per_example(p, xt, yt)


def setup_jax(batch: int) -> Callable[[], Any]:
    jax, jnp = import_jax()
    params, x, y = _problem(batch)
    p = {k: jnp.asarray(np.ascontiguousarray(a)) for k, a in params.items()}
    xt, yt = jnp.asarray(x), jnp.asarray(y)

    def loss(q: dict[str, Any], a: Any, t: Any) -> Any:
        h = jax.nn.relu(q["W1"] @ a + q["b1"])
        h = jax.nn.relu(q["W2"] @ h + q["b2"])
        return -jnp.sum(t * jax.nn.log_softmax(q["W3"] @ h + q["b3"]))

    per_example = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))

    def call() -> Any:
        return jax.block_until_ready(per_example(p, xt, yt))

    return call


def workloads(batch: int = 128) -> list[Workload]:
    """``vmap_mlp``: per-example gradients of the MLP, float32, ``batch`` examples (128; the
    smoke test takes fewer)."""
    return [
        Workload(
            name="vmap_mlp",
            unit="ms/call",
            description=f"per-example gradients, MLP 784-256-256-10, float32, batch {batch}",
            impls={"ember-vmap": lambda: setup_ember(batch),
                   "ember-loop": lambda: setup_ember(batch, loop=True),
                   "torch-vmap": lambda: setup_torch(batch), "jax-vmap": lambda: setup_jax(batch)},
            reference="torch-vmap",
            ratios=[("ember-vmap", "torch-vmap"), ("ember-vmap", "ember-loop"),
                    ("jax-vmap", "torch-vmap")],
        )
    ]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
