"""ember.tree: structures of arrays, flattened with typed paths.

A structure (tree) is made of nodes, leaves and constants:

- **nodes**: list, tuple (children keyed ``Index(i)``), namedtuple and
  registered dataclasses (``Name(field)``), dict / OrderedDict / defaultdict
  (``Name(k)`` for str keys, ``Key(k)`` otherwise; sorted when the keys are
  mutually sortable, else insertion order), and classes registered with
  :func:`register_node`;
- **leaves**: arrays (anything ``array_api_compat.is_array_api_obj`` accepts,
  and ember Tensors);
- **constants**: everything else (scalars, str, None, dtypes, callables,
  unregistered objects) and static dataclass fields. Constants are kept in the
  :class:`TreeDef`, so ``map`` and gradients leave them as they are.

Each leaf has a :class:`Path`; ``str(path)`` reads like
``encoder.layers.0.weight`` and :func:`parse_path` gives the typed path back,
so a list index ``0`` (``layers.0``), a str key ``"0"`` (``layers["0"]``) and
an int key ``0`` (``layers[0]``) never collide.

>>> import ember.tree as tree
>>> td = tree.structure({"lr": 0.1, "layers": [None, "relu"]})
>>> td
TreeDef({'layers': [None, 'relu'], 'lr': 0.1})
>>> str(tree.parse_path('layers.0["x y"][3]'))
'layers.0["x y"][3]'

Cycles are not supported; nesting depth is bounded by Python's recursion limit.
"""

from ._ops import (
    TreeDef,
    filter,
    flatten,
    flatten_with_path,
    glob_regex,
    leaves,
    map,
    map_with_path,
    matcher,
    paths,
    structure,
    unflatten,
)
from ._paths import Index, Key, Name, Path, parse_path
from ._registry import NodeInfo, field, node_info, register, register_node

__all__ = [
    "Name",
    "Index",
    "Key",
    "Path",
    "parse_path",
    "TreeDef",
    "flatten",
    "flatten_with_path",
    "unflatten",
    "map",
    "map_with_path",
    "leaves",
    "paths",
    "structure",
    "filter",
    "matcher",
    "glob_regex",
    "register",
    "register_node",
    "field",
    "node_info",
    "NodeInfo",
]
