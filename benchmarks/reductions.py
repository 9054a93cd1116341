"""Sums along a short last axis: NumPy's reduction against a product with ones.

Why: softmax and layer norm reduce along the last axis, over rows of tens to
hundreds of elements, where NumPy pays a fixed cost per row. ``ember.kernels``'
``sum_last`` / ``mean_last`` compute those sums as a matrix-vector product with
ones (one BLAS call) on C-contiguous float32/float64 arrays; this measures the
two in the same run on the transformer block's shapes (``transformer.py``), so
the choice rests on numbers from the machine at hand.

Implementations, per dtype and shape (``scores``: the attention scores
``(16, 4, 64, 64)``, softmax's sum; ``features``: ``(16, 64, 128)``, layer
norm's mean):

- ``*-sum``      ``numpy.sum(x, axis=-1, keepdims=True)``
- ``*-product``  ``ember.kernels.sum_last`` (``x @ ones``)

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

SHAPES = {"scores": (16, 4, 64, 64), "features": (16, 64, 128)}


def setup(dtype: Any, shape: tuple[int, ...], how: str) -> Callable[[], Any]:
    """One last-axis sum of a random ``shape`` array, by NumPy's reduction or the product."""
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if how == "sum":
        return lambda: np.sum(x, axis=-1, keepdims=True)
    ensure_src_on_path()
    import array_api_compat.numpy as cnp

    from ember.kernels import sum_last

    return lambda: sum_last(cnp, x, -1, keepdims=True)


def workloads() -> list:
    """``reductions_float32`` and ``reductions_float64``."""
    def impl(shape: tuple[int, ...], how: str):
        return lambda dtype: setup(dtype, shape, how)

    impls = {f"{name}-{how}": impl(shape, how) for name, shape in SHAPES.items() for how in ("sum", "product")}
    return peers.dtype_workloads(
        "reductions", impls,
        "sum along the last axis: scores (16, 4, 64, 64), features (16, 64, 128), {dtype}",
        unit="us/call", reference="scores-sum",
        ratios=[("scores-product", "scores-sum"), ("features-product", "features-sum")], rounds=9,
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
