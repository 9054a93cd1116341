"""Path patterns: the globs used by groups, freezing and state surgery.

The syntax and its implementation are :func:`ember.tree.matcher` (the same
as :func:`ember.tree.filter`): ``*`` matches any run of
characters (dots included), ``?`` one character, every other character
(brackets too) stands for itself, and the whole path text must match. A
pattern may also be a list of globs (any one matches) or a callable
``(path_str) -> bool``.

Also the cached namespace lookup the optimizers use on every leaf.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

from array_api_compat import array_namespace

from ..tree import glob_regex, matcher  # noqa: F401  (the one path-glob syntax, re-exported here)

Pattern = Union[str, Sequence[str], Callable[[str], bool]]


def describe(pattern: Pattern) -> str:
    """Short text of a pattern for error messages."""
    if isinstance(pattern, str):
        return repr(pattern)
    if callable(pattern):
        return getattr(pattern, "__name__", "<callable>")
    return repr(list(pattern))


# ------------------------------------------------------------------ namespaces
_NS: dict[type, Any] = {}
_KIND: dict[tuple[type, Any], str] = {}


def namespace(x: Any) -> Any:
    """``array_api_compat.array_namespace(x)``, cached by array type (it is on the hot path)."""
    t = type(x)
    xp = _NS.get(t)
    if xp is None:
        xp = array_namespace(x)
        if len(_NS) < 64:
            _NS[t] = xp
    return xp


def kind(x: Any) -> str:
    """``"real"``, ``"complex"`` or ``"other"``: the dtype kind of array ``x`` (cached)."""
    key = (type(x), x.dtype)
    k = _KIND.get(key)
    if k is None:
        xp = namespace(x)
        k = "real" if xp.isdtype(x.dtype, "real floating") else "complex" if xp.isdtype(x.dtype, "complex floating") else "other"
        if len(_KIND) < 256:
            _KIND[key] = k
    return k
