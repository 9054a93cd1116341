"""Forward mode: ``jvp`` against a plain forward pass, on the op chain and the MLP.

Why: ``ember.jvp`` computes each op's tangent as the op runs (one pass, no
tape). Issue 36 asks that it cost at most 1.6x a plain forward pass; this
measures that ratio next to peers' forward modes in the same run.

Workloads (reported per call; ratios ``X-jvp / X-forward``):

- ``jvp_chain``: ``sum(chain(x))`` with the 100-op chain of ``overhead.py`` on
  float64 ``(8,)``, tangent along a fixed vector, in us/op (call time / 100).
- ``jvp_mlp``: the float32 MLP loss of ``mlp.py`` (``nn.linear`` with its ReLU,
  ``nn.cross_entropy``), tangent along every parameter, in ms/call.

Implementations: ``ember-forward`` (the function on untracked tensors),
``ember-jvp``, ``ember-grad`` (for scale), ``torch-forward`` / ``torch-jvp``
(``torch.func.jvp``), ``jax-forward`` / ``jax-jvp`` (eager ``jax.jvp``); on the
chain also ``ember-jit-forward`` / ``ember-jit-jvp`` (each jitted).

Run: ``python benchmarks/forward_mode.py [--quick]`` or ``benchmarks/run forward_mode``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, reexec_clean_env, run_cli
from _peers import ember_ready, import_jax, import_torch
from mlp import make_problem, out_in
from overhead import N_OPS, _input, chain, import_ember


def _chain_setups() -> dict[str, Callable[[], Callable[[], Any]]]:
    v = np.linspace(-1.0, 1.0, _input().size).reshape(_input().shape)

    def ember_impl(kind: str) -> Callable[[], Any]:
        ember, xp = import_ember()
        with ember_ready():
            x, t = xp.asarray(_input()), xp.asarray(v)

            def f(a: Any) -> Any:
                return xp.sum(chain(a, xp))

            jf = ember.jit(f)
            jj = ember.jit(lambda a, u: ember.jvp(f, (a,), (u,)))
            call = {"forward": lambda: f(x), "jvp": lambda: ember.jvp(f, (x,), (t,)),
                    "grad": lambda: ember.grad(f)(x), "jit-forward": lambda: jf(x),
                    "jit-jvp": lambda: jj(x, t)}[kind]
            call()
        return call

    def torch_impl(kind: str) -> Callable[[], Any]:
        torch = import_torch()
        x, t = torch.tensor(_input()), torch.tensor(v)

        def f(a: Any) -> Any:
            return torch.sum(chain(a, torch))

        return (lambda: f(x)) if kind == "forward" else (lambda: torch.func.jvp(f, (x,), (t,)))

    def jax_impl(kind: str) -> Callable[[], Any]:
        jax, jnp = import_jax()
        x, t = jnp.asarray(_input()), jnp.asarray(v)

        def f(a: Any) -> Any:
            return jnp.sum(chain(a, jnp))

        if kind == "forward":
            return lambda: f(x).block_until_ready()
        return lambda: jax.jvp(f, (x,), (t,))[1].block_until_ready()

    return {"ember-forward": lambda: ember_impl("forward"), "ember-jvp": lambda: ember_impl("jvp"),
            "ember-grad": lambda: ember_impl("grad"),
            "ember-jit-forward": lambda: ember_impl("jit-forward"), "ember-jit-jvp": lambda: ember_impl("jit-jvp"),
            "torch-forward": lambda: torch_impl("forward"), "torch-jvp": lambda: torch_impl("jvp"),
            "jax-forward": lambda: jax_impl("forward"), "jax-jvp": lambda: jax_impl("jvp")}


def _mlp_setups() -> dict[str, Callable[[], Callable[[], Any]]]:
    def problem() -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        params, x, y = make_problem(np.float32)
        params = out_in(params)
        tangents = {k: np.full_like(a, 0.01) for k, a in params.items()}
        return params, x, y, tangents

    def ember_impl(kind: str) -> Callable[[], Any]:
        ember, xp = import_ember()
        nn = ember.nn
        with ember_ready():
            params, x, y, tangents = problem()
            p = {k: xp.asarray(a) for k, a in params.items()}
            t = {k: xp.asarray(a) for k, a in tangents.items()}
            xt, yt = xp.asarray(x), xp.asarray(y)

            def loss(q: dict[str, Any]) -> Any:
                h = nn.linear(xt, q["W1"], q["b1"], activation=nn.relu)
                h = nn.linear(h, q["W2"], q["b2"], activation=nn.relu)
                return nn.cross_entropy(nn.linear(h, q["W3"], q["b3"]), yt)

            call = {"forward": lambda: loss(p), "jvp": lambda: ember.jvp(loss, (p,), (t,)),
                    "grad": lambda: ember.grad(loss)(p)}[kind]
            call()
        return call

    def torch_impl(kind: str) -> Callable[[], Any]:
        torch = import_torch()
        F = torch.nn.functional
        params, x, y, tangents = problem()
        p = {k: torch.tensor(a) for k, a in params.items()}
        t = {k: torch.tensor(a) for k, a in tangents.items()}
        xt, yt = torch.tensor(x), torch.tensor(y)

        def loss(q: dict[str, Any]) -> Any:
            h = torch.relu(F.linear(xt, q["W1"], q["b1"]))
            h = torch.relu(F.linear(h, q["W2"], q["b2"]))
            return F.cross_entropy(F.linear(h, q["W3"], q["b3"]), yt)

        return (lambda: loss(p)) if kind == "forward" else (lambda: torch.func.jvp(loss, (p,), (t,)))

    return {"ember-forward": lambda: ember_impl("forward"), "ember-jvp": lambda: ember_impl("jvp"),
            "ember-grad": lambda: ember_impl("grad"),
            "torch-forward": lambda: torch_impl("forward"), "torch-jvp": lambda: torch_impl("jvp")}


def workloads() -> list[Workload]:
    """``jvp_chain`` and ``jvp_mlp``, each implementation's jvp against its own forward."""
    ratios = [("ember-jvp", "ember-forward"), ("ember-grad", "ember-forward"),
              ("torch-jvp", "torch-forward"), ("jax-jvp", "jax-forward"),
              ("ember-jit-jvp", "ember-jit-forward"), ("ember-jit-jvp", "ember-forward")]
    return [
        Workload(name="jvp_chain", unit="us/op",
                 description=f"jvp vs forward, sum of a {N_OPS}-op chain, float64 (8,)",
                 impls=_chain_setups(), reference="ember-forward", ops_per_call=N_OPS, ratios=ratios),
        Workload(name="jvp_mlp", unit="ms/call",
                 description="jvp vs forward, MLP 784-256-256-10 loss, float32, batch 128",
                 impls=_mlp_setups(), reference="ember-forward", ratios=ratios[:3]),
    ]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
