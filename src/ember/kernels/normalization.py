"""Layer normalization's forward, with the parts its gradient reads."""

from __future__ import annotations

from .activations import in_place
from .reductions import mean_last

__all__ = ["layer_norm"]


def layer_norm(ns, x, w, b, axes, eps):
    """The forward, and the parts its VJP reads: ``(y, (x_hat, s))`` with ``x_hat`` the
    normalized input and ``s = sqrt(var + eps)``; ``w`` and ``b`` may be None."""
    d = x - mean_last(ns, x, axes, keepdims=True)
    s = ns.sqrt(mean_last(ns, d * d, axes, keepdims=True) + eps)
    if not in_place(ns, d):
        x_hat = d / s
        y = x_hat if w is None else x_hat * w
        return (y if b is None else y + b), (x_hat, s)
    # the same operations into this function's own arrays (one or two fewer made)
    d /= s
    if w is None:
        return (d if b is None else d + b), (d, s)
    y = d * w
    if b is None:
        return y, (d, s)
    if b.dtype == y.dtype and b.ndim <= y.ndim and tuple(b.shape) == tuple(y.shape)[y.ndim - b.ndim:]:
        y += b  # (b neither widens y's shape nor its dtype)
        return y, (d, s)
    return y + b, (d, s)
