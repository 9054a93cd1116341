"""``ember.lax``: control flow that works eagerly and under ``grad``, ``jit`` and ``vmap``.

Python's ``if`` and ``while`` need a concrete value; under ``ember.jit`` (a
traced Tensor) and ``ember.vmap`` (one value per example) there is none, and
``bool(x)`` raises. These functions take the branch or loop as functions, as
``jax.lax`` does:

- :func:`cond` (and :func:`switch`) runs one branch where the predicate is
  known, and all (combined with ``where``) where it is traced or batched;
- :func:`fori_loop` and :func:`scan` loop a number of times known while
  tracing (jit unrolls them);
- :func:`while_loop` loops while a condition holds; under jit a condition
  on traced values makes the loop one op of the graph.

Everything else is built from the namespace's ops, so gradients flow through
all of them (``while_loop`` too where it runs eagerly, unlike JAX's).
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

from .. import tree as _tree
from .._errors import BatchingError, ShapeError, StructureError, TracingError
from ..autodiff import Tensor
from ..autodiff._batching import is_batched
from ..autodiff._trace import active_traces
from ._jit_passes import run_passes
from ._jit_replay import compile_graph

__all__ = ["cond", "switch", "fori_loop", "while_loop", "scan"]

NOT_SCALAR = "ember.lax.{op}: the {what} must be a scalar (shape ()), got shape {shape}"
BRANCHES_DIFFER = (
    "ember.lax.cond: with a traced or batched predicate both branches run and their results are "
    "combined with where(), so they must have one structure, shapes and dtypes; {detail}"
)
LOOP_TRACED = (
    "ember.lax.{op}: the {what} depends on traced values ({why}), so the number of iterations "
    "is not known while tracing. Make it static (jit's static_argnums, or a Python number), "
    "use fori_loop / scan with bounds known while tracing, or run the loop outside jit/vmap"
)

WHILE_DIFFERENTIATED = (
    "ember.lax.while_loop: a loop whose condition jit traces runs as one op of the graph, which "
    "carries no gradient (as in JAX). Differentiate a loop of known length (fori_loop or scan "
    "with static bounds), or make the condition static"
)
WHILE_UNSUPPORTED = (
    "ember.lax.while_loop: a loop whose condition jit traces cannot hold {what} yet; make the "
    "condition static, or use fori_loop / scan with bounds known while tracing"
)


def _check_scalar(v: Any, op: str, what: str) -> None:
    shape = getattr(v, "shape", ())
    if shape is not None and tuple(shape) != ():
        raise ShapeError(NOT_SCALAR.format(op=op, what=what, shape=tuple(shape)))


def _as_array(xp: Any, v: Any) -> Any:
    """``v``, a Python number made an array of ``xp``."""
    return v if hasattr(v, "shape") else xp.asarray(v)


def _known(pred: Any, op: str, what: str) -> bool | None:
    """``bool(pred)`` where Python may branch on it; None where it is traced (jit) or batched
    (vmap). A traced Python number is known: jit guards on its value."""
    _check_scalar(pred, op, what)
    try:
        return bool(pred)
    except (TracingError, BatchingError):
        return None


def _unknown(op: str, what: str, e: Exception) -> TracingError:
    why = "a Tensor jit traces" if isinstance(e, TracingError) else "a Tensor vmap batches"
    return TracingError(LOOP_TRACED.format(op=op, what=what, why=why))


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    Where ``pred`` is known (eagerly, under ``grad``, a static value under jit)
    only the chosen branch runs. Where it is a traced (``jit``) or batched
    (``vmap``) scalar, both run and each result leaf is ``where(pred, t, f)``:
    the branches must then return the same structure, shapes and dtypes (a
    Python number becomes a 0-d array, so the branches may return different
    ones), and the gradient flows into the chosen one only.

    >>> import ember, ember.autodiff.numpy as xp
    >>> f = ember.jit(lambda x: ember.lax.cond(x > 0, xp.sin, xp.cos, x))
    >>> float(f(xp.asarray(0.0)))
    1.0
    """
    known = _known(pred, "cond", "predicate")
    if known is not None:
        return true_fun(*operands) if known else false_fun(*operands)
    xp = pred.__array_namespace__()
    t, f = true_fun(*operands), false_fun(*operands)
    lt, dt = _tree.flatten(t, is_leaf=_is_number)  # (numbers as leaves: 0-d arrays, as in
    lf, df = _tree.flatten(f, is_leaf=_is_number)  # while_loop; branches may return different ones)
    if dt != df:
        raise StructureError(BRANCHES_DIFFER.format(detail=f"true_fun gave {dt}, false_fun {df}"))
    out = []
    for path, a, b in zip(dt.paths(), lt, lf):
        a, b = _as_array(xp, a), _as_array(xp, b)
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            where = f"at {path}: " if str(path) else ""
            raise StructureError(BRANCHES_DIFFER.format(
                detail=f"{where}{a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"))
        out.append(xp.where(pred, a, b))
    return _tree.unflatten(dt, out)


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """``branches[index](*operands)``, the index clamped into range (``jax.lax.switch``).

    A known index runs one branch; a traced or batched one runs them all and
    picks with ``where`` (the branches must then agree as for :func:`cond`).
    """
    branches = list(branches)
    if not branches:
        raise ValueError("ember.lax.switch: give at least one branch")
    _check_scalar(index, "switch", "index")
    i = _index(index)
    if i is not None:
        return branches[min(max(i, 0), len(branches) - 1)](*operands)
    if len(branches) == 1:
        return branches[0](*operands)
    out = branches[-1](*operands)
    for k in range(len(branches) - 2, -1, -1):  # (index <= k picks branch k: clamped below)
        out = cond(index <= k, lambda *a, k=k: branches[k](*a), lambda *a, o=out: o, *operands)
    return out


def _index(v: Any) -> int | None:
    """``v`` as a Python int, or None where jit traces or vmap batches it."""
    try:
        return operator.index(v) if not isinstance(v, Tensor) else int(v)
    except (TracingError, BatchingError):
        return None


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """``body_fun(i, val)`` for ``i`` in ``range(lower, upper)``, starting from ``init_val``.

    Bounds known while tracing (Python ints, static arguments, numbers jit
    traces: it guards on them) unroll the loop under jit, and gradients flow.
    Bounds that jit traces or vmap batches make it a :func:`while_loop` over
    ``(i, val)`` (under jit one op of the graph, without gradient, as in JAX).
    """
    lo, hi = _index(lower), _index(upper)
    if lo is None or hi is None:  # traced (jit) or batched (vmap) bounds: a while_loop over (i, val)
        return while_loop(lambda c: c[0] < upper, lambda c: (c[0] + 1, body_fun(c[0], c[1])),
                          (lower, init_val))[1]
    val = init_val
    for i in range(lo, hi):
        val = body_fun(i, val)
    return val


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``val = body_fun(val)`` while ``cond_fun(val)``, starting from ``init_val``.

    Eagerly the loop runs in Python and gradients flow through the iterations
    run. Under jit, a condition on traced values makes the condition and the
    body graphs of their own, run by one op until the condition fails: the loop
    value must keep its structure, shapes and dtypes, and carries no gradient
    (as in JAX: differentiate ``fori_loop`` or ``scan``). Under vmap the loop
    runs while any example's condition holds, and an example whose condition
    failed keeps its value (as ``jax.lax.while_loop``).
    """
    val = init_val
    while True:
        c = cond_fun(val)
        _check_scalar(c, "while_loop", "condition")
        try:
            go = bool(c)
        except (TracingError, BatchingError) as e:
            if isinstance(e, TracingError) and not is_batched(c):
                return _staged_while(cond_fun, body_fun, val, c, e)
            if not is_batched(c):
                raise _unknown("while_loop", "condition", e) from e
            # under vmap: loop while any example's condition holds; the others keep their value
            if not _any_example(c):
                return val
            xp = c.__array_namespace__()
            new = body_fun(val)
            leaves, vdef = _tree.flatten(val, is_leaf=_is_number)  # (numbers: 0-d arrays)
            nleaves, ndef = _tree.flatten(new, is_leaf=_is_number)
            if ndef != vdef:
                raise StructureError(f"ember.lax.while_loop: body_fun returned {ndef}, the loop value is "
                                     f"{vdef}; it must keep the value's structure") from None
            val = _tree.unflatten(vdef, [xp.where(c, _as_array(xp, n), _as_array(xp, o))
                                         for n, o in zip(nleaves, leaves)])
            continue
        if not go:
            return val
        val = body_fun(val)


def _staged_while(cond_fun: Callable, body_fun: Callable, init: Any, c: Any, e: Exception) -> Any:
    """``while_loop`` whose condition jit traces: the condition and the body become graphs of
    their own, run by one op of the enclosing graph until the condition fails. The loop
    value keeps its structure, shapes and dtypes; it carries no gradient (as in JAX)."""
    trace = active_traces[0] if active_traces else None
    if trace is None or not trace.stages:
        raise _unknown("while_loop", "condition", e) from e
    xp = c.__array_namespace__()
    leaves, vdef = _tree.flatten(init, is_leaf=_is_number)  # (numbers become 0-d arrays)
    leaves = [a if isinstance(a, Tensor) else xp.asarray(a) for a in leaves]
    for a in leaves:
        n = a._node
        if n is not None and not n.trace.stages:
            raise TracingError(WHILE_DIFFERENTIATED)
    n_carry = len(leaves)

    def rebuild(vals):
        return _tree.unflatten(vdef, list(vals))

    try:
        cg, _ = trace.subgraph(lambda *a: cond_fun(rebuild(a)), leaves)
        bg, res = trace.subgraph(lambda *a: body_fun(rebuild(a)), leaves)
    except NotImplementedError as err:
        raise TracingError(WHILE_UNSUPPORTED.format(what=err)) from None
    out_leaves, out_def = _tree.flatten(res, is_leaf=_is_number)
    if out_def != vdef:
        raise StructureError(f"ember.lax.while_loop: body_fun returned {out_def}, the loop value "
                             f"is {vdef}; it must keep the value's structure")
    for i, (a, o) in enumerate(zip(leaves, out_leaves)):
        o = _as_array(xp, o)
        if tuple(a.shape) != tuple(o.shape) or a.dtype != o.dtype:
            raise StructureError(f"ember.lax.while_loop: leaf {i} of the loop value is {a.dtype}"
                                 f"{list(a.shape)} but body_fun returned {o.dtype}{list(o.shape)}; "
                                 "a loop value keeps its shapes and dtypes")
    run_passes(cg, set())
    run_passes(bg, set())
    cfn, _, _ = compile_graph(cg, "while_loop.cond")
    bfn, _, _ = compile_graph(bg, "while_loop.body")
    nc = len(cg.captured)

    def loop(*vals):
        carry = vals[:n_carry]
        cap_c, cap_b = vals[n_carry:n_carry + nc], vals[n_carry + nc:]
        while bool(cfn(*carry, *cap_c)[0]):
            carry = bfn(*carry, *cap_b)
        return list(carry)

    return _tree.unflatten(vdef, trace.stage_call("while_loop", loop, leaves, cg.captured + bg.captured))


def _is_number(v: Any) -> bool:
    return v.__class__ in (bool, int, float, complex)


def _any_example(c: Any) -> bool:
    """Whether batched condition ``c`` holds for some example (of every enclosing vmap)."""
    low = c._value  # (the batch axis in front, one level down)
    a = low.__array_namespace__().any(low)
    try:
        return bool(a)
    except BatchingError:  # (a vmap around this one: its examples too)
        return _any_example(a)
    except TracingError as e:
        raise _unknown("while_loop", "condition", e) from e


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False) -> tuple[Any, Any]:
    """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs``; returns the last carry
    and the ``y`` stacked along a new leading axis (``jax.lax.scan``).

    ``xs`` is a structure of arrays sharing their leading size (or None, with
    ``length`` giving the count); ``reverse`` runs from the end (the ``y`` stay
    in ``xs``' order). Under jit the loop is unrolled.
    """
    leaves, xdef = _tree.flatten(xs)
    sizes = {int(a.shape[0]) for a in leaves}
    if length is not None:
        sizes.add(int(length))
    if len(sizes) != 1:
        raise ShapeError(
            f"ember.lax.scan: the leading sizes of xs ({sorted(sizes)}"
            + (f", length={length}" if length is not None else "")
            + ") must be one number" + ("; give length= when xs is None" if not leaves else ""))
    n = sizes.pop()
    order = range(n - 1, -1, -1) if reverse else range(n)
    carry, ys = init, [None] * n
    for i in order:
        x = _tree.unflatten(xdef, [a[i, ...] for a in leaves])
        carry, ys[i] = f(carry, x)
    if n == 0:
        return carry, None
    first, ydef = _tree.flatten(ys[0])
    columns: list = [[] for _ in first]
    for i, y in enumerate(ys):
        leaves_i, d = _tree.flatten(y)
        if d != ydef:
            raise StructureError(f"ember.lax.scan: f returned y of structure {d} at step {i}, "
                                 f"{ydef} at step 0; every step must return one structure")
        for col, leaf in zip(columns, leaves_i):
            col.append(leaf)
    known = [a for a in (*leaves, *_tree.leaves(init)) if hasattr(a, "__array_namespace__")]
    stacked = []
    for col in columns:
        arrays = [c for c in col if hasattr(c, "__array_namespace__")] or known
        if not arrays:
            raise TypeError("ember.lax.scan: f returns Python numbers and no array of xs, init "
                            "or y gives a namespace to stack them in; return arrays")
        xp = arrays[0].__array_namespace__()
        stacked.append(xp.stack([_as_array(xp, c) for c in col], axis=0))
    return carry, _tree.unflatten(ydef, stacked)
