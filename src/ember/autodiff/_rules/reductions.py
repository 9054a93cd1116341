"""VJPs of reductions and scans (memory-bound).

``max``/``min``: where several elements tie for the extremum, the gradient is
split equally among them (as JAX and PyTorch's ``amax`` do).
``prod``: exact at zeros (products of the *other* elements, from exclusive
scans), not ``ans / x``.
``cumulative_prod``: uses ``ans / x`` and so is not defined where x == 0.
"""

from __future__ import annotations

import math

from ._base import defvjp
from ._util import expand_reduced, norm_axes


def _count(x, axis):
    return math.prod(x.shape[a] for a in norm_axes(axis, x.ndim))


def _sum(ns, g, ans, x, *, axis=None, dtype=None, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    return ns.astype(ns.broadcast_to(g, x.shape), x.dtype) if g.dtype != x.dtype else ns.broadcast_to(g, x.shape)


def _mean(ns, g, ans, x, *, axis=None, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    n = _count(x, axis)
    return ns.broadcast_to(g / n if n else g * math.nan, x.shape)


def _extremum(ns, g, ans, x, *, axis=None, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    a = expand_reduced(ns, ans, x, axis, keepdims)
    mask = ns.astype(x == a, x.dtype)
    return g * mask / ns.sum(mask, axis=norm_axes(axis, x.ndim), keepdims=True)


def _var_core(ns, x, axis, correction):
    axes = norm_axes(axis, x.ndim)
    return x - ns.mean(x, axis=axes, keepdims=True), _count(x, axis) - correction


def _var(ns, g, ans, x, *, axis=None, correction=0.0, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    dev, n = _var_core(ns, x, axis, correction)
    return g * (2.0 / n) * dev


def _std(ns, g, ans, x, *, axis=None, correction=0.0, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    a = expand_reduced(ns, ans, x, axis, keepdims)
    dev, n = _var_core(ns, x, axis, correction)
    return g * dev / (n * a)


def _prod(ns, g, ans, x, *, axis=None, dtype=None, keepdims=False):
    axes = norm_axes(axis, x.ndim)
    if not axes:
        return ns.astype(g, x.dtype) if g.dtype != x.dtype else g
    kept = [i for i in range(x.ndim) if i not in axes]
    perm = tuple(kept + list(axes))
    kshape = tuple(x.shape[i] for i in kept)
    n = _count(x, axis)
    xr = ns.reshape(ns.permute_dims(x, perm), kshape + (n,))
    left = ns.cumulative_prod(xr, axis=-1, include_initial=True)[..., :-1]
    right = ns.flip(
        ns.cumulative_prod(ns.flip(xr, axis=-1), axis=-1, include_initial=True)[..., :-1], axis=-1
    )
    others = left * right
    gk = ns.reshape(g, kshape + (1,))
    gr = ns.reshape(gk * others, tuple(x.shape[i] for i in perm))
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    res = ns.permute_dims(gr, tuple(inv))
    return ns.astype(res, x.dtype) if res.dtype != x.dtype else res


def _rev_cumsum(ns, g, axis):
    return ns.flip(ns.cumulative_sum(ns.flip(g, axis=axis), axis=axis), axis=axis)


def _scan_axis(x, axis):
    return 0 if axis is None else axis % x.ndim


def _cumsum(ns, g, ans, x, *, axis=None, dtype=None, include_initial=False):
    ax = _scan_axis(x, axis)
    if include_initial:
        g = g[(slice(None),) * ax + (slice(1, None),)]
    res = _rev_cumsum(ns, g, ax)
    return ns.astype(res, x.dtype) if res.dtype != x.dtype else res


def _cumprod(ns, g, ans, x, *, axis=None, dtype=None, include_initial=False):
    ax = _scan_axis(x, axis)
    if include_initial:
        sl = (slice(None),) * ax + (slice(1, None),)
        g, ans = g[sl], ans[sl]
    res = _rev_cumsum(ns, g * ans, ax) / x
    return ns.astype(res, x.dtype) if res.dtype != x.dtype else res


defvjp("sum", _sum)
defvjp("mean", _mean)
defvjp("max", _extremum)
defvjp("min", _extremum)
defvjp("var", _var)
defvjp("std", _std)
defvjp("prod", _prod)
defvjp("cumulative_sum", _cumsum)
defvjp("cumulative_prod", _cumprod)
