"""``train_step``: the gradient of a loss and an optimizer update, fused into one call.

Why: ``opt.update(params, ember.consume(grads), state)`` may write the new
parameters into the gradients' buffers, but it pays for the gradients twice
over: their structure is built, consumed leaf by leaf and flattened again,
and each leaf becomes a marker the update spends. A training step that never
hands the gradients to the caller can take them straight from the backward
pass: the same update, the same bits, and the buffers reused wherever
:func:`ember.consume`'s rules hold (nobody else holds them, not a view, not
borrowed, a backend that writes in place).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from .. import tree as _tree
from ..autodiff.ownership import borrowed as _borrowed
from ..autodiff.ownership import reuse_reason, writer
from ..autodiff.ownership import writes_in_place as _backend_writes
from ..func.tape import check_options as _check_options
from ..func.tape import forward_backward, leaf_gradient
from ..func.tape import gradients as _gradients
from ..func.tape import under_transform as _under_transform
from ..optim import Optimizer, PathOptimizer, State
from ..optim.lazy import bound

__all__ = ["train_step"]

getrefcount = sys.getrefcount


def train_step(
    loss_fn: Callable[..., Any],
    optimizer: Optimizer,
    *,
    has_aux: bool = False,
    checkpointing: str = "none",
) -> Callable[..., tuple[Any, Any, State]]:
    """Make ``step(params, state, *args, **kwargs) -> (loss, params, state)``.

    One call computes ``loss_fn(params, *args, **kwargs)``, its gradient with
    respect to ``params`` (as :func:`ember.value_and_grad`) and
    ``optimizer.update``; with ``has_aux=True`` the first result is
    ``(loss, aux)``. The gradients never reach the caller, so an optimizer
    with an in-place form (``SGD``) writes the new parameters into their
    buffers where ownership allows (parameters that are ember Tensors). The
    results equal ``value_and_grad`` followed by ``update``, bit for bit.

    >>> import ember, ember.autodiff.numpy as xp
    >>> opt = ember.optim.SGD(0.1)
    >>> step = ember.training.train_step(lambda p: xp.sum(p["w"] ** 2), opt)
    >>> params = {"w": xp.asarray([1.0, -2.0])}
    >>> loss, params, state = step(params, opt.init(params))
    >>> float(loss), params["w"].raw.tolist()
    (5.0, [0.8, -1.6])
    """
    _check_options("train_step", checkpointing, "zeros")
    name = getattr(loss_fn, "__name__", "f")
    op = f"train_step({name}, has_aux=True)" if has_aux else f"train_step({name})"
    update_op = f"{type(optimizer).__name__}.update"
    # PathOptimizers take the gradients straight from the tape (unless a subclass changed update)
    fused = isinstance(optimizer, PathOptimizer) and type(optimizer).update is PathOptimizer.update
    per_class: dict = {}  # Tensor class -> (its dispatcher, Writer, whether it writes in place)

    def step(params: Any, state: State, *args: Any, **kwargs: Any) -> tuple[Any, Any, State]:
        value, aux, per_arg, _ = forward_backward(
            op, loss_fn, (0,), has_aux, checkpointing, (params, *args), kwargs
        )
        if not fused or _under_transform():  # any other optimizer, or an outer transform (jit,
            # grad of a step) that records the update: the gradients as value_and_grad gives them
            params, state = optimizer.update(params, _gradients(per_arg, "zeros")[0], state)
            return ((value, aux) if has_aux else value), params, state
        treedef, leaves, tracked = per_arg[0]
        if treedef is None:  # params is one Tensor
            leaves, treedef = _tree.flatten(params)
        plan = optimizer._plan(update_op, leaves, treedef)
        grad_list, into = [], []
        T = None
        fast = False
        clip = optimizer.clip_norm  # (clipping reads every gradient first: no None entries)
        for i, _, _ in plan.trainable:
            t = tracked[i]  # (trainable leaves are real floating: all tracked)
            node = t.node
            g = node.g
            node.g = None  # the buffer's one holder now: this frame
            r = t.inner._value  # the parameter's backend array
            if g.__class__ is r.__class__ and g.dtype == r.dtype and g.shape == r.shape and not t.raw_input:
                if t.inner.__class__ is not T:  # (one namespace, the usual case: looked up once)
                    T = t.inner.__class__
                    known = per_class.get(T)
                    if known is None:
                        d = T._ns._dispatch
                        known = per_class[T] = (d, writer(d), _backend_writes(d))
                    d, w, fast = known
                    fast = fast and clip is None
                # reuse_reason's usual outcome read inline (a fresh, writeable buffer that only
                # this frame holds, nothing borrowed: an array of its own, or a view spanning a
                # base only it holds, the transposed product of a column-major weight's
                # gradient); any other case it decides itself
                reuse = False
                if fast and getrefcount(g) == 2 and getattr(getattr(g, "flags", None), "writeable", False):
                    base = getattr(g, "base", g)  # (g: no such attribute)
                    if base is None:
                        reuse = not _borrowed or id(g) not in _borrowed
                    elif base is not g and getattr(base, "base", 0) is None and getrefcount(base) == 3:
                        # _sole_view's test inline: a base that owns its memory, held by g and
                        # this frame only (and getrefcount's argument), all of whose bytes g spans
                        f = g.flags
                        if (f.c_contiguous or f.f_contiguous) and g.nbytes == getattr(base, "nbytes", -1):
                            reuse = not _borrowed or id(base) not in _borrowed
                    base = None
                if not reuse and clip is None:
                    reuse = reuse_reason(d, g, r, 1)[0] is None
                if reuse:
                    into.append((w, g))
                    grad_list.append(None)  # (the update wraps it if it has no in-place form)
                else:
                    into.append(None)
                    grad_list.append(d.make(g, None))
            else:  # a Tensor (outer traces), None (unused), or one to fit: value_and_grad's form
                grad_list.append(leaf_gradient(t, g, "zeros"))
                into.append(None)
        params, state = optimizer._update_leaves(update_op, leaves, treedef, plan, grad_list, into, state,
                                                 plan.lazy is None)
        if plan.lazy is not None:  # lazy backend: the loss persisted with the step (one graph run)
            i, pth = plan.lazy
            value, aux, params, state = bound(optimizer, op, _tree.flatten(params)[0][i], pth,
                                              state["step"], (value, aux, params, state))
        return ((value, aux) if has_aux else value), params, state

    return step
