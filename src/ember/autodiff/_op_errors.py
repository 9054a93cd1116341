"""Errors of an op: a backend's exception turned into one naming the op, shapes and dtypes.

Its own module because the dispatcher, the wrappers, the ownership layer and the
reverse loop all raise them, and none of those should import the others for it.
"""

from __future__ import annotations

import inspect

from .._errors import BackendError, DTypeError, EmberError, ShapeError
from ._error_causes import known_cause

__all__ = ["op_error", "GENERAL", "reference_signature"]

#: What a fast path returns for "the general slow path must handle this call".
GENERAL = object()


def op_error(op: str, exc: Exception, args) -> Exception:
    """Turn a backend exception into one that names the op, shapes and dtypes."""
    if isinstance(exc, EmberError):
        return exc
    cause = known_cause(op, exc, args)  # (a negative size, an empty reduction, an axis, an int)
    if cause is not None:
        return cause
    arrays = [a for a in args if hasattr(a, "shape") and hasattr(a, "dtype")]
    shapes = ", ".join(str(tuple(a.shape)) for a in arrays) or "scalars only"
    devices = _devices_of(arrays)
    if len(devices) > 1 or any(w in str(exc).lower() for w in _DEVICE_WORDS):
        return BackendError(DEVICE_MIXING.format(
            op=op, devices=", ".join(map(str, devices)) or "differing devices", msg=exc))
    if isinstance(exc, IndexError):  # e.g. numpy's AxisError (ValueError and IndexError): keep both
        return exc
    if any(_unknown(a.shape) for a in arrays):
        return ShapeError(UNKNOWN_SIZES.format(op=op, shapes=shapes, msg=exc))
    dtypes = ", ".join(str(a.dtype) for a in arrays)
    msg = str(exc)
    if isinstance(exc, ValueError) and any(
        w in msg.lower() for w in ("broadcast", "shape", "dimension", "mismatch", "size", "axis",
                                  "ndim")
    ):
        fix = SHAPE_FIXES.get(op.rsplit(".", 1)[-1], SHAPE_FIXES["*"])
        return ShapeError(f"{op}: input shapes {shapes} do not fit ({msg}). Fix: {fix}")
    low = msg.lower()
    if isinstance(exc, TypeError) and not isinstance(exc, DTypeError) and (
        (dtypes and "dtype" in low) or "cast" in low
    ):
        return DTypeError(
            f"{op}: not defined for input dtypes {dtypes} ({msg}). Fix: convert with "
            "xp.astype(x, dtype) to a dtype the op accepts"
        )
    return exc


#: How to fix a shape error, by op (``"*"``: elementwise broadcasting).
SHAPE_FIXES = {
    "*": "make the shapes broadcast-compatible (equal, or 1, in each trailing dimension), "
         "e.g. with reshape or expand_dims",
    "matmul": "the last axis of the first operand must equal the second-to-last axis of the "
              "second (transpose one with .mT, or reshape)",
    "tensordot": "the contracted axes must have equal sizes; check the axes argument",
    "vecdot": "the reduced axis must have the same size in both inputs",
    "reshape": "the new shape must hold exactly as many elements as the input (use -1 for one "
               "inferred dimension)",
    "concat": "all inputs must have the same shape except along the concatenation axis",
    "stack": "all inputs must have exactly the same shape",
    "broadcast_to": "each dimension of the input must equal the target's or be 1",
    "permute_dims": "axes must name each axis of the input exactly once (a permutation of "
                    "range(x.ndim); negative axes count from the end)",
    "matrix_transpose": "the input needs at least 2 dimensions (use expand_dims for a vector)",
    "squeeze": "only axes of size 1 can be removed; check the axis argument against x.shape",
    "asarray": "nested sequences must be rectangular: every list at one depth must have the "
               "same length (pad the short rows, or make one array per row)",
    "setitem": "the value must broadcast to the shape of x[key] (equal, or 1, in each trailing "
               "dimension)",
    "__setitem__": "the value must broadcast to the shape of x[key] (equal, or 1, in each "
                   "trailing dimension)",
}


UNKNOWN_SIZES = (
    "{op}: an input has unknown (NaN) dimension sizes (shapes {shapes}); dask gives them "
    "after boolean-mask indexing, nonzero and unique_*, and this op needs the sizes "
    "({msg}). Fix: resolve them first, either with ember.compute(x) (evaluates x) or with "
    "ember.distributed.resolve_sizes(x) (dask: x.raw.compute_chunk_sizes(); computes only "
    "the chunk sizes)"
)


DEVICE_MIXING = (
    "{op}: the inputs are on different devices ({devices}); one op computes on one "
    "device ({msg}). Fix: move the arrays to one device first, with "
    "x.to_device(device), xp.asarray(x, device=device) or ember.to_backend(tree, xp, device=device)"
)
_DEVICE_WORDS = ("same device", "different device", "two different devices",
                 "different from the current device", "device mismatch")


def _devices_of(arrays) -> list:
    """The distinct devices of some arrays (empty when they do not say)."""
    out: list = []
    for a in arrays:
        try:
            d = a.device
        except Exception:
            continue
        if d is not None and not any(d is e or str(d) == str(e) for e in out):
            out.append(d)
    return out


def _unknown(shape) -> bool:
    """True when a shape holds an unknown (None or NaN) size."""
    try:
        return any(s is None or s != s for s in shape)
    except TypeError:
        return False


_REF = None


def reference_signature(qualname):
    """The signature array_api_strict gives ``qualname`` (if it is installed)."""
    global _REF
    if _REF is None:
        try:
            import array_api_strict as ref
        except ImportError:
            ref = False
        _REF = ref
    if _REF is False:
        return None
    obj = _REF
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    # array_api_strict's "argument not given" sentinel (Undef) is None in the standard
    ps = [p.replace(default=None) if type(p.default).__name__ == "Undef" else p
          for p in sig.parameters.values()]
    return sig.replace(parameters=ps)
