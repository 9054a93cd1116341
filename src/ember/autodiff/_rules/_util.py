"""Helpers shared by rules: reduce a broadcast cotangent back to an input's shape,
and conjugate where an input is complex (PyTorch's convention, see ``elementwise``)."""

from __future__ import annotations

import math

from ...kernels import leading_rows, mean_last, shapes_fit, sum_last, sum_leading
from .._tensor import Tensor, raw_value


def is_complex(ns, x) -> bool:
    """Whether ``x`` (an array, Tensor or Python scalar) is complex.

    Rules only ever get namespaces ember built (a wrapper or its raw twin),
    which carry the set of their complex dtypes as ``_complex``.
    """
    c = x.__class__
    if c is float or c is int or c is bool:
        return False
    if c is complex:
        return True
    return x.dtype in ns._complex


def abs_slope(ns, x):
    """d|x|/dx in the PyTorch convention: ``sign(x)`` for real ``x``, ``x / |x|`` for complex
    (0 at 0), written with differentiable ops so that second derivatives see how the
    direction of a complex value changes (``sign`` has no rule: a constant to any trace)."""
    if not is_complex(ns, x):
        return ns.sign(x)
    a = ns.abs(x)
    zero = a == 0
    return ns.where(zero, ns.zeros_like(x), x / ns.where(zero, ns.ones_like(a), a))


def cj(ns, d):
    """``conj(d)`` if ``d`` is complex, else ``d`` itself (no array op for real dtypes)."""
    c = d.__class__
    if c is float or c is int:
        return d
    if c is complex:
        return d.conjugate()
    return ns.conj(d) if is_complex(ns, d) else d


def fit(ns, g, x):
    """Sum ``g`` over the axes broadcasting added to ``x`` and cast to ``x``'s dtype.

    Python scalars never receive a gradient, so ``x`` is always an array here.
    A complex ``g`` for a real ``x`` keeps its real part (the gradient of a
    real input under PyTorch's convention).
    """
    shape = x.shape
    gshape = g.shape
    if gshape != shape:
        shape = tuple(shape)
        gshape = tuple(gshape)
        lead = len(gshape) - len(shape)
        if lead < 0:  # x had leading 1s that the op dropped (e.g. a value written by setitem)
            return fit(ns, ns.reshape(g, (1,) * -lead + gshape), x)
        if lead and gshape[lead:] == shape:  # only leading axes were added (a bias)
            g = reduce_leading(ns, g, lead)
        else:
            ones = tuple(lead + i for i, s in enumerate(shape) if s == 1 and gshape[lead + i] != 1)
            if ones:
                g = ns.sum(g, axis=tuple(range(lead)) + ones, keepdims=True)
                if lead or not shapes_fit(tuple(g.shape), shape):  # (none at unknown sizes)
                    g = ns.reshape(g, shape)
            elif lead:  # leading axes only, but sizes a backend reports unknown (dask: NaN)
                g = ns.sum(g, axis=tuple(range(lead)))
            elif not shapes_fit(gshape, shape):
                g = ns.reshape(g, shape)
    gd = g.dtype
    if gd is not x.dtype and gd != x.dtype:  # builtin dtypes are singletons: `is` decides
        if is_complex(ns, g) and not is_complex(ns, x):
            g = ns.real(g)
        g = ns.astype(g, x.dtype)
    return g


def select(ns, c, g):
    """The cotangent ``g`` where ``c`` holds and exactly 0 elsewhere, even where g is inf/NaN.

    Why not plain ``where``: on an unpredictable mask (a ReLU's) NumPy's
    ``where`` branches per element and runs about 15x slower than a product.
    ``g * c`` is the same value wherever ``g`` is finite (up to the sign of a
    zero), so where a check is cheap (``ns._cheap_any``: eager, host memory)
    and ``g`` is all finite the product is used; otherwise ``where``.
    """
    if products_exact(ns, g):
        return mask_product(ns, g, c)
    if _decided_when_run(ns):
        return ns._dispatch.call("_select", run_time_kernel(ns._dispatch, "_select", _select_kernel), (c, g), {})
    return ns.where(c, g, ns.zeros_like(g))


def _decided_when_run(ns) -> bool:
    """Whether the product-or-``where`` choice must be left to the op itself: a backend whose
    checks are cheap, while jit stages or vmap batches (they turn the namespace's
    ``_cheap_any`` off: the values seen while tracing are not the ones the op will run on)."""
    d = getattr(ns, "_dispatch", None)
    return d is not None and not ns._cheap_any and d.caps.cheap_checks


_KERNELS: dict = {}  # (dispatcher, name) -> a backend function made by run_time_kernel

#: the names of the run-time kernels rules stage (and of jit's fused elementwise calls,
#: ``_fused``); each result is a new buffer (jit's buffer planning may write into it), and no
#: primitive takes one of these names as its key
RUN_TIME_KERNELS = frozenset({"_select", "_select_summed", "_ties", "_reduce_last", "_reduce_leading",
                              "_neg_logistic", "_fused"})


def run_time_kernel(d, name: str, make):
    """Backend function ``name`` of dispatcher ``d``, made once by ``make(raw_ns)``: a rule's
    step as one function that picks its method on the values it runs on, so a jitted graph
    replays the fast method on every call where it is exact (``_select``, ``_ties``)."""
    k = _KERNELS.get((d, name))
    if k is None:
        assert name in RUN_TIME_KERNELS, name
        k = _KERNELS[d, name] = make(d.raw_ns)
    return k


def _reduce_last_kernel(R):
    def k(x, axis, keepdims, mean):
        return (mean_last if mean else sum_last)(R, x, axis, keepdims)

    return k


def reduce_last(ns, x, axis, keepdims: bool = False, mean: bool = False):
    """``kernels.sum_last`` (``mean_last`` where ``mean``) in a rule: while jit stages, one op
    that picks the product with ones or the reduction on the array it runs on (a staged
    value has no memory layout to read yet)."""
    if staged_only(ns, x):
        return ns._dispatch.call("_reduce_last", run_time_kernel(ns._dispatch, "_reduce_last", _reduce_last_kernel),
                                 (x,), {"axis": axis, "keepdims": keepdims, "mean": mean})
    return (mean_last if mean else sum_last)(ns, x, axis, keepdims)


def _reduce_leading_kernel(R):
    def k(x, lead):
        return sum_leading(R, x, lead)

    return k


def reduce_leading(ns, x, lead: int):
    """``kernels.sum_leading`` (the sum over ``x``'s first ``lead`` axes) in a rule: while jit
    stages, one op that picks the product with ones or the reduction on the array it runs on,
    as :func:`reduce_last` does (where the shape alone allows a product)."""
    if leading_rows(x, lead) and staged_only(ns, x):
        return ns._dispatch.call("_reduce_leading",
                                 run_time_kernel(ns._dispatch, "_reduce_leading", _reduce_leading_kernel),
                                 (x,), {"lead": lead})
    return sum_leading(ns, x, lead)


def _select_kernel(R):
    """``select`` on backend arrays: the product where a finite sum shows it exact (every
    term finite, see ``select_summed``) or, the sum having overflowed, ``g`` is all finite;
    else ``where``: the choices eager code makes."""
    def k(c, g):
        p = mask_product(R, g, c)
        if math.isfinite(float(R.sum(p))) or bool(R.all(R.isfinite(g))):  # (a sum that overflowed)
            return p
        return R.where(c, g, R.zeros_like(g))

    return k


def _select_summed_kernel(R):
    """``select_summed`` on backend arrays: ``(c, g, axis) -> (p, sum(p, axis))``, the
    product's exactness read off the sum it returns."""
    def k(c, g, axis):
        p = mask_product(R, g, c)
        total = R.sum(p, axis=axis)
        if math.isfinite(float(R.sum(total))) or bool(R.all(R.isfinite(g))):  # (as eagerly)
            return p, total
        p = R.where(c, g, R.zeros_like(g))
        return p, R.sum(p, axis=axis)

    return k


def staged_only(ns, *xs) -> bool:
    """Whether the Tensors among ``xs`` are traced by jit's staging trace alone (no tape above
    it differentiates them, no vmap batches them), at least one of them, while jit stages
    on a backend with cheap checks: an op without a rule that decides on the values it runs
    on (``_select``) may then be staged."""
    if not _decided_when_run(ns):
        return False
    d = ns._dispatch
    staged = False
    for x in xs:
        if not isinstance(x, Tensor):
            continue
        n = x._node
        if x.__class__ is not d.T or n is None or not n.trace.stages:
            return False
        staged = True
    return staged


def select_summed(ns, c, g, axis):
    """``select(ns, c, g)`` and its sum along ``axis``, for a caller that needs both (the
    ReLU-masked cotangent of ``nn.linear`` and its bias gradient).

    The product's exactness is read off the sum instead of checking all of
    ``g`` first: a sum is finite only if every term is, so a finite sum means
    no inf or NaN of ``g`` met a False of ``c`` (which would make a NaN where
    ``where`` gives 0). That saves two passes over ``g``; a sum that is not
    finite (an inf or NaN cotangent, or overflow) takes ``where``: slower,
    never wrong.
    """
    if ns._cheap_any:
        product = getattr(ns, "_mask_product", None)  # (_mask_product, inline: a ReLU layer's step)
        p = product(g, c) if product is not None else g * ns.astype(c, g.dtype)
        total = ns.sum(p, axis=axis)
        # finite sum of the sums: every term finite (one reduction and a scalar test instead of
        # isfinite and all; an overflow to inf takes ``where``, as an inf would)
        # (read through every trace level: the test only picks between two equal results)
        s = ns.sum(total)
        if math.isfinite(raw_value(s) if isinstance(s, Tensor) else s):
            return p, total
    if staged_only(ns, c, g):  # (jit: one staged op)
        p, total = ns._dispatch.call(
            "_select_summed", run_time_kernel(ns._dispatch, "_select_summed", _select_summed_kernel), (c, g),
            {"axis": axis})
        return p, total
    p = select(ns, c, g)
    return p, ns.sum(p, axis=axis)


def mask_product(ns, g, c):
    """``g * c`` for a bool mask ``c`` (NumPy multiplies by the mask as it is, no cast first)."""
    product = getattr(ns, "_mask_product", None)
    return product(g, c) if product is not None else g * ns.astype(c, g.dtype)


def products_exact(ns, g) -> bool:
    """Whether multiplying ``g`` by a 0/1 mask equals selecting it, and is worth checking:
    ``g`` is all finite (so no 0 * inf = NaN) on a backend where the check is cheap."""
    return ns._cheap_any and bool(ns.all(ns.isfinite(g)))


def norm_axes(axis, ndim):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted(a % ndim if ndim else a for a in axis))


def expand_reduced(ns, g, x, axis, keepdims):
    """Cotangent of a reduction, reshaped to broadcast against ``x``.

    A 0-d cotangent (a full reduction) broadcasts against anything as it is.
    """
    if not keepdims and x.ndim and g.ndim:
        axes = norm_axes(axis, x.ndim)
        if not known(x.shape):  # sizes the backend computes later cannot reshape: new axes
            return g[tuple(None if i in axes else slice(None) for i in range(x.ndim))]
        shape = list(x.shape)
        for a in axes:
            shape[a] = 1
        g = ns.reshape(g, tuple(shape))
    return g


def drop_first(ns, x, axis):
    """``x`` without its first element along ``axis`` (>= 0): a slice, or where the backend
    knows no size there (Dask after a boolean mask) the raw namespace's ``_drop_first``."""
    if x.shape[axis].__class__ is not int:
        drop = getattr(ns, "_drop_first", None)
        if drop is not None:
            return drop(x, axis)
    return x[(slice(None),) * axis + (slice(1, None), ...)]


def known(shape) -> bool:
    """Whether every size in ``shape`` is known (Dask reports one it computes later as NaN)."""
    return all(n.__class__ is int for n in shape)


def as_rows(ns, a):
    """``a`` (N-d, N > 2) as a matrix of its rows, ``(prod(leading axes), last)``, where that
    makes one product of a stacked one, else None.

    Why: NumPy runs a stacked matmul as one GEMM per matrix, and a product
    over all rows at once takes 0.7x the time for an input of shape
    ``(16, 64, 128)``. Only on eager host backends (``ns._eager_host``, also
    while jit stages or vmap batches for one) and for known sizes; a reshape is
    a view where ``a`` is contiguous.
    """
    shape = a.shape
    if ns._eager_host and known(shape):
        return ns.reshape(a, (math.prod(shape[:-1]), shape[-1]))  # (explicit: -1 is ambiguous at size 0)
    return None


def rows(shape, axis):
    """How many rows (positions of every axis but ``axis``, a valid non-negative axis) a
    shape has, or None where a size is unknown (the cross-entropy forward's mean; its VJP
    uses :func:`count`, which also counts unknown sizes lazily)."""
    n = 1
    for i, size in enumerate(shape):
        if i != axis:
            if size.__class__ is not int:
                return None
            n *= size
    return n


def count(ns, x, axis):
    """How many elements of ``x`` a reduction over ``axis`` takes into each result: an int,
    or, where sizes are unknown, a lazy array of the result's shape with kept dims (the
    backend counts them when it computes, as it does for the forward's mean)."""
    axes = norm_axes(axis, x.ndim)
    sizes = [x.shape[a] for a in axes]
    if known(sizes):
        return math.prod(sizes)
    return ns.sum(ns.ones_like(x), axis=axes, keepdims=True)


def broadcast_like(ns, g, x):
    """``g`` broadcast to ``x``'s shape; by a product with ones where sizes are unknown."""
    return ns.broadcast_to(g, x.shape) if known(x.shape) else g * ns.ones_like(x)
