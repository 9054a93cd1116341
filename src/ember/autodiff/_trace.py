"""Traces, tape nodes and the reverse pass.

A *trace* is one level of differentiation, opened by a transform such as
``ember.grad``. While it is open, every op whose inputs carry a node of that
trace appends a :class:`Node` to ``trace.nodes``; the recording order is a
topological order, so the backward pass is one reversed loop (no recursion,
linear in the number of ops) that frees each node as soon as it has run.

Nested transforms open nested traces with higher levels. A tensor tracked at
level k wraps a value of a lower level; an op unwraps only the top level and
calls itself on the inner values, which records them on the outer traces.
That is how ``grad(grad(f))`` works without perturbation confusion.
"""

from __future__ import annotations

import gc
import threading
import weakref

from .._config import CONFIG

__all__ = ["Trace", "Node", "LeafNode", "make_node", "active_traces", "live_traces", "backward"]

#: Stack of traces that are open right now, innermost last.
active_traces: list = []


class _LiveTraces:
    """A weak set of traces: iterating gives the live ones, ``len`` counts them.

    Why not ``weakref.WeakSet``: its ``add`` and the callback that removes a
    dead member are Python methods, two frames for every transform call. Here
    the set holds weak references whose callback is the set's own C-level
    ``discard`` (``Trace.__init__`` adds its own: ``refs.add(weakref.ref(self, refs.discard))``).
    """

    __slots__ = ("refs",)

    def __init__(self):
        self.refs: set = set()

    def __iter__(self):
        return iter([t for t in [r() for r in list(self.refs)] if t is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return bool(self.refs)


#: Every Trace object still alive (open or retained, e.g. by a vjp function); the
#: ownership layer scans their tapes before an in-place write (copy-on-write).
live_traces = _LiveTraces()
_live_refs = live_traces.refs
_live_gone = _live_refs.discard


#: Generations 1 and 2's thresholds while tapes are live: their passes wait until the last
#: trace closes (the young pass every gc_threshold allocations still collects the cycles that
#: die young; the first collection after the trace, the rest).
_DEFERRED_OLDER = 1 << 20


class _QuietGC:
    """Raise the cyclic GC's thresholds while tapes are recorded or run (``gc_threshold``).

    Gen 0 starts a pass after ``gc_threshold`` allocations; passes over the
    older generations wait until the last trace closes, since each walks the
    whole tape again (millions of objects that all live until backward: they
    made a 1,000,000-op chain 1.2x slower per op than 1,000-op ones).
    Re-entrant and shared by threads: the first entry saves the thresholds,
    the last exit restores them (unless someone changed them meanwhile). See
    ``ember._config`` for why.
    """

    __slots__ = ("depth", "saved", "set_to", "lock")

    def __init__(self):
        self.depth = 0
        self.saved = None
        self.set_to = None
        self.lock = threading.Lock()

    def __enter__(self):
        with self.lock:
            if self.depth == 0:
                want = CONFIG["gc_threshold"]
                t = gc.get_threshold()
                if want is not None and 0 < t[0] < want:  # 0: collection off; larger: the user's
                    new = (want, max(t[1], _DEFERRED_OLDER), max(t[2], _DEFERRED_OLDER))
                    self.saved, self.set_to = t, new
                    gc.set_threshold(*new)
            self.depth += 1

    def __exit__(self, *exc):
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.saved is not None:
                if gc.get_threshold() == self.set_to:  # not changed by someone else meanwhile
                    gc.set_threshold(*self.saved)
                self.saved = self.set_to = None
        return False


quiet_gc = _QuietGC()


def _no_checkpointing(trace, strategy) -> None:
    raise ValueError(f"checkpointing={strategy!r}: no checkpointing strategies are installed")


#: ``install_checkpointing(trace, strategy)`` sets up a new trace for a checkpointing
#: strategy; ``ember.autodiff._checkpoint`` installs its own at import (a hook, so this
#: module imports nothing of it).
install_checkpointing = _no_checkpointing


class Trace:
    """One level of differentiation: a tape of nodes in recording order."""

    __slots__ = ("level", "nodes", "active", "checkpointing", "saver", "remat", "__weakref__")
    #: whether this trace stages ops for ``ember.jit`` (``_staging.StagingTrace``): the
    #: dispatcher hands it every op, with or without a rule
    stages = False

    def __init__(self, checkpointing: str = "none"):
        self.level = active_traces[-1].level + 1 if active_traces else 1
        self.nodes: list = []
        self.active = False
        self.checkpointing = checkpointing
        _live_refs.add(weakref.ref(self, _live_gone))  # (in live_traces: see _LiveTraces)
        # saver(node, impl): called for each recorded node while a checkpointing
        # strategy or region is in effect; remat: the per-trace recompute state
        # (see _checkpoint.py) once any value may have been dropped.
        self.saver = None
        self.remat = None
        if checkpointing != "none":
            install_checkpointing(self, checkpointing)

    def __enter__(self):
        quiet_gc.__enter__()
        self.active = True
        active_traces.append(self)
        return self

    def __exit__(self, *exc):
        active_traces.remove(self)
        self.active = False
        quiet_gc.__exit__()
        return False

    def release(self) -> None:
        """Drop the tape: every node's saved values, then the node list.

        What a backward pass without ``retain`` does as it goes; a retained tape
        (a VJP function's) calls it when its owner dies. Why: a tape is cycles
        (``trace.nodes`` -> node -> ``node.trace``; node -> its result's handle),
        so without this it waited for a full GC pass, and ownership kept
        scanning it before every in-place write until then.
        """
        for node in self.nodes:
            node.args = node.ans = node.params = None
        self.nodes.clear()
        self.saver = self.remat = None

    def __repr__(self):
        return f"<Trace level={self.level} nodes={len(self.nodes)} active={self.active}>"


class Node:
    """One recorded op: its rule, its inputs (one level down) and its result.

    ``parents[i]`` is the node of input i on the same trace, or None when input
    i is a constant for this trace. ``g`` accumulates the cotangent of ``ans``
    during the backward pass. Leaves (the inputs of a transform) have
    ``rule is None``; output i of a multi-output op is a select node (rule
    ``SELECT``, the op's node as its one parent, ``params == i``). Eight
    slots: a node is 96 bytes (a ninth would make it 112, and a
    1,000,000-op tape is a million of them).
    """

    __slots__ = ("rule", "args", "params", "parents", "ans", "g", "trace", "ns")
    # Node() then filling the slots is twice as fast as a Python __init__: make_node does that
    __init__ = object.__init__

    def __repr__(self):
        name = self.rule.name if self.rule is not None else "leaf"
        return f"<Node {name} level={self.trace.level}>"


class LeafNode:
    """The node of a transform's input (a leaf of the tape): only ``g`` changes.

    Its other fields are a :class:`Node`'s for a leaf, as class constants, so a
    transform makes one per input with three stores (it makes one per parameter
    per step).
    """

    __slots__ = ("g", "trace", "ns")
    rule = args = params = ans = None
    parents = ()

    def __init__(self, trace, ns):
        self.g = None
        self.trace = trace
        self.ns = ns

    def __repr__(self):
        return f"<Node leaf level={self.trace.level}>"


def make_node(rule, args, params, parents, ans, trace, ns) -> Node:
    """Record a new node at the end of ``trace``'s tape and return it.

    The one place a tape node is built: every op's recording calls it, the
    elementwise fast paths included (see :class:`Node` for the fields). ``g``
    starts empty.
    """
    n = Node()
    n.rule = rule
    n.args = args
    n.params = params
    n.parents = parents
    n.ans = ans
    n.g = None
    n.trace = trace
    n.ns = ns
    trace.nodes.append(n)
    return n


def _accumulate(node, g):
    """Add cotangent ``g`` into ``node.g``."""
    old = node.g
    node.g = g if old is None else old + g


def route_to_slot(node, g) -> None:
    """Add ``g``, the cotangent of one output of a multi-output node, into its slot.

    ``node`` is that output's select node: rule ``SELECT``, ``parents == (op's node,)``
    and the output's index as its ``params``.
    """
    parent = node.parents[0]
    slots = parent.g
    if slots is None:
        slots = parent.g = [None] * len(parent.ans)
    i = node.params
    slots[i] = g if slots[i] is None else slots[i] + g


def backward(trace: Trace, seeds, retain: bool = False) -> None:
    """Run the reverse pass of ``trace`` from ``seeds``, a list of ``(node, cotangent)``.

    Visits the tape once in reverse recording order, calls each reached rule's
    VJP and accumulates into the parents. Unless ``retain`` is set (a VJP
    function that may be called again), each visited node drops its saved
    values right away, so memory falls as backward proceeds.
    """
    with quiet_gc:
        backward_quiet(trace, seeds, retain)


def backward_quiet(trace: Trace, seeds, retain: bool = False) -> None:
    """``backward`` for a caller already inside ``quiet_gc`` (a transform's one ``with``).

    Chooses the value policy of the one loop (:func:`_run`): backend arrays when
    nothing records the pass (a first-order trace, untracked seeds, every value
    kept), else wrapper Tensors; a trace that dropped values recomputes them
    through its ``remat`` hooks.
    """
    if trace.remat is None and trace.level == 1 and _untracked(seeds):
        _backward_raw(trace, seeds, retain)
    else:
        _backward_general(trace, seeds, retain)


def _untracked(seeds) -> bool:
    """Whether every seed cotangent is an untracked Tensor (so nothing records backward)."""
    for _, g in seeds:
        if g.__class__ is not g._ns._Tensor or g._node is not None:
            return False
    return True


def _backward_general(trace: Trace, seeds, retain: bool) -> None:
    """The loop with every VJP run on wrapper Tensors, so an outer trace records it."""
    _run(trace, seeds, retain, False)


def _backward_raw(trace: Trace, seeds, retain: bool) -> None:
    """The loop on backend arrays, for a pass nothing records (see :func:`_run`)."""
    _run(trace, seeds, retain, True)


class _NeverAValue:
    """A class no value has: with ``T`` set to it, the loop's ``a._value if a.__class__ is T
    else a`` leaves wrapper Tensors as they are (the wrapped policy)."""


def _run(trace: Trace, seeds, retain: bool, raw: bool) -> None:
    """The one reverse loop; ``raw`` chooses the value policy.

    ``raw=True``: the pass is not itself differentiated (a first-order trace,
    untracked seeds), so wrapping every intermediate cotangent in a Tensor
    would be pure overhead: the loop unwraps the saved values, calls each rule
    with the backend namespace (rules registered ``raw=False`` get wrapped
    values) and accumulates plain arrays; the transforms wrap the leaves'.
    Accumulation writes in place into buffers the loop itself made (``owned``:
    a sum of two cotangents, or a scatter accumulator), which no one else can
    see; a rule with a ``scatter`` (``getitem``) adds its cotangent straight
    into such an accumulator instead of building a zero array per use.

    ``raw=False``: every value stays a wrapper Tensor and the rules get the
    wrapper namespace, so an outer trace records the pass (higher order).

    A trace that did not keep some values (checkpointing) has ``trace.remat``:
    its hooks order the visit, give each VJP its (recomputed) values and drop
    them again when their reads are done (``_checkpoint._State``).

    Nodes of one- and two-argument rules without parameters (the elementwise
    ops) take a branch that calls the per-argument VJPs directly. Both
    policies visit in the same order and accumulate in the same order, so
    their results are the same.
    """
    remat = trace.remat
    if raw:
        for node, g in seeds:
            g = g._value
            node.g = g if node.g is None else node.g + g
        owned: set | None = set()  # nodes whose g is a buffer this loop made: safe to write into
    else:
        for node, g in seeds:
            _accumulate(node, g)
        owned = None
    nodes = trace.nodes
    order = reversed(nodes) if remat is None else remat.begin(nodes, retain)
    ns = T = R = None
    writes = False
    # node -> bool mask of the elements of its cotangent known to be exactly zero (symbolic
    # zeros: what ``x[key] = v`` overwrote, the side ``where`` did not take). Once there is
    # one, every node takes the general path, which applies and propagates them.
    zeros: dict = {}
    general = remat is not None
    try:
        for node in order:
            g = node.g
            if g is None:
                if remat is not None:
                    remat.skip(node, retain)
                elif not retain:
                    node.args = node.ans = None
                continue
            node.g = None
            rule = node.rule
            if node.ns is not ns:
                ns = node.ns
                if raw:
                    T = ns._Tensor
                    R = ns._dispatch.raw_ns
                    writes = R._writes
                else:
                    T, R = _NeverAValue, ns
            args = node.args
            k = rule.arity
            if k and not general and len(args) == k and not node.params:
                fns = rule.fns
                ans = node.ans
                if ans.__class__ is T:  # (None: the VJPs do not read it, Rule.saves)
                    ans = ans._value
                try:
                    if k == 1:
                        (a,) = args
                        gi = fns[0](R, g, ans, a._value if a.__class__ is T else a)
                        p = node.parents[0]
                        if p.g is None:
                            p.g = gi
                        else:
                            _add(p, gi, owned)
                    else:
                        a, b = args
                        if a.__class__ is T:
                            a = a._value
                        if b.__class__ is T:
                            b = b._value
                        p, q = node.parents
                        if p is not None:
                            f = fns[0]
                            if f is not None:
                                gi = f(R, g, ans, a, b)
                                if p.g is None:
                                    p.g = gi
                                else:
                                    _add(p, gi, owned)
                        if q is not None:
                            f = fns[1]
                            if f is not None:
                                gi = f(R, g, ans, a, b)
                                if q.g is None:
                                    q.g = gi
                                else:
                                    _add(q, gi, owned)
                except Exception as e:
                    raise _backward_error(rule, e, g, args) from e
                if not retain:
                    node.args = node.ans = None
                continue
            if rule.select:
                route_to_slot(node, g)
                continue
            parents = node.parents
            zmask = zeros.pop(node, None) if zeros else None
            if remat is None:
                ans = node.ans
            else:
                ans, args = remat.values(node)
            scatter = rule.scatter
            if scatter is not None and writes and zmask is None:
                p = parents[0]
                if p is not None and (p.g is None or p in owned):
                    x = args[0]
                    acc = scatter(R, p.g, g, x._value if x.__class__ is T else x, **node.params)
                    if acc is not None:
                        p.g = acc
                        owned.add(p)
                        if not retain:
                            node.args = node.ans = node.params = None
                        continue
            if not raw:
                if rule.nout > 1:
                    g = rule.fill_cotangents(ns, g, ans)
                grads = rule.vjp(ns, g, ans, args, node.params, parents)
            elif rule.raw:
                n = len(args)  # (nn.linear's x, w, b, the loss's z, t: no comprehension's frame)
                if n == 3:
                    a, b, c = args
                    args = (a._value if a.__class__ is T else a, b._value if b.__class__ is T else b,
                            c._value if c.__class__ is T else c)
                elif n == 2:
                    a, b = args
                    args = (a._value if a.__class__ is T else a, b._value if b.__class__ is T else b)
                else:
                    args = tuple([a._value if a.__class__ is T else a for a in args])
                if rule.nout > 1:
                    ans = tuple([a._value for a in ans])
                    g = rule.fill_cotangents(R, g, ans)
                elif ans.__class__ is T:  # (None: the VJPs do not read it)
                    ans = ans._value
                try:
                    grads = rule.vjp(R, g, ans, args, node.params, parents)
                except Exception as e:
                    raise _backward_error(rule, e, g, args) from e
            else:  # the rule needs Tensors: wrap its inputs, unwrap its results
                wrap = ns._dispatch.make
                if rule.nout > 1:
                    g = rule.fill_cotangents(ns, [None if x is None else wrap(x, None) for x in g], ans)
                else:
                    g = wrap(g, None)
                grads = [None if x is None else x._value if x.__class__ is T else x
                         for x in rule.vjp(ns, g, ans, args, node.params, parents)]
            masks = None
            if zmask is not None and rule.elementwise:
                masks = [zmask] * len(grads)
                grads = _without_known_zeros(R, grads, zmask)
            elif rule.zero_masks is not None:
                gv = g._value if g.__class__ is T else g
                masks = rule.zero_masks(R, gv, zmask, [a._value if a.__class__ is T else a for a in args],
                                        node.params)
                general = True
            if remat is not None:
                del args, ans
                remat.release(node)
            for i, (parent, gi) in enumerate(zip(parents, grads)):
                if parent is not None and gi is not None:
                    if zeros or masks is not None:
                        _note_zeros(zeros, parent, masks[i] if masks is not None else None, gi)
                    if parent.g is None:
                        parent.g = gi
                    else:
                        _add(parent, gi, owned)
            del grads
            if remat is not None:
                remat.done(node, retain)
            elif not retain:
                node.args = node.ans = node.params = None
    finally:
        if remat is not None:
            remat.end(retain)
    if not retain:
        nodes.clear()


def _without_known_zeros(ns, grads, zmask):
    """The cotangents of an elementwise op's inputs, exactly zero where its output's is known
    to be (``0 * inf`` and ``0 / 0`` in a VJP would make NaN there); inputs broadcast to the
    output's shape only (a smaller one was summed over the mask already)."""
    shape = tuple(zmask.shape)
    return [gi if gi is None or tuple(gi.shape) != shape else ns.where(zmask, ns.zeros_like(gi), gi)
            for gi in grads]


def _note_zeros(zeros: dict, parent, mask, gi) -> None:
    """Record that ``gi``, about to be added to ``parent.g``, is exactly zero at ``mask`` (None:
    nowhere known). A parent's cotangent is known zero where every contribution is."""
    if mask is not None and tuple(mask.shape) != tuple(gi.shape):
        mask = None
    if parent.g is None:  # the first contribution
        if mask is not None:
            zeros[parent] = mask
        return
    old = zeros.get(parent)
    if old is None:  # an earlier contribution was not masked (or this one is not)
        return
    if mask is None:
        del zeros[parent]
    else:
        zeros[parent] = old & mask


def _add(node, gi, owned: set | None) -> None:
    """``node.g += gi``: in place when the loop made node.g and gi matches it, else a new sum.

    A new sum is a buffer nobody else holds, so ``node`` owns it from then on.
    ``+=`` on backends without in-place arithmetic (Dask, JAX) rebinds, which
    is the same as the sum. ``owned`` is None on wrapper Tensors (the sum is recorded).
    """
    old = node.g
    if owned is None:
        node.g = old + gi
        return
    if node in owned and gi.shape == old.shape and gi.dtype == old.dtype:
        old += gi
        node.g = old
    else:
        node.g = old + gi
        owned.add(node)


def _backward_error(rule, exc, g, args):
    """A backend error inside a VJP, naming the op and the shapes as the wrapper would."""
    from ._op_errors import op_error

    return op_error(f"backward of {rule.name}", exc, (g, *args))
