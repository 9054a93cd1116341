"""Staging for ``ember.jit``: the outermost trace, whose interpreter records every op.

A :class:`StagingTrace` is opened below every other trace while ``jit`` runs
the user's function once on its inputs. Two hooks feed it:

- ``saver(node, impl)`` (the hook every recorded node calls, as forward
  mode's interpreter does): the elementwise fast paths record their node and
  hand it here;
- ``stage(d, top, name, impl, args, params)``: the dispatcher's general path
  hands it every op whose top trace is this one, or that has no rule (a
  comparison, an integer op) under any trace, since such ops carry no
  gradient but their values still depend on the inputs.

Both append an :class:`Op` (the backend callable, its arguments with graph
values as :class:`Ref`, its parameters, its output slots) to a :class:`Graph`.
Values run concretely while staging, so shapes and dtypes are known; a value
is found again by the identity of its backend array, which also catches a
staged array that comes back through a constant Tensor (``stop_gradient``).

Traced Python numbers (``_numbers.TracedNumber``) have slots too, with no
dispatcher: their arithmetic lands in ``graph.host`` (Python operations the
replay runs before any backend call), and what their values decided in
``graph.guards``.
"""

from __future__ import annotations

from ._numbers import TracedNumber, traced, values_of
from ._op_errors import op_error
from ._tensor import Tensor
from ._trace import LeafNode, Trace

__all__ = ["Ref", "Op", "Graph", "StagingTrace"]

_SCALARS = (bool, int, float, complex, str, type(None))
_NUMBERS = (bool, int, float, complex)


class Ref:
    """A graph value inside an op's arguments or parameters: slot ``slot``."""

    __slots__ = ("slot",)

    def __init__(self, slot: int):
        self.slot = slot

    def __repr__(self):
        return f"v{self.slot}"


class Op:
    """One backend call of a staged graph.

    ``args``: positional arguments (a :class:`Ref`, a constant, or a tuple/list
    holding them); ``params``: keywords (``dynamic`` when any holds a Ref);
    ``outs``: output slots (``multi``: the call returns a sequence, unpacked
    into ``outs``; None marks an element that is not an array).
    """

    __slots__ = ("name", "fn", "args", "params", "outs", "multi", "dynamic", "out_into", "note")

    def __init__(self, name, fn, args, params, outs, multi=False, dynamic=False):
        self.name = name
        self.fn = fn
        self.args = args
        self.params = params
        self.outs = outs
        self.multi = multi
        self.dynamic = dynamic
        self.out_into = None  # buffer planning: the slot whose buffer receives the result
        self.note = None  # what a listing shows after the call (a fused op: its expression)

    def refs(self):
        """The slots this op reads (arguments and dynamic parameters)."""
        out: list = []
        _collect(self.args, out)
        if self.dynamic:
            _collect(self.params, out)
        return out


def _collect(t, out: list) -> None:
    c = t.__class__
    if c is Ref:
        out.append(t.slot)
    elif c is tuple or c is list:
        for a in t:
            _collect(a, out)
    elif c is dict:
        for a in t.values():
            _collect(a, out)
    elif c is slice:
        _collect((t.start, t.stop, t.step), out)


class Graph:
    """A staged function: inputs, ops in order, outputs; per slot its staging value."""

    def __init__(self):
        self.ops: list[Op] = []
        self.values: list = []  # slot -> the backend array it held while staging
        self.disp: list = []  # slot -> the dispatcher of its namespace
        self.inputs: list[int] = []
        self.outputs: list = []  # Ref or constant
        self.host: list[Op] = []  # operations on traced Python numbers (their slots' disp: None)
        self.guards: list = []  # (slot, truth): what a replay needs bool(slot's value) to be
        self.written: set = set()  # (jit's buffer planning) donated inputs that receive results
        self.copies: dict = {}  # (jit) output position -> the copy the replay returns instead

    def new_slot(self, v, d) -> int:
        self.values.append(v)
        self.disp.append(d)
        return len(self.values) - 1


class StagingTrace(Trace):
    """The outermost trace of ``ember.jit``: every op on staged values lands in ``graph``."""

    stages = True

    def __init__(self):
        super().__init__()
        self.graph = Graph()
        self.ids: dict = {}  # id(backend array) -> slot (the arrays stay alive in graph.values)
        self.saver = self._saver
        self.outer = None  # while staging a sub-graph: (the enclosing graph, its ids, captured)

    # ---------------------------------------------------------------- values
    def add_input(self, v, d, mod) -> Tensor:
        """A staged Tensor over backend array ``v`` (an input of the graph). An array given
        twice (tied weights, ``f(a, a)``) is two inputs: a later call may pass two arrays."""
        if id(v) in self.ids:  # (values are found by identity: the second one stages a copy)
            v = d.raw_ns.asarray(v, copy=True)
        slot = self.graph.new_slot(v, d)
        self.graph.inputs.append(slot)
        self.ids[id(v)] = slot
        return d.make(d.make(v, None), LeafNode(self, mod))

    def add_number(self, v) -> TracedNumber:
        """A traced Python number (an input of the graph)."""
        slot = self.graph.new_slot(v, None)
        self.graph.inputs.append(slot)
        return traced(self, slot, v)

    def host(self, fn, args, name) -> TracedNumber:
        """``fn(*args)`` on traced numbers and constants, recorded as a host step."""
        out = fn(*values_of(args))
        slot = self.graph.new_slot(out, None)
        # (a number of another, finished trace is a constant here)
        refs = tuple([(Ref(a._slot) if a._trace is self else a._v) if isinstance(a, TracedNumber) else a
                      for a in args])
        self.graph.host.append(Op(name, fn, refs, {}, (slot,)))
        return traced(self, slot, out)

    def guard(self, n: TracedNumber, truth: bool) -> None:
        """Replay this graph only where ``bool(n)`` is ``truth`` (what this trace assumed)."""
        g = (n._slot, truth)
        if g not in self.graph.guards:
            self.graph.guards.append(g)

    def number_array(self, n: TracedNumber, like: Tensor) -> Tensor:
        """Traced number ``n`` as a staged 0-d array of ``like``'s namespace, with the dtype
        the array API gives a Python scalar meeting ``like`` (``like``'s, in one kind)."""
        if self.outer is not None:
            raise NotImplementedError("traced Python numbers in a staged loop")
        d = type(like)._ns._dispatch
        xp = d.xp
        dt = like.dtype
        try:
            dt = xp.result_type(dt, n._v)
        except Exception:  # (a backend without scalars in result_type: like's dtype)
            pass
        slot, t = self._result(xp.asarray(n._v, dtype=dt), d)
        self.graph.ops.append(Op("asarray", xp.asarray, (Ref(n._slot),), {"dtype": dt}, (slot,)))
        return t

    def _out(self, v, d) -> Ref:
        slot = self.graph.new_slot(v, d)
        self.ids[id(v)] = slot
        return slot

    def _result(self, v, d) -> tuple:
        """Backend array ``v`` (an op's result; a backend scalar is made an array) as a new
        slot and the staged Tensor over it: ``(slot, tensor)``."""
        if v.__class__ is not d.A:
            v = d.coerce(v)
        return self._out(v, d), d.make(d.make(v, None), LeafNode(self, d.module))

    def lift(self, a):
        """``a`` as an op argument: Tensors and backend arrays staged here become Refs,
        others stay constants (backend arrays); tuples and lists are walked."""
        c = a.__class__
        if c in _SCALARS:
            return a
        if isinstance(a, TracedNumber):  # (e.g. axis=n): this call's value, guarded
            return a._concrete()
        if isinstance(a, Tensor):
            while a._node is not None:
                a = a._value
            a = a._value
        if c is tuple or c is list:
            return c(self.lift(x) for x in a)
        if c is dict:
            return {k: self.lift(x) for k, x in a.items()}
        if c is slice:
            parts = (self.lift(a.start), self.lift(a.stop), self.lift(a.step))
            return slice(*parts) if any(p.__class__ is Ref for p in parts) else a
        slot = self.ids.get(id(a))
        if slot is not None and self.graph.values[slot] is a:
            return Ref(slot)
        if self.outer is not None:  # a value of the enclosing graph: an input of this one
            og, oids, captured = self.outer
            o = oids.get(id(a))
            if o is not None and og.values[o] is a:
                slot = self.graph.new_slot(a, og.disp[o])
                self.graph.inputs.append(slot)
                self.ids[id(a)] = slot
                captured.append(o)
                return Ref(slot)
        return a

    def stage_call(self, name, fn, args, captured) -> list:
        """Record ``fn(*args' values, *captured values)`` (``args``: staged Tensors,
        ``captured``: slots of this graph) as one op with one output per arg, run it on this
        trace's values, and return its results as staged Tensors."""
        refs = tuple([self.lift(a) for a in args] + [Ref(s) for s in captured])
        out = fn(*[_raw(a) for a in args], *[self.graph.values[s] for s in captured])
        slots, res = [], []
        for a, v in zip(args, out):
            slot, t = self._result(v, type(a)._ns._dispatch)
            slots.append(slot)
            res.append(t)
        self.graph.ops.append(Op(name, fn, refs, {}, tuple(slots), multi=True))
        return res

    def subgraph(self, fn, args) -> tuple:
        """Stage ``fn(*args)`` (staged Tensors of this trace) as a graph of its own:
        ``(graph, result)``; the graph's inputs are ``args``' values, then the values of
        the enclosing graph ``fn`` reads (``graph.captured``: their slots there), its
        outputs the leaves of the result (arrays, and Python numbers as constants)."""
        if self.outer is not None:
            raise NotImplementedError("a staged loop inside another one")
        from .. import tree as _tree

        outer = (self.graph, self.ids, [])
        self.graph, self.ids, self.outer = Graph(), {}, outer
        try:
            inner = []
            for a in args:
                d = type(a)._ns._dispatch
                inner.append(self.add_input(_raw(a), d, d.module))
            res = fn(*inner)
            leaves = _tree.leaves(res, is_leaf=lambda v: v.__class__ in _NUMBERS)
            g = self.graph
            if g.host or g.guards:
                raise NotImplementedError("traced Python numbers in a staged loop")
            g.outputs = [self.lift(x) for x in leaves]
            g.captured = outer[2]
            return g, res
        finally:
            self.graph, self.ids, self.outer = outer[0], outer[1], None

    # ---------------------------------------------------------------- hooks
    def _saver(self, node, impl) -> None:
        """A node recorded by a fast path (one output, no params)."""
        self.nodes.clear()  # no tape is kept at this level
        ans = node.ans
        v = ans._value
        d = node.ns._dispatch
        args = tuple([self.lift(a) for a in node.args])
        slot = self._out(v, d)
        self.graph.ops.append(Op(node.rule.name, impl, args, node.params or {}, (slot,)))
        node.args = node.ans = node.params = None

    def stage(self, d, top, name, impl, norm, params):
        """Run op ``name`` on the backend values of ``norm`` and record it (see the module doc)."""
        args = tuple([self.lift(a) for a in norm])
        lparams = self.lift(params) if params else {}
        refs: list = []
        _collect(args, refs)
        pref: list = []
        _collect(lparams, pref)
        raw = [_raw(a) for a in norm]
        compute = getattr(impl, "residuals", None)
        try:
            if compute is not None:
                out, extra = compute(*raw, **params)
            else:
                out = impl(*raw, **params)
        except Exception as e:
            raise op_error(name, e, raw) from e
        if compute is not None:
            if refs or pref:
                return self._stage_residuals(d, name, impl, args, lparams, bool(pref), out, extra)
            impl.kept.append(extra)
        if not refs and not pref:  # constants only: folded now, never recorded
            return d.wrap_out(out)
        A = d.A
        if out.__class__ is A or _is_array(out):
            slot, t = self._result(out, d)
            self.graph.ops.append(Op(name, impl, args, lparams, (slot,), dynamic=bool(pref)))
            return t
        if isinstance(out, (tuple, list)):
            slots, items = [], []
            for o in out:
                if o.__class__ is A or _is_array(o):
                    slot, t = self._result(o, d)
                    slots.append(slot)
                    items.append(t)
                else:
                    slots.append(None)
                    items.append(o)
            self.graph.ops.append(Op(name, impl, args, lparams, tuple(slots), multi=True, dynamic=bool(pref)))
            if hasattr(out, "_fields"):
                return type(out)(*items)
            return type(out)(items) if isinstance(out, list) else tuple(items)
        return out  # not an array (a Python value computed from shapes)

    def _stage_residuals(self, d, name, impl, args, lparams, dynamic, out, extra):
        """An op of a primitive with residuals (``defresiduals``) recorded under a tape: one op
        computes the result and the arrays the tape's node keeps (``extra``: a dict of arrays
        or tuples of arrays). Those get slots, and the node keeps them as staged Tensors
        (``impl.kept``), so the VJP's ops on them are staged too."""
        compute = impl.residuals

        def with_residuals(*raw, **params):
            res, ex = compute(*raw, **params)
            items = [res]
            for v in ex.values():
                items.extend(v if isinstance(v, (tuple, list)) else (v,))
            return items

        def staged(v):
            if v.__class__ is not d.A and not _is_array(v):
                raise TypeError(f"{name}: a residual must be an array, got {type(v).__name__}")
            slot, t = self._result(v, d)
            slots.append(slot)
            return t

        slots: list = []
        res = staged(out)
        kept = {}
        for k, v in extra.items():
            kept[k] = type(v)(staged(x) for x in v) if isinstance(v, (tuple, list)) else staged(v)
        impl.kept.append(kept)
        self.graph.ops.append(Op(name, with_residuals, args, lparams, tuple(slots), multi=True, dynamic=dynamic))
        return res


def _raw(a):
    if isinstance(a, Tensor):
        while a._node is not None:
            a = a._value
        return a._value
    c = a.__class__
    if c is tuple or c is list:
        return c(_raw(x) for x in a)
    if isinstance(a, TracedNumber):
        return a._concrete()
    return a


def _is_array(v) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, Tensor)
