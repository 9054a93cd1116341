"""Path patterns: the globs used by groups, freezing and state surgery.

The syntax is the one of :func:`ember.tree.filter`: ``*`` matches any run of
characters (dots included), ``?`` one character, every other character
(brackets too) stands for itself, and the whole path text must match. A
pattern may also be a list of globs (any one matches) or a callable
``(path_str) -> bool``.

Also the cached namespace lookup the optimizers use on every leaf.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Sequence, Union

from array_api_compat import array_namespace

Pattern = Union[str, Sequence[str], Callable[[str], bool]]

BAD_PATTERN = (
    "{where}: a path pattern must be a glob str (e.g. '*.bias'), a list of globs or a "
    "callable(path_str) -> bool, not {type}"
)


@functools.lru_cache(maxsize=512)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob; ``*`` captures (as a group) any run, ``?`` one character."""
    out = []
    for c in pattern:
        if c == "*":
            out.append("(.*)")
        elif c == "?":
            out.append(".")
        else:
            out.append(re.escape(c))
    return re.compile("".join(out), re.DOTALL)


def matcher(pattern: Pattern, where: str = "pattern") -> Callable[[str], bool]:
    """A predicate ``(path_str) -> bool`` for ``pattern`` (see the module docstring)."""
    if isinstance(pattern, str):
        rx = glob_regex(pattern)
        return lambda s: rx.fullmatch(s) is not None
    if isinstance(pattern, (list, tuple, frozenset, set)) and all(isinstance(p, str) for p in pattern):
        rxs = [glob_regex(p) for p in pattern]
        return lambda s: any(r.fullmatch(s) is not None for r in rxs)
    if callable(pattern):
        return lambda s: bool(pattern(s))
    raise TypeError(BAD_PATTERN.format(where=where, type=type(pattern).__name__))


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
