"""ember.distributed: Dask for data and work that outgrow one machine.

- :func:`client` starts a local cluster of worker processes or connects to a
  scheduler; without one everything runs on Dask's threaded scheduler.
- :func:`with_sharding` / :func:`sharding` rechunk dask-backed tensors; the
  gradient passes through a reshard unchanged.
- :func:`resolve_sizes` computes unknown (NaN) chunk sizes explicitly.
- :class:`Dataset` serves minibatches of chunked (zarr / dask) arrays in a
  documented order, and full-batch gradients summed over chunks.
- :func:`chunked_value_and_grad`: data-parallel gradient accumulation, with
  parameters as NumPy and data as Dask.
- :func:`fit`: data-parallel training steps on any scheduler (local cluster
  of processes, an existing scheduler, threads), surviving worker loss, with
  checkpoints to resume from.

Lazy graphs of whole computations are made by the wrapper namespace
``ember.autodiff.dask``; ``ember.compute`` evaluates them in one pass.
"""

from .. import compute, persist
from ._chunked import chunked_grad, chunked_value_and_grad
from ._cluster import MemoryMonitor, chunk_bytes, client
from ._data import Dataset
from ._sharding import resolve_sizes, sharding, with_sharding
from ._train import FitResult, fit

__all__ = [
    "client",
    "MemoryMonitor",
    "chunk_bytes",
    "with_sharding",
    "sharding",
    "resolve_sizes",
    "Dataset",
    "chunked_value_and_grad",
    "chunked_grad",
    "fit",
    "FitResult",
    "compute",
    "persist",
]
