"""Max pooling over windows that tile the input, as strided views."""

from __future__ import annotations

import itertools

__all__ = ["tile_views", "max_pool_tiles"]


def tile_views(ndim: int, kernel: tuple[int, ...]) -> list[tuple]:
    """Index tuples of the strided views, one per window offset, in row-major window order."""
    lead = (slice(None),) * (ndim - len(kernel))
    return [lead + tuple(slice(o, None, k) for o, k in zip(offsets, kernel))
            for offsets in itertools.product(*(range(k) for k in kernel))]


def max_pool_tiles(ns, x, kernel):
    """The window maxima of ``x`` (its last ``len(kernel)`` axes tiled by ``kernel``)."""
    y = None
    for idx in tile_views(x.ndim, kernel):
        y = x[idx] if y is None else ns.maximum(y, x[idx])
    return y
