"""Explicit, splittable random keys and the arrays they draw on any backend.

Why: the array API standard has no random numbers, and hidden global state
makes training runs hard to reproduce. ember follows JAX: a :class:`Key` is an
immutable value; :func:`split` derives independent keys from it; every draw
takes a key and a namespace ``xp`` and uses that backend's own generator
(through :func:`ember.backend.random_source`), so the same key on the same
backend always gives the same numbers. Different backends give different (but
each reproducible) numbers.

A :class:`Key` is a plain Python object, so inside an ``ember.tree``
structure it is a constant: gradients and ``tree.map`` keep it as it is.

>>> import ember.random as er
>>> k = er.key(0)
>>> k1, k2 = er.split(k)
>>> a = er.normal(k1, (2, 3))
>>> bool((a == er.normal(k1, (2, 3))).all()), a.shape
(True, (2, 3))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import backend as _backend

__all__ = [
    "Key",
    "key",
    "split",
    "fold_in",
    "normal",
    "uniform",
    "bernoulli",
    "randint",
    "permutation",
]

NOT_A_KEY = (
    "ember.random.{op}: expected an ember.random.Key, got {type}; make one with "
    "ember.random.key(seed) and derive more with ember.random.split(key, n)"
)
BAD_SEED = "ember.random.key: seed must be an int, got {seed!r} ({type})"
BAD_SPLIT = "ember.random.split: n must be a positive int, got {n!r}"

_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1  # seeds handed to backends stay below 2**63 (torch, jax accept them)


def _mix(z: int) -> int:
    """SplitMix64 finaliser: a bijective 64-bit mixing function."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


@dataclass(frozen=True, slots=True)
class Key:
    """An immutable random key (a 64-bit state); make one with :func:`key`.

    Why a class and not an int: an int passed twice by mistake looks fine;
    a Key makes "this value seeds random numbers" explicit, and is a constant
    in ember.tree structures.
    """

    data: int

    def __repr__(self) -> str:
        return f"Key({self.data:#018x})"


def _check(k: Any, op: str) -> Key:
    if type(k) is not Key:
        raise TypeError(NOT_A_KEY.format(op=op, type=type(k).__name__))
    return k


def key(seed: int) -> Key:
    """Make a :class:`Key` from an integer seed (any int; negatives are fine).

    >>> key(0) == key(0), key(0) == key(1)
    (True, False)
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(BAD_SEED.format(seed=seed, type=type(seed).__name__))
    return Key(_mix(seed & _MASK64))


def split(k: Key, n: int = 2) -> tuple[Key, ...]:
    """Derive ``n`` new independent keys from ``k`` (``k`` itself should not be reused).

    >>> a, b = split(key(0)); a != b
    True
    """
    _check(k, "split")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(BAD_SPLIT.format(n=n))
    return tuple(Key(_mix(_mix(k.data ^ 0x5851F42D4C957F2D) + i)) for i in range(n))


def fold_in(k: Key, data: int) -> Key:
    """A new key from ``k`` and an integer (e.g. a step or layer index).

    Why: derive per-step keys without threading splits through a loop.
    """
    _check(k, "fold_in")
    return Key(_mix(k.data ^ _mix((int(data) & _MASK64) ^ 0xD1B54A32D192ED03)))


def _seed(k: Key, op: str) -> int:
    return _check(k, op).data & _MASK63


def _resolve(xp: Any) -> tuple[Any, Any]:
    """(namespace to draw with, function turning its arrays into xp's arrays)."""
    if xp is None:
        return _backend.get("numpy"), None
    inner = getattr(xp, "_backend", None)
    wrap = getattr(xp, "_wrap", None)
    if inner is not None and wrap is not None:  # an ember.autodiff wrapper namespace
        return inner, wrap
    return _backend.get(xp), None


def _draw(op: str, k: Key, xp: Any, fn: str, *args: Any, **kwargs: Any) -> Any:
    seed = _seed(k, op)
    ns, wrap = _resolve(xp)
    out = getattr(_backend.random_source(ns), fn)(seed, *args, **kwargs)
    return wrap(out) if wrap is not None else out


def normal(
    k: Key, shape: Any, dtype: Any = None, *, mean: float = 0.0, std: float = 1.0, xp: Any = None
) -> Any:
    """Normal samples of ``shape`` (default dtype: the backend's default float).

    ``xp`` is a namespace (``ember.autodiff.numpy``, ``array_api_compat.numpy``,
    a raw module such as ``numpy`` or ``dask.array``, or a backend name);
    None means NumPy.
    """
    out = _draw("normal", k, xp, "normal", shape, dtype)
    if std != 1.0:
        out = out * std
    if mean != 0.0:
        out = out + mean
    return out


def uniform(
    k: Key, shape: Any, dtype: Any = None, *, low: float = 0.0, high: float = 1.0, xp: Any = None
) -> Any:
    """Uniform samples in ``[low, high)`` of ``shape`` and a real floating dtype."""
    return _draw("uniform", k, xp, "uniform", shape, dtype, low=low, high=high)


def bernoulli(k: Key, shape: Any, p: float = 0.5, *, xp: Any = None) -> Any:
    """Boolean array of ``shape`` whose entries are True with probability ``p``."""
    return _draw("bernoulli", k, xp, "bernoulli", shape, p=p)


def randint(k: Key, shape: Any, low: int, high: int, dtype: Any = None, *, xp: Any = None) -> Any:
    """Uniform integers in ``[low, high)`` (default dtype: the backend's default integer)."""
    return _draw("randint", k, xp, "integers", shape, low, high, dtype)


def permutation(k: Key, n: int, *, xp: Any = None) -> Any:
    """A random permutation of ``0..n-1`` (argsort of uniform draws).

    >>> sorted(permutation(key(3), 5).tolist())
    [0, 1, 2, 3, 4]
    """
    u = uniform(k, (n,), xp=xp)
    ns = xp if xp is not None and getattr(xp, "_wrap", None) is not None else _resolve(xp)[0]
    return ns.argsort(u)
