"""Activation functions, written with the namespace of their input.

They are plain functions, so inside a model structure they are constants
(``ember.tree`` keeps them in the treedef): ``[(Linear, relu), ...]``.
"""

from __future__ import annotations

import math
from typing import Any

from ..kernels import gelu_tanh_t, relu as relu_value
from ._util import erf, namespace

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "identity"]


def identity(x: Any) -> Any:
    """Return ``x`` unchanged (a no-op activation)."""
    return x


def relu(x: Any) -> Any:
    """``max(x, 0)`` in ``x``'s dtype (NaN stays NaN, a bool stays bool); the gradient at 0 is 0
    (as in PyTorch and JAX).

    ember namespaces have it as one primitive (``xp._relu``) whose backward is
    a masked product; other namespaces compute ``maximum(x, 0)``.
    """
    xp = namespace(x)
    f = getattr(xp, "_relu", None)
    return f(x) if f is not None else relu_value(xp, x)


def sigmoid(x: Any) -> Any:
    """``1 / (1 + exp(-x))`` computed without overflow for large ``|x|``."""
    xp = namespace(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def tanh(x: Any) -> Any:
    """Hyperbolic tangent."""
    return namespace(x).tanh(x)


def silu(x: Any) -> Any:
    """``x * sigmoid(x)`` (a.k.a. swish)."""
    return x * sigmoid(x)


def gelu(x: Any, approximate: bool = False) -> Any:
    """Gaussian error linear unit ``x * Phi(x)``; ``approximate=True`` uses the tanh form.

    The exact form matches ``torch.nn.GELU()``; the tanh form matches
    ``GELU(approximate="tanh")``. The standard has no erf, so ember computes
    it from a Chebyshev series (absolute error ~1e-16 in float64). On ember
    namespaces erf and the whole tanh form are one tape node each
    (``xp._erf``, ``xp._gelu_tanh``) with their exact derivatives.
    """
    if approximate:
        xp = namespace(x)
        f = getattr(xp, "_gelu_tanh", None)  # ember namespaces: one primitive
        if f is not None:
            return f(x)
        return 0.5 * x * (1.0 + gelu_tanh_t(xp, x, x * x))
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def softmax(x: Any, axis: int = -1) -> Any:
    """``exp(x) / sum(exp(x))`` along ``axis`` (shifted by the max for stability).

    On ember namespaces one primitive (``xp._softmax``) with the fused VJP
    ``y * (g - sum(g * y))``.
    """
    xp = namespace(x)
    f = getattr(xp, "_softmax", None)
    if f is not None:
        return f(x, axis=axis)
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def log_softmax(x: Any, axis: int = -1) -> Any:
    """``x - logsumexp(x)`` along ``axis``, computed stably.

    On ember namespaces one primitive (``xp._log_softmax``) with the fused VJP
    ``g - exp(l) * sum(g)``.
    """
    xp = namespace(x)
    f = getattr(xp, "_log_softmax", None)
    if f is not None:
        return f(x, axis=axis)
    s = x - xp.max(x, axis=axis, keepdims=True)
    return s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))
