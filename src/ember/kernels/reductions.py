"""Sums, means and maxima along an array's last axis, the reductions of softmax and normalization.

Why not ``sum(x, axis=-1)`` alone: NumPy reduces a short last axis one row at a
time, a fixed cost per row that dominates for rows of tens to hundreds of
elements (the attention scores' softmax, a layer norm over 128 features), while
a product with a vector of ones is one matrix-vector call to BLAS, a fraction
of the time there (``benchmarks/reductions.py``; figures in
docs/performance.md). It applies to C-contiguous real floating arrays of
backends that expose ``flags`` (NumPy, CuPy) with at least :data:`MIN_ROWS`
rows. Rows of at most :data:`SHORT` elements (the 10 logits of a classifier),
from :data:`COLUMN_ROWS` rows on, are reduced as the columns of a transposed
copy instead, where NumPy's loop runs along the rows: the maximum always, the
sum below :data:`MIN_ROWS` rows.
Anything else takes the namespace's own reduction. The sum's order differs from
NumPy's pairwise one, so the last bits may too (a sum of ``-0.0`` is ``+0.0``);
inf and NaN propagate as in ``sum`` and ``max``.
"""

from __future__ import annotations

import functools

from array_api_compat import device as _device

__all__ = ["MIN_ROWS", "SHORT", "COLUMN_ROWS", "sum_last", "mean_last", "max_last"]

MIN_ROWS = 512
"""Fewer rows than this take the namespace's reduction: the product's fixed cost (a call
into BLAS, right after a large product with cold caches) outweighs the per-row cost it
saves (the MLP's 128 rows of 10 logits)."""

SHORT = 16
"""Rows of at most this many elements reduce faster as a transposed copy's columns, from
:data:`COLUMN_ROWS` rows on; for longer rows the copy costs more than it saves
(``benchmarks/reductions.py``)."""

COLUMN_ROWS = 256
"""Fewer rows than this take the namespace's reduction: the copy's reshapes cost about what
that many short rows do (the MLP's 128 rows of 10 logits)."""


def _row_length(ns, x, axis) -> int:
    """The length of ``x``'s rows when a reduction along ``axis`` may take a faster form: the
    last axis of a C-contiguous real floating array with ``flags``, rows of at least two
    elements, at least :data:`MIN_ROWS` of them (:data:`COLUMN_ROWS` where they are
    :data:`SHORT`); else 0."""
    if axis.__class__ is tuple:
        if len(axis) != 1:
            return 0
        axis = axis[0]
    shape = x.shape
    nd = len(shape)
    if axis.__class__ is not int or nd == 0 or not -nd <= axis < nd or axis % nd != nd - 1:
        return 0
    n, size = shape[-1], x.size  # (the cheap tests first)
    if n.__class__ is not int or size.__class__ is not int or n < 2:
        return 0
    if size < n * (MIN_ROWS if n > SHORT else COLUMN_ROWS):
        return 0
    flags = getattr(x, "flags", None)
    if flags is None or not flags.c_contiguous or x.dtype not in (ns.float32, ns.float64):
        return 0
    return n


def _columns(ns, x):
    """``x``'s rows (along its last axis, ``n`` elements) as the columns of a C-contiguous
    ``(n, rows)`` copy: a reshape of the transposed rows (the standard's reshape writes
    values in row-major order)."""
    n = x.shape[-1]
    rows = x.size // n
    return ns.reshape(ns.reshape(ns.permute_dims(ns.reshape(x, (rows, n)), (1, 0)), (-1,)), (n, rows))


def _rows_back(ns, r, x, keepdims: bool):
    """A reduction over ``_columns(x)`` in ``x``'s shape without its last axis (kept as 1)."""
    return ns.reshape(r, (*x.shape[:-1], 1) if keepdims else x.shape[:-1])


@functools.lru_cache(maxsize=32)
def _ones(ns, n, dtype, device):
    """A vector of ``n`` ones, made once per size, dtype and device (only ever read)."""
    return ns.ones(n, dtype=dtype, device=device)


def sum_last(ns, x, axis, keepdims: bool = False):
    """``ns.sum(x, axis=axis, keepdims=keepdims)``, as a product with ones where ``axis`` is
    ``x``'s last (see the module's docstring)."""
    n = _row_length(ns, x, axis)
    if n and x.size >= n * MIN_ROWS:
        s = ns.matmul(x, _ones(ns, n, x.dtype, _device(x)))
        return s[..., None] if keepdims else s
    if n and n <= SHORT:
        return _rows_back(ns, ns.sum(_columns(ns, x), axis=0), x, keepdims)
    return ns.sum(x, axis=axis, keepdims=keepdims)


def mean_last(ns, x, axis, keepdims: bool = False):
    """``ns.mean(x, axis=axis, keepdims=keepdims)``: :func:`sum_last` divided by the count."""
    if not _row_length(ns, x, axis):
        return ns.mean(x, axis=axis, keepdims=keepdims)
    return sum_last(ns, x, axis, keepdims) / x.shape[-1]


def max_last(ns, x, axis, keepdims: bool = False):
    """``ns.max(x, axis=axis, keepdims=keepdims)``, over a transposed copy's columns where
    ``axis`` is ``x``'s last and its rows are short (see the module's docstring)."""
    n = _row_length(ns, x, axis)
    if not n or n > SHORT:
        return ns.max(x, axis=axis, keepdims=keepdims)
    return _rows_back(ns, ns.max(_columns(ns, x), axis=0), x, keepdims)
