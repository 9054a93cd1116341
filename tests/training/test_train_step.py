"""ember.training.train_step: value_and_grad + update in one call, in place where ownership allows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import ember
import ember.optim as optim
import ember.training as training
import ember.tree as tree

xp = pytest.importorskip("ember.autodiff.numpy")
nn = ember.nn


def _problem(dtype, seed=0):
    rng = np.random.default_rng(seed)
    params = {
        "l1": {"weight": rng.standard_normal((5, 4)).astype(dtype), "bias": np.zeros(5, dtype)},
        "l2": {"weight": rng.standard_normal((3, 5)).astype(dtype), "bias": np.zeros(3, dtype)},
        "scale": np.asarray(1.5, dtype),
    }
    x = rng.standard_normal((8, 4)).astype(dtype)
    y = np.eye(3, dtype=dtype)[rng.integers(0, 3, 8)]
    return params, x, y


def loss_fn(p, x, y, *, smoothing=0.0):
    h = nn.linear(x, p["l1"]["weight"], p["l1"]["bias"], activation=nn.relu)
    z = nn.linear(h, p["l2"]["weight"], p["l2"]["bias"]) * p["scale"]
    return nn.cross_entropy(z, y, label_smoothing=smoothing)


def _copy(params):
    return tree.map(lambda a: xp.asarray(a, copy=True), params)


def _raw(t):
    return tree.map(lambda a: np.array(getattr(a, "raw", a), copy=True) if hasattr(a, "shape") else a, t)


def _assert_same(a, b):
    tree.map(lambda u, v: np.testing.assert_array_equal(getattr(u, "raw", u), getattr(v, "raw", v)), a, b)


OPTIMIZERS = {
    "sgd": lambda: optim.SGD(0.1),
    "sgd-wd": lambda: optim.SGD(0.1, weight_decay=0.01),
    "momentum": lambda: optim.SGD(0.1, momentum=0.9),
    "momentum-dampening-wd": lambda: optim.SGD(0.1, momentum=0.9, dampening=0.3, weight_decay=0.01),
    "nesterov": lambda: optim.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optim.Adam(0.01),
    "adamw-clip": lambda: optim.AdamW(0.01, clip_norm=0.5),
    "sgd-clip": lambda: optim.SGD(0.1, clip_norm=0.5),
    "sgd-freeze": lambda: optim.SGD(0.1, freeze="l1.*"),
    "sgd-groups": lambda: optim.SGD(0.1, groups=[optim.Group("*.bias", lr_scale=0.5),
                                                  optim.Group("*", exclude="*.bias", momentum=0.5)]),
    "schedule": lambda: optim.SGD(optim.schedules.cosine(0.1, 5)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_train_step_is_value_and_grad_then_update_bit_for_bit(make, dtype):
    raw, x, y = _problem(dtype)
    xt, yt = xp.asarray(x), xp.asarray(y)
    opt = make()
    want = {k: v for k, v in tree.map(xp.asarray, raw).items()}
    params = _copy(want)
    want_state = state = opt.init(want)
    vg = ember.value_and_grad(loss_fn)
    step = training.train_step(loss_fn, opt)
    for _ in range(3):
        want_loss, grads = vg(want, xt, yt)
        want, want_state = opt.update(want, grads, want_state)
        before_params, before_state = _raw(params), _raw(state)
        old_params, old_state = params, state
        loss, params, state = step(params, state, xt, yt)
        # the caller's params and state are never written (pure for what it still holds)
        _assert_same(old_params, before_params)
        _assert_same(old_state, before_state)
        assert float(loss.raw) == float(want_loss.raw)
        _assert_same(params, want)
        _assert_same(state, want_state)
        assert all(isinstance(a, ember.Tensor) and a.dtype == dtype for a in tree.leaves(params))


def test_train_step_writes_the_new_parameters_into_the_gradients_buffers():
    # the point: no parameter-sized buffer per update (NumPy reports to tracemalloc); the
    # same step through value_and_grad + update allocates two (g * lr, then p - that)
    w0 = np.random.default_rng(0).standard_normal((512, 512))  # 2 MiB
    opt = optim.SGD(0.1)

    def loss(p):
        return xp.sum(p["w"] * 3.0)  # backward's peak: the product and the gradient

    def peak(run):
        params = {"w": xp.asarray(w0, copy=True)}
        state = opt.init(params)
        run(params, state)  # warm
        tracemalloc.start()
        try:
            run(params, state)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    vg, step = ember.value_and_grad(loss), training.train_step(loss, opt)

    def plain(params, state):
        _, g = vg(params)
        return opt.update(params, g, state)

    fused, separate = peak(lambda p, s: step(p, s)), peak(plain)
    assert separate - fused >= 3 << 19, (separate, fused)
    params = {"w": xp.asarray(w0, copy=True)}
    _, new, _ = step(params, opt.init(params))
    np.testing.assert_array_equal(new["w"].raw, w0 - 0.1 * np.full_like(w0, 3.0))
    np.testing.assert_array_equal(params["w"].raw, w0)  # the old parameter is untouched
    assert not np.shares_memory(new["w"].raw, params["w"].raw)


@pytest.mark.parametrize("order", ["C", "F"])
def test_train_step_keeps_a_linear_weights_layout_and_updates_in_place(order):
    # a column-major weight's gradient is the transpose of a fresh product (a view spanning
    # its base, which nothing else holds): written in place as a row-major one is
    rng = np.random.default_rng(5)
    w0 = np.asarray(rng.standard_normal((512, 256)), order=order)  # 1 MiB
    x = xp.asarray(rng.standard_normal((8, 256)))
    opt = optim.SGD(0.1)

    def loss(p):
        return xp.sum(nn.linear(x, p["w"]))

    step, vg = training.train_step(loss, opt), ember.value_and_grad(loss)
    params = {"w": xp.asarray(w0, copy=True)}
    state = opt.init(params)
    _, params, state = step(params, state)  # warm
    tracemalloc.start()
    try:
        _, new, state = step(params, state)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * w0.nbytes, peak  # the gradient only: the update allocated nothing
    flags = new["w"].raw.flags
    assert flags.f_contiguous if order == "F" else flags.c_contiguous
    _, g = vg(params)
    np.testing.assert_array_equal(new["w"].raw, params["w"].raw - 0.1 * g["w"].raw)


def test_train_step_momentum_buffer_is_the_gradient_buffer_and_state_is_kept_apart():
    opt = optim.SGD(0.1, momentum=0.9)
    params = {"w": xp.asarray(np.arange(4.0), copy=True)}
    state = opt.init(params)
    step = training.train_step(lambda p: xp.sum(p["w"] * p["w"]), opt)
    _, params2, state2 = step(params, state)
    _, params3, state3 = step(params2, state2)
    m2, m3 = state2["params"]["w"]["momentum"].raw, state3["params"]["w"]["momentum"].raw
    np.testing.assert_array_equal(m2, 2 * np.arange(4.0))  # kept after the next step
    assert not np.shares_memory(m2, m3) and not np.shares_memory(m3, params3["w"].raw)


def test_train_step_never_writes_a_buffer_someone_else_holds():
    # one cotangent array for two leaves (an add's VJP hands g to both): neither is written
    opt = optim.SGD(0.5)
    params = {"a": xp.asarray(np.ones(3), copy=True), "b": xp.asarray(np.full(3, 2.0), copy=True)}
    c = xp.asarray([1.0, 2.0, 3.0])
    _, g = ember.value_and_grad(lambda p: xp.sum((p["a"] + p["b"]) * c))(params)
    assert g["a"].raw is g["b"].raw and g["a"].raw.base is None  # one fresh array for both
    step = training.train_step(lambda p: xp.sum((p["a"] + p["b"]) * c), opt)
    _, new, _ = step(params, opt.init(params))
    assert new["a"].raw.tolist() == [0.5, 0.0, -0.5] and new["b"].raw.tolist() == [1.5, 1.0, 0.5]
    assert not np.shares_memory(new["a"].raw, new["b"].raw)
    # a loss that keeps its gradient's input alive through aux: the values stay right
    kept = []

    def loss(p):
        y = p["a"] * 3.0
        kept.append(y)
        return xp.sum(y)

    step = training.train_step(loss, opt)
    _, new, _ = step(params, opt.init(params))
    assert new["a"].raw.tolist() == [1.0 - 1.5] * 3
    assert kept[0].raw.tolist() == [3.0] * 3


def test_train_step_aux_args_kwargs_and_unused_parameters():
    raw, x, y = _problem("float64")
    params = tree.map(xp.asarray, raw)
    params["unused"] = xp.asarray(np.ones(2), copy=True)
    opt = optim.SGD(0.1, weight_decay=0.5)

    def f(p, x, y, *, smoothing):
        loss = loss_fn(p, x, y, smoothing=smoothing)
        return loss, {"twice": loss * 2.0}

    step = training.train_step(f, opt, has_aux=True)
    (loss, aux), new, state = step(params, opt.init(params), xp.asarray(x), xp.asarray(y), smoothing=0.1)
    (want_loss, want_aux), g = ember.value_and_grad(f, has_aux=True)(params, xp.asarray(x), xp.asarray(y),
                                                                      smoothing=0.1)
    want, _ = opt.update(params, g, opt.init(params))
    assert float(loss.raw) == float(want_loss.raw) and float(aux["twice"].raw) == float(want_aux["twice"].raw)
    _assert_same(new, want)
    np.testing.assert_array_equal(new["unused"].raw, np.full(2, 1.0 - 0.1 * 0.5))  # decay only
    assert state["step"] == 1


def test_train_step_on_raw_numpy_parameters_gives_raw_results():
    raw, x, y = _problem("float64")
    opt = optim.SGD(0.1, momentum=0.9)
    xt, yt = xp.asarray(x), xp.asarray(y)
    kept = _raw(raw)
    loss, new, state = training.train_step(loss_fn, opt)(raw, opt.init(raw), xt, yt)
    want_loss, g = ember.value_and_grad(loss_fn)(raw, xt, yt)
    want, want_state = opt.update(raw, g, opt.init(raw))
    assert not any(isinstance(a, ember.Tensor) for a in tree.leaves(new))  # NumPy's own types
    assert type(new["scale"]) is np.ndarray and new["scale"].shape == ()  # 0-d stays an array
    assert type(state["params"]["scale"]["momentum"]) is np.ndarray
    assert float(loss) == float(want_loss)
    _assert_same(new, want)
    _assert_same(state, want_state)
    _assert_same(raw, kept)  # the caller's arrays are untouched


def test_train_step_with_any_optimizer_of_the_protocol():
    class Halve:  # an ember.optim.Optimizer that is not a PathOptimizer
        def init(self, params):
            return {"step": 0}

        def update(self, params, grads, state):
            return tree.map(lambda p, g: p - 0.5 * g, params, grads), {"step": state["step"] + 1}

    params = {"w": xp.asarray([1.0, 2.0])}
    loss, new, state = training.train_step(lambda p: xp.sum(p["w"] ** 2), Halve())(params, {"step": 0})
    assert float(loss.raw) == 5.0 and new["w"].raw.tolist() == [0.0, 0.0] and state == {"step": 1}


def test_train_step_calls_an_overridden_update():
    class Logged(optim.SGD):  # a subclass that changes update: train_step must go through it
        calls = 0

        def update(self, params, grads, state):
            Logged.calls += 1
            return super().update(params, grads, state)

    params = {"w": xp.asarray([1.0, 2.0])}
    opt = Logged(0.5)
    _, new, _ = training.train_step(lambda p: xp.sum(p["w"] ** 2), opt)(params, opt.init(params))
    assert Logged.calls == 1 and new["w"].raw.tolist() == [0.0, 0.0]


def test_train_step_one_tensor_and_errors():
    opt = optim.SGD(0.25)
    w = xp.asarray([2.0, 4.0])
    loss, new, _ = training.train_step(lambda w: xp.sum(w * w), opt)(w, opt.init(w))
    assert new.raw.tolist() == [1.0, 2.0] and w.raw.tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="train_step: checkpointing must be one of"):
        training.train_step(lambda w: xp.sum(w), opt, checkpointing="sometimes")
    with pytest.raises(TypeError, match=r"train_step\(<lambda>, has_aux=True\): the function must "
                                        r"return a pair"):
        training.train_step(lambda w: xp.sum(w), opt, has_aux=True)(w, opt.init(w))
    with pytest.raises(ember.NotDifferentiableError, match="needs a scalar"):
        training.train_step(lambda w: w * 2.0, opt)(w, opt.init(w))


@pytest.mark.parametrize("checkpointing", ["balanced", "segments"])
def test_train_step_with_checkpointing(checkpointing):
    raw, x, y = _problem("float64")
    params = tree.map(xp.asarray, raw)
    opt = optim.SGD(0.1)
    xt, yt = xp.asarray(x), xp.asarray(y)
    loss, new, _ = training.train_step(loss_fn, opt, checkpointing=checkpointing)(params, opt.init(params), xt, yt)
    want_loss, g = ember.value_and_grad(loss_fn)(params, xt, yt)
    want, _ = opt.update(params, g, opt.init(params))
    np.testing.assert_allclose(float(loss.raw), float(want_loss.raw), rtol=1e-15)
    tree.map(lambda a, b: np.testing.assert_allclose(a.raw, b.raw, rtol=1e-12, atol=1e-15), new, want)


@pytest.mark.parametrize("backend", ["dask", "array_api_strict"])
def test_train_step_on_backends_that_do_not_write_in_place(backend):
    pytest.importorskip("dask" if backend == "dask" else "array_api_strict")
    import importlib

    bx = importlib.import_module(f"ember.autodiff.{backend}")
    opt = optim.SGD(0.1, momentum=0.9)
    params = {"w": bx.asarray(np.arange(6.0).reshape(2, 3))}
    step = training.train_step(lambda p: bx.sum(p["w"] * p["w"]), opt)
    _, new, state = step(params, opt.init(params))
    _, new, state = step(new, state)
    w = np.arange(6.0).reshape(2, 3)
    b = 2 * w
    w1 = w - 0.1 * b
    b = 0.9 * b + 2 * w1
    np.testing.assert_allclose(np.asarray(ember.compute(new["w"]).raw), w1 - 0.1 * b, rtol=1e-15)
