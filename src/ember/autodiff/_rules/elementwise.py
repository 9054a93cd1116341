"""VJPs of elementwise functions (all memory-bound).

Subgradients at non-differentiable points, chosen to match PyTorch and JAX:

============  =============================================================
abs(x)        sign(x): 0 at x == 0
maximum/min   ties split the gradient equally between both inputs
pow(x, y)     d/dx is 0 where y == 0; d/dy is 0 where x == 0
hypot         0 where both inputs are 0
copysign      d/dx1 = +-1 as the signs agree; d/dx2 = 0
remainder     d/dx1 = 1, d/dx2 = -floor(x1 / x2)
============  =============================================================

ceil, floor, round, trunc, sign, floor_divide, nextafter, comparisons and
bitwise/logical functions have no rule: their results are constants, so a
gradient through them is zero.
"""

from __future__ import annotations

import math

from ._base import defvjp
from ._util import fit

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)

# ----- unary -------------------------------------------------------------
defvjp("abs", lambda ns, g, ans, x: g * ns.sign(x))
defvjp("acos", lambda ns, g, ans, x: -g / ns.sqrt(1 - x * x))
defvjp("acosh", lambda ns, g, ans, x: g / ns.sqrt(x * x - 1))
defvjp("asin", lambda ns, g, ans, x: g / ns.sqrt(1 - x * x))
defvjp("asinh", lambda ns, g, ans, x: g / ns.sqrt(x * x + 1))
defvjp("atan", lambda ns, g, ans, x: g / (1 + x * x))
defvjp("atanh", lambda ns, g, ans, x: g / (1 - x * x))
defvjp("cos", lambda ns, g, ans, x: -g * ns.sin(x))
defvjp("cosh", lambda ns, g, ans, x: g * ns.sinh(x))
defvjp("exp", lambda ns, g, ans, x: g * ans)
defvjp("expm1", lambda ns, g, ans, x: g * (ans + 1))
defvjp("log", lambda ns, g, ans, x: g / x)
defvjp("log1p", lambda ns, g, ans, x: g / (x + 1))
defvjp("log2", lambda ns, g, ans, x: g / (x * _LN2))
defvjp("log10", lambda ns, g, ans, x: g / (x * _LN10))
defvjp("negative", lambda ns, g, ans, x: -g)
defvjp("positive", lambda ns, g, ans, x: g)
defvjp("sin", lambda ns, g, ans, x: g * ns.cos(x))
defvjp("sinh", lambda ns, g, ans, x: g * ns.cosh(x))
defvjp("sqrt", lambda ns, g, ans, x: g / (2 * ans))
defvjp("square", lambda ns, g, ans, x: g * (2 * x))
defvjp("tan", lambda ns, g, ans, x: g * (1 + ans * ans))
defvjp("tanh", lambda ns, g, ans, x: g * (1 - ans * ans))
defvjp("reciprocal", lambda ns, g, ans, x: -g * (ans * ans))
defvjp("real", lambda ns, g, ans, x: fit(ns, g, x) if not ns.isdtype(x.dtype, "complex floating") else ns.astype(g, x.dtype))
defvjp("conj", lambda ns, g, ans, x: ns.conj(g))
defvjp("imag", lambda ns, g, ans, x: (
    ns.zeros_like(x) if not ns.isdtype(x.dtype, "complex floating") else -1j * ns.astype(g, x.dtype)
))


# ----- binary ------------------------------------------------------------
def _ties(ns, x1, x2, g, first):
    win = (x1 > x2) if first else (x2 > x1)
    return ns.where(win, g, ns.where(x1 == x2, g * 0.5, 0 * g))


def _pow_dx(ns, g, ans, x, y):
    return fit(ns, g * ns.where(y == 0, 0 * ans, y * ns.pow(x, y - 1)), x)


def _pow_dy(ns, g, ans, x, y):
    return fit(ns, g * ns.where(x == 0, 0 * ans, ans * ns.log(ns.where(x == 0, 1, x))), y)


def _hypot(ns, g, ans, xi):
    safe = ns.where(ans == 0, 1, ans)
    return g * ns.where(ans == 0, 0 * ans, xi / safe)


defvjp("add", lambda ns, g, ans, x, y: fit(ns, g, x), lambda ns, g, ans, x, y: fit(ns, g, y))
defvjp("subtract", lambda ns, g, ans, x, y: fit(ns, g, x), lambda ns, g, ans, x, y: fit(ns, -g, y))
defvjp("multiply", lambda ns, g, ans, x, y: fit(ns, g * y, x), lambda ns, g, ans, x, y: fit(ns, g * x, y))
defvjp("divide", lambda ns, g, ans, x, y: fit(ns, g / y, x), lambda ns, g, ans, x, y: fit(ns, -g * ans / y, y))
defvjp("pow", _pow_dx, _pow_dy)
defvjp(
    "atan2",
    lambda ns, g, ans, x1, x2: fit(ns, g * x2 / (x1 * x1 + x2 * x2), x1),
    lambda ns, g, ans, x1, x2: fit(ns, -g * x1 / (x1 * x1 + x2 * x2), x2),
)
defvjp(
    "hypot",
    lambda ns, g, ans, x1, x2: fit(ns, _hypot(ns, g, ans, x1), x1),
    lambda ns, g, ans, x1, x2: fit(ns, _hypot(ns, g, ans, x2), x2),
)
defvjp(
    "logaddexp",
    lambda ns, g, ans, x1, x2: fit(ns, g * ns.exp(x1 - ans), x1),
    lambda ns, g, ans, x1, x2: fit(ns, g * ns.exp(x2 - ans), x2),
)
defvjp(
    "maximum",
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x1, x2, g, True), x1),
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x1, x2, g, False), x2),
)
defvjp(
    "minimum",
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x2, x1, g, False), x1),
    lambda ns, g, ans, x1, x2: fit(ns, _ties(ns, x2, x1, g, True), x2),
)
defvjp(
    "copysign",
    lambda ns, g, ans, x1, x2: fit(ns, ns.where(ns.signbit(x1) == ns.signbit(ans), g, -g), x1),
    None,
)
defvjp(
    "remainder",
    lambda ns, g, ans, x1, x2: fit(ns, g, x1),
    lambda ns, g, ans, x1, x2: fit(ns, -g * ns.floor(x1 / x2), x2),
)


# ----- where / clip / astype / copy ---------------------------------------
defvjp(
    "where",
    None,
    lambda ns, g, ans, c, x1, x2: fit(ns, ns.where(c, g, 0 * g), x1),
    lambda ns, g, ans, c, x1, x2: fit(ns, ns.where(c, 0 * g, g), x2),
)


def _clip_x(ns, g, ans, x, lo, hi):
    keep = ans == x
    return fit(ns, ns.where(keep, g, 0 * g), x)


def _clip_lo(ns, g, ans, x, lo, hi):
    return fit(ns, ns.where((x < lo) & (ans == lo), g, 0 * g), lo)


def _clip_hi(ns, g, ans, x, lo, hi):
    return fit(ns, ns.where((x > hi) & (ans == hi), g, 0 * g), hi)


defvjp("clip", _clip_x, _clip_lo, _clip_hi)
defvjp("astype", lambda ns, g, ans, x, dtype, **kw: fit(ns, g, x))
defvjp("copy", lambda ns, g, ans, x: g)
defvjp("_to_device", lambda ns, g, ans, x: g.to_device(x.device))
