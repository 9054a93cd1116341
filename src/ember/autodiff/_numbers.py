"""Python numbers that ``ember.jit`` traces (a step counter that changes every call).

``jit`` keeps a Python ``int`` or ``float`` inside its arguments as part of the
signature until a call brings a new value at the same place with the same
arrays. From then on that place is *traced*: the function sees a
:class:`TracedNumber`. Its arithmetic with numbers becomes *host steps* of the
graph: plain Python operations run at each call before any backend call. It
meets an array as a Python scalar does: ``x * n`` is ``x * asarray(n,
dtype=x.dtype)``, the array API's rule for scalars.

Code that needs the value itself gets this call's value and a *guard*:
``if n > 3``, ``int(n)``, ``range(n)``, ``axis=n``, a function of the
namespace called with ``n``. The graph is replayed only for calls where each
guard holds; elsewhere ``jit`` traces another one.
:func:`host_call` runs any Python function of numbers as one host step,
without a guard: this is how an optimizer evaluates its learning-rate
schedule at a traced step.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Callable

from ._tensor import Tensor

__all__ = ["TracedNumber", "TracedInt", "TracedFloat", "TracedComplex", "host_call", "is_traced_number"]

_PY = (bool, int, float, complex)
NOT_A_NUMBER = (
    "host_call({fn}): the function returned {kind}; under ember.jit a host step must return a "
    "Python number (int, float, bool or complex). Convert the result (float(...)) in the function"
)


class TracedNumber:
    """A Python number that a ``jit`` trace follows (see the module doc).

    ``isinstance(n, numbers.Integral)`` (``numbers.Real``) holds for a traced
    int (float), so code that checks for numbers accepts it.
    """

    __slots__ = ("_trace", "_slot", "_v", "_pinned")

    def __init__(self, trace: Any, slot: int, value: Any):
        self._trace = trace
        self._slot = slot
        self._v = value
        self._pinned = False

    # ------------------------------------------------------------ values
    def _concrete(self) -> Any:
        """This call's value; the graph keeps a guard that the value stays the same."""
        if self._trace.active and not self._pinned:
            self._pinned = True
            eq = self._trace.host(_same_value, (self, self._v), "same")
            self._trace.guard(eq, True)
        return self._v

    def __bool__(self) -> bool:
        b = bool(self._v)
        if self._trace.active:
            self._trace.guard(self, b)
        return b

    def __int__(self) -> int:
        return int(self._concrete())

    def __float__(self) -> float:
        return float(self._concrete())

    def __complex__(self) -> complex:
        return complex(self._concrete())

    def __index__(self) -> int:
        return operator.index(self._concrete())

    def __hash__(self) -> int:
        return hash(self._concrete())

    __array_ufunc__ = None  # (NumPy's operators defer to ours: `array * n` is `n.__rmul__(array)`)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy

        return numpy.asarray(self._concrete(), dtype=dtype)

    def __repr__(self) -> str:
        return f"<traced {type(self._v).__name__}: {self._v!r} in this trace>"

    def __format__(self, spec: str) -> str:  # (printing inside a traced function shows this trace's value)
        return format(self._v, spec)

    def __round__(self, ndigits: Any = None) -> Any:
        args = (self,) if ndigits is None else (self, ndigits)
        return _apply(round, args, "round")


def _same_value(a: Any, b: Any) -> bool:
    """Whether a later call's number ``a`` is value ``b`` a graph was specialized to: ``==``,
    except that a float zero's sign counts (``0.0 == -0.0``, but ``copysign`` tells them
    apart) and a NaN is the same as a NaN of its sign (no NaN equals another)."""
    if a.__class__ is complex or b.__class__ is complex:
        a, b = complex(a), complex(b)
        return _same_value(a.real, b.real) and _same_value(a.imag, b.imag)
    if a != a or b != b:  # (NaN)
        return a != a and b != b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if a == 0 and b == 0 and (a.__class__ is float or b.__class__ is float):
        return math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def values_of(args: tuple) -> list:
    """``args`` with each traced number replaced by this trace's value."""
    return [a._v if isinstance(a, TracedNumber) else a for a in args]


def _active_trace(args: tuple) -> Any:
    """The active trace of a traced number among ``args``, or None."""
    for a in args:
        if isinstance(a, TracedNumber) and a._trace.active:
            return a._trace
    return None


def _apply(fn: Callable, args: tuple, name: str) -> Any:
    """``fn(*args)`` recorded as a host step of the trace of the traced numbers among ``args``
    (run on their values when that trace has ended)."""
    tr = _active_trace(args)
    return fn(*values_of(args)) if tr is None else tr.host(fn, args, name)


def _binary(fn: Callable, name: str, reflected: bool) -> Callable:
    def method(self: TracedNumber, other: Any) -> Any:
        if other.__class__ in _PY or isinstance(other, TracedNumber):
            return _apply(fn, (other, self) if reflected else (self, other), name)
        if isinstance(other, Tensor) and type(other)._ns is not None and self._trace.active:
            a = self._trace.number_array(self, other)  # the scalar as the array API converts it
            return fn(other, a) if reflected else fn(a, other)
        v = self._concrete()  # anything else (a raw backend array): this call's value, guarded
        return fn(other, v) if reflected else fn(v, other)

    return method


_BINARY = {
    "add": (operator.add, "+"), "sub": (operator.sub, "-"), "mul": (operator.mul, "*"),
    "truediv": (operator.truediv, "/"), "floordiv": (operator.floordiv, "//"),
    "mod": (operator.mod, "%"), "pow": (operator.pow, "**"), "and": (operator.and_, "&"),
    "or": (operator.or_, "|"), "xor": (operator.xor, "^"), "lshift": (operator.lshift, "<<"),
    "rshift": (operator.rshift, ">>"),
}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": abs, "invert": operator.invert,
          "trunc": math.trunc, "floor": math.floor, "ceil": math.ceil}

for _n, (_f, _s) in _BINARY.items():
    setattr(TracedNumber, f"__{_n}__", _binary(_f, _s, False))
    setattr(TracedNumber, f"__r{_n}__", _binary(_f, _s, True))
for _n, _s in _COMPARE.items():  # (reflected comparisons are Python's swap of these)
    setattr(TracedNumber, f"__{_n}__", _binary(getattr(operator, _n), _s, False))
for _n, _f in _UNARY.items():
    setattr(TracedNumber, f"__{_n}__", lambda self, _f=_f, _n=_n: _apply(_f, (self,), _n))
del _n, _f, _s
# divmod as its two host steps (CPython computes // and % of floats by divmod itself)
TracedNumber.__divmod__ = lambda self, other: (self // other, self % other)
TracedNumber.__rdivmod__ = lambda self, other: (other // self, other % self)


class TracedInt(TracedNumber):
    """A traced ``int`` (or ``bool``)."""

    __slots__ = ()


class TracedFloat(TracedNumber):
    """A traced ``float``."""

    __slots__ = ()


class TracedComplex(TracedNumber):
    """A traced ``complex``."""

    __slots__ = ()


numbers.Integral.register(TracedInt)
numbers.Real.register(TracedFloat)
numbers.Complex.register(TracedComplex)


def traced(trace: Any, slot: int, value: Any) -> TracedNumber:
    """The traced number of ``value`` in slot ``slot`` of ``trace`` (its class by its type)."""
    if isinstance(value, (bool, int)):
        return TracedInt(trace, slot, value)
    if isinstance(value, float):
        return TracedFloat(trace, slot, value)
    if isinstance(value, complex):
        return TracedComplex(trace, slot, value)
    raise TypeError(NOT_A_NUMBER.format(fn="?", kind=type(value).__name__))


def host_call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; under ``ember.jit``, with a traced number among ``args``, one host step.

    The step runs ``fn`` on each call's numbers (before the graph's backend
    calls), so a function that branches on its arguments (a learning-rate
    schedule) needs no guard and no new trace. ``fn`` must be pure and return
    a Python number there.

    >>> from ember.autodiff import host_call
    >>> host_call(lambda t: 0.5 ** t, 3)
    0.125
    """
    tr = _active_trace(args)
    if tr is None:
        return fn(*values_of(args))
    name = getattr(fn, "__name__", "host_call")

    def checked(*vals: Any) -> Any:
        out = fn(*vals)
        if not isinstance(out, _PY):
            raise TypeError(NOT_A_NUMBER.format(fn=name, kind=type(out).__name__))
        return out

    return tr.host(checked, args, name)


def is_traced_number(x: Any) -> bool:
    """True for a number that ``ember.jit`` is tracing (a :class:`TracedNumber`)."""
    return isinstance(x, TracedNumber)
