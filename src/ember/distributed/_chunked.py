"""Full-batch gradients summed over the chunks of dask data (data parallel).

The parameters are small and stay NumPy; the data are large and stay Dask.
One task per row chunk loads its block (from zarr, or wherever the dask
graph reads it), computes ``ember.value_and_grad(loss)(params, *block)``
with the wrapper namespace of the block's library, and returns NumPy
partial sums. The partials are added in a tree of tasks (``split_every`` at
a time), so the dataset is never materialized: a worker holds one block of
each input plus a few gradient-sized partial sums at a time. One
``dask.compute`` runs the whole job (on the default client when there is one,
else on Dask's threaded scheduler).
"""

from __future__ import annotations

from typing import Any, Callable

from .. import tree as _tree
from array_api_compat import is_dask_array as _is_dask
from .._errors import ShapeError
from ..autodiff import Tensor
from ..autodiff import raw_value

__all__ = ["chunked_value_and_grad", "chunked_grad", "as_row_chunked"]

NOT_DASK = (
    "{op}: data argument {i} is a {kind}, not a dask array. Fix: wrap it, e.g. "
    "dask.array.from_array(a, chunks=(10_000, -1)), or dask.array.from_zarr(path)"
)
ROWS_DIFFER = (
    "{op}: data arguments have different numbers of rows ({rows}); every data array is "
    "split along axis 0 into the same chunks. Fix: pass arrays with equal first dimension"
)
UNKNOWN_ROWS = (
    "{op}: data argument {i} has unknown (NaN) chunk sizes (from a boolean mask, nonzero "
    "or unique_*). Fix: call ember.distributed.resolve_sizes(x) first"
)
BAD_REDUCE = "{op}: reduce must be 'sum' or 'mean', not {reduce!r}"


def as_row_chunked(op: str, data, like=None) -> list:
    """Raw dask arrays, all with the row chunks of ``like`` (or of the first) and whole rows."""
    out = []
    for i, a in enumerate(data):
        r = raw_value(a) if isinstance(a, Tensor) else a
        if not _is_dask(r):
            raise TypeError(NOT_DASK.format(op=op, i=i, kind=type(r).__module__ + "." + type(r).__name__))
        if any(c != c for c in r.chunks[0]):
            raise ShapeError(UNKNOWN_ROWS.format(op=op, i=i))
        out.append(r)
    rows = [a.shape[0] for a in out]
    if len(set(rows)) > 1:
        raise ShapeError(ROWS_DIFFER.format(op=op, rows=rows))
    row_chunks = like if like is not None else (out[0].chunks[0] if out else None)
    aligned = []
    for a in out:
        want = {0: row_chunks, **{ax: -1 for ax in range(1, a.ndim)}}
        if a.chunks[0] != tuple(row_chunks) or any(len(c) > 1 for c in a.chunks[1:]):
            a = a.rechunk(want)
        aligned.append(a)
    return aligned


def _chunk_value_and_grad(loss, params, argnums_tree, *blocks):
    """One task: value and gradient of ``loss`` on one block (runs on a worker)."""
    from ..autodiff import namespace
    from ..func import value_and_grad

    wrapped = [namespace(b).asarray(b) for b in blocks]
    v, g = value_and_grad(loss)(params, *wrapped)
    v = raw_value(v) if isinstance(v, Tensor) else v
    g = _tree.map(lambda t: raw_value(t) if isinstance(t, Tensor) else t, g)
    return v, g


def _same_kind(a, r):
    """``r`` as an array of ``a``'s library (0-d sums of NumPy give scalars, not arrays)."""
    if hasattr(a, "__array_namespace__") and not hasattr(r, "__array_namespace__"):
        return a.__array_namespace__().asarray(r)
    import array_api_compat

    if array_api_compat.is_array_api_obj(a) and type(r) is not type(a):
        return array_api_compat.array_namespace(a).asarray(r)
    return r


def _add(*parts):
    """Sum of (value, grads) pairs (one tree-reduction task)."""
    v = parts[0][0]
    g = parts[0][1]
    for pv, pg in parts[1:]:
        v = _same_kind(v, v + pv)
        g = _tree.map(lambda a, b: _same_kind(a, a + b), g, pg)
    return v, g


def _scale(pair, s):
    v, g = pair
    return _same_kind(v, v * s), _tree.map(lambda a: _same_kind(a, a * s), g)


def chunked_value_and_grad(
    loss: Callable[..., Any],
    params: Any,
    *data: Any,
    reduce: str = "sum",
    split_every: int = 8,
    compute: bool = True,
) -> Any:
    """``(loss value, gradient w.r.t. params)`` of a loss summed over the row chunks of ``data``.

    Why: a full-batch gradient of data larger than memory, data-parallel
    over the workers, with parameters as NumPy (small, shipped once) and data
    as Dask (large, never materialized). ``loss(params, *block)`` receives the
    parameters as tracked Tensors and each block as a Tensor of the block's
    wrapper namespace (``ember.autodiff.numpy`` for NumPy chunks), and must
    return the *sum* of the per-example losses of that block, so that chunks
    add up. ``reduce="mean"`` divides the total value and gradient by the
    number of rows. ``data`` are dask arrays (or dask-backed Tensors) with the
    same first dimension; they are rechunked to the first one's row chunks
    and to whole rows. The result holds NumPy arrays in the structure of
    ``params``; with ``compute=False`` it is a ``dask.delayed`` object of that
    pair, to be computed together with other work (``ember.compute``).

    >>> import numpy as np, dask.array as da
    >>> import ember.distributed as ed, ember.autodiff.numpy as xp
    >>> X = da.ones((6, 2), chunks=(2, 2)); w = np.ones(2)
    >>> v, g = ed.chunked_value_and_grad(lambda w, X: xp.sum((X @ w) ** 2), w, X)
    >>> float(v), g.tolist()
    (24.0, [24.0, 24.0])
    """
    op = "chunked_value_and_grad"
    if reduce not in ("sum", "mean"):
        raise ValueError(BAD_REDUCE.format(op=op, reduce=reduce))
    import dask

    arrays = as_row_chunked(op, data)
    params_raw = _tree.map(lambda t: raw_value(t) if isinstance(t, Tensor) else t, params)
    p = dask.delayed(params_raw, pure=True, traverse=False)
    blocks = [a.to_delayed().reshape(-1) for a in arrays]
    task = dask.delayed(_chunk_value_and_grad, pure=True)
    parts = [task(loss, p, None, *[b[i] for b in blocks]) for i in range(len(blocks[0]))]
    add = dask.delayed(_add, pure=True)
    k = max(2, int(split_every))
    while len(parts) > 1:
        parts = [add(*parts[i:i + k]) if len(parts[i:i + k]) > 1 else parts[i] for i in range(0, len(parts), k)]
    total = parts[0]
    if reduce == "mean":
        total = dask.delayed(_scale, pure=True)(total, 1.0 / arrays[0].shape[0])
    if not compute:
        return total
    (res,) = dask.compute(total)
    return res


def chunked_grad(loss: Callable[..., Any], params: Any, *data: Any, **kwargs: Any) -> Any:
    """The gradient part of :func:`chunked_value_and_grad` (same arguments)."""
    res = chunked_value_and_grad(loss, params, *data, **kwargs)
    if kwargs.get("compute", True):
        return res[1]
    import dask

    return dask.delayed(lambda r: r[1], pure=True)(res)
