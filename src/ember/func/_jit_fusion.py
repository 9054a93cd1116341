"""jit's fusion pass: graphs of small elementwise ops become one call of the backend's fuser.

Runs after dead-code elimination and before buffer planning. An op is
*fusable* when its backend has a fuser (``ember.backend.fuser``) that compiles
its function on its dtypes, it has no keywords, and its result is small enough
(``Fuser.max_elements``: above that the backend's own vector loops win).

A fusable op whose result something else reads (an output, a matmul, a
reduction, an op of another backend) is a *root*; every other fusable op
belongs to the regions of the roots that read it, directly or through other
ops of those regions, and becomes an instruction of each one's fused call.
An op that several regions read is recomputed in each (the forward values of
``jit(value_and_grad(f))`` feed the value and the gradient) while the work
so recomputed along a path stays within :data:`RECOMPUTE_WORK`; past that it
becomes a root of its own (computed once, read as an input by all), as does
one whose regions' results are larger than its function is worth fusing at.
An op kept for a region that stays unfused still runs as it was. A region of
at least :data:`MIN_OPS` ops
becomes one ``_fused`` op (a fused call's fixed cost is about two NumPy
calls'); a smaller one, or one the fuser cannot compile (too many inputs or
values alive at once), keeps its ops as they were.
"""

from __future__ import annotations

import math

from .. import backend as _backend
from ..autodiff._staging import Graph, Op, Ref, _collect

__all__ = ["fuse_elementwise", "FUSED", "MIN_OPS", "RECOMPUTE_WORK"]

FUSED = "_fused"  # the op's name (one of the rules' run-time kernel names: no primitive's key)
MIN_OPS = 3  # the fewest ops a fused call replaces (benchmarks/fusion.py: two cost about one call)
#: the most work (elements of the cheapest function; a costlier one counts as many elements as
#: its size limit is smaller) that recomputing values in other regions may add along one path:
#: about what a fused call's fixed cost is worth (benchmarks/fusion.py)
RECOMPUTE_WORK = 4096


def _dtype(v) -> str:
    return str(v.dtype)


def _fusable(g: Graph, op: Op, fusers: dict):
    """``(fuser, real dtype)`` when ``op``'s backend fuses it here, else None; the real dtype
    is the one its operands compute in (``"bool"`` for logical functions)."""
    if op.multi or op.params or len(op.outs) != 1 or op.outs[0] is None:
        return None
    o = op.outs[0]
    d = g.disp[o]
    if d is None:
        return None
    fz = fusers.get(d)
    if fz is None:
        fz = fusers[d] = _backend.fuser(d.xp) or False
    kind = fz and fz.signatures.get(op.name)
    if not kind:
        return None
    v = g.values[o]
    shape = v.shape
    if not shape or not all(n.__class__ is int for n in shape) or not 0 < math.prod(shape) <= fz.max_elements[op.name]:
        return None
    real = None
    for i, a in enumerate(op.args):
        boolean = kind == "logic" or (kind == "where" and i == 0)
        if a.__class__ is Ref:
            if g.disp[a.slot] is not d:
                return None
            ad = _dtype(g.values[a.slot])
        elif hasattr(a, "shape") and hasattr(a, "dtype"):
            ad = _dtype(a)
        else:  # (a Python number: the operands' dtype, as the standard's scalars are)
            if a.__class__ not in ((bool,) if boolean else (int, float)):
                return None
            continue
        if boolean:
            if ad != "bool":
                return None
        elif real is None:
            real = ad
        elif ad != real:
            return None
    out = _dtype(v)
    if kind in ("float", "where"):
        real = real or out
        if out != real or real not in fz.dtypes:
            return None
    elif out != "bool" or (kind == "compare" and real not in fz.dtypes):
        return None
    return fz, "bool" if kind == "logic" else real


def _regions(g: Graph, nodes: dict) -> dict:
    """slot of each fusable op -> the root slots of the regions it belongs to (see the module
    docstring): one, or several for an op recomputed in each region that reads it."""
    readers: dict = {}
    for op in g.ops:
        for r in op.refs():
            readers.setdefault(r, []).append(op)
    outs: list = []
    _collect(g.outputs, outs)
    outs = set(outs)
    region: dict = {}
    work: dict = {}  # slot -> the work recomputed in other regions, on the path from its roots
    for op in reversed(g.ops):  # (each op's readers come after it)
        s = op.outs[0] if op.outs else None
        n = nodes.get(s)
        if n is None:
            continue
        roots: set | None = set()
        dup = 0
        for r in readers.get(s, ()):
            rs = r.outs[0]
            rn = nodes.get(rs)  # (a fusable op has one result; a multi-result op is none)
            if rn is None or rn[0] is not n[0]:
                roots = None
                break
            roots.update(region[rs])
            dup = max(dup, work[rs])
        region[s], work[s] = (s,), 0
        if s in outs or not roots:
            continue
        fz = n[0]
        if any(math.prod(g.values[root].shape) > fz.max_elements[op.name] for root in roots):
            continue
        if len(roots) > 1:  # recomputed in each region while the copies' work stays small
            cheapest = max(fz.max_elements.values())
            dup += (len(roots) - 1) * math.prod(g.values[s].shape) * cheapest // fz.max_elements[op.name]
            if dup > RECOMPUTE_WORK:
                continue
            work[s] = dup
        region[s] = tuple(roots)
    return region


def _program(g: Graph, members: list, nodes: dict):
    """The fuser's program of a region's ops (in graph order, the root last), its inputs
    and their dtypes."""
    index = {op.outs[0]: i for i, op in enumerate(members)}
    inputs: list = []
    dtypes: list = []
    seen: dict = {}
    program = []
    for op in members:
        args = []
        for a in op.args:
            if a.__class__ is Ref and a.slot in index:
                args.append(("node", index[a.slot]))
            elif a.__class__ is Ref or hasattr(a, "shape"):
                key = ("r", a.slot) if a.__class__ is Ref else ("c", id(a))
                k = seen.get(key)
                if k is None:
                    k = seen[key] = len(inputs)
                    inputs.append(a)
                    dtypes.append(_dtype(g.values[a.slot] if a.__class__ is Ref else a))
                args.append(("in", k))
            else:
                args.append(("const", a))
        program.append((op.name, nodes[op.outs[0]][1], args))
    return program, inputs, dtypes


def _show(program: list) -> str:
    """A fused program for ``jit(f).lower()``: ``t0 = sin(in0); t1 = multiply(t0, 0.9)``."""
    def arg(a):
        return f"in{a[1]}" if a[0] == "in" else f"t{a[1]}" if a[0] == "node" else repr(a[1])

    return "; ".join(f"t{i} = {name}({', '.join(arg(a) for a in args)})"
                     for i, (name, _, args) in enumerate(program))


def fuse_elementwise(g: Graph) -> None:
    """Replace each region of fusable ops by one ``_fused`` op (see the module docstring)."""
    fusers: dict = {}
    nodes = {}
    for op in g.ops:
        n = _fusable(g, op, fusers)
        if n is not None:
            nodes[op.outs[0]] = n
    if not nodes:
        return
    region = _regions(g, nodes)
    members: dict = {}
    for op in g.ops:
        for root in region.get(op.outs[0] if op.outs else None, ()):
            members.setdefault(root, []).append(op)
    fused: dict = {}  # root slot -> its region's fused op
    for root, ops in members.items():
        if len(ops) < MIN_OPS:
            continue
        program, inputs, dtypes = _program(g, ops, nodes)
        fz = nodes[root][0]
        if len(inputs) > fz.max_inputs:
            continue
        try:
            fn = fz.compile(program, dtypes)
        except ValueError:
            continue
        op = Op(FUSED, fn, tuple(inputs), {}, [root])
        op.note = _show(program)
        fused[root] = op
    if fused:
        ops = []
        for op in g.ops:
            s = op.outs[0] if op.outs else None
            if s in fused:  # (a root: the last op of its region)
                ops.append(fused[s])
            elif s not in region or not all(root in fused for root in region[s]):
                ops.append(op)  # (an op of a region left unfused still computes its value)
        g.ops = ops
