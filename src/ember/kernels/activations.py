"""Activation forwards in array-API terms: ReLU and the tanh form of GELU.

Each takes the namespace it computes with (``ns``): a backend's own for the
forward and the first-order backward pass, ember's wrapper for higher orders.
"""

from __future__ import annotations

import math

__all__ = ["relu", "GELU_C", "GELU_K", "GELU_CK", "gelu_tanh_u", "gelu_tanh_t", "in_place"]


def relu(ns, x):
    """``max(x, 0)`` in ``x``'s dtype: a bool stays bool (``max(b, False)`` is ``b``).

    Why not ``maximum(x, 0)`` alone: NumPy promotes a bool array with a Python 0
    to int64, and the standard does not define bool with int at all.
    """
    if x.dtype == ns.bool:
        return ns.asarray(x, copy=True)
    return ns.maximum(x, 0)


GELU_C = math.sqrt(2.0 / math.pi)
"""The tanh form of GELU: ``0.5 x (1 + tanh(u))``, ``u = GELU_C * (x + GELU_K * x^3)``."""
GELU_K = 0.044715
"""The cubic term's coefficient of :data:`GELU_C`'s ``u``."""


GELU_CK = GELU_C * GELU_K
"""``c k``: the argument is computed as ``x (c + c k x^2)``, one product fewer than
``c (x + k x^3)`` (the same value up to rounding)."""


def gelu_tanh_u(ns, x, x2):
    """The tanh form's argument ``c (x + k x^3)``, as ``x (c + c k x^2)``, given ``x2 = x * x``."""
    return x * (GELU_C + GELU_CK * x2)


def in_place(ns, x) -> bool:
    """Whether a rule may compute on real floating ``x`` with in-place operators into its own
    temporaries: raw arrays of a backend that writes in place (the first-order pass). The same
    operations in the same order, so the same values, with fewer arrays allocated."""
    if not getattr(ns, "_writes", False):
        return False
    dt = x.dtype  # (float32 and float64 by equality first: the backend's isdtype is a slower call)
    return dt == ns.float32 or dt == ns.float64 or ns.isdtype(dt, "real floating")


def gelu_tanh_t(ns, x, x2, spend_x2: bool = False):
    """``tanh`` of :func:`gelu_tanh_u`; one temporary instead of four where :func:`in_place`
    (none where ``spend_x2``: the caller's ``x2`` is a temporary it may take)."""
    if not in_place(ns, x):
        return ns.tanh(gelu_tanh_u(ns, x, x2))
    if spend_x2:
        u = x2
        u *= GELU_CK
    else:
        u = x2 * GELU_CK
    u += GELU_C
    u *= x
    return ns.tanh(u)
