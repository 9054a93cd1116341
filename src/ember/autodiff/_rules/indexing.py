"""VJPs of indexing: ``__getitem__``, functional ``__setitem__``, take, scatter-add.

Basic indices (ints, slices, ellipsis, None) and boolean masks select each
element at most once, so the cotangent is written into zeros. Integer-array
indices may select an element several times; their cotangents are added
(scatter-add), so ``x[[0, 0]]`` gives element 0 twice the gradient.
For ``x[key] = v`` with repeated integer indices the last write wins in the
forward pass; every repeated position of ``v`` receives the cotangent.
"""

from __future__ import annotations

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
    m = ns.zeros(tuple(g.shape), dtype=ns.bool) if zmask is None else ns.asarray(zmask, copy=True)
    m[params["key"]] = True
    return [m, None]


def _setitem_v(ns, g, ans, x, value, *, key):
    return fit(ns, g[key], value)


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
