"""Helpers shared by the layers: namespace of the inputs, tuples of ints, erf."""

from __future__ import annotations

from typing import Any

import array_api_compat

from ..autodiff import Tensor
from ..autodiff import fused as _fused

BAD_TUPLE = "{op}: {name} must be an int or a tuple of {n} ints, got {value!r}"


def namespace(*arrays: Any) -> Any:
    """The array namespace of ``arrays`` (None entries ignored).

    Raw arrays mixed with ember Tensors (a raw input going through a layer
    whose parameters are being differentiated) use the Tensors' namespace,
    which accepts raw arrays of its backend.
    """
    # live ember Tensors of one namespace, the usual case: their class knows it
    cls = arrays[0].__class__ if arrays else None
    ns = getattr(cls, "_ns", None)
    if ns is not None and cls is getattr(ns, "_Tensor", None):
        for a in arrays:
            if a.__class__ is not cls and a is not None:
                break
        else:
            return ns
    arrays = tuple(a for a in arrays if a is not None)
    try:
        return array_api_compat.array_namespace(*arrays)
    except TypeError:
        for a in arrays:
            if isinstance(a, Tensor):
                return a.__array_namespace__()
        raise


def ntuple(value: Any, n: int, op: str, name: str) -> tuple[int, ...]:
    """``value`` as a tuple of ``n`` ints (an int is repeated)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    if isinstance(value, (tuple, list)) and len(value) == n and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value)
    raise ValueError(BAD_TUPLE.format(op=op, name=name, n=n, value=value))


def dtype_of(xp: Any, dtype: Any) -> Any:
    """``dtype`` (a dtype or a standard name such as "float32"), default float32."""
    if dtype is None:
        return xp.float32
    if isinstance(dtype, str):
        return getattr(xp, dtype)
    return dtype


def erf(x: Any) -> Any:
    """The error function, written with array-API operations (differentiable).

    The standard has no erf: ember sums a Chebyshev series (absolute error
    ~1e-16 in float64, ``ember.kernels.erf``). It is one primitive
    (``ember.autodiff.fused.erf``) whose gradient is ``2 / sqrt(pi) * exp(-x^2)``;
    on NumPy its kernel is ``scipy.special.erf`` where SciPy is installed
    (float32 and float64; imported at the first call, never with ember).
    """
    return _fused.erf(x)
