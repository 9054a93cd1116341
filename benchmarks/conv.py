"""Conv2d forward + backward: a (64, 3, 32, 32) batch, 32 filters 3x3, padding 1.

Why: the array API has no convolution, so ember.nn.Conv2d is im2col (strided
slices, a stack, a batched matmul) differentiated by ember's autodiff. This
checks it stays within a small factor of PyTorch's native CPU kernels
(target: ember <= 3x torch).

One call computes ``loss = sum(conv(x)**2)`` and the gradients with respect
to the weight, the bias and the input. Implementations:

- ``ember``   ``ember.grad`` of ``ember.nn.Conv2d`` on ``ember.autodiff.numpy`` tensors
- ``torch``   ``torch.nn.functional.conv2d`` + ``.backward()`` on CPU

Run: ``python benchmarks/conv.py [--quick]`` or ``benchmarks/run conv``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Workload, configure_env, optional_import, reexec_clean_env, run_cli
from _peers import dtype_workloads
from overhead import import_ember

SHAPE = (64, 3, 32, 32)
FILTERS = 32
KERNEL = 3


def make_problem(dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic input, weight and bias."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(dtype)
    w = (rng.standard_normal((FILTERS, SHAPE[1], KERNEL, KERNEL)) * 0.1).astype(dtype)
    b = (rng.standard_normal(FILTERS) * 0.1).astype(dtype)
    return x, w, b


def setup_ember(dtype: Any) -> Callable[[], Any]:
    ember, xp = import_ember()
    import ember.nn as nn

    x, w, b = make_problem(dtype)
    layer = nn.Conv2d(xp.asarray(w), xp.asarray(b), padding=1)
    xt = xp.asarray(x)

    def loss(m: Any, inp: Any) -> Any:
        y = m(inp)
        return xp.sum(y * y)

    g = ember.grad(loss, argnums=(0, 1))
    return lambda: g(layer, xt)


def setup_torch(dtype: Any) -> Callable[[], Any]:
    torch = optional_import("torch")
    x, w, b = make_problem(dtype)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    bt = torch.tensor(b, requires_grad=True)

    def step() -> Any:
        for t in (xt, wt, bt):
            t.grad = None
        y = torch.nn.functional.conv2d(xt, wt, bt, padding=1)
        (y * y).sum().backward()
        return wt.grad

    return step


def workloads() -> list[Workload]:
    """One workload per dtype: conv2d_float32 and conv2d_float64."""
    return dtype_workloads(
        "conv2d",
        {"ember": setup_ember, "torch": setup_torch},
        f"Conv2d fwd+bwd {SHAPE} x {FILTERS} {KERNEL}x{KERNEL}, pad 1, {{dtype}}",
        unit="ms/call",
        reference="torch",
        ratios=[("ember", "torch")],
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
