"""One SGD step of an MLP 784-256-256-10 (ReLU), batch 128, in float32 and float64.

Why: the overhead benchmark measures dispatch on tiny arrays; this one checks
that on a realistic small model the wrapper's cost disappears behind matmuls
(ember should be close to hand-written NumPy).

A step is: forward, softmax cross-entropy against one-hot labels (mean over
the batch), backward, and the update ``p - lr * g`` for every parameter.
Parameters are carried from step to step.  Implementations:

- ``numpy``      hand-written forward and backward (reference)
- ``ember``      ``ember.value_and_grad`` over a dict of params, plain arithmetic update
- ``torch``      eager CPU, ``.backward()`` + in-place update under ``no_grad``
- ``autograd``   HIPS autograd ``value_and_grad`` over the dict
- ``mygrad``     MyGrad tensors + ``.backward()``
- ``jax-eager``  ``jax.value_and_grad`` without jit
- ``jax-jit``    the whole step (value_and_grad + update) under ``jax.jit``

Run: ``python benchmarks/mlp.py [--quick]`` or ``benchmarks/run mlp``.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Skip, Workload, configure_env, optional_import, reexec_clean_env, run_cli
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


def loss_fn(params: dict[str, Any], x: Any, y: Any, ns: Any) -> Any:
    """Softmax cross-entropy of the MLP, written against a numpy-like namespace."""
    h = ns.maximum(ns.matmul(x, params["W1"]) + params["b1"], 0.0)
    h = ns.maximum(ns.matmul(h, params["W2"]) + params["b2"], 0.0)
    z = ns.matmul(h, params["W3"]) + params["b3"]
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


def setup_ember(dtype: Any) -> Callable[[], Any]:
    ember, xp = import_ember()
    try:
        params, x, y = make_problem(dtype)
        state = {"p": {k: xp.asarray(v) for k, v in params.items()}}
        xt, yt = xp.asarray(x), xp.asarray(y)
        vg = ember.value_and_grad(lambda p: loss_fn(p, xt, yt, xp))

        def step() -> Any:
            loss, g = vg(state["p"])
            state["p"] = {k: v - LR * g[k] for k, v in state["p"].items()}
            return loss

        step()
    except Exception as exc:
        raise Skip(f"ember API not ready: {type(exc).__name__}: {exc}") from exc
    return step


def setup_torch(dtype: Any) -> Callable[[], Any]:
    torch = optional_import("torch")
    torch.set_num_threads(1)
    params, x, y = make_problem(dtype)
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step() -> Any:
        h = torch.relu(xt @ p["W1"] + p["b1"])
        h = torch.relu(h @ p["W2"] + p["b2"])
        z = h @ p["W3"] + p["b3"]
        zs = z - torch.amax(z, dim=1, keepdim=True)
        logp = zs - torch.log(torch.sum(torch.exp(zs), dim=1, keepdim=True))
        loss = -torch.sum(yt * logp) / BATCH
        loss.backward()
        with torch.no_grad():
            for v in p.values():
                v -= LR * v.grad
                v.grad = None
        return loss

    return step


def setup_autograd(dtype: Any) -> Callable[[], Any]:
    autograd = optional_import("autograd")
    anp = optional_import("autograd.numpy")
    params, x, y = make_problem(dtype)
    state = {"p": params}
    vg = autograd.value_and_grad(lambda p: loss_fn(p, x, y, anp))

    def step() -> Any:
        loss, g = vg(state["p"])
        state["p"] = {k: v - LR * g[k] for k, v in state["p"].items()}
        return loss

    return step


def setup_mygrad(dtype: Any) -> Callable[[], Any]:
    mg = optional_import("mygrad")
    params, x, y = make_problem(dtype)
    state = {"p": params}

    def step() -> Any:
        p = {k: mg.tensor(v) for k, v in state["p"].items()}
        loss = loss_fn(p, x, y, mg)
        loss.backward()
        state["p"] = {k: v.data - LR * v.grad for k, v in p.items()}
        return loss

    return step


def _jax() -> tuple[Any, Any]:
    jax = optional_import("jax")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    return jax, jax.numpy


def _jax_step(dtype: Any, jit: bool) -> Callable[[], Any]:
    jax, jnp = _jax()
    params, x, y = make_problem(dtype)
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    vg = jax.value_and_grad(lambda p: loss_fn(p, xj, yj, jnp))

    def update(p: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        loss, g = vg(p)
        return loss, {k: v - LR * g[k] for k, v in p.items()}

    if jit:
        update = jax.jit(update)
    state = {"p": {k: jnp.asarray(v) for k, v in params.items()}}

    def step() -> Any:
        loss, state["p"] = update(state["p"])
        return jax.block_until_ready((loss, state["p"]))

    return step


def workloads() -> list[Workload]:
    """One workload per dtype: mlp_float32 and mlp_float64."""
    out = []
    for dtype in (np.float32, np.float64):
        name = np.dtype(dtype).name

        def bind(f: Callable[[Any], Callable[[], Any]], d: Any = dtype) -> Callable[[], Any]:
            return lambda: f(d)

        out.append(
            Workload(
                name=f"mlp_{name}",
                unit="ms/step",
                description=f"MLP {'-'.join(map(str, SIZES))} ReLU, batch {BATCH}, SGD step, {name}",
                impls={
                    "numpy": bind(setup_numpy),
                    "ember": bind(setup_ember),
                    "torch": bind(setup_torch),
                    "autograd": bind(setup_autograd),
                    "mygrad": bind(setup_mygrad),
                    "jax-eager": bind(lambda d: _jax_step(d, jit=False)),
                    "jax-jit": bind(lambda d: _jax_step(d, jit=True)),
                },
                reference="numpy",
                ratios=[("ember", "numpy"), ("ember", "torch")],
            )
        )
    return out


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
