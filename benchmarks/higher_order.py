"""Overhead of ``grad(grad(f))`` against ``grad(f)`` on a chain of 100 elementwise ops.

Why: ember's VJP rules are written with the wrapper namespace, so the
backward pass of the inner ``grad`` is itself recorded on the outer tape.
That makes higher order free to *write*; this measures what it costs to
*run*, next to peers that also differentiate their own backward pass.

``f(x) = sum(chain(x))`` with the 100-op chain of ``overhead.py`` on float64
``(8,)``; second order is ``grad(lambda x: sum(grad(f)(x)))`` (the row sums
of the Hessian). Reported in microseconds per chain op (call time / 100).
Implementations, each as ``<name>-grad`` and ``<name>-grad2``:

- ``ember``      ``ember.grad`` nested
- ``torch``      ``torch.autograd.grad``; second order with ``create_graph=True``
- ``autograd``   HIPS autograd ``grad`` nested
- ``jax-eager``  ``jax.grad`` nested, not jitted

Extra ratios: ``<name>-grad2 / <name>-grad`` for each, and ``ember-grad2 / torch-grad2``.

Run: ``python benchmarks/higher_order.py [--quick]`` or ``benchmarks/run higher_order``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from _harness import Skip, Workload, configure_env, optional_import, reexec_clean_env, run_cli
from overhead import N_OPS, _input, chain, import_ember

PEERS = ("ember", "torch", "autograd", "jax-eager")


def setup_ember(order: int) -> Callable[[], Any]:
    ember, xp = import_ember()
    try:
        x = xp.asarray(_input())

        def f(t: Any) -> Any:
            return xp.sum(chain(t, xp))

        g = ember.grad(f)
        if order == 2:
            g = ember.grad(lambda t: xp.sum(ember.grad(f)(t)))
        g(x)
    except Skip:
        raise
    except Exception as exc:
        raise Skip(f"ember API not ready: {type(exc).__name__}: {exc}") from exc
    return lambda: g(x)


def setup_torch(order: int) -> Callable[[], Any]:
    torch = optional_import("torch")
    torch.set_num_threads(1)
    x = torch.tensor(_input(), requires_grad=True)
    agrad = torch.autograd.grad

    def grad1() -> Any:
        return agrad(torch.sum(chain(x, torch)), x)[0]

    def grad2() -> Any:
        (g,) = agrad(torch.sum(chain(x, torch)), x, create_graph=True)
        return agrad(torch.sum(g), x)[0]

    return grad2 if order == 2 else grad1


def setup_autograd(order: int) -> Callable[[], Any]:
    autograd = optional_import("autograd")
    anp = optional_import("autograd.numpy")
    x = _input()

    def f(t: Any) -> Any:
        return anp.sum(chain(t, anp))

    g = autograd.grad(f)
    if order == 2:
        g = autograd.grad(lambda t: anp.sum(autograd.grad(f)(t)))
    return lambda: g(x)


def setup_jax_eager(order: int) -> Callable[[], Any]:
    jax = optional_import("jax")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    jnp = jax.numpy
    x = jnp.asarray(_input())

    def f(t: Any) -> Any:
        return jnp.sum(chain(t, jnp))

    g = jax.grad(f)
    if order == 2:
        g = jax.grad(lambda t: jnp.sum(jax.grad(f)(t)))
    return lambda: g(x).block_until_ready()


_SETUPS: dict[str, Callable[[int], Callable[[], Any]]] = {
    "ember": setup_ember,
    "torch": setup_torch,
    "autograd": setup_autograd,
    "jax-eager": setup_jax_eager,
}


def workloads(peers: tuple[str, ...] = PEERS) -> list[Workload]:
    """The ``higher_order`` workload over ``peers`` (each as -grad and -grad2)."""

    def bind(f: Callable[[int], Callable[[], Any]], order: int) -> Callable[[], Callable[[], Any]]:
        return lambda: f(order)

    impls = {}
    for name in peers:
        impls[f"{name}-grad"] = bind(_SETUPS[name], 1)
        impls[f"{name}-grad2"] = bind(_SETUPS[name], 2)
    ratios = [(f"{name}-grad2", f"{name}-grad") for name in peers]
    if "ember" in peers and "torch" in peers:
        ratios += [("ember-grad2", "torch-grad2"), ("ember-grad", "torch-grad")]
    return [
        Workload(
            name="higher_order",
            unit="us/op",
            description=f"grad(grad(f)) vs grad(f), f = sum of a {N_OPS}-op chain, float64 (8,)",
            impls=impls,
            reference="ember-grad" if "ember" in peers else None,
            ops_per_call=N_OPS,
            ratios=ratios,
        )
    ]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
