"""Activation functions, written with the namespace of their input.

They are plain functions, so inside a model structure they are constants
(``ember.tree`` keeps them in the treedef): ``[(Linear, relu), ...]``.
"""

from __future__ import annotations

import math
from typing import Any

from ..autodiff import fused as _fused
from ._util import erf, namespace

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "identity"]


def identity(x: Any) -> Any:
    """Return ``x`` unchanged (a no-op activation)."""
    return x


def relu(x: Any) -> Any:
    """``max(x, 0)`` in ``x``'s dtype (NaN stays NaN, a bool stays bool); the gradient at 0 is 0
    (as in PyTorch and JAX).

    One primitive (``ember.autodiff.fused.relu``) whose backward is a masked
    product; on other namespaces' arrays its forward ``maximum(x, 0)``.
    """
    return _fused.relu(x)


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
    it from a Chebyshev series (absolute error ~1e-16 in float64). erf and the
    whole tanh form are one primitive each (``ember.autodiff.fused.erf``,
    ``.gelu_tanh``) with their exact derivatives. The tanh form is computed as
    ``x / (1 + exp(-2u))``, the same function without ``1 + tanh(u)``'s
    cancellation for negative ``x``.
    """
    if approximate:
        return _fused.gelu_tanh(x)
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def softmax(x: Any, axis: int = -1) -> Any:
    """``exp(x) / sum(exp(x))`` along ``axis`` (shifted by the max for stability).

    One primitive (``ember.autodiff.fused.softmax``) with the fused VJP
    ``y * (g - sum(g * y))``.
    """
    return _fused.softmax(x, axis=axis)


def log_softmax(x: Any, axis: int = -1) -> Any:
    """``x - logsumexp(x)`` along ``axis``, computed stably.

    One primitive (``ember.autodiff.fused.log_softmax``) with the fused VJP
    ``g - exp(l) * sum(g)``.
    """
    return _fused.log_softmax(x, axis=axis)
