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

Data read from storage (a :class:`~ember.distributed.Dataset` over zarr) is
*streamed* instead: a few tasks per worker, each reading its share of the row
chunks one at a time straight from storage and adding up their gradients, so
the scheduler handles a dozen tasks a pass instead of three per chunk (on
small workers, whose memory allows only small chunks, those tasks cost more
than the model). A task that dies with its worker runs again elsewhere.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import tree as _tree
from array_api_compat import is_dask_array as _is_dask
from .._errors import ShapeError
from ._cluster import _rss
from ..autodiff import Tensor
from ..autodiff import raw_value

__all__ = ["chunked_value_and_grad", "chunked_grad", "as_row_chunked", "streamed_value_and_grad", "ZarrRows"]

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
    total = _tree_sum(parts, split_every)
    if reduce == "mean":
        total = dask.delayed(_scale, pure=True)(total, 1.0 / arrays[0].shape[0])
    if not compute:
        return total
    (res,) = dask.compute(total)
    return res


class ZarrRows:
    """Rows ``[start, stop)`` of a zarr array, read where the task runs (a streamed source).

    Holds the zarr array itself (its store and path travel with the task, not
    its data)."""

    def __init__(self, array: Any):
        self.array = array

    def __dask_tokenize__(self):
        return ("ember.ZarrRows", str(getattr(self.array, "store", "")), str(getattr(self.array, "path", "")),
                tuple(self.array.shape))

    def read(self, start: int, stop: int) -> Any:
        import numpy as np

        return np.asarray(self.array[start:stop])


def _stream_task(loss, params, readers, ranges):
    """One task: the summed value and gradient of ``loss`` over row ranges read one at a time.

    Reads run in the task's own thread: threads of a pool of its own each got a
    heap of their own from glibc, and the freed memory every heap kept pushed
    150 MiB workers over their limit. An input whose rows are small (labels
    beside features) is read ahead over the following contiguous ranges, up to
    the bytes of one range of the largest input: each zarr read costs about half
    a millisecond whatever its size. While the task runs, the process keeps freed
    memory of one range for the next read (``_keep_freed``)."""
    total = None
    ahead = [None] * len(readers)  # per input: (start, stop, rows read ahead)
    row_bytes = budget = None
    with _keep_freed() as keep:
        for j, (start, stop) in enumerate(ranges):
            blocks = []
            for i, r in enumerate(readers):
                span = ahead[i]
                if span is not None and span[0] <= start and stop <= span[1]:
                    blocks.append(span[2][start - span[0]:stop - span[0]])
                    continue
                end = stop
                if budget is not None:
                    k = j + 1
                    while k < len(ranges) and ranges[k][0] == end and (ranges[k][1] - start) * row_bytes[i] <= budget:
                        end = ranges[k][1]
                        k += 1
                if end > stop:
                    ahead[i] = (start, end, r.read(start, end))
                    blocks.append(ahead[i][2][:stop - start])
                else:
                    ahead[i] = None
                    blocks.append(r.read(start, stop))
            if budget is None and stop > start:
                row_bytes = [int(getattr(b, "nbytes", 0)) / (stop - start) for b in blocks]
                budget = max(row_bytes) * (stop - start)
            keep(sum(int(getattr(b, "nbytes", 0)) for b in blocks))
            part = _chunk_value_and_grad(loss, params, None, *blocks)
            del blocks
            total = part if total is None else _add(total, part)
    return total


class _KeepFreed:
    """While streamed tasks run in a Dask worker, glibc keeps freed memory of one range.

    Why: Dask starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so every
    range-sized buffer a read allocates is mapped afresh and handed back when
    freed, and the page faults of mapping it made reading a 3 MB zarr chunk three
    times slower. The threshold (``ember.config(malloc_trim_threshold=...)``) is
    set by the first task that needs it and set back when the last one ends, so an
    idle worker holds no more memory than before; a threshold the user set stays.
    The first task also hands back what earlier tasks left freed in the heap, and
    once the worker's memory comes within a tenth of its limit of where Dask
    pauses it (freed memory sits in a heap per thread, zarr's I/O threads' too),
    nothing more is kept until the last task ends, and what is freed goes back
    every few ranges while the worker stays there.
    Outside a worker (Dask's threads in the user's process) malloc is left as it is.
    """

    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.depth = 0
        self.kept = 0
        self.ctx = None
        self.near = 0  # ranges read near the limit (the valve trims every _TRIM_EVERY-th)
        self.worker = False  # whether the tasks run in a Dask worker (decided by the first)
        self.near_at = None  # the worker's memory (bytes) from which nothing is kept, or None

    def __call__(self):
        import contextlib

        @contextlib.contextmanager
        def scope():
            with self.lock:
                if self.depth == 0:
                    self.worker = _in_worker()
                    self.near_at = _near_bytes() if self.worker else None
                    if self.worker:
                        self._release()
                self.depth += 1
            try:
                yield self.keep
            finally:
                with self.lock:
                    self.depth -= 1
                    if self.depth == 0:
                        if self.ctx is not None:
                            self.ctx.__exit__(None, None, None)
                        self.ctx, self.kept, self.near = None, 0, 0  # (the next task decides afresh)

        return scope()

    @staticmethod
    def _release() -> None:
        """Hand back the freed memory earlier tasks left in the heap (a zarr write's chunks
        left 150 MiB workers at 138 MiB, too close to their limit for the first read)."""
        from .. import config

        if _user_threshold() is None:
            config(malloc_trim_threshold=None)  # (glibc's defaults, and malloc_trim)

    def keep(self, nbytes: int) -> None:
        from .. import config

        with self.lock:
            if self.depth == 0 or not self.worker:
                return
            if _near_limit(self.near_at):  # the worker needs its memory back: now, and every few ranges
                if self.ctx is not None:
                    self.ctx.__exit__(None, None, None)  # (glibc's defaults, and malloc_trim)
                    self.ctx = None
                elif self.near % _TRIM_EVERY == 0:
                    self._release()
                self.near += 1
                self.kept = _NEVER
                return
            if nbytes <= self.kept:  # (also _NEVER: nothing more is kept in this scope)
                return
            if self.ctx is None and _user_threshold() is not None:
                self.kept = _NEVER
                return
            if self.ctx is not None:
                self.ctx.__exit__(None, None, None)
            self.ctx = config(malloc_trim_threshold=int(nbytes))
            self.ctx.__enter__()
            self.kept = nbytes


_keep_freed = _KeepFreed()
#: _KeepFreed.kept once it must keep nothing more until the last task ends
_NEVER = 1 << 62
#: while a worker is near its limit, every how many ranges freed memory goes back
_TRIM_EVERY = 4
#: how far below the fraction of its limit at which Dask pauses a worker the worker stops
#: keeping freed memory
_MARGIN = 0.1


def _near_bytes() -> float | None:
    """The memory (bytes) of this worker from which it keeps no freed memory: ``_MARGIN`` of
    its limit below where Dask pauses it; None without a limit."""
    try:
        import dask
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
        pause = dask.config.get("distributed.worker.memory.pause", default=0.8) or 0.8
        return (float(pause) - _MARGIN) * limit if limit else None
    except (ImportError, ValueError, AttributeError):
        return None


def _near_limit(near_at: float | None) -> bool:
    """Whether this process's memory has reached ``near_at`` bytes (never, for None)."""
    return near_at is not None and _rss() > near_at


def _user_threshold() -> int | None:
    """The ``malloc_trim_threshold`` in effect (None: malloc as the process found it)."""
    from .. import config

    with config() as current:
        return current["malloc_trim_threshold"]


def _in_worker() -> bool:
    try:
        from distributed import get_worker

        get_worker()
        return True
    except (ImportError, ValueError):
        return False


def _default_client():
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def _parallelism(client) -> int:
    """Threads the default scheduler runs tasks on: the default client's, else this machine's cores."""
    import os

    if client is None:
        return os.cpu_count() or 1
    info = client.scheduler_info()
    return max(1, sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values()))


def _tree_sum(parts: list, split_every: int):
    import dask

    add = dask.delayed(_add, pure=True)
    k = max(2, int(split_every))
    while len(parts) > 1:
        parts = [add(*parts[i:i + k]) if len(parts[i:i + k]) > 1 else parts[i] for i in range(0, len(parts), k)]
    return parts[0]


def streamed_value_and_grad(
    loss: Callable[..., Any],
    params: Any,
    readers: list,
    ranges: list[tuple[int, int]],
    *,
    reduce: str = "sum",
    split_every: int = 8,
    tasks: int | None = None,
    compute: bool = True,
) -> Any:
    """:func:`chunked_value_and_grad` over row ``ranges`` that tasks read from ``readers``.

    ``readers[i].read(start, stop)`` gives rows ``[start, stop)`` of data argument i
    (e.g. :class:`ZarrRows`). The ranges are split into ``tasks`` consecutive groups
    (default: four per thread of the scheduler, so a slow or lost worker delays a
    quarter of its share); each task reads and differentiates its ranges one at a
    time, so a worker holds one range of each input at once.
    """
    op = "chunked_value_and_grad"
    if reduce not in ("sum", "mean"):
        raise ValueError(BAD_REDUCE.format(op=op, reduce=reduce))
    import dask

    ranges = [(int(a), int(b)) for a, b in ranges]
    client = _default_client()
    k = max(1, min(len(ranges), tasks if tasks is not None else 4 * _parallelism(client)))
    params_raw = _tree.map(lambda t: raw_value(t) if isinstance(t, Tensor) else t, params)
    p = dask.delayed(params_raw, pure=True, traverse=False)
    task = dask.delayed(_stream_task, pure=False)  # (storage may change between passes)
    bounds = [len(ranges) * i // k for i in range(k + 1)]
    parts = [task(loss, p, readers, ranges[bounds[i]:bounds[i + 1]]) for i in range(k)]
    total = _tree_sum(parts, split_every)
    if reduce == "mean":
        total = dask.delayed(_scale, pure=True)(total, 1.0 / sum(b - a for a, b in ranges))
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
