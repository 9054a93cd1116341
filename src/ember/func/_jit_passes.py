"""Passes over a staged graph (``ember.autodiff._staging.Graph``), in the order jit runs them.

- :func:`fold_constants`: an op none of whose inputs is a graph value becomes
  the constant it computed while staging;
- :func:`simplify`: products with a one (a unit cotangent, a seed array of
  ones) and divisions by one are dropped;
- :func:`eliminate_common`: two calls of one function on the same inputs and
  parameters become one (backend functions are pure);
- :func:`absorb_broadcasts`: a ``broadcast_to`` read only by elementwise ops whose
  other operand has the broadcast shape is dropped (the ops broadcast themselves);
- :func:`eliminate_dead`: ops no output depends on are dropped;
- :func:`~ember.func._jit_gemm.fuse_matmul_updates` (``fuse=True``): a matrix
  product that a dying array accumulates (``w - lr * (x.T @ g)``) becomes one
  BLAS ``gemm`` writing into that array, where the backend has one;
- :func:`~ember.func._jit_fusion.fuse_elementwise` (``fuse=True``): trees of
  small elementwise ops become one call of the backend's fuser;
- :func:`contiguous_operands` (``fuse=True``): a stacked product of small matrices whose right
  operand is a transposed view (attention's ``q @ k^T``) gets that operand as a
  C-contiguous copy, where the backend's functions are NumPy's;
- :func:`plan_buffers`: an elementwise op whose input dies at that op writes
  its result into that input's buffer (``out=``), where the backend's
  capabilities say its ufuncs take ``out=`` and write in place (a fused call:
  into a donated input's buffer only). What ``consume``
  decides at run time from reference counts is decided here from liveness;
- :func:`separate_outputs` (after them): the outputs the replay copies so that
  results alias each other and the inputs only where eager ones did.
"""

from __future__ import annotations

import math

from .. import backend as _backend
from ..autodiff._ownership import _ufunc
from ..autodiff._primitive import FRESH as _FRESH_PRIMITIVES
from ..autodiff._staging import Graph, Op, Ref, _collect
from ._jit_fusion import FUSED, fuse_elementwise
from ._jit_gemm import GEMM, fuse_matmul_updates

__all__ = ["fold_constants", "simplify", "eliminate_common", "absorb_broadcasts", "eliminate_dead",
           "contiguous_operands", "plan_buffers", "run_passes", "separate_outputs"]

#: ops whose result is a new buffer (never a view of an input) besides the ufuncs and the
#: primitives declared ``fresh``
_FRESH = frozenset("""
    matmul tensordot vecdot sum prod mean max min var std cumulative_sum cumulative_prod
    concat stack where argmax argmin linalg.matmul linalg.tensordot linalg.vecdot
    zeros_like ones_like full_like copy
""".split())


#: ops whose result is a writable view of all of its input's buffer (a transposed gradient)
_WRITABLE_VIEWS = frozenset("matrix_transpose permute_dims linalg.matrix_transpose".split())


def _subst(t, m: dict):
    """Template ``t`` with Refs renamed by ``m`` (slot -> Ref or constant)."""
    c = t.__class__
    if c is Ref:
        return m.get(t.slot, t)
    if c is tuple or c is list:
        return c(_subst(a, m) for a in t)
    if c is dict:
        return {k: _subst(a, m) for k, a in t.items()}
    if c is slice:
        return slice(_subst(t.start, m), _subst(t.stop, m), _subst(t.step, m))
    return t


def _has_ref(t) -> bool:
    out: list = []
    _collect(t, out)
    return bool(out)


def _rename(op, m: dict) -> None:
    """Point ``op``'s references at the slots ``m`` maps them to (earlier ops merged or folded)."""
    op.args = _subst(op.args, m)
    if op.dynamic:
        op.params = _subst(op.params, m)


def _rewrite(g: Graph, replaced) -> None:
    """One forward pass over ``g``'s ops: each op's references are first renamed by ``m``
    (what earlier ops were replaced by), then ``replaced(op, m)`` either records in ``m``
    what the op's outputs are instead and returns True (the op is dropped), or returns
    False; the outputs are renamed last."""
    m: dict = {}
    ops = []
    for op in g.ops:
        if m:
            _rename(op, m)
        if not replaced(op, m):
            ops.append(op)
    g.ops = ops
    g.outputs = [_subst(o, m) for o in g.outputs]


def fold_constants(g: Graph) -> None:
    """Ops on constants only become their staging values (after renaming, some are)."""
    def replaced(op, m):
        if not _has_ref(op.args) and not (op.dynamic and _has_ref(op.params)):
            for s in op.outs:
                if s is not None:
                    m[s] = g.values[s]
            return True
        op.dynamic = op.dynamic and _has_ref(op.params)
        return False

    _rewrite(g, replaced)


def _is_one(c, d) -> bool:
    """Whether constant ``c`` is a one (a Python number) or an array of ones (a 0-d one, a
    transform's seed ``ones_like``) of up to :data:`_ONES_CHECKED` elements; ``d``: the
    dispatcher whose namespace tests an array."""
    if c.__class__ in (int, float):
        return c == 1
    shape = getattr(c, "shape", None)
    if (shape is None or d is None or not all(n.__class__ is int for n in shape)
            or not 0 < math.prod(shape) <= _ONES_CHECKED):
        return False
    try:
        return bool(d.raw_ns.all(c == 1))
    except Exception:  # (a backend that will not compare on the host, a size it does not know)
        return False


_ONES_CHECKED = 1 << 22  # (read once at compile time; a larger constant is left as it is)


_UNIT_OPS = {"multiply": (0, 1), "divide": (1,)}  # op -> positions where a one changes nothing


def _unit_operand(g: Graph, op, outs: set):
    """The operand ``op`` passes through unchanged (``x`` of ``x * 1``, ``1 * x``, ``x / 1``,
    the one possibly an array of ones, with the result of x's shape and real dtype, not an
    output), or None."""
    at = _UNIT_OPS.get(op.name)
    if at is None or len(op.args) != 2 or op.params or op.multi or op.outs[0] in outs:
        return None
    for i in at:
        one, x = op.args[i], op.args[1 - i]
        if one.__class__ is Ref or x.__class__ is not Ref:
            continue
        v, r, d = g.values[x.slot], g.values[op.outs[0]], g.disp[x.slot]
        if (d is not None and _is_one(one, d) and tuple(v.shape) == tuple(r.shape) and v.dtype == r.dtype
                and d.xp.isdtype(v.dtype, ("real floating", "integral"))):
            return x
    return None


def simplify(g: Graph) -> None:
    """``x * 1``, ``1 * x`` and ``x / 1`` (the one a number or an array of ones) become ``x``
    where the result has x's shape and real dtype and is not an output (exact for every
    real value, signed zeros and NaN included; not for complex ones: ``(a + inf j) * 1`` is
    ``nan + inf j``); a transform's unit cotangent and its seed of ones are such ones."""
    outs: list = []
    _collect(g.outputs, outs)
    outs = set(outs)  # (an output stays its own buffer, as eagerly: never an alias of x)

    def replaced(op, m):
        x = _unit_operand(g, op, outs)
        if x is None:
            return False
        m[op.outs[0]] = x
        return True

    _rewrite(g, replaced)


def _key(t):
    """A hashable key for template ``t`` (constants by identity unless scalars)."""
    c = t.__class__
    if c is Ref:
        return ("r", t.slot)
    if c is float or c is complex:  # (by repr: 0.0 == -0.0, but x * 0.0 and x * -0.0 differ)
        return (c, repr(t))
    if c in (bool, int, str) or t is None:
        return (c, t)
    if c is tuple or c is list:
        return (c, tuple(_key(a) for a in t))
    if c is dict:
        return ("d", tuple((k, _key(a)) for k, a in t.items()))
    if c is slice:
        return ("s", _key(t.start), _key(t.stop), _key(t.step))
    try:
        hash(t)
        return ("h", c, t)
    except TypeError:
        return ("i", id(t))


def eliminate_common(g: Graph) -> None:
    """One op per (function, inputs, parameters)."""
    seen: dict = {}

    def replaced(op, m):
        try:
            k = (id(op.fn), op.name, _key(op.args), _key(op.params))
            hash(k)
        except TypeError:
            return False
        prev = seen.get(k)
        if prev is not None and len(prev.outs) == len(op.outs):
            for a, b in zip(op.outs, prev.outs):
                if a is not None:
                    m[a] = Ref(b)
            return True
        seen[k] = op
        return False

    _rewrite(g, replaced)


#: elementwise functions of two arrays whose result's shape and values are the same whether
#: an operand is broadcast first or by the function itself
_BROADCASTING = frozenset("""
    add subtract multiply divide pow maximum minimum atan2 hypot copysign floor_divide
    remainder logaddexp equal not_equal less less_equal greater greater_equal
    logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor
""".split())


def absorb_broadcasts(g: Graph) -> None:
    """Drop ``b = broadcast_to(x, shape)`` where every reader of ``b`` is one of
    :data:`_BROADCASTING` taking ``b`` once, beside an operand of ``shape`` itself (not
    another broadcast, which could be dropped too: ``meshgrid``'s operands): the
    reader then gets ``x`` and broadcasts it (the gradient of a sum with ``keepdims``
    times the array summed), one call and one view fewer. Not for an output."""
    outs: list = []
    _collect(g.outputs, outs)
    outs = set(outs)
    readers: dict = {}
    broadcasts = set()  # (an operand that is a broadcast too keeps both: they make the shape)
    for op in g.ops:
        for r in op.refs():
            readers.setdefault(r, []).append(op)
        if op.name == "broadcast_to":
            broadcasts.update(op.outs)

    def absorbed(b, shape) -> bool:
        for op in readers.get(b, ()):
            if op.name not in _BROADCASTING or op.params or op.multi or len(op.args) != 2:
                return False
            slots = [a.slot if a.__class__ is Ref else None for a in op.args]
            if slots.count(b) != 1:
                return False
            other = slots[1] if slots[0] == b else slots[0]
            if other is None or other in broadcasts or tuple(getattr(g.values[other], "shape", ())) != shape:
                return False
        return True

    def replaced(op, m):
        if op.name != "broadcast_to" or op.multi or not op.args or op.args[0].__class__ is not Ref:
            return False
        b = op.outs[0]
        if b in outs or not absorbed(b, tuple(g.values[b].shape)):
            return False
        m[b] = op.args[0]
        return True

    _rewrite(g, replaced)


def eliminate_dead(g: Graph) -> None:
    """Drop the ops whose results no output needs."""
    live = set()
    _collect(g.outputs, out := [])
    live.update(out)
    ops = []
    for op in reversed(g.ops):
        if any(s is not None and s in live for s in op.outs):
            ops.append(op)
            live.update(op.refs())
    ops.reverse()
    g.ops = ops


def _writes_out(d) -> bool:
    caps = _backend.capabilities(d.xp)
    return caps.out_param and caps.in_place and not caps.lazy


def _ufunc_of(op: Op, d):
    """The backend ufunc ``op`` calls (its own function, or the one its fix wraps), or None."""
    u = _ufunc(d, op.name)
    if not u or op.multi or op.params:
        return None
    fn = op.fn
    if fn is u or getattr(fn, "plain", None) is u:
        return u
    return None


class _Buffers:
    """Which buffer each slot of ``g`` may alias, and when each buffer is read last.

    ``fresh[b]``: slot b is a buffer of its own that may be written (a fresh result: a
    ufunc's, a matmul's or a reduction's, never a view; or a donated input); ``roots[s]``:
    the fresh buffers slot s may alias (itself when fresh); ``last[b]``: the last op reading
    any slot that may alias buffer b (past the end for an output's); ``made_by[s]`` and
    ``made_at[s]``: the name and index of the op that made slot s (-1: an input);
    ``ufuncs[i]``: the ufunc (or fuser) op i calls where it may write ``out=``, else None.
    """

    def __init__(self, g: Graph, donated: set):
        n = len(g.values)
        self.ufuncs = ufuncs = {}
        self.fresh = fresh = [False] * n
        for s in donated:
            fresh[s] = True
        self.roots = roots = [None] * n
        for s in g.inputs:
            roots[s] = (s,)
        self.made_by = made_by = [None] * n
        self.made_at = made_at = [-1] * n
        for i, op in enumerate(g.ops):
            for s in op.outs:
                if s is not None:
                    made_by[s], made_at[s] = op.name, i
            d = g.disp[op.outs[0]] if op.outs and op.outs[0] is not None else None
            u = _ufunc_of(op, d) if d is not None and _writes_out(d) else None
            if u is None and op.name == FUSED:  # (it writes into a donated input only, see below)
                u = _backend.fuser(d.xp)
            elif u is None and op.name == GEMM:  # (it writes into its first argument only)
                u = op.fn
            ufuncs[i] = u
            declared = op.name in _FRESH or op.name in _FRESH_PRIMITIVES
            is_fresh = (u is not None or declared) and not op.multi
            # a fresh primitive's several results (its residuals among them) are new buffers that
            # may share one another (a layer norm without a scale: y is x_hat), never an argument
            group = tuple(s for s in op.outs if s is not None) if declared and op.multi else None
            for s in op.outs:
                if s is None:
                    continue
                if is_fresh:
                    fresh[s] = True
                    roots[s] = (s,)
                elif group is not None:
                    fresh[s] = True
                    roots[s] = group
                else:
                    rs = set()
                    for r in op.refs():
                        rs.update(roots[r] or ())
                    roots[s] = tuple(rs)
        self.last = last = [-1] * n
        for i, op in enumerate(g.ops):
            for r in op.refs():
                for b in roots[r] or ():
                    last[b] = i
        outs: list = []
        _collect(g.outputs, outs)
        for r in outs:
            for b in roots[r] or ():
                last[b] = len(g.ops) + 1

    def dies_at(self, s: int, i: int) -> bool:
        """Whether slot ``s`` is a buffer of its own that may be written, which op ``i`` reads
        last (no view of it, no output, nothing later reads it)."""
        return self.fresh[s] and self.roots[s] == (s,) and self.last[s] == i

    def aliases(self, s: int, b: int) -> bool:
        """Whether slot ``s`` may alias buffer ``b``."""
        return b in (self.roots[s] or ())


#: the sizes (m * k * n of each matrix) where a stacked product runs faster on a C-contiguous
#: copy of a transposed right operand than on the view (``benchmarks/gemm_layout.py``,
#: ``stacked_nt``): NumPy calls BLAS once per matrix, and OpenBLAS's kernel for a transposed
#: operand is slower on small ones (attention's 64 x 32 x 64); larger products amortize it
#: and smaller ones do not pay for the copy
STACKED_NT = (1 << 15, 1 << 19)
CONTIGUOUS = "_contiguous"


def _transposed_stack(a, b) -> bool:
    """Whether ``a @ b`` is a stacked product (``b`` has a batch axis) of matrices in
    :data:`STACKED_NT`'s range whose ``b`` is stored column by column (a transposed view)."""
    shape, strides = getattr(b, "shape", ()), getattr(b, "strides", None)
    if strides is None or len(shape) < 3 or len(getattr(a, "shape", ())) < 2:
        return False
    m, (k, n) = a.shape[-2], shape[-2:]
    low, high = STACKED_NT
    return k > 1 and n > 1 and strides[-2] == b.itemsize and low <= m * k * n <= high


def contiguous_operands(g: Graph) -> None:
    """Give a stacked matrix product whose right operand is a small transposed view
    (:func:`_transposed_stack`, read off the staging values) a C-contiguous copy of it, made
    by an op of its own (``_contiguous``), on backends whose functions are NumPy's ufuncs.
    The copy is the library's ``ascontiguousarray``: where a later call's operand is
    contiguous already it is that operand itself, so the op counts as a view."""
    ops = []
    for op in g.ops:
        if op.name == "matmul" and len(op.args) == 2 and op.args[0].__class__ is Ref \
                and op.args[1].__class__ is Ref and not op.params:
            s = op.args[1].slot
            d = g.disp[s]
            a, b = g.values[op.args[0].slot], g.values[s]
            lib = _backend.raw(d.xp) if d is not None and d.caps.ufuncs else None
            copy = getattr(lib, "ascontiguousarray", None)
            if copy is not None and _transposed_stack(a, b):
                t = g.new_slot(copy(b), d)
                ops.append(Op(CONTIGUOUS, copy, (Ref(s),), {}, (t,)))
                op.args = (op.args[0], Ref(t))
        ops.append(op)
    g.ops = ops


def plan_buffers(g: Graph, donated: set) -> None:
    """Set ``op.out_into`` where an elementwise op may write into a dying input's buffer.

    A slot's buffer may be written when the slot is a fresh result (a ufunc's,
    a matmul's or a reduction's: never a view), a donated input, or a writable view of
    all of one of those (a transposed gradient; not a transposed broadcast: read off the
    staging values); its staging value had the memory layout of the op's result as eager
    made it (a later reduction's order follows the layout; not asked of a fused call or a
    gemm, which promise no eager bits); no other live value may alias that
    buffer (views made from it are alive no longer than it), it is not an
    output, the op reads it through no other view, and the slot has the
    result's shape and dtype. Of several such arguments the first is written, except in
    the graph's tail (:func:`_prefer_recent`). A matrix product accumulated into an array
    (:func:`~ember.func._jit_gemm.fuse_matmul_updates`) writes into that array only.
    ``g.written``: the donated inputs whose buffers receive results.
    """
    g.written = set()
    if not g.ops:
        return
    bufs = _Buffers(g, donated)
    taken = set()
    writes: dict = {}  # op index -> its writable (slot, buffer) pairs, the first one chosen
    for i, op in enumerate(g.ops):
        u = bufs.ufuncs[i]
        if u is None:
            continue
        fused, gemm = op.name == FUSED, op.name == GEMM
        if not (fused or gemm) and len(op.args) != getattr(u, "nin", -1):
            continue
        cands = [(s, b) for s, b in _writable(g, op, i, bufs, taken, donated)
                 if not gemm or s == op.args[0].slot]
        if not cands:
            continue
        s, b = cands[0]
        if fused:
            op.params = dict(u.out_params)
        elif not gemm and op.fn is not u and not getattr(op.fn, "takes_out", False):
            # a fix for some dtypes around the ufunc (not this one's: the ufunc writes), unless
            # the function takes out= itself (a faster kernel around it: direct maximum)
            if g.values[op.outs[0]].dtype in getattr(op.fn, "dtypes", ()):
                continue
            op.fn = u
        op.out_into = s  # (o owns that buffer from here; its own liveness decides its reuse)
        taken.update((s, b))
        writes[i] = cands
    if writes:
        _prefer_recent(g, writes, bufs.made_at)
    g.written = {b for i, cands in writes.items() for s, b in cands
                 if s == g.ops[i].out_into and b in donated}


def _prefer_recent(g: Graph, writes: dict, made_at: list) -> None:
    """In the graph's tail, where no op allocates an array any more, an op that may write
    into several dying buffers writes into the one made last.

    That one is still in cache and already dirty there; an older one (a donated weight, read
    in the forward pass) would be read back and written out again. Outside the tail the
    first choice stands: a donated buffer left unwritten stays alive to the call's end (its
    Tensor's handle keeps it), and a later allocation would then raise the peak.
    ``writes``: op index -> its writable ``(slot, buffer)`` pairs.
    """
    for i in range(len(g.ops) - 1, -1, -1):
        op = g.ops[i]
        if op.out_into is None and op.name not in _WRITABLE_VIEWS and any(
                s is not None and math.prod(g.values[s].shape) > 1 for s in op.outs):
            return  # (a 0-d result, the loss, is too small to matter)
        cands = writes.get(i)
        if cands is not None and len(cands) > 1:
            op.out_into = max(cands, key=lambda sb: made_at[sb[0]])[0]


def _whole_view(v, base) -> bool:
    """Whether staging value ``v``, a view of ``base``'s buffer, was writable and covered that
    buffer once (a transpose of it, not a transpose of its broadcast, which repeats memory
    and is read-only)."""
    flags = getattr(v, "flags", None)
    return flags is not None and flags.writeable and v.size == getattr(base, "size", -1)


def _writable(g: Graph, op: Op, i: int, bufs: _Buffers, taken: set, donated: set):
    """The ``(slot, buffer)`` pairs of ``op``'s arguments whose buffer its result may go into."""
    roots, fresh, last, made_by = bufs.roots, bufs.fresh, bufs.last, bufs.made_by
    ov = g.values[op.outs[0]]
    fused = op.name == FUSED
    own_kernel = fused or op.name == GEMM  # (not a ufunc: its own rules, no eager bits promised)
    for a in op.args:
        if a.__class__ is not Ref:
            continue
        s = a.slot
        rs = roots[s]
        if s in taken or rs is None:
            continue
        if len(rs) == 1:
            b = rs[0]  # the buffer written: s's own, or the one s is a view of (a transpose)
        elif s in rs:  # one of a fresh primitive's results: its own, once all of them died
            b = s
        else:
            continue
        if not fresh[b] or last[b] != i or b in taken or (fused and b not in donated):
            continue  # (a fused call's keywords cost more than a small new buffer)
        if (b != s or own_kernel) and ((b != s and made_by[s] not in _WRITABLE_VIEWS) or any(
                o is not a and o.__class__ is Ref and b in (roots[o.slot] or ()) for o in op.args)):
            continue  # (not a whole-buffer view, or the op reads that buffer through another:
            # NumPy's ufuncs buffer such an overlap, a fused call or BLAS is not relied on to)
        v = g.values[s]
        if v.shape != ov.shape or v.dtype != ov.dtype or len(v.shape) == 0:
            continue
        if b != s and not _whole_view(v, g.values[b]):
            continue
        if not own_kernel and getattr(v, "strides", None) != getattr(ov, "strides", None):
            continue  # (eager's result had another memory layout, which later reductions read;
            # a gemm keeps its weight's)
        yield s, b


def run_passes(g: Graph, donated: set, fuse: bool = True) -> None:
    """All passes, in order."""
    fold_constants(g)
    simplify(g)
    eliminate_common(g)
    absorb_broadcasts(g)
    eliminate_dead(g)
    if fuse:
        fuse_matmul_updates(g, lambda g: _Buffers(g, donated))
        fuse_elementwise(g)
        contiguous_operands(g)
    plan_buffers(g, donated)


def separate_outputs(g: Graph, donated: set, staged: list) -> set:
    """The output positions the replay must copy, so that outputs share memory with each other
    and with the inputs only where the staging (eager) run's did: a constant array (else every
    call would return the same buffer), and an output whose buffer may alias an input not
    donated or an earlier output where the staging values did not (common subexpressions
    made two results one, a product with one dropped made a result the input or its view).
    ``staged``: the staging value of each output position, taken before the passes."""
    copies = set()
    bufs = None
    seen: list = []  # (roots, staging value) of the array outputs kept as they are
    for i, o in enumerate(g.outputs):
        if o.__class__ is not Ref:
            if hasattr(o, "shape") and hasattr(o, "dtype") and not isinstance(o, type):
                copies.add(i)
            continue
        if g.disp[o.slot] is None or staged[i] is None:  # (a traced number)
            continue
        bufs = bufs or _Buffers(g, donated)
        rs = set(bufs.roots[o.slot] or ())
        st = staged[i]
        if any(k in rs and k not in donated and not _eagerly_shared(st, g.values[k]) for k in g.inputs) or any(
                rs & r and not _eagerly_shared(st, v) for r, v in seen):
            copies.add(i)
        else:
            seen.append((rs, st))
    return copies


def _eagerly_shared(a, b) -> bool:
    """Whether staging values ``a`` and ``b`` shared memory (unknown: assume not)."""
    return a is b or bool(_backend.may_share_memory(a, b))
