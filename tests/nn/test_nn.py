"""ember.nn: Module API, layers on every backend, state, errors, initializers."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import array_api_compat
import numpy as np
import pytest

import ember
import ember.autodiff.numpy as xp
import ember.nn as nn
import ember.random as er
import ember.tree as tree

ROOT = Path(__file__).resolve().parents[2]


def _mlp(xp_=xp):
    return nn.MLP.init(er.key(0), 3, [4], 2, xp=xp_)


# --- Module ---------------------------------------------------------------------------


def test_module_is_frozen_dataclass_and_tree():
    m = _mlp()
    assert dataclasses.is_dataclass(m)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.out = None
    paths = [str(p) for p in tree.paths(m)]
    assert paths == ["hidden.0.0.weight", "hidden.0.0.bias", "out.weight", "out.bias"]
    m2 = tree.map(lambda a: a * 0, m)
    assert type(m2) is nn.MLP and m2.hidden[0][1] is nn.relu


def test_mutable_module_opt_in():
    class Box(nn.Module, frozen=False):
        w: object

    b = Box(xp.ones(2))
    b.w = xp.zeros(2)
    assert b.w.raw.tolist() == [0.0, 0.0]


def test_parameters_replace_at():
    m = _mlp()
    params = dict((str(p), a) for p, a in m.parameters())
    assert list(params) == ["hidden.0.0.weight", "hidden.0.0.bias", "out.weight", "out.bias"]
    assert m.at("out.weight") is m.out.weight
    assert m.at(tree.parse_path("hidden.0.1")) is nn.relu
    new = m.replace(out=m.out.replace(bias=None))
    assert new.out.bias is None and m.out.bias is not None
    with pytest.raises(KeyError, match="hidden.5"):
        m.at("hidden.5.weight")


def test_int_arrays_and_static_are_not_parameters():
    class Tok(nn.Module):
        ids: object
        w: object
        table: object = ember.field(static=True, default=None)

    t = Tok(xp.asarray([1, 2]), xp.ones(3), xp.ones(4))
    assert [str(p) for p, _ in t.parameters()] == ["w"]
    assert nn.count_parameters(t) == 3


def test_repr_and_summary():
    m = _mlp()
    r = repr(m)
    assert r.startswith("MLP(  # 26 params")
    assert "weight=float32[4, 3]" in r and "relu" in r
    s = nn.summary(nn.BatchNorm.init(3))
    assert "running_mean" in s and "no" in s.splitlines()[-2]
    assert s.splitlines()[-1] == "total: 12 values, 6 trainable"


# --- backends ---------------------------------------------------------------------------


def _cnn(xp_):
    k1, k2 = er.split(er.key(1), 2)
    return [
        nn.Conv2d.init(k1, 2, 4, 3, padding=1, groups=2, xp=xp_), nn.gelu,
        nn.MaxPool2d(3, stride=1, padding=1), nn.AvgPool2d(2),
        nn.BatchNorm.init(4, xp=xp_), nn.LayerNorm.init((4, 2, 2), xp=xp_),
    ], nn.Linear.init(k2, 16, 3, xp=xp_)


def _run(xp_, x, convert=None):
    feats, head = _cnn(xp_)
    if convert is not None:  # same weights on another backend
        feats, head = tree.map(convert, (feats, head))
    h = nn.apply(feats, x)
    ns = array_api_compat.array_namespace(h)
    return nn.softmax(head(ns.reshape(h, (h.shape[0], -1))))


def test_layers_on_raw_numpy_dask_and_wrappers():
    x = np.random.default_rng(0).standard_normal((2, 2, 4, 4)).astype(np.float32)
    ref = _run(xp, xp.asarray(x)).raw
    raw = _run(None, x)
    assert type(raw) is np.ndarray
    np.testing.assert_allclose(raw, ref, rtol=1e-6)
    da = pytest.importorskip("dask.array")
    d = _run(None, da.from_array(x, chunks=1), convert=lambda a: da.from_array(a, chunks=2))
    assert type(d).__module__.startswith("dask")
    np.testing.assert_allclose(np.asarray(d.compute()), ref, rtol=1e-5, atol=1e-6)
    import ember.autodiff.array_api_strict as sxp

    s = _run(None, sxp.asarray(x), convert=sxp.asarray)
    np.testing.assert_allclose(np.asarray(s.raw), ref, rtol=1e-6)


def test_grad_of_raw_numpy_model():
    m = nn.Linear.init(er.key(0), 3, 2, dtype="float64")
    x = np.ones((4, 3))
    g = ember.grad(lambda m: xp.sum(m(x) ** 2))(m)
    assert type(g.weight) is np.ndarray and g.weight.shape == (2, 3)


# --- nn.linear: one fused node -----------------------------------------------------------


def _composed(x, w, b, act):
    ns = array_api_compat.array_namespace(x)
    y = ns.matmul(x, ns.matrix_transpose(w)) + (0.0 if b is None else b)
    return y if act is None else act(y)


@pytest.mark.parametrize("lib", ["numpy", "array_api_strict", "dask"])
@pytest.mark.parametrize("act", [None, nn.relu, nn.tanh])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_its_composition_in_value_and_gradients(lib, act, bias):
    if lib == "dask":
        pytest.importorskip("dask.array")
    ns = ember.autodiff.namespace(lib)
    rng = np.random.default_rng(1)
    x, w, b = (ns.asarray(rng.standard_normal(s)) for s in ((2, 5, 3), (4, 3), (4,)))
    b = b if bias else None

    def grads(f):
        return ember.grad(lambda x, w, b: ns.sum(f(x, w, b) ** 2), argnums=(0, 1, 2) if bias else (0, 1))(x, w, b)

    got = grads(lambda x, w, b: nn.linear(x, w, b, activation=act))
    want = grads(lambda x, w, b: _composed(x, w, b, act))
    for g, h in zip(got, want):
        np.testing.assert_allclose(np.asarray(ember.compute(g).raw if lib == "dask" else g.raw),
                                   np.asarray(ember.compute(h).raw if lib == "dask" else h.raw), rtol=1e-12)
    # on raw arrays (no ember namespace): the composition
    raw = nn.linear(np.ones((2, 3)), np.ones((4, 3)), np.ones(4), activation=act)
    assert type(raw) is np.ndarray and raw.shape == (2, 4)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_relu_second_order_matches_its_composition(bias):
    """Under an outer trace the fused VJP runs on wrapper tensors (its ReLU mask check on the
    bias gradient included) and is itself differentiated: equal to the composition's."""
    rng = np.random.default_rng(4)
    x, w, b, v = (xp.asarray(rng.standard_normal(s)) for s in ((5, 3), (4, 3), (4,), (5, 4)))
    b = b if bias else None

    def outer(fused):
        def f(p):  # sin'(0) = 1: the cotangent is not 0 where the ReLU is off, so the mask matters
            h = nn.linear(x, p[0], p[1], activation=nn.relu) if fused else _composed(x, *p, nn.relu)
            return xp.sum(xp.sin(h) * v)

        def sq(p):
            return sum(xp.sum(g**2) for g in ember.grad(f)(p) if g is not None)

        return ember.grad(sq)([w, b])

    for got, want in zip(outer(True), outer(False)):
        assert (got is None) == (want is None) == (not bias and got is None)
        if got is not None:
            np.testing.assert_allclose(got.raw, want.raw, rtol=1e-12)


@pytest.mark.parametrize("x_shape", [(5, 3), (2, 5, 3), (0, 3)])
def test_linear_weight_gradient_takes_the_weight_layout(x_shape):
    """A column-major weight (``W.T`` of NumPy code's ``(in, out)`` array) gets a column-major
    gradient, so an update into the gradient's buffer keeps the layout; same values."""
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal(x_shape), rng.standard_normal((*x_shape[:-1], 4))
    w_c = rng.standard_normal((4, 3))
    w_f = np.asfortranarray(w_c)
    assert w_f.flags.f_contiguous and not w_f.flags.c_contiguous

    def gw(w):
        return ember.grad(lambda w: xp.sum(nn.linear(xp.asarray(x), w, activation=nn.relu) * g))(
            xp.asarray(w)).raw

    got, want = gw(w_f), gw(w_c)
    assert got.flags.f_contiguous and want.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_linear_fuses_and_keeps_dtypes():
    x32, w64 = xp.ones((2, 3), dtype=xp.float32), xp.ones((4, 3), dtype=xp.float64)
    gx, gw = ember.grad(lambda x, w: xp.sum(nn.linear(x, w, activation=nn.relu)), argnums=(0, 1))(x32, w64)
    assert nn.linear(x32, w64).dtype == xp.float64  # promotes as x @ w.T does
    assert gx.dtype == xp.float32 and gw.dtype == xp.float64
    # complex inputs conjugate as matmul's rule does (PyTorch's convention)
    rng = np.random.default_rng(2)
    zx, zw, zb = (xp.asarray(rng.standard_normal(s) + 1j * rng.standard_normal(s)) for s in ((2, 3), (4, 3), (4,)))

    def real_loss(f):
        return ember.grad(lambda x, w, b: xp.sum(xp.abs(f(x, w, b)) ** 2), argnums=(0, 1, 2))(zx, zw, zb)

    for g, h in zip(real_loss(nn.linear), real_loss(lambda x, w, b: _composed(x, w, b, None))):
        np.testing.assert_allclose(g.raw, h.raw, rtol=1e-12)
    # one tape node for matmul + bias + ReLU, and MLP / Sequential fuse (Linear, relu) pairs
    from ember.autodiff._trace import Trace
    from ember.func._transforms import _trace_args

    model = nn.MLP.init(er.key(0), 3, [4, 4], 2, xp=xp)
    with Trace() as tr:
        (m,), _, _ = _trace_args((model,), (0,), tr)
        y = m(xp.ones((5, 3)))
    assert [n.rule.name for n in tr.nodes if n.rule is not None] == ["_linear"] * 3
    unfused = nn.Linear(*(model.out.weight, model.out.bias))(
        nn.relu(nn.relu(xp.ones((5, 3)) @ model.hidden[0][0].weight.mT + model.hidden[0][0].bias)
                @ model.hidden[1][0].weight.mT + model.hidden[1][0].bias))
    np.testing.assert_allclose(model(xp.ones((5, 3))).raw, unfused.raw, rtol=1e-6)
    assert y.shape == (5, 2)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_backward_from_kept_dz_matches_recomputing(reduction):
    """A first-order trace keeps the forward's gradient on the node; checkpointing
    (and an outer trace) recompute it instead: the gradients agree, and second order holds."""
    from ember.autodiff._trace import Trace
    from ember.func._transforms import _trace_args

    rng = np.random.default_rng(3)
    z, t = xp.asarray(rng.standard_normal((5, 4))), xp.asarray(rng.uniform(size=(5, 4)))
    loss = lambda z: xp.sum(nn.cross_entropy(z, t, reduction=reduction) * 1.5)  # noqa: E731
    with Trace() as tr:
        (zt,), _, _ = _trace_args((z,), (0,), tr)
        nn.cross_entropy(zt, t, reduction=reduction)
    (node,) = [n for n in tr.nodes if n.rule is not None]
    # per row for "none"; for the unit cotangent of the sum or mean itself otherwise
    key = "dz" if reduction == "none" else "dz_unit"
    assert node.rule.name == "_softmax_cross_entropy" and node.params[key].shape == (5, 4)
    report = ember.autodiff.memory_report(lambda z: nn.cross_entropy(z, t, reduction=reduction), z)
    assert report["none"].total_bytes >= 3 * z.raw.nbytes  # z, t and the kept dz are all counted
    kept = ember.grad(loss)(z)
    for strategy in ("balanced", "segments"):
        np.testing.assert_allclose(ember.grad(loss, checkpointing=strategy)(z).raw, kept.raw, rtol=1e-13)
    e = np.exp(z.raw - z.raw.max(-1, keepdims=True))
    p_ = e / e.sum(-1, keepdims=True)
    want = 1.5 * (p_ * t.raw.sum(-1, keepdims=True) - t.raw) / (5 if reduction == "mean" else 1)
    np.testing.assert_allclose(kept.raw, want, rtol=1e-12)
    # the Hessian-vector product goes through the recomputing VJP (an outer trace records it)
    v = xp.asarray(rng.standard_normal((5, 4)))
    hv = ember.grad(lambda z: xp.sum(ember.grad(loss)(z) * v))(z)
    eps = 1e-6
    fd = (ember.grad(loss)(z + eps * v).raw - ember.grad(loss)(z - eps * v).raw) / (2 * eps)
    np.testing.assert_allclose(hv.raw, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("where", ["numpy", "dask"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "int64"])
def test_linear_relu_on_integer_and_bool_inputs(dtype, where):
    """The ReLU of nn.linear keeps the product's dtype, in NumPy's fused in-place kernel (a
    Python 0 would promote bool to int64 and fail to write back) and in the generic one
    (Dask); values are the composition's."""
    if where == "dask":
        pytest.importorskip("dask")
        import ember.autodiff.dask as ns
    else:
        ns = xp
    x = ns.asarray(np.array([[1, 0], [1, 1]]).astype(dtype))
    w = ns.asarray(np.array([[1, 1], [0, 1], [1, 0]]).astype(dtype))
    y = nn.linear(x, w, activation=nn.relu)
    composed = nn.relu(x @ w.mT)
    assert y.dtype == composed.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(ember.compute(y).raw), np.asarray(ember.compute(composed).raw))


@pytest.mark.parametrize("dtype", ["bool", "int8", "int64", "float32"])
@pytest.mark.parametrize("where", ["ember", "numpy", "array_api_strict"])
def test_relu_keeps_the_dtype(dtype, where):
    """``relu(x)`` has ``x``'s dtype on every namespace: a bool stays bool (NumPy's
    ``maximum(b, 0)`` is int64; the standard leaves bool with int undefined)."""
    values = np.array([[True, False], [False, True]]) if dtype == "bool" else np.array([[-2, 0], [3, -1]])
    ns = {"ember": xp, "numpy": np, "array_api_strict": pytest.importorskip("array_api_strict")}[where]
    x = ns.asarray(values.astype(dtype))
    y = nn.relu(x)
    assert y.dtype == x.dtype
    raw = y.raw if isinstance(y, ember.Tensor) else y
    np.testing.assert_array_equal(np.asarray(raw), np.maximum(values, 0).astype(dtype))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (the overflows and infs are the point)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_linear_relu_vjp_with_inf_or_huge_cotangents_selects(dtype):
    """The fused VJP multiplies by the ReLU mask only when the masked sums come out finite; an
    inf where the ReLU is off (or sums that overflow) takes ``where``: 0 there, never NaN, as
    the composition's VJP gives."""
    x = xp.asarray(np.array([[1.0, -1.0], [-1.0, 1.0], [2.0, 2.0]], dtype))
    w = xp.asarray(np.array([[1.0, 0.0], [0.0, 1.0]], dtype))
    b = xp.asarray(np.zeros(2, dtype))
    big = float(np.finfo(dtype).max)
    for ct in ([[np.inf, 1.0], [1.0, 2.0], [3.0, 4.0]],     # inf where row 0, unit 0 ... is on
               [[1.0, np.inf], [np.inf, 1.0], [1.0, 1.0]],  # infs where the ReLU is off
               [[big, 1.0], [1.0, big], [big, big]]):       # finite, but the sums overflow
        c = xp.asarray(np.array(ct, dtype))
        _, pull = ember.vjp(lambda x, w, b: nn.linear(x, w, b, activation=nn.relu), x, w, b)
        _, pull_c = ember.vjp(lambda x, w, b: nn.relu(x @ w.mT + b), x, w, b)
        for got, want in zip(pull(c), pull_c(c)):
            np.testing.assert_array_equal(got.raw, want.raw)


def test_linear_errors_name_shapes_and_fix():
    with pytest.raises(ember.ShapeError, match=r"linear: input of shape \(2, 3\), weight of shape \(4, 5\)"):
        nn.linear(xp.ones((2, 3)), xp.ones((4, 5)))
    with pytest.raises(ember.ShapeError, match=r"bias of shape \(3,\).*\(out_features,\)"):
        nn.Linear(xp.ones((4, 3)), xp.ones(3))(xp.ones((2, 3)))
    with pytest.raises(ember.ShapeError, match="weight must be"):
        nn.linear(np.ones(3), np.ones(3))  # raw arrays: the same check
    with pytest.raises(ember.DTypeError, match="activation=relu needs real inputs"):
        nn.linear(xp.ones((2, 3), dtype=xp.complex128), xp.ones((4, 3), dtype=xp.complex128),
                  activation=nn.relu)


# --- state and randomness -----------------------------------------------------------------


def test_batchnorm_training_through_grad_has_aux():
    model = nn.Sequential([nn.Linear.init(er.key(0), 3, 4, xp=xp), nn.BatchNorm.init(4, xp=xp), nn.relu])
    x = xp.asarray(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32))

    def loss(m):
        y, new = m(x, train=True)
        return xp.sum(y * y), new

    g, new = ember.grad(loss, has_aux=True)(model)
    bn_old, bn_new = model.layers[1], new.layers[1]
    assert not np.allclose(bn_new.running_mean.raw, bn_old.running_mean.raw)
    assert bn_new.running_mean._node is None  # cut from the trace
    # an optimizer step over the gradient structure leaves the statistics alone
    stepped = tree.map(lambda p, gi: p - 0.1 * gi, new, g)
    assert stepped.layers[1].running_var is bn_new.running_var
    assert "running_mean" not in [str(p).split(".")[-1] for p, _ in model.parameters()]
    y_eval = new(x)  # inference uses running statistics and returns y only
    assert y_eval.shape == (8, 4)


def test_dropout_keys_in_sequential():
    seq = nn.Sequential([nn.Dropout(0.5), nn.Dropout(0.5)])
    x = xp.ones((50, 50))
    a = seq(x, key=er.key(0)).raw
    assert np.array_equal(a, seq(x, key=er.key(0)).raw)
    assert not np.array_equal(a, seq(x, key=er.key(1)).raw)
    assert set(np.unique(a).tolist()) <= {0.0, 4.0}
    assert np.array_equal(seq(x).raw, x.raw)
    with pytest.raises(ValueError, match="rate"):
        nn.Dropout(1.0)


def test_apply_rejects_non_layers():
    with pytest.raises(TypeError, match="position 1"):
        nn.apply([nn.relu, 3], xp.ones(2))


# --- errors ------------------------------------------------------------------------------


def test_conv_errors_say_what_and_how():
    w = xp.ones((4, 3, 3, 3))
    with pytest.raises(ValueError, match="conv2d: input of shape .* 2 channels"):
        nn.conv(xp.ones((1, 2, 5, 5)), w)
    with pytest.raises(ValueError, match="output would be empty"):
        nn.conv(xp.ones((1, 3, 2, 2)), w)
    with pytest.raises(ValueError, match="padding='same' needs stride 1"):
        nn.conv(xp.ones((1, 3, 5, 5)), w, stride=2, padding="same")
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d.init(er.key(0), 3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="cross_entropy: targets"):
        nn.cross_entropy(xp.ones((2, 3)), xp.asarray([0, 1, 2]))
    with pytest.raises(ValueError, match="reduction"):
        nn.mse(xp.ones(2), xp.ones(2), reduction="avg")


# --- initializers and erf -------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn,std",
    [
        (nn.init.xavier_uniform, math.sqrt(2 / (200 + 100))),
        (nn.init.glorot_normal, math.sqrt(2 / (200 + 100))),
        (nn.init.kaiming_uniform, math.sqrt(2 / 100)),
        (nn.init.he_normal, math.sqrt(2 / 100)),
        (nn.init.torch_default, 1 / math.sqrt(3 * 100)),
    ],
)
def test_initializer_scales(fn, std):
    w = fn(er.key(0), (200, 100))
    assert w.shape == (200, 100) and w.dtype == np.float32
    assert abs(float(np.std(w)) / std - 1) < 0.05
    assert np.array_equal(w, fn(er.key(0), (200, 100)))


def test_simple_initializers():
    assert float(np.sum(nn.init.zeros(None, (3, 2)))) == 0.0
    assert nn.init.fans((8, 4, 3, 3)) == (36, 72)
    u = nn.init.uniform(er.key(1), (1000,), "float64", low=2, high=3)
    assert u.dtype == np.float64 and 2 <= float(np.min(u)) and float(np.max(u)) < 3
    n = nn.init.normal(er.key(1), (4,), xp=xp)
    assert type(n).__name__ == "Tensor"


def test_gelu_tanh_is_one_node_equal_to_its_composition():
    """On an ember namespace the tanh form is one primitive; on raw NumPy nn composes it:
    values and first and second derivatives agree, float32 stays float32."""
    from ember.autodiff._trace import Trace
    from ember.func._transforms import _trace_args

    x = np.linspace(-6, 6, 241)
    ours = nn.gelu(xp.asarray(x), approximate=True)
    np.testing.assert_allclose(ours.raw, nn.gelu(x, approximate=True), rtol=1e-15, atol=1e-300)
    c, k = np.sqrt(2 / np.pi), 0.044715
    # (1 + tanh(u)) / 2 as the logistic function of 2u: 1 + tanh(u) cancels for x < 0
    s = 1 / (1 + np.exp(-2 * c * (x + k * x**3)))
    want = s + 2 * x * s * (1 - s) * c * (1 + 3 * k * x * x)
    d = ember.grad(lambda v: xp.sum(nn.gelu(v, approximate=True)))
    np.testing.assert_allclose(d(xp.asarray(x)).raw, want, rtol=1e-13, atol=1e-15)
    d2 = ember.grad(lambda v: xp.sum(d(v)))(xp.asarray(x)).raw  # through the VJP's own ops
    eps = 1e-6
    fd = (d(xp.asarray(x + eps)).raw - d(xp.asarray(x - eps)).raw) / (2 * eps)
    np.testing.assert_allclose(d2, fd, rtol=1e-6, atol=1e-8)
    assert nn.gelu(xp.asarray(x, dtype=xp.float32), approximate=True).dtype == xp.float32
    with Trace() as tr:
        (v,), _, _ = _trace_args((xp.asarray(x),), (0,), tr)
        nn.gelu(v, approximate=True)
    assert [n.rule.name for n in tr.nodes if n.rule is not None] == ["_gelu_tanh"]


@pytest.mark.parametrize("dtype,big", [("float32", [1e6, 2e13, 1e15, 1e18]), ("float64", [1e50, 2e103, 1e150])])
def test_gelu_tanh_gradient_far_out_is_one_or_zero(dtype, big):
    # s (1 - s) is 0 there (s, GELU's logistic factor, is 1 or exactly 0: exp overflowed): the
    # derivative is 1 (x > 0) or 0 (x < 0) until x^2 overflows, eagerly and under jit
    x = xp.asarray(np.array(big + [-v for v in big]), dtype=getattr(xp, dtype))
    want = [1.0] * len(big) + [0.0] * len(big)

    def f(v):
        return xp.sum(nn.gelu(v, approximate=True))

    for d in (ember.grad(f), ember.jit(ember.grad(f))):
        np.testing.assert_array_equal(d(x).raw, want)


def test_gelu_tanh_is_accurate_for_negative_inputs_and_warns_of_no_overflow():
    # 1 + tanh(u) cancels for x < 0 (float32 GELU(-5) was 30% off); the logistic form is
    # accurate to float32's rounding of its argument. Far out its exp overflows to inf on
    # purpose (the factor is then exactly 0): no RuntimeWarning, eagerly, under jit, at
    # second order
    import warnings

    x = np.linspace(-40, 10, 2001)
    ref = x / (1 + np.exp(np.minimum(-2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x**3), 700)))
    f = lambda v: xp.sum(nn.gelu(v, approximate=True))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype, rtol in (("float32", 3e-5), ("float64", 1e-12)):  # (exp of |w| up to ~700)
            v = xp.asarray(x, dtype=getattr(xp, dtype))
            y = np.asarray(nn.gelu(v, approximate=True).raw, dtype=np.float64)
            big = np.abs(ref) > np.finfo(dtype).tiny / np.finfo(dtype).eps  # (s not subnormal)
            np.testing.assert_allclose(y[big], ref[big], rtol=rtol, atol=0)
            d2 = ember.grad(lambda a: xp.sum(ember.grad(f)(a)))
            for h in (d2, ember.jit(d2)):
                assert np.all(np.isfinite(h(v).raw))
            # raw NumPy arrays (the compat namespace); exp's underflow for large x is intended too
            raw = x.astype(dtype)
            with np.errstate(over="raise"):
                np.testing.assert_array_equal(nn.gelu(raw, approximate=True), nn.gelu(v, approximate=True).raw)
            with np.errstate(under="raise"):
                for a in (raw[x >= 0], xp.asarray(raw[x >= 0])):
                    nn.gelu(a, approximate=True)
                ember.jit(ember.grad(f))(xp.asarray(raw[x >= 0]))


@pytest.mark.parametrize("shape,norm", [((3, 4, 5), (5,)), ((2, 3, 4), (3, 4)), ((0, 6), (6,))])
def test_layer_norm_is_one_node_equal_to_its_composition(shape, norm):
    """On an ember namespace LayerNorm is one primitive: the composition's values (raw NumPy
    composes; bitwise), its first derivatives, second derivatives through the VJP's own ops."""
    from ember.autodiff._trace import Trace
    from ember.func._transforms import _trace_args

    rng = np.random.default_rng(7)
    x, w, b = rng.standard_normal(shape), rng.uniform(0.5, 2, norm), rng.standard_normal(norm)
    m = nn.LayerNorm(xp.asarray(w), xp.asarray(b), norm)
    raw = nn.LayerNorm(w, b, norm)
    np.testing.assert_array_equal(m(xp.asarray(x)).raw, raw(x))
    axes = tuple(range(len(shape) - len(norm), len(shape)))
    d = x - x.mean(axis=axes, keepdims=True)  # the formula, written out in NumPy
    # (to rounding: a mean over the last axis alone is a product with ones, kernels.mean_last)
    np.testing.assert_allclose(raw(x), d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + 1e-5) * w + b,
                               rtol=1e-14, atol=1e-14)

    def composed(x, w, b):  # the layer written out in the namespace's ops: nine nodes
        d = x - xp.mean(x, axis=axes, keepdims=True)
        return d / xp.sqrt(xp.mean(d * d, axis=axes, keepdims=True) + 1e-5) * w + b

    t = xp.asarray(rng.standard_normal(shape))

    def loss(f):
        return lambda x, w, b: xp.sum(xp.sin(f(x, w, b) * t))

    def fused(x, w, b):
        return nn.LayerNorm(w, b, norm)(x)

    args = (xp.asarray(x), xp.asarray(w), xp.asarray(b))
    for got, want in zip(ember.grad(loss(fused), argnums=(0, 1, 2))(*args),
                         ember.grad(loss(composed), argnums=(0, 1, 2))(*args)):
        np.testing.assert_allclose(got.raw, want.raw, rtol=1e-10, atol=1e-12)
    gx = ember.grad(loss(fused))
    h = ember.grad(lambda v: xp.sum(gx(v, args[1], args[2]) * t))(args[0]).raw
    want_h = ember.grad(lambda v: xp.sum(ember.grad(loss(composed))(v, args[1], args[2]) * t))(args[0]).raw
    np.testing.assert_allclose(h, want_h, rtol=1e-9, atol=1e-11)
    with Trace() as tr:
        (v,), _, _ = _trace_args((args[0],), (0,), tr)
        m(v)
    assert [n.rule.name for n in tr.nodes if n.rule is not None] == ["_layer_norm"]
    assert "parts" in tr.nodes[-1].params  # kept by the forward: the VJP does not recompute


def test_erf_accuracy():
    x = np.linspace(-8, 8, 4001)
    ref = np.array([math.erf(v) for v in x])
    assert float(np.max(np.abs(nn.erf(x) - ref))) < 1e-13  # raw NumPy: the series composed
    ours = nn.erf(xp.asarray(x))  # ember namespace: one primitive, the same values
    assert float(np.max(np.abs(ours.raw - ref))) < 1e-13
    # its gradient is exact (2 / sqrt(pi) exp(-x^2)), and gelu records one erf node, not ~190
    g = ember.grad(lambda t: xp.sum(nn.erf(t)))(xp.asarray(x))
    np.testing.assert_allclose(g.raw, 2 / np.sqrt(np.pi) * np.exp(-x * x), rtol=1e-15, atol=1e-300)
    from ember.autodiff._trace import Trace
    from ember.func._transforms import _trace_args

    with Trace() as tr:
        (t,), _, _ = _trace_args((xp.asarray(x),), (0,), tr)
        nn.gelu(t)
    assert [n.rule.name for n in tr.nodes if n.rule is not None].count("_erf") == 1 and len(tr.nodes) < 8


# --- examples ------------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["mlp_digits.py", "cnn_digits.py"])
def test_examples_quick(script):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--quick"],
        capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    acc = float(out.stdout.strip().splitlines()[-1].split()[2])
    assert acc > 0.3


@pytest.mark.slow
def test_cnn_digits_reaches_97_percent_in_two_minutes():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import cnn_digits
    finally:
        sys.path.pop(0)
    _, acc, seconds = cnn_digits.train(10, log=False)
    assert acc >= 0.97
    assert seconds < 120


@pytest.mark.parametrize("layer", ["softmax", "log_softmax", "layer_norm", "cross_entropy"])
def test_row_sums_by_a_product_with_ones_give_gradients_equal_to_finite_differences(layer):
    # 600 rows: the forward's and the VJP's sums along the last axis are products with ones
    # (kernels.sum_last); directional derivatives against central differences, float64
    rng = np.random.default_rng(11)
    x0, t0 = rng.standard_normal((600, 7)), rng.standard_normal((600, 7))
    norm = nn.LayerNorm(xp.asarray(rng.uniform(0.5, 2.0, 7)), xp.asarray(rng.standard_normal(7)), (7,))
    probs = xp.asarray(np.abs(t0) / np.abs(t0).sum(axis=-1, keepdims=True))
    f = {"softmax": lambda x: nn.softmax(x, axis=-1), "log_softmax": lambda x: nn.log_softmax(x, axis=-1),
         "layer_norm": norm, "cross_entropy": lambda x: nn.cross_entropy(x, probs)}[layer]
    t = xp.asarray(t0)

    def loss(x):
        return xp.sum(xp.sin(f(x)) * t) if layer != "cross_entropy" else f(x)

    g = np.asarray(ember.grad(loss)(xp.asarray(x0)).raw)
    for _ in range(3):
        v = rng.standard_normal(x0.shape)
        h = 1e-6
        fd = (float(loss(xp.asarray(x0 + h * v))) - float(loss(xp.asarray(x0 - h * v)))) / (2 * h)
        np.testing.assert_allclose(float(np.sum(g * v)), fd, rtol=1e-6, atol=1e-7)
