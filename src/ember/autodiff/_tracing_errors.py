"""The error of code that needs a value ``ember.jit`` does not know while it traces."""

from __future__ import annotations

import linecache
import os
import sys

from .._errors import TracingError

__all__ = ["concrete_value_error"]

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONCRETE = (
    "ember.jit: {what} of a traced Tensor (shape {shape}, dtype {dtype}) at {where}{line}: its "
    "value depends on the function's inputs, which jit does not know while it traces the "
    "function (once per input signature). Fix: compute with the namespace's functions "
    "(xp.where(c, a, b) instead of `if`), or mark the argument static "
    "(ember.jit(f, static_argnums=(i,))): it is then part of the signature and the "
    "function is traced again for each new value"
)


def _user_frame():
    """The innermost frame outside the ember package (the user's line)."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PKG + os.sep):
        f = f.f_back
    return f


def concrete_value_error(t, what: str) -> TracingError:
    """The error for code that needs a staged value while jit traces (``if x > 0``)."""
    f = _user_frame()
    where, line = "an unknown line", ""
    if f is not None:
        where = f"{f.f_code.co_filename}:{f.f_lineno}"
        src = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
        if src:
            line = f" (`{src}`)"
    return TracingError(CONCRETE.format(what=what, shape=tuple(t.shape), dtype=t.dtype, where=where, line=line))
