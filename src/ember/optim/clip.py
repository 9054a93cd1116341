"""Gradient clipping by global norm.

Why: one exploding gradient should not throw the parameters far away; scaling
all gradients together keeps their direction.
"""

from __future__ import annotations

import math
from typing import Any

from .. import tree as _tree
from ._patterns import kind, namespace

__all__ = ["clip_by_global_norm", "global_norm"]

BAD_MAX = "clip_by_global_norm: max_norm={value!r} must be a number > 0"
EPS = 1e-6  # added to the norm before dividing, as torch.nn.utils.clip_grad_norm_ does


def _floating(leaves: list[Any]) -> list[int]:
    out = []
    for i, g in enumerate(leaves):
        if kind(g) != "other":
            out.append(i)
    return out


def _sq_norms(leaves: list[Any], idx: list[int]) -> dict[Any, Any]:
    """Sum of squared magnitudes per namespace: ``{xp: 0-d array}``."""
    totals: dict[Any, Any] = {}
    for i in idx:
        g = leaves[i]
        xp = namespace(g)
        a = xp.abs(g) if kind(g) == "complex" else g
        sq = xp.sum(a * a)
        totals[xp] = sq if xp not in totals else totals[xp] + sq
    return totals


def global_norm(grads: Any) -> Any:
    """The l2 norm of all floating-point leaves of ``grads`` together.

    A 0-d array of the leaves' namespace, or a Python float when the leaves
    come from several namespaces (which forces their computation).
    """
    leaves = _tree.leaves(grads)
    totals = _sq_norms(leaves, _floating(leaves))
    if not totals:
        return 0.0
    if len(totals) == 1:
        ((xp, sq),) = totals.items()
        return xp.sqrt(sq)
    return math.sqrt(sum(float(v) for v in totals.values()))


def clip_by_global_norm(grads: Any, max_norm: float) -> tuple[Any, Any]:
    """Scale ``grads`` so their global l2 norm is at most ``max_norm``; returns ``(grads, norm)``.

    Rule (as ``torch.nn.utils.clip_grad_norm_``)::

        norm = sqrt(sum over leaves of sum(g * g))
        coef = min(max_norm / (norm + 1e-6), 1)
        g    = g * coef          for every floating leaf

    ``norm`` is the norm before clipping. A NaN norm makes every gradient NaN
    (as in torch): the failure shows, nothing is zeroed or skipped silently.

    >>> import numpy as np
    >>> g, n = clip_by_global_norm({"a": np.array([3.0, 4.0])}, 1.0)
    >>> float(n), np.round(g["a"], 4).tolist()
    (5.0, [0.6, 0.8])
    """
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm > 0:
        raise ValueError(BAD_MAX.format(value=max_norm))
    leaves, td = _tree.flatten(grads)
    idx = _floating(leaves)
    totals = _sq_norms(leaves, idx)
    if not totals:
        return grads, 0.0
    new = list(leaves)
    if len(totals) == 1:
        ((xp, sq),) = totals.items()
        norm = xp.sqrt(sq)
        coef = max_norm / (norm + EPS)
        coef = xp.where(coef > 1.0, xp.ones_like(coef), coef)  # a NaN norm gives NaN, as in torch
        for i in idx:
            g = leaves[i]
            c = coef if coef.dtype == g.dtype else xp.astype(coef, g.dtype)
            new[i] = g * c
    else:
        norm = math.sqrt(sum(float(v) for v in totals.values()))
        fcoef = max_norm / (norm + EPS)
        fcoef = 1.0 if fcoef > 1.0 else fcoef
        for i in idx:
            new[i] = leaves[i] * fcoef
    return td.unflatten(new), norm
