"""Shape arithmetic that tolerates sizes a lazy backend computes later."""

from __future__ import annotations

__all__ = ["shapes_fit", "meshgrid"]


def shapes_fit(a, b) -> bool:
    """Whether shapes ``a`` and ``b`` can be the same: equal ranks, and equal sizes wherever
    both are known (Dask reports a size it computes later as NaN, which is not NaN; the
    standard reports None)."""
    return len(a) == len(b) and all(m == n or m.__class__ is not int or n.__class__ is not int
                                    for m, n in zip(a, b))


def meshgrid(ns, arrays, indexing: str = "xy") -> list:
    """``meshgrid`` of 1-D ``arrays`` written with ``reshape`` and ``broadcast_to`` of namespace
    ``ns``: differentiable where ``ns`` is (ember's traced path) and usable on batched arrays
    (vmap's rule). ``indexing="xy"`` swaps the first two axes, as the standard says."""
    n = len(arrays)
    xy = indexing == "xy" and n >= 2
    sizes = [a.shape[0] for a in arrays]
    if xy:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    res = []
    for i, a in enumerate(arrays):
        shape = [1] * n
        shape[1 - i if xy and i < 2 else i] = a.shape[0]
        res.append(ns.broadcast_to(ns.reshape(a, tuple(shape)), tuple(sizes)))
    return res
