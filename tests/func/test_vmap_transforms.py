"""ember.vmap nested and composed with grad, jvp, hessian and checkpoint; per-example gradients
of an MLP; the errors vmap raises and user primitives' batching rules."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
from _vmap_check import BACKENDS, as_numpy, assert_close, check, loop, ns, to
from ember import BatchingError, VmapFallbackWarning


def rand(xp, shape, seed=0):
    return to(xp, np.random.default_rng(seed).standard_normal(shape))


@pytest.fixture(params=BACKENDS, scope="module")
def xp(request):
    return ns(request.param)


def f(x, w):
    return xp_of(x).sum(xp_of(x).tanh(x @ w) ** 2)


def xp_of(a):
    return a.__array_namespace__()


# ---------------------------------------------------------------------- nesting
def test_nested_vmap(xp):
    x = rand(xp, (2, 3, 4))
    g = lambda a: xp.sum(xp.sin(a) * a)  # noqa: E731
    got = ember.vmap(ember.vmap(g))(x)
    assert_close(got, np.sum(np.sin(as_numpy(x)) * as_numpy(x), axis=-1))
    # the inner vmap over another axis, an unbatched argument from the outer level
    w = rand(xp, (2, 4), 1)
    got = ember.vmap(lambda a, b: ember.vmap(lambda r: xp.sum(r * b), in_axes=1)(a), in_axes=(0, 0))(
        xp.permute_dims(x, (0, 2, 1)), w)
    want = np.einsum("nkm,nk->nm", np.transpose(as_numpy(x), (0, 2, 1)), as_numpy(w))
    assert_close(got, want)
    # matmul of two batched operands at two levels
    y = rand(xp, (2, 3, 4, 5), 2)
    got = ember.vmap(ember.vmap(lambda a, b: a @ b))(x, y)
    assert_close(got, np.einsum("abk,abkm->abm", as_numpy(x), as_numpy(y)))


# ---------------------------------------------------------------------- with grad
def test_vmap_of_grad(xp):
    w, xs = rand(xp, (4, 3)), rand(xp, (5, 4), 1)
    per = ember.vmap(ember.grad(f, argnums=1), in_axes=(0, None))(xs, w)
    want = loop(xp, ember.grad(f, argnums=1), (xs, w), (0, None))
    assert_close(per, want)
    gx = ember.vmap(ember.grad(f), in_axes=(0, None))(xs, w)
    assert_close(gx, loop(xp, ember.grad(f), (xs, w), (0, None)))


def test_grad_of_vmap(xp):
    w, xs = rand(xp, (4, 3)), rand(xp, (5, 4), 1)
    total = lambda w_: xp.sum(ember.vmap(f, in_axes=(0, None))(xs, w_))  # noqa: E731
    got = ember.grad(total)(w)
    want = sum(as_numpy(ember.grad(f, argnums=1)(xs[i, ...], w)) for i in range(5))
    assert_close(got, want)


def test_second_order(xp):
    """Per-example Hessians and grad of grad under vmap; grad of a vmapped grad."""
    xs = rand(xp, (3, 4))
    h = lambda a: xp.sum(xp.sin(a) * a ** 3)  # noqa: E731
    check(xp, ember.hessian(h), xs, tol=1e-10)
    check(xp, ember.grad(lambda a: xp.sum(ember.grad(h)(a) ** 2)), xs, tol=1e-10)
    w = rand(xp, (4, 3), 1)
    got = ember.grad(lambda w_: xp.sum(ember.vmap(ember.grad(f, argnums=1), in_axes=(0, None))(xs, w_) ** 2))(w)
    want = ember.grad(lambda w_: sum(xp.sum(ember.grad(f, argnums=1)(xs[i, ...], w_) ** 2)
                                     for i in range(3)))(w)
    assert_close(got, as_numpy(want), tol=1e-10)


def test_vmap_of_jvp(xp):
    xs, ts = rand(xp, (3, 4)), rand(xp, (3, 4), 1)
    g = lambda a: xp.exp(a) * xp.sum(a ** 2)  # noqa: E731
    jv = lambda a, t: ember.jvp(g, (a,), (t,))  # noqa: E731
    check(xp, jv, xs, ts)
    check(xp, jv, xs, ts[0, ...], in_axes=(0, None))
    check(xp, lambda a: ember.jacfwd(g)(a), xs, tol=1e-10)
    # forward mode around the batch: the tangent of the batched function
    out, tan = ember.jvp(ember.vmap(g), (xs,), (ts,))
    want = loop(xp, jv, (xs, ts), (0, 0))
    assert_close((out, tan), want)


def test_checkpoint_under_vmap(xp):
    xs, w = rand(xp, (3, 4)), rand(xp, (4, 2), 1)
    body = ember.checkpoint(lambda a, b: xp.tanh(a @ b))
    loss = lambda a, b: xp.sum(body(a, b) ** 2)  # noqa: E731
    check(xp, ember.grad(loss, argnums=1), xs, w, in_axes=(0, None))
    g2 = ember.grad(loss, argnums=1, checkpointing="balanced")
    check(xp, g2, xs, w, in_axes=(0, None))


# ---------------------------------------------------------------------- per-example gradients of an MLP
def _mlp(xp, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [{"w": to(xp, rng.standard_normal((o, i)) * 0.1), "b": to(xp, rng.standard_normal(o) * 0.1)}
            for i, o in zip(sizes[:-1], sizes[1:])]


def _loss(params, x, y):
    h = x
    for k, p in enumerate(params):
        h = ember.nn.linear(h, p["w"], p["b"])
        if k < len(params) - 1:
            h = ember.nn.relu(h)
    return ember.nn.cross_entropy(h, y)


@pytest.mark.parametrize("sizes,n", [((784, 256, 256, 10), 6), ((5, 7, 3), 4)])
def test_mlp_per_example_gradients(sizes, n):
    xp = ns("numpy")
    params = _mlp(xp, sizes)
    rng = np.random.default_rng(1)
    x = to(xp, rng.standard_normal((n, sizes[0])))
    y = to(xp, np.eye(sizes[-1])[rng.integers(0, sizes[-1], n)])
    per = ember.vmap(ember.grad(_loss), in_axes=(None, 0, 0))(params, x, y)
    for i in range(n):
        gi = ember.grad(_loss)(params, x[i, ...], y[i, ...])
        for a, b in zip(ember.tree.leaves(per), ember.tree.leaves(gi)):
            np.testing.assert_allclose(as_numpy(a)[i], as_numpy(b), rtol=1e-12, atol=1e-12)


def test_mlp_per_example_gradients_modules(xp):
    """nn.MLP (a module) and rows of examples (each example a (2, in) matrix)."""
    model = ember.nn.MLP.init(ember.random.key(0), 3, [5], 2, xp=xp, dtype=xp.float64)
    x = rand(xp, (4, 2, 3), 1)
    y = to(xp, np.eye(2)[np.random.default_rng(2).integers(0, 2, (4, 2))])
    loss = lambda m, a, t: ember.nn.cross_entropy(m(a), t)  # noqa: E731
    per = ember.vmap(ember.grad(loss), in_axes=(None, 0, 0))(model, x, y)
    for i in range(4):
        gi = ember.grad(loss)(model, x[i, ...], y[i, ...])
        for a, b in zip(ember.tree.leaves(per), ember.tree.leaves(gi)):
            np.testing.assert_allclose(as_numpy(a)[i], as_numpy(b), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- errors
def test_mismatched_batch_sizes(xp):
    with pytest.raises(ember.ShapeError, match="different sizes"):
        ember.vmap(lambda a, b: a + b)(rand(xp, (3, 2)), rand(xp, (4, 2)))


def test_in_axes_out_of_range(xp):
    with pytest.raises(ember.AxisError if hasattr(ember, "AxisError") else ValueError, match="in_axes"):
        ember.vmap(lambda a: a, in_axes=2)(rand(xp, (3, 2)))
    with pytest.raises(ValueError, match="2 entries"):
        ember.vmap(lambda a: a, in_axes=(0, 0))(rand(xp, (3, 2)))
    with pytest.raises(ValueError, match="does not match"):
        ember.vmap(lambda a: a, in_axes=([0, 0],))(rand(xp, (3, 2)))
    with pytest.raises(ValueError, match="maps no array"):
        ember.vmap(lambda a: a, in_axes=None)(rand(xp, (3, 2)))


def test_missing_rule_names_the_op(xp):
    with pytest.raises(BatchingError, match="'unique_values'.*fallback='loop'"):
        ember.vmap(lambda a: xp.unique_values(a))(rand(xp, (3, 2)))


def test_loop_fallback_warns(xp):
    x = to(xp, np.array([[1.0, 1.0], [2.0, 3.0]]))
    with pytest.warns(VmapFallbackWarning, match="searchsorted"):
        got = ember.vmap(lambda a: xp.searchsorted(a, xp.asarray(2.0)), fallback="loop")(x)
    assert as_numpy(got).tolist() == [2, 0]


def test_python_control_flow_on_batched_value(xp):
    with pytest.raises(BatchingError, match="xp.where"):
        ember.vmap(lambda a: a if float(xp.sum(a)) > 0 else -a)(rand(xp, (3, 2)))
    with pytest.raises(BatchingError, match="xp.take"):
        ember.vmap(lambda a, i: a[i], in_axes=(None, 0))(rand(xp, (3,)), to(xp, [0, 1], np.int64))
    with pytest.raises(BatchingError, match="xp.where"):
        ember.vmap(lambda a: xp.sum(a[a > 0]))(rand(xp, (3, 2)))


def test_leaked_batched_value(xp):
    kept = []
    ember.vmap(lambda a: kept.append(a) or a)(rand(xp, (3, 2)))
    with pytest.raises(BatchingError, match="has returned"):
        xp.sum(kept[0], axis=0)


def test_out_axes_none_for_a_batched_output(xp):
    with pytest.raises(BatchingError, match="out_axes is None"):
        ember.vmap(lambda a: a, out_axes=None)(rand(xp, (3, 2)))


# ---------------------------------------------------------------------- user primitives
def test_primitive_batching_rules(xp):
    @ember.primitive
    def cube(xp_, a):
        return a * a * a

    cube.defvjp(lambda xp_, g, ans, a: g * 3.0 * a * a)
    x = rand(xp, (3, 2))
    with pytest.raises(BatchingError, match=r"cube.defvmap"):
        ember.vmap(cube)(x)
    cube.defvmap("elementwise")
    check(xp, cube, x)
    check(xp, ember.grad(lambda a: xp.sum(cube(a))), x)

    @ember.primitive
    def rowsum(xp_, a):
        return xp_.sum(a, axis=-1)

    rowsum.defvjp(lambda xp_, g, ans, a: xp_.broadcast_to(g[..., None], a.shape))
    rowsum.defvmap(lambda xp_, batched, a: rowsum(a))  # the batch is one more leading axis
    check(xp, rowsum, rand(xp, (3, 2, 4)))

    @ember.primitive
    def total(xp_, a):
        return xp_.sum(a)

    total.defvjp(lambda xp_, g, ans, a: xp_.broadcast_to(g, a.shape))
    total.defvmap("loop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VmapFallbackWarning)
        check(xp, total, x)
