"""Initializers: ``fn(key, shape, dtype=None, *, xp=None, ...) -> array``.

All share one signature so layers take any of them as ``weight_init=``.
Fans follow PyTorch: for a weight of shape ``(out, in, *kernel)``,
``fan_in = in * prod(kernel)`` and ``fan_out = out * prod(kernel)``; a 1-d
shape has ``fan_in = fan_out = shape[0]``. ``dtype`` defaults to float32;
``xp`` is any namespace ember.random accepts (None: NumPy).

>>> import ember.random as er
>>> w = xavier_uniform(er.key(0), (4, 3))
>>> w.shape, str(w.dtype)
((4, 3), 'float32')
"""

from __future__ import annotations

import math
from typing import Any

from .. import random as _random

__all__ = [
    "fans",
    "zeros",
    "ones",
    "normal",
    "uniform",
    "xavier_uniform",
    "xavier_normal",
    "glorot_uniform",
    "glorot_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "he_uniform",
    "he_normal",
    "calculate_gain",
    "torch_default",
]

BAD_MODE = "{op}: mode must be 'fan_in' or 'fan_out', got {mode!r}"
BAD_NONLINEARITY = "calculate_gain: unknown nonlinearity {name!r}; use one of {known}"


def _ns(xp: Any) -> Any:
    return _random._resolve(xp)[0] if getattr(xp, "_wrap", None) is None else xp


def _dtype(xp: Any, dtype: Any) -> Any:
    ns = _ns(xp)
    if dtype is None:
        return ns.float32
    return getattr(ns, dtype) if isinstance(dtype, str) else dtype


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight shape, PyTorch's convention."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str = "linear", param: float | None = None) -> float:
    """Recommended gain of a nonlinearity (``relu``: sqrt(2), ``tanh``: 5/3, ...)."""
    known = ("linear", "identity", "conv1d", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu")
    if nonlinearity in ("linear", "identity", "conv1d", "conv2d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope * slope))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise ValueError(BAD_NONLINEARITY.format(name=nonlinearity, known=", ".join(known)))


def zeros(key: Any, shape: Any, dtype: Any = None, *, xp: Any = None) -> Any:
    """All zeros (``key`` is ignored and may be None)."""
    return _ns(xp).zeros(tuple(shape) if not isinstance(shape, int) else (shape,), dtype=_dtype(xp, dtype))


def ones(key: Any, shape: Any, dtype: Any = None, *, xp: Any = None) -> Any:
    """All ones (``key`` is ignored and may be None)."""
    return _ns(xp).ones(tuple(shape) if not isinstance(shape, int) else (shape,), dtype=_dtype(xp, dtype))


def normal(
    key: Any, shape: Any, dtype: Any = None, *, mean: float = 0.0, std: float = 1.0, xp: Any = None
) -> Any:
    """Samples of N(mean, std**2)."""
    return _random.normal(key, shape, _dtype(xp, dtype), mean=mean, std=std, xp=xp)


def uniform(
    key: Any, shape: Any, dtype: Any = None, *, low: float = 0.0, high: float = 1.0, xp: Any = None
) -> Any:
    """Samples of U[low, high)."""
    return _random.uniform(key, shape, _dtype(xp, dtype), low=low, high=high, xp=xp)


def xavier_uniform(key: Any, shape: Any, dtype: Any = None, *, gain: float = 1.0, xp: Any = None) -> Any:
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio 2010)."""
    fi, fo = fans(shape)
    a = gain * math.sqrt(6.0 / (fi + fo))
    return uniform(key, shape, dtype, low=-a, high=a, xp=xp)


def xavier_normal(key: Any, shape: Any, dtype: Any = None, *, gain: float = 1.0, xp: Any = None) -> Any:
    """N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fi, fo = fans(shape)
    return normal(key, shape, dtype, std=gain * math.sqrt(2.0 / (fi + fo)), xp=xp)


def _kaiming_std(shape: Any, a: float, mode: str, nonlinearity: str, op: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(BAD_MODE.format(op=op, mode=mode))
    fi, fo = fans(shape)
    gain = calculate_gain(nonlinearity, a)
    return gain / math.sqrt(fi if mode == "fan_in" else fo)


def kaiming_uniform(key: Any, shape: Any, dtype: Any = None, *, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "relu", xp: Any = None) -> Any:
    """U(-b, b) with ``b = sqrt(3) * gain / sqrt(fan)`` (He et al. 2015)."""
    b = math.sqrt(3.0) * _kaiming_std(shape, a, mode, nonlinearity, "kaiming_uniform")
    return uniform(key, shape, dtype, low=-b, high=b, xp=xp)


def kaiming_normal(key: Any, shape: Any, dtype: Any = None, *, a: float = 0.0, mode: str = "fan_in",
                   nonlinearity: str = "relu", xp: Any = None) -> Any:
    """N(0, std**2) with ``std = gain / sqrt(fan)`` (He et al. 2015)."""
    std = _kaiming_std(shape, a, mode, nonlinearity, "kaiming_normal")
    return normal(key, shape, dtype, std=std, xp=xp)


glorot_uniform = xavier_uniform
glorot_normal = xavier_normal
he_uniform = kaiming_uniform
he_normal = kaiming_normal


def torch_default(key: Any, shape: Any, dtype: Any = None, *, fan_in: int | None = None, xp: Any = None) -> Any:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear/Conv weights and biases."""
    fi = fans(shape)[0] if fan_in is None else fan_in
    b = 1.0 / math.sqrt(fi) if fi > 0 else 0.0
    if b == 0.0:
        return zeros(key, shape, dtype, xp=xp)
    return uniform(key, shape, dtype, low=-b, high=b, xp=xp)
