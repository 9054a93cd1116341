"""flatten / unflatten / map over structures, and :class:`TreeDef`.

A structure (tree) is made of *nodes* (list, tuple, namedtuple, dict,
registered dataclasses and classes), *leaves* (arrays) and *constants*
(everything else: scalars, strings, None, unregistered objects, static
fields). ``flatten`` returns the leaves in a fixed order and a
:class:`TreeDef` that holds the nodes and constants; ``unflatten`` puts new
leaves back. Constants live in the treedef, so ``map``/``grad`` keep them.

Cycles are not supported (flatten would recurse until RecursionError), and
nesting depth is bounded by Python's recursion limit.
"""

from __future__ import annotations

import builtins
import functools
from itertools import islice
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from array_api_compat import array_namespace

from .._errors import StructureError
from ._paths import Path, _make_path, _PathKey
from ._registry import (
    _DISPATCH,
    CONST,
    CUSTOM,
    DATACLASS,
    DICT,
    DICTLIKE,
    LEAF,
    LIST,
    NAMEDTUPLE,
    TUPLE,
    _check_keys,
    _classify,
    _dict_key,
    _index,
    _NodeType,
)

__all__ = [
    "TreeDef",
    "flatten",
    "flatten_with_path",
    "unflatten",
    "leaves",
    "paths",
    "structure",
    "map",
    "map_with_path",
    "filter",
]

# Error texts (module constants so tests can check them).
LEAF_COUNT_MISMATCH = (
    "unflatten: the treedef has {expected} leaves but {got} were given; pass exactly "
    "one leaf per '*' of {treedef}"
)
STRUCTURE_MISMATCH = (
    "{op}: tree 0 and tree {index} differ at {path}: left has {left}, right has {right}. "
    "All trees must have the same nodes, keys and leaf positions (constants may differ); "
    "compare ember.tree.structure() of each"
)
BAD_PATTERN = (
    "{where}: pattern must be a glob str (e.g. '*.bias'), a list of glob str or a "
    "callable(path_str) -> bool, got {type}"
)
ROOT = "the root"


# --------------------------------------------------------------------------------------
# treedef nodes


class _Leaf:
    __slots__ = ()

    def __repr__(self) -> str:
        return "*"


_LEAF = _Leaf()


class _Const:
    """A constant kept in the treedef."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Node:
    """One container: its kind, structural aux, constants and child defs.

    ``aux``: dict keys (dicts), ``(user_aux, keys)`` (register_node), else None.
    ``consts``: static field values (dataclasses), default_factory (defaultdict);
    compared by ``==`` but ignored by map's structure check.
    """

    __slots__ = ("kind", "aux", "consts", "children", "hash", "treedef")

    def __init__(self, kind: _NodeType, aux: Any, consts: tuple[Any, ...], children: tuple[Any, ...]):
        self.kind = kind
        self.aux = aux
        self.consts = consts
        self.children = children
        self.hash: int | None = None  # set on shared nodes only (see _shared)
        self.treedef: TreeDef | None = None  # a shared root's one TreeDef (see flatten)


_EMPTY: tuple[Any, ...] = ()


def _dict_order(d: dict[Any, Any]) -> tuple[Any, ...]:
    """Keys sorted when mutually sortable, else in insertion order."""
    if len(d) < 2:
        return tuple(d)
    try:
        return tuple(sorted(d))
    except TypeError:
        return tuple(d)


def _children(xs: Any, out: list[Any], is_leaf: Callable[[Any], bool] | None) -> tuple[Any, ...]:
    """The treedef nodes of a container's children; leaves of known types without a call each."""
    nodes = None  # while every child is a leaf: the shared tuple of leaf nodes (see _leaves)
    get = _DISPATCH.get
    for i, c in enumerate(xs):
        if get(c.__class__) is LEAF:  # an array: the usual child (a leaf whatever is_leaf says)
            out.append(c)
            if nodes is not None:
                nodes.append(_LEAF)
            continue
        n = _flat(c, out, is_leaf)
        if nodes is None:
            if n is _LEAF:  # (a leaf of a type met for the first time, or one is_leaf picked)
                continue
            nodes = [_LEAF] * i
        nodes.append(n)
    if nodes is None:  # all leaves: the shared tuple (_leaves's table read inline)
        return _LEAVES.get(len(xs)) or _leaves(len(xs))
    return tuple(nodes)


_LEAVES: dict[int, tuple[Any, ...]] = {}


def _leaves(n: int) -> tuple[Any, ...]:
    """The children of a container of ``n`` leaves: one shared tuple per ``n``, so that
    ``_build`` knows such a container by identity (``children is _LEAVES.get(n)``) and
    rebuilds it in one C-level call."""
    t = _LEAVES.get(n)
    if t is None:
        t = (_LEAF,) * n
        if n <= 4096:
            _LEAVES[n] = t
    return t


def _flat(x: Any, out: list[Any], is_leaf: Callable[[Any], bool] | None) -> Any:
    """Append x's leaves to ``out`` and return its treedef node (recursive)."""
    if is_leaf is not None and is_leaf(x):
        out.append(x)
        return _LEAF
    kind = _DISPATCH.get(type(x))
    if kind is None:
        kind = _classify(x)
    if kind is LEAF:
        out.append(x)
        return _LEAF
    if kind is CONST:
        return _Const(x)
    code = kind.code
    if code == LIST or code == TUPLE:
        return _shared(kind, None, _children(x, out, is_leaf))
    if code == DICT or code == DICTLIKE:
        keys = _dict_order(x)
        if code == DICTLIKE and hasattr(x, "default_factory"):
            return _Node(kind, keys, (x.default_factory,), _children([x[k] for k in keys], out, is_leaf))
        return _shared(kind, keys, _children(list(builtins.map(x.__getitem__, keys)), out, is_leaf))
    if code == NAMEDTUPLE:
        return _Node(kind, None, _EMPTY, tuple([_flat(c, out, is_leaf) for c in x]))
    if code == DATACLASS:
        children = tuple([_flat(getattr(x, n), out, is_leaf) for n in kind.names])
        consts = tuple([getattr(x, n) for n in kind.static]) if kind.static else _EMPTY
        return _Node(kind, None, consts, children)
    # CUSTOM
    pairs, user_aux = kind.flatten(x)
    pairs = list(pairs)
    keys = tuple([p[0] for p in pairs])
    _check_keys(kind.type, keys)
    return _Node(kind, (user_aux, keys), _EMPTY, tuple([_flat(p[1], out, is_leaf) for p in pairs]))


_SHARED: dict[tuple[Any, ...], _Node] = {}


def _shared(kind: _NodeType, aux: Any, children: tuple[Any, ...]) -> _Node:
    """The node of a container without constants, shared by every flatten of an equal one.

    Why: a training loop flattens the same structure every step, and optimizers and
    transforms compare and hash treedefs to find their caches; shared nodes compare
    by identity and keep their hash. Only nodes whose children are leaves or shared
    nodes are shared (constants compare by value); dict keys count with their types
    (``{1: a}`` and ``{True: a}`` rebuild differently). A bounded table.
    """
    if children is not _LEAVES.get(len(children)):  # (not all leaves: _all_leaves, inline)
        for c in children:
            if c is not _LEAF and (c.__class__ is not _Node or c.hash is None):
                return _Node(kind, aux, _EMPTY, children)
    key = (kind, aux, None if aux is None else tuple(builtins.map(type, aux)), children)
    node = _SHARED.get(key)
    if node is None:
        node = _Node(kind, aux, _EMPTY, children)
        node.hash = _hash(node)
        if len(_SHARED) >= 4096:
            _SHARED.clear()
        _SHARED[key] = node
    return node


def _build(d: Any, it: Iterator[Any]) -> Any:
    """Rebuild a tree from treedef node ``d`` taking leaves from ``it`` (recursive)."""
    if d is _LEAF:
        return next(it)
    if type(d) is _Const:
        return d.value
    kind = d.kind
    code = kind.code
    if code == LIST or code == TUPLE:
        ch = d.children
        if ch is _LEAVES.get(len(ch)):  # (_all_leaves, inline: every step rebuilds params)
            items = list(islice(it, len(ch)))
        else:
            items = [next(it) if c is _LEAF else _build(c, it) for c in ch]
        return items if code == LIST else tuple(items)
    if code == DICT:
        ch = d.children
        if ch is _LEAVES.get(len(ch)):  # (zip stops at the keys: takes len(keys) leaves)
            return dict(zip(d.aux, it))
        return {k: next(it) if c is _LEAF else _build(c, it) for k, c in zip(d.aux, ch)}
    if code == DICTLIKE:
        items = [(k, _build(c, it)) for k, c in zip(d.aux, d.children)]
        if d.consts:
            return kind.type(d.consts[0], items)
        return kind.type(items)
    if code == NAMEDTUPLE:
        return kind.type._make([_build(c, it) for c in d.children])
    if code == DATACLASS:
        obj = object.__new__(kind.type)
        for n, c in zip(kind.names, d.children):
            object.__setattr__(obj, n, _build(c, it))
        for n, v in zip(kind.static, d.consts):
            object.__setattr__(obj, n, v)
        return obj
    return kind.unflatten(d.aux[0], [_build(c, it) for c in d.children])


def _keys(d: _Node) -> tuple[_PathKey, ...]:
    """The typed keys of a node's children, in order."""
    code = d.kind.code
    if code == LIST or code == TUPLE:
        return tuple([_index(i) for i in range(len(d.children))])
    if code == DICT or code == DICTLIKE:
        return tuple([_dict_key(k) for k in d.aux])
    if code == CUSTOM:
        return d.aux[1]  # type: ignore[no-any-return]
    return d.kind.keys  # type: ignore[no-any-return]


def _collect_paths(d: Any, prefix: tuple[Any, ...], out: list[Path]) -> None:
    if d is _LEAF:
        out.append(_make_path(prefix))
    elif type(d) is _Node:
        for k, c in zip(_keys(d), d.children):
            if c is _LEAF:
                out.append(_make_path(prefix + (k,)))
            elif type(c) is _Node:
                _collect_paths(c, prefix + (k,), out)


# --------------------------------------------------------------------------------------
# equality / hashing of constants and treedefs


def _is_array(x: Any) -> bool:
    return _DISPATCH.get(type(x)) is LEAF or (
        _DISPATCH.get(type(x)) is None and _classify(x) is LEAF
    )


def _const_eq(a: Any, b: Any) -> bool:
    """``a == b`` for constants, safe for arrays, NaN and odd ``__eq__``."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) is float and math.isnan(a) and math.isnan(b):
        return True
    if _is_array(a):
        try:
            if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
                return False
            xp = array_namespace(a, b)
            return bool(xp.all(a == b))
        except Exception:
            return False
    try:
        return bool(a == b)
    except Exception:
        return False


def _const_hash(v: Any) -> int:
    """A hash consistent with :func:`_const_eq` (unhashables hash by type/shape)."""
    if type(v) is float and math.isnan(v):
        return hash((float, "nan"))
    try:
        return hash(v)
    except TypeError:
        shape = getattr(v, "shape", None)
        try:
            return hash((type(v), tuple(shape) if shape is not None else None))
        except TypeError:
            return hash(type(v))


def _aux_eq(d1: _Node, d2: _Node) -> bool:
    if d1.kind.code == CUSTOM:
        a1, a2 = d1.aux, d2.aux
        return a1[1] == a2[1] and _const_eq(a1[0], a2[0])
    return d1.aux == d2.aux  # dict keys tuple or None


def _eq(a: Any, b: Any, consts: bool) -> bool:
    """Treedef node equality; ``consts=False`` ignores constant values."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is _Const:
        return not consts or _const_eq(a.value, b.value)
    if ta is not _Node:
        return False
    if (
        a.kind.type is not b.kind.type
        or a.kind.code != b.kind.code
        or len(a.children) != len(b.children)
        or not _aux_eq(a, b)
    ):
        return False
    if consts and a.consts is not b.consts:
        if len(a.consts) != len(b.consts) or not builtins.all(
            _const_eq(x, y) for x, y in zip(a.consts, b.consts)
        ):
            return False
    for x, y in zip(a.children, b.children):
        if x is not y and not _eq(x, y, consts):  # `is`: leaves (the usual child) without a call
            return False
    return True


def _hash(d: Any) -> int:
    if d is _LEAF:
        return 1
    if type(d) is _Const:
        return hash((2, _const_hash(d.value)))
    if d.hash is not None:  # a shared node
        return d.hash
    if d.kind.code == CUSTOM:
        aux = (_const_hash(d.aux[0]), d.aux[1])
    else:
        aux = d.aux
    return hash(
        (d.kind.type, aux, tuple([_const_hash(c) for c in d.consts]),
         tuple([1 if c is _LEAF else _hash(c) for c in d.children]))
    )


# --------------------------------------------------------------------------------------
# readable text


def _short(v: Any, limit: int = 40) -> str:
    try:
        r = repr(v)
    except Exception:
        r = f"<{type(v).__name__}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _repr(d: Any) -> str:
    if d is _LEAF:
        return "*"
    if type(d) is _Const:
        return _short(d.value)
    kind, code = d.kind, d.kind.code
    ch = [_repr(c) for c in d.children]
    if code == LIST:
        return "[" + ", ".join(ch) + "]"
    if code == TUPLE:
        return "(" + ", ".join(ch) + ("," if len(ch) == 1 else "") + ")"
    if code == DICT or code == DICTLIKE:
        body = "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(d.aux, ch)) + "}"
        return body if code == DICT else f"{kind.type.__name__}({body})"
    if code == NAMEDTUPLE or code == DATACLASS:
        parts = [f"{n}={c}" for n, c in zip(kind.names, ch)]
        parts += [f"{n}={_short(v)}" for n, v in zip(kind.static, d.consts)]
        return f"{kind.type.__name__}(" + ", ".join(parts) + ")"
    parts = [f"{k}={c}" for k, c in zip(d.aux[1], ch)]
    aux = "" if d.aux[0] is None else f"[{_short(d.aux[0])}]"
    return f"{kind.type.__name__}{aux}(" + ", ".join(parts) + ")"


def _describe(d: Any, leaf: Any) -> str:
    """Words for one side of a structure mismatch."""
    if d is _LEAF:
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is not None and dtype is not None:
            return f"a leaf ({type(leaf).__name__} of shape {tuple(shape)} and dtype {dtype})"
        return f"a leaf ({_short(leaf)})"
    if type(d) is _Const:
        return f"the constant {_short(d.value)}"
    kind, code, n = d.kind, d.kind.code, len(d.children)
    name = kind.type.__name__
    if code == LIST or code == TUPLE:
        return f"a {name} of {n} item{'' if n == 1 else 's'}"
    if code == DICT or code == DICTLIKE:
        return f"a {name} with keys {_short(list(d.aux), 80)}"
    if code == NAMEDTUPLE:
        return f"a {name} namedtuple"
    if code == DATACLASS:
        return f"a {name} (registered dataclass)"
    return f"a {name} node with keys [{', '.join(str(k) for k in d.aux[1])}] and aux {_short(d.aux[0])}"


def _first_diff(
    a: Any, b: Any, prefix: tuple[Any, ...], la: list[Any], lb: list[Any], pos: list[int]
) -> tuple[Path, str, str] | None:
    """First path (pre-order) where two treedef nodes differ, ignoring constant values.

    ``pos`` holds the running leaf index on each side, to describe the leaves.
    """
    if a is _LEAF and b is _LEAF:
        pos[0] += 1
        pos[1] += 1
        return None
    ta, tb = type(a), type(b)
    if ta is _Const and tb is _Const:
        return None
    if ta is _Node and tb is _Node and a.kind.type is b.kind.type and len(a.children) == len(
        b.children
    ) and _aux_eq(a, b):
        for k, x, y in zip(_keys(a), a.children, b.children):
            r = _first_diff(x, y, prefix + (k,), la, lb, pos)
            if r is not None:
                return r
        return None
    left = _describe(a, la[pos[0]] if a is _LEAF else None)
    right = _describe(b, lb[pos[1]] if b is _LEAF else None)
    if ta is _Node and tb is _Node and a.kind.type is b.kind.type and a.kind.code in (DICT, DICTLIKE):
        sa, sb = set(a.aux), set(b.aux)
        extra = []
        if sa - sb:
            extra.append(f"only on the left: {_short(sorted(sa - sb, key=repr), 60)}")
        if sb - sa:
            extra.append(f"only on the right: {_short(sorted(sb - sa, key=repr), 60)}")
        if extra:
            right += " (" + "; ".join(extra) + ")"
    return _make_path(prefix), left, right


def _mismatch(op: str, index: int, a: TreeDef, b: TreeDef, la: list[Any], lb: list[Any]) -> StructureError:
    r = _first_diff(a._root, b._root, (), la, lb, [0, 0])
    if r is None:  # defensive: only reached when _eq and _first_diff disagree
        path, left, right = _make_path(()), repr(a), repr(b)
    else:
        path, left, right = r
    where = str(path) if path else ROOT
    return StructureError(
        STRUCTURE_MISMATCH.format(op=op, index=index, path=where, left=left, right=right)
    )


# --------------------------------------------------------------------------------------
# public API


class _Unsupported(Exception):
    """A node kind the straight-line check does not cover (:func:`_matcher` falls back)."""


_MISSING = object()


def _leaf_at(x: Any, is_leaf: Callable[[Any], bool] | None) -> bool:
    """Whether ``flatten`` takes ``x`` as a leaf (``is_leaf``, or an array)."""
    return (is_leaf is not None and is_leaf(x)) or _is_array(x)


def _matcher(treedef: TreeDef) -> Callable[..., list[Any] | None]:
    """``treedef.leaves_of`` as one generated function: each node's class, length and keys
    checked and its children read in flatten order. Lists, tuples, namedtuples, dicts with
    str keys and registered dataclasses are written out; a treedef with other nodes gets a
    function that flattens and compares."""
    env: dict[str, Any] = {"_D": _DISPATCH.get, "_LEAFK": LEAF, "_leaf": _leaf_at, "_ceq": _const_eq,
                           "_MISSING": _MISSING}
    body: list[str] = []
    leaves: list[str] = []
    names = iter(range(1 << 30))

    def const(value: Any) -> str:
        c = f"c{next(names)}"
        env[c] = value
        return c

    def node(d: Any, v: str) -> None:
        if d is _LEAF:
            body.append(f"if _D({v}.__class__) is not _LEAFK and not _leaf({v}, il): return None")
            leaves.append(v)
            return
        if type(d) is _Const:
            body.append(f"if (il is not None and il({v})) or not _ceq({v}, {const(d.value)}): return None")
            return
        kind, code = d.kind, d.kind.code
        body.append(f"if il is not None and il({v}): return None")
        if code in (LIST, TUPLE, NAMEDTUPLE):
            body.append(f"if {v}.__class__ is not {const(kind.type)} or len({v}) != {len(d.children)}: return None")
            items = [f"{v}[{i}]" for i in range(len(d.children))]
        elif code == DICT and all(type(k) is str for k in d.aux):
            body.append(f"if {v}.__class__ is not {const(kind.type)} or len({v}) != {len(d.aux)}: return None")
            items = [f"{v}.get({k!r}, _MISSING)" for k in d.aux]
        elif code == DATACLASS and all(n.isidentifier() for n in kind.names + kind.static):
            body.append(f"if {v}.__class__ is not {const(kind.type)}: return None")
            for n, value in zip(kind.static, d.consts):
                body.append(f"if not _ceq({v}.{n}, {const(value)}): return None")
            items = [f"{v}.{n}" for n in kind.names]
        else:
            raise _Unsupported
        for item, c in zip(items, d.children):
            w = f"x{next(names)}"
            body.append(f"{w} = {item}")
            if code == DICT:
                body.append(f"if {w} is _MISSING: return None")
            node(c, w)

    try:
        node(treedef._root, "t")
    except _Unsupported:
        def compare(tree: Any, is_leaf: Callable[[Any], bool] | None) -> list[Any] | None:
            out, td = flatten(tree, is_leaf)
            return out if td == treedef else None

        return compare
    src = "def _match(t, il):\n" + "".join(f"    {line}\n" for line in body)
    src += f"    return [{', '.join(leaves)}]\n"
    exec(compile(src, "<ember.tree.leaves_of>", "exec"), env)
    return env["_match"]


def _builder(treedef: TreeDef) -> Callable[[Sequence[Any]], Any]:
    """``treedef.unflattener()`` as one generated function: one expression that builds the
    structure from ``leaves[0]``, ``leaves[1]``, ... Lists, tuples, namedtuples, dicts and
    registered dataclasses are written out; a treedef with other nodes gets ``unflatten``."""
    env: dict[str, Any] = {"_new": object.__new__, "_set": object.__setattr__}
    names = iter(range(1 << 30))
    at = iter(range(treedef._num_leaves))
    pre: list[str] = []

    def const(value: Any) -> str:
        c = f"c{next(names)}"
        env[c] = value
        return c

    def expr(d: Any) -> str:
        if d is _LEAF:
            return f"l[{next(at)}]"
        if type(d) is _Const:
            return const(d.value)
        kind, code = d.kind, d.kind.code
        items = [expr(c) for c in d.children]
        if code == LIST:
            return f"[{', '.join(items)}]"
        if code == TUPLE:
            return f"({''.join(i + ', ' for i in items)})"
        if code == NAMEDTUPLE:
            return f"{const(kind.type)}({', '.join(items)})"
        if code == DICT:
            return "{" + ", ".join(f"{const(k)}: {i}" for k, i in zip(d.aux, items)) + "}"
        if code == DATACLASS and all(n.isidentifier() for n in kind.names + kind.static):
            o = f"o{next(names)}"  # (built before the expression that reads it, fields set)
            pre.append(f"{o} = _new({const(kind.type)})")
            for n, i in zip(kind.names, items):
                pre.append(f"_set({o}, {n!r}, {i})")
            for n, v in zip(kind.static, d.consts):
                pre.append(f"_set({o}, {n!r}, {const(v)})")
            return o
        raise _Unsupported

    try:
        body = expr(treedef._root)
    except _Unsupported:
        return lambda leaves: unflatten(treedef, leaves)
    src = "def _build(l):\n" + "".join(f"    {line}\n" for line in pre) + f"    return {body}\n"
    exec(compile(src, "<ember.tree.unflattener>", "exec"), env)
    return env["_build"]


class TreeDef:
    """The shape of a structure: its nodes, keys, constants and leaf positions.

    Why: ``unflatten`` needs it to put leaves back; it is hashable so
    transforms can cache by structure. Equality compares constants too (a
    treedef with ``lr=0.1`` differs from one with ``lr=0.2``); use
    :meth:`matches` to compare only nodes, keys and leaf positions.

    >>> leaves_, td = flatten({"a": 1.0, "b": [None, 2]})
    >>> td
    TreeDef({'a': 1.0, 'b': [None, 2]})
    >>> td.num_leaves
    0
    """

    __slots__ = ("_root", "_num_leaves", "_hash", "_paths", "_match", "_build")

    def __init__(self, root: Any, num_leaves: int) -> None:
        self._root = root
        self._num_leaves = num_leaves
        self._hash: int | None = None
        self._paths: list[Path] | None = None
        self._match: Callable[..., list[Any] | None] | None = None
        self._build: Callable[[Sequence[Any]], Any] | None = None

    def leaves_of(self, tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any] | None:
        """``tree``'s leaves if ``flatten(tree, is_leaf)`` would give this treedef (constants
        equal), else None.

        Why: a loop that flattens a structure of the same shape on every call (a
        jitted step's parameters and optimizer state) checks it against the last
        treedef instead of building a new one. The check is straight-line code
        made on the treedef's first ``leaves_of`` (that costs about as much as a
        few dozen flattens): then about a fifth of :func:`flatten`'s time for a
        nested dict of arrays. A tree that does not fit costs a failed check.

        >>> td = structure({"w": 0, "b": [1, 2]}, is_leaf=lambda x: isinstance(x, int))
        >>> td.leaves_of({"b": [3, 4], "w": 5}, is_leaf=lambda x: isinstance(x, int))
        [3, 4, 5]
        >>> td.leaves_of({"b": [3], "w": 5}, is_leaf=lambda x: isinstance(x, int)) is None
        True
        """
        m = self._match
        if m is None:
            m = self._match = _matcher(self)
        try:
            return m(tree, is_leaf)
        except Exception:  # (an attribute or key the check reads raised: not this structure)
            return None

    @property
    def num_leaves(self) -> int:
        """How many leaves ``unflatten`` takes."""
        return self._num_leaves

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """Build the structure back with ``leaves`` in flatten order."""
        return unflatten(self, leaves)

    def unflattener(self) -> Callable[[Sequence[Any]], Any]:
        """A function of a sequence of exactly ``num_leaves`` leaves building the structure,
        as :meth:`unflatten` does (the count is not checked).

        Why: a structure rebuilt on every call (a jitted step's results) is built by
        straight-line code made once for this treedef (that costs about as much as a
        few dozen unflattens) instead of walking the treedef each time.

        >>> build = structure({"w": 0, "b": [1, 2]}, is_leaf=lambda x: isinstance(x, int)).unflattener()
        >>> build([3, 4, 5])
        {'b': [3, 4], 'w': 5}
        """
        b = self._build
        if b is None:
            b = self._build = _builder(self)
        return b

    def paths(self) -> list[Path]:
        """The path of each leaf, in flatten order."""
        if self._paths is None:
            out: list[Path] = []
            _collect_paths(self._root, (), out)
            self._paths = out
        return list(self._paths)

    def matches(self, other: TreeDef) -> bool:
        """Same nodes, keys and leaf positions, whatever the constant values."""
        if not isinstance(other, TreeDef):
            raise TypeError(f"TreeDef.matches needs a TreeDef, got {type(other).__name__}")
        return self._num_leaves == other._num_leaves and _eq(self._root, other._root, False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TreeDef):
            return NotImplemented
        if self is other or self._root is other._root:  # (shared nodes: flattens of one structure)
            return True
        if self._num_leaves != other._num_leaves:
            return False
        if self._hash is not None and other._hash is not None and self._hash != other._hash:
            return False
        return _eq(self._root, other._root, True)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self._num_leaves, _hash(self._root)))
        return self._hash

    def __repr__(self) -> str:
        return f"TreeDef({_repr(self._root)})"


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """Split ``tree`` into its list of leaves and its :class:`TreeDef`.

    Why: transforms work on flat lists of arrays; the treedef rebuilds the
    structure (constants included). ``is_leaf(x) -> True`` stops recursion at x.

    >>> flatten([1, (2, None)])[1]
    TreeDef([1, (2, None)])
    """
    out: list[Any] = []
    root = _flat(tree, out, is_leaf)
    if root.__class__ is _Node and root.hash is not None:  # a shared node: its one TreeDef,
        # whose hash and paths are computed once and which caches find by identity (a
        # training loop flattens its parameters every step)
        td = root.treedef
        if td is None:
            td = root.treedef = TreeDef(root, len(out))
        return out, td
    return out, TreeDef(root, len(out))


def flatten_with_path(
    tree: Any, is_leaf: Callable[[Any], bool] | None = None
) -> tuple[list[tuple[Path, Any]], TreeDef]:
    """Like :func:`flatten`, with each leaf's :class:`Path` next to it."""
    out, td = flatten(tree, is_leaf)
    return list(zip(td.paths(), out)), td


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """Build the structure described by ``treedef`` with new ``leaves``.

    Raises StructureError when the number of leaves is wrong.

    >>> unflatten(structure([None, {"x": 0}]), [])
    [None, {'x': 0}]
    """
    if not isinstance(treedef, TreeDef):
        raise TypeError(f"unflatten needs a TreeDef first, got {type(treedef).__name__}")
    leaves = leaves if isinstance(leaves, list) else list(leaves)
    if len(leaves) != treedef._num_leaves:
        raise StructureError(
            LEAF_COUNT_MISMATCH.format(
                expected=treedef._num_leaves, got=len(leaves), treedef=_short(treedef, 200)
            )
        )
    root = treedef._root
    if root.__class__ is _Node and root.kind.code == DICT and root.children is _LEAVES.get(len(leaves)):
        return dict(zip(root.aux, leaves))  # a dict of leaves (parameters, every step): _build's case
    return _build(root, iter(leaves))


def leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    """The leaves of ``tree`` in flatten order."""
    out: list[Any] = []
    _flat(tree, out, is_leaf)
    return out


def paths(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Path]:
    """The path of each leaf of ``tree``, in flatten order."""
    return structure(tree, is_leaf).paths()


def structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeDef:
    """The :class:`TreeDef` of ``tree``."""
    return flatten(tree, is_leaf)[1]


def _flatten_all(
    op: str, tree: Any, rest: Sequence[Any], is_leaf: Callable[[Any], bool] | None
) -> tuple[list[Any], TreeDef, list[list[Any]]]:
    first, td = flatten(tree, is_leaf)
    others = []
    for i, r in enumerate(rest, 1):
        lr, tr = flatten(r, is_leaf)
        if len(lr) != td._num_leaves or not _eq(td._root, tr._root, False):
            raise _mismatch(op, i, td, tr, first, lr)
        others.append(lr)
    return first, td, others


def map(  # noqa: A001  (ember.tree.map, like jax.tree.map)
    fn: Callable[..., Any],
    tree: Any,
    *rest: Any,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Apply ``fn`` to the leaves of ``tree`` (and the matching leaves of ``rest``).

    Why: the n-ary map is how updates are written (``map(lambda p, g: p - lr * g,
    params, grads)``). The result has ``tree``'s structure and constants;
    ``rest`` must have the same nodes, keys and leaf positions (its constant
    values are ignored), else StructureError names the first differing path.

    >>> map(lambda a, b: a + b, {"x": 1, "y": "kept"}, {"x": 10, "y": "ignored"},
    ...     is_leaf=lambda v: type(v) is int)
    {'x': 11, 'y': 'kept'}
    """
    first, td, others = _flatten_all("map", tree, rest, is_leaf)
    if not others:
        new = [fn(x) for x in first]
    else:
        new = [fn(*xs) for xs in zip(first, *others)]
    return _build(td._root, iter(new))


def map_with_path(
    fn: Callable[..., Any],
    tree: Any,
    *rest: Any,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Like :func:`map` with the leaf's :class:`Path` first: ``fn(path, leaf, *others)``."""
    first, td, others = _flatten_all("map_with_path", tree, rest, is_leaf)
    new = [fn(p, *xs) for p, *xs in zip(td.paths(), first, *others)]
    return _build(td._root, iter(new))


@functools.lru_cache(maxsize=512)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob: ``*`` any run (dots included, captured as a group), ``?`` one character.

    Unlike fnmatch, ``[`` and ``]`` are literal, so bracket segments of the
    path syntax (``d["x y"]``, ``d[3]``) can be matched as written. The
    groups let a caller reuse what ``*`` matched (optimizer state renames).

    >>> glob_regex("encoder.*").fullmatch("encoder.layers.0.weight").group(1)
    'layers.0.weight'
    """
    out = []
    for c in pattern:
        if c == "*":
            out.append("(.*)")
        elif c == "?":
            out.append(".")
        else:
            out.append(re.escape(c))
    return re.compile("".join(out), re.DOTALL)


def matcher(pattern: Any, where: str = "filter") -> Callable[[str], bool]:
    """A predicate ``(path_str) -> bool`` for a glob, a collection of globs or a callable.

    The one path-pattern syntax of ember: :func:`filter`, optimizer groups,
    freezing and state surgery all use it. ``where`` names the caller in the
    error for a pattern of another type.

    >>> matcher("*.bias")("layers.0.bias")
    True
    """
    if isinstance(pattern, str):
        rx = glob_regex(pattern)
        return lambda s: rx.fullmatch(s) is not None
    if isinstance(pattern, (list, tuple, set, frozenset)) and builtins.all(isinstance(p, str) for p in pattern):
        rxs = [glob_regex(p) for p in pattern]
        return lambda s: builtins.any(r.fullmatch(s) is not None for r in rxs)
    if callable(pattern):
        return lambda s: bool(pattern(s))
    raise TypeError(BAD_PATTERN.format(where=where, type=type(pattern).__name__))


def filter(  # noqa: A001
    tree: Any,
    pattern: str | Sequence[str] | Callable[[str], bool],
    *,
    is_leaf: Callable[[Any], bool] | None = None,
) -> dict[str, Any]:
    """Leaves whose path text matches ``pattern``, as ``{str(path): leaf}``.

    Why: parameter groups, freezing and state surgery select by path.
    ``pattern`` is a glob (``"*.bias"``, ``"encoder.*"``; ``*`` also crosses
    dots, ``?`` is one character, brackets are literal), a list of globs (any
    matches), or a ``callable(path_str) -> bool``.
    """
    match = matcher(pattern)
    out, td = flatten(tree, is_leaf)
    result = {}
    for p, leaf in zip(td.paths(), out):
        s = str(p)
        if match(s):
            result[s] = leaf
    return result
