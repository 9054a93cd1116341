"""Checkpointing: which recorded values a backward pass keeps, and recomputing the rest.

Without checkpointing (``"none"``) every node keeps the inputs (``args``) and
the result (``ans``) its VJP reads until the backward pass visits it (a rule
that reads only an input's shape and dtype keeps a ``Spec`` of it, one that
does not read its result keeps None: ``Rule.saves``). With a strategy or
inside a checkpointed region, a *saver* runs on every recorded node, and
every node keeps all its inputs (recomputing a dropped result needs them):

* Inputs that are results of other regular nodes of the same trace are not
  stored twice: ``node.args[i]`` becomes the marker :data:`PARENT` and the
  value is read from ``node.parents[i].ans``. So a value lives in exactly one
  place and dropping it there really frees the backend array (the user's
  tracked tensor, if still alive, keeps it too).
* A node whose result is not kept gets ``node.ans = DROPPED``; its primitive
  (``impl``) is remembered in the trace's :class:`_State`.

Which results are dropped:

``"balanced"``
    outputs of memory-bound rules (Burn's balanced checkpointing); outputs
    of compute-bound rules are kept.
``"segments"``
    every recomputable result except about one in sqrt(n) ("segment
    boundaries", Chen et al. 2016). n is not known while recording, so the
    segment length k doubles (and every other boundary is dropped) whenever
    more than k boundaries are kept: between sqrt(n)/2 and sqrt(n)
    boundaries of sqrt(n) to 2 sqrt(n) nodes each (a recomputed segment
    holds only the values its VJPs read, below, so long segments are cheap).
regions (``ember.checkpoint``)
    every recomputable result recorded inside, or only the memory-bound
    ones, or all but the values named with ``ember.checkpoint_name``; the
    region's inputs are always kept.

A result is never dropped when it cannot be recomputed: multi-output nodes,
rules marked non-deterministic and nodes with a consumed input keep their
result (Burn's "untracked parent" case), so checkpointing never fails.
Constants (untracked inputs, e.g. random numbers drawn inside a region) are
kept as they are, which also makes recomputation replay them exactly.

The backward pass (``_trace._run`` with this module's hooks, :class:`_State`) recomputes a dropped value on
first use by re-running its primitive on its inputs (recursively from the
nearest kept ancestors, iteratively so long chains do not recurse) and
memoizes it on the node while something still reads it. Before the pass it
counts the reads of every value: one per child whose VJP reads it
(``Rule.saves``; a VJP is not given inputs declared ``"none"``, nor its
result where ``keep_ans=False``, so those are not recomputed for it) and one
per dropped child that may be recomputed from it. A recomputed value whose
reads are all done is dropped again, unless its own node's VJP reads it
(then it goes when that node is visited): in ``tanh(x) * w`` layers the
products, read only to recompute the next ``tanh``, do not pile up while a
segment is recomputed. Each value is recomputed at most once per pass, with
the same primitive on the same inputs, so the gradients are bitwise those of
``"none"``. Recomputation goes through the dispatcher one level down, so
outer traces record it and higher order gradients work.
"""

from __future__ import annotations

from typing import Any, Callable

from ._rules import COMPUTE, MEMORY
from ._rules._base import _SAVES, NOT_KEPT
from ._tensor import Tensor, raw_value
from . import _trace
from ._trace import Trace, active_traces

__all__ = [
    "STRATEGIES",
    "POLICIES",
    "DROPPED",
    "PARENT",
    "install_strategy",
    "Region",
    "pin",
    "memory_report",
    "MemoryReport",
]

STRATEGIES = ("none", "balanced", "segments")
POLICIES = ("nothing", "compute")

BAD_STRATEGY = (
    "checkpointing must be one of {choices}, not {got!r}. Fix: pass "
    "checkpointing='none' (keep everything), 'balanced' (recompute memory-bound "
    "ops) or 'segments' (keep about sqrt(n) values)"
)
BAD_POLICY = (
    "ember.checkpoint: policy must be 'nothing', 'compute' or a collection of names "
    "given to ember.checkpoint_name, not {got!r}"
)


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<{self.name}>"

    def __reduce__(self):
        raise TypeError("checkpointing markers are not pickled")


#: ``node.ans`` of a node whose result is not kept (recomputed in backward).
DROPPED = _Marker("dropped")
#: ``node.args[i]`` whose value is ``node.parents[i].ans`` (stored only there).
PARENT = _Marker("parent")


class _State:
    """Per-trace recompute state (``trace.remat``)."""

    __slots__ = ("impls", "pinned", "materialized", "uses", "pending")

    def __init__(self):
        self.impls: dict = {}  # node -> primitive that recomputes node.ans
        self.pinned: set = set()  # nodes whose result must stay kept
        self.materialized: set = set()  # nodes recomputed in the running pass
        # in the running pass (_count_uses): node -> how many reads of its value are still to
        # come from its children (a VJP that reads it, a recomputation that needs it), and the
        # dropped nodes whose recomputation has not run yet
        self.uses: dict = {}
        self.pending: set = set()


    # ------------------------------------------------------------------ #
    # the hooks of the reverse loop (``_trace._run``) on a trace that may have dropped values:
    # the same visiting order and accumulation as without them, so gradients are bitwise
    # identical; dropped values are recomputed on first use
    # ------------------------------------------------------------------ #
    def begin(self, nodes, retain: bool):
        """Count the reads of each stored value; the nodes in reverse order (popped off the
        tape as they are visited unless ``retain``, so visited nodes are freed)."""
        _count_uses(self, nodes)
        return reversed(nodes) if retain else _popping(nodes)

    def skip(self, node, retain: bool) -> None:
        """``node`` got no cotangent: its inputs' reads are done all the same."""
        if _counted(node):
            _release_inputs(self, node, False)
        self.done(node, retain)

    def values(self, node):
        """``(ans, args)`` for ``node``'s VJP, recomputing dropped values it reads."""
        ans = node.ans
        if ans is DROPPED:  # (not recomputed for a VJP that does not read it)
            ans = _recompute(self, node) if _reads_ans(node) else None
        return ans, _values(self, node, node.rule.saves)

    def release(self, node) -> None:
        """``node``'s VJP has run: one read of each input it read is done."""
        _release_inputs(self, node, False)

    def done(self, node, retain: bool) -> None:
        """Free what ``node`` holds (or drop a recomputed result again, when retained)."""
        if not retain:
            node.args = node.ans = node.params = None
            self.impls.pop(node, None)
            self.pinned.discard(node)
        elif node in self.materialized:
            node.ans = DROPPED
            self.materialized.discard(node)

    def end(self, retain: bool) -> None:
        """After the pass (also after an error): recomputed values are dropped again."""
        if retain:
            for n in self.materialized:
                n.ans = DROPPED
        self.materialized.clear()
        self.uses = {}
        self.pending = set()


def _popping(nodes):
    while nodes:
        yield nodes.pop()


def _state(trace: Trace) -> _State:
    st = trace.remat
    if st is None:
        st = trace.remat = _State()
    return st


def _regular(p) -> bool:
    """A node whose value is its own ``ans`` (not a leaf, select or multi-output node)."""
    r = p.rule
    return r is not None and not r.select and r.nout == 1


def _link(node) -> None:
    """Store inputs that are results of regular nodes of this trace only on those nodes."""
    args = node.args
    new = None
    for i, p in enumerate(node.parents):
        if p is not None and _regular(p):
            a = args[i]
            if a is PARENT:
                continue
            if p.ans is a or p.ans is DROPPED:
                if new is None:
                    new = list(args)
                new[i] = PARENT
    if new is not None:
        node.args = tuple(new)


def _recomputable(node) -> bool:
    rule = node.rule
    if rule.nout != 1 or not rule.deterministic:
        return False
    for a in node.args:
        if a.__class__ is not _Marker and isinstance(a, Tensor) and (
            getattr(a, "_consumed_at", None) is not None
        ):
            return False
    return True


# ---------------------------------------------------------------------- #
# savers: called by the dispatcher right after a node is recorded
# ---------------------------------------------------------------------- #
class _BalancedSaver:
    """Drop results of memory-bound rules."""

    __slots__ = ("st",)

    def __init__(self, st):
        self.st = st

    def __call__(self, node, impl):
        _link(node)
        if node.rule.bound == MEMORY and _recomputable(node):
            self.st.impls[node] = impl
            node.ans = DROPPED


class _SegmentSaver:
    """Keep about sqrt(n) evenly spaced results; drop the rest."""

    __slots__ = ("st", "k", "count", "boundaries")

    def __init__(self, st):
        self.st = st
        self.k = 1
        self.count = 0
        self.boundaries: list = []  # (count, node)

    def __call__(self, node, impl):
        _link(node)
        if not _recomputable(node):
            return
        st = self.st
        st.impls[node] = impl
        self.count += 1
        if self.count % self.k:
            node.ans = DROPPED
            return
        b = self.boundaries
        b.append((self.count, node))
        if len(b) > self.k:  # too many boundaries: double the segment length
            self.k *= 2
            k = self.k
            keep = []
            for c, n in b:
                if c % k == 0 or n in st.pinned:
                    keep.append((c, n))
                elif n.ans is not None:
                    n.ans = DROPPED
            self.boundaries = keep


def install_strategy(trace: Trace, strategy: str) -> None:
    """Set up ``trace`` for checkpointing ``strategy`` (called by ``Trace.__init__``)."""
    if strategy == "none":
        return
    st = _state(trace)
    if strategy == "balanced":
        trace.saver = _BalancedSaver(st)
    elif strategy == "segments":
        trace.saver = _SegmentSaver(st)
    else:
        raise ValueError(BAD_STRATEGY.format(choices=STRATEGIES, got=strategy))


_trace.install_checkpointing = install_strategy


# ---------------------------------------------------------------------- #
# regions (ember.checkpoint)
# ---------------------------------------------------------------------- #
class _RegionSaver:
    __slots__ = ("st", "keep_compute")

    def __init__(self, st, keep_compute):
        self.st = st
        self.keep_compute = keep_compute

    def __call__(self, node, impl):
        _link(node)
        if self.keep_compute and node.rule.bound == COMPUTE:
            return
        if _recomputable(node):
            self.st.impls[node] = impl
            node.ans = DROPPED


#: Regions open right now, innermost last.
regions: list = []


class Region:
    """Context manager: results recorded inside are not kept (per ``policy``).

    ``policy`` is ``"nothing"`` (keep no result), ``"compute"`` (keep results of
    compute-bound rules) or a collection of names (keep the values given those
    names with :func:`pin_named`). Applies to every trace open on entry; the
    inputs of the region should be pinned by the caller (:func:`pin`).
    """

    __slots__ = ("policy", "names", "traces", "old")

    def __init__(self, policy: Any = "nothing"):
        if isinstance(policy, str):
            if policy not in POLICIES:
                raise ValueError(BAD_POLICY.format(got=policy))
            names = frozenset()
        else:
            try:
                names = frozenset(policy)
            except TypeError:
                raise ValueError(BAD_POLICY.format(got=policy)) from None
            if not all(isinstance(n, str) for n in names):
                raise ValueError(BAD_POLICY.format(got=policy))
        self.policy = policy
        self.names = names
        self.traces: list = []
        self.old: list = []

    def __enter__(self):
        keep_compute = self.policy == "compute"
        self.traces = [t for t in active_traces if t.active]
        self.old = [t.saver for t in self.traces]
        for t in self.traces:
            t.saver = _RegionSaver(_state(t), keep_compute)
        regions.append(self)
        return self

    def __exit__(self, *exc):
        regions.remove(self)
        for t, old in zip(self.traces, self.old):
            t.saver = old
        return False

    def saves(self, name: str) -> bool:
        return name in self.names


def pin(x) -> None:
    """Keep the value of tensor ``x`` at every trace level (undo a drop)."""
    t = x
    while isinstance(t, Tensor) and t._node is not None:
        node = t._node
        st = node.trace.remat
        if st is not None and node.rule is not None and _regular(node):
            if node.ans is DROPPED:
                node.ans = t._value
                st.impls.pop(node, None)
            st.pinned.add(node)
        t = t._value


# ---------------------------------------------------------------------- #
# backward with recomputation
# ---------------------------------------------------------------------- #
def _recompute(st: _State, target):
    """``target.ans``, recomputing it (and dropped ancestors) if needed."""
    if target.ans is not DROPPED:
        return target.ans
    impls = st.impls
    stack = [target]
    while stack:
        n = stack[-1]
        if n.ans is not DROPPED:
            stack.pop()
            continue
        pending = False
        for p, a in zip(n.parents, n.args):
            if a is PARENT and p.ans is DROPPED:
                stack.append(p)
                pending = True
        if pending:
            continue
        args = tuple(p.ans if a is PARENT else a for p, a in zip(n.parents, n.args))
        n.ans = n.ns._dispatch.call(n.rule.name, impls[n], args, n.params)
        st.materialized.add(n)
        stack.pop()
        del args
        if n in st.pending:  # its inputs' reads for this recomputation are done
            st.pending.discard(n)
            _release_inputs(st, n, recompute=True)
    return target.ans


def _reads_ans(node) -> bool:
    """Whether ``node``'s VJP reads its result (``Rule.saves``' ``keep_ans``)."""
    s = node.rule.saves
    return s is None or s[-1]


def _reads_input(saves, i) -> bool:
    """Whether a VJP with ``Rule.saves`` ``saves`` reads its input ``i``: all but ``"none"``
    do (a spec needs the value's shape, which a dropped value only has once recomputed)."""
    return saves is None or saves[i] != _NONE


_NONE = _SAVES["none"]


def _counted(node) -> bool:
    """Whether ``_count_uses`` counts ``node``'s reads: a recorded op (not a leaf or a
    multi-output select) still holding its inputs."""
    rule = node.rule
    return bool(node.args) and rule is not None and not rule.select


def _count_uses(st: _State, nodes) -> None:
    """Count, before a backward pass, the reads of each value stored on a node (``PARENT``
    inputs): one per child whose VJP reads it, one per dropped child that may be recomputed
    from it. A recomputed value nobody reads any more is dropped again (``_release``)."""
    uses: dict = {}
    pending = set()
    impls = st.impls
    for c in nodes:
        if not _counted(c):
            continue
        dropped = c.ans is DROPPED and c in impls
        if dropped:
            pending.add(c)
        s = c.rule.saves
        for i, a in enumerate(c.args):
            if a is PARENT:
                k = _reads_input(s, i) + dropped
                if k:
                    p = c.parents[i]
                    uses[p] = uses.get(p, 0) + k
    st.uses = uses
    st.pending = pending


def _release_inputs(st: _State, node, recompute: bool) -> None:
    """The reads of ``node``'s stored inputs are done: its recomputation (``recompute``) or
    its VJP (else: also the recomputation's, if it never ran)."""
    s = None
    if not recompute:
        if node in st.pending:
            st.pending.discard(node)
            _release_inputs(st, node, True)
        s = node.rule.saves
    for i, a in enumerate(node.args):
        if a is PARENT and (recompute or _reads_input(s, i)):
            _release(st, node.parents[i])


def _release(st: _State, p) -> None:
    """One read of ``p``'s value is done; when none is left, a recomputed value its own VJP
    does not read is dropped again (still recomputable: its primitive stays until ``p`` is
    visited), so a recomputed segment does not hold what only its recomputation needed."""
    uses = st.uses
    n = uses.get(p, 0) - 1
    if n > 0:
        uses[p] = n
        return
    uses.pop(p, None)
    if p in st.materialized and not _reads_ans(p):
        p.ans = DROPPED
        st.materialized.discard(p)


def _values(st: _State, node, s):
    """The inputs for ``node``'s VJP: stored ones as they are, ``PARENT`` ones read from the
    parent (recomputed if dropped) where the VJP reads them (``s``: ``rule.saves``),
    ``NOT_KEPT`` where it does not."""
    args = node.args
    for a in args:
        if a is PARENT:
            break
    else:
        return args
    return tuple((_recompute(st, p) if _reads_input(s, i) else NOT_KEPT) if a is PARENT else a
                 for i, (p, a) in enumerate(zip(node.parents, args)))


# ---------------------------------------------------------------------- #
# memory report
# ---------------------------------------------------------------------- #
def _nbytes(v) -> int:
    n = getattr(v, "nbytes", None)
    if n is not None:
        try:
            return int(n)
        except (TypeError, ValueError):
            return 0
    size = getattr(v, "size", None)
    item = getattr(getattr(v, "dtype", None), "itemsize", None)
    try:
        return int(size) * int(item)
    except (TypeError, ValueError):
        return 0


class StrategyReport:
    """What one strategy keeps for backward: ``tensors`` rows and totals by op."""

    def __init__(self, strategy: str, tensors: list):
        self.strategy = strategy
        #: one row per kept backend array: (op, shape, dtype, bytes)
        self.tensors = tensors
        by_op: dict = {}
        for op, _, _, b in tensors:
            c, t = by_op.get(op, (0, 0))
            by_op[op] = (c + 1, t + b)
        #: op -> (number of kept arrays, bytes)
        self.by_op = dict(sorted(by_op.items(), key=lambda kv: -kv[1][1]))
        self.total_bytes = sum(b for *_, b in tensors)

    def __repr__(self):
        return f"<StrategyReport {self.strategy}: {len(self.tensors)} arrays, {self.total_bytes} bytes>"


class MemoryReport:
    """Result of :func:`memory_report`: one :class:`StrategyReport` per strategy."""

    def __init__(self, reports: dict):
        self.strategies: dict = reports

    def __getitem__(self, strategy: str) -> StrategyReport:
        return self.strategies[strategy]

    def __str__(self):
        lines = []
        base = self.strategies.get("none")
        for name, r in self.strategies.items():
            frac = ""
            if base is not None and base.total_bytes:
                frac = f" ({100 * r.total_bytes / base.total_bytes:.0f}% of none)"
            lines.append(f"{name}: {len(r.tensors)} arrays, {_human(r.total_bytes)}{frac}")
            for op, (c, b) in r.by_op.items():
                lines.append(f"  {op:<24} {c:>5}  {_human(b):>10}")
        return "\n".join(lines)

    __repr__ = __str__


def _human(b: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return str(b)


def _kept(trace: Trace) -> list:
    """Rows (op, shape, dtype, bytes) of the distinct arrays ``trace`` keeps for backward."""
    seen: set = set()
    rows: list = []

    def add(op, v, raw_too=False):
        if isinstance(v, Tensor):
            raw = raw_value(v)
        elif raw_too and hasattr(v, "__array_namespace__"):  # kept by the rule, e.g. a gradient
            raw = v
        else:
            return
        if id(raw) in seen:
            return
        seen.add(id(raw))
        rows.append((op, tuple(raw.shape), str(raw.dtype), _nbytes(raw)))

    for node in trace.nodes:
        rule = node.rule
        if rule.select:
            continue
        ans = node.ans
        if isinstance(ans, tuple):
            for a in ans:
                add(rule.name, a)
        elif ans is not DROPPED:
            add(rule.name, ans)
        for p, a in zip(node.parents, node.args):
            if a is PARENT:
                continue
            if p is None:
                add("constant", a)
            elif p.rule is None:
                add("input", a)
            elif p.rule.select:
                add(p.parents[0].rule.name, a)
            else:
                add(p.rule.name, a)
        for v in (node.params or {}).values():  # what the forward left for the VJP (cross-entropy's dz)
            add(rule.name, v, raw_too=True)
    return rows


def memory_report(f: Callable, *args, strategies=STRATEGIES, **kwargs) -> MemoryReport:
    """List the arrays a backward pass of ``f(*args)`` keeps, by op, with bytes, per strategy.

    A debugging aid for choosing a checkpointing strategy: every floating
    array leaf of ``args`` is differentiated, ``f`` is run once per strategy
    and what the tape keeps for backward is listed (inputs, constants and
    kept results; dropped results, which backward recomputes, are not).

    >>> import ember.autodiff as ad, ember.autodiff.numpy as xp
    >>> r = ad.memory_report(lambda x: xp.sum(xp.tanh(xp.exp(x))), xp.ones(1000))
    >>> r["balanced"].total_bytes < r["none"].total_bytes
    True
    """
    out = {}
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise ValueError(BAD_STRATEGY.format(choices=STRATEGIES, got=strategy))
        trace = Trace(strategy)
        try:
            with trace:
                targs = [_traced(a, trace) for a in args]
                res = f(*targs, **kwargs)
            out[strategy] = StrategyReport(strategy, _kept(trace))
        finally:
            trace.release()
    return MemoryReport(out)


def _traced(a, trace):
    """``a`` with each differentiable array leaf a leaf of ``trace`` (memory_report's inputs)."""
    from .. import tree as _tree
    from ._namespace import namespace
    from ._trace import LeafNode

    leaves, treedef = _tree.flatten(a)
    new = []
    for x in leaves:
        if isinstance(x, Tensor) or hasattr(x, "__array_namespace__"):
            x = namespace(x).asarray(x) if not isinstance(x, Tensor) else x
            ns = type(x)._ns
            if ns._dispatch.is_differentiable(x):
                x = ns._dispatch.make(x, LeafNode(trace, ns))
        new.append(x)
    return _tree.unflatten(treedef, new)
