"""Helpers shared by the layers: namespace of the inputs, tuples of ints, erf."""

from __future__ import annotations

import math
from typing import Any

import array_api_compat

from ..autodiff import Tensor

BAD_TUPLE = "{op}: {name} must be an int or a tuple of {n} ints, got {value!r}"


def namespace(*arrays: Any) -> Any:
    """The array namespace of ``arrays`` (None entries ignored).

    Raw arrays mixed with ember Tensors (a raw input going through a layer
    whose parameters are being differentiated) use the Tensors' namespace,
    which accepts raw arrays of its backend.
    """
    cls = None  # live ember Tensors of one namespace, the usual case: their class knows it
    for a in arrays:
        if a is not None:
            c = a.__class__
            if cls is None:
                cls = c
            elif c is not cls:
                cls = None
                break
    if cls is not None:
        ns = getattr(cls, "_ns", None)
        if ns is not None and cls is getattr(ns, "_Tensor", None):
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


# --- erf ----------------------------------------------------------------------
# The standard has no erf. For |x| <= _ERF_L, erf(x) / x is an even entire
# function, written as a Chebyshev series in u = 2 (x / L)^2 - 1 whose
# coefficients are computed once from math.erf; beyond L the asymptotic series
# of erfc is used. Absolute error is ~1e-16 in float64.
_ERF_L = 4.0
_ERF_N = 48


def _erf_coefficients() -> list[float]:
    n = _ERF_N
    nodes = [math.cos(math.pi * (k + 0.5) / n) for k in range(n)]
    vals = []
    for u in nodes:
        x = _ERF_L * math.sqrt((u + 1.0) / 2.0)
        vals.append(math.erf(x) / x if x > 0 else 2.0 / math.sqrt(math.pi))
    coef = [
        2.0 / n * sum(vals[k] * math.cos(math.pi * j * (k + 0.5) / n) for k in range(n))
        for j in range(n)
    ]
    coef[0] /= 2.0
    while len(coef) > 1 and abs(coef[-1]) < 1e-18:
        coef.pop()
    return coef


_ERF_C = _erf_coefficients()


def erf(x: Any) -> Any:
    """The error function written with array-API operations (differentiable)."""
    xp = namespace(x)
    ax = xp.abs(x)
    inside = ax < _ERF_L
    xs = xp.clip(x, -_ERF_L, _ERF_L)
    u = 2.0 * (xs * xs) / (_ERF_L * _ERF_L) - 1.0
    # Clenshaw recurrence for sum c_j T_j(u).
    b1 = xp.zeros_like(u)
    b2 = xp.zeros_like(u)
    two_u = 2.0 * u
    for c in reversed(_ERF_C[1:]):
        b1, b2 = two_u * b1 - b2 + c, b1
    series = xs * (u * b1 - b2 + _ERF_C[0])
    # erfc(t) ~ exp(-t^2) / (t sqrt(pi)) * (1 - 1/(2t^2) + 3/(2t^2)^2 - ...), t >= L.
    t = xp.clip(ax, _ERF_L, None)
    z = 1.0 / (2.0 * t * t)
    s = xp.ones_like(t)
    term = xp.ones_like(t)
    for k in range(1, 9):
        term = -term * (2 * k - 1) * z
        s = s + term
    tail = 1.0 - xp.exp(-t * t) / (t * math.sqrt(math.pi)) * s
    sign = xp.where(x < 0, -xp.ones_like(x), xp.ones_like(x))
    return xp.where(inside, series, sign * tail)
