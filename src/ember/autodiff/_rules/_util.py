"""Helpers shared by rules: reduce a broadcast cotangent back to an input's shape."""

from __future__ import annotations


def fit(ns, g, x):
    """Sum ``g`` over the axes broadcasting added to ``x`` and cast to ``x``'s dtype.

    Python scalars never receive a gradient, so ``x`` is always an array here.
    """
    shape = tuple(x.shape)
    gshape = tuple(g.shape)
    if gshape != shape:
        lead = len(gshape) - len(shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, s in enumerate(shape) if s == 1 and gshape[lead + i] != 1
        )
        if axes:
            g = ns.sum(g, axis=axes, keepdims=True)
        g = ns.reshape(g, shape)
    if g.dtype != x.dtype:
        if ns.isdtype(g.dtype, "complex floating") and not ns.isdtype(x.dtype, "complex floating"):
            g = ns.real(g)
        g = ns.astype(g, x.dtype)
    return g


def norm_axes(axis, ndim):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted(a % ndim if ndim else a for a in axis))


def expand_reduced(ns, g, x, axis, keepdims):
    """Cotangent of a reduction, reshaped to broadcast against ``x``."""
    if not keepdims and x.ndim:
        shape = list(x.shape)
        for a in norm_axes(axis, x.ndim):
            shape[a] = 1
        g = ns.reshape(g, tuple(shape))
    return g
