"""Checks of the fused linear layer ``act(x @ w^T + b)``; error texts as constants."""

from __future__ import annotations

from .._errors import DTypeError, ShapeError

__all__ = ["LINEAR_SHAPES", "LINEAR_RELU_COMPLEX", "check_linear"]


LINEAR_SHAPES = (
    "linear: input of shape {x}, weight of shape {w} and bias of shape {b} do not fit; weight "
    "must be (out_features, in_features) with in_features the input's last axis, and bias "
    "(out_features,) or None"
)
LINEAR_RELU_COMPLEX = (
    "linear: activation=relu needs real inputs, got dtypes {dtypes}; ReLU is not defined on "
    "complex numbers (apply another activation to linear(x, weight, bias))"
)


def check_linear(x, w, b, relu=False, complex_dtypes=()) -> None:
    """Raise ShapeError unless ``act(x @ w^T + b)`` fits (``w`` 2-D, ``b`` None or ``(out,)``),
    DTypeError for a ReLU on input of a dtype in ``complex_dtypes``."""
    ws, xs = w.shape, x.shape
    if len(ws) != 2 or not xs or xs[-1] != ws[1] or (b is not None and b.shape != (ws[0],)):
        _check_linear_slow(x, w, b)
    if relu and complex_dtypes and (x.dtype in complex_dtypes or w.dtype in complex_dtypes or (
            b is not None and b.dtype in complex_dtypes)):
        raise DTypeError(LINEAR_RELU_COMPLEX.format(
            dtypes=", ".join(str(a.dtype) for a in (x, w, b) if a is not None)))


def _check_linear_slow(x, w, b) -> None:
    """The shape check again, with sizes a backend does not know (NaN, None) let through."""
    ws, xs = tuple(w.shape), tuple(x.shape)
    bs = None if b is None else tuple(b.shape)

    def differ(a, c):
        return a != c and isinstance(a, int) and isinstance(c, int)

    if len(ws) != 2 or not xs or differ(xs[-1], ws[1]) or (
            bs is not None and (len(bs) != 1 or differ(bs[0], ws[0]))):
        raise ShapeError(LINEAR_SHAPES.format(x=xs, w=ws, b=bs))
