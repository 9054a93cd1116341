"""Per-op dispatch overhead: a chain of 100 cheap elementwise ops on float64 (8,).

Why: on tiny arrays the arithmetic is free, so the time per op *is* the
framework's overhead (wrapping, tape recording, backward bookkeeping).  This
is the number that decides whether ember's wrapper is "thin".

Implementations (reported in microseconds per op of the chain; the final
``sum`` and the backward pass are included in the per-op figure of the grad
variants, divided by the same 100):

- ``numpy``            raw NumPy forward only (reference)
- ``ember-untracked``  ember wrapper ops outside any transform
- ``ember-grad``       ``ember.grad(lambda x: xp.sum(chain(x)))(x)``
- ``minimal-tape``     the same gradient through a minimal eager tape on NumPy (a node and a
                       VJP closure per op, one reversed loop; no API, no checks): the floor
                       of Python-level dispatch, which issue 12 puts at 2.2 us/op on its
                       machine. ``ember-grad / minimal-tape`` carries the issue's absolute
                       3.0 us/op target to the machine at hand (3.0 / 2.2 = 1.36x).
- ``autograd``         HIPS autograd ``grad``
- ``torch``            PyTorch eager CPU, ``requires_grad`` leaf + ``.backward()``
- ``mygrad``           MyGrad tensor + ``.backward()``
- ``jax-eager``        ``jax.grad`` without jit (op-by-op dispatch)
- ``jax-jit``          ``jax.jit(jax.grad(...))`` (compiled; lower bound)

Run: ``python benchmarks/overhead.py [--quick]`` or ``benchmarks/run overhead``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import (
    Skip,
    Workload,
    configure_env,
    ensure_src_on_path,
    optional_import,
    reexec_clean_env,
    run_cli,
)

N_OPS = 100
SHAPE = (8,)


def chain(x: Any, ns: Any) -> Any:
    """100 elementwise ops written against namespace ``ns`` (numpy-like).

    Block of 10 ops, repeated 10 times; values stay in a bounded range
    (``exp`` only ever sees ``tanh`` outputs).  One op per block is a binary
    op on two tracked values (``y + x``).
    """
    y = x
    for _ in range(N_OPS // 10):
        y = ns.sin(y)
        y = y * 0.9
        y = ns.cos(y)
        y = y + x
        y = ns.tanh(y)
        y = ns.exp(y)
        y = y * 0.5
        y = ns.sin(y)
        y = y + 0.1
        y = ns.tanh(y)
    return y


def _input() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1.0, 1.0, SHAPE)


def import_ember() -> tuple[Any, Any]:
    """Return ``(ember, ember.autodiff.numpy)`` or raise Skip('ember: ...')."""
    ensure_src_on_path()
    try:
        import ember.autodiff.numpy as xp

        import ember
    except Exception as exc:
        raise Skip(f"ember not importable yet: {type(exc).__name__}: {exc}") from exc
    return ember, xp


def _ember_call(make: Callable[[], Callable[[], Any]]) -> Callable[[], Any]:
    """Run ember's setup, turning API gaps into a Skip with the reason."""
    try:
        fn = make()
        fn()
    except Skip:
        raise
    except Exception as exc:
        raise Skip(f"ember API not ready: {type(exc).__name__}: {exc}") from exc
    return fn


class _Var:
    """A value of ``minimal-tape``: its array, the values it came from, its VJP closure.

    A value made from others appends itself to ``_Var.tape`` (recording order is
    a topological order, so backward is one reversed loop).
    """

    __slots__ = ("v", "parents", "vjp", "g")
    tape: list[_Var] = []

    def __init__(self, v: Any, parents: tuple[_Var, ...] = (), vjp: Any = None) -> None:
        self.v, self.parents, self.vjp, self.g = v, parents, vjp, None
        if parents:
            _Var.tape.append(self)

    def __mul__(self, c: float) -> _Var:  # the chain multiplies by Python floats only
        return _Var(self.v * c, (self,), lambda g: (g * c,))

    def __add__(self, other: Any) -> _Var:
        if other.__class__ is _Var:
            return _Var(self.v + other.v, (self, other), lambda g: (g, g))
        return _Var(self.v + other, (self,), lambda g: (g,))


def _unary(f: Any, df: Any) -> Callable[[_Var], _Var]:
    """A ``minimal-tape`` op from its kernel and its derivative ``df(x, f(x))``."""

    def op(x: _Var) -> _Var:
        a = f(x.v)
        return _Var(a, (x,), lambda g: (g * df(x.v, a),))

    return op


class _MinimalTape:
    """The namespace ``chain`` runs on for ``minimal-tape``."""

    sin = staticmethod(_unary(np.sin, lambda x, a: np.cos(x)))
    cos = staticmethod(_unary(np.cos, lambda x, a: -np.sin(x)))
    tanh = staticmethod(_unary(np.tanh, lambda x, a: 1.0 - a * a))
    exp = staticmethod(_unary(np.exp, lambda x, a: a))

    @staticmethod
    def sum(x: _Var) -> _Var:
        return _Var(np.sum(x.v), (x,), lambda g: (np.full_like(x.v, g),))


def minimal_tape_grad(x: np.ndarray) -> np.ndarray:
    """The gradient of ``sum(chain(x))`` by the minimal tape."""
    _Var.tape = tape = []
    leaf = _Var(x)
    out = _MinimalTape.sum(chain(leaf, _MinimalTape))
    out.g = 1.0
    for node in reversed(tape):
        g, node.g = node.g, None
        if g is None:
            continue
        for parent, gi in zip(node.parents, node.vjp(g)):
            parent.g = gi if parent.g is None else parent.g + gi
    return leaf.g


# ----------------------------------------------------------------- impl setups


def setup_numpy() -> Callable[[], Any]:
    x = _input()
    return lambda: chain(x, np)


def setup_ember_untracked() -> Callable[[], Any]:
    _, xp = import_ember()

    def make() -> Callable[[], Any]:
        xt = xp.asarray(_input())
        return lambda: chain(xt, xp)

    return _ember_call(make)


def setup_ember_grad() -> Callable[[], Any]:
    ember, xp = import_ember()

    def make() -> Callable[[], Any]:
        xt = xp.asarray(_input())
        g = ember.grad(lambda t: xp.sum(chain(t, xp)))
        return lambda: g(xt)

    return _ember_call(make)


def setup_minimal_tape() -> Callable[[], Any]:
    x = _input()
    return lambda: minimal_tape_grad(x)


def setup_autograd() -> Callable[[], Any]:
    autograd = optional_import("autograd")
    anp = optional_import("autograd.numpy")
    x = _input()
    g = autograd.grad(lambda t: anp.sum(chain(t, anp)))
    return lambda: g(x)


def setup_torch() -> Callable[[], Any]:
    torch = optional_import("torch")
    torch.set_num_threads(1)
    xt = torch.tensor(_input(), dtype=torch.float64, requires_grad=True)

    def step() -> Any:
        xt.grad = None
        torch.sum(chain(xt, torch)).backward()
        return xt.grad

    return step


def setup_mygrad() -> Callable[[], Any]:
    mg = optional_import("mygrad")
    x = _input()

    def step() -> Any:
        t = mg.tensor(x)
        mg.sum(chain(t, mg)).backward()
        return t.grad

    return step


def _jax() -> tuple[Any, Any]:
    jax = optional_import("jax")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    return jax, jax.numpy


def setup_jax_eager() -> Callable[[], Any]:
    jax, jnp = _jax()
    x = jnp.asarray(_input())
    g = jax.grad(lambda t: jnp.sum(chain(t, jnp)))
    return lambda: g(x).block_until_ready()


def setup_jax_jit() -> Callable[[], Any]:
    jax, jnp = _jax()
    x = jnp.asarray(_input())
    g = jax.jit(jax.grad(lambda t: jnp.sum(chain(t, jnp))))
    return lambda: g(x).block_until_ready()


def workloads() -> list[Workload]:
    """The overhead workload (a list, for ``run_cli``)."""
    return [
        Workload(
            name="overhead",
            rounds=15,  # (7 rounds give the ratios a 95% interval as wide as their whole range)
            unit="us/op",
            description=f"chain of {N_OPS} elementwise ops, float64 {SHAPE}",
            impls={
                "numpy": setup_numpy,
                "ember-untracked": setup_ember_untracked,
                "ember-grad": setup_ember_grad,
                "minimal-tape": setup_minimal_tape,
                "autograd": setup_autograd,
                "torch": setup_torch,
                "mygrad": setup_mygrad,
                "jax-eager": setup_jax_eager,
                "jax-jit": setup_jax_jit,
            },
            reference="numpy",
            ops_per_call=N_OPS,
            ratios=[("ember-untracked", "numpy"), ("ember-grad", "torch"), ("ember-grad", "minimal-tape"),
                    ("minimal-tape", "torch")],
        )
    ]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
