"""``ember.io.load_state_dict``: PyTorch-style state dicts (safetensors) as ember structures.

PyTorch names parameters ``encoder.layers.0.weight``: dot-separated
attribute names and list positions. That is exactly the canonical text of
the ember path ``Name("encoder") / Name("layers") / Index(0) / Name("weight")``,
so a state dict maps onto an ember model by path with no renaming table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ember._errors import FileFormatError, StructureError
from ember.io import _format
from ember.io._load import _check_policy, _plain_arrays, fill_like

__all__ = ["load_state_dict", "name_to_path"]

PATH_CONFLICT = (
    "ember.io.load_state_dict: {a!r} is an array but {b!r} puts arrays below it; such a "
    "state dict has no tree form. Pass like= to load it by path"
)
BAD_NAME = "ember.io.load_state_dict: state dict keys must be str, got {key!r}"
BAD_INDEX = (
    "ember.io.load_state_dict: the tensor name {name!r} has the list position {part!r} of "
    "{digits} digits, more than any list can have; rename the tensor"
)
#: Longest list position (in digits) a tensor name may carry.
MAX_INDEX_DIGITS = 18


def name_to_path(name: str) -> Any:
    """The ember Path of a PyTorch parameter name: digits are Index, other parts Name.

    >>> str(name_to_path("encoder.layers.0.weight"))
    'encoder.layers.0.weight'
    """
    from ember.tree import Index, Name, Path

    keys = []
    for part in name.split("."):
        if part.isdigit() and part.isascii():
            if len(part) > MAX_INDEX_DIGITS:  # int() would refuse past 4300 digits anyway
                short = part if len(part) <= 40 else part[:37] + "..."
                label = name if len(name) <= 80 else name[:77] + "..."
                raise FileFormatError(BAD_INDEX.format(name=label, part=short, digits=len(part)))
            keys.append(Index(int(part)))
        else:
            keys.append(Name(part))
    return Path(keys)


class _Host:
    """A state-dict array already in memory, with the same face as a stored file array."""

    def __init__(self, arr: Any) -> None:
        self.arr = arr
        self.dtype = str(arr.dtype.name)
        self.shape = tuple(arr.shape)

    def host(self) -> Any:
        return self.arr


def _from_mapping(d: Mapping[Any, Any]) -> dict[str, Any]:
    from ember.io._save import to_host

    out = {}
    for k, v in d.items():
        if not isinstance(k, str):
            raise TypeError(BAD_NAME.format(key=k))
        if str(getattr(v, "dtype", "")) == "torch.bfloat16":
            v = v.float()  # NumPy has no bfloat16; widening is exact
        arr, name = to_host(v, k)
        if name == "complex128":
            np = _format.host_numpy()
            arr = arr.view(np.dtype("<c16")).reshape(arr.shape[:-1])
        out[k] = _Host(arr)
    return out


def _nest(items: dict[Any, Any]) -> Any:
    """Nested dicts/lists from ``{Path: array}``; levels keyed 0..n-1 become lists."""
    from ember.tree import Index

    root: dict[Any, Any] = {}
    owner: dict[int, str] = {}
    for path, (name, value) in items.items():
        node = root
        for i, key in enumerate(path):
            last = i == len(path) - 1
            if last:
                if key in node:
                    raise StructureError(PATH_CONFLICT.format(a=name, b=owner.get(id(node[key]), name)))
                node[key] = value
            else:
                child = node.setdefault(key, {})
                if not isinstance(child, dict):
                    raise StructureError(PATH_CONFLICT.format(a=".".join(name.split(".")[: i + 1]), b=name))
                owner[id(child)] = name
                node = child

    def build(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        keys = list(node)
        if keys and all(type(k) is Index for k in keys) and sorted(k.index for k in keys) == list(range(len(keys))):
            return [build(node[Index(i)]) for i in range(len(keys))]
        return {(str(k.index) if type(k) is Index else k.name): build(v) for k, v in node.items()}

    return build(root)


def load_state_dict(
    path_or_dict: str | os.PathLike[str] | Mapping[str, Any],
    like: Any = None,
    *,
    on_missing: str = "error",
    on_unexpected: str = "error",
) -> Any:
    """Read a PyTorch state dict (a safetensors file or a dict of arrays) by ember path.

    Names like ``encoder.layers.0.weight`` are ember paths (digits are list
    positions). With ``like`` (an ember model) every path, shape and dtype is
    checked as in :func:`ember.io.load` and the arrays go onto like's leaves'
    backends. Without it you get nested dicts, with lists where the keys are
    0..n-1. bfloat16 tensors come back as float32 (exact; NumPy has no
    bfloat16). Bad files raise :class:`ember.FileFormatError`.

    >>> import numpy as np
    >>> sd = {"layers.0.weight": np.ones((2, 2)), "layers.1.weight": np.zeros((2, 2))}
    >>> load_state_dict(sd)["layers"][1]["weight"].shape
    (2, 2)
    """
    _check_policy(on_missing, on_unexpected)
    if isinstance(path_or_dict, Mapping):
        return _load(_from_mapping(path_or_dict), "the state dict", like, on_missing, on_unexpected)
    fpath = os.fspath(path_or_dict)
    with _format.open_file(fpath) as st:
        return _load(_plain_arrays(st), repr(fpath), like, on_missing, on_unexpected)


def _load(by_name: dict[str, Any], source: str, like: Any, on_missing: str, on_unexpected: str) -> Any:
    by_path = {name_to_path(n): (n, s) for n, s in by_name.items()}
    if len(by_path) != len(by_name):
        seen: dict[Any, str] = {}
        for n in by_name:
            p = name_to_path(n)
            if p in seen:
                raise StructureError(f"ember.io.load_state_dict: {seen[p]!r} and {n!r} name the same path {str(p)!r}")
            seen[p] = n
    if like is not None:
        stored: dict[str, Any] = {str(p): s for p, (_, s) in by_path.items()}
        return fill_like(stored, like, source, on_missing, on_unexpected)
    return _nest({p: (n, s.host()) for p, (n, s) in by_path.items()})

