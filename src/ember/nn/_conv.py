"""Convolution and pooling by im2col: strided slices, one stack, one matmul.

Why: the array API has no convolution. For each kernel offset a strided
slice of the padded input picks the inputs that offset sees; stacking the
slices gives the patch tensor ``(N, C, K, *out)`` (K = kernel size), and a
batched ``matmul`` with the weight ``(O, C*K)`` does the rest. Every step is a
standard op with a VJP, so gradients (of any order) come from autodiff; the
backward pass is one matmul for the weight and strided slice-adds for the
input. Layouts follow PyTorch: input ``(N, C, *spatial)``, weight
``(O, C // groups, *kernel)``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable

from .. import random as _random
from ..autodiff import fused as _fused
from ..tree import field
from . import init as _init
from ._module import Module
from ._util import namespace, ntuple

__all__ = ["conv", "max_pool", "avg_pool", "Conv1d", "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"]

BAD_CHANNELS = (
    "{op}: input of shape {shape} has {got} channels on axis 1, but the weight {wshape} with "
    "groups={groups} expects {want}"
)
BAD_GROUPS = "{op}: in_channels={cin} and out_channels={cout} must both be divisible by groups={groups}"
BAD_RANK = "{op}: expected a ({unb}) or ({bat}) input, got shape {shape}"
BAD_PADDING = "{op}: padding='same' needs stride 1 (got stride={stride}); pass explicit padding instead"
EMPTY_OUTPUT = (
    "{op}: the output would be empty: input spatial shape {spatial} with kernel {kernel}, "
    "stride {stride}, padding {padding} and dilation {dilation}; use a smaller kernel or more padding"
)


def _pads(padding: Any, kernel: tuple[int, ...], dilation: tuple[int, ...], stride: tuple[int, ...],
          op: str) -> tuple[tuple[int, int], ...]:
    nd = len(kernel)
    if padding == "valid":
        return ((0, 0),) * nd
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(BAD_PADDING.format(op=op, stride=stride))
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)
    return tuple((p, p) for p in ntuple(padding, nd, op, "padding"))


def _pad(xp: Any, x: Any, pads: tuple[tuple[int, int], ...], value: float) -> Any:
    """``x`` with ``value`` added around its spatial axes (axis 2 on)."""
    if not any(lo or hi for lo, hi in pads):
        return x
    shape = list(x.shape)
    for d, (lo, hi) in enumerate(pads):
        shape[2 + d] += lo + hi
    if value == 0.0:
        out = xp.zeros(tuple(shape), dtype=x.dtype)
    else:
        out = xp.full(tuple(shape), value, dtype=x.dtype)
    key = (slice(None), slice(None)) + tuple(
        slice(lo, lo + int(x.shape[2 + d])) for d, (lo, _) in enumerate(pads)
    )
    out[key] = x
    return out


def _out_size(n: int, k: int, s: int, d: int, lo: int, hi: int) -> int:
    return (n + lo + hi - d * (k - 1) - 1) // s + 1


def _patches(xp: Any, xpad: Any, kernel: tuple[int, ...], stride: tuple[int, ...],
             dilation: tuple[int, ...], out: tuple[int, ...]) -> Any:
    """``(N, C, K, *out)``: for each kernel offset, the inputs it sees."""
    views = []
    for offs in itertools.product(*(range(k) for k in kernel)):
        key = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(offs, dilation, stride, out)
        )
        views.append(xpad[key])
    if len(views) == 1:
        return xp.expand_dims(views[0], axis=2)
    return xp.stack(views, axis=2)


def _batched(x: Any, nd: int, op: str) -> bool:
    if x.ndim == nd + 2:
        return True
    if x.ndim == nd + 1:
        return False
    dims = ", ".join("HW"[-nd:] if nd <= 2 else ["D"] * nd)
    raise ValueError(BAD_RANK.format(op=op, unb=f"C, {dims}", bat=f"N, C, {dims}", shape=tuple(x.shape)))


def conv(
    x: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] | str = 0,
    dilation: int | tuple[int, ...] = 1,
    groups: int = 1,
) -> Any:
    """N-d convolution (cross-correlation, as in PyTorch) of ``x`` with ``weight``.

    ``x``: ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``; ``weight``:
    ``(O, C // groups, *kernel)``; ``padding``: int, tuple, ``"valid"`` or
    ``"same"`` (stride 1; extra padding goes to the end, like torch).
    """
    nd = weight.ndim - 2
    op = f"conv{nd}d"
    xp = namespace(x, weight, bias)
    batched = _batched(x, nd, op)
    if not batched:
        x = xp.expand_dims(x, axis=0)
    kernel = tuple(int(k) for k in weight.shape[2:])
    stride_ = ntuple(stride, nd, op, "stride")
    dil = ntuple(dilation, nd, op, "dilation")
    pads = _pads(padding, kernel, dil, stride_, op)
    n, c = int(x.shape[0]), int(x.shape[1])
    o, cg = int(weight.shape[0]), int(weight.shape[1])
    if c != cg * groups or o % groups:
        raise ValueError(BAD_CHANNELS.format(op=op, shape=tuple(x.shape), got=c, wshape=tuple(weight.shape),
                                             groups=groups, want=cg * groups))
    spatial = tuple(int(s) for s in x.shape[2:])
    out = tuple(_out_size(sz, k, s, d, lo, hi)
                for sz, k, s, d, (lo, hi) in zip(spatial, kernel, stride_, dil, pads))
    if any(v <= 0 for v in out):
        raise ValueError(EMPTY_OUTPUT.format(op=op, spatial=spatial, kernel=kernel, stride=stride_,
                                             padding=padding, dilation=dil))
    k = math.prod(kernel)
    length = math.prod(out)
    cols = _patches(xp, _pad(xp, x, pads, 0.0), kernel, stride_, dil, out)
    if groups == 1:
        y = xp.matmul(xp.reshape(weight, (o, c * k)), xp.reshape(cols, (n, c * k, length)))
    else:
        w = xp.reshape(weight, (groups, o // groups, cg * k))
        y = xp.matmul(w, xp.reshape(cols, (n, groups, cg * k, length)))
    y = xp.reshape(y, (n, o) + out)
    if bias is not None:
        y = y + xp.reshape(bias, (1, o) + (1,) * nd)
    return y if batched else y[0, ...]


def _pool(x: Any, nd: int, kernel_size: Any, stride: Any, padding: Any, dilation: Any, kind: str,
          count_include_pad: bool = True) -> Any:
    op = f"{kind}_pool{nd}d"
    xp = namespace(x)
    batched = _batched(x, nd, op)
    if not batched:
        x = xp.expand_dims(x, axis=0)
    kernel = ntuple(kernel_size, nd, op, "kernel_size")
    stride_ = kernel if stride is None else ntuple(stride, nd, op, "stride")
    dil = ntuple(dilation, nd, op, "dilation")
    pads = tuple((p, p) for p in ntuple(padding, nd, op, "padding"))
    spatial = tuple(int(s) for s in x.shape[2:])
    out = tuple(_out_size(sz, k, s, d, lo, hi)
                for sz, k, s, d, (lo, hi) in zip(spatial, kernel, stride_, dil, pads))
    if any(v <= 0 for v in out):
        raise ValueError(EMPTY_OUTPUT.format(op=op, spatial=spatial, kernel=kernel, stride=stride_,
                                             padding=padding, dilation=dil))
    n, c = int(x.shape[0]), int(x.shape[1])
    no_pad = not any(lo for lo, _ in pads)
    if no_pad and stride_ == kernel and all(d == 1 for d in dil) and all(
        o * k == sz for o, k, sz in zip(out, kernel, spatial)
    ):
        # Non-overlapping windows tiling the input: combine the k**nd strided views
        # elementwise. (A reduction over the interleaved window axes of a reshape is
        # some 30x slower in NumPy.) Max pooling is one primitive whose gradient goes to
        # each window's first maximal element (row-major, as PyTorch).
        if kind == "max" and math.prod(kernel) > 1 and xp.isdtype(x.dtype, "real floating"):
            y = _fused.max_pool_tiles(x, kernel=kernel)
            return y if batched else y[0, ...]
        y = None
        for offsets in itertools.product(*(range(k) for k in kernel)):
            view = x[(slice(None), slice(None)) + tuple(slice(o, None, k) for o, k in zip(offsets, kernel))]
            y = view if y is None else (xp.maximum(y, view) if kind == "max" else y + view)
        if kind != "max":
            y = y / math.prod(kernel)
        return y if batched else y[0, ...]
    fill = -math.inf if kind == "max" else 0.0
    cols = _patches(xp, _pad(xp, x, pads, fill), kernel, stride_, dil, out)
    if kind == "max":
        y = xp.max(cols, axis=2)
    elif count_include_pad or no_pad:
        y = xp.mean(cols, axis=2)
    else:
        ones = xp.ones((1, 1) + spatial, dtype=x.dtype)
        counts = xp.sum(_patches(xp, _pad(xp, ones, pads, 0.0), kernel, stride_, dil, out), axis=2)
        y = xp.sum(cols, axis=2) / counts
    return y if batched else y[0, ...]


def max_pool(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1) -> Any:
    """Max over windows of the spatial axes (``x.ndim - 2`` of them); padding is -inf."""
    nd = x.ndim - 2
    return _pool(x, nd, kernel_size, stride, padding, dilation, "max")


def avg_pool(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
             count_include_pad: bool = True) -> Any:
    """Mean over windows of the spatial axes; padding zeros count unless ``count_include_pad=False``."""
    nd = x.ndim - 2
    return _pool(x, nd, kernel_size, stride, padding, 1, "avg", count_include_pad)


class _Conv(Module):
    """Shared fields of Conv1d/Conv2d (hyper-parameters are static)."""

    _nd = 0

    weight: Any
    bias: Any = None
    stride: Any = field(static=True, default=1)
    padding: Any = field(static=True, default=0)
    dilation: Any = field(static=True, default=1)
    groups: int = field(static=True, default=1)

    @classmethod
    def init(
        cls,
        key: Any,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, ...],
        *,
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, ...] = 1,
        groups: int = 1,
        bias: bool = True,
        dtype: Any = None,
        xp: Any = None,
        weight_init: Callable[..., Any] | None = None,
    ) -> Any:
        """New layer; default weight and bias ~ U(+-1/sqrt(fan_in)) as in PyTorch."""
        op = cls.__name__
        if in_channels % groups or out_channels % groups:
            raise ValueError(BAD_GROUPS.format(op=op, cin=in_channels, cout=out_channels, groups=groups))
        kernel = ntuple(kernel_size, cls._nd, op, "kernel_size")
        shape = (out_channels, in_channels // groups) + kernel
        kw, kb = _random.split(key)
        w = (weight_init or _init.torch_default)(kw, shape, dtype, xp=xp)
        b = None
        if bias:
            fan_in = (in_channels // groups) * math.prod(kernel)
            b = _init.torch_default(kb, (out_channels,), dtype, fan_in=fan_in, xp=xp)
        return cls(w, b, stride, padding, dilation, groups)

    def __call__(self, x: Any) -> Any:
        return conv(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                    dilation=self.dilation, groups=self.groups)


class Conv1d(_Conv):
    """1-d convolution of ``(N, C, L)`` inputs; weight ``(O, C // groups, k)``."""

    _nd = 1


class Conv2d(_Conv):
    """2-d convolution of ``(N, C, H, W)`` inputs; weight ``(O, C // groups, kh, kw)``."""

    _nd = 2


class _Pool(Module):
    _nd = 0
    _kind = "max"

    kernel_size: Any = field(static=True, default=2)
    stride: Any = field(static=True, default=None)
    padding: Any = field(static=True, default=0)
    dilation: Any = field(static=True, default=1)
    count_include_pad: bool = field(static=True, default=True)

    def __call__(self, x: Any) -> Any:
        return _pool(x, self._nd, self.kernel_size, self.stride, self.padding, self.dilation,
                     self._kind, self.count_include_pad)


class MaxPool1d(_Pool):
    """Max over windows of ``(N, C, L)`` inputs (``stride`` defaults to the window)."""

    _nd = 1


class MaxPool2d(_Pool):
    """Max over windows of ``(N, C, H, W)`` inputs (``stride`` defaults to the window)."""

    _nd = 2


class AvgPool1d(_Pool):
    """Mean over windows of ``(N, C, L)`` inputs (``dilation`` must stay 1)."""

    _nd = 1
    _kind = "avg"


class AvgPool2d(_Pool):
    """Mean over windows of ``(N, C, H, W)`` inputs (``dilation`` must stay 1)."""

    _nd = 2
    _kind = "avg"
