"""Loss functions: mse, cross-entropy (logits, label smoothing), BCE with logits, huber.

Each takes ``reduction="mean" | "sum" | "none"`` and uses the namespace of
its inputs, so it works on raw arrays and ember Tensors alike.
"""

from __future__ import annotations

from typing import Any

from ..autodiff import fused as _fused
from ..kernels import shapes_fit
from ._util import namespace

__all__ = ["mse", "cross_entropy", "binary_cross_entropy_with_logits", "huber"]

BAD_REDUCTION = "{op}: reduction must be 'mean', 'sum' or 'none', got {value!r}"
BAD_SMOOTHING = "cross_entropy: label_smoothing must be in [0, 1], got {value!r}"
BAD_TARGET = (
    "cross_entropy: targets of shape {tshape} and dtype {tdtype} do not fit logits of shape "
    "{lshape}; pass integer class indices of shape {ishape} or class probabilities of shape "
    "{lshape}"
)


_REDUCTIONS = ("mean", "sum", "none")


def _reduce(xp: Any, loss: Any, reduction: str, op: str) -> Any:
    if reduction == "mean":
        return xp.mean(loss)
    if reduction == "sum":
        return xp.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(BAD_REDUCTION.format(op=op, value=reduction))


def mse(pred: Any, target: Any, *, reduction: str = "mean") -> Any:
    """Mean squared error ``(pred - target)**2`` (like ``torch.nn.MSELoss``)."""
    xp = namespace(pred, target)
    d = pred - target
    return _reduce(xp, d * d, reduction, "mse")


def cross_entropy(
    logits: Any,
    targets: Any,
    *,
    axis: int = -1,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Any:
    """Softmax cross-entropy from unnormalised ``logits`` (like ``torch.nn.CrossEntropyLoss``).

    ``targets`` are integer class indices (``logits.shape`` without ``axis``)
    or class probabilities (``logits.shape``). With ``label_smoothing=e`` the
    target becomes ``(1 - e) * target + e / num_classes``. The loss with its
    reduction is one primitive (``ember.autodiff.fused.softmax_cross_entropy``)
    whose VJP is ``softmax(z) * sum(t) - t`` (scaled by the reduction).
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(BAD_SMOOTHING.format(value=label_smoothing))
    xp = namespace(logits, targets)
    lshape, tshape = tuple(logits.shape), tuple(targets.shape)
    ax = axis % len(lshape)
    ncls = lshape[ax]
    if targets.dtype == logits.dtype and (tshape == lshape or shapes_fit(tshape, lshape)):
        # probabilities (the fast case)
        onehot = targets
    else:
        integral = xp.isdtype(targets.dtype, "integral")  # class indices
        ishape = lshape[:ax] + lshape[ax + 1:]
        if not shapes_fit(tshape, ishape if integral else lshape):
            raise ValueError(BAD_TARGET.format(tshape=tshape, tdtype=targets.dtype, lshape=lshape,
                                               ishape=ishape))
        if integral:
            shape = [1] * len(lshape)
            shape[ax] = ncls
            classes = xp.reshape(xp.arange(ncls, dtype=targets.dtype), tuple(shape))
            onehot = xp.astype(xp.expand_dims(targets, axis=ax) == classes, logits.dtype)
        else:
            onehot = targets
    if label_smoothing:  # the same loss as smoothing the target
        onehot = (1.0 - label_smoothing) * onehot + label_smoothing / ncls
    if reduction not in _REDUCTIONS:
        raise ValueError(BAD_REDUCTION.format(op="cross_entropy", value=reduction))
    return _fused.softmax_cross_entropy(logits, onehot, axis=ax, reduction=reduction)


def binary_cross_entropy_with_logits(
    logits: Any, targets: Any, *, pos_weight: Any = None, reduction: str = "mean"
) -> Any:
    """Sigmoid + binary cross-entropy in one stable formula (``BCEWithLogitsLoss``).

    ``loss = -(pos_weight * t * log sigmoid(x) + (1 - t) * log(1 - sigmoid(x)))``,
    with ``log sigmoid(x) = -(max(-x, 0) + log1p(exp(-|x|)))``.
    """
    xp = namespace(logits, targets)
    softplus_neg = xp.where(logits < 0, -logits, xp.zeros_like(logits)) + xp.log1p(
        xp.exp(-xp.abs(logits))
    )  # = -log sigmoid(x)
    if pos_weight is None:
        loss = (1.0 - targets) * logits + softplus_neg
    else:
        loss = (1.0 - targets) * logits + (1.0 + (pos_weight - 1.0) * targets) * softplus_neg
    return _reduce(xp, loss, reduction, "binary_cross_entropy_with_logits")


def huber(pred: Any, target: Any, *, delta: float = 1.0, reduction: str = "mean") -> Any:
    """Huber loss: quadratic for ``|d| < delta``, linear beyond (``torch.nn.HuberLoss``)."""
    xp = namespace(pred, target)
    d = pred - target
    a = xp.abs(d)
    loss = xp.where(a < delta, 0.5 * (d * d), delta * (a - 0.5 * delta))
    return _reduce(xp, loss, reduction, "huber")
