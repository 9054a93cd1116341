"""Bounded graphs on lazy backends: the optimizer's persist policy.

Why: on a lazy backend (Dask) an update returns *graphs*, not values. A
training loop that never computes its parameters makes each step's graph
contain every earlier step, so step time and memory grow without bound (the
README's MLP went from 0.05 s to 0.47 s a step in 20 steps). ember's
optimizers therefore persist the new parameters and state at step boundaries
(one ``ember.persist`` call, so the shared forward and backward run once),
by a policy set per optimizer:

- ``persist="step"`` (default): after every update whose parameters are lazy.
- ``persist=N`` (an int > 0): after every N-th update (fewer, larger graphs).
- ``persist="never"``: the caller persists (``ember.persist((params, state))``).

Whatever the policy, when a lazy parameter's graph has grown past
``graph_warn`` layers (default :data:`GRAPH_WARN_LAYERS`) a
:class:`GraphGrowthWarning` says so, once per optimizer. Eager backends are
never touched: whether a parameter is lazy comes from
``ember.backend.capabilities``.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import persist as _persist
from .._errors import EmberError

__all__ = ["GraphGrowthWarning", "GRAPH_WARN_LAYERS", "PERSIST_POLICIES", "check_persist", "is_lazy_leaf"]

#: default number of graph layers of one parameter above which a warning is given
GRAPH_WARN_LAYERS = 500
#: the named persist policies (an int N > 0 means "every N updates")
PERSIST_POLICIES = ("step", "never")

BAD_PERSIST = (
    "{op}: persist={value!r} is not a persist policy; pass 'step' (persist the new parameters "
    "and state after every update on a lazy backend), 'never', or an int N > 0 (every N updates)"
)
BAD_GRAPH_WARN = "{op}: graph_warn={value!r} must be an int > 0 (graph layers) or None (no warning)"
GRAPH_GROWTH = (
    "{op}: the graph of the lazy parameter {path!r} has {layers} layers after {steps} updates "
    "(graph_warn={limit}): nothing computes it, so each step re-runs every earlier one and "
    "step time grows. Fix: keep the optimizer's persist='step' policy (the default), or call "
    "params, state = ember.persist((params, state)) in the loop"
)


class GraphGrowthWarning(UserWarning):
    """A lazy parameter's graph grew past the optimizer's ``graph_warn`` layers."""


def check_persist(op: str, persist: Any, graph_warn: Any) -> None:
    """Raise a ValueError naming ``op`` for a bad ``persist``/``graph_warn`` option."""
    ok = persist in PERSIST_POLICIES if isinstance(persist, str) else (
        isinstance(persist, int) and not isinstance(persist, bool) and persist > 0)
    if not ok:
        raise ValueError(BAD_PERSIST.format(op=op, value=persist))
    if graph_warn is not None and not (
            isinstance(graph_warn, int) and not isinstance(graph_warn, bool) and graph_warn > 0):
        raise ValueError(BAD_GRAPH_WARN.format(op=op, value=graph_warn))


def is_lazy_leaf(x: Any) -> bool:
    """Whether array (or Tensor) ``x`` lives on a lazy backend, per ``ember.backend.capabilities``."""
    import array_api_compat

    from ..autodiff import Tensor
    from ..backend import capabilities

    raw = x.raw if isinstance(x, Tensor) else x
    try:
        ns = array_api_compat.array_namespace(raw)
    except TypeError:
        return False
    return capabilities(ns).lazy


def _layers(x: Any) -> int:
    """Layers of a lazy value's graph (cheap: no task is materialized); 0 when unknown."""
    raw = getattr(x, "raw", x)
    graph = getattr(raw, "__dask_graph__", None)
    if graph is None:
        return 0
    g = graph()
    layers = getattr(g, "layers", None)
    return len(layers) if layers is not None else len(g)


def bound(opt: Any, op: str, probe: Any, path: str, step: int, tree: Any) -> Any:
    """Apply ``opt``'s persist policy at the end of update number ``step``.

    ``tree`` holds what the step made (parameters, state, and for ``train_step``
    the loss), persisted together so their shared graph runs once; ``probe``
    is one lazy parameter (at ``path``) measured for the growth warning.
    Returns ``tree``, persisted or not.
    """
    policy = opt.persist
    due = policy == "step" or (policy != "never" and step % policy == 0)
    if due:
        try:
            return _persist(tree)
        except EmberError:  # a leaf an outer transform still tracks: leave it lazy
            pass
    limit = opt.graph_warn
    if limit is not None and not opt._warned_growth:
        layers = _layers(probe)
        if layers > limit:
            opt._warned_growth = True
            warnings.warn(GRAPH_GROWTH.format(op=op, path=path, layers=layers, steps=step, limit=limit),
                          GraphGrowthWarning, stacklevel=4)
    return tree
