"""One SGD step of a pre-LayerNorm transformer block, batch 16, sequence 64, width 128, float32.

Why: a transformer block mixes batched matmuls (attention, projections)
with many cheap ops (layer norms, softmax, GELU, reshapes, transposes, residual
adds): it measures whether the tape's per-op cost stays small next to
mid-sized matmuls.

Block: ``h = x + MHA(LN1(x))`` (4 heads, separate q/k/v/out projections with
bias), ``y = h + W2 gelu_tanh(W1 LN2(h))`` (MLP 128-512-128); loss
``mean((y - t)**2)`` against a fixed target; backward; ``p - lr * g`` for the 16
parameters. All implementations start from the same weights.
Implementations (reference ``torch``):

- ``ember``      ``ember.nn.MultiHeadAttention`` / ``LayerNorm`` / ``Linear`` / ``gelu``,
                 ``ember.value_and_grad`` over the modules, ``ember.tree.map`` update
- ``torch``      eager CPU with ``F.layer_norm``, ``F.linear``,
                 ``F.scaled_dot_product_attention``, ``F.gelu(approximate="tanh")``
- ``jax-eager``  the same block in ``jax.numpy``, ``value_and_grad`` un-jitted
- ``jax-jit``    the whole step under ``jax.jit``
- ``autograd``   HIPS autograd over the block written in ``autograd.numpy``
- ``mygrad``     MyGrad over the same generic block

Run: ``python benchmarks/transformer.py [--quick]`` or ``benchmarks/run transformer``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, optional_import, reexec_clean_env, run_cli
import _peers as peers
from overhead import import_ember

BATCH, SEQ, DIM, HEADS, HIDDEN = 16, 64, 128, 4, 512
LR = 0.01
EPS = 1e-5
_GELU_C = math.sqrt(2.0 / math.pi)


def make_problem(
    batch: int = BATCH, seq: int = SEQ, dim: int = DIM, heads: int = HEADS, hidden: int = HIDDEN
) -> dict[str, Any]:
    """Deterministic float32 params (torch layouts), input ``x`` and target ``t``."""
    if dim % heads:
        raise ValueError(f"transformer: dim={dim} is not divisible by heads={heads}")
    rng = np.random.default_rng(0)
    shapes = {"q": (dim, dim), "k": (dim, dim), "v": (dim, dim), "o": (dim, dim), "fc1": (hidden, dim),
              "fc2": (dim, hidden)}
    p: dict[str, np.ndarray] = {}
    for name, (out, inp) in shapes.items():
        bound = 1.0 / math.sqrt(inp)
        p[f"{name}_w"] = rng.uniform(-bound, bound, (out, inp)).astype(np.float32)
        p[f"{name}_b"] = rng.uniform(-bound, bound, (out,)).astype(np.float32)
    for ln in ("ln1", "ln2"):
        p[f"{ln}_w"] = np.ones(dim, np.float32)
        p[f"{ln}_b"] = np.zeros(dim, np.float32)
    x = rng.standard_normal((batch, seq, dim)).astype(np.float32)
    t = rng.standard_normal((batch, seq, dim)).astype(np.float32)
    return {"params": p, "x": x, "t": t, "heads": heads}


# ------------------------------------------------------ generic block (jax, autograd, mygrad)


def _layer_norm(x: Any, w: Any, b: Any, ns: Any) -> Any:
    mean = ns.mean(x, axis=-1, keepdims=True)
    d = x - mean
    var = ns.mean(d * d, axis=-1, keepdims=True)
    return d / ns.sqrt(var + EPS) * w + b


def _linear(x: Any, w: Any, b: Any, ns: Any) -> Any:
    return ns.matmul(x, ns.transpose(w)) + b


def generic_loss(p: dict[str, Any], x: Any, t: Any, heads: int, ns: Any) -> Any:
    """The block's loss written against a numpy-like namespace."""
    bsz, seq, dim = x.shape
    hd = dim // heads

    def split(z: Any) -> Any:
        return ns.transpose(ns.reshape(z, (bsz, seq, heads, hd)), (0, 2, 1, 3))

    a = _layer_norm(x, p["ln1_w"], p["ln1_b"], ns)
    q, k, v = (split(_linear(a, p[f"{n}_w"], p[f"{n}_b"], ns)) for n in "qkv")
    s = ns.matmul(q, ns.transpose(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(hd))
    s = ns.exp(s - ns.max(s, axis=-1, keepdims=True))
    att = ns.matmul(s / ns.sum(s, axis=-1, keepdims=True), v)
    att = ns.reshape(ns.transpose(att, (0, 2, 1, 3)), (bsz, seq, dim))
    h = x + _linear(att, p["o_w"], p["o_b"], ns)
    m = _linear(_layer_norm(h, p["ln2_w"], p["ln2_b"], ns), p["fc1_w"], p["fc1_b"], ns)
    m = 0.5 * m * (1.0 + ns.tanh(_GELU_C * (m + 0.044715 * (m * m * m))))
    y = h + _linear(m, p["fc2_w"], p["fc2_b"], ns)
    d = y - t
    return ns.mean(d * d)


# ------------------------------------------------------------------ impl setups


def setup_ember(prob: dict[str, Any]) -> Callable[[], Any]:
    """ember.nn modules in a dict, value_and_grad, tree.map SGD update."""
    ember, xp = import_ember()
    with peers.ember_ready():
        import ember.nn as nn

        p = {k: xp.asarray(v) for k, v in prob["params"].items()}
        dim = int(p["ln1_w"].shape[0])
        model = {
            "ln1": nn.LayerNorm(p["ln1_w"], p["ln1_b"], (dim,), EPS),
            "attn": nn.MultiHeadAttention(
                *(nn.Linear(p[f"{n}_w"], p[f"{n}_b"]) for n in "qkvo"), num_heads=prob["heads"]
            ),
            "ln2": nn.LayerNorm(p["ln2_w"], p["ln2_b"], (dim,), EPS),
            "fc1": nn.Linear(p["fc1_w"], p["fc1_b"]),
            "fc2": nn.Linear(p["fc2_w"], p["fc2_b"]),
        }
        x, t = xp.asarray(prob["x"]), xp.asarray(prob["t"])

        def loss(m: dict[str, Any]) -> Any:
            h = x + m["attn"](m["ln1"](x))
            y = h + m["fc2"](nn.gelu(m["fc1"](m["ln2"](h)), approximate=True))
            d = y - t
            return xp.mean(d * d)

        return peers.ember_model_step(ember, loss, model, LR)


def setup_torch(prob: dict[str, Any]) -> Callable[[], Any]:
    torch = peers.import_torch()
    F = torch.nn.functional
    x, t = torch.from_numpy(prob["x"]), torch.from_numpy(prob["t"])
    heads = prob["heads"]
    bsz, seq, dim = x.shape

    def split(z: Any) -> Any:
        return z.view(bsz, seq, heads, dim // heads).transpose(1, 2)

    def loss(p: dict[str, Any]) -> Any:
        a = F.layer_norm(x, (dim,), p["ln1_w"], p["ln1_b"], EPS)
        q, k, v = (split(F.linear(a, p[f"{n}_w"], p[f"{n}_b"])) for n in "qkv")
        att = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(bsz, seq, dim)
        h = x + F.linear(att, p["o_w"], p["o_b"])
        m = F.linear(F.layer_norm(h, (dim,), p["ln2_w"], p["ln2_b"], EPS), p["fc1_w"], p["fc1_b"])
        y = h + F.linear(F.gelu(m, approximate="tanh"), p["fc2_w"], p["fc2_b"])
        return F.mse_loss(y, t)

    return peers.torch_sgd_step(torch, peers.torch_params(torch, prob["params"]), loss, LR)


def setup_jax(prob: dict[str, Any], jit: bool) -> Callable[[], Any]:
    jax, jnp = peers.import_jax()
    x, t = jnp.asarray(prob["x"]), jnp.asarray(prob["t"])
    heads = prob["heads"]
    return peers.jax_sgd_step(jax, lambda p: generic_loss(p, x, t, heads, jnp), prob["params"], LR, jit)


def setup_autograd(prob: dict[str, Any]) -> Callable[[], Any]:
    autograd, anp = peers.import_autograd()
    x, t, heads = prob["x"], prob["t"], prob["heads"]
    vg = autograd.value_and_grad(lambda p: generic_loss(p, x, t, heads, anp))
    return peers.sgd_step(vg, prob["params"], LR)


def setup_mygrad(prob: dict[str, Any]) -> Callable[[], Any]:
    mg = optional_import("mygrad")
    x, t, heads = prob["x"], prob["t"], prob["heads"]
    return peers.mygrad_sgd_step(mg, lambda p: generic_loss(p, x, t, heads, mg), prob["params"], LR)


def workloads(
    batch: int = BATCH, seq: int = SEQ, dim: int = DIM, heads: int = HEADS, hidden: int = HIDDEN
) -> list[Workload]:
    """The ``transformer`` workload; the sizes shrink it for smoke tests."""

    description = (
        f"pre-LN transformer block step, batch {batch}, seq {seq}, d {dim}, "
        f"{heads} heads, MLP {hidden}, SGD, float32"
    )
    setups = {
        "ember": setup_ember,
        "torch": setup_torch,
        **peers.jax_impls(setup_jax),
        "autograd": setup_autograd,
        "mygrad": setup_mygrad,
    }
    return [
        peers.model_step_workload(
            "transformer", description, lambda: make_problem(batch, seq, dim, heads, hidden), setups
        )
    ]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
