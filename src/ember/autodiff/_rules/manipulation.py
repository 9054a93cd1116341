"""VJPs of shape manipulation (memory-bound) and sort (compute-bound)."""

from __future__ import annotations

from ._base import defvjp, defvjp_all
from ._util import fit


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _roll(ns, g, ans, x, shift, *, axis=None):
    neg = tuple(-s for s in shift) if isinstance(shift, (tuple, list)) else -shift
    return ns.roll(g, neg, axis=axis)


def _tile(ns, g, ans, x, repetitions):
    nd = max(x.ndim, len(repetitions))
    xs = (1,) * (nd - x.ndim) + tuple(x.shape)
    reps = (1,) * (nd - len(repetitions)) + tuple(repetitions)
    inter = []
    for r, s in zip(reps, xs):
        inter += [r, s]
    g = ns.sum(ns.reshape(g, tuple(inter)), axis=tuple(range(0, 2 * nd, 2)))
    return ns.reshape(g, x.shape)


def _repeat(ns, g, ans, x, repeats, *, axis=None):
    if axis is None:
        x_shape, ax = (x.size,), 0
        g = ns.reshape(g, (-1,))
    else:
        x_shape, ax = tuple(x.shape), axis % x.ndim
    if isinstance(repeats, int):
        shape = x_shape[:ax] + (x_shape[ax], repeats) + x_shape[ax + 1:]
        res = ns.sum(ns.reshape(g, shape), axis=ax + 1)
    else:
        if repeats.shape[0] != x_shape[ax]:  # one count for every element
            repeats = ns.broadcast_to(repeats, (x_shape[ax],))
        cs = ns.cumulative_sum(g, axis=ax, include_initial=True)
        ends = ns.cumulative_sum(ns.astype(repeats, ns.int64 if hasattr(ns, "int64") else repeats.dtype))
        starts = ends - repeats
        res = ns.take(cs, ends, axis=ax) - ns.take(cs, starts, axis=ax)
    return ns.reshape(res, x.shape)


def _split(ns, g, ans, args, params, parents, *, stacked):
    axis = params["axis"]
    if not stacked and axis is None:
        g_flat, off, out = g, 0, []
        for x, p in zip(args, parents):
            n = x.size
            out.append(None if p is None else ns.reshape(g_flat[off:off + n], x.shape))
            off += n
        return out
    ax = axis % g.ndim
    pre = (slice(None),) * ax
    out, off = [], 0
    for x, p in zip(args, parents):
        if stacked:
            out.append(None if p is None else g[pre + (off, ...)])
            off += 1
        else:
            n = x.shape[ax]
            out.append(None if p is None else g[pre + (slice(off, off + n), ...)])
            off += n
    return out


def _sort(ns, g, ans, x, *, axis=-1, descending=False, stable=True):
    idx = ns.argsort(x, axis=axis, descending=descending, stable=True)
    inv = ns.argsort(idx, axis=axis, stable=True)
    return ns.take_along_axis(g, inv, axis=axis)


defvjp("reshape", lambda ns, g, ans, x, shape, **kw: ns.reshape(g, x.shape))
defvjp("permute_dims", lambda ns, g, ans, x, axes: ns.permute_dims(g, _inverse([a % x.ndim for a in axes])))
defvjp("expand_dims", lambda ns, g, ans, x, axis=0: ns.squeeze(g, axis=axis))  # (sizes may be unknown)
defvjp("squeeze", lambda ns, g, ans, x, axis=None: ns.reshape(g, x.shape))
defvjp("flip", lambda ns, g, ans, x, *, axis=None: ns.flip(g, axis=axis))
defvjp("roll", _roll)
defvjp("broadcast_to", lambda ns, g, ans, x, shape: fit(ns, g, x))
defvjp("tile", _tile)
defvjp("repeat", _repeat, None)
defvjp("tril", lambda ns, g, ans, x, *, k=0: ns.tril(g, k=k))
defvjp("triu", lambda ns, g, ans, x, *, k=0: ns.triu(g, k=k))
defvjp("matrix_transpose", lambda ns, g, ans, x: ns.matrix_transpose(g))
defvjp_all("concat", lambda ns, g, ans, args, params, parents: _split(ns, g, ans, args, params, parents, stacked=False))
defvjp_all("stack", lambda ns, g, ans, args, params, parents: _split(ns, g, ans, args, params, parents, stacked=True))
defvjp("sort", _sort)
