"""One SGD step of a small CNN on MNIST-sized images, float32.

Why: ``conv.py`` times one convolution; this times a whole training step of a
network (two conv + ReLU + 2x2 max-pool blocks, a linear classifier, softmax
cross-entropy, backward, update), where ember's im2col convolutions, pooling
by reshape and the tape's bookkeeping all add up.

Model: ``(B, 1, 28, 28) -> conv 3x3 (8, pad 1) -> relu -> maxpool 2 -> conv 3x3
(16, pad 1) -> relu -> maxpool 2 -> flatten (784) -> linear 10``, mean
cross-entropy against integer labels, ``p - lr * g``. All implementations
start from the same weights. Implementations (reference ``torch``):

- ``ember``      ``ember.nn.Conv2d`` / ``max_pool`` / ``Linear`` / ``cross_entropy``,
                 ``ember.value_and_grad`` over the model, ``ember.tree.map`` update
- ``torch``      eager CPU: ``F.conv2d``, ``F.max_pool2d``, ``F.linear``,
                 ``F.cross_entropy``, ``.backward()``, in-place update under ``no_grad``
- ``jax-eager``  ``lax.conv_general_dilated`` + ``lax.reduce_window``, ``value_and_grad`` un-jitted
- ``jax-jit``    the same whole step under ``jax.jit``
- ``autograd``   HIPS autograd; convolution written as im2col (slices, stack,
                 matmul) since autograd has no conv2d for NCHW batches

Run: ``python benchmarks/cnn.py [--quick]`` or ``benchmarks/run cnn``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, reexec_clean_env, run_cli
import _peers as peers
from overhead import import_ember

BATCH = 64
IMAGE = 28
CHANNELS = (1, 8, 16)
CLASSES = 10
LR = 0.01


def make_problem(batch: int = BATCH, image: int = IMAGE, dtype: Any = np.float32) -> dict[str, Any]:
    """Deterministic weights (torch layouts: OIHW, (out, in)), images and labels."""
    rng = np.random.default_rng(0)
    p: dict[str, Any] = {}
    for i, (cin, cout) in enumerate(zip(CHANNELS[:-1], CHANNELS[1:]), start=1):
        p[f"w{i}"] = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (9 * cin))).astype(dtype)
        p[f"b{i}"] = np.zeros(cout, dtype=dtype)
    feat = CHANNELS[-1] * (image // 4) ** 2
    p["w3"] = (rng.standard_normal((CLASSES, feat)) / np.sqrt(feat)).astype(dtype)
    p["b3"] = np.zeros(CLASSES, dtype=dtype)
    x = rng.standard_normal((batch, CHANNELS[0], image, image)).astype(dtype)
    labels = rng.integers(0, CLASSES, batch)
    return {"params": p, "x": x, "labels": labels}


# ----------------------------------------------------- generic (autograd) model


def _conv3x3(x: Any, w: Any, b: Any, ns: Any) -> Any:
    """3x3 convolution, padding 1, stride 1, as im2col + matmul in namespace ``ns``."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    zc = ns.zeros((n, c, h, 1), dtype=x.dtype)
    xp_ = ns.concatenate([zc, x, zc], axis=3)
    zr = ns.zeros((n, c, 1, wd + 2), dtype=x.dtype)
    xp_ = ns.concatenate([zr, xp_, zr], axis=2)
    cols = ns.stack([xp_[:, :, i : i + h, j : j + wd] for i in range(3) for j in range(3)], axis=2)
    cols = ns.reshape(cols, (n, c * 9, h * wd))
    y = ns.matmul(ns.reshape(w, (o, c * 9)), cols)
    return ns.reshape(y, (n, o, h, wd)) + ns.reshape(b, (1, o, 1, 1))


def _pool2(x: Any, ns: Any) -> Any:
    n, c, h, w = x.shape
    return ns.max(ns.reshape(x, (n, c, h // 2, 2, w // 2, 2)), axis=(3, 5))


def generic_loss(p: dict[str, Any], x: Any, onehot: Any, ns: Any) -> Any:
    """The CNN's mean cross-entropy written against a numpy-like namespace."""
    h = _pool2(ns.maximum(_conv3x3(x, p["w1"], p["b1"], ns), 0.0), ns)
    h = _pool2(ns.maximum(_conv3x3(h, p["w2"], p["b2"], ns), 0.0), ns)
    z = ns.matmul(ns.reshape(h, (h.shape[0], -1)), ns.transpose(p["w3"])) + p["b3"]
    zs = z - ns.max(z, axis=1, keepdims=True)
    logp = zs - ns.log(ns.sum(ns.exp(zs), axis=1, keepdims=True))
    return -ns.sum(onehot * logp) / x.shape[0]


# ------------------------------------------------------------------ impl setups


def setup_ember(prob: dict[str, Any]) -> Callable[[], Any]:
    """ember.nn layers, value_and_grad over a dict of modules, tree.map SGD update."""
    ember, xp = import_ember()
    with peers.ember_ready():
        import ember.nn as nn

        p = {k: xp.asarray(v) for k, v in prob["params"].items()}
        model = {
            "conv1": nn.Conv2d(p["w1"], p["b1"], padding=1),
            "conv2": nn.Conv2d(p["w2"], p["b2"], padding=1),
            "fc": nn.Linear(p["w3"], p["b3"]),
        }
        x, labels = xp.asarray(prob["x"]), xp.asarray(prob["labels"])

        def loss(m: dict[str, Any]) -> Any:
            h = nn.max_pool(nn.relu(m["conv1"](x)), 2)
            h = nn.max_pool(nn.relu(m["conv2"](h)), 2)
            z = m["fc"](xp.reshape(h, (h.shape[0], -1)))
            return nn.cross_entropy(z, labels)

        return peers.ember_model_step(ember, loss, model, LR)


def setup_torch(prob: dict[str, Any]) -> Callable[[], Any]:
    torch = peers.import_torch()
    F = torch.nn.functional
    x = torch.from_numpy(prob["x"])
    labels = torch.from_numpy(prob["labels"])

    def loss(p: dict[str, Any]) -> Any:
        h = F.max_pool2d(F.relu(F.conv2d(x, p["w1"], p["b1"], padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
        return F.cross_entropy(F.linear(h.flatten(1), p["w3"], p["b3"]), labels)

    return peers.torch_sgd_step(torch, peers.torch_params(torch, prob["params"]), loss, LR)


def setup_jax(prob: dict[str, Any], jit: bool) -> Callable[[], Any]:
    jax, jnp = peers.import_jax()
    lax = jax.lax
    x = jnp.asarray(prob["x"])
    onehot = jnp.asarray(np.eye(CLASSES, dtype=prob["x"].dtype)[prob["labels"]])

    def block(h: Any, w: Any, b: Any) -> Any:
        h = lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1))) + b[None, :, None, None]
        h = jnp.maximum(h, 0.0)
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss(p: dict[str, Any]) -> Any:
        h = block(block(x, p["w1"], p["b1"]), p["w2"], p["b2"])
        z = h.reshape(h.shape[0], -1) @ p["w3"].T + p["b3"]
        return -jnp.sum(onehot * jax.nn.log_softmax(z, axis=1)) / x.shape[0]

    return peers.jax_sgd_step(jax, loss, prob["params"], LR, jit)


def setup_autograd(prob: dict[str, Any]) -> Callable[[], Any]:
    autograd, anp = peers.import_autograd()
    x = prob["x"]
    onehot = np.eye(CLASSES, dtype=x.dtype)[prob["labels"]]
    vg = autograd.value_and_grad(lambda p: generic_loss(p, x, onehot, anp))
    return peers.sgd_step(vg, prob["params"], LR)


def workloads(batch: int = BATCH, image: int = IMAGE) -> list[Workload]:
    """The ``cnn`` workload; ``batch``/``image`` shrink it for smoke tests."""
    if image % 4:
        raise ValueError(f"cnn: image size {image} must be a multiple of 4 (two 2x2 poolings)")

    description = (
        f"CNN step ({batch}, 1, {image}, {image}) conv8-pool-conv16-pool-linear10, "
        "cross-entropy, SGD, float32"
    )
    setups = {
        "ember": setup_ember,
        "torch": setup_torch,
        **peers.jax_impls(setup_jax),
        "autograd": setup_autograd,
    }
    return [peers.model_step_workload("cnn", description, lambda: make_problem(batch, image), setups)]


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
