"""``Dataset``: minibatches from chunked arrays (zarr or any dask array).

Order of the rows served in epoch ``e`` (documented, reproducible):

- ``shuffle=False``: storage order, rows ``0, 1, ..., n-1``.
- ``shuffle=True``: a *chunk-local* shuffle. ``rng =
  numpy.random.default_rng([seed, e])``; the row chunks are visited in the
  order ``rng.permutation(n_chunks)``; then, for each visited chunk in turn,
  its rows in the order ``rng.permutation(chunk_length)``. Every row is
  served exactly once per epoch, and only one chunk (plus the one being
  prefetched) is in memory at a time.

The stream of rows is cut into consecutive batches of ``batch_size``; a
batch may span two chunks; the last one is shorter unless ``drop_last``.
:meth:`Dataset.order` returns exactly this sequence of row indices.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Iterator

from array_api_compat import is_dask_array as _is_dask
from ._chunked import ZarrRows, as_row_chunked, chunked_value_and_grad, streamed_value_and_grad

__all__ = ["Dataset"]

EMPTY = "Dataset: give at least one array (e.g. Dataset(X, y))"
BAD_BATCH = "Dataset: batch_size must be a positive int, not {batch_size!r}"


def _is_zarr(a) -> bool:
    return type(a).__module__.startswith("zarr")


def _as_dask(a):
    """A dask array for ``a``: dask arrays and Tensors as they are, zarr arrays via from_zarr."""
    from ..autodiff import Tensor
    from ..autodiff import raw_value

    r = raw_value(a) if isinstance(a, Tensor) else a
    if _is_dask(r):
        return r
    import dask.array as da

    if _is_zarr(r):
        return da.from_zarr(r)
    return da.from_array(r, chunks=(max(1, min(len(r), 65536)),) + (-1,) * (r.ndim - 1))


class Dataset:
    """Minibatches of row-aligned chunked arrays, in a documented order (see module docstring).

    Why: data larger than memory is read one chunk at a time (the next chunk
    is loaded while the current one is served), and the same object gives
    full-batch gradients summed over chunks (:meth:`value_and_grad`).
    Batches are tuples of NumPy arrays (one per input array); a rich
    progress bar shows the epoch's progress unless ``progress=False``.
    Over zarr arrays (:meth:`from_zarr`, or zarr arrays given directly), the
    full-batch gradients are *streamed*: a few tasks per worker each read their
    share of the chunks from storage one at a time (see
    :mod:`ember.distributed`'s ``chunked_value_and_grad``).

    >>> import dask.array as da
    >>> from ember.distributed import Dataset
    >>> ds = Dataset(da.arange(10, chunks=4), batch_size=4, progress=False)
    >>> [b[0].tolist() for b in ds]
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    def __init__(
        self,
        *arrays: Any,
        batch_size: int = 256,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        progress: bool = True,
        description: str = "batches",
    ):
        if not arrays:
            raise ValueError(EMPTY)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(BAD_BATCH.format(batch_size=batch_size))
        self.arrays = as_row_chunked("Dataset", [_as_dask(a) for a in arrays])
        #: where tasks read each array's rows from (all zarr: streamed gradients), else None
        self.readers = [ZarrRows(a) for a in arrays] if all(_is_zarr(a) for a in arrays) else None
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.progress = progress
        self.description = description
        self.epoch = 0

    @classmethod
    def from_zarr(cls, path: str, names: tuple[str, ...] = ("X", "y"), **kwargs: Any) -> "Dataset":
        """A Dataset over the arrays ``names`` of the zarr group at ``path``."""
        import zarr

        return cls(*[zarr.open_array(path, path=n, mode="r") for n in names], **kwargs)

    # ------------------------------------------------------------------ sizes
    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.arrays[0].shape[0])

    @property
    def chunks(self) -> tuple[int, ...]:
        """Row chunk lengths."""
        return tuple(int(c) for c in self.arrays[0].chunks[0])

    @property
    def nbytes(self) -> int:
        """Bytes of all arrays together."""
        return int(sum(a.nbytes for a in self.arrays))

    def _starts(self) -> list[int]:
        """The first row of each row chunk, then the number of rows."""
        starts = [0]
        for c in self.chunks:
            starts.append(starts[-1] + c)
        return starts

    def __len__(self) -> int:
        """Number of batches per epoch."""
        q, r = divmod(self.n, self.batch_size)
        return q + (1 if r and not self.drop_last else 0)

    # ------------------------------------------------------------------ order
    def _plan(self, epoch: int):
        """[(chunk index, row permutation within the chunk or None)] in visiting order."""
        import numpy as np

        k = len(self.chunks)
        if not self.shuffle:
            return [(i, None) for i in range(k)]
        rng = np.random.default_rng([self.seed, epoch])
        visit = rng.permutation(k)
        return [(int(i), rng.permutation(self.chunks[i])) for i in visit]

    def order(self, epoch: int = 0):
        """Row indices in the order epoch ``epoch`` serves them (NumPy int64 array)."""
        import numpy as np

        starts = self._starts()
        parts = [
            starts[i] + (np.arange(self.chunks[i]) if perm is None else perm)
            for i, perm in self._plan(epoch)
        ]
        out = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
        if self.drop_last:
            out = out[: len(self) * self.batch_size]
        return out

    # ------------------------------------------------------------------ iteration
    def _load(self, i: int):
        import dask

        return dask.compute(*[a.blocks[i] for a in self.arrays])

    def batches(self, epoch: int | None = None) -> Iterator[tuple]:
        """Iterate the batches of ``epoch`` (default: the next epoch of this Dataset)."""
        import numpy as np

        if epoch is None:
            epoch = self.epoch
            self.epoch += 1
        plan = self._plan(epoch)
        bs = self.batch_size
        total = len(self)
        bar = _progress(self.progress, total, f"{self.description} (epoch {epoch})")
        served = 0
        with concurrent.futures.ThreadPoolExecutor(1) as pool, bar as tick:
            nxt = pool.submit(self._load, plan[0][0]) if plan else None
            pending: list[list] = [[] for _ in self.arrays]
            have = 0
            for j, (_, perm) in enumerate(plan):
                block = nxt.result()
                nxt = pool.submit(self._load, plan[j + 1][0]) if j + 1 < len(plan) else None
                if perm is not None:
                    block = [b[perm] for b in block]
                for buf, b in zip(pending, block):
                    buf.append(b)
                have += len(block[0])
                while have >= bs:
                    cat = [np.concatenate(buf) if len(buf) > 1 else buf[0] for buf in pending]
                    yield tuple(c[:bs] for c in cat)
                    served += 1
                    tick()
                    pending = [[c[bs:]] for c in cat]
                    have -= bs
            if have and not self.drop_last:
                yield tuple(np.concatenate(buf) if len(buf) > 1 else buf[0] for buf in pending)
                served += 1
                tick()

    def __iter__(self) -> Iterator[tuple]:
        return self.batches()

    # ------------------------------------------------------------------ gradients
    def value_and_grad(self, loss: Callable[..., Any], params: Any, *, chunks: Any = None,
                       **kwargs: Any) -> Any:
        """Full-batch ``(value, gradient)`` of ``loss`` summed over this Dataset's chunks.

        ``chunks``: the indices of the row chunks to use (default: all). See
        :func:`ember.distributed.chunked_value_and_grad` for the other keywords;
        ``tasks`` sets how many tasks a streamed pass uses (zarr data only).
        """
        if chunks is None:
            chunks = range(len(self.chunks))
        chunks = list(chunks)
        if self.readers is not None:
            starts = self._starts()
            ranges = [(starts[i], starts[i + 1]) for i in chunks]
            return streamed_value_and_grad(loss, params, self.readers, ranges, **kwargs)
        kwargs.pop("tasks", None)
        blocks = [a.blocks[chunks] for a in self.arrays] if len(chunks) != len(self.chunks) else self.arrays
        return chunked_value_and_grad(loss, params, *blocks, **kwargs)

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(a.shape)) for a in self.arrays)
        return (
            f"Dataset({shapes}; {len(self.chunks)} chunks, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle})"
        )


class _NoBar:
    def __enter__(self):
        return lambda: None

    def __exit__(self, *exc):
        return None


class _RichBar:
    def __init__(self, total: int, description: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.p = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            transient=True,
        )
        self.total = total
        self.description = description

    def __enter__(self):
        self.p.__enter__()
        task = self.p.add_task(self.description, total=self.total)
        return lambda: self.p.advance(task)

    def __exit__(self, *exc):
        return self.p.__exit__(*exc)


def _progress(enabled: bool, total: int, description: str):
    return _RichBar(total, description) if enabled else _NoBar()
