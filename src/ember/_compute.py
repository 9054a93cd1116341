"""``ember.compute`` / ``ember.persist``: evaluate every lazy leaf of a structure at once.

Why one call: Dask merges the graphs of all the collections handed to one
``dask.compute`` and runs each task once, so the forward pass shared by a
loss value and its gradient (or by several gradients) is computed a single
time. Computing leaves one by one would recompute it per leaf.

Leaves may be raw dask arrays (or any dask collection) and ember Tensors
whose backend array is a dask array; every other leaf (NumPy arrays, Python
scalars, static fields, Tensors of eager backends) is returned as it is.

>>> import ember, dask.array as da
>>> ember.compute({"a": da.ones(3), "b": 2})["a"].tolist()
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

from typing import Any

from . import tree as _tree
from ._errors import EmberError
from .autodiff import Tensor
from .autodiff._tensor import raw_value

__all__ = ["compute", "persist", "is_lazy"]

TRACKED_LEAF = (
    "{op}: the leaf at {path!r} is tracked by an open transform (grad/vjp); computing it "
    "would cut it off from the tape. Fix: call {op} outside the transform, or on "
    "ember.stop_gradient(x) if you only need its value"
)
NO_DASK = (
    "{op}: dask is not installed, so there is nothing lazy to compute. Fix: "
    'pip install -e ".[dask]" in the ember checkout'
)


def _is_dask(v) -> bool:
    """True for a dask collection (without importing dask when it is not loaded)."""
    return callable(getattr(v, "__dask_graph__", None))


def is_lazy(x: Any) -> bool:
    """Whether ``x`` (a Tensor or a raw array) is a lazy dask value."""
    if isinstance(x, Tensor):
        return _is_dask(raw_value(x))
    return _is_dask(x)


def _lazy_leaves(op: str, x):
    """(paths, leaves, treedef, positions of the lazy leaves, their dask values)."""
    pairs, treedef = _tree.flatten_with_path(x, is_leaf=_is_dask)
    leaves = [v for _, v in pairs]
    pos, values = [], []
    for i, (path, v) in enumerate(pairs):
        if isinstance(v, Tensor):
            if v._node is not None and v._node.trace.active:
                raise EmberError(TRACKED_LEAF.format(op=op, path=str(path)))
            r = raw_value(v)
        else:
            r = v
        if _is_dask(r):
            pos.append(i)
            values.append(r)
    return leaves, treedef, pos, values


def _rewrap(old, new, *, same_namespace: bool):
    """Put computed/persisted ``new`` back where ``old`` was (Tensor or raw)."""
    if not isinstance(old, Tensor):
        return new
    if same_namespace:
        return type(old)._ns.asarray(new)
    if _is_dask(new):
        return type(old)._ns._wrap(new)
    from .autodiff import namespace

    return namespace(new)._wrap(new)


def compute(x: Any, *, keep_backend: bool = False, **kwargs) -> Any:
    """Compute every dask leaf of structure ``x`` in one ``dask.compute`` call.

    Why: shared intermediates (the forward pass behind a loss and its
    gradients) run once, and the scheduler sees the whole job. Raw dask
    arrays become NumPy (or whatever the chunks are); dask-backed Tensors
    become Tensors of the computed array's namespace (``ember.autodiff.numpy``),
    or, with ``keep_backend=True``, Tensors of their own (dask) namespace
    holding the concrete values in one chunk (handy for parameters that must
    meet dask data again). Other leaves are returned unchanged. ``kwargs`` go
    to ``dask.compute`` (``scheduler=...``, ``optimize_graph=...``).

    >>> import ember, ember.autodiff.dask as xp
    >>> v, g = ember.value_and_grad(lambda x: xp.sum(x * x))(xp.ones(4))
    >>> ember.compute({"loss": v, "grad": g})["grad"].raw.tolist()
    [2.0, 2.0, 2.0, 2.0]
    """
    leaves, treedef, pos, values = _lazy_leaves("ember.compute", x)
    if not pos:
        return x
    try:
        import dask
    except ImportError as e:  # pragma: no cover - dask values imply dask
        raise EmberError(NO_DASK.format(op="ember.compute")) from e
    out = dask.compute(*values, **kwargs)
    leaves = list(leaves)
    for i, v in zip(pos, out):
        leaves[i] = _rewrap(leaves[i], v, same_namespace=keep_backend)
    return _tree.unflatten(treedef, leaves)


def persist(x: Any, **kwargs) -> Any:
    """Persist every dask leaf of ``x`` in one ``dask.persist`` call (values stay lazy).

    Why: keeps the results in (cluster) memory, so later computations that
    reuse them start from the stored chunks instead of recomputing their
    graphs; shared intermediates run once. Dask-backed Tensors stay Tensors
    of their namespace. ``kwargs`` go to ``dask.persist``.

    >>> import ember, dask.array as da
    >>> p = ember.persist([da.ones(3) * 2])
    >>> float(p[0].sum())
    6.0
    """
    leaves, treedef, pos, values = _lazy_leaves("ember.persist", x)
    if not pos:
        return x
    import dask

    out = dask.persist(*values, **kwargs)
    leaves = list(leaves)
    for i, v in zip(pos, out):
        leaves[i] = _rewrap(leaves[i], v, same_namespace=False)
    return _tree.unflatten(treedef, leaves)
