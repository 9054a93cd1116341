"""Node registry: which Python types are containers, leaves or constants.

Dispatch is one dict lookup on ``type(x)``: :data:`_DISPATCH` maps a type to
``LEAF`` (an array), ``CONST`` (kept in the treedef) or a :class:`_NodeType`
(a container). Types not seen before are classified once by :func:`_classify`
and cached, so the hot path (``flatten`` inside ``grad``) has no isinstance
chains.

Users extend it with :func:`register` (dataclasses, with static fields via
:func:`field`) and :func:`register_node` (any class, with its own
flatten/unflatten functions).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, TypeVar

from array_api_compat import is_array_api_obj

from ._paths import Index, Key, Name, _PathKey

__all__ = ["register", "register_node", "field", "node_info", "NodeInfo"]

T = TypeVar("T")

# Error texts (module constants so tests can check them).
NOT_A_DATACLASS = (
    "register: {cls} is not a dataclass; decorate it with @dataclasses.dataclass "
    "first (put @ember.tree.register above @dataclass), or use register_node"
)
UNKNOWN_STATIC = (
    "register: {cls} has no field(s) {names} named in static=; the fields are {fields}"
)
BUILTIN_NODE = (
    "register_node: {cls} is a built-in node type of ember.tree and cannot be "
    "re-registered; wrap the value in your own class instead"
)
BAD_CHILD_KEY = (
    "register_node flatten for {cls} returned the key {key!r} ({type}); keys must "
    "be ember.tree.Name, Index or Key instances, as (key, child) pairs"
)
NOT_CALLABLE = "register_node: {what} for {cls} must be callable, got {type}"

# Kinds of node type, tested with `is` in the flatten loop.
LIST, TUPLE, DICT, DICTLIKE, NAMEDTUPLE, DATACLASS, CUSTOM = range(7)


class _Kind:
    """Sentinel kind for non-node types."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


LEAF = _Kind("LEAF")
CONST = _Kind("CONST")


class _NodeType:
    """How to take one container type apart and put it back together.

    ``code`` selects the fast path in ``_ops``; ``names`` are the child field
    names (namedtuple, dataclass), ``static`` the static field names
    (dataclass), ``keys`` the precomputed Name keys; ``flatten``/``unflatten``
    are the user functions of :func:`register_node` nodes.
    """

    __slots__ = ("type", "code", "names", "static", "keys", "flatten", "unflatten")

    def __init__(
        self,
        type_: type,
        code: int,
        names: tuple[str, ...] = (),
        static: tuple[str, ...] = (),
        flatten: Callable[[Any], Any] | None = None,
        unflatten: Callable[[Any, list[Any]], Any] | None = None,
    ) -> None:
        self.type = type_
        self.code = code
        self.names = names
        self.static = static
        self.keys = tuple(Name(n) for n in names)
        self.flatten = flatten
        self.unflatten = unflatten

    def __repr__(self) -> str:
        return f"_NodeType({self.type.__qualname__}, code={self.code})"


_BUILTIN_NODES = {
    list: _NodeType(list, LIST),
    tuple: _NodeType(tuple, TUPLE),
    dict: _NodeType(dict, DICT),
    collections.OrderedDict: _NodeType(collections.OrderedDict, DICTLIKE),
    collections.defaultdict: _NodeType(collections.defaultdict, DICTLIKE),
}

_CONST_TYPES = (
    bool, int, float, complex, str, bytes, type(None), type(Ellipsis), type(NotImplemented),
    range, slice, type,
)

#: type -> LEAF | CONST | _NodeType. Filled lazily by _classify.
_DISPATCH: dict[type, Any] = {**_BUILTIN_NODES, **{t: CONST for t in _CONST_TYPES}}


def _classify(x: Any) -> Any:
    """Kind of an object whose type is not in the dispatch table yet (cached)."""
    t = type(x)
    kind: Any
    if hasattr(t, "__array_namespace__") or is_array_api_obj(x):
        kind = LEAF
    elif issubclass(t, tuple) and isinstance(getattr(t, "_fields", None), tuple):
        kind = _NodeType(t, NAMEDTUPLE, names=tuple(t._fields))
    else:
        kind = CONST
    _DISPATCH[t] = kind
    return kind


def field(*, static: bool = False, **kwargs: Any) -> Any:
    """A ``dataclasses.field`` that can be marked static for ember.tree.

    Why: a static field is structure, not data: it is stored in the treedef
    (so grad/map keep it as it is, and it takes part in treedef equality)
    and is never a leaf, even when it holds an array. Use it for
    hyper-parameters, activation functions, shapes; the footgun it prevents is
    a gradient (or optimizer update) computed for a value that must not change.

    >>> import dataclasses
    >>> @register
    ... @dataclasses.dataclass
    ... class Scale:
    ...     w: object
    ...     name: str = field(static=True, default="scale")
    """
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata["static"] = bool(static)
    return dataclasses.field(metadata=metadata, **kwargs)


def register(cls: type[T] | None = None, *, static: Sequence[str] = ()) -> Any:
    """Register a dataclass as a node: its non-static fields are children.

    Why: models and states are dataclasses; registering them lets flatten,
    map and grad see their arrays, keyed by ``Name(field)`` in field order.
    Fields marked ``field(static=True)`` or named in ``static`` are stored in
    the treedef instead. Unflatten builds the object without calling
    ``__init__``/``__post_init__`` (so frozen dataclasses work and leaves may
    be replaced by anything); attributes that are not dataclass fields are
    not carried over.

    Use as ``@register``, ``@register(static=("act",))`` or ``register(Cls)``.
    """

    def apply(c: type[T]) -> type[T]:
        if not (isinstance(c, type) and dataclasses.is_dataclass(c)):
            raise TypeError(NOT_A_DATACLASS.format(cls=getattr(c, "__qualname__", repr(c))))
        fields = dataclasses.fields(c)
        all_names = [f.name for f in fields]
        extra = set(static) - set(all_names)
        if extra:
            raise TypeError(
                UNKNOWN_STATIC.format(cls=c.__qualname__, names=sorted(extra), fields=all_names)
            )
        static_set = set(static)
        dyn = tuple(
            f.name for f in fields if not (f.metadata.get("static", False) or f.name in static_set)
        )
        stat = tuple(n for n in all_names if n not in dyn)
        _DISPATCH[c] = _NodeType(c, DATACLASS, names=dyn, static=stat)
        return c

    if cls is None:
        return apply
    return apply(cls)


def register_node(
    cls: type,
    flatten: Callable[[Any], tuple[Sequence[tuple[_PathKey, Any]], Hashable]],
    unflatten: Callable[[Any, list[Any]], Any],
) -> None:
    """Register any class as a node with its own flatten/unflatten.

    Why: for containers that are not dataclasses (or need custom keys).
    ``flatten(obj) -> (children, aux)`` where ``children`` is a sequence of
    ``(key, child)`` pairs with ``Name``/``Index``/``Key`` keys and ``aux`` is
    hashable data kept in the treedef; ``unflatten(aux, children_list)``
    rebuilds the object. Registering a type again replaces the old rule.

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> register_node(Pair, lambda p: ([(Name("a"), p.a), (Name("b"), p.b)], None),
    ...               lambda aux, ch: Pair(*ch))
    """
    if cls in _BUILTIN_NODES:
        raise TypeError(BUILTIN_NODE.format(cls=cls.__qualname__))
    for what, fn in (("flatten", flatten), ("unflatten", unflatten)):
        if not callable(fn):
            raise TypeError(NOT_CALLABLE.format(what=what, cls=cls.__qualname__,
                                                type=type(fn).__name__))
    _DISPATCH[cls] = _NodeType(cls, CUSTOM, flatten=flatten, unflatten=unflatten)


def _check_keys(cls: type, keys: tuple[Any, ...]) -> None:
    for k in keys:
        if not isinstance(k, _PathKey):
            raise TypeError(BAD_CHILD_KEY.format(cls=cls.__qualname__, key=k,
                                                 type=type(k).__name__))


# Index keys are made once for small positions (paths of lists are hot).
_INDEX_CACHE = tuple(Index(i) for i in range(1024))


def _index(i: int) -> Index:
    return _INDEX_CACHE[i] if i < 1024 else Index(i)


# Name keys of str dict keys, reused across calls (bounded: cleared when full).
_NAME_CACHE: dict[str, Name] = {}


def _dict_key(k: Any) -> _PathKey:
    if type(k) is str:
        n = _NAME_CACHE.get(k)
        if n is None:
            if len(_NAME_CACHE) >= 8192:
                _NAME_CACHE.clear()
            n = _NAME_CACHE[k] = Name(k)
        return n
    return Name(k) if isinstance(k, str) else Key(k)


_KIND_NAMES = {LIST: "list", TUPLE: "tuple", DICT: "dict", DICTLIKE: "dict",
               NAMEDTUPLE: "namedtuple", DATACLASS: "dataclass", CUSTOM: "node"}


class NodeInfo(NamedTuple):
    """How ember.tree sees an object or a registered class (:func:`node_info`).

    ``kind`` is ``"array"`` (a leaf), ``"const"``, ``"list"``, ``"tuple"``,
    ``"namedtuple"``, ``"dict"``, ``"dataclass"`` or ``"node"``
    (:func:`register_node`); ``names`` the child fields and ``static`` the
    static fields (namedtuples, dataclasses); ``flatten`` / ``unflatten`` a
    ``register_node`` class's own functions.
    """

    kind: str
    names: tuple = ()
    static: tuple = ()
    flatten: Callable[[Any], Any] | None = None
    unflatten: Callable[[Any, list[Any]], Any] | None = None


def node_info(x: Any = None, *, cls: type | None = None) -> NodeInfo | None:
    """How ember.tree takes ``x`` apart, or (``cls=``) a registered class: None if unregistered.

    Why: code that stores structures (``ember.io``) needs each node's kind and
    fields without reaching into the registry.

    >>> import ember.tree as tree
    >>> tree.node_info([1, 2]).kind, tree.node_info(3.0).kind
    ('list', 'const')
    """
    if cls is not None:
        nt = _DISPATCH.get(cls)
        if nt is None or nt is LEAF or nt is CONST:
            return None
    else:
        nt = _DISPATCH.get(type(x))
        if nt is None:
            nt = _classify(x)
    if nt is LEAF:
        return NodeInfo("array")
    if nt is CONST:
        return NodeInfo("const")
    return NodeInfo(_KIND_NAMES[nt.code], tuple(nt.names), tuple(nt.static), nt.flatten, nt.unflatten)
