"""Typed path keys (:class:`Name`, :class:`Index`, :class:`Key`) and :class:`Path`.

Every leaf of a structure has a path: the keys that lead to it from the root.
Keys are typed so that a list position ``0``, a string dict key ``"0"`` and an
int dict key ``0`` stay three different things, in memory and in text::

    >>> str(Path([Name("layers"), Index(0), Name("weight")]))
    'layers.0.weight'
    >>> str(Path([Name("layers"), Name("0")]))
    'layers["0"]'
    >>> str(Path([Name("layers"), Key(0)]))
    'layers[0]'
    >>> parse_path('a["x y"].b') == Path([Name("a"), Name("x y"), Name("b")])
    True

Canonical text form (``str(path)``), reversible with :func:`parse_path`:

- ``Name`` bare when it is an ASCII identifier (``[A-Za-z_][A-Za-z0-9_]*``),
  else ``["json string"]``;
- ``Index`` bare, in decimal;
- ``Key`` as ``[json]`` for int/float/bool/None keys and tuples of JSON-able
  values (``d[3]``, ``d[true]``, ``d[[1, "a"]]``). Other keys (enums,
  frozensets, numpy scalars...) print as ``[<repr>]``, which is readable but
  cannot be parsed back (:func:`parse_path` raises for it);
- segments joined by ``"."``; a bracket segment attaches without a dot; the
  root path is ``""``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .._errors import StructureError

__all__ = ["Name", "Index", "Key", "Path", "parse_path"]

# Error texts (module constants so tests can check them).
PARSE_ERROR = "parse_path: cannot parse {text!r} at character {pos}: {why}"
NOT_PARSEABLE_KEY = (
    "the key {segment} has no JSON form, so its path cannot be parsed back; "
    "use str, int, float, bool, None or tuples of those as dict keys"
)
NAME_TYPE_ERROR = "Name(name) needs a str, got {type}; use Key(...) for non-string dict keys"
INDEX_TYPE_ERROR = "Index(index) needs an int, got {type}"
KEY_STR_ERROR = "Key(key) got the str {key!r}; string dict keys and attributes are Name(...)"
KEY_HASH_ERROR = "Key(key) needs a hashable key (a dict key), got {type}"
PATH_KEY_ERROR = "Path(...) items must be Name, Index or Key, got {type} at position {pos}"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|-?[0-9]+")
_DECODER = json.JSONDecoder()
_JSON_SCALARS = (int, float, bool, type(None))


class _PathKey:
    """Base of the three key types: immutable, hashable, ordered."""

    __slots__ = ()
    _rank = 0

    def _value(self) -> Any:
        raise NotImplementedError

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        a, b = self._value(), other._value()  # type: ignore[attr-defined]
        return type(a) is type(b) and a == b

    def __hash__(self) -> int:
        v = self._value()
        return hash((self._rank, type(v), v))

    def _order(self, other: object) -> tuple[Any, Any]:
        if not isinstance(other, _PathKey):
            raise TypeError
        a, b = (self._rank, self._value()), (other._rank, other._value())
        try:
            a < b  # noqa: B015  (probe comparability)
        except TypeError:
            a = (a[0], type(a[1]).__name__, repr(a[1]))
            b = (b[0], type(b[1]).__name__, repr(b[1]))
        return a, b

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, _PathKey):
            return NotImplemented
        a, b = self._order(other)
        return a < b

    def __le__(self, other: object) -> bool:
        if not isinstance(other, _PathKey):
            return NotImplemented
        a, b = self._order(other)
        return a <= b

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, _PathKey):
            return NotImplemented
        a, b = self._order(other)
        return a > b

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, _PathKey):
            return NotImplemented
        a, b = self._order(other)
        return a >= b

    def __str__(self) -> str:
        return _segment(self)


class Index(_PathKey):
    """Position ``index`` in a list or tuple; prints bare: ``layers.0``."""

    __slots__ = ("index",)
    _rank = 0
    index: int

    def __init__(self, index: int) -> None:
        if type(index) is not int:
            if isinstance(index, bool) or not hasattr(index, "__index__"):
                raise TypeError(INDEX_TYPE_ERROR.format(type=type(index).__name__))
            index = index.__index__()
        object.__setattr__(self, "index", index)

    def _value(self) -> int:
        return self.index

    def __repr__(self) -> str:
        return f"Index({self.index})"


class Name(_PathKey):
    """Attribute or string dict key ``name``; prints bare when an identifier."""

    __slots__ = ("name",)
    _rank = 1
    name: str

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(NAME_TYPE_ERROR.format(type=type(name).__name__))
        if type(name) is not str:
            name = str.__str__(name)  # StrEnum & co: keep the plain text
        object.__setattr__(self, "name", name)

    def _value(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Name({self.name!r})"


class Key(_PathKey):
    """Non-string dict key ``key`` (int, tuple, ...); prints in brackets: ``d[3]``."""

    __slots__ = ("key",)
    _rank = 2
    key: Any

    def __init__(self, key: Any) -> None:
        if isinstance(key, str):
            raise TypeError(KEY_STR_ERROR.format(key=key))
        try:
            hash(key)
        except TypeError:
            raise TypeError(KEY_HASH_ERROR.format(type=type(key).__name__)) from None
        object.__setattr__(self, "key", key)

    def _value(self) -> Any:
        return self.key

    def __repr__(self) -> str:
        return f"Key({self.key!r})"


def _key_json(key: Any) -> str | None:
    """JSON text of a dict key when it can be parsed back exactly, else None."""
    t = type(key)
    if t in _JSON_SCALARS:
        return json.dumps(key)
    if t is tuple and _jsonable_tuple(key):
        return json.dumps(_tuple_to_list(key), ensure_ascii=False)
    return None


def _jsonable_tuple(t: tuple[Any, ...]) -> bool:
    for v in t:
        tv = type(v)
        if tv is tuple:
            if not _jsonable_tuple(v):
                return False
        elif tv is not str and tv not in _JSON_SCALARS:
            return False
    return True


def _tuple_to_list(t: tuple[Any, ...]) -> list[Any]:
    return [_tuple_to_list(v) if type(v) is tuple else v for v in t]


def _list_to_tuple(v: list[Any]) -> tuple[Any, ...]:
    return tuple(_list_to_tuple(x) if type(x) is list else x for x in v)


def _segment(k: _PathKey) -> str:
    """Text of one key: bare (``name``, ``0``) or bracketed (``["x y"]``, ``[3]``)."""
    t = type(k)
    if t is Index:
        return str(k.index)  # type: ignore[attr-defined]
    if t is Name:
        n = k.name  # type: ignore[attr-defined]
        if _IDENT.fullmatch(n):
            return n  # type: ignore[no-any-return]
        return "[" + json.dumps(n, ensure_ascii=False) + "]"
    key = k.key  # type: ignore[attr-defined]
    j = _key_json(key)
    if j is not None:
        return "[" + j + "]"
    r = repr(key)
    return "[" + (r if r.startswith("<") else "<" + r + ">") + "]"


class Path(tuple):  # type: ignore[type-arg]
    """A tuple of typed keys from the root to a node; ``str(path)`` is canonical.

    Why: optimizer state, checkpoints and filters address parameters by path,
    so the text form must be unambiguous and parse back (:func:`parse_path`).

    >>> p = Path([Name("encoder"), Name("layers"), Index(2)])
    >>> str(p), str(p / Name("bias"))
    ('encoder.layers.2', 'encoder.layers.2.bias')
    """

    __slots__ = ()

    def __new__(cls, keys: Iterable[_PathKey] = ()) -> Path:
        keys = tuple(keys)
        for i, k in enumerate(keys):
            if not isinstance(k, _PathKey):
                raise TypeError(PATH_KEY_ERROR.format(type=type(k).__name__, pos=i))
        return tuple.__new__(cls, keys)

    def __str__(self) -> str:
        parts = []
        for i, k in enumerate(self):
            s = _segment(k)
            if i and s[0] != "[":
                parts.append(".")
            parts.append(s)
        return "".join(parts)

    def __repr__(self) -> str:
        return "Path([" + ", ".join(repr(k) for k in self) + "])"

    def __truediv__(self, key: _PathKey) -> Path:
        """``path / key``: the path one level deeper."""
        if not isinstance(key, _PathKey):
            return NotImplemented
        return tuple.__new__(Path, (*self, key))

    def __add__(self, other: tuple[Any, ...]) -> Path:  # type: ignore[override]
        return Path(tuple.__add__(self, tuple(other)))

    def __getitem__(self, item: Any) -> Any:
        r = tuple.__getitem__(self, item)
        return tuple.__new__(Path, r) if isinstance(item, slice) else r

    @property
    def parent(self) -> Path:
        """The path without its last key (the root's parent is the root)."""
        return tuple.__new__(Path, tuple.__getitem__(self, slice(None, -1)))

    @staticmethod
    def parse(text: str) -> Path:
        """Same as :func:`parse_path`."""
        return parse_path(text)


def _make_path(keys: tuple[Any, ...]) -> Path:
    """Build a Path without validating the keys (hot path)."""
    return tuple.__new__(Path, keys)


def _bracket_key(value: Any) -> _PathKey:
    if isinstance(value, str):
        return Name(value)
    if isinstance(value, list):
        return Key(_list_to_tuple(value))
    if isinstance(value, dict):
        raise ValueError("a JSON object is not a valid dict key")
    return Key(value)


def parse_path(text: str) -> Path:
    """Parse the canonical text of a path back into a :class:`Path`.

    Why: paths are stored as text (checkpoints, optimizer state, configs) and
    must come back as the same typed keys: ``parse_path(str(p)) == p``.

    >>> parse_path('layers.0.weight')
    Path([Name('layers'), Index(0), Name('weight')])
    >>> parse_path('d["0"][0]')
    Path([Name('d'), Name('0'), Key(0)])
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_path needs a str, got {type(text).__name__}")
    keys: list[_PathKey] = []
    i, n = 0, len(text)

    def fail(pos: int, why: str) -> StructureError:
        return StructureError(PARSE_ERROR.format(text=text, pos=pos, why=why))

    while i < n:
        c = text[i]
        if c == "[":
            if text.startswith("[<", i):
                end = text.find(">]", i)
                seg = text[i : end + 2] if end >= 0 else text[i:]
                raise fail(i, NOT_PARSEABLE_KEY.format(segment=seg))
            try:
                value, j = _DECODER.raw_decode(text, i + 1)
            except ValueError:
                raise fail(i + 1, "expected a JSON value after '['") from None
            if j >= n or text[j] != "]":
                raise fail(j, "expected ']' after the bracketed key")
            try:
                keys.append(_bracket_key(value))
            except (TypeError, ValueError) as e:
                raise fail(i + 1, str(e)) from None
            i = j + 1
            continue
        if keys:
            if c != ".":
                raise fail(i, "expected '.' or '[' between path segments")
            i += 1
        m = _BARE.match(text, i)
        if m is None:
            raise fail(i, "expected a name ([A-Za-z_][A-Za-z0-9_]*), an index or '[...]'")
        tok = m.group()
        keys.append(Name(tok) if _IDENT.fullmatch(tok) else Index(int(tok)))
        i = m.end()
    return tuple.__new__(Path, keys)
