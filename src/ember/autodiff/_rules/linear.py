"""VJPs of the main namespace's linear algebra (compute-bound).

Complex inputs follow PyTorch's convention (see :mod:`.elementwise`): the
cotangent of ``a`` in ``a @ b`` is ``g @ b^H``. ``vecdot`` conjugates its
first argument (as the standard says), so its first cotangent is
``conj(g) * x2``.
"""

from __future__ import annotations

from ._base import COMPUTE, defvjp
from ._util import cj, fit


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


defvjp("matmul", _matmul_a, _matmul_b, bound=COMPUTE)
defvjp("tensordot", _tensordot_a, _tensordot_b, bound=COMPUTE)
defvjp("vecdot", _vecdot_1, _vecdot_2, bound=COMPUTE)
defvjp("linalg.matmul", _matmul_a, _matmul_b, bound=COMPUTE)
defvjp("linalg.tensordot", _tensordot_a, _tensordot_b, bound=COMPUTE)
defvjp("linalg.vecdot", _vecdot_1, _vecdot_2, bound=COMPUTE)
defvjp("linalg.matrix_transpose", lambda ns, g, ans, x: ns.matrix_transpose(g))
