"""``ember.jit``: stage a function once per input signature, then replay backend calls.

``jit(f)(*args)`` flattens the arguments (``ember.tree``); the signature is
the structure with its constants (strings, static fields, ...), each array's
namespace, shape and dtype, the values of the Python numbers that are not
traced and of the arguments in ``static_argnums``. The first call with a signature runs ``f`` once under a
staging trace (``ember.autodiff._staging``), which records every op, the
backward passes of transforms inside ``f`` included; the passes of
``_jit_passes`` simplify the graph and plan buffers, and ``_jit_replay``
turns it into one Python function over backend arrays. Later calls with the
same signature only run that function.

A Python number that changes from call to call (an optimizer's step
counter) is traced from its second value on (``autodiff._numbers``): its
arithmetic runs in Python in the replay and what the function decided from
its value is a guard, checked before any backend call. A signature keeps a
few graphs, one per outcome of its guards; numbers whose every value needs a
new graph become part of the signature again (and jit warns). A call
flattens its arguments once, numbers as leaves, and looks first for a graph
that traces no number (keyed by the numbers' values too), then among the
signature's graphs that trace some.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import warnings
from typing import Any, Callable, Sequence

from .. import tree as _tree
from .._compute import persist
from .._errors import RetraceWarning
from ..autodiff import Tensor, TracedNumber, namespace
from ..autodiff._ownership import Dead, Owned, _where, as_operand, check_alive, donate, reuse_reason
from ..autodiff._staging import Ref, StagingTrace
from ..autodiff._trace import active_traces
from ._jit_passes import run_passes, separate_outputs
from ._jit_replay import compile_graph, describe, taker, wrapper

__all__ = ["jit", "Jitted", "Lowered"]

UNHASHABLE_STATIC = (
    "jit({name}): the static argument {i} ({kind}) is not hashable; static arguments key the "
    "cache of traced graphs. Pass a hashable value (a tuple instead of a list), or leave it "
    "out of static_argnums to trace its arrays"
)
SCALAR_RETRACES = (
    "jit({name}) traced again {n} times only because Python numbers in its arguments changed "
    "and the function uses their values (in `if`, int(), range(), as a shape or an axis), so "
    "each value needs its own graph: every such call pays a trace. Compute with such values as "
    "arrays, mark the argument static if it takes few values, or jit the part that does not "
    "depend on them"
)
#: Signatures kept per jitted function (the oldest traced graph is dropped past it).
CACHE_SIZE = 64
#: Graphs kept per signature for different outcomes of its guards on traced numbers; past
#: it the numbers are part of the signature again.
MAX_GUARDED = 8
#: Retraces caused only by changed Python numbers before RetraceWarning.
RETRACE_WARN_AFTER = 4
BAD_ARGNUMS = "jit: {what} must be an int or a sequence of ints (argument positions), got {v!r}"


BAD_POSITION = (
    "jit({name}): {what}={i} names no argument: {name} takes {n} positional argument(s) "
    "({params}). Name a position from 0 to {last} (or -1 for the last)"
)


def _check_positions(f, nums: tuple, what: str) -> None:
    """Raise for a position in ``nums`` that ``f``'s signature has no positional parameter
    for (a typo that would otherwise go unnoticed: nothing donated, nothing static). A
    function taking ``*args``, or whose signature cannot be read, is not checked."""
    if not nums:
        return
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    n = len(names)
    for i in nums:
        if not -n <= i < n:
            raise ValueError(BAD_POSITION.format(name=getattr(f, "__name__", "f"), what=what, i=i, n=n,
                                                 params=", ".join(names) or "none", last=max(n - 1, 0)))


def _argnums(v, what) -> tuple:
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,)
    try:
        nums = tuple(v)
    except TypeError:
        raise TypeError(BAD_ARGNUMS.format(what=what, v=v)) from None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
        raise TypeError(BAD_ARGNUMS.format(what=what, v=v))
    return nums


def jit(f: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
        donate: int | Sequence[int] = (), persist: bool = True, fuse: bool = True) -> Any:
    """Compile ``f``: trace it once per input signature, then replay its backend calls.

    ``static_argnums``: positions of arguments that are part of the signature
    by value (hashable; ``f`` is traced again for each new value) instead of
    being traced. Python scalars inside the other arguments are static too.
    ``donate``: positions of arguments whose ember Tensors the call consumes
    (as :func:`ember.consume`): their buffers may hold results, and using them
    afterwards raises :class:`ember.ConsumedError`.
    ``persist``: on a lazy backend (Dask) each call persists its results (one
    ``ember.persist``), so a jitted training step builds one graph per call and
    the parameters' graphs never grow from step to step; ``False`` keeps them lazy.
    ``fuse``: where the backend has an elementwise compiler (``ember.backend.fuser``:
    NumPy with numexpr, the ``fuse`` extra; CuPy on a GPU), graphs of elementwise ops
    run as one call each; their results may then differ from eager ones in the last bits
    (other kernels compute ``sin``, ``exp``, ...); ``False`` replays the backend's own
    calls, bitwise equal to eager. It also runs a matrix product that a dying array
    accumulates (an SGD step's ``w - lr * (x.T @ g)``) as one BLAS ``gemm`` into that
    array where the backend has one (``ember.backend.gemm``), rounding once where the
    separate calls round twice, and on NumPy a stacked product of small matrices reads a
    C-contiguous copy of a transposed right operand (BLAS's other kernel).

    >>> import ember, ember.autodiff.numpy as xp
    >>> f = ember.jit(lambda x: xp.sum(xp.sin(x) ** 2))
    >>> round(float(f(xp.asarray([1.0, 2.0]))), 6)
    1.534895
    >>> f.trace_count
    1
    """
    if f is None:
        return lambda g: jit(g, static_argnums=static_argnums, donate=donate, persist=persist, fuse=fuse)
    static, donated = _argnums(static_argnums, "static_argnums"), _argnums(donate, "donate")
    _check_positions(f, static, "static_argnums")
    _check_positions(f, donated, "donate")
    return Jitted(f, static, donated, persist, fuse)


class _Static:
    """Placeholder of a static argument inside the traced arguments."""

    __slots__ = ()


_STATIC = _Static()


def _number_key(x):
    """A Python number as a key of the graphs traced for it: a float zero with its sign
    (``0.0 == -0.0``, but ``x * 0.0`` and ``x * -0.0`` differ), and a NaN by its sign alone
    (no NaN equals another, so as itself it matched no key: each call traced again and
    kept one more graph; ``copysign`` reads the sign)."""
    if x.__class__ is float:
        if x == 0:
            return (x, math.copysign(1.0, x))
        if x != x:
            return ("nan", math.copysign(1.0, x))
    return x


def _static_key(v):
    """A static argument as a cache key: its numbers keyed as :func:`_number_key` keys them,
    inside tuples too (``(0.0,)`` and ``(-0.0,)`` differ; ``(nan,)`` finds its graph)."""
    c = v.__class__
    if c is float:
        return _number_key(v)
    if c is complex:
        return (c, _number_key(v.real), _number_key(v.imag))
    if isinstance(v, tuple):
        return (c, tuple(_static_key(e) for e in v))
    return v


def _is_number(x) -> bool:
    c = x.__class__
    return c is int or c is float


class _Base:
    """The graphs of a signature apart from its Python numbers' values: per values of the
    numbers it does not trace, a list of graphs (one per outcome of their guards); the
    leaf positions it traces as numbers; the numbers' values at the latest trace; and
    whether its numbers must stay static (their guards kept failing)."""

    __slots__ = ("graphs", "dynamic", "last", "static_only")

    def __init__(self, nums):
        self.graphs: dict = {}
        self.dynamic = frozenset()
        self.last = dict(nums)
        self.static_only = False

    def key(self, nums) -> tuple:
        """The values of the numbers that are part of the signature."""
        if not nums:
            return ()
        dyn = self.dynamic
        return tuple([v for j, v in nums if j not in dyn]) if dyn else tuple([v for _, v in nums])


class _Compiled:
    """One signature's graph and replay function, and how to rebuild the outputs."""

    __slots__ = ("graph", "fn", "src", "check", "in_idx", "num_idx", "out_def", "out_kinds", "out_disp",
                 "donated", "written", "name", "persist", "wrap", "take")

    def run(self, vals):
        outs = self.fn(*vals)
        if self.persist:  # lazy backend: this call's graph, computed and kept (one persist)
            outs = persist(tuple(outs))
        return self.wrap(outs)


class Lowered:
    """What ``jit(f).lower(*args)`` returns: the staged graph of one signature.

    ``str(lowered)`` lists the ops (after the passes) with each result's dtype
    and shape; ``lowered.source`` is the generated replay function.
    """

    def __init__(self, compiled: _Compiled):
        self._c = compiled

    @property
    def source(self) -> str:
        return self._c.src

    @property
    def ops(self) -> int:
        return len(self._c.graph.ops)

    def __str__(self) -> str:
        return describe(self._c.graph, self._c.name)

    __repr__ = __str__


class Jitted:
    """A jit-compiled function (see :func:`jit`); ``trace_count`` counts the traces so far."""

    def __init__(self, f: Callable, static_argnums: tuple, donate: tuple, persist: bool = True,
                 fuse: bool = True):
        self._f = f
        self._persist = persist
        self._fuse = fuse
        self._static = static_argnums
        self._donate = donate
        self._cache: dict = {}  # signature without the numbers' values -> _Base
        # (signature, the numbers' values) -> a graph that traces none of them: the first
        # look of every call
        self._fast: dict = {}
        self._scalar_retraces = 0
        self._last_def = None  # (treedef, repeated) of the latest call's arguments
        self._entry = None  # (treedef, compiled) of the latest call, once its structure repeated
        self.trace_count = 0
        functools.update_wrapper(self, f)
        self._name = getattr(f, "__name__", "f")

    # ------------------------------------------------------------ signature
    def _split(self, args, kwargs):
        n = len(args)
        static = tuple(sorted({i + n if i < 0 else i for i in self._static}))
        skey = []
        dyn = list(args)
        for i in static:
            if i >= n:
                continue
            v = args[i]
            try:
                hash(v)
            except TypeError:
                raise TypeError(UNHASHABLE_STATIC.format(name=self._name, i=i, kind=type(v).__name__)) from None
            skey.append((i, v.__class__, _static_key(v)))
            dyn[i] = _STATIC
        tree = (tuple(dyn), kwargs)
        last = self._last_def  # (treedef, whether two calls in a row had it)
        if last is not None and last[1]:
            # a structure that repeats: checked in straight-line code made once for it
            leaves = last[0].leaves_of(tree, _is_number)
            if leaves is not None:
                return leaves, last[0], tuple(skey)
        leaves, treedef = _tree.flatten(tree, is_leaf=_is_number)
        self._last_def = (treedef, last is not None and last[0] == treedef)
        return leaves, treedef, tuple(skey)

    def _parts(self, leaves) -> tuple:
        """Per leaf: its class, and an array's shape and dtype; and the Python numbers'
        values, in order (a graph that traces none of them is keyed by them too)."""
        parts = []
        nums = []
        for x in leaves:
            c = x.__class__
            if c is Owned or c is Dead:
                check_alive(x, f"jit({self._name})") if c is Dead else None
                v = x._value
                parts.append((c, v.__class__, x._mod._dispatch.T, tuple(v.shape), v.dtype))
                continue
            if isinstance(x, Tensor):
                v = x._value
                while v.__class__ is not None and isinstance(v, Tensor):
                    v = v._value
                parts.append((c, tuple(v.shape), v.dtype))
            elif c is int or c is float:
                parts.append(c)
                nums.append(_number_key(x))
            else:
                parts.append((c, tuple(x.shape), x.dtype))
        return tuple(parts), tuple(nums)

    # ------------------------------------------------------------ calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if active_traces:  # under a transform (grad(jit(f))), or inside another jit: inline f
            return self._f(*args, **kwargs)
        e = self._entry
        if e is not None:  # the last call's structure and graph, checked in generated code
            leaves = e[0].leaves_of((args, kwargs), _is_number)
            if leaves is not None:
                vals = e[1].take(leaves)
                if vals is not None:
                    return e[1].run(vals)
        leaves, treedef, base, nums = self._signature(args, kwargs)
        c = self._fast.get((base, nums))
        if c is None:
            c = self._lookup(args, kwargs, leaves, treedef, base, nums)
        self._entry = None
        last = self._last_def
        if last is not None and last[1] and last[0] is treedef and not self._static:
            if c.take is False:  # (a structure that repeats: worth generating the check)
                c.take = taker(leaves, c.in_idx, c.num_idx, c.check, c.donated, c.written, donate, _where,
                               functools.partial(_hand_over, c), f"jit({self._name})", _number_key)
            if c.take is not None:
                self._entry = (treedef, c)
        return c.run(self._values(leaves, c))

    def _signature(self, args, kwargs) -> tuple:
        """``(leaves, treedef, base, nums)``: the leaves (Python numbers among them), the
        signature without the numbers' values, and those values."""
        leaves, treedef, skey = self._split(args, kwargs)
        parts, nums = self._parts(leaves)
        return leaves, treedef, (treedef, skey, parts), nums

    def _lookup(self, args, kwargs, leaves, treedef, base, values) -> "_Compiled":
        """The graph for these arguments (traced if none fits); one that traces no number
        is also kept under ``(base, values)``, the key of the next call's first look."""
        nums = [(j, _number_key(x)) for j, x in enumerate(leaves) if _is_number(x)]
        b = self._cache.get(base)
        if b is not None:
            graphs = b.graphs.get(b.key(nums))
            if graphs is not None:
                for c in graphs:
                    if c.check is None or c.check(*[leaves[j] for j in c.num_idx]):
                        return c
        c = self._compiled_for(base, b, nums, args, kwargs, leaves, treedef)
        if not c.num_idx:
            if len(self._fast) >= CACHE_SIZE:
                del self._fast[next(iter(self._fast))]
            self._fast[(base, values)] = c
        return c

    def signatures(self) -> int:
        """How many signatures have graphs in the cache."""
        return sum(len(b.graphs) for b in self._cache.values())

    def _compiled_for(self, base, b, nums, args, kwargs, leaves, treedef) -> "_Compiled":
        """Trace for a new signature or guard outcome. A signature seen before with other
        Python numbers traces the numbers that changed from then on; the cache keeps the
        latest ``CACHE_SIZE`` signatures; tracing again only because numbers changed (whose
        values the function uses) warns once after a few."""
        if b is None:
            if self.signatures() >= CACHE_SIZE:
                del self._cache[next(iter(self._cache))]  # the oldest signatures
            b = self._cache[base] = _Base(nums)
        else:
            changed = () if b.static_only else {
                j for j, v in nums if j not in b.dynamic and b.last.get(j, v) != v}
            if changed:
                b.dynamic = b.dynamic | changed
                b.graphs = {}  # (keyed by these numbers' values)
            else:
                self._scalar_retraces += 1
                if self._scalar_retraces == RETRACE_WARN_AFTER:
                    warnings.warn(SCALAR_RETRACES.format(name=self._name, n=self._scalar_retraces),
                                  RetraceWarning, stacklevel=4)
            b.last = dict(nums)
        key = b.key(nums)
        graphs = b.graphs.get(key)
        if graphs is not None and len(graphs) >= MAX_GUARDED:  # each value needs its own graph
            b.static_only, b.dynamic, b.graphs = True, frozenset(), {}
            key, graphs = b.key(nums), None
        if graphs is None:
            if len(b.graphs) >= CACHE_SIZE:
                del b.graphs[next(iter(b.graphs))]  # the oldest values
            graphs = b.graphs[key] = []
        c = self._compile(args, kwargs, leaves, treedef, b.dynamic)
        graphs.append(c)
        return c

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """The staged graph for these arguments' signature (traced if not cached yet)."""
        return Lowered(self._lookup(args, kwargs, *self._signature(args, kwargs)))

    def _donated_leaves(self, args, leaves, treedef) -> set:
        """Indices (in ``leaves``) of the Tensor leaves of donated arguments: a raw backend
        array is the caller's and never written, a consumed value (``ember.consume(x)``) is
        handed over without reuse (its buffer may be shared)."""
        if not self._donate:
            return set()
        n = len(args)
        want = {i + n if i < 0 else i for i in self._donate}
        static = {i + n if i < 0 else i for i in self._static}
        out = set()
        k = 0
        for i, a in enumerate(args):  # (the leaves of (args, kwargs) are each argument's, in order)
            m = 0 if i in static else len(_tree.flatten(a, is_leaf=_is_number)[0])
            if i in want:
                out.update(j for j in range(k, k + m) if _donatable(leaves[j]))
            k += m
        return out

    def _values(self, leaves, c: _Compiled) -> list:
        """The graph's inputs: the backend arrays of ``leaves`` (consuming the donated ones)
        and the traced numbers."""
        vals = []
        spent = []  # graph inputs of the donated leaves
        where = None
        given: dict = {}  # id of a donated Tensor -> its handle (one given twice is donated once)
        op = f"jit({self._name})"
        for j in c.in_idx:
            x = leaves[j]
            cl = x.__class__
            if cl is Owned:
                t = as_operand(x, op)
                v = t._value
            elif cl is Dead and id(x) in given:  # (donated at an earlier leaf of this call)
                v = given[id(x)]._value
                if j in c.written:  # (the hand-over copies a buffer given twice)
                    spent.append((len(vals), None))
            elif isinstance(x, Tensor):
                if cl is Dead:
                    check_alive(x, op)
                if j in c.donated:
                    if where is None:  # (the caller's line, once per call)
                        where = _where(2)
                    t = donate(x, op, where)
                    given[id(x)] = t
                    v = t._value
                    if j in c.written:
                        spent.append((len(vals), t))
                    t = None
                else:
                    v = x._value
                    while isinstance(v, Tensor):
                        v = v._value
            else:
                v = x
            vals.append(v)
        v = t = given = None  # (the hand-over counts the references to each buffer)
        if spent:
            _hand_over(c, vals, spent)
        return vals

    # ------------------------------------------------------------ tracing
    def _compile(self, args, kwargs, leaves, treedef, dynamic) -> _Compiled:
        """Trace ``f`` for these leaves; the numbers at the positions in ``dynamic`` are traced."""
        self.trace_count += 1
        trace = StagingTrace()
        staged = []
        in_idx, num_idx = [], []
        raw_only = None
        mods = {}
        for j, x in enumerate(leaves):
            if x.__class__ is int or x.__class__ is float:
                if j in dynamic:
                    in_idx.append(j)
                    num_idx.append(j)
                    x = trace.add_number(x)
                staged.append(x)
                continue
            in_idx.append(j)
            if isinstance(x, Tensor):
                if x.__class__ is Dead:
                    check_alive(x, f"jit({self._name})")
                mod = x._ns if x.__class__ is not Owned else x._mod
                v = x._value
                while isinstance(v, Tensor):
                    v = v._value
                raw_only = False
            else:
                mod = namespace(x)
                v = x
                raw_only = True if raw_only is None else raw_only
            d = mod._dispatch
            mods[id(mod)] = mod
            staged.append(trace.add_input(v, d, mod))
        targs, tkw = treedef.unflatten(staged)
        targs = list(targs)
        for i, a in enumerate(targs):
            if a is _STATIC:
                targs[i] = args[i]
        try:
            with contextlib.ExitStack() as unseen:
                for m in mods.values():  # rules must not branch on values while staging
                    unseen.enter_context(m._dispatch.unseen_values())
                with trace:
                    res = self._f(*targs, **tkw)
        finally:
            trace.release()
        g = trace.graph
        out_leaves, out_def = _tree.flatten(res, is_leaf=_is_traced)
        kinds, disp, outputs = [], [], []
        for o in out_leaves:
            if isinstance(o, TracedNumber):  # a Python number at each call (the step counter)
                outputs.append(Ref(o._slot) if o._trace is trace else o._v)
                kinds.append(2)
                disp.append(None)
            elif isinstance(o, Tensor):
                check_alive(o, f"jit({self._name}) output")
                ref = trace.lift(o)
                outputs.append(ref)
                kinds.append(0 if raw_only else 1)
                disp.append(type(o)._ns._dispatch)
            elif hasattr(o, "shape") and hasattr(o, "dtype"):
                outputs.append(trace.lift(o))
                kinds.append(0)
                disp.append(None)
            else:
                outputs.append(o)
                kinds.append(2)
                disp.append(None)
        g.outputs = outputs
        staged = [g.values[o.slot] if o.__class__ is Ref else None for o in outputs]
        donated_leaves = self._donated_leaves(args, leaves, treedef)
        pos = {j: i for i, j in enumerate(in_idx)}  # leaf index -> graph input
        donated_slots = {g.inputs[pos[j]] for j in donated_leaves}
        run_passes(g, donated_slots, self._fuse)
        g.copies = {i: _copier(g, g.outputs[i]) for i in separate_outputs(g, donated_slots, staged)}
        c = _Compiled()
        c.graph = g
        c.fn, c.src, c.check = compile_graph(g, self._name)
        c.in_idx, c.num_idx = in_idx, num_idx
        c.out_def = out_def
        c.out_kinds = kinds
        c.out_disp = disp
        c.donated = donated_leaves
        c.written = {j for j in donated_leaves if g.inputs[pos[j]] in g.written}
        c.name = self._name
        c.persist = self._persist and any(d is not None and d.caps.lazy for d in disp)
        c.wrap = wrapper(kinds, disp, out_def)
        c.take = False  # (made when a call's structure repeats: see __call__)
        # free the staging values no longer needed (the graph keeps shapes via `values`: keep
        # only small specs of the slots that are not constants)
        g.values = [_Spec(v) for v in g.values]
        return c


def _hand_over(c: _Compiled, vals: list, spent: list) -> None:
    """Give the graph the donated buffers it writes into (``spent``: graph input, consumed
    handle, None for a Tensor given again): a buffer nothing else holds moves to the graph
    (its handle is emptied, as ``run_owned`` does); one someone else holds (a share,
    ``x.raw``, a view) or given twice is replaced by a copy in ``vals``."""
    ids = [id(v) for v in vals]
    for i, t in spent:
        v = vals[i]
        d = c.graph.disp[c.graph.inputs[i]]
        # the holders known here: vals[i], the consumed handle t, v and the `like` argument
        why, _ = reuse_reason(d, v, v, 4)
        if why is not None or ids.count(id(v)) > 1:
            vals[i] = d.raw_ns.asarray(v, copy=True)
        else:
            t._value = None
        v = None


def _copier(g, o):
    """``copy(x)`` for output ``o`` of ``g`` (a Ref, or a constant array)."""
    asarray = (g.disp[o.slot] if o.__class__ is Ref else namespace(o)._dispatch).raw_ns.asarray
    return lambda x: asarray(x, copy=True)


def _donatable(x) -> bool:
    return isinstance(x, Tensor) and x.__class__ is not Owned


def _is_traced(x) -> bool:
    return isinstance(x, TracedNumber)


class _Spec:
    """Shape and dtype of a staging value, kept after compiling (the value is freed); a
    traced number's shape is None and its dtype its Python type's name."""

    __slots__ = ("shape", "dtype")

    def __init__(self, v):
        if hasattr(v, "shape"):
            self.shape = tuple(v.shape)
            self.dtype = v.dtype
        else:
            self.shape = None
            self.dtype = type(v).__name__
