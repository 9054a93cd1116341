"""A tape node keeps only what its VJP reads (``defvjp(..., saves=..., keep_ans=...)``).

Why: a chain of elementwise ops otherwise holds every intermediate twice over
(as one node's result and the next node's input) until the backward pass,
although ``x * 0.9`` needs neither, ``sin`` only its input and ``exp`` only
its result. The tests watch the backend arrays with weak references while a
VJP function holds the tape, and check the gradients still come out right.
"""

from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import pytest

import ember
import ember.autodiff.numpy as xp
from ember.autodiff import Spec, defvjp
from ember.autodiff._tensor import raw_value

X = np.linspace(-1.0, 1.0, 7)


def _watch(refs, name, t):
    refs[name] = weakref.ref(raw_value(t))
    return t


def _alive_after_forward(fn, *args):
    """Run ``fn`` under ``ember.vjp``; which watched arrays the tape still holds, and the VJP."""
    refs: dict = {}
    out, pull = ember.vjp(lambda *a: fn(refs, *a), *args)
    gc.collect()
    return {k: r() is not None for k, r in refs.items()}, out, pull


def test_chain_keeps_only_what_vjps_read():
    def fn(refs, x):
        s = _watch(refs, "sin", xp.sin(x))  # read by nothing: sin keeps x, 0.9 * s keeps a Spec
        p = _watch(refs, "scaled", s * 0.9)  # exp reads only its own result
        e = _watch(refs, "exp", xp.exp(p))  # kept: exp's VJP reads it
        return _watch(refs, "shifted", e + 1.0)  # the output (the caller holds it)

    alive, out, pull = _alive_after_forward(fn, xp.asarray(X))
    assert alive == {"sin": False, "scaled": False, "exp": True, "shifted": True}
    (g,) = pull(xp.ones_like(out))
    np.testing.assert_allclose(g.raw, np.exp(0.9 * np.sin(X)) * 0.9 * np.cos(X), rtol=1e-13)


def test_product_of_tracked_values_keeps_both_factors():
    def fn(refs, x, y):
        a = _watch(refs, "a", xp.sin(x))
        b = _watch(refs, "b", xp.cos(y))
        return xp.sum(a * b)

    alive, out, pull = _alive_after_forward(fn, xp.asarray(X), xp.asarray(X[::-1].copy()))
    assert alive == {"a": True, "b": True}
    gx, gy = pull(xp.ones_like(out))
    np.testing.assert_allclose(gx.raw, np.cos(X) * np.cos(X[::-1]), rtol=1e-13)
    np.testing.assert_allclose(gy.raw, -np.sin(X[::-1]) * np.sin(X), rtol=1e-13)


def test_product_with_untracked_array_keeps_only_that_factor():
    c = xp.asarray(np.full(7, 2.0))

    def fn(refs, x):
        a = _watch(refs, "a", xp.sin(x))  # only its Spec: c is a constant
        return xp.sum(a * c)

    alive, out, pull = _alive_after_forward(fn, xp.asarray(X))
    assert alive == {"a": False}
    (g,) = pull(xp.ones_like(out))
    np.testing.assert_allclose(g.raw, 2.0 * np.cos(X), rtol=1e-13)


def test_relu_keeps_its_result_not_the_pre_activation():
    # x @ w + b: the sum keeps no array, so relu's input lives only while relu's node holds it;
    # relu's VJP reads its result (which the next product keeps anyway), not its input
    w = xp.asarray(np.random.default_rng(2).standard_normal((7, 5)))

    def fn(refs, x, b):
        pre = _watch(refs, "pre", x[None, :] @ w + b)
        h = _watch(refs, "relu", ember.nn.relu(pre))
        return xp.sum(xp.sin(h))

    xs = np.linspace(-1.0, 1.0, 7)
    b0 = np.array([0.3, -0.2, 0.0, 0.1, -0.5])
    alive, out, pull = _alive_after_forward(fn, xp.asarray(xs), xp.asarray(b0))
    assert alive == {"pre": False, "relu": True}
    gx, gb = pull(xp.ones_like(out))
    pre = xs[None, :] @ w.raw + b0
    gpre = np.cos(np.maximum(pre, 0.0)) * (pre > 0)
    np.testing.assert_allclose(gb.raw, gpre[0], rtol=1e-13)
    np.testing.assert_allclose(gx.raw, (gpre @ w.raw.T)[0], rtol=1e-13)


@pytest.mark.parametrize("checkpointing", ["balanced", "segments"])
def test_checkpointing_keeps_inputs_for_recomputation(checkpointing):
    f = lambda x: xp.sum(xp.exp(xp.sin(x) * 0.9) + 1.0)  # noqa: E731
    x = xp.asarray(X)
    g_none = ember.grad(f)(x)
    g_ck = ember.grad(f, checkpointing=checkpointing)(x)
    assert np.array_equal(g_none.raw, g_ck.raw)


def test_broadcast_sum_reduces_through_spec():
    # the add keeps Specs of both inputs: fit reads their shapes to sum the broadcast axes
    f = lambda a, b: xp.sum(xp.sin(a + b))  # noqa: E731
    a, b = xp.asarray(np.ones((3, 1))), xp.asarray(np.arange(4.0))
    ga, gb = ember.grad(f, argnums=(0, 1))(a, b)
    expected = np.cos(np.ones((3, 1)) + np.arange(4.0))
    assert ga.shape == (3, 1) and gb.shape == (4,)
    np.testing.assert_allclose(ga.raw, expected.sum(axis=1, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(gb.raw, expected.sum(axis=0), rtol=1e-13)


def test_second_order_through_unkept_values():
    # the VJPs run recorded on Tensors with Specs and NOT_KEPT in place of inputs
    f = lambda x: xp.sum(xp.exp(x * 0.5) + xp.sin(x))  # noqa: E731
    h = ember.hessian(f)(xp.asarray(X))
    np.testing.assert_allclose(np.diag(h.raw), 0.25 * np.exp(0.5 * X) - np.sin(X), rtol=1e-12)


def test_bad_saves_are_rejected():
    one = lambda ns, g, ans, x: g  # noqa: E731
    for saves in [("shape",), ("spec", "spec")]:  # an unknown mode; one mode too many
        with pytest.raises(ValueError, match="_test_bad_saves.*saves must give one of"):
            defvjp("_test_bad_saves", one, saves=saves)
    assert "_test_bad_saves" not in ember.autodiff.RULES


def test_spec_reads_like_an_array_header():
    s = Spec((2, 3), np.dtype("float32"))
    assert s.ndim == 2 and s.shape == (2, 3) and s.dtype == np.float32
    assert repr(s) == "Spec(shape=(2, 3), dtype=float32)"


def test_specs_of_two_libraries_never_compare_their_dtypes():
    # array_api_strict's dtypes hash like NumPy's, and comparing one with the other warns:
    # the Spec cache must tell the two apart by the array type before it gets there
    pytest.importorskip("array_api_strict")
    strict = ember.autodiff.namespace("array_api_strict")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for ns in (xp, strict, xp):
            x = ns.asarray(X)
            g = ember.grad(lambda x: ns.sum(x + 1.0))(x)
            assert type(raw_value(g)).__module__.split(".")[0] == type(raw_value(x)).__module__.split(".")[0]


def test_a_two_argument_primitive_with_parameters_keeps_only_what_its_vjps_read():
    # a primitive with keyword parameters takes the generic one-level path, which drops what
    # saves= says its VJPs never read, as the standard ops' fast paths do
    axpy = ember.primitive(lambda ns, a, b, *, k: k * a + b, name="axpy_saves")
    axpy.defvjp(lambda ns, g, ans, a, b, *, k: g * k, lambda ns, g, ans, a, b, *, k: g,
                saves=("none", "spec"), keep_ans=False)

    def fn(refs, x, y):
        a = _watch(refs, "a", xp.sin(x) * 1.5)  # (sin's VJP reads x, not this product)
        b = _watch(refs, "b", xp.cos(y) * 2.0)
        return _watch(refs, "out", axpy(a, b, k=3.0))

    alive, out, pull = _alive_after_forward(fn, xp.asarray(X), xp.asarray(X[::-1].copy()))
    assert alive == {"a": False, "b": False, "out": True}
    gx, gy = pull(xp.ones_like(out))
    np.testing.assert_allclose(gx.raw, 3.0 * 1.5 * np.cos(X), rtol=1e-13)
    np.testing.assert_allclose(gy.raw, -2.0 * np.sin(X[::-1]), rtol=1e-13)
