"""Region checkpointing: ``ember.checkpoint(fn, policy=...)`` and ``ember.checkpoint_name``.

Inside a checkpointed region the tape does not keep the results of the ops
it records; the backward pass recomputes them (once per pass) from the
region's inputs, which are kept. This trades compute for memory, e.g. one
region per block of a deep network keeps only the block boundaries.

Works per recorded op (see ``ember.autodiff._checkpoint``), so regions nest,
close over tracked tensors, and work under ``grad(grad(...))``. Values that do
not depend on a differentiated input (random numbers drawn inside the
region, masks, constants) are kept as they are, so a recomputed region sees
exactly the same random numbers as the forward pass.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .. import tree as _tree
from ..autodiff import Tensor
from ..autodiff import _checkpoint as _ck
from ..autodiff._trace import active_traces

__all__ = ["checkpoint", "checkpoint_name"]


def checkpoint(fn: Callable | None = None, *, policy: Any = "nothing") -> Callable:
    """Make ``fn`` a checkpointed region: its intermediate results are recomputed in backward.

    Why: a backward pass keeps every intermediate result; a region keeps only
    its inputs (and what ``policy`` says) and recomputes the rest, so deep
    models fit in less memory at the cost of about one extra forward pass.

    ``policy``: ``"nothing"`` (keep no intermediate result), ``"compute"``
    (keep results of compute-bound ops such as matmul, recompute the cheap
    memory-bound ones) or a collection of names: keep only values marked
    with :func:`checkpoint_name` under one of those names. Gradients are
    identical to those without checkpointing.

    >>> import ember, ember.autodiff.numpy as xp
    >>> from ember.func import checkpoint
    >>> block = checkpoint(lambda x: xp.tanh(xp.exp(x)))
    >>> float(ember.grad(lambda x: xp.sum(block(x)))(xp.asarray(0.0)))  # doctest: +ELLIPSIS
    0.41997...

    Also usable as a decorator: ``@ember.checkpoint(policy="compute")``.
    """
    if fn is None:
        return functools.partial(checkpoint, policy=policy)
    _ck.Region(policy)  # validate the policy now, not at the first call

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if not active_traces:
            return fn(*args, **kwargs)
        for leaf in _tree.leaves((args, kwargs)):
            if isinstance(leaf, Tensor) and leaf._node is not None:
                _ck.pin(leaf)  # the region's inputs are its checkpoints
        with _ck.Region(policy):
            return fn(*args, **kwargs)

    return wrapped


def checkpoint_name(x: Any, name: str) -> Any:
    """Name the value ``x`` (any structure) for a region policy; returns ``x`` unchanged.

    Inside ``ember.checkpoint(fn, policy={"name", ...})`` a value named with
    one of the policy's names is kept for backward instead of recomputed.
    Elsewhere it does nothing.

    >>> import ember, ember.autodiff.numpy as xp
    >>> from ember.func import checkpoint, checkpoint_name
    >>> def block(x):
    ...     h = checkpoint_name(xp.exp(x), "pre")
    ...     return xp.tanh(h)
    >>> f = checkpoint(block, policy={"pre"})
    >>> float(ember.grad(lambda x: xp.sum(f(x)))(xp.asarray(0.0)))  # doctest: +ELLIPSIS
    0.41997...
    """
    if not isinstance(name, str):
        raise TypeError(
            f"checkpoint_name: name must be a str, got {type(name).__name__}; e.g. "
            "ember.checkpoint_name(h, 'attention')"
        )
    if _ck.regions and _ck.regions[-1].saves(name):
        for leaf in _tree.leaves(x):
            if isinstance(leaf, Tensor) and leaf._node is not None:
                _ck.pin(leaf)
    return x
