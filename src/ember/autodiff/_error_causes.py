"""Backend exceptions with a cause of their own, told as such: not "shapes do not fit".

``op_error`` (the dispatcher's translation of a backend exception) asks
:func:`known_cause` first. Each cause below is recognised from what the
backends raise (NumPy, Dask, array_api_strict, PyTorch word them differently)
and becomes an ember error that names the op, the shapes/dtypes and the fix,
and derives from the builtin the backend raised, so ``except ValueError`` /
``IndexError`` / ``OverflowError`` keep working:

==================  =====================================  ==========================
cause               example                                error
==================  =====================================  ==========================
negative size       ``xp.ones(-1)``                        ShapeError (ValueError)
empty reduction     ``xp.max`` of an empty array,          ShapeError (ValueError)
                    ``nn.softmax`` over a size-0 axis
axis out of range   ``xp.sum(x, axis=5)`` for a 2-d x      AxisError (ValueError,
                                                           IndexError)
int out of range    ``int64 array + 2**70``                OutOfRangeError
                                                           (OverflowError)
read-only target    a write into ``broadcast_to(y, s)``    ReadOnlyError (ValueError)
==================  =====================================  ==========================
"""

from __future__ import annotations

import re

from .._errors import AxisError, OutOfRangeError, ReadOnlyError, ShapeError

__all__ = ["known_cause", "NEGATIVE_SIZE", "EMPTY_REDUCTION", "EMPTY_NORMALIZATION",
           "AXIS_OUT_OF_RANGE", "INT_OUT_OF_RANGE", "READ_ONLY"]

NEGATIVE_SIZE = (
    "{op}: a shape cannot have a negative size (got {sizes}). Fix: pass sizes >= 0 "
    "(a size of 0 makes an empty array)"
)
EMPTY_REDUCTION = (
    "{op}: the input (shape {shapes}) has no elements along the reduced axes, and a "
    "{what} of no elements has no value. Fix: reduce only non-empty arrays (check x.shape "
    "first), choose an axis whose size is not 0, or concat a neutral element (-inf for a "
    "maximum, inf for a minimum) before reducing"
)
EMPTY_NORMALIZATION = (
    "{op}: the axis it normalizes over has size 0 (input shape {shapes}), so there is "
    "nothing to normalize. Fix: check the axis argument (the default -1 is the last axis), "
    "or skip the call for empty inputs"
)
AXIS_OUT_OF_RANGE = (
    "{op}: axis {axis} is out of bounds for an input of shape {shape} ({ndim} dimensions). "
    "Fix: pass an axis in [{lo}, {hi}] (negative axes count from the end)"
)
INT_OUT_OF_RANGE = (
    "{op}: the Python int {value} does not fit the dtype {dtype} of the array it meets "
    "(shape {shape}){bounds}. Fix: use a value within the dtype's range (xp.iinfo(dtype)), "
    "or cast the array to a wider dtype first, e.g. xp.astype(x, xp.float64)"
)

READ_ONLY = (
    "{op}: the array written (shape {shape}, {dtype}) is read-only{how}, so nothing was "
    "written. Fix: write into a copy (xp.asarray(x, copy=True)){other}"
)

_NEGATIVE = ("negative dimension", "must be non-negative", "negative size", "negative shape")
_EMPTY = ("zero-size array to reduction", "no elements", "numel() == 0", "empty sequence")
_AXIS = re.compile(r"axis (-?\d+) is out of bounds for array of dimension (\d+)", re.I)
_TORCH_DIM = re.compile(r"dimension out of range .*but got (-?\d+)", re.I)
_INT_DTYPE = re.compile(r"\b(u?)int(8|16|32|64)\b")


def _arrays(args):
    return [a for a in args if hasattr(a, "shape") and hasattr(a, "dtype")]


def _shapes(arrays) -> str:
    return ", ".join(str(tuple(a.shape)) for a in arrays) or "scalars only"


def _ints(args):
    """The Python ints among ``args``, also inside tuples and lists (a shape argument)."""
    out = []
    for a in args:
        if isinstance(a, (tuple, list)):
            out += _ints(a)
        elif isinstance(a, int) and not isinstance(a, bool):
            out.append(a)
    return out


def _shown(op: str) -> str:
    """The op's name as a user called it (ember's fused nn ops are ``_softmax`` etc.)."""
    return f"nn.{op[1:]}" if op.startswith("_") and not op.startswith("__") else op


def _negative(op, exc, args):
    sizes = [n for n in _ints(args) if n < 0]
    return ShapeError(NEGATIVE_SIZE.format(op=_shown(op), sizes=", ".join(map(str, sizes)) or exc))


def _empty(op, exc, args):
    shapes = _shapes(_arrays(args))
    if "softmax" in op or "cross_entropy" in op:
        return ShapeError(EMPTY_NORMALIZATION.format(op=_shown(op), shapes=shapes))
    low = str(exc).lower()
    what = "minimum" if "min" in op or "minimum" in low else (
        "maximum" if "max" in op or "maximum" in low else "reduction")
    return ShapeError(EMPTY_REDUCTION.format(op=_shown(op), shapes=shapes, what=what))


def _axis(op, exc, args):
    msg = str(exc)
    m = _AXIS.search(msg)
    t = _TORCH_DIM.search(msg)
    axis = getattr(exc, "axis", None)
    ndim = getattr(exc, "ndim", None)
    if axis is None:
        axis = int(m.group(1)) if m else int(t.group(1)) if t else "?"
    arrays = _arrays(args)
    if ndim is None:
        ndim = int(m.group(2)) if m else (arrays[0].ndim if arrays else None)
    shape = tuple(arrays[0].shape) if arrays else "?"
    lo, hi = (-ndim, ndim - 1) if ndim else ("-ndim", "ndim - 1")
    return AxisError(AXIS_OUT_OF_RANGE.format(op=_shown(op), axis=axis, shape=shape, ndim=ndim,
                                              lo=lo, hi=hi))


def _overflow(op, exc, args):
    arrays = _arrays(args)
    ints = _ints(args)
    a = next((x for x in arrays if _INT_DTYPE.search(str(x.dtype))), arrays[0] if arrays else None)
    dtype = a.dtype if a is not None else "?"
    shape = tuple(a.shape) if a is not None else "?"
    bounds = ""
    m = _INT_DTYPE.search(str(dtype))
    if m:
        bits = int(m.group(2))
        lo, hi = (0, 2 ** bits - 1) if m.group(1) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        bounds = f", whose range is [{lo}, {hi}]"
        ints = [n for n in ints if not lo <= n <= hi] or ints
    value = ", ".join(map(str, ints)) or "given"
    return OutOfRangeError(INT_OUT_OF_RANGE.format(op=_shown(op), value=value, dtype=dtype,
                                                   shape=shape, bounds=bounds))


def known_cause(op: str, exc: Exception, args):
    """The ember error for ``exc`` (raised by the backend in ``op`` on ``args``) when its
    cause is one of the table above, else None."""
    msg = str(exc)
    low = msg.lower()
    if isinstance(exc, OverflowError):
        return _overflow(op, exc, args)
    if isinstance(exc, IndexError) and (
        type(exc).__name__ == "AxisError" or _AXIS.search(msg) or _TORCH_DIM.search(msg)
    ):
        return _axis(op, exc, args)
    if isinstance(exc, ValueError) and "read-only" in low:
        a = (_arrays(args) or [None])[0]
        return ReadOnlyError(READ_ONLY.format(
            op=_shown(op), shape=tuple(a.shape) if a is not None else "?",
            dtype=getattr(a, "dtype", "?"), how=" (a view made by broadcast_to, or memory "
            "the array does not own)", other=", or into the array it was made from"))
    if isinstance(exc, (ValueError, RuntimeError)):
        if any(w in low for w in _NEGATIVE):
            return _negative(op, exc, args)
        if any(w in low for w in _EMPTY):
            return _empty(op, exc, args)
    return None
