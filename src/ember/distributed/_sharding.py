"""Sharding of dask-backed tensors: ``with_sharding``, ``sharding``, ``resolve_sizes``.

A dask array is split into chunks ("shards"); where they live is the
scheduler's business. ``with_sharding(x, chunks)`` rechunks ``x``; under a
transform the cotangent flows back through the reshard unchanged, only
rechunked to the input's chunks (Burn's ``WithSharding`` backward). On eager
backends (NumPy, CuPy) an array is one shard and both functions are no-ops.
"""

from __future__ import annotations

from typing import Any

from .. import tree as _tree
from array_api_compat import is_dask_array as _is_dask
from ..autodiff import Tensor, defvjp
from ..autodiff import raw_value

__all__ = ["with_sharding", "sharding", "resolve_sizes", "UNKNOWN_SIZES"]

UNKNOWN_SIZES = (
    "{op}: {what} has unknown (NaN) chunk sizes, which dask gives after boolean-mask "
    "indexing, nonzero and unique_*. Fix: call ember.distributed.resolve_sizes(x) first "
    "(computes only the chunk sizes) or ember.compute(x)"
)


def _rechunk(a, chunks):
    return a.rechunk(chunks)


def _vjp(ns, g, ans, x, *, chunks):
    # The cotangent passes through unchanged, laid out like the input again.
    return with_sharding(g, sharding(x))


defvjp("with_sharding", _vjp, raw=False)  # with_sharding and sharding take Tensors


def _check_known(op: str, a, what: str) -> None:
    if any(c != c for dim in a.chunks for c in dim):
        from .._errors import ShapeError

        raise ShapeError(UNKNOWN_SIZES.format(op=op, what=what))


def with_sharding(x: Any, chunks: Any) -> Any:
    """Rechunk ``x`` to ``chunks`` (dask syntax: tuple, dict, ``-1``, ``"auto"``).

    Why: the chunking decides the parallelism and the memory per task; a
    layer may want rows split for data parallelism and columns whole. Under
    ``ember.grad`` the gradient passes through unchanged, rechunked back to
    ``x``'s chunks. Tensors of eager backends and non-dask arrays come back
    as they are.

    >>> import ember.autodiff.dask as xp, ember.distributed as ed
    >>> ed.sharding(ed.with_sharding(xp.ones((4, 2)), (2, 2)))
    ((2, 2), (2,))
    """
    if isinstance(x, Tensor):
        r = raw_value(x)
        if not _is_dask(r):
            return x
        _check_known("with_sharding", r, "the input")
        return type(x)._ns._dispatch.call("with_sharding", _rechunk, (x,), {"chunks": chunks})
    if _is_dask(x):
        _check_known("with_sharding", x, "the input")
        return x.rechunk(chunks)
    return x


def sharding(x: Any) -> tuple[tuple[float, ...], ...] | None:
    """The chunk sizes of ``x`` along every axis (dask), or None for an eager array.

    >>> import dask.array as da, ember.distributed as ed
    >>> ed.sharding(da.ones(5, chunks=2))
    ((2, 2, 1),)
    """
    r = raw_value(x) if isinstance(x, Tensor) else x
    return tuple(r.chunks) if _is_dask(r) and hasattr(r, "chunks") else None


def resolve_sizes(x: Any) -> Any:
    """Compute the unknown (NaN) chunk sizes of every dask leaf of ``x``, in place.

    Why: boolean masks, ``nonzero`` and ``unique_*`` give dask arrays whose
    sizes are only known after computing; shape-dependent ops (reshape,
    broadcasting, the gradients of such ops) refuse them. This computes the
    sizes (the values are computed and dropped, not kept) and updates the
    arrays in place, so tensors already recorded on a tape see them too.
    Returns ``x``.

    >>> import dask.array as da, ember.distributed as ed
    >>> a = da.arange(6, chunks=3)
    >>> m = a[a > 2]
    >>> ed.resolve_sizes(m).shape
    (3,)
    """
    for leaf in _tree.leaves(x, is_leaf=_is_dask):
        r = raw_value(leaf) if isinstance(leaf, Tensor) else leaf
        if _is_dask(r) and hasattr(r, "compute_chunk_sizes"):
            if any(c != c for dim in r.chunks for c in dim):
                r.compute_chunk_sizes()
    return x
