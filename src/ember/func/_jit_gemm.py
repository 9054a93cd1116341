"""jit's matmul-update pass: ``w - s * (a @ b)`` into ``w``'s buffer as one BLAS ``gemm``.

Runs before elementwise fusion and buffer planning (``fuse=True``). A chain

    p = matmul(a, b)            (2-D)
    q = matrix_transpose(p)     (optional; or permute_dims(p, (1, 0)), p.T)
    r = multiply(s, q)          (optional; ``s`` a Python number, traced or not, or 0-d)
    u = subtract(w, r)          (or ``add(w, r)``, ``add(r, w)``)

whose links each feed only the next one, where ``w`` is a buffer of its own
that ``u`` reads last (a donated weight) and no operand of the product may
alias, becomes one op ``_gemm(w, a, b, s)`` writing ``u`` into ``w``'s buffer,
where the product was when nothing reads ``w`` from there on (its operands die
as early as before), else where the update was:
the backend's ``gemm`` with ``beta = 1`` (``ember.backend.gemm``) where the
arrays' layouts allow, else the same ufunc calls as before, into ``w``. That
saves the two passes over the product (scale, update) that an SGD step pays
per weight. A gemm rounds the update once where the ufuncs round twice, so a
result may differ from eager in the last bit, as a fused call's may.
"""

from __future__ import annotations

import math

from .. import backend as _backend
from ..autodiff._ownership import _ufunc
from ..autodiff._staging import Graph, Op, Ref, _collect

__all__ = ["GEMM", "fuse_matmul_updates", "gemm_kernel"]

GEMM = "_gemm"  # the op's name (a run-time kernel's: no primitive's key)
_MATMUL = frozenset(("matmul", "linalg.matmul"))
_TRANSPOSE = frozenset(("matrix_transpose", "linalg.matrix_transpose"))
_SIGN = {"subtract": -1, "add": 1}
_kernels: dict = {}


def gemm_kernel(d):
    """``_gemm(c, a, b, scale, sign=, transposed=, out=None)`` on dispatcher ``d``'s arrays:
    ``c + sign * scale * P`` with ``P = a @ b`` (``P.T`` when ``transposed``; ``scale`` None:
    one), written into ``c`` when ``out`` is ``c``, else into a copy of ``c``. One BLAS call
    where ``ember.backend.gemm`` takes the arrays; else matmul, multiply and the update by
    the backend's ufuncs, the calls eager makes."""
    k = _kernels.get(d)
    if k is not None:
        return k
    gm = _backend.gemm(d.xp)
    matmul, multiply = _ufunc(d, "matmul"), _ufunc(d, "multiply")
    update = {-1: _ufunc(d, "subtract"), 1: _ufunc(d, "add")}
    copy = d.raw_ns.asarray
    accumulate = gm.accumulate if gm is not None else None

    def _gemm(c, a, b, scale, sign, transposed, out=None):
        if out is None:  # (c is not this op's to write)
            c = copy(c, copy=True)
        alpha = sign if scale is None else sign * float(scale)
        # (BLAS skips the product for a zero alpha: 0 * inf and 0 * nan would not be NaN)
        if accumulate is not None and alpha != 0 and math.isfinite(alpha) and accumulate(
                c.T if transposed else c, a, b, alpha):
            return c
        p = matmul(a, b)
        if transposed:
            p = p.T
        if scale is not None:
            multiply(p, scale, out=p)
        return update[sign](c, p, out=c)

    _kernels[d] = _gemm
    return _gemm


def _readers(g: Graph) -> dict:
    """slot -> how many ops read it, outputs counting as readers too."""
    n: dict = {}
    for op in g.ops:
        for s in op.refs():
            n[s] = n.get(s, 0) + 1
    outs: list = []
    _collect(g.outputs, outs)
    for s in outs:
        n[s] = n.get(s, 0) + 2
    return n


def _scale(g: Graph, a, dtype):
    """``a`` as a multiply's scale: a Python number, traced or not, or a 0-d array of
    ``dtype`` (a traced number made an array); else None."""
    if a.__class__ is Ref:
        if g.disp[a.slot] is None:
            return a
        v = g.values[a.slot]
    elif a.__class__ in (int, float):
        return a
    else:
        v = a
    return a if getattr(v, "shape", None) == () and v.dtype == dtype else None


def _match(g: Graph, op: Op, readers: dict, bufs):
    """``(w, a, b, scale, sign, transposed, dropped ops)`` when ``op`` ends such a chain;
    ``bufs``: the graph's buffer analysis (``_jit_passes._Buffers``)."""
    sign = _SIGN.get(op.name)
    if sign is None or op.multi or op.params or len(op.args) != 2:
        return None
    u = g.values[op.outs[0]]
    i = bufs.made_at[op.outs[0]]
    for k in ((0, 1) if sign == 1 else (0,)):
        w, r = op.args[k], op.args[1 - k]
        if w.__class__ is not Ref or r.__class__ is not Ref or w.slot == r.slot:
            continue
        if g.values[w.slot].shape != u.shape or g.values[w.slot].dtype != u.dtype:
            continue
        dropped, scale, transposed, s = [], None, False, r.slot
        for kind in ("multiply", "transpose", "matmul"):
            if bufs.made_at[s] < 0 or readers.get(s) != 1:
                break
            link = g.ops[bufs.made_at[s]]
            if link.multi or link.params or g.values[s].dtype != u.dtype:
                break
            if kind == "multiply" and link.name == "multiply" and len(link.args) == 2:
                j = 0 if _scale(g, link.args[0], u.dtype) is not None else 1
                scale, q = _scale(g, link.args[j], u.dtype), link.args[1 - j]
                if scale is None or q.__class__ is not Ref:
                    break
                dropped.append(link)
                s = q.slot
            elif kind == "transpose" and (link.name in _TRANSPOSE and len(link.args) == 1 or (
                    link.name == "permute_dims" and len(link.args) == 2 and link.args[1].__class__ in (tuple, list)
                    and tuple(link.args[1]) == (1, 0))):
                transposed = True
                dropped.append(link)
                s = link.args[0].slot if link.args[0].__class__ is Ref else None
            elif kind == "matmul" and link.name in _MATMUL and len(link.args) == 2:
                a, b = link.args
                if len(g.values[s].shape) != 2 or any(
                        x.__class__ is Ref and (len(g.values[x.slot].shape) != 2 or bufs.aliases(x.slot, w.slot))
                        for x in (a, b)):
                    break
                dropped.append(link)
                if bufs.dies_at(w.slot, i):
                    return w, a, b, scale, sign, transposed, dropped
                break
            if s is None:
                break
    return None


def _note(w, a, b, scale, sign, transposed) -> str:
    def name(x):
        return f"v{x.slot}" if x.__class__ is Ref else "const"

    s = "" if scale is None else f"{name(scale) if scale.__class__ is Ref else repr(scale)} * "
    return f"v{w.slot} {'-' if sign < 0 else '+'} {s}({name(a)} @ {name(b)}){'.T' if transposed else ''}"


def fuse_matmul_updates(g: Graph, buffers) -> None:
    """Replace each such chain by one ``_gemm`` op (see the module docstring) where the
    backend has a gemm; ``buffers(g)``: the graph's buffer analysis (``_jit_passes._Buffers``),
    redone after each replacement (a product's operands are then read later)."""
    while True:
        if not any(op.name in _SIGN for op in g.ops):
            return
        readers, bufs, found = _readers(g), buffers(g), None
        for op in g.ops:
            if op.name not in _SIGN or op.outs[0] is None or g.disp[op.outs[0]] is None:
                continue
            found = _match(g, op, readers, bufs)
            # (the backend is probed only for a chain found: importing and probing costs)
            if found is not None:
                gm = _backend.gemm(g.disp[op.outs[0]].xp)
                u, a = g.values[op.outs[0]], found[1]
                inner = (g.values[a.slot] if a.__class__ is Ref else a).shape[1]
                if (gm is not None and str(u.dtype) in gm.dtypes and math.prod(u.shape) >= gm.min_elements
                        and inner <= gm.max_inner):
                    break
            found = None
        if found is None:
            return
        w, a, b, scale, sign, transposed, dropped = found
        new = Op(GEMM, gemm_kernel(g.disp[op.outs[0]]), (w, a, b, scale), {"sign": sign, "transposed": transposed},
                 list(op.outs))
        new.note = _note(w, a, b, scale, sign, transposed)
        # where the product was, if w and the scale exist by then and nothing reads w from there
        # to the update: its operands then die as early as before (kept to the update, large
        # activations would pile up)
        at, upto = bufs.made_at[dropped[-1].outs[0]], bufs.made_at[op.outs[0]]
        gone = {id(x) for x in dropped} | {id(op)}
        early = bufs.made_at[w.slot] < at and (
            scale.__class__ is not Ref or bufs.made_at[scale.slot] < at) and not any(
            bufs.aliases(r, w.slot) for x in g.ops[at + 1:upto] if id(x) not in gone for r in x.refs())
        place = dropped[-1] if early else op
        g.ops = [new if x is place else x for x in g.ops if x is place or id(x) not in gone]
