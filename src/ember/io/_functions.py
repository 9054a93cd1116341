"""Functions inside saved structures: a registry by name, and opt-in import paths.

Why: a model such as ``nn.MLP`` or ``nn.Sequential([Linear, relu])`` holds
functions (activations) as constants. A file cannot hold code, so ember.io
stores a function by a *registered name* (``"ember.nn.relu"``); ember's own
functions (``ember.nn`` and ``ember.nn.init``) are registered already, and
:func:`register_function` adds yours. Any other callable is stored by its
import path (``"mypkg.acts:swish"``) only when the caller opts in with
``allow_callables=True``, on save and again on load, because resolving it
imports a module, which runs that module's code. Never pickle.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, TypeVar

from ember._errors import FileFormatError

__all__ = ["register_function"]

F = TypeVar("F", bound=Callable[..., Any])

# --- error texts (constants so tests can check them) -----------------------

NAME_TAKEN = (
    "ember.io.register_function: the name {name!r} is already registered for {other!r}; "
    "pick another name"
)
BAD_NAME = "ember.io.register_function: name must be a non-empty str, got {name!r}"
NOT_CALLABLE = "ember.io.register_function: {fn!r} is not callable"
UNKNOWN_FUNCTION = (
    "the file refers to the function {name!r} at {path!r}, which is not registered in this "
    "process; call ember.io.register_function(fn, {name!r}) before loading, or pass like="
)
CALLABLE_REFUSED = (
    "the file refers to the callable {ref!r} at {path!r} by import path; loading it imports "
    "that module (runs its code), so pass allow_callables=True if you trust the file, or pass like="
)
BAD_IMPORT = "the callable {ref!r} at {path!r} cannot be imported: {why}"

_BY_NAME: dict[str, Any] = {}
_BY_ID: dict[int, str] = {}
_BUILTINS_DONE = False


def register_function(fn: F, name: str | None = None) -> F:
    """Let ember.io save ``fn`` by ``name`` (default ``"module.qualname"``); returns ``fn``.

    Register the same function under the same name in the process that
    loads the file. Usable as a decorator.

    >>> import ember.io
    >>> @ember.io.register_function
    ... def swish2(x):
    ...     return x
    >>> ember.io._functions.lookup(f"{swish2.__module__}.swish2") is swish2
    True
    """
    if not callable(fn):
        raise TypeError(NOT_CALLABLE.format(fn=fn))
    if name is None:
        name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    if not isinstance(name, str) or not name:
        raise ValueError(BAD_NAME.format(name=name))
    _builtins()
    other = _BY_NAME.get(name)
    if other is not None and other is not fn:
        raise ValueError(NAME_TAKEN.format(name=name, other=other))
    _BY_NAME[name] = fn
    _BY_ID.setdefault(id(fn), name)
    return fn


def _builtins() -> None:
    """Register ember's own functions: the public functions of ember.nn and ember.nn.init."""
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    _BUILTINS_DONE = True
    import ember.nn as nn

    for prefix, mod in (("ember.nn", nn), ("ember.nn.init", nn.init)):
        for attr in getattr(mod, "__all__", ()):
            obj = getattr(mod, attr, None)
            if inspect.isfunction(obj):
                _BY_NAME[f"{prefix}.{attr}"] = obj
                _BY_ID.setdefault(id(obj), f"{prefix}.{attr}")


def name_of(fn: Any) -> str | None:
    """The registered name of ``fn``, or None."""
    _builtins()
    name = _BY_ID.get(id(fn))
    return name if name is not None and _BY_NAME.get(name) is fn else None


def lookup(name: str) -> Any:
    """The function registered as ``name``, or None."""
    _builtins()
    return _BY_NAME.get(name)


def import_path(fn: Any) -> str | None:
    """``"module:qualname"`` of a module-level function or class that resolves back to ``fn``."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qual, str) or "<" in qual:
        return None
    import sys

    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    return f"{mod}:{qual}" if obj is fn else None


def resolve_import(ref: str, path: str) -> Any:
    """Import ``"module:qualname"`` (allow_callables=True only) and return the callable."""
    mod, sep, qual = ref.partition(":")
    if not sep or not all(p.isidentifier() for p in mod.split(".") + qual.split(".")):
        raise FileFormatError(BAD_IMPORT.format(ref=ref, path=path, why="not a 'module:qualname' path"))
    try:
        obj: Any = importlib.import_module(mod)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # ImportError, AttributeError, or the module's own failure
        raise FileFormatError(BAD_IMPORT.format(ref=ref, path=path, why=f"{type(exc).__name__}: {exc}")) from exc
    if not callable(obj):
        raise FileFormatError(BAD_IMPORT.format(ref=ref, path=path, why="it is not callable"))
    return obj
