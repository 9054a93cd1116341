"""VJPs of the main namespace's linear algebra (compute-bound), and of ``_linear``.

Complex inputs follow PyTorch's convention (see :mod:`.elementwise`): the
cotangent of ``a`` in ``a @ b`` is ``g @ b^H``. ``vecdot`` conjugates its
first argument (as the standard says), so its first cotangent is
``conj(g) * x2``.
"""

from __future__ import annotations

import math

from ._base import defvjp
from .._tensor import Tensor, raw_value
from ._util import as_rows, cj, fit, reduce_leading, select, select_summed


def _matmul_a(ns, g, ans, a, b):
    if b.dtype in ns._complex:
        b = ns.conj(b)
    if a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype == g.dtype:  # common: no fit needed
        return ns.matmul(g, ns.matrix_transpose(b))
    if a.ndim == 1 and b.ndim == 1:
        return g * b
    if a.ndim == 1:
        return fit(ns, ns.matmul(b, g[..., None])[..., 0], a)
    if b.ndim == 1:
        return fit(ns, g[..., None] * b, a)
    if b.ndim == 2 and a.dtype == b.dtype == g.dtype:  # stacked a, a matrix b: one product
        g2 = as_rows(ns, g)
        if g2 is not None:
            return ns.reshape(ns.matmul(g2, ns.matrix_transpose(b)), a.shape)
    return fit(ns, ns.matmul(g, ns.matrix_transpose(b)), a)


def _matmul_b(ns, g, ans, a, b):
    if a.dtype in ns._complex:
        a = ns.conj(a)
    if a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype == g.dtype:  # common: no fit needed
        return ns.matmul(ns.matrix_transpose(a), g)
    if a.ndim == 1 and b.ndim == 1:
        return g * a
    if a.ndim == 1:
        return fit(ns, a[:, None] * g[..., None, :], b)
    if b.ndim == 1:
        return fit(ns, ns.matmul(ns.matrix_transpose(a), g[..., None])[..., 0], b)
    if b.ndim == 2 and a.dtype == b.dtype == g.dtype:  # stacked a, a matrix b: one product,
        a2 = as_rows(ns, a)  # summed over the rows (not per matrix, then over the stack)
        if a2 is not None:
            return ns.matmul(ns.matrix_transpose(a2), as_rows(ns, g))
    return fit(ns, ns.matmul(ns.matrix_transpose(a), g), b)


def _tensordot_axes(a, b, axes):
    if isinstance(axes, int):
        return list(range(a.ndim - axes, a.ndim)), list(range(axes))
    xa, xb = axes
    return [i % a.ndim for i in xa], [i % b.ndim for i in xb]


def _tensordot_grad(ns, g, x, other, ax_x, ax_o, x_first):
    other = cj(ns, other)
    free_x = [i for i in range(x.ndim) if i not in ax_x]
    free_o = [i for i in range(other.ndim) if i not in ax_o]
    nfx, nfo = len(free_x), len(free_o)
    if x_first:
        g_axes = list(range(nfx, nfx + nfo))
        res = ns.tensordot(g, other, axes=(g_axes, free_o))
    else:
        g_axes = list(range(nfo))
        res = ns.tensordot(g, other, axes=(g_axes, free_o))
        # g's remaining axes are x's free axes (they come after other's in the output)
    # res axes: x's free axes, then other's contracted axes in increasing order
    contracted_sorted = sorted(ax_o)
    src_of = free_x + [ax_x[ax_o.index(c)] for c in contracted_sorted]
    perm = [src_of.index(i) for i in range(x.ndim)]
    return fit(ns, ns.permute_dims(res, tuple(perm)), x)


def _tensordot_a(ns, g, ans, a, b, *, axes=2):
    aa, ab = _tensordot_axes(a, b, axes)
    return _tensordot_grad(ns, g, a, b, aa, ab, True)


def _tensordot_b(ns, g, ans, a, b, *, axes=2):
    aa, ab = _tensordot_axes(a, b, axes)
    return _tensordot_grad(ns, g, b, a, ab, aa, False)


def _vecdot_1(ns, g, ans, x1, x2, *, axis=-1):
    return fit(ns, ns.expand_dims(cj(ns, g), axis=axis) * x2, x1)


def _vecdot_2(ns, g, ans, x1, x2, *, axis=-1):
    return fit(ns, ns.expand_dims(g, axis=axis) * x1, x2)


defvjp("matmul", _matmul_a, _matmul_b)
defvjp("tensordot", _tensordot_a, _tensordot_b)
defvjp("vecdot", _vecdot_1, _vecdot_2)
defvjp("linalg.matmul", _matmul_a, _matmul_b)
defvjp("linalg.tensordot", _tensordot_a, _tensordot_b)
defvjp("linalg.vecdot", _vecdot_1, _vecdot_2)
defvjp("linalg.matrix_transpose", lambda ns, g, ans, x: ns.matrix_transpose(g))


def linear_vjp(ns, g, ans, args, params, parents):
    """``y = act(x @ w^T + b)``, ``w`` of shape ``(out, in)``, ``b`` of shape ``(out,)`` or None:
    ``gx = g' @ w``, ``gw = g'^T @ x``, ``gb = sum(g')`` (leading axes of x flattened), where
    ``g'`` is ``g`` masked by the ReLU (``relu=True``); complex inputs conjugate as matmul's.

    ``gw`` takes ``w``'s memory layout: a column-major weight (``W.T`` of an
    ``(in, out)`` row-major array, NumPy code's usual layout) gets
    ``(x^T @ g')^T``, so an update written into the gradient's buffer keeps
    the layout, and the forward's ``x @ w^T`` stays a product of row-major
    operands (OpenBLAS float32: 0.93x the time on the MLP's input layer,
    ``benchmarks/gemm_layout.py``)."""
    x, w, b = args
    xshape = None
    if x.ndim > 2:  # the leading axes as rows: one product per gradient (see as_rows)
        x2 = as_rows(ns, x)
        if x2 is not None:
            xshape, x, g = x.shape, x2, as_rows(ns, g)
            if params.get("relu"):
                ans = as_rows(ns, ans)
    dt = g.dtype  # one real dtype throughout (the common case): no conjugation or casts
    plain = x.dtype == dt and w.dtype == dt and dt not in ns._complex
    # the common bias gradient: the leading axis summed (fit also casts; not needed when plain)
    sum_bias = parents[2] is not None and plain and g.ndim == 2 and b.dtype == dt
    gb = None
    if params.get("relu"):  # as _relu's VJP: 0 at the kink, exactly 0 where off
        if sum_bias:  # the mask's exactness read off the bias gradient (see select_summed)
            g, gb = select_summed(ns, ans > 0, g, 0)
        else:
            g = select(ns, ans > 0, g)
    gx = gw = None
    if parents[0] is not None:
        gx = ns.matmul(g, w if plain else cj(ns, w))
        if not plain:
            gx = fit(ns, gx, x)
    if parents[1] is not None:
        xc = x if plain else cj(ns, x)
        if x.ndim == 1:
            gw = g[:, None] * xc
        else:
            g2 = g
            if x.ndim > 2:  # rows: the leading axes flattened (explicitly: -1 is ambiguous at size 0)
                rows = math.prod(x.shape[:-1])
                g2 = ns.reshape(g, (rows, g.shape[-1]))
                xc = ns.reshape(xc, (rows, x.shape[-1]))
            # (backends with flags: NumPy, CuPy; read through the levels of a traced w: the
            # layout decides only the order of the product, never its value)
            flags = getattr(raw_value(w) if isinstance(w, Tensor) else w, "flags", None)
            if flags is not None and flags.f_contiguous and not flags.c_contiguous:
                # w column-major: the gradient in the weight's layout (see the docstring)
                gw = ns.matrix_transpose(ns.matmul(ns.matrix_transpose(xc), g2))
            else:
                gw = ns.matmul(ns.matrix_transpose(g2), xc)
        if not plain:
            gw = fit(ns, gw, w)
    if parents[2] is not None and gb is None:
        gb = reduce_leading(ns, g, 1) if sum_bias else fit(ns, g, b)
    if xshape is not None and gx is not None:
        gx = ns.reshape(gx, xshape)
    return gx, gw, gb


def linear_jvp(ns, tangents, ans, x, w, b, *, relu=False):
    """``tz = tx @ w^T + x @ tw^T + tb``, masked by the ReLU (``relu=True``) as its VJP is."""
    tx, tw, tb = tangents
    tz = None
    if tx is not None:
        tz = ns.matmul(tx, ns.matrix_transpose(w))
    if tw is not None:
        part = ns.matmul(x, ns.matrix_transpose(tw))
        tz = part if tz is None else tz + part
    if tb is not None:
        tz = tb if tz is None else tz + tb
    if tz.shape != ans.shape:
        tz = ns.broadcast_to(tz, ans.shape)
    return select(ns, ans > 0, tz) if relu else tz
