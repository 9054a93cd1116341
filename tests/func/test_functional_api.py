"""The functional-API proposal's examples, in ember."""

from __future__ import annotations

import dataclasses

import numpy as np

import ember
import ember.autodiff.numpy as xp
import ember.nn as nn
import ember.random as er
import ember.tree as tree


def test_grad_of_two_tensors():
    a, b = xp.asarray([1.0, 2.0]), xp.asarray([3.0, 4.0])
    ga, gb = ember.grad(lambda a, b: xp.sum(a * b + a * a), argnums=(0, 1))(a, b)
    assert ga.raw.tolist() == [5.0, 8.0]
    assert gb.raw.tolist() == [1.0, 2.0]


@ember.tree.register
@dataclasses.dataclass
class Pair:
    w: object
    b: object


def test_grad_of_dataclass():
    p = Pair(xp.asarray([[1.0, 2.0]]), xp.asarray([0.5]))
    x = xp.asarray([3.0, 4.0])
    g = ember.grad(lambda p: xp.sum((p.w @ x + p.b) ** 2))(p)
    assert isinstance(g, Pair)
    y = 1 * 3 + 2 * 4 + 0.5
    assert g.w.raw.tolist() == [[2 * y * 3, 2 * y * 4]]
    assert g.b.raw.tolist() == [2 * y]


def test_grad_of_list_of_tensors():
    xs = [xp.asarray(1.0), xp.asarray([2.0, 3.0]), xp.asarray([[4.0]])]
    g = ember.grad(lambda xs: sum(xp.sum(x ** 2) for x in xs))(xs)
    assert isinstance(g, list) and len(g) == 3
    assert [gi.raw.tolist() for gi in g] == [2.0, [4.0, 6.0], [[8.0]]]


class Scaled(nn.Module):
    w: object
    scale: float = 2.0
    name: str = "scaled"
    act: object = nn.relu


def test_struct_with_constants_keeps_them():
    m = Scaled(xp.asarray([1.0, -1.0]), 3.0, "mine", nn.gelu)
    g = ember.grad(lambda m: xp.sum(m.act(m.w) * m.scale))(m)
    assert isinstance(g, Scaled)
    assert (g.scale, g.name, g.act) == (3.0, "mine", nn.gelu)
    np.testing.assert_allclose(g.w.raw, 3.0 * np.array([1.0833154705876864, -0.0833154705876864]), rtol=1e-12)


def test_mlp_of_linear_activation_pairs_trained_with_sgd_map():
    key = er.key(0)
    k1, k2, k3, kx = er.split(key, 4)
    hidden = [(nn.Linear.init(k1, 2, 16, xp=xp), nn.relu), (nn.Linear.init(k2, 16, 16, xp=xp), nn.silu)]
    model = nn.MLP(hidden, nn.Linear.init(k3, 16, 1, xp=xp))
    x = er.uniform(kx, (64, 2), xp.float32, low=-1.0, high=1.0, xp=xp)
    y = xp.sum(x * x, axis=1, keepdims=True)

    def loss(m):
        return nn.mse(m(x), y)

    lr = 0.1
    first = float(loss(model))
    for _ in range(200):
        grads = ember.grad(loss)(model)
        model = tree.map(lambda p, g: p - lr * g, model, grads)
    assert float(loss(model)) < 0.2 * first
    # activations are constants of the structure: kept, not "updated"
    assert model.hidden[0][1] is nn.relu and model.hidden[1][1] is nn.silu
    assert [str(p) for p, _ in model.parameters()] == [
        "hidden.0.0.weight", "hidden.0.0.bias", "hidden.1.0.weight", "hidden.1.0.bias",
        "out.weight", "out.bias",
    ]


def test_numpy_conversion_of_a_traced_tensor_is_refused():
    # NumPy functions convert their input with __array__: the result would not carry the
    # gradient (silently 0), so inside a transform that is an error, as in JAX and PyTorch.
    # Outside one, and for the value read as a constant (x.raw), it converts as before
    import pytest

    x = xp.asarray([0.5, 1.0])
    for f in (lambda v: xp.sum(np.sin(v)), lambda v: xp.sum(v * np.asarray(v)),
              lambda v: np.multiply(v, 2.0).sum()):
        with pytest.raises(ember.NotDifferentiableError, match=r"(?s)traced by an ember transform.*x\.raw"):
            ember.grad(f)(x)
    g = ember.grad(lambda v: xp.sum(v * float(np.sum(np.cos(v.raw)))))(x)
    np.testing.assert_allclose(g.raw, np.full(2, np.cos(0.5) + np.cos(1.0)))
    np.testing.assert_array_equal(np.sin(x), np.sin([0.5, 1.0]))  # untracked: a NumPy array


def test_asarray_of_traced_values_keeps_the_gradient():
    # asarray(x, dtype=...) is a cast and asarray([...]) of traced values a stack: both carry
    # the gradient (they gave 0); the values and dtypes are those of the same call untraced
    x = xp.asarray(np.array([1.0, 2.0, 3.0]))
    g = ember.grad(lambda v: xp.sum(xp.asarray(v * v, dtype=xp.float32)))(x)
    np.testing.assert_array_equal(g.raw, ember.grad(lambda v: xp.sum(xp.astype(v * v, xp.float32)))(x).raw)
    assert g.raw.tolist() == [2.0, 4.0, 6.0]
    x32 = xp.asarray(np.array([1.0, 2.0], dtype=np.float32))
    seen = {}

    def f(v):
        a = xp.asarray([[v[0] * v[1], 1.5], [2, v[1]]])
        seen["dtype"], seen["value"] = a.dtype, a.raw.copy()
        return xp.sum(a * a)

    assert ember.grad(f)(x32).raw.tolist() == [2 * 2.0 * 2.0, 2 * 2.0 * 1.0 + 2 * 2.0]
    untraced = xp.asarray([[x32[0] * x32[1], 1.5], [2, x32[1]]])
    assert seen["dtype"] == untraced.dtype  # (float64, as NumPy makes it from this list)
    np.testing.assert_array_equal(seen["value"], untraced.raw)
    import pytest

    with pytest.raises(ValueError, match="copy=False"):
        ember.grad(lambda v: xp.sum(xp.asarray(v, dtype=xp.float32, copy=False)))(x)
