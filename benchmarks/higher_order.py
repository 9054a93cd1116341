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

from _harness import Workload, configure_env, reexec_clean_env, run_cli
from _peers import ember_ready, import_autograd, import_jax, import_torch
from overhead import N_OPS, _input, chain, import_ember

PEERS = ("ember", "torch", "autograd", "jax-eager")


def _grad_of_order(grad: Callable[..., Any], ns: Any, order: int) -> Callable[[Any], Any]:
    """``grad(f)`` (order 1) or ``grad(sum(grad(f)))`` (order 2) for ``f = sum(chain)`` in ``ns``."""

    def f(t: Any) -> Any:
        return ns.sum(chain(t, ns))

    if order == 2:
        return grad(lambda t: ns.sum(grad(f)(t)))
    return grad(f)


def setup_ember(order: int) -> Callable[[], Any]:
    ember, xp = import_ember()
    with ember_ready():
        x = xp.asarray(_input())
        g = _grad_of_order(ember.grad, xp, order)
        g(x)
    return lambda: g(x)


def setup_torch(order: int) -> Callable[[], Any]:
    torch = import_torch()
    x = torch.tensor(_input(), requires_grad=True)
    agrad = torch.autograd.grad

    def grad1() -> Any:
        return agrad(torch.sum(chain(x, torch)), x)[0]

    def grad2() -> Any:
        (g,) = agrad(torch.sum(chain(x, torch)), x, create_graph=True)
        return agrad(torch.sum(g), x)[0]

    return grad2 if order == 2 else grad1


def setup_autograd(order: int) -> Callable[[], Any]:
    autograd, anp = import_autograd()
    x = _input()
    g = _grad_of_order(autograd.grad, anp, order)
    return lambda: g(x)


def setup_jax_eager(order: int) -> Callable[[], Any]:
    jax, jnp = import_jax()
    x = jnp.asarray(_input())
    g = _grad_of_order(jax.grad, jnp, order)
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
