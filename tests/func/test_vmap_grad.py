"""Per-example gradients through every family of ops: ``vmap(grad(f))`` against a loop of
``grad(f)``, so the VJP rules run on batched values (and batch the ops they use)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from _vmap_check import BACKENDS, check, ns, to

FAST = settings(max_examples=6, deadline=None)


@pytest.fixture(params=BACKENDS, scope="module")
def xp(request):
    return ns(request.param)


def _losses(xp, w):
    """Scalar functions of one example ``a`` (shape (m, k)) and a shared weight ``w`` (k, k)."""
    nn = ember.nn
    return {
        "elementwise": lambda a: xp.sum(xp.sin(a) * xp.exp(a * 0.1) + xp.maximum(a, 0.2)),
        "reductions": lambda a: xp.sum(xp.max(a, axis=0) + xp.mean(a, axis=1, keepdims=True)) + xp.std(a),
        "prod_cumsum": lambda a: xp.sum(xp.cumulative_sum(a, axis=1) * xp.prod(a, axis=0)),
        "matmul": lambda a: xp.sum(xp.tanh(a @ w) ** 2) + xp.sum(a[0, ...] @ w),
        "tensordot_vecdot": lambda a: xp.sum(xp.tensordot(a, w, axes=1)) + xp.sum(xp.vecdot(a, a)),
        "shape_ops": lambda a: xp.sum(xp.reshape(a, (-1,)) * xp.flip(xp.reshape(a, (-1,))))
        + xp.sum(xp.permute_dims(a, (1, 0))[0, ...] ** 2) + xp.sum(xp.concat([a, a * a], axis=1) ** 2),
        "getitem": lambda a: xp.sum(a[1:, ...] ** 2) + xp.sum(a[..., 0] * a[..., -1]),
        "take": lambda a: xp.sum(xp.take(a, xp.asarray(xp._backend.asarray(np.array([0, 0, 1]))), axis=0) ** 2),
        "where_clip": lambda a: xp.sum(xp.where(a > 0, a * a, -a) + xp.clip(a, min=-0.3, max=0.3)),
        "nn": lambda a: nn.cross_entropy(nn.linear(a, w, None, activation=nn.relu), nn.softmax(a)),
        "softmax": lambda a: xp.sum(nn.log_softmax(a) * nn.softmax(a, axis=0)),
        "setitem": lambda a: _written(xp, a),
        "linalg": lambda a: xp.sum(xp.linalg.inv(a.mT @ a + xp.eye(a.shape[1])))
        + xp.linalg.vector_norm(a),
        "index_arrays": lambda a: xp.sum(a[_ints(xp, [1, 0, 1]), ...] ** 2)
        + xp.sum(a[_ints(xp, [0, 1]), _ints(xp, [1, 0])] ** 3),
        "mask": lambda a: xp.sum(a[_mask(xp, a.shape)] ** 2),
        "broadcast": lambda a: xp.sum(xp.broadcast_to(a[0, ...], (3, a.shape[1])) * xp.expand_dims(a[1, ...], axis=0)),
    }


def _mask(xp, shape):
    return xp.asarray(xp._backend.asarray(np.arange(int(np.prod(shape))).reshape(shape) % 3 == 1))


def _ints(xp, values):
    return xp.asarray(xp._backend.asarray(np.array(values, dtype=np.int64)))


def _written(xp, a):
    b = a * 1.0
    b[0, ...] = a[1, ...] ** 2
    return xp.sum(b * b)


NAMES = list(_losses(None, None))


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(n=st.integers(1, 3), m=st.integers(2, 3), k=st.integers(2, 3))
def test_per_example_gradient(xp, name, n, m, k):
    rng = np.random.default_rng(n * 100 + m * 10 + k)
    w = to(xp, rng.standard_normal((k, k)))
    x = to(xp, rng.standard_normal((n, m, k)))
    f = _losses(xp, w)[name]
    try:
        ember.grad(f)(x[0, ...])
    except IndexError:  # array-api-strict refuses some index arrays even unbatched
        return
    check(xp, ember.grad(f), x, tol=1e-10)
    # the gradient w.r.t. the shared weight, per example, for the ones that read it
    if name in ("matmul", "tensordot_vecdot", "nn"):
        def g(a, w_):
            return _losses(xp, w_)[name](a)

        check(xp, ember.grad(g, argnums=1), x, w, in_axes=(0, None), tol=1e-10)


@pytest.mark.parametrize("name", ["elementwise", "matmul", "getitem", "nn"])
def test_grad_of_vmap_sums_the_examples(xp, name):
    rng = np.random.default_rng(0)
    w = to(xp, rng.standard_normal((3, 3)))
    x = to(xp, rng.standard_normal((4, 2, 3)))

    def total(w_):
        return xp.sum(ember.vmap(_losses(xp, w_)[name])(x))

    got = ember.grad(total)(w)
    want = sum(ember.grad(lambda w_: _losses(xp, w_)[name](x[i, ...]))(w) for i in range(4))
    np.testing.assert_allclose(ember.compute(got).raw, ember.compute(want).raw, rtol=1e-10, atol=1e-10)
