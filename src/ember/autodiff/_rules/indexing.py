"""VJPs of indexing: ``__getitem__``, functional ``__setitem__``, take, scatter-add.

Basic indices (ints, slices, ellipsis, None) and boolean masks select each
element at most once, so the cotangent is written into zeros. Integer-array
indices may select an element several times; their cotangents are added
(scatter-add), so ``x[[0, 0]]`` gives element 0 twice the gradient.
For ``x[key] = v`` with repeated integer indices the last write wins in the
forward pass (NumPy's order: the last position of the broadcast index in C
order), so only that position of ``v`` receives the cotangent; the others
were overwritten and get zero. ``x[key] += v`` is ``x[key] = x[key] + v``
(not ``add.at``) and follows the same rule.
"""

from __future__ import annotations

import math

from ..._errors import ShapeError
from .._trace import active_traces
from ._base import defvjp
from ._util import fit, known

MASK_OF_UNKNOWN_SIZE = (
    "backward of getitem: x[mask] with a lazy boolean mask selected an unknown number of "
    "elements (a backend such as Dask counts them only when it computes; shapes {x} -> {g}), and "
    "its cotangent cannot be written back to x here (on Dask it goes back block by block, which "
    "needs a mask of x's shape on 1-d x, or a mask of x's rows, and a cotangent in the "
    "selection's blocks, as elementwise ops keep them). Write the masked term with where "
    "instead, xp.where(mask, f(x), 0) (the same gradient, no unknown size), or compute the mask "
    "first and index with that NumPy array, x[numpy.asarray(ember.compute(mask).raw)]"
)


def _device(a):
    """The device of backend array ``a`` (dask arrays have no ``.device`` attribute)."""
    import array_api_compat

    return array_api_compat.device(a)


def _is_int_array(k):
    if isinstance(k, list):  # NumPy-style list index: integer-array indexing
        return not all(isinstance(v, bool) for v in k)
    dt = getattr(k, "dtype", None)
    if dt is None or not hasattr(k, "shape"):
        return False
    return "int" in str(dt)


def _advanced(key):
    keys = key if isinstance(key, tuple) else (key,)
    return any(_is_int_array(k) for k in keys)


def _bool_array(k) -> bool:
    """Whether index ``k`` is a boolean array (a mask)."""
    return "bool" in str(getattr(k, "dtype", "")) and hasattr(k, "shape")


def _getitem(ns, g, ans, x, *, key):
    if not known(g.shape) and any(_bool_array(k) for k in (key if isinstance(key, tuple) else (key,))):
        scatter = getattr(ns, "_mask_scatter", None)  # (Dask's: block by block; else this error)
        if scatter is None:
            raise ShapeError(MASK_OF_UNKNOWN_SIZE.format(x=tuple(x.shape), g=tuple(g.shape)))
        return scatter(g, key=key, like=x.raw)
    z = ns.zeros_like(x)
    if _advanced(key):
        return ns._index_add(z, g, key=key)
    if key is None or (isinstance(key, tuple) and any(k is None for k in key)):
        # new axes (None) cannot be written to: drop them from key and cotangent
        key = tuple(k for k in key if k is not None) if isinstance(key, tuple) else ()
        g = ns.reshape(g, tuple(x.raw[key].shape))
    if g._node is None and not active_traces and z.raw.__class__ is g.raw.__class__:
        try:  # nothing traces this backward: write into the fresh zeros, no second copy
            z.raw[key] = g.raw
            return z
        except (TypeError, ValueError, NotImplementedError):  # immutable arrays (JAX)
            pass
    return ns._setitem(z, g, key=key)


def _setitem_x(ns, g, ans, x, value, *, key):
    return ns._setitem(g, 0, key=key)


def _setitem_zeros(ns, g, zmask, args, params):
    """``x[key] = v``: x's cotangent is zero at the elements the write replaced (and wherever
    the result's own is known zero), so what x held there, a NaN included, stays out."""
    m = ns.zeros(tuple(g.shape), dtype=ns.bool) if zmask is None else zmask
    return [written(ns, m, True, params["key"]), None]


def _last_writes(b, shape, key, dev):
    """A boolean backend array of the shape of ``x[key]``: True at the positions whose write
    survives ``x[key] = v`` (the last write to each element, in C order of the index); None
    when the key writes at most one element.

    Array-API ops only (a stable argsort, take, comparisons), so every backend gets the same
    mask: the linear position of every written element, sorted stably, is the last of its run
    of equal positions exactly when it is the last write; the inverse permutation brings that
    back to the index's order.
    """
    sizes = [len(k) if isinstance(k, list) else math.prod(k.shape)
             for k in (key if isinstance(key, tuple) else (key,)) if _is_int_array(k)]
    if max(sizes, default=0) <= 1:  # nothing repeats (and Dask misreports x[i]'s shape then)
        return None
    n = math.prod(shape)
    lin = b.reshape(b.arange(n, device=dev), tuple(shape))[key]
    rshape = tuple(lin.shape)
    if math.prod(rshape) <= 1:
        return None
    lin = b.reshape(lin, (-1,))
    order = b.argsort(lin, stable=True)
    s = b.take(lin, order)
    last = b.concat([s[:-1] != s[1:], b.ones((1,), dtype=b.bool, device=dev)])
    return b.reshape(b.take(last, b.argsort(order)), rshape)


def written(b, x, value, key):
    """A copy of backend array ``x`` with ``x[key] = value`` (the last write to an element
    wins), also for integer-array keys on backends whose arrays refuse them."""
    y = b.asarray(x, copy=True)
    try:
        y[key] = value
    except IndexError:  # integer-array keys the backend refuses (array-api-strict)
        if not _advanced(key):
            raise
        return scatter_last(b, x, value, key)
    except ValueError:
        if not empty_write(x, value, key):
            raise
    return y


def empty_write(x, value, key) -> bool:
    """Whether ``x[key] = value`` writes nothing because ``x`` is empty, with a ``value`` that
    broadcasts to ``x[key]``: Dask refuses every write into an empty array (even ``x[...] = x``),
    where NumPy writes nothing."""
    shape = tuple(x.shape)
    if any(n.__class__ is not int for n in shape) or math.prod(shape) != 0:
        return False
    try:
        target = tuple(x[key].shape)
    except Exception:
        return False
    vshape = tuple(getattr(value, "shape", ()))
    return len(vshape) <= len(target) and all(
        v == 1 or v == t for v, t in zip(vshape[::-1], target[::-1]))


def scatter_last(b, x, value, key):
    """``x`` with ``x[key] = value`` written as NumPy does (the last write to an element wins),
    for integer-array keys on backends whose arrays refuse them (array-api-strict).

    Array-API ops only: each element of x finds the last write to it by a binary search
    (``searchsorted``) among the stably sorted linear positions of the writes.
    """
    dev = _device(x)
    shape = tuple(x.shape)
    n = math.prod(shape)
    lin = b.reshape(b.arange(n, device=dev), shape)[key]
    vals = b.reshape(b.broadcast_to(b.astype(b.asarray(value, device=dev), x.dtype), tuple(lin.shape)), (-1,))
    lin = b.reshape(lin, (-1,))
    flat = b.reshape(x, (-1,))
    if lin.shape[0] == 0:
        return b.reshape(b.asarray(flat, copy=True), shape)
    order = b.argsort(lin, stable=True)
    s = b.take(lin, order)
    pos = b.searchsorted(s, b.arange(n, dtype=s.dtype, device=dev), side="right") - 1
    pos = b.clip(pos, 0, None) if hasattr(b, "clip") else b.where(pos < 0, 0, pos)
    hit = b.take(s, pos) == b.arange(n, dtype=s.dtype, device=dev)
    return b.reshape(b.where(hit, b.take(b.take(vals, order), pos), flat), shape)


def _setitem_v(ns, g, ans, x, value, *, key):
    gv = g[key]
    if _advanced(key):  # repeated indices: only the surviving write gets the cotangent
        wins = _last_writes(ns._backend, tuple(x.shape), key, _device(g.raw))
        if wins is not None:
            gv = ns.where(ns.asarray(wins), gv, ns.zeros_like(gv))
    return fit(ns, gv, value)


def _take(ns, g, ans, x, indices, *, axis=None):
    ax = 0 if axis is None else axis % x.ndim
    b = ns._backend
    idx = indices.raw
    out = tuple(g.shape)  # x.shape with axis ax replaced by len(indices)
    key = []  # all-integer key (the portable form of integer-array indexing)
    for d in range(x.ndim):
        pos = idx if d == ax else b.astype(b.arange(out[d], device=_device(idx)), idx.dtype)
        key.append(b.reshape(pos, tuple(out[d] if i == d else 1 for i in range(x.ndim))))
    return ns._index_add(ns.zeros_like(x), g, key=tuple(key))


def _take_along(ns, g, ans, x, indices, *, axis=-1):
    ax = axis % x.ndim
    b = ns._backend
    idx = indices.raw
    out = tuple(g.shape)  # x and indices broadcast in all axes but ``axis``
    idx = b.broadcast_to(idx, out)
    key = []
    for d in range(x.ndim):
        if d == ax:
            key.append(idx)
            continue
        dev = _device(idx)
        pos = b.arange(out[d], device=dev) if x.shape[d] == out[d] else b.zeros(out[d], dtype=idx.dtype, device=dev)
        key.append(b.reshape(b.astype(pos, idx.dtype), tuple(out[d] if i == d else 1 for i in range(x.ndim))))
    return ns._index_add(ns.zeros_like(x), g, key=tuple(key))


def _getitem_scatter(ns, acc, g, x, *, key):
    """Add the cotangent ``g`` of ``x[key]`` into ``acc`` (an array of x's shape the backward
    loop owns; None: start from zeros), in place. None for keys that may repeat an element
    (integer arrays) or add axes, and for a cotangent of another dtype: the VJP handles those.

    Why: a tensor read through many slices (im2col, pooling windows, unstack) would
    otherwise get one zero array per slice, all added up.
    """
    if key is None or _advanced(key) or (isinstance(key, tuple) and any(k is None for k in key)):
        return None
    if g.dtype != x.dtype:
        return None
    if acc is None:
        acc = ns.zeros_like(x)
        acc[key] = g
    else:
        acc[key] += g
    return acc


# these VJPs use the wrapper's functional updates (ns._setitem, ns._index_add): raw=False
defvjp("getitem", _getitem, raw=False).scatter = _getitem_scatter
defvjp("setitem", _setitem_x, _setitem_v, raw=False).zero_masks = _setitem_zeros
defvjp("index_add", lambda ns, g, ans, x, v, *, key: g,
       lambda ns, g, ans, x, v, *, key: fit(ns, g[key], v), raw=False)
# Dask's x[mask] at unknown sizes (_getitem): its cotangent scattered back, and that one's VJP
defvjp("mask_scatter", lambda ns, g, ans, gs, *, key, like: ns._mask_gather(g, key=key, like=like), raw=False)
defvjp("mask_gather", lambda ns, g, ans, gs, *, key, like: ns._mask_scatter(g, key=key, like=like), raw=False)
defvjp("take", _take, None, raw=False)
defvjp("take_along_axis", _take_along, None, raw=False)
