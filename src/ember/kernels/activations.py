"""Activation forwards in array-API terms: ReLU and the tanh form of GELU.

Each takes the namespace it computes with (``ns``): a backend's own for the
forward and the first-order backward pass, ember's wrapper for higher orders.
"""

from __future__ import annotations

import math

__all__ = ["relu", "GELU_C", "GELU_K", "gelu_tanh_w", "neg_logistic", "in_place"]


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

_W_C, _W_CK = -2.0 * GELU_C, -2.0 * GELU_C * GELU_K
"""``-2u = x (W_C + W_CK x^2)``: :func:`gelu_tanh_w`'s coefficients."""


def in_place(ns, x) -> bool:
    """Whether a rule may compute on real floating ``x`` with in-place operators into its own
    temporaries: raw arrays of a backend that writes in place (the first-order pass). The same
    operations in the same order, so the same values, with fewer arrays allocated."""
    if not getattr(ns, "_writes", False):
        return False
    dt = x.dtype  # (float32 and float64 by equality first: the backend's isdtype is a slower call)
    return dt == ns.float32 or dt == ns.float64 or ns.isdtype(dt, "real floating")


def gelu_tanh_w(ns, x, x2, spend_x2: bool = False):
    """``w = -2u = x (-2c - 2ck x^2)``, given ``x2 = x * x``: the tanh form's factor
    ``(1 + tanh(u)) / 2`` is :func:`neg_logistic` of it (GELU is ``x`` times that).

    Why not ``tanh``: ``1 + tanh(u)`` cancels for negative ``x`` (in float32, GELU(-5) came out
    30% too large), and ``exp`` is the cheaper function on CPUs without AVX-512, one pass fewer
    in the backward pass too. In place where :func:`in_place`, into ``x2`` where
    ``spend_x2`` (the caller's temporary)."""
    if not in_place(ns, x):
        return x * (_W_C + _W_CK * x2)
    if spend_x2:
        w = x2
        w *= _W_CK
    else:
        w = x2 * _W_CK
    w += _W_C
    w *= x
    return w


def neg_logistic(ns, w):
    """``1 / (1 + exp(w))``, the logistic function of ``-w``. Far out ``exp`` overflows to
    ``inf`` (or underflows to 0) on purpose: the result is then exactly 0 (or 1), so a
    namespace with NumPy's ``errstate`` computes it without that warning. A namespace may
    bring its own kernel (``ns._neg_logistic``: ember's NumPy one); else in place where
    :func:`in_place` (into ``exp``'s new array)."""
    own = getattr(ns, "_neg_logistic", None)
    if own is not None:
        return own(w)
    errstate = getattr(ns, "errstate", None)
    if errstate is None:
        e = ns.exp(w)
    else:
        with errstate(over="ignore", under="ignore"):
            e = ns.exp(w)
    if not in_place(ns, w):
        return 1.0 / (e + 1.0)
    e += 1.0
    e **= -1
    return e
