"""``ember.jit``: stage a function once per input signature, then replay backend calls.

``jit(f)(*args)`` flattens the arguments (``ember.tree``); the signature is
the structure with its constants (Python scalars, strings, static fields),
each array's namespace, shape and dtype, and the values of the arguments in
``static_argnums``. The first call with a signature runs ``f`` once under a
staging trace (``ember.autodiff._staging``), which records every op, the
backward passes of transforms inside ``f`` included; the passes of
``_jit_passes`` simplify the graph and plan buffers, and ``_jit_replay``
turns it into one Python function over backend arrays. Later calls with the
same signature only run that function.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Sequence

from .. import tree as _tree
from .._compute import persist
from .._errors import RetraceWarning
from ..autodiff import Tensor, namespace
from ..autodiff._ownership import Dead, Owned, as_operand, check_alive, consume, reuse_reason
from ..autodiff._staging import StagingTrace
from ..autodiff._trace import active_traces
from ._jit_passes import run_passes
from ._jit_replay import compile_graph, describe

__all__ = ["jit", "Jitted", "Lowered"]

UNHASHABLE_STATIC = (
    "jit({name}): the static argument {i} ({kind}) is not hashable; static arguments key the "
    "cache of traced graphs. Pass a hashable value (a tuple instead of a list), or leave it "
    "out of static_argnums to trace its arrays"
)
SCALAR_RETRACES = (
    "jit({name}) traced again {n} times only because Python numbers in its arguments changed "
    "(each value is part of the signature, like an optimizer state's step counter): every call "
    "pays a trace. Pass such values as arrays, mark the argument static if it takes few values, "
    "or jit the part that does not depend on them (jit(value_and_grad(loss)), then opt.update)"
)
#: Signatures kept per jitted function (the oldest traced graph is dropped past it).
CACHE_SIZE = 64
#: Retraces caused only by changed Python numbers before RetraceWarning.
RETRACE_WARN_AFTER = 4
BAD_ARGNUMS = "jit: {what} must be an int or a sequence of ints (argument positions), got {v!r}"


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
        donate: int | Sequence[int] = (), persist: bool = True) -> Any:
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

    >>> import ember, ember.autodiff.numpy as xp
    >>> f = ember.jit(lambda x: xp.sum(xp.sin(x) ** 2))
    >>> round(float(f(xp.asarray([1.0, 2.0]))), 6)
    1.534895
    >>> f.trace_count
    1
    """
    if f is None:
        return lambda g: jit(g, static_argnums=static_argnums, donate=donate, persist=persist)
    return Jitted(f, _argnums(static_argnums, "static_argnums"), _argnums(donate, "donate"), persist)


class _Static:
    """Placeholder of a static argument inside the traced arguments."""

    __slots__ = ()


_STATIC = _Static()


class _Compiled:
    """One signature's graph and replay function, and how to rebuild the outputs."""

    __slots__ = ("graph", "fn", "src", "out_def", "out_kinds", "out_disp", "donated", "name", "persist")

    def run(self, vals):
        outs = self.fn(*vals)
        if self.persist:  # lazy backend: this call's graph, computed and kept (one persist)
            outs = persist(tuple(outs))
        res = []
        for v, kind, d in zip(outs, self.out_kinds, self.out_disp):
            if kind == 1:  # a Tensor
                t = d.T()
                t._value = v
                t._node = None
                res.append(t)
            else:  # raw array or a constant
                res.append(v)
        return self.out_def.unflatten(res)


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

    def __init__(self, f: Callable, static_argnums: tuple, donate: tuple, persist: bool = True):
        self._f = f
        self._persist = persist
        self._static = static_argnums
        self._donate = donate
        self._cache: dict = {}
        self._scalar_retraces = 0
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
            skey.append((i, v.__class__, v))
            dyn[i] = _STATIC
        leaves, treedef = _tree.flatten((tuple(dyn), kwargs))
        return leaves, treedef, tuple(skey)

    def _key(self, leaves, treedef, skey):
        parts = []
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
            else:
                parts.append((c, tuple(x.shape), x.dtype))
        return (treedef, skey, tuple(parts))

    # ------------------------------------------------------------ calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if active_traces:  # under a transform (grad(jit(f))), or inside another jit: inline f
            return self._f(*args, **kwargs)
        leaves, treedef, skey = self._split(args, kwargs)
        key = self._key(leaves, treedef, skey)
        c = self._cache.get(key)
        if c is None:
            c = self._compiled_for(key, args, kwargs, leaves, treedef)
        vals = self._values(leaves, args, c)
        return c.run(vals)

    def _compiled_for(self, key, args, kwargs, leaves, treedef) -> "_Compiled":
        """Trace for a new signature: the cache keeps the latest ``CACHE_SIZE``; tracing again
        only because Python numbers in the arguments changed warns (once) after a few."""
        arrays = key[1:]  # (the tree structure with its Python numbers is key[0])
        if any(k[1:] == arrays for k in self._cache):
            self._scalar_retraces += 1
            if self._scalar_retraces == RETRACE_WARN_AFTER:
                warnings.warn(SCALAR_RETRACES.format(name=self._name, n=self._scalar_retraces),
                              RetraceWarning, stacklevel=3)
        if len(self._cache) >= CACHE_SIZE:
            del self._cache[next(iter(self._cache))]  # the oldest signature
        c = self._cache[key] = self._compile(args, kwargs, leaves, treedef)
        return c

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """The staged graph for these arguments' signature (traced if not cached yet)."""
        leaves, treedef, skey = self._split(args, kwargs)
        key = self._key(leaves, treedef, skey)
        c = self._cache.get(key)
        if c is None:
            c = self._compiled_for(key, args, kwargs, leaves, treedef)
        return Lowered(c)

    def _donated_leaves(self, args, leaves, treedef) -> set:
        """Indices (in ``leaves``) of the leaves of donated arguments."""
        if not self._donate:
            return set()
        n = len(args)
        want = {i + n if i < 0 else i for i in self._donate}
        static = {i + n if i < 0 else i for i in self._static}
        out = set()
        k = 0
        for i, a in enumerate(args):  # (the leaves of (args, kwargs) are each argument's, in order)
            m = 0 if i in static else len(_tree.flatten(a)[0])
            if i in want:
                out.update(range(k, k + m))
            k += m
        return out

    def _values(self, leaves, args, c: _Compiled) -> list:
        """The backend arrays of ``leaves`` (consuming the donated ones)."""
        vals = []
        op = f"jit({self._name})"
        for j, x in enumerate(leaves):
            cl = x.__class__
            if cl is Owned:
                t = as_operand(x, op)
                v = t._value
            elif isinstance(x, Tensor):
                if cl is Dead:
                    check_alive(x, op)
                if j in c.donated:
                    t = as_operand(consume(x, _depth=3), op)
                    v = t._value
                    t = None
                else:
                    v = x._value
                    while isinstance(v, Tensor):
                        v = v._value
            else:
                v = x
            vals.append(v)
        if c.donated:
            for j in c.donated:
                v = vals[j]
                d = c.graph.disp[c.graph.inputs[j]]
                # the buffer is written only if nothing else holds it (a share, x.raw, a view)
                why, _ = reuse_reason(d, v, v, 2)
                if why is not None or any(vals[k] is v for k in range(len(vals)) if k != j):
                    vals[j] = d.raw_ns.asarray(v, copy=True)
                v = None
        return vals

    # ------------------------------------------------------------ tracing
    def _compile(self, args, kwargs, leaves, treedef) -> _Compiled:
        self.trace_count += 1
        trace = StagingTrace()
        staged = []
        raw_only = None
        mods = {}
        for x in leaves:
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
        saved = {k: m._cheap_any for k, m in mods.items()}
        try:
            for m in mods.values():  # rules must not branch on values while staging
                m._cheap_any = m._dispatch.raw_ns._cheap_any = False
            with trace:
                res = self._f(*targs, **tkw)
        finally:
            for k, m in mods.items():
                m._cheap_any = m._dispatch.raw_ns._cheap_any = saved[k]
            trace.release()
        g = trace.graph
        out_leaves, out_def = _tree.flatten(res)
        kinds, disp, outputs = [], [], []
        for o in out_leaves:
            if isinstance(o, Tensor):
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
        donated_leaves = self._donated_leaves(args, leaves, treedef)
        run_passes(g, {g.inputs[j] for j in donated_leaves})
        c = _Compiled()
        c.graph = g
        c.fn, c.src = compile_graph(g, self._name)
        c.out_def = out_def
        c.out_kinds = kinds
        c.out_disp = disp
        c.donated = donated_leaves
        c.name = self._name
        c.persist = self._persist and any(d is not None and d.caps.lazy for d in disp)
        # free the staging values no longer needed (the graph keeps shapes via `values`: keep
        # only small specs of the slots that are not constants)
        g.values = [_Spec(v) for v in g.values]
        return c


class _Spec:
    """Shape and dtype of a staging value, kept after compiling (the value is freed)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, v):
        self.shape = tuple(v.shape)
        self.dtype = v.dtype
