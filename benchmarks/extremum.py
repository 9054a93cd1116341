"""``maximum(x, 0.0)``, a ReLU, and ``clip``: NumPy's and compat's against ember's NumPy kernels.

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
- ``<shape>-clip-compat`` / ``<shape>-clip``: ``clip(x, 0.0, 6.0)`` by array-api-compat
  and by ember's NumPy ``clip`` (``autodiff/_direct.py``, ``_clip``: NumPy's ``clip`` on the
  bounds cast to 0-d arrays, without compat's Python around it)

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
    NumPy kernel (``kept``); or its ``clip(x, 0.0, 6.0)`` by compat (``clip-compat``) or by
    ember (``clip``)."""
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if how == "ufunc":
        return lambda: np.maximum(x, 0.0)
    ensure_src_on_path()
    import array_api_compat.numpy as cnp

    from ember.autodiff._direct import direct_functions

    if how == "clip-compat":
        return lambda: cnp.clip(x, 0.0, 6.0)
    direct = direct_functions(np, cnp.clip)
    if how == "clip":
        return lambda: direct["clip"](x, 0.0, 6.0)
    f = direct["maximum"]
    return lambda: f(x, 0.0)


def workloads() -> list:
    """``extremum_float32`` and ``extremum_float64``."""
    def impl(shape: tuple[int, ...], how: str):
        return lambda dtype: setup(dtype, shape, how)

    impls = {f"{name}-{how}": impl(shape, how) for name, shape in SHAPES.items()
             for how in ("ufunc", "kept", "clip-compat", "clip")}
    return peers.dtype_workloads(
        "extremum", impls,
        "maximum(x, 0.0) and clip(x, 0.0, 6.0): small (1024,), mlp (128, 256), ffn (1024, 512), "
        "large (2048, 2048); {dtype}",
        unit="us/call", reference="mlp-ufunc",
        ratios=[(f"{name}-{a}", f"{name}-{b}") for name in SHAPES
                for a, b in (("kept", "ufunc"), ("clip", "clip-compat"))], rounds=9,
    )


if __name__ == "__main__":
    reexec_clean_env()
    configure_env()
    run_cli(workloads(), sys.argv[1:], description=__doc__.splitlines()[0])
