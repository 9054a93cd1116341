"""VJPs of reductions and scans (memory-bound).

``max``/``min``: where several elements tie for the extremum, the gradient is
split equally among them (as JAX and PyTorch's ``amax`` do).
``prod``: exact at zeros (products of the *other* elements, from exclusive
scans), not ``ans / x`` (along a size Dask computes later, the exclusive scan
divides each element out of an inclusive one: still exact at zeros).
``cumulative_prod``: exact at zeros too: ``ans / x`` at nonzero elements, the
product of the others at the first zero of each slice, 0 at later zeros (and,
for second derivatives, the second zero's product of the others, which is 0
but moves with the first zero). Its second derivative at a nonzero ``x``
differentiates ``ans / x``: exact in theory, with a rounding error of about
``eps / |x|`` for tiny ``|x|``.
``std`` at zero spread and ``var``/``std`` with ``correction`` equal to the
count give inf/nan gradients, as their values do. Complex inputs follow the
convention of :mod:`.elementwise` (``g * conj(d ans / d x)``).
"""

from __future__ import annotations

import math

from .._tensor import Tensor
from ._base import defvjp
from ._util import broadcast_like, cj, count, drop_first, expand_reduced, known, norm_axes


def _sum(ns, g, ans, x, *, axis=None, dtype=None, keepdims=False):
    g = broadcast_like(ns, expand_reduced(ns, g, x, axis, keepdims), x)
    return ns.astype(g, x.dtype) if g.dtype != x.dtype else g


def _mean(ns, g, ans, x, *, axis=None, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    n = count(ns, x, axis)
    return broadcast_like(ns, g / n if n.__class__ is not int or n else g * math.nan, x)


def _extremum(ns, g, ans, x, *, axis=None, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    a = expand_reduced(ns, ans, x, axis, keepdims)
    mask = ns.astype(x == a, x.dtype)
    return g * mask / ns.sum(mask, axis=norm_axes(axis, x.ndim), keepdims=True)


def _var_core(ns, x, axis, correction):
    axes = norm_axes(axis, x.ndim)
    n = count(ns, x, axis) - correction  # an array where sizes are unknown (see count)
    return x - ns.mean(x, axis=axes, keepdims=True), float(n) if isinstance(n, (int, float)) else n


def _var(ns, g, ans, x, *, axis=None, correction=0.0, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    dev, n = _var_core(ns, x, axis, correction)
    return g * dev * 2.0 / n


def _std(ns, g, ans, x, *, axis=None, correction=0.0, keepdims=False):
    g = expand_reduced(ns, g, x, axis, keepdims)
    a = expand_reduced(ns, ans, x, axis, keepdims)
    dev, n = _var_core(ns, x, axis, correction)
    return g * dev / (n * a)


def _exclusive_cumprod(ns, x, axis):
    """The product of the elements before each one along ``axis`` (1 for the first).

    Along a size the backend computes later (Dask after a boolean mask) the
    inclusive scan cannot drop its last element (a slice needs the size), so
    each element divides itself out of the inclusive products of ``x`` with its
    zeros set to 1, and elements after a zero get 0: exact at zeros, within
    rounding of the scan elsewhere. Only on backend arrays (a backward pass
    nothing records): that form's own derivative at a zero is 0, not the
    product of the others, so a recorded one (higher orders) keeps the slice.
    """
    if x.shape[axis].__class__ is int or isinstance(x, Tensor):
        c = ns.cumulative_prod(x, axis=axis, include_initial=True)
        return c[(slice(None),) * axis + (slice(None, -1), ...)]
    zero = x == 0
    nonzero = ns.where(zero, ns.ones_like(x), x)
    zeros = ns.astype(zero, ns.int32)
    before = ns.cumulative_sum(zeros, axis=axis) - zeros  # zeros strictly before each element
    return ns.where(before == 0, ns.cumulative_prod(nonzero, axis=axis) / nonzero, ns.zeros_like(x))


def _exclusive_prod(ns, y, axis):
    """The product of the other elements along ``axis``, for each element (exact at zeros)."""
    left = _exclusive_cumprod(ns, y, axis)
    right = ns.flip(_exclusive_cumprod(ns, ns.flip(y, axis=axis), axis), axis=axis)
    return left * right


def _slab_others(ns, x, axes):
    """For each element of ``x``, the product of the others in its slab over ``axes``.

    Exact at zeros (no division ``ans / x``), from one-axis exclusive scans.
    Several axes with known sizes: the slab flattened into one scanned axis
    (permute, reshape), the fastest on NumPy. Where Dask knows no row count (a
    boolean mask) a reshape is impossible, so the axes are scanned one by one:
    the others of ``x[i]`` are those along the last axis in its own line, times
    the product of the lines that differ in the axis before, and so on outwards.
    """
    if len(axes) == 1:
        return _exclusive_prod(ns, x, axes[0])
    if known(x.shape):
        kept = [i for i in range(x.ndim) if i not in axes]
        perm = kept + list(axes)
        kshape = tuple(x.shape[i] for i in kept)
        flat = ns.reshape(ns.permute_dims(x, tuple(perm)), kshape + (math.prod(x.shape[a] for a in axes),))
        others = ns.reshape(_exclusive_prod(ns, flat, len(kept)), tuple(x.shape[i] for i in perm))
        return ns.permute_dims(others, tuple(perm.index(i) for i in range(x.ndim)))
    others = _exclusive_prod(ns, x, axes[-1])
    y = x
    for k in range(len(axes) - 2, -1, -1):  # the lines that differ in axes[k], innermost first
        y = ns.prod(y, axis=axes[k + 1], keepdims=True)
        others = others * _exclusive_prod(ns, y, axes[k])
    return others


def _prod(ns, g, ans, x, *, axis=None, dtype=None, keepdims=False):
    axes = norm_axes(axis, x.ndim)
    if not axes:
        return ns.astype(g, x.dtype) if g.dtype != x.dtype else g
    res = expand_reduced(ns, g, x, axis, keepdims) * cj(ns, _slab_others(ns, x, axes))
    return ns.astype(res, x.dtype) if res.dtype != x.dtype else res


def _rev_cumsum(ns, g, axis):
    return ns.flip(ns.cumulative_sum(ns.flip(g, axis=axis), axis=axis), axis=axis)


def _scan_axis(x, axis):
    return 0 if axis is None else axis % x.ndim


def _cumsum(ns, g, ans, x, *, axis=None, dtype=None, include_initial=False):
    ax = _scan_axis(x, axis)
    if include_initial:
        g = drop_first(ns, g, ax)
    res = _rev_cumsum(ns, g, ax)
    return ns.astype(res, x.dtype) if res.dtype != x.dtype else res


def _cumprod(ns, g, ans, x, *, axis=None, dtype=None, include_initial=False):
    ax = _scan_axis(x, axis)
    if include_initial:
        g, ans = drop_first(ns, g, ax), drop_first(ns, ans, ax)
    is_zero = x == 0
    zeros_so_far = ns.cumulative_sum(ns.astype(is_zero, ns.int32), axis=ax)
    first = is_zero & (zeros_so_far == 1)
    safe_x = ns.where(is_zero, ns.ones_like(x), x)
    # at each nonzero x_i: sum_{j>=i} g_j ans_j / x_i. After a zero it is 0, and its derivative
    # in that zero is still the product of the others, as a second derivative needs
    res = _rev_cumsum(ns, g * cj(ns, ans), ax) / cj(ns, safe_x)
    # at the k-th zero z: sum_{j>=z} g_j prod_{m<=j, m!=z} x_m (x_z replaced by 1), 0 in value
    # for k > 1 but with a derivative in the first zero for k == 2: recorded only where an
    # outer trace may differentiate it (Tensors), exact to second order
    kth = [first, is_zero & (zeros_so_far == 2)] if isinstance(x, Tensor) else [first]
    out = ns.where(is_zero, 0 * res, res)
    for zero_k in reversed(kth):
        ans_k = ns.cumulative_prod(ns.where(zero_k, ns.ones_like(x), x), axis=ax)
        out = ns.where(zero_k, _rev_cumsum(ns, g * cj(ns, ans_k), ax), out)
    return ns.astype(out, x.dtype) if out.dtype != x.dtype else out


defvjp("sum", _sum)
defvjp("mean", _mean)
defvjp("max", _extremum)
defvjp("min", _extremum)
defvjp("var", _var)
defvjp("std", _std)
defvjp("prod", _prod)
defvjp("cumulative_sum", _cumsum)
defvjp("cumulative_prod", _cumprod)
