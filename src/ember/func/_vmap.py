"""``ember.vmap``: run a function written for one example on a whole batch at once.

The function runs once, on batched values (``ember.autodiff._batching``):
each op applies its batching rule, so ``vmap(f)(xs)`` equals stacking
``f(x)`` over the examples ``x`` of ``xs`` but costs one call of each op
instead of one per example. It nests (``vmap(vmap(f))``) and composes with
``grad``, ``jvp``, ``hessian`` and ``checkpoint`` in either order:
``vmap(grad(loss), in_axes=(None, 0, 0))(params, x, y)`` gives per-example
gradients.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable

from .. import tree as _tree
from .._errors import AxisError, ShapeError
from ..autodiff import Tensor, namespace
from ..autodiff._batching import BatchingError, BatchTrace, is_batched
from ..autodiff._batching import wrap as _wrap_batched
from ..autodiff._tensor import raw_value

__all__ = ["vmap"]

BAD_AXIS_SPEC = (
    "vmap: {what} must be an int, None, or a tuple/list/dict/dataclass matching the {of} (a "
    "prefix of its structure, as in JAX), got {spec!r}"
)
PREFIX_MISMATCH = (
    "vmap: {what} {spec!r} does not match the structure of the {of} at {where}: {detail}"
)
AXIS_RANGE = (
    "vmap: in_axes gives axis {axis} for {where}, an array of shape {shape}; the axis must be in "
    "[-{nd}, {nd})"
)
NOTHING_MAPPED = (
    "vmap: in_axes maps no array (every argument is None or has no array leaves), so the batch "
    "size is unknown. Map at least one argument (in_axes=0)"
)
OUT_UNBATCHED = (
    "vmap: out_axes is None for {where}, but that output differs between examples (it is "
    "batched). Give it an axis (out_axes=0) or return a value that does not depend on the mapped "
    "arguments"
)
OUT_NOT_ARRAY = (
    "vmap: {where} is a {kind}, not an array, so it cannot be stacked along out_axes; "
    "return an array (xp.asarray(...)) or give it out_axes=None"
)
FALLBACKS = ("error", "loop")


class _Axis:
    """One leaf's axis (an int or None), boxed so ember.tree treats it as a leaf."""

    __slots__ = ("axis",)

    def __init__(self, axis):
        self.axis = axis


def _is_axis(v) -> bool:
    return v.__class__ is _Axis


def _axis_tree(spec, x, what, of, where="the arguments"):
    """``x``'s structure with every array leaf replaced by the _Axis that prefix ``spec`` gives it."""
    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        return _tree.map(lambda _: _Axis(spec), x)
    if isinstance(spec, (tuple, list)):
        if not isinstance(x, (tuple, list)) or len(x) != len(spec):
            detail = (f"a {type(spec).__name__} of {len(spec)} entries against a "
                      f"{type(x).__name__}" + (f" of {len(x)}" if isinstance(x, (tuple, list)) else ""))
            raise ValueError(PREFIX_MISMATCH.format(what=what, spec=spec, of=of, where=where,
                                                    detail=detail))
        items = [_axis_tree(s, v, what, of, f"{where}[{i}]") for i, (s, v) in enumerate(zip(spec, x))]
        if hasattr(x, "_fields"):
            return type(x)(*items)
        return type(x)(items)
    if isinstance(spec, dict):
        if not isinstance(x, dict) or set(spec) != set(x):
            detail = (f"keys {sorted(map(str, spec))} against "
                      + (f"keys {sorted(map(str, x))}" if isinstance(x, dict) else f"a {type(x).__name__}"))
            raise ValueError(PREFIX_MISMATCH.format(what=what, spec=spec, of=of, where=where,
                                                    detail=detail))
        return type(x)((k, _axis_tree(spec[k], v, what, of, f"{where}[{k!r}]")) for k, v in x.items())
    info = _tree.node_info(spec)
    if info is not None and info.kind == "dataclass":  # a module whose fields are axes
        if type(x) is not type(spec):
            detail = f"a {type(spec).__name__} against a {type(x).__name__}"
            raise ValueError(PREFIX_MISMATCH.format(what=what, spec=spec, of=of, where=where,
                                                    detail=detail))
        out = copy.copy(x)  # (x's static fields kept; its child fields become axis trees)
        for n in info.names:
            object.__setattr__(out, n, _axis_tree(getattr(spec, n), getattr(x, n), what, of,
                                                  f"{where}.{n}"))
        return out
    raise ValueError(BAD_AXIS_SPEC.format(what=what, of=of, spec=spec))


def _leaf_axes(spec, x, what, of) -> list:
    """The axis of each leaf of ``x`` (in ember.tree.flatten's order) under prefix ``spec``."""
    boxed, _ = _tree.flatten(_axis_tree(spec, x, what, of), is_leaf=_is_axis)
    return [b.axis for b in boxed]


def _names(paths) -> list:
    """How errors name each leaf of ``(args, kwargs)``: "argument 1.w", "keyword k"."""
    out = []
    for p in paths:
        head, _, rest = str(p).partition(".")
        out.append(f"argument {rest}" if head == "0" else f"keyword {rest}")
    return out


def vmap(f: Callable, in_axes: Any = 0, out_axes: Any = 0, *, fallback: str = "error") -> Callable:
    """Make ``f``, written for one example, run on a batch: the arrays of the arguments are
    mapped along ``in_axes``, the results stacked along ``out_axes``.

    ``in_axes``: an int (every array leaf of every positional argument is mapped along that
    axis), None (not mapped: the same for every example), or a tuple with one entry per
    positional argument, each an int, None or a structure prefix of that argument (a dict,
    list or dataclass of axes: ``nn.Linear(weight=0, bias=None)`` maps a module's weight
    only), as in JAX. Keyword arguments are mapped along axis 0. ``out_axes`` likewise
    for the result. ``fallback="loop"`` runs ops that have no batching rule once per example
    (slow, with a warning) instead of raising.

    >>> import ember, ember.autodiff.numpy as xp
    >>> xs = xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    >>> ember.vmap(lambda x: xp.sum(x * x))(xs).raw.tolist()
    [5.0, 25.0]
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"vmap: fallback must be one of {FALLBACKS}, not {fallback!r}")
    if not (in_axes is None or isinstance(in_axes, (int, tuple, list, dict))) or isinstance(in_axes, bool):
        raise ValueError(BAD_AXIS_SPEC.format(what="in_axes", of="positional arguments", spec=in_axes))

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        spec = in_axes
        if isinstance(spec, list):
            spec = tuple(spec)
        if isinstance(spec, tuple) and len(spec) != len(args):
            raise ValueError(
                f"vmap: in_axes has {len(spec)} entries but the function was called with "
                f"{len(args)} positional arguments; give one entry per positional argument")
        leaves, treedef = _tree.flatten((args, kwargs))
        axes = _leaf_axes((spec, 0), (args, kwargs), "in_axes", "positional arguments")
        names = _names(_tree.paths((args, kwargs)))
        size, raw_only, ns = _batch_size(leaves, axes, names)
        # rules may test a rare case with bool(xp.any(...)) where that is cheap; on batched
        # values the test is per example, so they take their general branch instead
        with ns._dispatch.unseen_values(raw=False), BatchTrace(size, fallback) as trace:
            inputs = [_batched_input(x, a, trace) for x, a in zip(leaves, axes)]
            bargs, bkwargs = _tree.unflatten(treedef, inputs)
            res = f(*bargs, **bkwargs)
            out_leaves, out_def = _tree.flatten(res)
            oaxes = _leaf_axes(out_axes, res, "out_axes", "function's result")
            onames = [f"result {p}" if str(p) else "the result" for p in _tree.paths(res)]
            outs = [_output(y, a, trace, n) for n, y, a in zip(onames, out_leaves, oaxes)]
        if raw_only:
            outs = [raw_value(o) if isinstance(o, Tensor) else o for o in outs]
        return _tree.unflatten(out_def, outs)

    return wrapped


def _batch_size(leaves, axes, names):
    """The batch size (the mapped axes' one size), whether every array leaf came in raw, and
    the namespace of the mapped arrays."""
    sizes = {}
    raw_only = None
    ns = None
    for i, (x, a) in enumerate(zip(leaves, axes)):
        raw = not isinstance(x, Tensor)
        raw_only = raw if raw_only is None else raw_only and raw
        if a is None:
            continue
        shape = tuple(x.shape)
        nd = len(shape)
        if not -nd <= a < nd:
            raise AxisError(AXIS_RANGE.format(axis=a, where=names[i], shape=shape, nd=nd))
        sizes[f"{names[i]} (shape {shape}, axis {a})"] = shape[a]
        if ns is None:
            ns = type(x)._ns if isinstance(x, Tensor) else namespace(x)
    if not sizes:
        raise ValueError(NOTHING_MAPPED)
    distinct = set(sizes.values())
    if len(distinct) > 1:
        listing = "; ".join(f"{k}: {v}" for k, v in sizes.items())
        raise ShapeError(f"vmap: the mapped axes have different sizes ({listing}); every mapped "
                         "array must have the same size along its in_axes axis")
    return distinct.pop(), bool(raw_only), ns


def _batched_input(x, axis, trace):
    """Leaf ``x`` as the function sees it: batched along ``axis`` (moved to the front), or as it
    is for axis None."""
    if axis is None:
        return x
    if not isinstance(x, Tensor):
        x = namespace(x).asarray(x)
    ns = type(x)._ns
    if axis % x.ndim:
        x = ns.moveaxis(x, axis % x.ndim, 0)
    return _wrap_batched(ns._dispatch, trace, x)


def _output(y, axis, trace, where):
    """Result leaf ``y`` stacked along ``axis`` (a leaf the same for every example is
    broadcast), or returned as it is for axis None."""
    if is_batched(y, trace):
        if axis is None:
            raise BatchingError(OUT_UNBATCHED.format(where=where))
        v = y._value
        nd = v.ndim
        if not -nd <= axis < nd:
            raise AxisError(f"vmap: out_axes {axis} is out of range for {where} of "
                            f"{nd - 1} dimensions per example")
        a = axis % nd
        return type(v)._ns.moveaxis(v, 0, a) if a else v
    if axis is None:
        return y
    if not isinstance(y, Tensor):
        if not hasattr(y, "shape"):
            raise BatchingError(OUT_NOT_ARRAY.format(where=where, kind=type(y).__name__))
        y = namespace(y).asarray(y)
    yns = type(y)._ns
    nd = y.ndim + 1
    if not -nd <= axis < nd:
        raise AxisError(f"vmap: out_axes {axis} is out of range for {where} of "
                        f"{nd - 1} dimensions per example")
    full = yns.broadcast_to(yns.expand_dims(y, axis=0), (trace.size, *tuple(y.shape)))
    a = axis % nd
    return yns.moveaxis(full, 0, a) if a else full
