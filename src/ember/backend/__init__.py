"""ember.backend: the registry of array libraries and what each can do.

This is the only ember layer that imports array libraries (NumPy, CuPy, Dask,
array-api-strict, PyTorch, JAX), always lazily. Every other layer gets its
namespace from its arrays; this layer maps names, arrays and raw modules to an
array-API conformant namespace, probes capabilities and draws random numbers.

>>> import ember.backend as eb
>>> xp = eb.get("numpy")
>>> eb.name(xp), eb.capabilities(xp).in_place
('numpy', True)
"""

from __future__ import annotations

from ember.backend._capabilities import (
    Capabilities,
    RandomSource,
    capabilities,
    may_share_memory,
    random_source,
)
from ember.backend._fusion import Fuser, fuser
from ember.backend._gemm import Gemm, gemm
from ember.backend._registry import KNOWN, available, get, name, raw

__all__ = [
    "KNOWN",
    "Capabilities",
    "Fuser",
    "Gemm",
    "RandomSource",
    "available",
    "capabilities",
    "fuser",
    "gemm",
    "get",
    "may_share_memory",
    "name",
    "random_source",
    "raw",
]
