"""ember.optim: optimizers vs torch.optim, policies, groups, freezing, surgery, growing models."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
import ember.optim as optim
import ember.tree as tree
from ember._errors import DTypeError, ShapeError, StructureError
from ember.optim import Group, schedules
from ember.optim import groups as groups_mod
from ember.optim import policies, surgery

# ---------------------------------------------------------------- problem
rng = np.random.default_rng(0)
X = rng.standard_normal((16, 4)).astype(np.float32)
Y = rng.standard_normal((16, 3)).astype(np.float32)
W0 = (0.5 * rng.standard_normal((4, 3))).astype(np.float32)
B0 = np.full(3, 0.1, np.float32)
N_STEPS = 100


def make_params():
    return {"layer": {"weight": W0.copy(), "bias": B0.copy()}, "meta": {"count": np.arange(3)}}


def np_grads(params):
    """Exact float32 gradient of mean((tanh(X @ w + b) - Y) ** 2), computed in NumPy."""
    w, b = params["layer"]["weight"], params["layer"]["bias"]
    h = np.tanh(X @ w + b)
    dz = (2.0 / h.size) * (h - Y) * (1 - h * h)
    return {"layer": {"weight": (X.T @ dz).astype(np.float32), "bias": dz.sum(0).astype(np.float32)}}


def run_ember(opt, steps=N_STEPS, params=None, grads_fn=np_grads):
    params = make_params() if params is None else params
    state = opt.init(params)
    for _ in range(steps):
        params, state = opt.update(params, grads_fn(params), state)
    return params, state


# --------------------------------------------------------------- torch runs
def run_torch(make_opt, steps=N_STEPS, clip=None, groups=None, lion=None, schedule=None):
    torch = pytest.importorskip("torch")
    w = torch.tensor(W0.copy(), requires_grad=True)
    b = torch.tensor(B0.copy(), requires_grad=True)
    if groups is not None:
        opt = make_opt(groups(w, b))
    elif make_opt is not None:
        opt = make_opt([w, b])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule) if schedule is not None else None
    m = [torch.zeros_like(w), torch.zeros_like(b)]
    for _ in range(steps):
        # the same gradient as np_grads (NumPy), so only the optimizers are compared
        g = np_grads({"layer": {"weight": w.detach().numpy(), "bias": b.detach().numpy()}})
        w.grad = torch.from_numpy(g["layer"]["weight"])
        b.grad = torch.from_numpy(g["layer"]["bias"])
        if clip is not None:
            torch.nn.utils.clip_grad_norm_([w, b], clip, foreach=False)
        if lion is not None:
            lion(w, b, m)
        else:
            opt.step()
        if sched is not None:
            sched.step()
    return w.detach().numpy(), b.detach().numpy()


def lion_reference(lr, betas, wd):
    """Lion as in Chen et al. 2023 (Algorithm 2), written with torch ops."""
    import torch

    b1, b2 = betas

    def step(w, b, m):
        with torch.no_grad():
            for i, p in enumerate((w, b)):
                c = m[i] * b1 + (1 - b1) * p.grad
                p.mul_(1 - lr * wd)
                p.sub_(lr * torch.sign(c))
                m[i] = m[i] * b2 + (1 - b2) * p.grad

    return step


def assert_close(ember_params, torch_wb, tol=1e-6):
    np.testing.assert_allclose(ember_params["layer"]["weight"], torch_wb[0], rtol=tol, atol=tol)
    np.testing.assert_allclose(ember_params["layer"]["bias"], torch_wb[1], rtol=tol, atol=tol)


CASES = [
    ("sgd", lambda: optim.SGD(0.1), lambda t, p: t.optim.SGD(p, lr=0.1, foreach=False)),
    ("sgd_momentum_wd", lambda: optim.SGD(0.05, momentum=0.9, weight_decay=0.01, dampening=0.1),
     lambda t, p: t.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01, dampening=0.1, foreach=False)),
    ("sgd_nesterov", lambda: optim.SGD(0.05, momentum=0.9, nesterov=True),
     lambda t, p: t.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, foreach=False)),
    ("adam", lambda: optim.Adam(0.01), lambda t, p: t.optim.Adam(p, lr=0.01, foreach=False)),
    ("adam_wd_amsgrad", lambda: optim.Adam(0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True),
     lambda t, p: t.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True, foreach=False)),
    ("adamw", lambda: optim.AdamW(0.01, weight_decay=0.1),
     lambda t, p: t.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=False)),
    ("rmsprop", lambda: optim.RMSprop(0.01), lambda t, p: t.optim.RMSprop(p, lr=0.01, foreach=False)),
    ("rmsprop_centered_momentum", lambda: optim.RMSprop(0.005, centered=True, momentum=0.9, weight_decay=0.01),
     lambda t, p: t.optim.RMSprop(p, lr=0.005, centered=True, momentum=0.9, weight_decay=0.01, foreach=False)),
    ("adagrad", lambda: optim.Adagrad(0.1), lambda t, p: t.optim.Adagrad(p, lr=0.1, foreach=False)),
    ("adagrad_options", lambda: optim.Adagrad(0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1),
     lambda t, p: t.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1,
                                  foreach=False)),
]


@pytest.mark.parametrize("name,make,make_torch", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, make, make_torch):
    torch = pytest.importorskip("torch")
    params, state = run_ember(make())
    assert_close(params, run_torch(lambda p: make_torch(torch, p)))
    assert state["step"] == N_STEPS
    assert all(s["step"] == N_STEPS for s in state["params"].values())
    # integer leaves are not parameters: untouched, no state
    assert params["meta"]["count"].tolist() == [0, 1, 2]
    assert sorted(state["params"]) == ["layer.bias", "layer.weight"]


@pytest.mark.parametrize("betas,wd", [((0.9, 0.99), 0.0), ((0.95, 0.98), 0.1)])
def test_lion_matches_reference(betas, wd):
    pytest.importorskip("torch")
    params, _ = run_ember(optim.Lion(1e-3, betas=betas, weight_decay=wd))
    assert_close(params, run_torch(None, lion=lion_reference(1e-3, betas, wd)))


def test_clip_norm_matches_torch():
    torch = pytest.importorskip("torch")
    params, _ = run_ember(optim.SGD(0.5, momentum=0.5, clip_norm=0.05))
    assert_close(params, run_torch(lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.5, foreach=False), clip=0.05))


def test_groups_match_torch_param_groups():
    torch = pytest.importorskip("torch")
    groups = [Group("*.bias", weight_decay=0.0, lr_scale=0.1, name="bias"), Group(name="rest")]
    params, _ = run_ember(optim.AdamW(0.01, weight_decay=0.1, groups=groups))
    ref = run_torch(
        lambda g: torch.optim.AdamW(g, lr=0.01, weight_decay=0.1, foreach=False),
        groups=lambda w, b: [{"params": [w]}, {"params": [b], "weight_decay": 0.0, "lr": 0.001}],
    )
    assert_close(params, ref)


def test_schedule_matches_torch_lambda_lr():
    torch = pytest.importorskip("torch")
    sched = schedules.linear_warmup(schedules.cosine(0.1, total_steps=80, min_lr=0.01), warmup_steps=20)
    params, _ = run_ember(optim.SGD(sched, momentum=0.9))
    ref = run_torch(lambda p: torch.optim.SGD(p, lr=1.0, momentum=0.9, foreach=False), schedule=sched)
    assert_close(params, ref)


# ------------------------------------------------------------ backends
OPTIMIZERS = {
    "sgd": lambda: optim.SGD(0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda: optim.Adam(0.01, amsgrad=True, weight_decay=0.01),
    "adamw": lambda: optim.AdamW(0.01),
    "rmsprop": lambda: optim.RMSprop(0.01, centered=True, momentum=0.5),
    "adagrad": lambda: optim.Adagrad(0.1, initial_accumulator_value=0.1),
    "lion": lambda: optim.Lion(1e-3, weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_array_api_strict_matches_numpy(name):
    xps = pytest.importorskip("array_api_strict")
    to = lambda t: tree.map(lambda a: xps.asarray(a), t)  # noqa: E731
    back = lambda t: tree.map(lambda a: np.asarray(a), t)  # noqa: E731
    ref, _ = run_ember(OPTIMIZERS[name](), steps=10)
    params, state = run_ember(OPTIMIZERS[name](), steps=10, params=to(make_params()),
                              grads_fn=lambda p: to(np_grads(back(p))))
    for leaf in tree.leaves(state["params"]):
        assert type(leaf) is type(params["layer"]["weight"])  # state on the parameter's backend
    np.testing.assert_allclose(back(params)["layer"]["weight"], ref["layer"]["weight"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_raw_zero_d_parameters_stay_arrays(name, dtype):
    # NumPy arithmetic on 0-d arrays gives scalars (numpy.float64); params and slots stay
    # 0-d arrays of the parameter's dtype, with the values of the same step on shape (1,)
    opt = OPTIMIZERS[name]()
    p0 = {"s": np.asarray(0.5, dtype=dtype), "v": np.asarray([0.5], dtype=dtype)}
    params, state = p0, opt.init(p0)
    for k in range(3):
        g = np.asarray(0.25 * (k + 1), dtype=dtype)
        params, state = opt.update(params, {"s": g, "v": g.reshape(1)}, state)
    for leaf in (params["s"], *(v for n, v in state["params"]["s"].items() if n != "step")):
        assert type(leaf) is np.ndarray and leaf.shape == () and leaf.dtype == dtype
    for n, v in state["params"]["s"].items():
        np.testing.assert_array_equal(np.reshape(v, (1,)), state["params"]["v"][n])
    np.testing.assert_array_equal(params["s"].reshape(1), params["v"])


def test_ember_tensors_and_ember_grad():
    xp = pytest.importorskip("ember.autodiff.numpy")

    def loss(p):
        h = xp.tanh(xp.asarray(X) @ p["w"] + p["b"])
        return xp.mean((h - xp.asarray(Y)) ** 2)

    params = {"w": xp.asarray(W0), "b": xp.asarray(B0)}
    opt = optim.Stateful(optim.Adam(0.05), params)
    first = float(loss(params).raw)
    for _ in range(30):
        params = opt.step(params, ember.grad(loss)(params))
    assert isinstance(params["w"], ember.Tensor)
    assert isinstance(opt.state["params"]["w"]["m"], ember.Tensor)
    assert float(loss(params).raw) < 0.8 * first


def _fresh_grads(xp, shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    return {k: xp.asarray(rng.standard_normal(n).astype(dtype)) * 1.0 for k, n in shapes.items()}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("wd", [0.0, 0.01])
@pytest.mark.parametrize("momentum,dampening", [(0.0, 0.0), (0.9, 0.0), (0.9, 0.3)])
def test_sgd_writes_new_params_into_consumed_grads(dtype, wd, momentum, dampening):
    # update(params, consume(grads)): the same bits as the plain update, the new parameters
    # (with momentum: the new momentum buffers) in the gradients' buffers, the consumed
    # gradients dead, and the state the caller keeps unchanged
    xp = pytest.importorskip("ember.autodiff.numpy")
    shapes = {"w": (3, 4), "b": (4,), "s": ()}
    opt = optim.SGD(0.1, momentum=momentum, dampening=dampening, weight_decay=wd)
    params = {k: xp.asarray(v, copy=True) for k, v in _fresh_grads(xp, shapes, dtype, 0).items()}
    state = want_state = opt.init(params)
    want = params
    for step in range(3):
        grads = _fresh_grads(xp, shapes, dtype, step + 1)
        want, want_state = opt.update(want, grads, want_state)
        grads = _fresh_grads(xp, shapes, dtype, step + 1)
        buffers = {k: g.raw.__array_interface__["data"][0] for k, g in grads.items()}
        old = state
        kept = tree.map(lambda a: np.array(a.raw, copy=True) if hasattr(a, "raw") else a, old)
        params, state = opt.update(params, ember.consume(grads), state)
        tree.map(lambda a, b: np.testing.assert_array_equal(getattr(a, "raw", a), b), old, kept)
        for k in shapes:
            assert params[k].raw.dtype == dtype
            np.testing.assert_array_equal(params[k].raw, want[k].raw)
            written = state["params"][k]["momentum"] if momentum else params[k]
            assert written.raw.__array_interface__["data"][0] == buffers[k]
            if momentum:
                np.testing.assert_array_equal(written.raw, want_state["params"][k]["momentum"].raw)
        assert state["step"] == step + 1 and all(s["step"] == step + 1 for s in state["params"].values())
        with pytest.raises(ember.ConsumedError, match="consumed at .*test_optim.py"):
            grads["w"] + 1.0


@pytest.mark.parametrize("backend", ["dask", "array_api_strict"])
def test_consumed_grads_on_backends_that_do_not_write_in_place(backend):
    # Dask (lazy) and array-api-strict (no out=) cannot write into a buffer: the update
    # reads the consumed gradients and gives the plain result
    pytest.importorskip("dask" if backend == "dask" else "array_api_strict")
    import importlib

    xp = importlib.import_module(f"ember.autodiff.{backend}")
    opt = optim.SGD(0.1, momentum=0.9)
    p0 = np.arange(6.0).reshape(2, 3)

    def grads(seed):
        return {"w": xp.asarray(np.random.default_rng(seed).standard_normal((2, 3))) * 1.0}

    params = want = {"w": xp.asarray(p0)}
    state = want_state = opt.init(params)
    for step in range(2):
        want, want_state = opt.update(want, grads(step), want_state)
        params, state = opt.update(params, ember.consume(grads(step)), state)
    np.testing.assert_array_equal(np.asarray(ember.compute(params["w"]).raw),
                                  np.asarray(ember.compute(want["w"]).raw))
    np.testing.assert_array_equal(p0, np.arange(6.0).reshape(2, 3))


def test_consumed_grads_update_allocates_no_parameter_buffer():
    # the point of consuming: no new parameter-sized buffer (NumPy reports to tracemalloc)
    import tracemalloc

    xp = pytest.importorskip("ember.autodiff.numpy")
    opt = optim.SGD(0.1)
    params = {"w": xp.asarray(np.ones((512, 512)), copy=True)}  # 2 MiB
    state = opt.init(params)
    for consumed, most in ((False, 2 << 20), (True, 64 << 10)):
        grads = {"w": xp.ones((512, 512)) * 0.5}
        tracemalloc.start()
        try:
            params, state = opt.update(params, ember.consume(grads) if consumed else grads, state)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (peak < most) if consumed else (peak >= most), (consumed, peak)


def test_consumed_grads_that_cannot_be_written_fall_back_safely():
    xp = pytest.importorskip("ember.autodiff.numpy")
    src = np.full(3, 2.0)
    params = {"a": xp.asarray(np.ones(3), copy=True), "b": xp.asarray(np.ones(3), copy=True),
              "c": xp.asarray(np.ones(3), copy=True)}
    grads = {"a": xp.asarray(src), "b": xp.ones(3) * 2.0, "c": xp.ones(3) * 2.0}  # a: borrowed
    handle = grads["b"].share()  # b: a second handle sees the buffer
    opt = optim.SGD(0.5)
    new, _ = opt.update(params, ember.consume(grads), opt.init(params))
    for k in "abc":
        np.testing.assert_array_equal(new[k].raw, np.zeros(3))
    np.testing.assert_array_equal(src, np.full(3, 2.0))  # the caller's array is untouched
    np.testing.assert_array_equal(handle.raw, np.full(3, 2.0))
    # one cotangent array for two leaves (backward hands an add's g to both): written once
    both = {"a": xp.asarray(np.ones(3), copy=True), "b": xp.asarray(np.full(3, 2.0), copy=True)}
    _, g = ember.value_and_grad(lambda p: xp.sum(p["a"] + p["b"]))(both)
    assert g["a"].raw is g["b"].raw
    new, _ = opt.update(both, ember.consume(g), opt.init(both))
    assert new["a"].raw.tolist() == [0.5] * 3 and new["b"].raw.tolist() == [1.5] * 3
    grads = {"b": xp.ones(3) * 2.0}
    keep = grads["b"].share()
    with pytest.raises(ember.ReuseError, match=r"SGD.update: could not reuse .*other reference"):
        opt.update({"b": params["b"]}, ember.consume(grads, strict=True), opt.init({"b": params["b"]}))
    del keep


@pytest.mark.parametrize("make", [
    lambda: optim.SGD(0.1, momentum=0.9, nesterov=True), lambda: optim.Adam(0.1),
    lambda: optim.SGD(0.1, clip_norm=0.5),
])
def test_consumed_grads_give_the_plain_update_for_every_optimizer(make):
    # optimizers without an in-place form (Nesterov reads g after the new buffer) read them as
    # values;
    # a state the caller keeps is never written
    xp = pytest.importorskip("ember.autodiff.numpy")
    shapes = {"w": (2, 3), "b": (3,)}
    opt = make()
    params = {k: xp.asarray(v, copy=True) for k, v in _fresh_grads(xp, shapes, "float64", 0).items()}
    state = old = opt.init(params)
    want, want_state = params, state
    for step in range(3):
        want, want_state = opt.update(want, _fresh_grads(xp, shapes, "float64", step + 1), want_state)
        kept = tree.map(lambda a: np.array(a.raw, copy=True) if hasattr(a, "raw") else a, state)
        old = state
        params, state = opt.update(params, ember.consume(_fresh_grads(xp, shapes, "float64", step + 1)), state)
        tree.map(lambda a, b: np.testing.assert_array_equal(getattr(a, "raw", a), b), old, kept)
        for k in shapes:
            np.testing.assert_allclose(params[k].raw, want[k].raw, rtol=1e-15)


def test_dask_state_stays_lazy_and_matches_numpy():
    da = pytest.importorskip("dask.array")
    to = lambda t: tree.map(lambda a: da.from_array(a, chunks=2), t)  # noqa: E731
    ref, _ = run_ember(optim.Adam(0.01), steps=3)
    params, state = run_ember(optim.Adam(0.01), steps=3, params=to(make_params()),
                              grads_fn=lambda p: to(np_grads(tree.map(np.asarray, p))))
    assert isinstance(state["params"]["layer.weight"]["v"], da.Array)
    np.testing.assert_allclose(np.asarray(params["layer"]["weight"]), ref["layer"]["weight"], rtol=1e-6)


# ------------------------------------------------------------ structures
@tree.register
@dataclasses.dataclass
class Dense:
    weight: object
    bias: object


def mlp(n_layers):
    r = np.random.default_rng(1)
    return {"layers": [Dense(r.standard_normal((3, 3)).astype(np.float32), np.zeros(3, np.float32))
                       for _ in range(n_layers)]}


def ones_like_tree(p):
    return tree.map(lambda a: np.ones_like(a), p)


def test_state_keys_are_paths_and_dataclasses_work():
    opt = optim.Adam(0.1)
    params = mlp(2)
    params2, state = opt.update(params, ones_like_tree(params), opt.init(params))
    assert isinstance(params2["layers"][1], Dense)
    assert sorted(state["params"]) == ["layers.0.bias", "layers.0.weight", "layers.1.bias", "layers.1.weight"]
    assert set(state["params"]["layers.0.weight"]) == {"step", "m", "v"}
    # inputs not mutated
    assert np.array_equal(params["layers"][0].bias, np.zeros(3, np.float32))


def test_growing_model_continues_under_on_new_init():
    opt = optim.Adam(0.1, on_new="init")
    params = mlp(1)
    state = opt.init(params)
    for _ in range(3):
        params, state = opt.update(params, ones_like_tree(params), state)
    params["layers"].append(mlp(2)["layers"][1])
    params, state = opt.update(params, ones_like_tree(params), state)
    assert state["params"]["layers.0.weight"]["step"] == 4
    assert state["params"]["layers.1.weight"]["step"] == 1
    # the new layer got a first Adam step (bias-corrected: about -lr), not a garbled one
    np.testing.assert_allclose(params["layers"][1].bias, -0.1 * np.ones(3), rtol=1e-5)


def test_growing_model_on_new_error_names_new_paths():
    opt = optim.SGD(0.1, momentum=0.9, on_new="error")
    params = mlp(1)
    state = opt.init(params)
    params["layers"].append(mlp(2)["layers"][1])
    with pytest.raises(StructureError) as e:
        opt.update(params, ones_like_tree(params), state)
    msg = str(e.value)
    assert "layers.1.weight" in msg and "layers.1.bias" in msg and "layers.0" not in msg
    assert "on_new='init'" in msg


def test_on_missing_policies():
    params = mlp(2)
    small = {"layers": params["layers"][:1]}
    for policy, expect in [("keep", 4), ("drop", 2)]:
        opt = optim.Adam(0.1, on_missing=policy)
        state = opt.init(params)
        _, state = opt.update(small, ones_like_tree(small), state)
        assert len(state["params"]) == expect
    opt = optim.Adam(0.1, on_missing="error")
    with pytest.raises(StructureError) as e:
        opt.update(small, ones_like_tree(small), opt.init(params))
    assert "layers.1.weight" in str(e.value) and "layers.1.bias" in str(e.value)


def test_kept_state_applies_when_path_comes_back():
    opt = optim.SGD(0.1, momentum=0.9, on_missing="keep")
    params = mlp(2)
    state = opt.init(params)
    params, state = opt.update(params, ones_like_tree(params), state)
    small = {"layers": params["layers"][:1]}
    _, state = opt.update(small, ones_like_tree(small), state)
    assert state["params"]["layers.1.bias"]["step"] == 1  # kept, untouched
    _, state = opt.update(params, ones_like_tree(params), state)
    assert state["params"]["layers.1.bias"]["step"] == 2


def test_all_policy_errors_reported_together():
    opt = optim.Adam(0.1, on_new="error", on_missing="error")
    state = opt.init({"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)})
    params = {"a": np.zeros(3, np.float32), "c": np.zeros(2, np.float32)}
    with pytest.raises(StructureError) as e:
        opt.update(params, ones_like_tree(params), state)
    msg = str(e.value)
    assert "1." in msg and "2." in msg and "3." in msg
    assert "'c'" in msg and "'b'" in msg and "a (m has shape (2,), parameter (3,))" in msg


def test_shape_change_reinitialises_under_init():
    opt = optim.Adam(0.1, on_new="init")
    state = opt.init({"a": np.zeros(2, np.float32)})
    params = {"a": np.zeros(3, np.float32)}
    _, state = opt.update(params, ones_like_tree(params), state)
    assert state["params"]["a"]["m"].shape == (3,) and state["params"]["a"]["step"] == 1


def test_bad_policy_names():
    with pytest.raises(ValueError, match="on_new='create' is not a policy"):
        optim.Adam(on_new="create")
    with pytest.raises(ValueError, match="on_missing"):
        optim.SGD(on_missing="ignore")


def test_freeze_no_update_no_state():
    params = mlp(2)
    opt = optim.Adam(0.1, freeze="layers.0.*")
    state = opt.init(params)
    assert sorted(state["params"]) == ["layers.1.bias", "layers.1.weight"]
    new, state = opt.update(params, ones_like_tree(params), state)
    assert new["layers"][0].weight is params["layers"][0].weight
    assert not np.array_equal(new["layers"][1].weight, params["layers"][1].weight)
    # grads for frozen parameters are not needed
    grads = {"layers": [None, ones_like_tree(params["layers"][1])]}
    opt.update(params, grads, state)


def test_freezing_later_follows_on_missing():
    params = mlp(1)
    state = optim.Adam(0.1).init(params)
    with pytest.raises(StructureError, match="frozen"):
        optim.Adam(0.1, freeze="*.bias", on_missing="error").update(params, ones_like_tree(params), state)
    _, st2 = optim.Adam(0.1, freeze="*.bias", on_missing="drop").update(params, ones_like_tree(params), state)
    assert sorted(st2["params"]) == ["layers.0.weight"]


def test_missing_and_misshaped_grads():
    params = mlp(1)
    opt = optim.SGD(0.1)
    with pytest.raises(StructureError) as e:
        opt.update(params, {"layers": [None]}, opt.init(params))
    assert "layers.0.weight" in str(e.value) and "layers.0.bias" in str(e.value)
    bad = ones_like_tree(params)
    bad["layers"][0].bias = np.ones((1,), np.float32)
    with pytest.raises(ShapeError, match=r"layers.0.bias has shape \(1,\)"):
        opt.update(params, bad, opt.init(params))


def test_complex_parameters_rejected_unless_frozen():
    params = {"z": np.zeros(2, np.complex64), "w": np.zeros(2, np.float32)}
    with pytest.raises(DTypeError, match="'z'"):
        optim.SGD(0.1).init(params)
    assert sorted(optim.SGD(0.1, freeze="z").init(params)["params"]) == ["w"]


def test_bad_state_layout():
    with pytest.raises(StructureError, match="'step' is -1"):
        optim.SGD(0.1).update({"a": np.zeros(1)}, {"a": np.zeros(1)}, {"step": -1, "params": {}})
    with pytest.raises(StructureError, match="as made by opt.init"):
        optim.SGD(0.1).update({"a": np.zeros(1)}, {"a": np.zeros(1)}, {"params": {}})


# ---------------------------------------------------------------- groups
def test_groups_exactly_one_error_lists_offenders():
    params = {"encoder": {"w": np.ones(2), "bias": np.ones(2)}, "head": {"w": np.ones(2), "norm": np.ones(2)}}
    groups = [Group("encoder.*", name="enc"), Group(["*.bias", "*norm*"], name="nd", weight_decay=0.0)]
    with pytest.raises(StructureError) as e:
        optim.AdamW(groups=groups).init(params)
    msg = str(e.value)
    assert "in no group: ['head.w']" in msg
    assert "encoder.bias (in enc, nd)" in msg
    assert "head.norm" not in msg


def test_groups_with_exclude_and_rest():
    no_decay = ["*.bias", "*norm*"]
    groups = [
        Group("encoder.*", exclude=no_decay, lr_scale=0.1, name="encoder"),
        Group(no_decay, exclude="encoder.*", weight_decay=0.0, name="no_decay"),
        Group(["encoder.*bias", "encoder.*norm*"], lr_scale=0.1, weight_decay=0.0, name="encoder_no_decay"),
        Group(name="rest"),
    ]
    params = {"encoder": {"w": np.ones(2), "bias": np.ones(2), "layernorm": {"scale": np.ones(2)}},
              "head": {"w": np.ones(2), "bias": np.ones(2)}}
    assert optim.assign_groups(groups, params) == {
        "encoder.bias": "encoder_no_decay", "encoder.layernorm.scale": "encoder_no_decay",
        "encoder.w": "encoder", "head.bias": "no_decay", "head.w": "rest",
    }
    opt = optim.SGD(1.0, weight_decay=1.0, groups=groups)
    new, _ = opt.update(params, tree.map(np.zeros_like, params), opt.init(params))
    # only weight decay acts (zero grads): w - lr * scale * wd * w
    assert new["encoder"]["w"].tolist() == [0.9, 0.9]
    assert new["encoder"]["bias"].tolist() == [1.0, 1.0]
    assert new["head"]["bias"].tolist() == [1.0, 1.0]
    assert new["head"]["w"].tolist() == [0.0, 0.0]


def test_group_errors():
    with pytest.raises(TypeError, match="unknown hyperparameter"):
        optim.SGD(groups=[Group(name="rest", betas=(0.9, 0.9))])
    with pytest.raises(StructureError, match="both take the rest"):
        optim.SGD(groups=[Group(), Group(name="x")]).init({"a": np.ones(1)})
    with pytest.raises(ValueError, match="lr_scale"):
        Group("*", lr_scale=-1)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD(0.1, momentum=0.9, nesterov=True, groups=[Group(name="r", momentum=0.0)])


def test_group_momentum_override_changes_slots():
    opt = optim.SGD(0.1, momentum=0.9, groups=[Group("*.bias", momentum=0.0), Group()])
    state = opt.init(mlp(1))
    assert set(state["params"]["layers.0.bias"]) == {"step"}
    assert set(state["params"]["layers.0.weight"]) == {"step", "momentum"}


# --------------------------------------------------------------- surgery
def trained_state():
    params = {"encoder": {"w": np.ones(2, np.float32), "b": np.ones(1, np.float32)},
              "encoder2": {"w": np.ones(2, np.float32)}, "head": {"w": np.ones(3, np.float32)}}
    opt = optim.Adam(0.1)
    _, state = opt.update(params, ones_like_tree(params), opt.init(params))
    return params, opt, state


def test_reset_equals_fresh_init():
    params, opt, state = trained_state()
    new = optim.reset(state, "encoder.*")
    fresh = opt.init(params)["params"]
    for path in ("encoder.w", "encoder.b"):
        assert new["params"][path]["step"] == 0
        assert np.array_equal(new["params"][path]["m"], fresh[path]["m"])
    assert new["params"]["head.w"] is state["params"]["head.w"]
    assert state["params"]["encoder.w"]["step"] == 1  # not mutated
    assert new["step"] == 1


def test_reset_adagrad_is_exact_with_initial_accumulator():
    params = {"w": np.array([1.0, 2.0], np.float32)}
    opt = optim.Adagrad(0.1, initial_accumulator_value=0.5)
    g = {"w": np.array([0.3, -0.2], np.float32)}
    p1, s1 = opt.update(params, g, opt.init(params))
    _, s = opt.update(params, g, opt.init(params))
    p2, _ = opt.update(params, g, optim.reset(s, "w"))
    assert np.array_equal(p1["w"], p2["w"])


def test_select_and_drop():
    _, _, state = trained_state()
    assert sorted(optim.select(state, ["head.*", "*.b"])["params"]) == ["encoder.b", "head.w"]
    assert sorted(optim.drop(state, "encoder*")["params"]) == ["head.w"]
    with pytest.raises(StructureError, match="matches no path"):
        optim.drop(state, "decoder.*")
    assert optim.drop(state, "decoder.*", missing_ok=True)["params"] == state["params"]


def test_rename_prefix_is_key_aware():
    _, _, state = trained_state()
    new = optim.rename(state, "encoder", "backbone.encoder")
    assert sorted(new["params"]) == ["backbone.encoder.b", "backbone.encoder.w", "encoder2.w", "head.w"]
    assert new["params"]["backbone.encoder.w"] is state["params"]["encoder.w"]


def test_rename_pattern_and_collisions():
    _, _, state = trained_state()
    new = optim.rename(state, "encoder*.w", "backbone.encoder*.weight")
    assert sorted(new["params"]) == ["backbone.encoder.weight", "backbone.encoder2.weight", "encoder.b", "head.w"]
    with pytest.raises(StructureError, match="encoder.w -> head.w, which already has state"):
        optim.rename(state, "encoder.w", "head.w")
    two = {"step": 0, "params": {"a.bc": {"step": 0}, "ab.c": {"step": 0}}}
    with pytest.raises(StructureError, match="a.bc and ab.c -> abc"):
        optim.rename(two, "*.*", "**")
    with pytest.raises(ValueError, match="counts must be equal"):
        optim.rename(state, "encoder*.w", "x.*.*")


def test_refactor_keeps_state_through_rename():
    """Moving encoder.* under backbone.* continues exactly as without the refactor."""
    params, opt, state = trained_state()
    g = ones_like_tree(params)
    ref, _ = opt.update(params, g, state)
    moved = {"backbone": {"encoder": params["encoder"]}, "encoder2": params["encoder2"], "head": params["head"]}
    opt_strict = optim.Adam(0.1, on_new="error", on_missing="error")
    out, _ = opt_strict.update(moved, ones_like_tree(moved), optim.rename(state, "encoder", "backbone.encoder"))
    assert np.array_equal(out["backbone"]["encoder"]["w"], ref["encoder"]["w"])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "enc", "x1"]), min_size=1, max_size=3, unique=True))
def test_select_then_drop_partition(names):
    _, _, state = trained_state()
    pats = [f"{n}*" for n in names]
    kept = set(optim.select(state, pats, missing_ok=True)["params"])
    rest = set(optim.drop(state, pats, missing_ok=True)["params"])
    assert kept | rest == set(state["params"]) and not kept & rest
    assert kept == {p for p in state["params"] if any(p.startswith(n) for n in names)}


# ------------------------------------------------------------- load_state
def test_load_state_reports_and_follows_policies():
    opt = optim.Adam(0.1)
    old_params = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32), "gone": np.zeros(1, np.float32)}
    state = opt.init(old_params)
    params = {"a": np.zeros(2, np.float32), "b": np.zeros(4, np.float32), "new": np.zeros(1, np.float32)}
    new, report = optim.load_state(opt, state, params)
    assert report.added == ("new",) and report.removed == ("gone",)
    assert list(report.changed) == ["b"] and "shape (2,)" in report.changed["b"]
    assert not report.clean
    text = str(report)
    assert "added (initialised): new" in text and "removed (kept): gone" in text and "changed" in text
    assert new["params"]["a"] is state["params"]["a"] and new["params"]["b"]["m"].shape == (4,)
    assert "gone" in new["params"]
    _, report = optim.load_state(opt, state, params, on_missing="drop")
    assert "removed (dropped): gone" in str(report)
    with pytest.raises(StructureError) as e:
        optim.load_state(opt, state, params, on_new="error")
    assert "'new'" in str(e.value) and "b (m has shape" in str(e.value)


def test_load_state_other_optimizer_state_is_changed():
    params = {"w": np.zeros(2, np.float32)}
    sgd_state = optim.SGD(0.1, momentum=0.9).init(params)
    with pytest.raises(StructureError, match=r"slots \['momentum'\] but the optimizer uses \['m', 'v'\]"):
        optim.load_state(optim.Adam(on_missing="error"), sgd_state, params)


def test_load_state_moves_arrays_to_parameter_backend():
    xp = pytest.importorskip("ember.autodiff.numpy")
    opt = optim.Adam(0.1)
    numpy_state = opt.init({"w": np.zeros(2, np.float32)})
    params = {"w": xp.zeros(2, dtype=xp.float32)}
    state, report = optim.load_state(opt, numpy_state, params)
    assert report.clean and isinstance(state["params"]["w"]["m"], ember.Tensor)


def test_load_state_rejects_bad_entries():
    with pytest.raises(StructureError, match="bad entries: w"):
        optim.load_state(optim.SGD(), {"step": 0, "params": {"w": {"step": "x"}}}, {"w": np.zeros(1)})


# ----------------------------------------------------- clip, schedules, stateful
def test_clip_by_global_norm():
    g = {"a": np.array([3.0, 0.0], np.float32), "b": np.array([4.0], np.float32), "i": np.arange(2)}
    clipped, norm = optim.clip_by_global_norm(g, 1.0)
    assert float(norm) == pytest.approx(5.0)
    assert float(optim.global_norm(clipped)) == pytest.approx(1.0, rel=1e-5)
    assert clipped["i"] is g["i"] and clipped["a"].dtype == np.float32
    same, _ = optim.clip_by_global_norm(g, 10.0)
    assert np.array_equal(same["a"], g["a"])
    with pytest.raises(ValueError, match="max_norm"):
        optim.clip_by_global_norm(g, 0.0)


def test_clip_nan_propagates():
    clipped, norm = optim.clip_by_global_norm({"a": np.array([np.nan, 1.0])}, 1.0)
    assert math.isnan(float(norm)) and np.isnan(clipped["a"]).all()


def test_schedules():
    assert schedules.constant(0.1)(1000) == 0.1
    s = schedules.step(1.0, step_size=10, gamma=0.5)
    assert [s(0), s(9), s(10), s(25)] == [1.0, 1.0, 0.5, 0.25]
    c = schedules.cosine(1.0, total_steps=100, min_lr=0.1)
    assert c(0) == 1.0 and c(50) == pytest.approx(0.55) and c(100) == 0.1 and c(500) == 0.1
    w = schedules.linear_warmup(0.4, warmup_steps=4)
    assert [w(t) for t in range(6)] == [0.1, 0.2, 0.30000000000000004, 0.4, 0.4, 0.4]
    with pytest.raises(ValueError, match="total_steps"):
        schedules.cosine(1.0, total_steps=0)
    with pytest.raises(ValueError, match="lr must be"):
        optim.SGD(-1.0)


def test_cosine_matches_torch_scheduler():
    torch = pytest.importorskip("torch")
    p = torch.zeros(1, requires_grad=True)
    o = torch.optim.SGD([p], lr=0.3)
    sch = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=20, eta_min=0.01)
    c = schedules.cosine(0.3, total_steps=20, min_lr=0.01)
    for t in range(20):
        assert o.param_groups[0]["lr"] == pytest.approx(c(t), abs=1e-9)
        o.step()
        sch.step()


def test_stateful_wrapper():
    params = mlp(1)
    opt = optim.Stateful(optim.SGD(0.1, momentum=0.9), params)
    ref_opt = optim.SGD(0.1, momentum=0.9)
    ref, ref_state = params, ref_opt.init(params)
    for _ in range(3):
        params = opt.step(params, ones_like_tree(params))
        ref, ref_state = ref_opt.update(ref, ones_like_tree(ref), ref_state)
    assert opt.step_count == 3 and np.array_equal(params["layers"][0].weight, ref["layers"][0].weight)
    opt.rename("layers.0", "blocks.0")
    assert sorted(opt.state["params"]) == ["blocks.0.bias", "blocks.0.weight"]
    report = opt.load(ref_state, {"layers": params["layers"] + mlp(2)["layers"][1:]})
    assert report.added == ("layers.1.bias", "layers.1.weight")
    opt.reset("layers.0.*")
    assert opt.state["params"]["layers.0.weight"]["step"] == 0
    assert "Stateful(SGD(lr=constant(value=0.1)" in repr(opt)


def test_protocol():
    assert isinstance(optim.Adam(), optim.Optimizer)
    assert groups_mod.GROUP_ERRORS and policies.NEW_PATHS and surgery.NO_MATCH


def test_patterns_agree_with_tree_filter():
    params = {"a": {"b": np.ones(1), "x y": np.ones(1)}, "l": [np.ones(1)], "d": {3: np.ones(1)}}
    from ember.optim._patterns import matcher

    for pat in ["a.*", "*", 'a["x y"]', "d[3]", "l.?", "*b*"]:
        m = matcher(pat)
        assert sorted(tree.filter(params, pat)) == sorted(str(p) for p in tree.paths(params) if m(str(p)))


@pytest.mark.parametrize("fused", [False, True])
def test_hyperparameters_changed_between_steps_take_effect(fused):
    """The update keeps its hyperparameters and kernels from step to step while the learning
    rate is a constant; a changed ``hparams`` entry is read again at the next step."""
    import ember.autodiff.numpy as xp

    opt = optim.SGD(0.5)
    params = {"w": xp.asarray([1.0, -2.0])}
    state = opt.init(params)
    loss = lambda p: xp.sum(p["w"] ** 2)  # noqa: E731 - gradient 2w
    step = ember.training.train_step(loss, opt) if fused else None

    def update(p, s):
        if fused:
            return step(p, s)[1:]
        return opt.update(p, ember.grad(loss)(p), s)

    params, state = update(params, state)
    np.testing.assert_allclose(params["w"].raw, [0.0, 0.0])  # w - 0.5 * 2w
    params = {"w": xp.asarray([1.0, -2.0])}
    opt.hparams["lr"] = optim.schedules.constant(0.25)
    params, state = update(params, state)
    np.testing.assert_allclose(params["w"].raw, [0.5, -1.0])  # w - 0.25 * 2w
    opt.hparams["weight_decay"] = 1.0
    params, state = update({"w": xp.asarray([1.0, -2.0])}, state)
    np.testing.assert_allclose(params["w"].raw, [0.25, -0.5])  # w - 0.25 * (2w + w)


@pytest.mark.parametrize("fused", [False, True])
def test_a_state_entry_without_step_is_reinitialised(fused):
    """An entry that does not fit its parameter (here: no "step") follows on_new="init", in
    update and in train_step, rather than failing on the missing key."""
    import ember.autodiff.numpy as xp

    opt = optim.SGD(0.5, on_new="init")
    params = {"w": xp.asarray([1.0, -2.0])}
    state = {"step": 3, "params": {"w": {"foo": 1}}}
    loss = lambda p: xp.sum(p["w"] ** 2)  # noqa: E731
    if fused:
        _, params, state = ember.training.train_step(loss, opt)(params, state)
    else:
        params, state = opt.update(params, ember.grad(loss)(params), state)
    np.testing.assert_allclose(params["w"].raw, [0.0, 0.0])
    assert state == {"step": 4, "params": {"w": {"step": 1}}}
