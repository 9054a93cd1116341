"""Error types shared by every layer.

Each ember error derives from :class:`EmberError` *and* from the builtin an
array-API caller would expect, so ``except ValueError`` keeps working.
Messages name the operation, the shapes/dtypes involved and a fix.
"""

from __future__ import annotations

__all__ = [
    "EmberError",
    "ShapeError",
    "AxisError",
    "OutOfRangeError",
    "ReadOnlyError",
    "DTypeError",
    "BackendError",
    "BackendNotInstalledError",
    "StructureError",
    "NotDifferentiableError",
    "ConsumedError",
    "ReuseError",
    "FileFormatError",
    "TracingError",
    "RetraceWarning",
    "BatchingError",
    "VmapFallbackWarning",
]


class EmberError(Exception):
    """Base class of every error raised by ember."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit an operation (broadcasting, matmul, reshape...)."""


class AxisError(ShapeError, IndexError):
    """An axis out of range for an array's dimensions: a ``ValueError`` and an ``IndexError``,
    as NumPy's ``AxisError`` is, so code written against either keeps working."""


class OutOfRangeError(EmberError, OverflowError):
    """A Python scalar that does not fit the dtype of the array it meets (``int64 + 2**70``)."""


class ReadOnlyError(EmberError, ValueError):
    """A write into read-only memory, such as a view made by ``broadcast_to``: a ``ValueError``,
    as NumPy's ``assignment destination is read-only`` is; nothing was written."""


class DTypeError(EmberError, TypeError):
    """A dtype an operation does not accept."""


class BackendError(EmberError, TypeError):
    """Arrays of different backends, namespaces or devices mixed in one op."""


class BackendNotInstalledError(EmberError, ImportError):
    """A backend was asked for whose library is not installed."""


class StructureError(EmberError, ValueError):
    """Structures (trees) that do not match, or a path that does not exist."""


class NotDifferentiableError(EmberError, TypeError):
    """A transform was asked for a gradient it cannot give."""


class ConsumedError(EmberError, RuntimeError):
    """A tensor was used after :func:`ember.consume` handed its buffer away."""


class ReuseError(EmberError, RuntimeError):
    """``consume(x, strict=True)`` could not reuse x's buffer."""


class FileFormatError(EmberError, ValueError):
    """A file that is truncated, corrupted, hostile or does not match."""


class TracingError(EmberError, TypeError):
    """A function staged by ``ember.jit`` needs a value only known when it runs (``if x > 0``,
    ``float(x)``) or computes outside the staged graph."""


class RetraceWarning(UserWarning):
    """``ember.jit`` keeps tracing a function again because Python numbers in its arguments
    change from call to call (each value is part of the signature)."""


class BatchingError(EmberError, ValueError):
    """An op cannot run on a batch under :func:`ember.vmap` (no batching rule, a batched value
    where Python needs one number, or one kept past its vmap)."""


class VmapFallbackWarning(UserWarning):
    """An op without a batching rule ran once per example (``ember.vmap(..., fallback="loop")``,
    or a primitive's ``defvmap("loop")``): correct but slow."""
