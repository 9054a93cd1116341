"""Sums and means along an array's last axis, the reductions of softmax and normalization.

Why not ``sum(x, axis=-1)`` alone: NumPy reduces a short last axis one row at a
time, a fixed cost per row that dominates for rows of tens to hundreds of
elements (the attention scores' softmax, a layer norm over 128 features), while
a product with a vector of ones is one matrix-vector call to BLAS, a fraction
of the time there (``benchmarks/reductions.py``; figures in
docs/performance.md). It applies to C-contiguous real floating arrays of
backends that expose ``flags`` (NumPy, CuPy) with at least :data:`MIN_ROWS`
rows; anything else takes the namespace's own reduction. The sum's order
differs from NumPy's pairwise one, so the last bits may too (a sum of ``-0.0``
is ``+0.0``); inf and NaN propagate as in ``sum``.
"""

from __future__ import annotations

import functools

from array_api_compat import device as _device

__all__ = ["MIN_ROWS", "sum_last", "mean_last"]

MIN_ROWS = 512
"""Fewer rows than this take the namespace's reduction: the product's fixed cost (a call
into BLAS, right after a large product with cold caches) outweighs the per-row cost it
saves (the MLP's 128 rows of 10 logits)."""


def _by_product(ns, x, axis) -> bool:
    """Whether ``x`` reduced along ``axis`` is its rows times a vector of ones."""
    if axis.__class__ is tuple:
        if len(axis) != 1:
            return False
        axis = axis[0]
    flags = getattr(x, "flags", None)
    if flags is None or axis.__class__ is not int or not flags.c_contiguous:
        return False
    nd = x.ndim
    return (nd > 0 and -nd <= axis < nd and axis % nd == nd - 1 and x.shape[-1] > 0
            and x.size >= MIN_ROWS * x.shape[-1] and x.dtype in (ns.float32, ns.float64))


@functools.lru_cache(maxsize=32)
def _ones(ns, n, dtype, device):
    """A vector of ``n`` ones, made once per size, dtype and device (only ever read)."""
    return ns.ones(n, dtype=dtype, device=device)


def sum_last(ns, x, axis, keepdims: bool = False):
    """``ns.sum(x, axis=axis, keepdims=keepdims)``, as a product with ones where ``axis`` is
    ``x``'s last (see the module's docstring)."""
    if not _by_product(ns, x, axis):
        return ns.sum(x, axis=axis, keepdims=keepdims)
    s = ns.matmul(x, _ones(ns, x.shape[-1], x.dtype, _device(x)))
    return s[..., None] if keepdims else s


def mean_last(ns, x, axis, keepdims: bool = False):
    """``ns.mean(x, axis=axis, keepdims=keepdims)``: :func:`sum_last` divided by the count."""
    if not _by_product(ns, x, axis):
        return ns.mean(x, axis=axis, keepdims=keepdims)
    return sum_last(ns, x, axis, keepdims) / x.shape[-1]
