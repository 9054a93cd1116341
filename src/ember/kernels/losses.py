"""The softmax cross-entropy and its gradient for short rows (a classifier's logits), computed
along the columns of transposed copies.

Why: NumPy reduces a short last axis one row at a time, a fixed cost per row; the
cross-entropy's forward with its gradient takes three such reductions (the maximum, the
sum of ``exp``, the sum of the targets). On ``(n, rows)`` copies each is one vector loop
across the rows, so the whole forward costs less than the row-wise one, the two copies
included (``benchmarks/reductions.py``; figures in docs/performance.md). Below :data:`XENT_COLUMN_ROWS` rows the copies cost more
than they save; above :data:`XENT_COLUMN_SIZE` elements a transposed copy whose row length
is a power of two makes every write land in the same cache set.
"""

from __future__ import annotations

from .activations import in_place
from .reductions import SHORT, as_columns

__all__ = ["XENT_COLUMN_ROWS", "XENT_COLUMN_SIZE", "xent_by_columns", "xent_columns_pay"]

XENT_COLUMN_ROWS = 32
"""The fewest rows for which :func:`xent_by_columns` is faster than the row-wise form."""

XENT_COLUMN_SIZE = 4096
"""The most elements for which :func:`xent_by_columns` is taken (see the module docstring)."""


def xent_columns_pay(ns, z, t, axis) -> bool:
    """Whether :func:`xent_by_columns` applies and is the faster form: ``axis`` is the last of
    C-contiguous real floating logits ``z`` of a backend that exposes ``flags`` (host memory,
    eager), with rows of 2 to :data:`~ember.kernels.reductions.SHORT` elements, at least
    :data:`XENT_COLUMN_ROWS` of them and at most :data:`XENT_COLUMN_SIZE` elements, and the
    targets ``t`` have ``z``'s shape and dtype."""
    shape = z.shape
    nd = len(shape)
    if axis.__class__ is not int or nd < 2 or not -nd <= axis < nd or axis % nd != nd - 1:
        return False
    n, size = shape[-1], z.size
    if n.__class__ is not int or size.__class__ is not int or not 2 <= n <= SHORT:
        return False
    if not n * XENT_COLUMN_ROWS <= size <= XENT_COLUMN_SIZE or t.shape != shape or t.dtype != z.dtype:
        return False
    flags = getattr(z, "flags", None)
    return flags is not None and flags.c_contiguous and z.dtype in (ns.float32, ns.float64)


def xent_by_columns(ns, z, t, reduction: str):
    """``(loss, dz)``: ``-sum(t * log_softmax(z))`` along the last axis (per row where
    ``reduction`` is "none", else its sum or its mean over the rows) and its gradient for a
    unit cotangent, ``softmax(z) * sum(t) - t`` (divided by the rows for the mean), in ``z``'s
    shape: a transposed view of the columns' buffer. Callers check :func:`xent_columns_pay`."""
    n = z.shape[-1]
    rows = z.size // n
    zc, tc = as_columns(ns, z), as_columns(ns, t)
    s = zc - ns.max(zc, axis=0)
    e = ns.exp(s)
    total = ns.sum(e, axis=0)
    scale = ns.sum(tc, axis=0) / total
    terms = s - ns.log(total)
    if in_place(ns, zc):  # (e, terms: this function's own temporaries)
        e *= scale
        e -= tc
        dz = e
        terms *= tc
    else:
        dz = e * scale - tc
        terms = tc * terms
    if reduction == "none":
        loss = ns.reshape(-ns.sum(terms, axis=0), z.shape[:-1])
    else:
        loss = -ns.sum(terms)
        if reduction == "mean":
            loss = loss / rows
            if in_place(ns, zc):
                dz /= rows
            else:
                dz = dz / rows
    dz = ns.permute_dims(dz, (1, 0))
    return loss, (dz if len(z.shape) == 2 else ns.reshape(dz, z.shape))
