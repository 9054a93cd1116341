"""Dense layers and containers: Linear, Embedding, LayerNorm, BatchNorm, Dropout,
Sequential, MLP, and :func:`apply` (a list/tuple of layers applies in order).

Every layer is a frozen :class:`Module` built with a classmethod ``init(key, ...)``
(or directly from its arrays, e.g. ``Linear(weight, bias)``), and computes with
the namespace of its inputs. Weights follow PyTorch's layouts (``Linear.weight``
is ``(out, in)``), so weights copy across unchanged.

Calling conventions (keyword-only extras):

- ``key=``: layers that draw random numbers (Dropout, containers) take a
  ``ember.random.Key``; without one they are deterministic (inference).
- ``train=True``: layers with state (BatchNorm, containers) then return
  ``(output, new_layer)``; the new layer carries the updated state. With
  ``train=False`` (default) they return the output only.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .. import random as _random
from ..autodiff import Tensor
from ..autodiff import fused as _fused
from ..kernels import check_linear, layer_norm
from ..autodiff import raw_value
from ..func import stop_gradient
from ..tree import field
from . import init as _init
from ._activations import relu
from ._module import Module
from ._util import dtype_of, namespace

__all__ = ["linear", "Linear", "Embedding", "LayerNorm", "BatchNorm", "Dropout", "Sequential", "MLP", "apply"]

NOT_A_LAYER = (
    "apply: item at position {where} is a {type}, which is not callable; a layer list may hold "
    "Modules, functions (activations) and nested lists/tuples of them"
)
BAD_RATE = "Dropout: rate must be in [0, 1), got {rate!r}"
BN_SHAPE = (
    "BatchNorm: input of shape {shape} has {got} channels on axis 1, but the layer has "
    "{want}; BatchNorm normalises axis 1 of (N, C), (N, C, L) or (N, C, H, W) inputs"
)


def _ns_for(xp: Any) -> Any:
    """The namespace to create arrays with (None: NumPy through array_api_compat)."""
    return _random._resolve(xp)[0] if getattr(xp, "_wrap", None) is None else xp


# --- the affine map ---------------------------------------------------------------


def linear(x: Any, weight: Any, bias: Any = None, *, activation: Callable[[Any], Any] | None = None
           ) -> Any:
    """``activation(x @ weight.T + bias)``, ``weight`` of shape ``(out, in)`` (``torch``'s ``F.linear``).

    When ``activation`` is None or :func:`relu`, this is one primitive
    (``ember.autodiff.fused.linear``): one tape node whose backward computes the
    three gradients together (on NumPy the bias and the ReLU go into the product's buffer, and
    an input with several leading axes is multiplied as one matrix of rows:
    NumPy runs a stacked matmul as one GEMM per matrix).
    Otherwise it composes ``matmul``, ``+`` and ``activation``. Dtypes promote
    as in that composition.

    >>> import ember.autodiff.numpy as xp
    >>> linear(xp.ones((2, 3)), xp.ones((4, 3)), xp.zeros(4), activation=relu).shape
    (2, 4)
    """
    if activation is None or activation is relu:
        return _fused.linear(x, weight, bias, relu=activation is relu)
    xp = namespace(x, weight, bias)
    check_linear(x, weight, bias)
    y = xp.matmul(x, xp.matrix_transpose(weight))
    if bias is not None:
        y = y + bias
    return y if activation is None else activation(y)


# --- applying a list of layers --------------------------------------------------


def _apply(layer: Any, x: Any, key: Any, train: bool, where: str) -> tuple[Any, Any]:
    if isinstance(layer, (list, tuple)) and not hasattr(layer, "_fields"):
        new = []
        fuse = False
        for i, item in enumerate(layer):
            if fuse:  # the ReLU went into the Linear before it
                fuse = False
                new.append(item)
                continue
            if item.__class__ is Linear and i + 1 < len(layer) and layer[i + 1] is relu:
                x = linear(x, item.weight, item.bias, activation=relu)  # one node: (Linear, relu)
                new.append(item)
                fuse = True
                continue
            sub = _random.fold_in(key, i) if key is not None else None
            x, n = _apply(item, x, sub, train, f"{where}.{i}" if where else str(i))
            new.append(n)
        return x, type(layer)(new)
    if isinstance(layer, Module):
        kw: dict[str, Any] = {}
        if key is not None and type(layer)._takes_key:
            kw["key"] = key
        if train and type(layer)._stateful:
            return layer(x, train=True, **kw)
        return layer(x, **kw), layer
    if callable(layer):
        return layer(x), layer
    raise TypeError(NOT_A_LAYER.format(where=where or "<root>", type=type(layer).__name__))


def apply(layers: Any, x: Any, *, key: Any = None, train: bool = False) -> Any:
    """Run ``x`` through a layer, or a (nested) list/tuple of layers, in order.

    Why: in the functional style a model's hidden part is just a list such
    as ``[(Linear, relu), (Linear, relu)]``; lists and tuples apply their
    items in order, Modules and plain functions are called. Layer ``i`` gets
    ``ember.random.fold_in(key, i)`` when it takes a key. With ``train=True``
    returns ``(y, new_layers)`` (same structure, updated BatchNorm state).
    """
    y, new = _apply(layers, x, key, train, "")
    return (y, new) if train else y


# --- layers ---------------------------------------------------------------------


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``(out, in)`` (like torch)."""

    weight: Any
    bias: Any = None

    @classmethod
    def init(
        cls,
        key: Any,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        dtype: Any = None,
        xp: Any = None,
        weight_init: Callable[..., Any] | None = None,
        bias_init: Callable[..., Any] | None = None,
    ) -> Linear:
        """New layer; default weights and bias ~ U(+-1/sqrt(in_features)) as in PyTorch."""
        kw, kb = _random.split(key)
        winit = weight_init or _init.torch_default
        w = winit(kw, (out_features, in_features), dtype, xp=xp)
        b = None
        if bias:
            if bias_init is None:
                b = _init.torch_default(kb, (out_features,), dtype, fan_in=in_features, xp=xp)
            else:
                b = bias_init(kb, (out_features,), dtype, xp=xp)
        return cls(w, b)

    def __call__(self, x: Any) -> Any:
        return linear(x, self.weight, self.bias)


class Embedding(Module):
    """Rows of ``weight`` (``(num_embeddings, dim)``) picked by integer ids of any shape."""

    weight: Any

    @classmethod
    def init(
        cls, key: Any, num_embeddings: int, dim: int, *, dtype: Any = None, xp: Any = None,
        weight_init: Callable[..., Any] | None = None,
    ) -> Embedding:
        """New table; default rows ~ N(0, 1) as in PyTorch."""
        return cls((weight_init or _init.normal)(key, (num_embeddings, dim), dtype, xp=xp))

    def __call__(self, ids: Any) -> Any:
        xp = namespace(ids, self.weight)
        flat = xp.reshape(ids, (-1,))
        out = xp.take(self.weight, flat, axis=0)
        return xp.reshape(out, tuple(ids.shape) + (self.weight.shape[1],))


class LayerNorm(Module):
    """Normalise over the last ``len(shape)`` axes, then scale and shift (like torch)."""

    weight: Any
    bias: Any
    shape: tuple = field(static=True, default=())
    eps: float = 1e-5

    @classmethod
    def init(
        cls, shape: int | tuple[int, ...], *, eps: float = 1e-5, affine: bool = True,
        dtype: Any = None, xp: Any = None,
    ) -> LayerNorm:
        """New layer with weight 1 and bias 0 (``affine=False``: neither)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if not affine:
            return cls(None, None, shape, eps)
        ns = _ns_for(xp)
        dt = dtype_of(ns, dtype)
        return cls(ns.ones(shape, dtype=dt), ns.zeros(shape, dtype=dt), shape, eps)

    def __call__(self, x: Any) -> Any:
        xp = namespace(x, self.weight)
        axes = tuple(range(x.ndim - len(self.shape), x.ndim))
        if all(a is None or xp.isdtype(a.dtype, "real floating") for a in (x, self.weight, self.bias)):
            return _fused.layer_norm(x, self.weight, self.bias, axes=axes, eps=self.eps)  # one node
        return layer_norm(xp, x, self.weight, self.bias, axes, self.eps)[0]  # composed


def _detach_like(new: Any, old: Any) -> Any:
    """``new`` cut from every trace, as the same kind of array as ``old``."""
    new = stop_gradient(new)
    if isinstance(new, Tensor) and not isinstance(old, Tensor):
        return raw_value(new)
    return new


class BatchNorm(Module):
    """Batch normalisation over axis 1 (``BatchNorm1d``/``2d`` of torch in one layer).

    Running statistics are **static fields**: they are structure, not
    leaves, so ``ember.grad`` never differentiates them and optimizers,
    which train the non-static floating leaves, never update them; ember.io
    still saves them. Update them functionally::

        y, bn = bn(x, train=True)   # batch statistics; bn has new running stats
        y = bn(x)                   # inference: running statistics

    In training mode the output uses the batch mean and biased variance; the
    running variance is updated with the unbiased one, with
    ``running = (1 - momentum) * running + momentum * batch`` (torch's rule).
    Inside ``ember.grad`` return the new module through ``has_aux=True``.
    """

    _stateful = True

    weight: Any
    bias: Any
    running_mean: Any = field(static=True, default=None)
    running_var: Any = field(static=True, default=None)
    momentum: float = 0.1
    eps: float = 1e-5

    @classmethod
    def init(
        cls, num_features: int, *, momentum: float = 0.1, eps: float = 1e-5, affine: bool = True,
        dtype: Any = None, xp: Any = None,
    ) -> BatchNorm:
        """New layer: weight 1, bias 0, running mean 0 and running variance 1."""
        ns = _ns_for(xp)
        dt = dtype_of(ns, dtype)
        w = ns.ones((num_features,), dtype=dt) if affine else None
        b = ns.zeros((num_features,), dtype=dt) if affine else None
        return cls(w, b, ns.zeros((num_features,), dtype=dt), ns.ones((num_features,), dtype=dt),
                   momentum, eps)

    def _bshape(self, x: Any) -> tuple[int, ...]:
        c = self.running_mean.shape[0]
        if x.ndim < 2 or x.shape[1] != c:
            raise ValueError(BN_SHAPE.format(shape=tuple(x.shape), got=x.shape[1] if x.ndim > 1 else None,
                                             want=c))
        return (1, c) + (1,) * (x.ndim - 2)

    def __call__(self, x: Any, *, train: bool = False) -> Any:
        xp = namespace(x, self.weight)
        bshape = self._bshape(x)
        if train:
            axes = (0,) + tuple(range(2, x.ndim))
            mean = xp.mean(x, axis=axes, keepdims=True)
            d = x - mean
            var = xp.mean(d * d, axis=axes, keepdims=True)
            y = d / xp.sqrt(var + self.eps)
        else:
            # asarray: static statistics may be arrays of another library (e.g. loaded as NumPy)
            mean = xp.reshape(xp.asarray(self.running_mean), bshape)
            var = xp.reshape(xp.asarray(self.running_var), bshape)
            y = (x - mean) / xp.sqrt(var + self.eps)
        if self.weight is not None:
            y = y * xp.reshape(self.weight, bshape)
        if self.bias is not None:
            y = y + xp.reshape(self.bias, bshape)
        if not train:
            return y
        n = math.prod(int(x.shape[a]) for a in axes)
        m = self.momentum
        bmean = xp.reshape(mean, (-1,))
        bvar = xp.reshape(var, (-1,)) * (n / max(n - 1, 1))
        new_mean = _detach_like((1.0 - m) * self.running_mean + m * bmean, self.running_mean)
        new_var = _detach_like((1.0 - m) * self.running_var + m * bvar, self.running_var)
        return y, self.replace(running_mean=new_mean, running_var=new_var)


class Dropout(Module):
    """Zero each element with probability ``rate`` and scale the rest by ``1/(1-rate)``.

    Active only when called with a random key (``layer(x, key=k)``); without
    one it is the identity (inference), so evaluation needs no flag.
    """

    _takes_key = True

    rate: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(BAD_RATE.format(rate=self.rate))

    def __call__(self, x: Any, *, key: Any = None) -> Any:
        if key is None or self.rate == 0.0:
            return x
        xp = namespace(x)
        keep = _random.bernoulli(key, tuple(x.shape), 1.0 - self.rate, xp=xp)
        return xp.where(keep, x * (1.0 / (1.0 - self.rate)), xp.zeros_like(x))


class Sequential(Module):
    """Layers applied in order; ``layers`` is a list (or tuple) of layers or functions.

    ``seq(x, key=k)`` hands each layer its own key; ``seq(x, train=True)``
    returns ``(y, new_seq)`` with updated state (see :func:`apply`).
    """

    _takes_key = True
    _stateful = True

    layers: Any = ()

    def __call__(self, x: Any, *, key: Any = None, train: bool = False) -> Any:
        y, new = _apply(self.layers, x, key, train, "layers")
        return (y, self.replace(layers=new)) if train else y


class MLP(Module):
    """A multi-layer perceptron: ``hidden`` is a list of ``(Linear, activation)`` pairs.

    >>> import ember.random as er
    >>> m = MLP.init(er.key(0), 4, [8, 8], 3)
    >>> len(m.hidden), m.hidden[0][1].__name__, m(_ns_for(None).ones((2, 4), dtype=_ns_for(None).float32)).shape
    (2, 'relu', (2, 3))
    """

    hidden: Any
    out: Any

    @classmethod
    def init(
        cls,
        key: Any,
        in_features: int,
        hidden_sizes: list[int] | tuple[int, ...],
        out_features: int,
        *,
        activation: Callable[[Any], Any] = relu,
        dtype: Any = None,
        xp: Any = None,
    ) -> MLP:
        """New MLP with torch-default Linear initialisation."""
        keys = _random.split(key, len(hidden_sizes) + 1)
        sizes = [in_features, *hidden_sizes]
        hidden = [
            (Linear.init(k, a, b, dtype=dtype, xp=xp), activation)
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])
        ]
        return cls(hidden, Linear.init(keys[-1], sizes[-1], out_features, dtype=dtype, xp=xp))

    def __call__(self, x: Any) -> Any:
        return self.out(apply(self.hidden, x))
