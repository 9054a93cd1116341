"""Shape arithmetic that tolerates sizes a lazy backend computes later."""

from __future__ import annotations

__all__ = ["shapes_fit"]


def shapes_fit(a, b) -> bool:
    """Whether shapes ``a`` and ``b`` can be the same: equal ranks, and equal sizes wherever
    both are known (Dask reports a size it computes later as NaN, which is not NaN; the
    standard reports None)."""
    return len(a) == len(b) and all(m == n or m.__class__ is not int or n.__class__ is not int
                                    for m, n in zip(a, b))
