"""``maximum(x, 0.0)``, a ReLU: NumPy's ufunc with the scalar against ember's NumPy kernel.

Why: NumPy has no SIMD loop for a scalar (stride-0) operand of ``maximum`` and
``minimum``, so a ReLU written as ``maximum(x, 0.0)`` runs element by element.
ember's NumPy ``maximum`` / ``minimum`` (``autodiff/_direct.py``, ``_extremum``)
take the ufunc of the array and a kept array filled with the scalar instead;
this measures the two in one run on the shapes that meet it, so the choice
rests on numbers from the machine at hand.

Implementations, per dtype and shape (``small``: ``(1024,)``, the smallest
array the kernel takes; ``mlp``: the MLP's hidden activations ``(128, 256)``;
``ffn``: the transformer block's ``(16 * 64, 512)``; ``large``: ``(2048, 2048)``,
taken in chunks):

- ``<shape>-ufunc``  ``numpy.maximum(x, 0.0)``
- ``<shape>-kept``   ember's NumPy ``maximum(x, 0.0)``

Run: ``benchmarks/run extremum [--quick]``. Not part of ``benchmarks/run all``
(no acceptance criterion reads it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _harness import configure_env, ensure_src_on_path, reexec_clean_env, run_cli
import _peers as peers

SHAPES = {"small": (1024,), "mlp": (128, 256), "ffn": (16 * 64, 512), "large": (2048, 2048)}


def setup(dtype: Any, shape: tuple[int, ...], how: str) -> Callable[[], Any]:
    """One ``maximum(x, 0.0)`` of a random ``shape`` array, by NumPy (``ufunc``) or by ember's
    NumPy kernel (``kept``)."""
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if how == "ufunc":
        return lambda: np.maximum(x, 0.0)
    ensure_src_on_path()
    from ember.autodiff._direct import direct_functions

    f = direct_functions(np)["maximum"]
    return lambda: f(x, 0.0)


def workloads() -> list:
    """``extremum_float32`` and ``extremum_float64``."""
    def impl(shape: tuple[int, ...], how: str):
        return lambda dtype: setup(dtype, shape, how)

    impls = {f"{name}-{how}": impl(shape, how) for name, shape in SHAPES.items() for how in ("ufunc", "kept")}
    return peers.dtype_workloads(
        "extremum", impls,
        "maximum(x, 0.0): small (1024,), mlp (128, 256), ffn (1024, 512), large (2048, 2048); {dtype}",
        unit="us/call", reference="mlp-ufunc",
        ratios=[(f"{name}-kept", f"{name}-ufunc") for name in SHAPES], rounds=9,
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
