"""erf written with array-API operations: the standard has no erf.

For |x| <= _ERF_L, erf(x) / x is an even entire function, written as a
Chebyshev series in u = 2 (x / L)^2 - 1 whose coefficients are computed once
from math.erf; beyond L the asymptotic series of erfc is used. Absolute error
is ~1e-16 in float64. ``erf_series(xp, x)`` computes it with namespace ``xp``:
the wrapper namespaces run it on backend arrays as one primitive (``ember.autodiff.fused.erf``,
whose VJP is ``2 / sqrt(pi) * exp(-x^2)``), ``nn.erf`` on anything else.
"""

from __future__ import annotations

import math
from typing import Any

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


def erf_series(xp: Any, x: Any) -> Any:
    """The error function of ``x``, computed with namespace ``xp``."""
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
