"""Sums and maxima along short rows: NumPy's reductions against ember's kernels.

Why: softmax and layer norm reduce along the last axis, over rows of tens to
hundreds of elements, where NumPy pays a fixed cost per row. ``ember.kernels``'
``sum_last`` / ``mean_last`` compute those sums as a matrix-vector product with
ones (one BLAS call) on C-contiguous float32/float64 arrays; this measures the
two in the same run on the transformer block's shapes (``transformer.py``), so
the choice rests on numbers from the machine at hand.

Implementations, per dtype and shape (``scores``: the attention scores
``(16, 4, 64, 64)``, softmax's sum; ``features``: ``(16, 64, 128)``, layer
norm's mean; ``logits``: a classifier's ``(1024, 10)``, the cross-entropy's max
and sum):

- ``*-sum``      ``numpy.sum(x, axis=-1, keepdims=True)``
- ``*-product``  ``ember.kernels.sum_last`` (``x @ ones``; for ``logits``, over the
  columns of a transposed copy)
- ``logits-max`` / ``logits-max-columns``: ``numpy.max`` against
  ``ember.kernels.max_last`` (the columns of a transposed copy)
- ``scores-max`` / ``scores-max-rows``: ``numpy.max`` against ember's NumPy ``max``
  (``maximum.reduceat`` over the rows, ``autodiff/_direct.py``), softmax's shift
- ``bias-sum`` / ``bias-product``: the sum over the leading axes of ``(16, 64, 512)``
  (a bias's gradient): ``numpy.sum(x, axis=(0, 1))`` against
  ``ember.kernels.sum_leading`` (``ones @ rows``)

Run: ``benchmarks/run reductions [--quick]``. Not part of ``benchmarks/run all``
(no acceptance criterion reads it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import configure_env, ensure_src_on_path, reexec_clean_env, run_cli
import _peers as peers

SHAPES = {"scores": (16, 4, 64, 64), "features": (16, 64, 128), "logits": (1024, 10)}
BIAS = (16, 64, 512)


def setup(dtype: Any, shape: tuple[int, ...], how: str) -> Callable[[], Any]:
    """One last-axis sum (``how``: ``sum`` by NumPy, ``product`` by ``sum_last``) or max
    (``max`` by NumPy, ``max-columns`` by ``max_last``, ``max-rows`` by ember's direct
    ``max``), or a sum over the leading axes (``leading-sum`` by NumPy, ``leading-product``
    by ``sum_leading``), of a random ``shape`` array."""
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if how == "leading-sum":
        return lambda: np.sum(x, axis=(0, 1))
    if how in ("sum", "max"):
        f = getattr(np, how)
        return lambda: f(x, axis=-1, keepdims=True)
    ensure_src_on_path()
    import array_api_compat.numpy as cnp

    from ember.autodiff._direct import direct_functions
    from ember.kernels import max_last, sum_last, sum_leading

    if how == "leading-product":
        return lambda: sum_leading(cnp, x, 2)
    if how == "max-rows":
        f = direct_functions(np)["max"]
        return lambda: f(x, axis=-1, keepdims=True)
    f = sum_last if how == "product" else max_last
    return lambda: f(cnp, x, -1, keepdims=True)


def workloads() -> list:
    """``reductions_float32`` and ``reductions_float64``."""
    def impl(shape: tuple[int, ...], how: str):
        return lambda dtype: setup(dtype, shape, how)

    impls = {f"{name}-{how}": impl(shape, how) for name, shape in SHAPES.items() for how in ("sum", "product")}
    impls.update({f"logits-{how}": impl(SHAPES["logits"], how) for how in ("max", "max-columns")})
    impls.update({f"scores-{how}": impl(SHAPES["scores"], how) for how in ("max", "max-rows")})
    impls.update({f"bias-{how}": impl(BIAS, f"leading-{how}") for how in ("sum", "product")})
    return peers.dtype_workloads(
        "reductions", impls,
        "sum / max along the last axis: scores (16, 4, 64, 64), features (16, 64, 128), logits (1024, 10); "
        "sum over the leading axes: bias (16, 64, 512); {dtype}",
        unit="us/call", reference="scores-sum",
        ratios=[("scores-product", "scores-sum"), ("features-product", "features-sum"),
                ("logits-product", "logits-sum"), ("logits-max-columns", "logits-max"),
                ("scores-max-rows", "scores-max"), ("bias-product", "bias-sum")], rounds=9,
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
