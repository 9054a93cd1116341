"""VJPs of indexing: ``__getitem__``, functional ``__setitem__``, take, scatter-add.

Basic indices (ints, slices, ellipsis, None) and boolean masks select each
element at most once, so the cotangent is written into zeros. Integer-array
indices may select an element several times; their cotangents are added
(scatter-add), so ``x[[0, 0]]`` gives element 0 twice the gradient.
For ``x[key] = v`` with repeated integer indices the last write wins in the
forward pass; every repeated position of ``v`` receives the cotangent.
"""

from __future__ import annotations

from ._base import defvjp
from ._util import fit


def _is_int_array(k):
    dt = getattr(k, "dtype", None)
    if dt is None or not hasattr(k, "shape"):
        return False
    return "int" in str(dt)


def _advanced(key):
    keys = key if isinstance(key, tuple) else (key,)
    return any(_is_int_array(k) for k in keys)


def _getitem(ns, g, ans, x, *, key):
    z = ns.zeros_like(x)
    if _advanced(key):
        return ns._index_add(z, g, key=key)
    return ns._setitem(z, g, key=key)


def _setitem_x(ns, g, ans, x, value, *, key):
    return ns._setitem(g, 0, key=key)


def _setitem_v(ns, g, ans, x, value, *, key):
    return fit(ns, g[key], value)


def _take(ns, g, ans, x, indices, *, axis=None):
    ax = 0 if axis is None else axis % x.ndim
    key = (slice(None),) * ax + (indices.raw,)
    return ns._index_add(ns.zeros_like(x), g, key=key)


def _take_along(ns, g, ans, x, indices, *, axis=-1):
    ax = axis % x.ndim
    b = ns._backend
    idx = indices.raw
    key = tuple(
        idx if d == ax else b.reshape(
            b.arange(idx.shape[d]), tuple(idx.shape[d] if i == d else 1 for i in range(x.ndim))
        )
        for d in range(x.ndim)
    )
    return ns._index_add(ns.zeros_like(x), g, key=key)


defvjp("getitem", _getitem)
defvjp("setitem", _setitem_x, _setitem_v)
defvjp("index_add", lambda ns, g, ans, x, v, *, key: g, lambda ns, g, ans, x, v, *, key: fit(ns, g[key], v))
defvjp("take", _take, None)
defvjp("take_along_axis", _take_along, None)
