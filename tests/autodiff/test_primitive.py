"""User-defined primitives (``ember.primitive``): gradients, JVPs and Hessians against finite
differences in float64 on generated shapes, on numpy, array_api_strict and dask, with
``checkpointing="balanced"`` and with ``consume``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
from _arrays import as_numpy, central_differences, ns, to
from ember.autodiff import unbroadcast

BACKENDS = ("numpy", "array_api_strict", "dask")
EPS = 1e-6


@ember.primitive
def softplus(xp, x):
    """log(1 + exp(x)), computed without overflow."""
    return xp.log1p(xp.exp(-xp.abs(x))) + xp.maximum(x, 0.0)


softplus.defvjp(lambda xp, g, ans, x: g / (1.0 + xp.exp(-x)))


@ember.primitive(bound="compute")
def smooth_mul(xp, x, y, *, scale):
    """scale * x * tanh(y): a binary primitive with a static parameter and broadcasting."""
    return scale * x * xp.tanh(y)


smooth_mul.defvjp(
    lambda xp, g, ans, x, y, *, scale: unbroadcast(xp, g * scale * xp.tanh(y), x),
    lambda xp, g, ans, x, y, *, scale: unbroadcast(xp, g * scale * x * (1.0 - xp.tanh(y) ** 2), y),
)


_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
_vals = st.floats(-3.0, 3.0, allow_nan=False, width=64)


def _loss(xp, w):
    def f(x):
        return xp.sum(softplus(x) * w)
    return f


@pytest.mark.parametrize("backend", BACKENDS)
@given(x=hnp.arrays(np.float64, _shapes, elements=_vals), data=st.data())
@settings(max_examples=25, deadline=None)
def test_softplus_grad_jvp_hessian_match_finite_differences(backend, x, data):
    xp = ns(backend)
    w = data.draw(hnp.arrays(np.float64, x.shape, elements=_vals))
    v = data.draw(hnp.arrays(np.float64, x.shape, elements=_vals))

    def ref(a):
        return float(np.sum(np.logaddexp(0.0, a) * w))

    f = _loss(xp, to(xp, w))
    g = as_numpy(ember.grad(f)(to(xp, x)))
    np.testing.assert_allclose(g, central_differences(ref, x), rtol=1e-5, atol=1e-6)
    # forward mode: the tangent of f along v is <grad f, v>
    _, t = ember.jvp(f, (to(xp, x),), (to(xp, v),))
    np.testing.assert_allclose(as_numpy(t), np.sum(g * v), rtol=1e-5, atol=1e-6)
    # second order: the Hessian-vector product against differences of the gradient
    hv = as_numpy(ember.hvp(f, (to(xp, x),), (to(xp, v),))[0])
    grad_np = lambda a: as_numpy(ember.grad(f)(to(xp, a)))  # noqa: E731
    want = (grad_np(x + EPS * v) - grad_np(x - EPS * v)) / (2 * EPS)
    np.testing.assert_allclose(hv, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0,
                                                max_side=3), data=st.data())
@settings(max_examples=25, deadline=None)
def test_binary_primitive_broadcasts_and_matches_finite_differences(backend, shapes, data):
    xp = ns(backend)
    (sx, sy), out = shapes.input_shapes, shapes.result_shape
    x = data.draw(hnp.arrays(np.float64, sx, elements=_vals))
    y = data.draw(hnp.arrays(np.float64, sy, elements=_vals))
    w = data.draw(hnp.arrays(np.float64, out, elements=_vals))
    tw = to(xp, w)

    def f(a, b):
        return xp.sum(smooth_mul(a, b, scale=1.5) * tw)

    gx, gy = (as_numpy(g) for g in ember.grad(f, argnums=(0, 1))(to(xp, x), to(xp, y)))
    np.testing.assert_allclose(gx, central_differences(lambda a: float(np.sum(1.5 * a * np.tanh(y) * w)), x),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gy, central_differences(lambda b: float(np.sum(1.5 * x * np.tanh(b) * w)), y),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_balanced_checkpointing_recomputes_a_primitive_to_the_same_gradient(backend):
    xp = ns(backend)
    x = to(xp, np.linspace(-2.0, 2.0, 7))

    def f(x):
        h = x
        for _ in range(4):
            h = softplus(h) * 0.5 - 0.25
        return xp.sum(h * h)

    want = as_numpy(ember.grad(f)(x))
    got = as_numpy(ember.grad(f, checkpointing="balanced")(x))
    np.testing.assert_array_equal(got, want)
    assert np.all(np.isfinite(want)) and np.any(want != 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_consumed_input_gives_the_value_and_is_dead_after(backend):
    xp = ns(backend)
    a = np.array([-1.0, 0.0, 2.5])
    x = to(xp, a)
    y = softplus(ember.consume(x))
    np.testing.assert_allclose(as_numpy(y), np.logaddexp(0.0, a))
    with pytest.raises(ember.ConsumedError, match="softplus"):
        x + 1.0
    # consuming a constant inside a transform: the gradient of the tracked input is unchanged
    c = to(xp, a)
    g = ember.grad(lambda t: xp.sum(smooth_mul(t, ember.consume(c), scale=2.0)))(to(xp, a))
    np.testing.assert_allclose(as_numpy(g), 2.0 * np.tanh(a))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_primitive_jvp_rule_is_what_forward_mode_uses(backend):
    xp = ns(backend)
    calls = []

    @ember.primitive
    def cube(xp, x):
        return x * x * x

    cube.defvjp(lambda xp, g, ans, x: g * 3.0 * x * x)

    def jvp_rule(xp, tangents, ans, x):
        calls.append(1)
        return tangents[0] * 3.0 * x * x

    cube.defjvp(jvp_rule)
    a, v = np.array([-1.5, 0.5, 2.0]), np.array([1.0, -2.0, 0.25])
    out, t = ember.jvp(lambda x: cube(x), (to(xp, a),), (to(xp, v),))
    assert calls, "forward mode did not call the primitive's own JVP"
    np.testing.assert_allclose(as_numpy(out), a ** 3)
    np.testing.assert_allclose(as_numpy(t), 3 * a * a * v)
    with pytest.raises(TypeError, match="defvjp"):
        ember.primitive(lambda xp, x: x).defjvp(jvp_rule)


def test_primitive_without_vjp_names_itself_and_the_fix():
    xp = ns("numpy")

    @ember.primitive
    def double(xp, x):
        return 2.0 * x

    assert float(xp.sum(double(xp.asarray([1.0, 2.0])))) == 6.0  # untracked: just the forward
    with pytest.raises(ember.NotDifferentiableError, match=r"double.*defvjp"):
        ember.grad(lambda t: xp.sum(double(t)))(xp.asarray([1.0, 2.0]))

    @ember.primitive
    def shift(xp, c, x):
        return c + x

    # the tracked argument need not come first: the gradient is never cut silently
    with pytest.raises(ember.NotDifferentiableError, match=r"shift.*defvjp"):
        ember.grad(lambda t: xp.sum(shift(xp.ones(2), t)))(xp.asarray([1.0, 2.0]))


def test_primitive_on_raw_arrays_runs_the_forward_on_their_namespace():
    out = softplus(np.array([0.0, 1.0]))
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, np.logaddexp(0.0, [0.0, 1.0]))


def test_bad_bound_is_a_clear_error():
    with pytest.raises(ValueError, match="bound must be"):
        ember.primitive(lambda xp, x: x, bound="fast")


def test_a_primitive_named_as_a_staged_kernel_of_the_rules_stays_its_own_op():
    # a user's "_ties" that returns its argument (an alias, not fresh) keeps its own key, so
    # jit's buffer planning never takes it for the rules' run-time kernel of that name
    import ember.autodiff.numpy as xp

    same = ember.primitive(lambda ns_, x: x, name="_ties")
    same.defvjp(lambda ns_, g, ans, x: g)
    assert same.key != "_ties"

    def f(x):
        y = same(x)
        return xp.sin(y) + x  # (x is read after y: writing into y's buffer would change x)

    x = xp.asarray([0.5, 1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(ember.jit(f)(x).raw), np.asarray(f(x).raw))
