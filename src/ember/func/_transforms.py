"""Reverse-mode transforms over structures: grad, value_and_grad, vjp.

A transform opens a :class:`~ember.autodiff.Trace`, wraps every floating
array leaf of the differentiated arguments as a tracked tensor, calls the
function, and runs the backward pass. Arguments may be any structure
``ember.tree`` knows (tensors, lists, tuples, dicts, None, registered
dataclasses, namedtuples); the gradient has the same structure, with
constants (Python scalars, strings, static fields, integer arrays) kept as
they are.

Raw backend arrays (e.g. NumPy) are accepted too: inside the function they
are ember Tensors, and their gradients come back as raw arrays of the same
library, so plain NumPy model code can be differentiated.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Sequence

from .. import tree as _tree
from .._errors import NotDifferentiableError
from ..autodiff import Tensor, namespace
from ..autodiff._ownership import Owned as _Owned
from ..autodiff._ownership import as_operand as _as_operand
from ..autodiff._ownership import share as _share
from ..kernels import shapes_fit
from ..autodiff._tensor import raw_value
from ..autodiff._trace import (
    LeafNode,
    Trace,
    _backward_raw,
    active_traces,
    backward,
    backward_quiet,
    quiet_gc,
)

__all__ = ["grad", "value_and_grad", "vjp", "stop_gradient"]

CHECKPOINTING = ("none", "balanced", "segments")
NON_SCALAR = (
    "{op}: the function returned an array of shape {shape}; {op} needs a scalar (0-d) "
    "output. Reduce it (e.g. xp.sum(y)) or use ember.vjp(f, x) to pull back a "
    "cotangent of shape {shape}"
)
NOT_ARRAY = (
    "{op}: the function returned {what}; {op} needs a 0-d floating-point array. Return "
    "an array computed from the inputs (e.g. xp.sum(...))"
)

NOT_REAL_OUTPUT = (
    "{op}: the function returned a 0-d array of dtype {dtype}; grad needs a real floating-point "
    "scalar output. {fix}"
)
INTEGER_OUTPUT_FIX = (
    "An integer or bool value has no derivative (its gradient would be zeros): compute the "
    "value in floating point (e.g. xp.astype(x, xp.float64) before the integer step)"
)
COMPLEX_OUTPUT_FIX = (
    "For a complex value say which real function to differentiate, e.g. xp.real(y) or "
    "xp.abs(y), or use ember.vjp(f, x) with a complex cotangent"
)
NOT_DIFFERENTIABLE_ARG = (
    "{op}: argument {i} ({what}) has no floating-point array to differentiate; gradients are "
    "defined for real or complex floating inputs only. Fix: pass floating arrays (e.g. "
    "xp.astype(x, xp.float64)), or leave this argument out of argnums to keep it a constant"
)
NOTHING_TO_DIFFERENTIATE = (
    "vjp: no argument holds a floating-point array ({whats}), so there is nothing to "
    "differentiate and every cotangent would be an input returned as it is. Fix: pass floating "
    "arrays (e.g. xp.astype(x, xp.float64)), or call f directly"
)
PYTHON_NUMBERS_ARG = (
    "{op}: argument {i} is a {kind} of Python numbers with no array in it; a structure keeps "
    "Python numbers as constants, so their gradient would be the numbers themselves. Fix: "
    "make them an array (xp.asarray(...)) and differentiate that, or pass each number as an "
    "argument of its own (a lone Python float is differentiated, as a 0-d array)"
)
BAD_ARGNUMS = (
    "{op}: argnums must be an int or a sequence of ints (positions of f's positional "
    "arguments), got {argnums!r}"
)
ARGNUM_RANGE = (
    "{op}: argnums includes {i} but the function was called with {n} positional arguments. "
    "Fix: pass the argument positionally, or change argnums"
)


class _Leaf:
    """Bookkeeping for one differentiated leaf: its value one level down, its tape node, and
    the handle the function receives (it may consume that one; the tape keeps ``inner``)."""

    __slots__ = ("inner", "node", "raw_input", "handle")

    def __init__(self, inner, node, raw_input, handle):
        self.inner = inner
        self.node = node
        self.raw_input = raw_input
        self.handle = handle


def taken_over(x):
    """``x``, or for a ``consume(x)`` marker the Tensor a transform gets when it takes the
    buffer over (x is dead afterwards, as after any op that consumes it)."""
    if x.__class__ is _Owned:
        return _as_operand(x, "a transform (grad, vjp, jvp)")
    return x


def _track(x, trace: Trace) -> _Leaf | None:
    """Tracked version of array leaf ``x`` at ``trace``, or None if it is not floating.

    ``_trace_args`` does this itself for live Tensors (the usual leaf), inline.
    """
    raw_input = not isinstance(x, Tensor)
    if raw_input:
        t = namespace(x).asarray(x)
    elif x.__class__ is _Owned:  # consume(x): the transform takes x's buffer over
        t = taken_over(x)
    else:  # dead tensors: share() says what is wrong
        t = _share(x)
    d = type(t)._ns._dispatch
    if not d.is_differentiable(t):
        return None
    node = LeafNode(trace, d.module)
    return _Leaf(t, node, raw_input, d.make(t, node))


def _lower(x, trace: Trace):
    """``x`` with this trace's level removed (values one level down)."""
    if isinstance(x, Tensor) and x._node is not None and x._node.trace is trace:
        v = x._value  # a fresh handle: a retained tape keeps its own (ownership)
        h = v.__class__()  # (v's own class: a vmap's batched value stays batched)
        h._value = v._value
        h._node = v._node
        return h
    return x


def _trace_args(args, argnums, trace):
    """Replace the arrays of ``args[argnums]`` by tracked tensors; return bookkeeping.

    Returns ``(args, per_arg, raw_only)``: ``raw_only`` says every tracked leaf
    came in as a raw backend array (at least one did), so results go back raw.
    """
    args = list(args)
    per_arg = []
    raw_only = None
    new = object.__new__
    for i in argnums:
        if i >= len(args) or i < -len(args):
            raise NotDifferentiableError(ARGNUM_RANGE.format(op="grad", i=i, n=len(args)))
        a = args[i]
        if a.__class__ is float or a.__class__ is complex:  # differentiated, as a 0-d array
            args[i] = a = _scalar_array(a, args)
        if isinstance(a, Tensor):  # one tensor: no structure to walk
            leaves, treedef = [a], None
        else:
            leaves, treedef = _tree.flatten(a)
        tracked = []
        handles = []
        for x in leaves:
            c = x.__class__
            ns = getattr(c, "_ns", None)
            # a live Tensor (the usual case), inline (a consume() marker's class has _ns as a
            # property: it takes _track, where the transform takes the marker's buffer over)
            if ns is not None and c is getattr(ns, "_Tensor", None):
                ok = ns._dispatch.floating.get(x._value.dtype)
                if ok is None:
                    ok = ns._dispatch.is_differentiable(x)
                if not ok:
                    tracked.append(None)
                    handles.append(x)
                    continue
                # the tape and the function get fresh handles, never the caller's (ownership)
                t = c()
                t._value = x._value
                t._node = x._node
                node = new(LeafNode)  # (the __init__s' stores inline: one call fewer each)
                node.g = None
                node.trace = trace
                node.ns = ns
                h = c()
                h._value = t
                h._node = node
                leaf = new(_Leaf)
                leaf.inner, leaf.node, leaf.raw_input, leaf.handle = t, node, False, h
                tracked.append(leaf)
                handles.append(h)
                raw_only = False
                continue
            t = _track(x, trace)
            tracked.append(t)
            if t is None:
                handles.append(x)
            else:
                handles.append(t.handle)
                raw_only = t.raw_input if raw_only is None else raw_only and t.raw_input
        args[i] = handles[0] if treedef is None else _tree.unflatten(treedef, handles)
        per_arg.append((treedef, leaves, tracked))
    return args, per_arg, bool(raw_only)


def _scalar_array(a, args):
    """Python float or complex ``a`` as a 0-d array of the namespace of the other arguments'
    arrays (NumPy's if there are none), so it is differentiated as JAX does, not kept as a
    constant; its gradient comes back as a 0-d Tensor."""
    for x in _tree.leaves(args):
        if isinstance(x, Tensor):
            return type(x)._ns.asarray(a)
        if hasattr(x, "__array_namespace__") and hasattr(x, "dtype"):
            return namespace(x).asarray(a)
    return namespace("numpy").asarray(a)


def _python_numbers(a, depth: int = 0) -> bool:
    """Whether list/tuple/dict structure ``a`` holds a Python int, float or complex (not bool)."""
    if depth > 100:
        return False
    if isinstance(a, (list, tuple)):
        return any(_python_numbers(x, depth + 1) for x in a)
    if isinstance(a, dict):
        return any(_python_numbers(x, depth + 1) for x in a.values())
    return a.__class__ in (int, float, complex) and depth > 0


def _check_differentiable(op, nums, args, per_arg):
    """Raise where an argument in argnums is an int, a bool or a structure whose arrays are
    all integer or bool: its "gradient" would be the input itself, as if it were constant.

    A structure with floating leaves keeps its other leaves as constants, and one without
    array leaves at all (None, an empty list, static fields only) is kept as it is.
    """
    for i, (treedef, leaves, tracked) in zip(nums, per_arg):
        a = args[i]
        if not leaves and _python_numbers(a):  # [1.0, 2.0]: constants, returned as "gradient"
            raise NotDifferentiableError(PYTHON_NUMBERS_ARG.format(op=op, i=i, kind=type(a).__name__))
        if (leaves or a.__class__ in (int, bool)) and all(t is None for t in tracked):
            what = (f"an array of dtype {a.dtype}" if hasattr(a, "dtype")
                    else f"the Python {type(a).__name__} {a!r}" if a.__class__ in (int, bool)
                    else f"a {type(a).__name__}" if not hasattr(a, "__len__")
                    else f"a {type(a).__name__} of {len(leaves)} leaves, none floating")
            raise NotDifferentiableError(NOT_DIFFERENTIABLE_ARG.format(op=op, i=i, what=what))


def _gradients(per_arg, unused):
    out = []
    for treedef, leaves, tracked in per_arg:
        gs = []
        for x, t in zip(leaves, tracked):
            if t is None:
                gs.append(x)  # constants keep their value
                continue
            g = t.node.g
            if g is not None and not isinstance(g, Tensor):  # a backend array, from the raw backward
                r = t.inner._value  # the leaf's backend array
                if g.__class__ is r.__class__ and g.dtype == r.dtype and g.shape == r.shape:
                    gs.append(g if t.raw_input else t.inner._ns._dispatch.make(g, None))
                    continue
            gs.append(leaf_gradient(t, g, unused))
        out.append(gs[0] if treedef is None else _tree.unflatten(treedef, gs))
    return out


def leaf_gradient(t: _Leaf, g: Any, unused: str) -> Any:
    """The gradient of tracked leaf ``t`` from its node's ``g``, in the leaf's own form.

    Zeros (or None with ``unused="none"``) where the function did not use the
    leaf; fitted to the leaf's shape and dtype; raw where the leaf came in raw.
    """
    if g is None:
        if unused == "none":
            return None
        g = type(t.inner)._ns.zeros_like(t.inner)
    elif not isinstance(g, Tensor):
        g = t.inner._ns._wrap(g)
    if g.dtype != t.inner.dtype or g.shape != t.inner.shape:
        g = _fit_leaf(g, t.inner)
    return raw_value(g) if t.raw_input else g


def _ones_like(value):
    """The seed cotangent of ``value``: ones of its shape and dtype, untracked (for a value
    batched by vmap, of one example's shape: the same seed for every example)."""
    ns = value._ns
    r = raw_value(value)
    if r.ndim != value.ndim:  # batched at some level (the backend array holds the batch)
        return ns.ones(value.shape, dtype=value.dtype, device=value.device)
    return ns._wrap(ns._dispatch.ones_like(r))


def _fit_leaf(g, x):
    ns = type(x)._ns
    if g.shape != x.shape and not shapes_fit(g.shape, x.shape):  # (NaN-sized: fits)
        g = ns.broadcast_to(g, x.shape)
    if g.dtype != x.dtype:
        g = ns.astype(g, x.dtype)
    return g


def _check_options(op, checkpointing, unused):
    if checkpointing not in CHECKPOINTING:
        raise ValueError(
            f"{op}: checkpointing must be one of {CHECKPOINTING}, not {checkpointing!r}"
        )
    if unused not in ("zeros", "none"):
        raise ValueError(f"{op}: unused must be 'zeros' or 'none', not {unused!r}")


def _normalize_argnums(argnums, op="grad"):
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        return (argnums,), True
    try:
        nums = tuple(argnums)
    except TypeError:
        nums = None
    if not nums or not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
        raise NotDifferentiableError(BAD_ARGNUMS.format(op=op, argnums=argnums))
    return nums, False


def _distinct(nums, n):
    """``nums`` with negative positions made non-negative (for ``n`` arguments) and repeats
    dropped, in order; out-of-range positions are kept for _trace_args to report."""
    out = []
    for i in nums:
        j = i + n if -n <= i < 0 else i
        if j not in out:
            out.append(j)
    return tuple(out)


def _repeat(grads, distinct, nums, n):
    """One gradient per entry of ``nums`` (a repeated position gets the full gradient again,
    as a second handle so consuming one never kills the other)."""
    out, seen = [], set()
    for i in nums:
        j = distinct.index(i + n if -n <= i < 0 else i)
        g = grads[j]
        out.append(_tree.map(lambda a: _share(a) if isinstance(a, Tensor) else a, g) if j in seen else g)
        seen.add(j)
    return out


def value_and_grad(
    f: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    *,
    unused: str = "zeros",
    checkpointing: str = "none",
) -> Callable:
    """Make a function returning ``(f(*args), gradient of f w.r.t. args[argnums])``.

    ``f`` must return a 0-d floating tensor (or ``(value, aux)`` with
    ``has_aux=True``, giving ``((value, aux), grad)``). The gradient has the
    structure of the differentiated argument; leaves ``f`` does not use get
    zeros, or ``None`` with ``unused="none"``.

    >>> import ember, ember.autodiff.numpy as xp
    >>> v, g = ember.value_and_grad(lambda x: xp.sum(x * x))(xp.asarray([1.0, 2.0]))
    >>> float(v), g.raw.tolist()
    (5.0, [2.0, 4.0])
    """
    nums, single = _normalize_argnums(argnums, "value_and_grad")
    _check_options("value_and_grad", checkpointing, unused)
    op = f"value_and_grad({getattr(f, '__name__', 'f')}, has_aux=True)"

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        n = len(args)
        distinct = nums if single else _distinct(nums, n)
        value, aux, per_arg, raw_only = forward_backward(op, f, distinct, has_aux, checkpointing, args, kwargs)
        grads = _gradients(per_arg, unused)
        if len(distinct) != len(nums):  # argnums repeats a position: each entry gets its gradient
            grads = _repeat(grads, distinct, nums, n)
        g = grads[0] if single else tuple(grads)
        return ((value, aux), g) if has_aux else (value, g)

    return wrapped


def forward_backward(op, f, nums, has_aux, checkpointing, args, kwargs):
    """Run ``f(*args, **kwargs)`` with ``args[nums]`` traced, then the backward pass.

    Returns ``(value, aux, per_arg, raw_only)`` (see :func:`_trace_args`): the
    leaves' nodes hold the gradients in ``node.g`` (backend arrays from the raw
    backward pass, Tensors, or None where unused). ``value`` is raw when every
    traced leaf came in raw. Shared by ``value_and_grad`` and
    ``ember.training.train_step``.
    """
    with quiet_gc:  # once around recording and backward (each would enter it)
        trace = Trace(checkpointing)
        trace.active = True  # (Trace.__enter__/__exit__ inline, without their quiet_gc)
        active_traces.append(trace)
        try:
            try:
                targs, per_arg, raw_only = _trace_args(args, nums, trace)
                _check_differentiable("grad", nums, args, per_arg)
                res = f(*targs, **kwargs)
            finally:
                active_traces.remove(trace)
                trace.active = False
            aux = None
            if has_aux:
                if not (isinstance(res, (tuple, list)) and len(res) == 2):
                    raise TypeError(
                        f"{op}: the function must return a pair (value, aux), got {type(res).__name__}"
                    )
                res, aux = res
                aux = _tree.map(lambda a: _lower(a, trace), aux)
            value = _scalar_output("grad", res, trace)
            node = value._node if isinstance(value, Tensor) else None
            if node is not None and node.trace is trace:
                value = value._value
                if value._node is None and trace.level == 1 and trace.remat is None:
                    # the usual first-order case: backward_quiet's choice (the raw loop) made
                    # here, its seed of ones built inline (six Python calls fewer a step)
                    seed = value._ns._Tensor()
                    seed._value = value._ns._dispatch.ones_like(value._value)
                    seed._node = None
                    _backward_raw(trace, [(node, seed)], False)
                else:
                    backward_quiet(trace, [(node, _ones_like(value))])
        finally:  # backward freed the tape as it went; not run (an error, a constant value): free it
            if trace.nodes:
                trace.release()
    if raw_only and isinstance(value, Tensor):
        value = raw_value(value)
    return value, aux, per_arg, raw_only


def _scalar_output(op, res, trace):
    if isinstance(res, Tensor):
        if res.ndim != 0:
            raise NotDifferentiableError(NON_SCALAR.format(op=op, shape=res.shape))
        ns = type(res)._ns
        if res.dtype not in ns._dispatch.real_floats:  # (float64 and float32 by identity: the
            # backend's isdtype costs more than the rest of a small grad call's checks)
            _real_floating_output(op, res.dtype, ns)
        return res
    if isinstance(res, (int, float)) and not isinstance(res, bool):
        return res
    what = f"a {type(res).__name__}"
    if hasattr(res, "shape"):
        if len(res.shape) != 0:
            raise NotDifferentiableError(NON_SCALAR.format(op=op, shape=tuple(res.shape)))
        if hasattr(res, "__array_namespace__"):
            _real_floating_output(op, res.dtype, res.__array_namespace__())
        return res
    raise NotDifferentiableError(NOT_ARRAY.format(op=op, what=what))


def _real_floating_output(op, dtype, ns):
    """Raise unless ``dtype`` is real floating: an integer output's gradient would be zeros and
    a complex one's would silently be its real part's."""
    if ns.isdtype(dtype, "real floating"):
        return
    fix = COMPLEX_OUTPUT_FIX if ns.isdtype(dtype, "complex floating") else INTEGER_OUTPUT_FIX
    raise NotDifferentiableError(NOT_REAL_OUTPUT.format(op=op, dtype=dtype, fix=fix))


def grad(
    f: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    *,
    unused: str = "zeros",
    checkpointing: str = "none",
) -> Callable:
    """Make a function returning the gradient of scalar ``f`` w.r.t. ``args[argnums]``.

    Transforms nest: ``grad(grad(f))`` gives the second derivative.

    >>> import ember, ember.autodiff.numpy as xp
    >>> float(ember.grad(ember.grad(lambda x: x ** 3))(xp.asarray(2.0)))
    12.0
    """
    _normalize_argnums(argnums, "grad")  # (named as grad in the error)
    vg = value_and_grad(f, argnums, has_aux, unused=unused, checkpointing=checkpointing)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        (_, aux), g = vg(*args, **kwargs) if has_aux else ((None, None), vg(*args, **kwargs)[1])
        return (g, aux) if has_aux else g

    return wrapped


def vjp(f: Callable, *primals: Any, has_aux: bool = False, checkpointing: str = "none"):
    """Evaluate ``f(*primals)`` and return ``(out, vjp_fn)`` (plus ``aux``).

    ``vjp_fn(cotangent)`` takes a cotangent with the structure of ``out`` and
    returns a tuple with one gradient per primal. It may be called several
    times (e.g. once per row of a Jacobian).

    >>> import ember, ember.autodiff.numpy as xp
    >>> y, pull = ember.vjp(lambda x: x * 3.0, xp.asarray([1.0, 2.0]))
    >>> pull(xp.asarray([1.0, 10.0]))[0].raw.tolist()
    [3.0, 30.0]
    """
    _check_options("vjp", checkpointing, "zeros")
    trace = Trace(checkpointing)
    try:
        with trace:
            targs, per_arg, _ = _trace_args(primals, tuple(range(len(primals))), trace)
            res = f(*targs)
        aux = None
        if has_aux:
            res, aux = res
            aux = _tree.map(lambda a: _lower(a, trace), aux)
    except BaseException:
        trace.release()  # no vjp_fn will own the tape
        raise
    if primals and all(t is None for _, _, ts in per_arg for t in ts):
        trace.release()
        whats = ", ".join(f"dtype {a.dtype}" if hasattr(a, "dtype") else type(a).__name__ for a in primals)
        raise NotDifferentiableError(NOTHING_TO_DIFFERENTIATE.format(whats=whats))
    out_leaves, out_def = _tree.flatten(res)
    all_raw = all(t is None or t.raw_input for _, _, ts in per_arg for t in ts)

    def vjp_fn(cotangent):
        ct_leaves, ct_def = _tree.flatten(cotangent)
        if len(ct_leaves) != len(out_leaves):
            raise ValueError(
                f"vjp: the cotangent has {len(ct_leaves)} arrays but the output has "
                f"{len(out_leaves)}; give one cotangent per output array"
            )
        seeds = []
        for o, c in zip(out_leaves, ct_leaves):
            if isinstance(o, Tensor) and o._node is not None and o._node.trace is trace:
                ns = type(o)._ns
                c = ns.asarray(c) if not isinstance(c, Tensor) else c
                if not shapes_fit(tuple(c.shape), tuple(o.shape)):  # (unknown sizes fit any)
                    raise ValueError(
                        f"vjp: cotangent shape {tuple(c.shape)} does not match the output "
                        f"shape {tuple(o.shape)}; give one of the output's shape (e.g. "
                        "xp.ones_like(out))"
                    )
                seeds.append((o._node, c))
        for _, _, tracked in per_arg:
            for t in tracked:
                if t is not None:
                    t.node.g = None
        backward(trace, seeds, retain=True)
        return tuple(_gradients(per_arg, "zeros"))

    # free the tape (it is cycles) with the last reference to vjp_fn, not at the next GC pass
    weakref.finalize(vjp_fn, trace.release).atexit = False
    out = _tree.map(lambda a: _lower(a, trace), res)
    if all_raw and per_arg:
        out = _tree.map(lambda a: raw_value(a) if isinstance(a, Tensor) else a, out)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def stop_gradient(x):
    """``x`` (any structure) with every tensor cut off from all traces.

    >>> import ember, ember.autodiff.numpy as xp
    >>> float(ember.grad(lambda x: x * ember.stop_gradient(x))(xp.asarray(3.0)))
    3.0
    """

    def cut(a):
        if isinstance(a, Tensor) and a._node is not None:
            return type(a)._ns._wrap(raw_value(a))
        return a

    return _tree.map(cut, x)
