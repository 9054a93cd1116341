"""``Module``: a frozen dataclass that is an ember.tree structure.

Why: a model is data. Making every layer a (frozen) dataclass registered with
ember.tree means ``ember.grad`` differentiates it directly, the gradient is a
module of the same type, ``ember.tree.map`` updates it, and ember.io saves it
by path. Parameters are its floating-point array leaves that are not static
(DESIGN.md decision 6); static fields (``ember.field(static=True)``) and
Python constants (ints, strings, functions) are structure, never trained.

>>> import dataclasses, ember, ember.autodiff.numpy as xp
>>> class Scale(Module):
...     w: object
...     name: str = "scale"
>>> m = Scale(xp.ones((2, 3), dtype=xp.float32))
>>> [(str(p), tuple(a.shape)) for p, a in m.parameters()]
[('w', (2, 3))]
>>> m
Scale(w=float32[2, 3], name='scale')  # 6 params
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterator
from typing import Any

import array_api_compat

from .. import tree as _tree
from ..tree import Index, Key, Name, Path, parse_path

__all__ = ["Module", "summary", "is_parameter", "count_parameters"]

BAD_PATH = (
    "{cls}.at({path!r}): no {what} {key} at {where!r} (it holds a {type}); "
    "list the valid paths with [str(p) for p in ember.tree.paths(model)]"
)


def _is_array(x: Any) -> bool:
    return hasattr(x, "__array_namespace__") or array_api_compat.is_array_api_obj(x)


def is_parameter(x: Any) -> bool:
    """True for a floating-point (real or complex) array: what optimizers train.

    Integer and boolean arrays (token ids, masks) are leaves but not parameters.
    """
    if not _is_array(x):
        return False
    try:
        xp = array_api_compat.array_namespace(x)
        return bool(xp.isdtype(x.dtype, ("real floating", "complex floating")))
    except Exception:
        return "float" in str(getattr(x, "dtype", "")) or "complex" in str(getattr(x, "dtype", ""))


def _size(x: Any) -> int:
    return int(math.prod(int(s) for s in x.shape))


def count_parameters(tree: Any) -> int:
    """Number of scalars in the trainable leaves of any structure."""
    return sum(_size(x) for x in _tree.leaves(tree) if is_parameter(x))


@typing.dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, _tree.field))
class Module:
    """Base class of layers and models: subclasses become frozen dataclasses.

    Declare fields with annotations; ``class Net(Module, frozen=False)`` makes
    a mutable one. Subclasses are registered with ``ember.tree.register``, so
    fields marked ``ember.field(static=True)`` are structure (kept in the
    treedef) and all other fields are children. Equality is identity (arrays
    have no useful ``==``); change a module with :meth:`replace` or
    ``ember.tree.map``.
    """

    #: Layers whose ``__call__`` takes ``key=`` (random) / ``train=`` (state);
    #: containers such as Sequential use these to pass the arguments on.
    _takes_key = False
    _stateful = False

    def __init_subclass__(cls, *, frozen: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, frozen=frozen, repr=False, eq=False)
        _tree.register(cls)

    def parameters(self) -> Iterator[tuple[Path, Any]]:
        """Yield ``(path, array)`` for every trainable leaf, in tree order.

        ``str(path)`` is the canonical name, e.g. ``hidden.0.0.weight``.
        """
        pairs, _ = _tree.flatten_with_path(self)
        for path, leaf in pairs:
            if is_parameter(leaf):
                yield path, leaf

    def replace(self, **fields: Any) -> Any:
        """A copy with some fields replaced (frozen modules cannot be assigned to)."""
        return dataclasses.replace(self, **fields)

    def at(self, path: str | Path) -> Any:
        """The node or leaf at ``path`` (a str such as ``"layers.0.weight"`` or a Path)."""
        p = parse_path(path) if isinstance(path, str) else Path(path)
        node: Any = self
        for i, k in enumerate(p):
            where = str(Path(p[:i]))
            try:
                if isinstance(k, Name):
                    node = node[k.name] if isinstance(node, dict) else getattr(node, k.name)
                elif isinstance(k, Index):
                    if not isinstance(node, (list, tuple)):
                        raise TypeError
                    node = node[k.index]
                elif isinstance(k, Key):
                    node = node[k.key]
            except (AttributeError, KeyError, IndexError, TypeError):
                raise KeyError(
                    BAD_PATH.format(
                        cls=type(self).__name__, path=str(p), what=type(k).__name__.lower(),
                        key=str(Path([k])), where=where, type=type(node).__name__,
                    )
                ) from None
        return node

    def __repr__(self) -> str:
        text, note = _fmt(self, 0)
        return text + note


# --- repr ---------------------------------------------------------------------

_INLINE = 88


def _array_text(x: Any) -> str:
    dt = str(x.dtype)
    return f"{dt}[{', '.join(str(int(s)) for s in x.shape)}]"


def _const_text(v: Any) -> str:
    if callable(v) and hasattr(v, "__name__"):
        return v.__name__
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _fmt(x: Any, depth: int) -> tuple[str, str]:
    """(text, note) of a structure: arrays as dtype[shape], modules with param counts."""
    if _is_array(x):
        return _array_text(x), ""
    pad = "  " * (depth + 1)
    end = "  " * depth
    note = ""
    if isinstance(x, Module):
        items = [(f.name + "=", getattr(x, f.name)) for f in dataclasses.fields(x)]
        head, close = type(x).__name__ + "(", ")"
        n = count_parameters(x)
        note = f"  # {n:,} params" if n else ""
    elif isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        items = [("", v) for v in x]
        head, close = ("[", "]") if isinstance(x, list) else ("(", ")")
        if isinstance(x, tuple) and len(x) == 1:
            close = ",)"
    elif isinstance(x, dict):
        items = [(repr(k) + ": ", v) for k, v in x.items()]
        head, close = "{", "}"
    else:
        return _const_text(x), ""
    parts = [(k, *_fmt(v, depth + 1)) for k, v in items]
    one = head + ", ".join(k + t for k, t, _ in parts) + close
    if (
        "\n" not in one
        and not any(n for _, _, n in parts)
        and len(one) + len(end) + len(note) <= _INLINE
    ):
        return one, note
    body = "".join(f"{pad}{k}{t},{n}\n" for k, t, n in parts)
    return f"{head}{note}\n{body}{end}{close}", ""


# --- summary ------------------------------------------------------------------


def summary(model: Any) -> str:
    """A table of every array in ``model``: path, shape, dtype, count, trainable.

    Static arrays (e.g. BatchNorm running statistics) are listed as
    non-trainable; the footer gives the totals.

    >>> import ember.autodiff.numpy as xp
    >>> print(summary({"w": xp.ones((2, 2)), "n": xp.zeros(3, dtype=xp.int64)}))
    path  shape   dtype    params  trainable
    ----  ------  -------  ------  ---------
    n     (3,)    int64    3       no
    w     (2, 2)  float64  4       yes
    total: 7 values, 4 trainable
    """
    rows = []
    for path, x in _tree.flatten_with_path(model)[0]:
        if _is_array(x):
            rows.append((str(path), x, is_parameter(x)))
    for path, x in _static_arrays(model, Path()):
        rows.append((str(path), x, False))
    table = [("path", "shape", "dtype", "params", "trainable")]
    for p, x, train in rows:
        table.append((p or "<root>", str(tuple(int(s) for s in x.shape)), str(x.dtype),
                      f"{_size(x):,}", "yes" if train else "no"))
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    total = sum(_size(x) for _, x, _ in rows)
    trainable = sum(_size(x) for _, x, t in rows if t)
    lines.append(f"total: {total:,} values, {trainable:,} trainable")
    return "\n".join(lines)


def _static_arrays(x: Any, prefix: Path) -> Iterator[tuple[Path, Any]]:
    """(path, array) of static array fields of registered dataclasses inside ``x``."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if f.metadata.get("static", False) and _is_array(v):
                yield Path(prefix + (Name(f.name),)), v
            elif not _is_array(v):
                yield from _static_arrays(v, Path(prefix + (Name(f.name),)))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _static_arrays(v, Path(prefix + (Index(i),)))
    elif isinstance(x, dict):
        for k, v in x.items():
            key = Name(k) if isinstance(k, str) else Key(k)
            yield from _static_arrays(v, Path(prefix + (key,)))
