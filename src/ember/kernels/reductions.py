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

The sum over leading axes (a broadcast bias's gradient, :func:`sum_leading`) is
a product too, of a vector of ones with the array's rows, from :data:`LEADING_ROWS`
rows on: NumPy adds the rows into the result one at a time, slower than that
product the more rows there are (``benchmarks/reductions.py``, ``bias-product``).
"""

from __future__ import annotations

import functools

from array_api_compat import device as _device

__all__ = ["MIN_ROWS", "SHORT", "COLUMN_ROWS", "LEADING_ROWS", "sum_last", "mean_last", "max_last",
           "leading_rows", "sum_leading"]

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

LEADING_ROWS = 256
"""A sum over fewer leading rows than this stays the namespace's: NumPy's cost is mostly a
fixed one per row, which below this count the product's own calls outweigh (the MLP's
bias gradients over 128 rows)."""


def _c_contiguous(ns, x) -> bool:
    """Whether ``x`` is a C-contiguous array of a backend with ``flags`` (NumPy, CuPy). For a
    Tensor of ember's wrapper namespace, the array under it answers (``ns._under``): a rule
    or a recomputation run on Tensors (checkpointing, higher orders) then takes the method
    the run on raw arrays takes, so the same bits."""
    flags = getattr(x, "flags", None)
    if flags is None:
        under = getattr(ns, "_under", None)
        flags = getattr(under(x), "flags", None) if under is not None else None
    return flags is not None and flags.c_contiguous


def _row_length(ns, x, axis) -> int:
    """The length of ``x``'s rows when a reduction along ``axis`` may take a faster form: the
    last axis of a C-contiguous real floating array (:func:`_c_contiguous`), rows of at least
    two elements, at least :data:`MIN_ROWS` of them (:data:`COLUMN_ROWS` where they are
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
    if x.dtype not in (ns.float32, ns.float64) or not _c_contiguous(ns, x):
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


#: vectors of ones up to this length are kept for the next call (:func:`_ones`)
_CACHED_ONES = 1 << 16


@functools.lru_cache(maxsize=32)
def _cached_ones(ns, n, dtype, device):
    return ns.ones(n, dtype=dtype, device=device)


def _ones(ns, n, dtype, device):
    """A vector of ``n`` ones, made once per size, dtype and device up to
    :data:`_CACHED_ONES` elements (only ever read)."""
    if n <= _CACHED_ONES:
        return _cached_ones(ns, n, dtype, device)
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


def leading_rows(x, lead: int) -> int:
    """The rows of ``x`` (the product of its first ``lead`` sizes) where a sum over them may be
    a product (:func:`sum_leading`): at least :data:`LEADING_ROWS` of them, and axes left
    after them; else 0. Reads only the shape, so a staged value answers too."""
    shape = x.shape
    if not 0 < lead < len(shape):
        return 0
    rows = 1
    for n in shape[:lead]:
        if n.__class__ is not int:
            return 0
        rows *= n
    return rows if rows >= LEADING_ROWS else 0


def sum_leading(ns, x, lead: int):
    """``ns.sum(x, axis=tuple(range(lead)))``, the sum over ``x``'s first ``lead`` axes, as a
    product of a vector of ones with ``x``'s rows where there are :func:`leading_rows` and
    ``x`` is a C-contiguous real floating array (see the module's docstring). A sum over
    every axis stays the namespace's (NumPy's pairwise sum is the more accurate there)."""
    rows = leading_rows(x, lead)
    if not rows or not x.size or x.dtype not in (ns.float32, ns.float64) or not _c_contiguous(ns, x):
        return ns.sum(x, axis=0 if lead == 1 else tuple(range(lead)))
    s = ns.matmul(_ones(ns, rows, x.dtype, _device(x)), ns.reshape(x, (rows, x.size // rows)))
    return s if len(x.shape) == lead + 1 else ns.reshape(s, tuple(x.shape[lead:]))
