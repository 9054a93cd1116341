"""The GEMMs of one ``nn.Linear`` training step with the weight row- or column-major.

Why: ``nn.Linear`` keeps its weight ``(out, in)`` (PyTorch's layout), so the
forward ``x @ w.T`` hands BLAS a transposed operand. Whether that costs
anything depends on the BLAS, the dtype and the shapes, and a layer's
backward pays the other way round (``g @ w``), so this script measures the
whole step's GEMMs instead of guessing. On the 2-core development VM
(2026-12-02, OpenBLAS 0.3.31 with Haswell kernels, 1 thread, 15 rounds) a
column-major weight made the MLP's input layer (784 -> 256, batch 128, no
input gradient) 0.95x in float32 (its forward alone: 545 vs 652 us) but
1.05x in float64 (its weight gradient ``(x.T @ g).T`` is the slow product
there), and a hidden layer 1.01x / 0.99x (the forward's gain is the input
gradient's loss). The update fused into the weight-gradient GEMM (``ember.backend.gemm``, NumPy's
own OpenBLAS) gave 0.97x of the GEMM plus ember's in-place SGD (float32, 2026-12-04),
and ``gemm_update`` crossed 1.0x between 16K and 32K elements in float32 (1.04x,
0.99x; 0.95x at 64K) and at 16K in float64: ``Gemm.min_elements`` is 32768.
The script exists so that a layout policy is decided on numbers from the
machine at hand (issue 12), not on one run.

Implementations, per dtype, for the MLP's input layer (784 -> 256, no input
gradient: ``input-*``) and a hidden layer (256 -> 256, with it: ``hidden-*``):

- ``*-C``      weight C-contiguous ``(out, in)``: ``x @ w.T``, ``g.T @ x``, ``g @ w``
- ``*-F``      the same weight column-major (``w.T`` C-contiguous), its gradient
               computed column-major too (``(x.T @ g).T``), as an SGD step that
               writes into the gradient's buffer would keep it
- ``input-C-sgd``    ``input-C`` plus the SGD update in the gradient's buffer
                     (``g *= -lr; g += w``, ember's in-place SGD)
- ``input-C-fused``  ``input-C``'s forward, then the update as one GEMM into the
                     weight (``w += -lr * g.T @ x``: BLAS ``beta=1``,
                     ``ember.backend.gemm``, which ``ember.jit`` uses for a donated
                     weight), not bit-identical to ``input-C-sgd``

``gemm_update_*``: ``separate-N`` / ``gemm-N``, the update of an N-element array as
the product and two in-place passes or one gemm; where the ratio crosses 1 is
``ember.backend.gemm(xp).min_elements``.

``stacked_nt_*``: ``view-MxKxN`` / ``copied-MxKxN``, a stacked product ``a @ b`` of 64
matrices (attention's ``q @ k^T``) with ``b`` a transposed view, as it is or after a
C-contiguous copy (the copy timed too); where ``copied`` wins is jit's
``STACKED_NT`` range (``ember/func/_jit_passes.py``).

Run: ``benchmarks/run gemm_layout [--quick]``. Not part of ``benchmarks/run all``
(no acceptance criterion reads it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import Skip, configure_env, reexec_clean_env, run_cli
import _peers as peers

BATCH = 128
INPUT = (784, 256)  # (in, out) of the MLP's first layer
HIDDEN = (256, 256)
LR = 1e-6  # small: the fused form updates the weight in place on every call
UPDATE_SIZES = (1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 18)  # elements of the updated array
STACKS = ((16, 32, 16), (64, 16, 64), (64, 32, 64), (64, 64, 64), (128, 32, 128), (128, 64, 128))  # (m, k, n)


def _problem(dtype: Any, shape: tuple[int, int], order: str) -> tuple[np.ndarray, ...]:
    fan_in, fan_out = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, fan_in)).astype(dtype)
    w = (rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in)).astype(dtype)
    g = rng.standard_normal((BATCH, fan_out)).astype(dtype)
    return x, (np.asfortranarray(w) if order == "F" else w), g


def _gemm() -> Any:
    """``ember.backend.gemm`` of NumPy (NumPy's own OpenBLAS), or Skip."""
    import ember.backend as eb

    gemm = eb.gemm(eb.get("numpy"))
    if gemm is None:
        raise Skip("ember.backend.gemm: none for NumPy here (threadpoolctl missing, or another BLAS)")
    return gemm


def setup_update(dtype: Any, size: int, fused: bool) -> Callable[[], Any]:
    """``w - lr * (a @ b)`` into ``w``'s buffer (``w`` 128 x ``size // 128``, ``k`` 128): the
    product then two in-place passes, or one ``gemm`` (``ember.backend.gemm``)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, BATCH)).astype(dtype)
    b = rng.standard_normal((BATCH, size // 128)).astype(dtype)
    w = rng.standard_normal((128, size // 128)).astype(dtype)
    if fused:
        gemm = _gemm()
        return lambda: gemm.accumulate(w, a, b, -LR)

    def step() -> Any:
        p = a @ b
        np.multiply(p, LR, out=p)
        return np.subtract(w, p, out=w)

    return step


def setup_layer(dtype: Any, shape: tuple[int, int], order: str, input_grad: bool,
                update: str | None = None) -> Callable[[], Any]:
    """One layer's forward and backward GEMMs (and, with ``update``, its SGD step).

    The step returns the layer's output, its weight gradient (with ``update``: the new
    weight) and, with ``input_grad``, the input's gradient.
    """
    x, w, g = _problem(dtype, shape, order)
    if update == "fused":
        gemm = _gemm()

        def step() -> Any:
            y = x @ w.T
            gemm.accumulate(w.T, x.T, g, -LR)  # (w.T: (in, out), x.T @ g its gradient)
            return y, w  # (as the sgd form: the output, then the new weight)

        return step

    def step() -> Any:
        y = x @ w.T
        gw = (x.T @ g).T if order == "F" else g.T @ x
        if update == "sgd":
            np.multiply(gw, -LR, out=gw)
            gw += w
        return (y, gw, g @ w) if input_grad else (y, gw)

    return step


def setup_stacked(dtype: Any, mkn: tuple[int, int, int], copied: bool) -> Callable[[], Any]:
    """``a @ b`` over 64 matrices ``(m, k) @ (k, n)``, ``b`` a transposed view of ``(n, k)``
    matrices; ``copied``: made C-contiguous first, inside the timed call."""
    m, k, n = mkn
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, m, k)).astype(dtype)
    b = np.swapaxes(rng.standard_normal((64, n, k)).astype(dtype), -1, -2)
    if copied:
        return lambda: a @ np.ascontiguousarray(b)
    return lambda: a @ b


def workloads() -> list:
    """``gemm_layout_*``, ``gemm_update_*`` and ``stacked_nt_*``, float32 and float64."""
    def layer(shape: tuple[int, int], order: str, input_grad: bool, update: str | None = None):
        return lambda dtype: setup_layer(dtype, shape, order, input_grad, update)

    return peers.dtype_workloads(
        "gemm_layout",
        {
            "input-C": layer(INPUT, "C", False),
            "input-F": layer(INPUT, "F", False),
            "hidden-C": layer(HIDDEN, "C", True),
            "hidden-F": layer(HIDDEN, "F", True),
            "input-C-sgd": layer(INPUT, "C", False, "sgd"),
            "input-C-fused": layer(INPUT, "C", False, "fused"),
        },
        f"nn.Linear GEMMs, batch {BATCH}: input layer {INPUT}, hidden layer {HIDDEN}, {{dtype}}",
        unit="us/call",
        reference="input-C",
        ratios=[("input-F", "input-C"), ("hidden-F", "hidden-C"), ("input-C-fused", "input-C-sgd")],
        rounds=15,
    ) + peers.dtype_workloads(
        "gemm_update",
        {f"{kind}-{n // 1024}k": (lambda n, fused: lambda dtype: setup_update(dtype, n, fused))(n, kind == "gemm")
         for n in UPDATE_SIZES for kind in ("separate", "gemm")},
        "w - lr * (a @ b) into w (128 rows, k 128) of 8K to 256K elements, {dtype}: the product and two "
        "passes, or one gemm (where ember.backend.gemm's min_elements comes from)",
        unit="us/call",
        ratios=[(f"gemm-{n // 1024}k", f"separate-{n // 1024}k") for n in UPDATE_SIZES],
        rounds=9,
    ) + peers.dtype_workloads(
        "stacked_nt",
        {f"{kind}-{'x'.join(map(str, mkn))}": (lambda mkn, c: lambda dtype: setup_stacked(dtype, mkn, c))(
            mkn, kind == "copied") for mkn in STACKS for kind in ("view", "copied")},
        "a @ b over 64 matrices, b a transposed view: as it is, or copied C-contiguous first "
        "(where jit's STACKED_NT range comes from), {dtype}",
        unit="us/call",
        ratios=[(f"copied-{'x'.join(map(str, mkn))}", f"view-{'x'.join(map(str, mkn))}") for mkn in STACKS],
        rounds=9,
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
