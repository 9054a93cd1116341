"""One SGD step of an MLP 784-256-256-10 (ReLU), batch 128, in float32 and float64.

Why: the overhead benchmark measures dispatch on tiny arrays; this one checks
that on a realistic small model the wrapper's cost disappears behind matmuls
(ember should be close to hand-written NumPy).

A step is: forward, softmax cross-entropy against one-hot labels (mean over
the batch), backward, and the update ``p - lr * g`` for every parameter.
Parameters are carried from step to step. The reference keeps each weight
``(in, out)`` row-major (``x @ W``); the ``(out, in)`` implementations (ember,
``numpy-inplace``, ``minimal-tape``) get ``W.T`` of those very arrays, the same
memory (column-major ``(out, in)``), as NumPy code handed to ember would pass
them, and their weight gradients take that layout (``_linear_vjp``): the same
GEMMs as the reference's (``benchmarks/gemm_layout.py`` measures both layouts).
PyTorch gets row-major ``(out, in)`` copies, its ``nn.Linear`` default.
Implementations:

- ``numpy``          hand-written forward and backward (reference)
- ``numpy-inplace``  the same written with ember's kernels: weights ``(out, in)``, bias and ReLU
                     into the product's buffer, the update into the gradients' buffers. The
                     floor of an eager framework on NumPy: what is left is its Python
- ``minimal-tape``   ``numpy-inplace``'s kernels recorded and run by a minimal eager tape (a
                     node per layer and for the loss, a closure VJP each, one reversed loop; no
                     API, no checks): what any eager design with a tape costs at least
- ``ember``          ``ember.value_and_grad`` over a dict of params, plain arithmetic
                     update; ``ember.nn.linear`` (ReLU fused, weights ``(out, in)`` as in
                     ``nn.Linear``) and ``ember.nn.cross_entropy``
- ``ember-optim``    ``ember``'s loss, updated by ``ember.optim.SGD`` with consumed gradients
                     (``opt.update(p, ember.consume(g), state)``: the new parameters go into the
                     gradients' buffers)
- ``ember-step``     ``ember``'s loss and ``optim.SGD`` fused by ``ember.training.train_step``: the
                     gradients go from the backward pass into the update (new parameters in
                     their buffers) without reaching the caller; the way to write an ember step
- ``ember-generic``  the same with every layer and the loss written in plain array-API ops
                     (``matmul``, ``+``, ``maximum``, ``max``, ``exp``, ``sum``, ``log``):
                     what composition costs
- ``torch``          eager CPU, ``F.linear`` (weights ``(out, in)``), ``torch.relu`` and
                     ``F.cross_entropy``, ``.backward()`` + in-place update under ``no_grad``
- ``autograd``       HIPS autograd ``value_and_grad`` over the dict (plain ops: it has no nn)
- ``mygrad``         MyGrad tensors + ``.backward()`` (plain ops)
- ``jax-eager``      ``jax.value_and_grad`` without jit, ``jax.nn.relu`` / ``log_softmax``
                     (JAX has no cross-entropy of its own)
- ``jax-jit``        the whole step (value_and_grad + update) under ``jax.jit``

Every library that has its own ReLU, log-softmax or cross-entropy uses it, as its
users would.

Run: ``python benchmarks/mlp.py [--quick]`` or ``benchmarks/run mlp``.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, optional_import, reexec_clean_env, run_cli
import _peers as peers
from overhead import import_ember

SIZES = (784, 256, 256, 10)
BATCH = 128
LR = 0.01


def make_problem(dtype: Any) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Deterministic He-initialised params, inputs X and one-hot labels Y."""
    rng = np.random.default_rng(0)
    params = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(SIZES), start=1):
        params[f"W{i}"] = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(
            dtype
        )
        params[f"b{i}"] = np.zeros(fan_out, dtype=dtype)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(dtype)
    labels = rng.integers(0, SIZES[-1], BATCH)
    y = np.eye(SIZES[-1], dtype=dtype)[labels]
    return params, x, y


def loss_fn(params: dict[str, Any], x: Any, y: Any, ns: Any, relu: Any = None,
            cross_entropy: Any = None) -> Any:
    """Softmax cross-entropy of the MLP (mean over the batch), against a numpy-like namespace.

    ``relu(h)`` and ``cross_entropy(logits, y)`` default to their plain-op compositions.
    """
    relu = relu or (lambda h: ns.maximum(h, 0.0))
    h = relu(ns.matmul(x, params["W1"]) + params["b1"])
    h = relu(ns.matmul(h, params["W2"]) + params["b2"])
    z = ns.matmul(h, params["W3"]) + params["b3"]
    if cross_entropy is not None:
        return cross_entropy(z, y)
    zs = z - ns.max(z, axis=1, keepdims=True)
    logp = zs - ns.log(ns.sum(ns.exp(zs), axis=1, keepdims=True))
    return -ns.sum(y * logp) / BATCH


# ------------------------------------------------------------------ impl setups


def setup_numpy(dtype: Any) -> Callable[[], Any]:
    params, x, y = make_problem(dtype)
    state = {"p": params}

    def step() -> Any:
        p = state["p"]
        a1 = x @ p["W1"] + p["b1"]
        h1 = np.maximum(a1, 0.0)
        a2 = h1 @ p["W2"] + p["b2"]
        h2 = np.maximum(a2, 0.0)
        z = h2 @ p["W3"] + p["b3"]
        zs = z - z.max(axis=1, keepdims=True)
        e = np.exp(zs)
        s = e.sum(axis=1, keepdims=True)
        loss = -np.sum(y * (zs - np.log(s))) / BATCH
        dz = (e / s - y) / BATCH
        g = {"W3": h2.T @ dz, "b3": dz.sum(axis=0)}
        d2 = (dz @ p["W3"].T) * (a2 > 0)
        g["W2"], g["b2"] = h1.T @ d2, d2.sum(axis=0)
        d1 = (d2 @ p["W2"].T) * (a1 > 0)
        g["W1"], g["b1"] = x.T @ d1, d1.sum(axis=0)
        state["p"] = {k: v - LR * g[k] for k, v in p.items()}
        return loss

    return step


def _linear_into(h: np.ndarray, w: np.ndarray, b: np.ndarray, relu: bool) -> np.ndarray:
    """``relu(h @ w.T + b)`` with ``w`` ``(out, in)``: bias and ReLU into the product's buffer."""
    out = h @ w.T
    out += b
    if relu:
        np.maximum(out, 0, out=out)
    return out


def _xent(z: np.ndarray, y: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray]:
    """The mean softmax cross-entropy, and the softmax's parts its backward reuses (e, s)."""
    zs = z - z.max(axis=1, keepdims=True)
    e = np.exp(zs)
    s = e.sum(axis=1, keepdims=True)
    return -np.sum(y * (zs - np.log(s))) / BATCH, e, s


def _sgd_into(p: dict[str, np.ndarray], g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The new parameters ``p - LR * g``, each in its gradient's buffer."""
    for k, v in p.items():
        np.multiply(g[k], -LR, out=g[k])
        g[k] += v
    return g


def setup_numpy_inplace(dtype: Any) -> Callable[[], Any]:
    params, x, y = make_problem(dtype)
    state = {"p": out_in(params)}

    def step() -> Any:
        p = state["p"]
        h1 = _linear_into(x, p["W1"], p["b1"], True)
        h2 = _linear_into(h1, p["W2"], p["b2"], True)
        loss, e, s = _xent(_linear_into(h2, p["W3"], p["b3"], False), y)
        dz = e / s
        dz -= y
        dz /= BATCH
        g = {"W3": (h2.T @ dz).T, "b3": dz.sum(axis=0)}  # (gradients column-major: as the weights)
        d2 = np.multiply(dz @ p["W3"], h2 > 0)
        g["W2"], g["b2"] = (h1.T @ d2).T, d2.sum(axis=0)
        d1 = np.multiply(d2 @ p["W2"], h1 > 0)
        g["W1"], g["b1"] = (x.T @ d1).T, d1.sum(axis=0)
        state["p"] = _sgd_into(p, g)
        return loss

    return step


class _Node:
    """A tape entry of ``minimal-tape``: its VJP closure, its inputs' nodes, its cotangent."""

    __slots__ = ("vjp", "parents", "g")

    def __init__(self, vjp: Any, parents: tuple[Any, ...]) -> None:
        self.vjp, self.parents, self.g = vjp, parents, None


def setup_minimal_tape(dtype: Any) -> Callable[[], Any]:
    params, x, y = make_problem(dtype)
    state = {"p": out_in(params)}
    mm = np.matmul

    def step() -> Any:
        p = state["p"]
        tape: list[_Node] = []
        leaves = {k: _Node(None, ()) for k in p}

        def linear(h: Any, hnode: Any, k: str, relu: bool) -> tuple[Any, _Node]:
            w = p["W" + k]
            out = _linear_into(h, w, p["b" + k], relu)

            def vjp(g: Any) -> tuple[Any, ...]:
                if relu:
                    g = np.multiply(g, out > 0)
                return (None if hnode is None else mm(g, w)), mm(h.T, g).T, g.sum(axis=0)

            node = _Node(vjp, (hnode, leaves["W" + k], leaves["b" + k]))
            tape.append(node)
            return out, node

        h, n = linear(x, None, "1", True)
        h, n = linear(h, n, "2", True)
        z, zn = linear(h, n, "3", False)
        loss, e, s = _xent(z, y)

        def xent_vjp(g: Any) -> tuple[Any]:
            dz = e / s
            dz -= y
            dz *= g / BATCH
            return (dz,)

        node = _Node(xent_vjp, (zn,))
        tape.append(node)
        node.g = 1.0
        for node in reversed(tape):  # the backward pass
            g, node.g = node.g, None
            for parent, gi in zip(node.parents, node.vjp(g)):
                if parent is not None:
                    parent.g = gi if parent.g is None else parent.g + gi
        state["p"] = _sgd_into(p, {k: leaf.g for k, leaf in leaves.items()})
        return loss

    return step


def out_in(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same params with each weight ``(out, in)`` as ``nn.Linear`` takes it: ``W.T``, the
    reference's very memory (column-major), as NumPy code handed to ember would pass it."""
    return {k: v.T if k[0] == "W" else v for k, v in params.items()}


def setup_ember(dtype: Any, generic: bool = False, optimizer: bool = False, fused: bool = False
                ) -> Callable[[], Any]:
    ember, xp = import_ember()
    with peers.ember_ready():
        params, x, y = make_problem(dtype)
        xt, yt = xp.asarray(x), xp.asarray(y)
        if generic:
            vg = ember.value_and_grad(lambda p: loss_fn(p, xt, yt, xp))
        else:
            nn = ember.nn

            def loss(p: dict[str, Any]) -> Any:
                h = nn.linear(xt, p["W1"], p["b1"], activation=nn.relu)
                h = nn.linear(h, p["W2"], p["b2"], activation=nn.relu)
                return nn.cross_entropy(nn.linear(h, p["W3"], p["b3"]), yt)

            vg, params = ember.value_and_grad(loss), out_in(params)
        params = {k: xp.asarray(v) for k, v in params.items()}
        if fused:
            step = peers.ember_train_step(ember, loss, params, LR)
        elif optimizer:
            step = peers.ember_optim_step(ember, vg, params, LR)
        else:
            step = peers.sgd_step(vg, params, LR)
        step()
    return step


def setup_torch(dtype: Any) -> Callable[[], Any]:
    torch = peers.import_torch()
    params, x, y = make_problem(dtype)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    F = torch.nn.functional

    def loss(p: dict[str, Any]) -> Any:
        h = torch.relu(F.linear(xt, p["W1"], p["b1"]))
        h = torch.relu(F.linear(h, p["W2"], p["b2"]))
        return F.cross_entropy(F.linear(h, p["W3"], p["b3"]), yt)  # yt: probabilities

    return peers.torch_sgd_step(torch, peers.torch_params(torch, out_in(params)), loss, LR)


def setup_autograd(dtype: Any) -> Callable[[], Any]:
    autograd, anp = peers.import_autograd()
    params, x, y = make_problem(dtype)
    return peers.sgd_step(autograd.value_and_grad(lambda p: loss_fn(p, x, y, anp)), params, LR)


def setup_mygrad(dtype: Any) -> Callable[[], Any]:
    mg = optional_import("mygrad")
    params, x, y = make_problem(dtype)
    return peers.mygrad_sgd_step(mg, lambda p: loss_fn(p, x, y, mg), params, LR)


def setup_jax(dtype: Any, jit: bool) -> Callable[[], Any]:
    jax, jnp = peers.import_jax()
    params, x, y = make_problem(dtype)
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    nn = {"relu": jax.nn.relu,
          "cross_entropy": lambda z, y: -jnp.sum(y * jax.nn.log_softmax(z, axis=1)) / BATCH}
    return peers.jax_sgd_step(jax, lambda p: loss_fn(p, xj, yj, jnp, **nn), params, LR, jit)


def workloads() -> list[Workload]:
    """One workload per dtype: mlp_float32 and mlp_float64."""
    return peers.dtype_workloads(
        "mlp",
        {
            "numpy": setup_numpy,
            # the acceptance row next to the reference: the harness runs the first two side by
            # side in every round (their per-round ratio cancels the machine's drift best)
            "ember-step": functools.partial(setup_ember, fused=True),
            "ember": setup_ember,
            "ember-optim": functools.partial(setup_ember, optimizer=True),
            "ember-generic": functools.partial(setup_ember, generic=True),
            "numpy-inplace": setup_numpy_inplace,
            "minimal-tape": setup_minimal_tape,
            "torch": setup_torch,
            "autograd": setup_autograd,
            "mygrad": setup_mygrad,
            **peers.jax_impls(setup_jax),
        },
        f"MLP {'-'.join(map(str, SIZES))} ReLU, batch {BATCH}, SGD step, {{dtype}}",
        unit="ms/step",
        reference="numpy",
        ratios=[("ember-step", "numpy"), ("ember", "numpy"), ("ember", "torch"), ("ember-optim", "numpy"),
                ("ember-step", "torch"), ("ember-generic", "numpy"), ("numpy-inplace", "numpy"),
                ("ember-step", "numpy-inplace"), ("minimal-tape", "numpy"), ("ember-step", "minimal-tape")],
        # the point is a few percent, and a shared machine drifts by more within seconds: with 7
        # rounds the float64 ratio ranged 1.01-1.13x over three runs, with 25 (and the
        # reference next to ember in every round) 1.08x twice, as 201 paired rounds gave
        rounds=25,
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
