"""The batching interpreter behind ``ember.vmap``: a trace level whose values carry a batch axis.

A *batch trace* is one level of the same stack as the tapes of ``grad``
(``_trace.active_traces``), so ``vmap(grad(f))`` and ``grad(vmap(f))`` nest
by level like ``grad(grad(f))``. A value batched at that level is a
:class:`Batched` Tensor (a subclass of its namespace's Tensor): its
``_value`` is the Tensor one level down holding every example, with the
batch axis always in front (axis 0), and its ``shape``/``ndim`` are one
example's. Its class keeps it off every fast path of the dispatcher (they
test ``x.__class__ is T``); the general path's ``normalize`` raises
:class:`BatchedArgument` on meeting one, and the dispatcher hands the call to
:func:`dispatch` here, so untracked and ``grad`` calls pay nothing for vmap.

:func:`dispatch` finds the innermost level among the arguments. When it is a
batch trace, the op's *batching rule* (``_batch_rules.BATCH_RULES``, or one a
user registered with ``ember.primitive(...).defvmap``) computes the batched
result from the values one level down; otherwise (a ``grad`` level above the
batch level) the op is recorded on that tape with the batched values as
constants, as the dispatcher's general path does.
"""

from __future__ import annotations

import warnings

from .._errors import BatchingError, VmapFallbackWarning
from ._numbers import TracedNumber
from ._op_errors import op_error
from ._rules import RULES
from ._tensor import Tensor
from ._trace import Trace

__all__ = ["BatchTrace", "BatchedArgument", "Batched", "batched_class", "dispatch", "is_batched",
           "wrap", "BATCH_RULES", "defvmap", "loop_rule", "OPEN"]

NO_RULE = (
    "ember.vmap: no batching rule for op {name!r}, so it cannot run on a batch of {size} "
    "examples. Fix: {fix}"
)
NO_RULE_BUILTIN_FIX = (
    "compute it outside the vmapped function, express it with ops that have rules, or opt into "
    "a slow per-example loop with ember.vmap(f, fallback='loop')"
)
NO_RULE_PRIMITIVE_FIX = (
    "register one with {name}.defvmap(rule) (rule(xp, batched, *args, **params) returns the "
    "result with the batch axis in front), or {name}.defvmap('loop') to run it once per example "
    "(slow)"
)
LEAKED = (
    "{op}: a batched Tensor from an ember.vmap that has returned was used; a batched value is "
    "only meaningful inside its vmap. Return it from the vmapped function instead of keeping "
    "it in a closure or a global"
)
TO_SCALAR = (
    "{kind}() of a batched Tensor inside ember.vmap: each of the {size} examples has its own "
    "value, so Python control flow cannot branch on it. Use xp.where(cond, a, b) for a choice "
    "per example, or compute the condition outside vmap"
)
BATCHED_KEY = (
    "{op}: a batched Tensor inside ember.vmap was used where ember needs a plain value (an "
    "index key, a shape, a parameter). Index with per-example arrays through "
    "xp.take(x, i, axis=...) or xp.take_along_axis(x, i, axis=...), which batch; a mask "
    "computed per example selects a different number of elements in each, so write "
    "xp.where(mask, x, 0) instead of x[mask]"
)
TO_RAW = (
    "x.raw of a batched Tensor inside ember.vmap: the backend array holds every example. "
    "Return the value from the vmapped function to read it"
)


class BatchedArgument(Exception):
    """Raised by the dispatcher's ``normalize`` on a batched argument: the call is the batching
    interpreter's (control flow inside ember, never seen by users)."""


#: The batch traces open now (a list mutated in place: the dispatcher tests it where an op
#: that no tape records would strip every level of its arguments, see _namespace.call).
OPEN: list = []


class _Mark:
    """The ``_node`` of every Batched value of one batch trace: it names the trace."""

    __slots__ = ("trace",)

    def __init__(self, trace):
        self.trace = trace

    def __repr__(self):
        return f"<batched level={self.trace.level} size={self.trace.size}>"


class BatchTrace(Trace):
    """One ``vmap`` level: ``size`` examples; ``fallback`` says what an op without a rule does
    (``"error"`` or ``"loop"``). It records no tape (``nodes`` stays empty)."""

    __slots__ = ("size", "mark", "fallback")

    def __init__(self, size, fallback: str = "error"):
        super().__init__()
        self.size = size
        self.mark = _Mark(self)
        self.fallback = fallback

    def __enter__(self):
        OPEN.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        OPEN.remove(self)
        return super().__exit__(*exc)

    def __repr__(self):
        return f"<BatchTrace level={self.level} size={self.size} active={self.active}>"


class Batched(Tensor):
    """Marker base of the per-namespace batched Tensor classes (see :func:`batched_class`)."""

    __slots__ = ()


def batched_class(T):
    """The batched Tensor class of a namespace whose Tensor class is ``T``."""

    class B(T, Batched):
        __slots__ = ()

        @property
        def shape(self):
            return tuple(self._value.shape[1:])

        @property
        def ndim(self):
            return self._value.ndim - 1

        @property
        def size(self):
            n = 1
            for s in self.shape:
                if s is None or s != s:
                    return None
                n *= s
            return n

        @property
        def raw(self):
            raise BatchingError(TO_RAW)

        def _scalar(self, kind):
            raise BatchingError(TO_SCALAR.format(kind=kind, size=self._node.trace.size))

        def __array__(self, dtype=None, copy=None):
            raise BatchingError(TO_SCALAR.format(kind="numpy.asarray", size=self._node.trace.size))

        def __repr__(self):
            tr = self._node.trace
            return (f"BatchedTensor(shape={self.shape}, dtype={self.dtype}, batch size {tr.size}, "
                    f"vmap level {tr.level})")

        __str__ = __repr__

    B.__name__ = B.__qualname__ = "BatchedTensor"
    B.__module__ = "ember"
    return B


def is_batched(x, trace=None) -> bool:
    """Whether ``x`` is a batched Tensor (of ``trace`` when given)."""
    return isinstance(x, Batched) and (trace is None or x._node.trace is trace)


def wrap(d, trace, v):
    """Lower-level value ``v`` (batch axis in front) as a batched Tensor of ``trace``."""
    b = d.B()
    b._value = v
    b._node = trace.mark
    return b


# ---------------------------------------------------------------------- the rules table
#: op name -> rule(c, vals, batched, params): the op's result one level down, batch axis in
#: front (or a tuple/list of them); ``c`` is the call's :class:`Ctx`. Filled by _batch_rules.
BATCH_RULES: dict = {}


def defvmap(name: str, rule) -> None:
    """Register the batching rule of op ``name`` (see :data:`BATCH_RULES` for the signature)."""
    BATCH_RULES[name] = rule


class Ctx:
    """What a batching rule needs besides its values: the dispatcher ``d``, the namespace
    ``ns`` (its functions act one level down on the values), the op's ``name`` and backend
    ``impl``, and the batch ``size``."""

    __slots__ = ("d", "ns", "name", "impl", "size", "trace")

    def __init__(self, d, trace, name, impl):
        self.d = d
        self.ns = d.module
        self.name = name
        self.impl = impl
        self.size = trace.size
        self.trace = trace

    def op(self, args, params):
        """The op itself one level down (on values already laid out for the batch): on untracked
        Tensors and Python scalars (the usual level below a vmap) the backend function and one
        wrap, else the dispatcher."""
        d = self.d
        T = d.T
        raw = []
        for a in args:
            c = a.__class__
            if c is T and a._node is None:
                raw.append(a._value)
            elif c is float or c is int or c is bool or a is None:
                raw.append(a)
            else:
                return d.call(self.name, self.impl, tuple(args), params)
        try:
            v = self.impl(*raw, **params)
        except Exception as e:
            raise op_error(self.name, e, raw) from e
        if v.__class__ is d.A:
            t = T()
            t._value = v
            t._node = None
            return t
        return d.wrap_out(v)


# ---------------------------------------------------------------------- dispatch
def dispatch(d, name, impl, args, params):
    """Run op ``name`` where some argument is batched (the dispatcher's hook, see the module
    docstring). ``args`` are the op's positional arguments as the dispatcher got them."""
    if d._claims:  # consume() markers: no buffer is reused under vmap
        from ._ownership import fail_claims

        claims, d._claims = d._claims, []
        fail_claims(d, name, claims, "tape")
    B, T = d.B, d.T
    norm = []
    top = None
    for a in args:
        if a.__class__ is B:
            t = a._node.trace
            if not t.active:
                raise BatchingError(LEAKED.format(op=name))
        else:
            if isinstance(a, TracedNumber) and a._trace.active:  # a scalar of the batch's dtype
                a = a._trace.number_array(a, next(x for x in args if x.__class__ is B))
            a = d.normalize(name, a)
            t = a._node.trace if a.__class__ is T and a._node is not None else None
        norm.append(a)
        if t is not None and (top is None or t.level > top.level):
            top = t
    if top.__class__ is BatchTrace:
        return _apply(d, top, name, impl, norm, params)
    return _record(d, top, name, impl, norm, params)


def _apply(d, trace, name, impl, norm, params):
    """The op on a batch: its rule on the values one level down, results batched again."""
    B = d.B
    vals = []
    batched = []
    for a in norm:
        if a.__class__ is B and a._node.trace is trace:
            vals.append(a._value)
            batched.append(True)
        else:
            vals.append(a)
            batched.append(False)
    c = Ctx(d, trace, name, impl)
    rule = BATCH_RULES.get(name)
    if rule is None:
        if trace.fallback != "loop":
            fix = NO_RULE_PRIMITIVE_FIX.format(name=name.split("#")[0]) if name in _PRIMITIVES \
                else NO_RULE_BUILTIN_FIX
            raise BatchingError(NO_RULE.format(name=name.split("#")[0], size=trace.size, fix=fix))
        rule = loop_rule
    out = rule(c, vals, batched, params)
    if isinstance(out, tuple):
        outs = [wrap(d, trace, v) if isinstance(v, Tensor) else v for v in out]
        return type(out)(*outs) if hasattr(out, "_fields") else tuple(outs)
    if isinstance(out, list):
        return [wrap(d, trace, v) if isinstance(v, Tensor) else v for v in out]
    return wrap(d, trace, out)


#: names of user primitives (``ember.primitive``), for the missing-rule message
_PRIMITIVES: set = set()


def loop_rule(c, vals, batched, params):
    """The slow fallback: the op once per example, results stacked (warns once per op)."""
    warnings.warn(f"ember.vmap: op {c.name.split('#')[0]!r} runs once per example of the batch of "
                  f"{c.size} (no batching rule; slow)", VmapFallbackWarning, stacklevel=4)
    n = c.size
    if n is None or n != n:
        raise BatchingError(NO_RULE.format(name=c.name, size=n, fix="the batch size is unknown"))
    results = []
    for i in range(int(n)):
        args = [v[i, ...] if b else v for v, b in zip(vals, batched)]
        results.append(c.op(args, params))
    first = results[0]
    ns = c.ns
    if isinstance(first, (tuple, list)):
        outs = [ns.stack([r[k] for r in results], axis=0) for k in range(len(first))]
        return type(first)(*outs) if hasattr(first, "_fields") else tuple(outs)
    return ns.stack(results, axis=0)


def _record(d, top, name, impl, norm, params):
    """Record op ``name`` on tape ``top`` (a ``grad`` level above every batch level among the
    arguments), batched arguments being constants of that tape: the dispatcher's general
    path for arguments it does not take (its ``normalize`` raised on the batched ones)."""
    T = d.T
    rule = RULES.get(name)
    tracked = [a.__class__ is T and a._node is not None and a._node.trace is top for a in norm]
    if rule is None:  # not differentiable: the op one level down (constant at this level)
        inner = tuple(a._value if k else a for a, k in zip(norm, tracked))
        return d.call(name, impl, inner, params)
    return d.record(name, impl, norm, params, rule, top)
