"""Forward mode (by transposition) and Jacobians: jvp, jacfwd, jacrev, hessian, hvp.

Checked against central finite differences on NumPy and array_api_strict,
on structures, and nested with each other and with grad.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.func import hessian, hvp, jacfwd, jacrev, jvp
from test_grad_linalg import BACKENDS, _np, _ns

EPS = 1e-6


def T(xp, a):
    return xp.asarray(xp._backend.asarray(np.array(a)))


def fd_jvp(fun, x, v, eps=EPS):
    return (fun(x + eps * v) - fun(x - eps * v)) / (2 * eps)


def fd_jac(fun, x, eps=EPS):
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = 1.0
        cols.append(fd_jvp(fun, x, e.reshape(x.shape), eps))
    y = np.asarray(fun(x))
    return np.stack(cols, axis=-1).reshape(y.shape + x.shape)


def _vec_fun(xp):
    def f(x):
        a = xp.sin(x) * xp.sum(x * x)
        b = xp.linalg.matmul(xp.reshape(x, (2, 2)), xp.reshape(xp.exp(x), (2, 2)))
        return xp.concat([a, xp.reshape(b, (4,)), xp.reshape(xp.linalg.vector_norm(x), (1,))])

    return f


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_jvp_matches_fd(backend, seed):
    xp = _ns(backend)
    r = np.random.default_rng(seed)
    x, v = r.uniform(-1, 1, 4), r.standard_normal(4)
    f = _vec_fun(xp)
    y, t = jvp(f, (T(xp, x),), (T(xp, v),))
    num = fd_jvp(lambda a: _np(f(T(xp, a))), x, v)
    np.testing.assert_allclose(_np(t), num, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(_np(y), _np(f(T(xp, x))))


@pytest.mark.parametrize("backend", BACKENDS)
def test_jacfwd_jacrev_agree_with_fd(backend):
    xp = _ns(backend)
    x = np.array([0.3, -0.2, 0.5, 0.9])
    f = _vec_fun(xp)
    jf = _np(jacfwd(f)(T(xp, x)))
    jr = _np(jacrev(f)(T(xp, x)))
    num = fd_jac(lambda a: _np(f(T(xp, a))), x)
    assert jf.shape == (9, 4)
    np.testing.assert_allclose(jf, num, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jr, jf, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_and_hvp(backend):
    xp = _ns(backend)
    x = np.array([[0.3, -0.2, 0.5], [0.9, 0.1, -0.4]])
    v = np.arange(6.0).reshape(2, 3) / 5

    def f(x):
        return xp.sum(xp.tanh(x) * xp.exp(x[::-1, :])) + xp.linalg.vector_norm(x) * xp.sum(x)

    gradf = ember.grad(f)
    H = _np(hessian(f)(T(xp, x)))
    assert H.shape == (2, 3, 2, 3)
    num = fd_jac(lambda a: _np(gradf(T(xp, a))), x)
    np.testing.assert_allclose(H, num, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, np.swapaxes(np.swapaxes(H, 0, 2), 1, 3), atol=1e-12)
    (hv,) = hvp(f, (T(xp, x),), (T(xp, v),))
    np.testing.assert_allclose(_np(hv), np.tensordot(H, v, axes=2), rtol=1e-10, atol=1e-12)
    # forward-over-reverse gives the same
    _, hv2 = jvp(gradf, (T(xp, x),), (T(xp, v),))
    np.testing.assert_allclose(_np(hv2), _np(hv), rtol=1e-10, atol=1e-12)


def test_nesting_all_ways():
    xp = ember.autodiff.namespace("numpy")
    x0 = np.array([0.4, -0.7, 1.1])
    v0 = np.array([1.0, 0.5, -2.0])
    x, v = T(xp, x0), T(xp, v0)

    def f(x):
        return xp.sum(xp.sin(x) * x * x)

    def fjvp(x):  # <grad f, v> via forward mode
        return jvp(f, (x,), (v,))[1]

    # reverse-over-forward equals reverse-over-reverse
    a = _np(ember.grad(fjvp)(x))
    b = _np(ember.grad(lambda x: xp.sum(ember.grad(f)(x) * v))(x))
    np.testing.assert_allclose(a, b, rtol=1e-12)
    # forward-over-forward: v^T H v
    _, vhv = jvp(fjvp, (x,), (v,))
    np.testing.assert_allclose(float(vhv), float(np.dot(b, v0)), rtol=1e-12)
    # third order: grad of v^T H v vs FD
    g3 = _np(ember.grad(lambda x: jvp(fjvp, (x,), (v,))[1])(x))
    num = fd_jvp(lambda a: float(np.dot(_np(ember.grad(lambda y: xp.sum(ember.grad(f)(y) * v))(T(xp, a))), v0)),
                 x0, np.eye(3)[0])
    assert abs(g3[0] - num) < 1e-5 * max(1, abs(num))
    # hessian of a function defined with jacrev
    H = _np(hessian(f)(x))
    H2 = _np(jacfwd(ember.grad(f))(x))
    np.testing.assert_allclose(H, H2, rtol=1e-12, atol=1e-12)


def test_structures_and_raw_inputs():
    xp = ember.autodiff.namespace("numpy")
    params = {"w": np.array([[1.0, 2.0], [0.5, -1.0]]), "b": np.array([0.1, 0.2]), "name": "layer"}
    x = np.array([0.3, -0.4])

    def f(p, x):
        return {"y": xp.tanh(xp.linalg.matmul(p["w"], x) + p["b"]), "s": xp.sum(p["w"] * p["w"])}

    tang = {"w": np.ones((2, 2)), "b": np.array([1.0, -1.0]), "name": "layer"}
    out, t = jvp(f, (params, x), (tang, np.zeros(2)))
    assert isinstance(t["y"], np.ndarray) and isinstance(out["s"], np.ndarray)  # raw in, raw out
    eps = 1e-6
    plus = {k: (params[k] + eps * tang[k] if k != "name" else "layer") for k in params}
    minus = {k: (params[k] - eps * tang[k] if k != "name" else "layer") for k in params}
    num = (_np(f(plus, x)["y"]) - _np(f(minus, x)["y"])) / (2 * eps)
    np.testing.assert_allclose(t["y"], num, rtol=1e-6)
    J = jacrev(f, argnums=(0, 1))(params, x)
    assert J["y"][0]["w"].shape == (2, 2, 2) and J["y"][1].shape == (2, 2)
    assert J["y"][0]["name"] == "layer"  # constants keep their value
    Jf = jacfwd(f, argnums=(0, 1))(params, x)
    for a, b in zip(ember.tree.leaves(J), ember.tree.leaves(Jf)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_errors():
    xp = ember.autodiff.namespace("numpy")
    x = xp.ones((3,))
    with pytest.raises(ValueError, match="tangent at .* has shape"):
        jvp(xp.sin, (x,), (xp.ones((2,)),))
    with pytest.raises(TypeError, match="must be tuples"):
        jvp(xp.sin, x, x)
    with pytest.raises(ValueError, match="one tangent per primal"):
        jvp(xp.sin, (x,), (x, x))


def test_jvp_unused_and_integer_outputs():
    xp = ember.autodiff.namespace("numpy")
    x = xp.asarray([1.0, 2.0])
    y, t = jvp(lambda x: (xp.ones(3), xp.argmax(x), x * 2), (x,), (xp.asarray([1.0, 1.0]),))
    assert _np(t[0]).tolist() == [0.0, 0.0, 0.0]
    assert _np(t[2]).tolist() == [2.0, 2.0]


def _best(fn, reps=7):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.slow  # timing: meaningful only on an idle machine
def test_jvp_equals_a_hand_written_tangent_propagation():
    """Native forward mode gives the tangent a hand-written propagation gives (its cost
    against a plain forward pass is measured in benchmarks/forward_mode.py)."""
    xp = ember.autodiff.namespace("numpy")
    r = np.random.default_rng(0)
    Ws = [T(xp, r.standard_normal((32, 32)) / 6) for _ in range(4)]
    x = T(xp, r.standard_normal((8, 32)))
    v = T(xp, r.standard_normal((8, 32)))

    def f(h):
        for W in Ws:
            h = xp.tanh(xp.matmul(h, W))
        return h

    def direct():
        h, t = x, v
        for W in Ws:
            h = xp.tanh(xp.matmul(h, W))
            t = (1 - h * h) * xp.matmul(t, W)
        return h, t

    ref_out, ref = direct()
    out, got = jvp(f, (x,), (v,))
    np.testing.assert_allclose(_np(out), _np(ref_out), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_np(got), _np(ref), rtol=1e-10, atol=1e-12)