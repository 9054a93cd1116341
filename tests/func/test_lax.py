"""ember.lax: cond, fori_loop, while_loop and scan eagerly and under grad, jit and vmap.

Gradients are checked against central finite differences (float64, hypothesis
shapes including 0-d and empty arrays); jitted and batched results against
the eager ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from _gradcheck import BACKENDS, arrays, check_vjp, fd_check, namespace, shapes, to_backend, to_numpy

lax = ember.lax
SETTINGS = dict(deadline=None, max_examples=20, suppress_health_check=list(HealthCheck))


@pytest.fixture(params=BACKENDS)
def xp(request):
    return namespace(request.param)


def same(a, b):
    la, lb = ember.tree.leaves(a), ember.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(to_numpy(x), to_numpy(y))


# ---------------------------------------------------------------------- cond
def test_cond_runs_only_the_chosen_branch_where_the_predicate_is_known(xp):
    def boom(x):
        raise AssertionError("the other branch ran")

    x = xp.asarray([1.0, 2.0])
    same(lax.cond(True, lambda a: a * 2.0, boom, x), x * 2.0)
    same(lax.cond(xp.asarray(False), boom, lambda a: a - 1.0, x), x - 1.0)
    g = ember.grad(lambda a: xp.sum(lax.cond(xp.sum(a) > 0, xp.sin, boom, a)))(x)
    same(g, xp.cos(x))


@settings(**SETTINGS)
@given(data=st.data(), shape=shapes())
def test_cond_under_jit_equals_eager_and_its_gradient_finite_differences(xp, data, shape):
    # a traced predicate: both branches run and where() picks; the untaken branch's NaN
    # (sqrt of a negative) reaches neither the value nor the gradient
    def f(x, s):
        return lax.cond(s > 0, lambda a: xp.sqrt(a * a + 1.0) * s, lambda a: xp.sqrt(-a - 10.0) + s, x)

    x = to_backend(xp, data.draw(arrays(shape)))
    jf = ember.jit(f)
    loss = lambda a, s: xp.sum(f(a, s))  # noqa: E731
    jg = ember.jit(ember.grad(loss, argnums=(0, 1)))
    for s in (1.5, -0.5):
        s = xp.asarray(s)
        with np.errstate(invalid="ignore"):
            same(jf(x, s), f(x, s))
            g = jg(x, s)
            if float(s) > 0:  # (the other branch's NaN stays out of the gradient)
                assert all(np.all(np.isfinite(to_numpy(v))) for v in g)
                np.testing.assert_allclose(to_numpy(g[0]), to_numpy(ember.grad(loss)(x, s)), rtol=1e-12)
    assert jf.trace_count == 1 and jg.trace_count == 1
    check_vjp(xp, lambda a: f(a, xp.asarray(1.5)), (to_numpy(x),))


def test_cond_under_vmap_picks_per_example(xp):
    xs = xp.asarray([-1.0, 0.5, 2.0])
    got = ember.vmap(lambda x: lax.cond(x > 0, xp.sin, xp.cos, x))(xs)
    want = [float(xp.sin(x)) if float(x) > 0 else float(xp.cos(x)) for x in xs]
    np.testing.assert_allclose(to_numpy(got), want, rtol=0, atol=0)
    per = ember.vmap(ember.grad(lambda x: lax.cond(x > 0, xp.sin, xp.cos, x)))(xs)
    np.testing.assert_allclose(to_numpy(per), [np.sin(1.0), np.cos(0.5), np.cos(2.0)], rtol=1e-15)


def test_cond_branches_must_agree_where_both_run(xp):
    f = ember.jit(lambda x: lax.cond(x[0] > 0, lambda a: a, lambda a: a[:1], x))
    with pytest.raises(ember.StructureError, match=r"cond.*float64\[2\] against \S*float64\[1\]"):
        f(xp.asarray([1.0, 2.0]))
    g = ember.jit(lambda x: lax.cond(x[0] > 0, lambda a: (a, a), lambda a: a, x))
    with pytest.raises(ember.StructureError, match="true_fun gave"):
        g(xp.asarray([1.0, 2.0]))
    with pytest.raises(ember.ShapeError, match="predicate must be a scalar"):
        lax.cond(xp.asarray([True, False]), lambda a: a, lambda a: a, 1.0)


def test_cond_branches_may_return_different_python_numbers_where_both_run(xp):
    # a number is a leaf (a 0-d array once both branches run), as a while_loop's value is
    def f(x):
        return lax.cond(x[0] > 0, lambda a: (a * 2.0, 1.0), lambda a: (a - 1.0, 2.0), x)

    jf, per = ember.jit(f), ember.vmap(f)
    for x in (xp.asarray([1.0, 2.0]), xp.asarray([-1.0, 2.0])):
        got, want = jf(x), f(x)
        same(got[0], want[0])
        assert got[1].shape == () and float(got[1]) == want[1]
    ys, ks = per(xp.asarray([[1.0, 2.0], [-1.0, 2.0]]))
    assert np.asarray(ks.raw).tolist() == [1.0, 2.0]


# ---------------------------------------------------------------------- loops
def test_fori_loop_eagerly_under_jit_and_grad(xp):
    def f(x, n):
        return lax.fori_loop(1, n, lambda i, v: v * xp.sin(v) + i, x)

    x = xp.asarray([0.3, -0.7])
    want = to_numpy(x)
    for i in range(1, 4):
        want = want * np.sin(want) + i
    same(f(x, 4), to_backend(xp, want))
    same(ember.jit(f, static_argnums=1)(x, 4), f(x, 4))
    check_vjp(xp, lambda a: f(a, 4), (to_numpy(x),))
    # bounds jit traces: one staged loop for every bound; bounds vmap batches: per example
    # (the index is then an integer array: the body casts it, as with JAX)
    def h(x, n):
        def body(i, v):
            return v * xp.sin(v) + (xp.astype(i, v.dtype) if hasattr(i, "dtype") else i)

        return lax.fori_loop(1, n, body, x)

    jh = ember.jit(h)
    for n in (4, 1, 6):
        same(jh(x, xp.asarray(n)), f(x, n))
    assert jh.trace_count == 1
    per = ember.vmap(lambda n: h(x, n))(xp.asarray([4, 1, 6]))
    for i, n in enumerate((4, 1, 6)):
        same(per[i, ...], f(x, n))


def test_while_loop_is_differentiable_eagerly_and_batches(xp):
    def f(x):
        return lax.while_loop(lambda v: xp.sum(v * v) < 50.0, lambda v: v * 1.5 + 0.1, x)

    x = xp.asarray([0.5, -1.0, 2.0])
    v = to_numpy(x)
    while np.sum(v * v) < 50.0:
        v = v * 1.5 + 0.1
    np.testing.assert_allclose(to_numpy(f(x)), v, rtol=1e-15)
    check_vjp(xp, f, (to_numpy(x),))
    with pytest.raises(ember.TracingError, match="while_loop: a loop whose condition jit traces .* no gradient"):
        ember.jit(ember.grad(lambda a: xp.sum(f(a))))(x)
    # under vmap: each example loops until its own condition fails
    got = ember.vmap(f)(xp.reshape(x, (3, 1)))
    for i in range(3):
        v = to_numpy(x)[i:i + 1]
        while np.sum(v * v) < 50.0:
            v = v * 1.5 + 0.1
        np.testing.assert_allclose(to_numpy(got)[i], v, rtol=1e-15)
    per = ember.vmap(ember.grad(lambda a: xp.sum(f(a))))(xp.reshape(x, (3, 1)))
    for i in range(3):
        same(per[i, ...], ember.grad(lambda a: xp.sum(f(a)))(x[i:i + 1]))
    nested = ember.vmap(ember.vmap(f))(xp.reshape(x, (3, 1, 1)))
    same(xp.reshape(nested, (3, 1)), got)


@settings(**SETTINGS)
@given(data=st.data(), n=st.integers(0, 4), rest=shapes(max_dims=2), reverse=st.booleans())
def test_scan_equals_a_python_loop_under_jit_and_vmap_and_its_gradient_fd(xp, data, n, rest, reverse):
    def step(c, x):
        c = c * 0.5 + xp.sin(x)
        return c, {"y": c * x, "z": xp.sum(c)}

    xs = to_backend(xp, data.draw(arrays((n, *rest))))
    c0 = to_backend(xp, data.draw(arrays(rest)))
    carry, ys = lax.scan(step, c0, xs, reverse=reverse)
    c, rows = c0, [None] * n
    for i in (reversed(range(n)) if reverse else range(n)):
        c, rows[i] = step(c, xs[i, ...])
    same(carry, c)
    if n:
        same(ys, {k: xp.stack([r[k] for r in rows]) for k in ("y", "z")})
        same(ember.jit(lambda c0, xs: lax.scan(step, c0, xs, reverse=reverse))(c0, xs), (carry, ys))
        fd_check(xp, lambda a, b: tuple(ember.tree.leaves(lax.scan(step, a, b, reverse=reverse))),
                  (to_numpy(c0), to_numpy(xs)))
    else:
        assert ys is None
    batched = ember.vmap(lambda c0: lax.scan(step, c0, xs)[0])(xp.stack([c0, c0 * 2.0]))
    same(batched[1, ...], lax.scan(step, c0 * 2.0, xs)[0])


def test_scan_sizes_and_length(xp):
    carry, ys = lax.scan(lambda c, _: (c + 1.0, c), xp.asarray(0.0), None, length=3)
    same(ys, xp.asarray([0.0, 1.0, 2.0]))
    with pytest.raises(ember.ShapeError, match=r"leading sizes of xs \(\[2, 3\]\)"):
        lax.scan(lambda c, x: (c, x), 0.0, (xp.zeros((2,)), xp.zeros((3,))))


def test_switch_clamps_its_index_and_picks_per_example_under_vmap_and_jit(xp):
    branches = [lambda a: a + 1.0, lambda a: a * 10.0, lambda a: -a]
    x = xp.asarray([0.5, -2.0])
    for i, want in ((-3, x + 1.0), (0, x + 1.0), (1, x * 10.0), (2, -x), (7, -x)):
        same(lax.switch(i, branches, x), want)
        same(ember.jit(lambda i, x: lax.switch(i, branches, x))(xp.asarray(i), x), want)
    idx = xp.asarray([2, 0, 1, 5, -1])
    got = ember.vmap(lambda i: lax.switch(i, branches, xp.asarray(3.0)))(idx)
    np.testing.assert_array_equal(to_numpy(got), [-3.0, 4.0, 30.0, -3.0, 4.0])
    g = ember.jit(ember.grad(lambda x, i: xp.sum(lax.switch(i, branches, x) ** 2)))
    same(g(x, xp.asarray(1)), 200.0 * x)


def test_while_loop_with_a_condition_jit_traces_is_one_op_run_on_each_calls_values(xp):
    # the condition and the body are graphs of their own, run by one op until the condition
    # fails: one trace serves every limit and input, values the body reads from outside
    # (w, n) are inputs of the op, and a Python number in the loop value becomes an array
    def f(x, n, limit):
        w = x * 2.0
        return lax.while_loop(lambda c: (c[0] < n) & (xp.sum(c[1] * c[1]) < limit),
                              lambda c: (c[0] + 1, c[1] * 1.5 + w), (0, x))

    jf = ember.jit(f)
    for x, n, limit in (([0.5, -1.0, 2.0], 10, 50.0), ([0.1, 0.2, 0.3], 3, 1e9),
                        ([1.0, 1.0, 1.0], 10, 0.5), ([4.0, 0.0, -4.0], 0, 1e9)):
        args = (xp.asarray(x), xp.asarray(n), xp.asarray(limit))
        (i, v), (wi, wv) = jf(*args), f(*args)
        assert int(i) == int(wi)
        same(v, wv)
    assert jf.trace_count == 1
    assert "while_loop(" in str(jf.lower(*args))
    bad = ember.jit(lambda x, n: lax.while_loop(lambda v: xp.sum(v) < n, lambda v: xp.concat([v, v]), x))
    with pytest.raises(ember.StructureError, match=r"leaf 0 .* keeps its shapes"):
        bad(xp.asarray([1.0]), xp.asarray(10.0))


def test_lax_on_dask():
    # the lazy backend: conditions and loop tests compute their scalar, the rest stays lazy
    pytest.importorskip("dask")
    dx = namespace("dask")
    x = dx.asarray(np.array([0.5, -1.0, 2.0]))

    def f(a, lim):
        return lax.while_loop(lambda v: dx.sum(v * v) < lim, lambda v: v * 1.5 + 0.1, a)

    want = np.array([0.5, -1.0, 2.0])
    while np.sum(want * want) < 50.0:
        want = want * 1.5 + 0.1
    np.testing.assert_allclose(np.asarray(ember.compute(f(x, 50.0))), want, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(ember.compute(ember.jit(f)(x, dx.asarray(50.0)))), want, rtol=1e-15)
    g = ember.jit(lambda a: lax.cond(dx.sum(a) > 0, dx.sin, dx.cos, a))
    np.testing.assert_allclose(np.asarray(ember.compute(g(x))), np.sin([0.5, -1.0, 2.0]), rtol=1e-15)
    _, ys = lax.scan(lambda c, a: (c + a, c * a), dx.asarray(0.0), x)
    np.testing.assert_allclose(np.asarray(ember.compute(ys)), [0.0, -0.5, -1.0])
