"""ember.nn: modules as frozen dataclasses, layers, activations, losses, initializers.

A model is a structure: a :class:`Module` is a frozen dataclass registered
with ember.tree, so ``ember.grad`` differentiates it, the gradient is a module
of the same type and ``ember.tree.map(lambda p, g: p - lr * g, model, grads)``
is an SGD step. Parameters are the floating-point array leaves that are not
static; functions (activations) and Python scalars in a model are constants.

Layers compute with the namespace of their inputs (``array_api_compat``), so
the same model runs on raw NumPy, raw Dask and every ember wrapper.
Create layers with ``Layer.init(key, ...)`` (a ``ember.random.Key``) or
directly from their arrays. Stateful layers (BatchNorm) return
``(y, new_layer)`` when called with ``train=True``; random ones (Dropout)
take ``key=``.

>>> import ember, ember.nn as nn, ember.random as er, ember.autodiff.numpy as xp
>>> model = nn.MLP.init(er.key(0), 4, [16], 3, xp=xp)
>>> x, y = xp.ones((8, 4), dtype=xp.float32), xp.zeros(8, dtype=xp.int64)
>>> grads = ember.grad(lambda m: nn.cross_entropy(m(x), y))(model)
>>> model = ember.tree.map(lambda p, g: p - 0.1 * g, model, grads)
>>> [str(p) for p, _ in model.parameters()]
['hidden.0.0.weight', 'hidden.0.0.bias', 'out.weight', 'out.bias']
"""

from . import init
from ._activations import gelu, identity, log_softmax, relu, sigmoid, silu, softmax, tanh
from ._attention import MultiHeadAttention, dot_product_attention
from ._conv import (
    AvgPool1d,
    AvgPool2d,
    Conv1d,
    Conv2d,
    MaxPool1d,
    MaxPool2d,
    avg_pool,
    conv,
    max_pool,
)
from ._layers import (
    MLP,
    BatchNorm,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Sequential,
    apply,
    linear,
)
from ._losses import binary_cross_entropy_with_logits, cross_entropy, huber, mse
from ._module import Module, count_parameters, is_parameter, summary
from ._util import erf

__all__ = [
    "Module",
    "summary",
    "is_parameter",
    "count_parameters",
    "init",
    "linear",
    "Linear",
    "Conv1d",
    "Conv2d",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "Embedding",
    "LayerNorm",
    "BatchNorm",
    "Dropout",
    "Sequential",
    "MLP",
    "MultiHeadAttention",
    "apply",
    "conv",
    "max_pool",
    "avg_pool",
    "dot_product_attention",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "identity",
    "softmax",
    "log_softmax",
    "erf",
    "mse",
    "cross_entropy",
    "binary_cross_entropy_with_logits",
    "huber",
]
