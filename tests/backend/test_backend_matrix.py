"""A representative slice of ember on every backend (the ``xp`` fixture, tests/conftest.py).

Each test runs once per backend (numpy, array_api_strict, dask; cupy with a
CUDA device; torch and jax when installed). Results are compared with a NumPy
reference computed on the host; values come back through ``ember.to_backend``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
import ember.autodiff.numpy as xnp
import ember.nn as nn
import ember.random as er
from ember import BackendError, NotDifferentiableError
from ember._transfer import BAD_TARGET, TRACKED_LEAF, to_backend

TOL = 1e-12


def host(x):
    """A NumPy array with the values of a Tensor or raw array of any backend."""
    return to_backend(x, "numpy").raw if isinstance(x, ember.Tensor) else to_backend(x, "numpy")


def close(a, b, tol=TOL):
    np.testing.assert_allclose(host(a), host(b), rtol=tol, atol=tol)


def backend_of(t) -> str:
    return type(t).__array_namespace__(t)._backend_name


_X = np.array([[0.5, -1.25, 2.0], [0.75, 1.5, -0.3]])


# --------------------------------------------------------------------------- #
# gradients: elementwise, reductions, matmul
# --------------------------------------------------------------------------- #
def test_elementwise_grad(xp):
    x = xp.asarray(_X, dtype=xp.float64)
    g = ember.grad(lambda x: xp.sum(xp.sin(x) * xp.exp(x) + x**2 / (1.0 + x * x)))(x)
    assert backend_of(g) == backend_of(x) and g.shape == x.shape
    want = np.cos(_X) * np.exp(_X) + np.sin(_X) * np.exp(_X) + 2 * _X / (1 + _X**2) ** 2
    close(g, want)


def test_reduction_grads(xp):
    x = xp.asarray(_X, dtype=xp.float64)

    def f(x):
        return xp.sum(xp.mean(x * x, axis=0)) + xp.max(x) + xp.sum(xp.prod(x, axis=1))

    g = ember.grad(f)(x)
    want = 2 * _X / _X.shape[0]
    want[np.unravel_index(np.argmax(_X), _X.shape)] += 1.0
    want += np.prod(_X, axis=1, keepdims=True) / _X
    close(g, want)


def test_matmul_grad(xp):
    a_np = _X
    b_np = np.arange(12.0).reshape(3, 4) / 7.0
    a, b = xp.asarray(a_np), xp.asarray(b_np)
    ga, gb = ember.grad(lambda a, b: xp.sum((a @ b) ** 2), argnums=(0, 1))(a, b)
    c = a_np @ b_np
    close(ga, 2 * c @ b_np.T)
    close(gb, 2 * a_np.T @ c)


def test_getitem_grad_scatter_adds(xp):
    x = xp.asarray([1.0, 2.0, 3.0])
    idx = xp.asarray([0, 2, 0])
    g = ember.grad(lambda x: xp.sum(x[idx] * x[idx]))(x)
    close(g, [4.0, 0.0, 6.0])


# --------------------------------------------------------------------------- #
# nn, optim, io
# --------------------------------------------------------------------------- #
def _mlp_np():
    return nn.MLP.init(er.key(0), 4, [8], 3, xp=xnp, dtype=xnp.float64)


def _batch(n=6):
    rng = np.random.default_rng(1)
    return rng.standard_normal((n, 4)), rng.integers(0, 3, n)


def _loss(model, x, y):
    return nn.cross_entropy(model(x), y)


def test_mlp_forward_and_grad_match_numpy(xp, backend):
    ref = _mlp_np()
    x_np, y_np = _batch()
    model = to_backend(ref, xp)
    x, y = xp.asarray(x_np), xp.asarray(y_np)
    assert backend_of(model.out.weight) == backend
    out = model(x)
    assert out.shape == (6, 3) and backend_of(out) == backend
    loss, grads = ember.value_and_grad(_loss)(model, x, y)
    rloss, rgrads = ember.value_and_grad(_loss)(ref, xnp.asarray(x_np), xnp.asarray(y_np))
    assert abs(float(loss) - float(rloss)) < TOL
    assert type(grads) is nn.MLP
    for (p, g), (rp, rg) in zip(grads.parameters(), rgrads.parameters()):
        assert str(p) == str(rp) and backend_of(g) == backend
        close(g, rg)


def test_optimizer_step_on_backend(xp, backend):
    optim = pytest.importorskip("ember.optim", reason="ember.optim is not importable yet")
    params_np = {"w": np.array([1.0, -2.0, 0.5]), "b": np.array([0.25])}
    grads_np = {"w": np.array([0.5, 0.5, -1.0]), "b": np.array([2.0])}
    opt = optim.Adam(0.1)
    ref, ref_state = params_np, opt.init(params_np)
    params = to_backend(ember.tree.map(xnp.asarray, params_np), xp)  # Tensors stay Tensors
    grads = to_backend(ember.tree.map(xnp.asarray, grads_np), xp)
    state = opt.init(params)
    for _ in range(3):
        params, state = opt.update(params, grads, state)
        ref, ref_state = opt.update(ref, grads_np, ref_state)
    assert backend_of(params["w"]) == backend
    for slot in state["params"]["w"].values():
        if hasattr(slot, "shape"):  # optimizer state lives on the parameter's backend
            assert backend_of(slot) == backend
    close(params["w"], ref["w"])
    close(params["b"], ref["b"])
    assert state["step"] == 3


def test_io_save_load_roundtrip_onto_backend(xp, backend, tmp_path):
    k1, k2 = er.split(er.key(2))
    ref = {  # layers only: a file holds no functions (MLP's activations)
        "l1": nn.Linear.init(k1, 4, 8, xp=xnp, dtype=xnp.float64),
        "l2": nn.Linear.init(k2, 8, 3, xp=xnp, dtype=xnp.float64),
        "step": 12,
    }
    path = tmp_path / "mlp.safetensors"
    import ember.io as eio

    eio.save(path, ref)
    like = to_backend(ref, xp)
    loaded = eio.load(path, like)
    assert type(loaded["l1"]) is nn.Linear and loaded["step"] == 12
    for (p, a), (_, b) in zip(ember.tree.flatten_with_path(loaded)[0], ember.tree.flatten_with_path(ref)[0]):
        assert backend_of(a) == backend, str(p)
        close(a, b, 0.0)
    # saving from the backend gives the same file contents back
    path2 = tmp_path / "mlp2.safetensors"
    eio.save(path2, loaded)
    again = eio.load(path2, ref)
    for a, b in zip(ember.tree.leaves(again), ember.tree.leaves(ref)):
        assert backend_of(a) == "numpy"
        close(a, b, 0.0)


# --------------------------------------------------------------------------- #
# to_backend: a trained model keeps its loss
# --------------------------------------------------------------------------- #
def _train_on_numpy(steps=5, lr=0.1):
    model = _mlp_np()
    x_np, y_np = _batch(16)
    x, y = xnp.asarray(x_np), xnp.asarray(y_np)
    for _ in range(steps):
        g = ember.grad(_loss)(model, x, y)
        model = ember.tree.map(lambda p, d: p - lr * d, model, g)
    return model, x_np, y_np


def test_trained_mlp_moved_keeps_its_loss(xp, backend):
    model, x_np, y_np = _train_on_numpy()
    want = float(_loss(model, xnp.asarray(x_np), xnp.asarray(y_np)))
    moved = to_backend(model, backend)
    x, y = to_backend((xnp.asarray(x_np), xnp.asarray(y_np)), backend)
    got = _loss(moved, x, y)
    assert backend_of(got) == backend
    assert abs(float(got) - want) <= TOL * max(1.0, abs(want))
    # and back: bit-identical parameters
    back = to_backend(moved, "numpy")
    for (_, a), (_, b) in zip(back.parameters(), model.parameters()):
        assert np.array_equal(a.raw, b.raw)


@pytest.mark.parametrize("target", ["dask", "array_api_strict"])
def test_acceptance_numpy_to_dask_and_strict(target):
    """Issue acceptance: NumPy-trained MLP, moved with to_backend, same loss to 1e-12."""
    model, x_np, y_np = _train_on_numpy()
    want = float(_loss(model, xnp.asarray(x_np), xnp.asarray(y_np)))
    ns = ember.autodiff.namespace(target)
    moved = to_backend(model, ns)
    got = float(_loss(moved, ns.asarray(x_np), ns.asarray(y_np)))
    assert abs(got - want) <= 1e-12


# --------------------------------------------------------------------------- #
# to_backend: leaves, constants, raw arrays, errors
# --------------------------------------------------------------------------- #
def test_to_backend_leaf_kinds(xp, backend):
    raw_np = np.arange(3.0)
    tree = {"t": xnp.asarray([1.0, 2.0]), "raw": raw_np, "n": 7, "s": "keep", "k": er.key(3), "none": None}
    out = to_backend(tree, backend)
    assert isinstance(out["t"], ember.Tensor) and backend_of(out["t"]) == backend
    assert not isinstance(out["raw"], ember.Tensor)
    import array_api_compat as compat

    assert ember.backend.name(compat.array_namespace(out["raw"])) == backend
    assert (out["n"], out["s"], out["k"], out["none"]) == (7, "keep", er.key(3), None)
    assert ember.tree.paths(out) == ember.tree.paths(tree)
    close(out["raw"], raw_np, 0.0)


def test_to_backend_copy_true_does_not_alias(xp):
    src = np.array([1.0, 2.0, 3.0])
    out = to_backend(src, xp, copy=True)
    src[0] = 100.0
    assert host(out)[0] == 1.0


@pytest.mark.skip_backend("numpy", reason="to_backend onto the source's own backend returns the same object")
def test_to_backend_shared_buffer_is_never_written(xp, backend):
    src = xnp.asarray([1.0, 2.0, 3.0], copy=True)
    moved = to_backend(src, xp)
    moved += 1.0  # in-place on the target: must not reach the source
    src *= 2.0  # in-place on the source: must not reach the target
    close(src, [2.0, 4.0, 6.0], 0.0)
    close(moved, [2.0, 3.0, 4.0], 0.0)


def test_to_backend_static_array_fields_move():
    @ember.tree.register
    class Scaled(nn.Module):
        weight: object
        scale: object = ember.field(static=True)

    m = Scaled(xnp.asarray([1.0, 2.0]), np.array([3.0]))
    out = to_backend(m, "array_api_strict")
    assert backend_of(out.weight) == "array_api_strict"
    assert type(out.scale).__module__.startswith("array_api_strict")
    assert type(m.scale) is np.ndarray  # the input is unchanged


def test_to_backend_same_backend_is_a_no_op(xp):
    t = xp.asarray([1.0, 2.0])
    assert to_backend(t, xp) is t
    assert to_backend({"a": t}, xp)["a"] is t


def test_to_backend_tracked_leaf_is_an_error():
    def f(x):
        to_backend(x, "array_api_strict")
        return xnp.sum(x)

    with pytest.raises(NotDifferentiableError, match="tracked by an open transform") as info:
        ember.grad(f)(xnp.asarray([1.0]))
    assert "stop_gradient" in str(info.value) and "stop_gradient" in TRACKED_LEAF

    def g(x):  # a stopped value is a constant: moving it is fine
        moved = to_backend(ember.stop_gradient(x), "array_api_strict")
        assert backend_of(moved) == "array_api_strict"
        return xnp.sum(x * x)

    close(ember.grad(g)(xnp.asarray([1.5])), [3.0])


def test_to_backend_keeps_dtypes(xp, backend):
    tree = {
        "f32": np.array([1.5, 2.5], dtype=np.float32),
        "i32": np.array([1, -2], dtype=np.int32),
        "i64": np.array([3, 4], dtype=np.int64),
        "bool": np.array([True, False]),
    }
    out = to_backend(tree, backend)
    for k, v in tree.items():
        back = to_backend(out[k], "numpy")
        assert back.dtype == v.dtype and np.array_equal(back, v), k


@pytest.mark.parametrize("bad", [None, 3, "not-a-backend"])
def test_to_backend_bad_target(bad):
    with pytest.raises(BackendError) as info:
        to_backend(np.ones(2), bad)
    if bad is None:
        assert str(info.value) == BAD_TARGET.format(target=None)


# --------------------------------------------------------------------------- #
# mixing backends or devices is a BackendError (a TypeError)
# --------------------------------------------------------------------------- #
def _other(backend: str) -> str:
    return "array_api_strict" if backend != "array_api_strict" else "numpy"


def test_mixing_backends_is_backend_error(xp, backend):
    other = ember.autodiff.namespace(_other(backend))
    a, b = xp.asarray([1.0, 2.0]), other.asarray([1.0, 2.0])
    for op in (lambda: a + b, lambda: xp.add(a, b), lambda: xp.concat([a, b]),
               lambda: ember.grad(lambda a: xp.sum(a * b))(a)):
        with pytest.raises(BackendError, match="cannot mix") as info:
            op()
        assert isinstance(info.value, TypeError)
        assert "to_backend" in str(info.value)


def test_mixing_raw_array_of_other_library_is_backend_error(xp, backend):
    a = xp.asarray([1.0, 2.0])
    other = ember.backend.get(_other(backend)).asarray([1.0, 2.0])
    with pytest.raises(BackendError):
        xp.multiply(a, other)


# --------------------------------------------------------------------------- #
# devices
# --------------------------------------------------------------------------- #
def _usable_devices(xp, backend):
    import warnings

    with warnings.catch_warnings():  # torch warns while compat probes device types
        warnings.simplefilter("ignore")
        devs = list(xp.__array_namespace_info__().devices())
    if backend == "torch":  # the meta device holds shapes only, no values
        devs = [d for d in devs if getattr(d, "type", None) != "meta"]
    if backend == "array_api_strict":  # these two devices refuse float64 on purpose
        devs = [d for d in devs if "no_" not in str(d)]
    if backend == "dask":  # compat's DASK_DEVICE is a placeholder; dask arrays report "cpu"
        devs = [d for d in devs if d == "cpu"]
    return [d for d in devs if d is not None]


def _same(d1, d2) -> bool:
    return d1 == d2 or str(d1) == str(d2)


def test_creation_functions_honour_device(xp, backend):
    for dev in _usable_devices(xp, backend):
        made = {
            "asarray": xp.asarray([1.0, 2.0], device=dev),
            "zeros": xp.zeros((2,), device=dev),
            "ones": xp.ones((2,), dtype=xp.float64, device=dev),
            "full": xp.full((2,), 3.0, device=dev),
            "arange": xp.arange(3, device=dev),
            "eye": xp.eye(2, device=dev),
            "linspace": xp.linspace(0.0, 1.0, 3, device=dev),
            "empty": xp.empty((2,), device=dev),
        }
        for name, t in made.items():
            assert _same(t.device, dev), (name, t.device, dev)
            assert isinstance(t, ember.Tensor)
        z = xp.zeros_like(made["ones"])
        assert _same(z.device, dev)


@pytest.mark.backends("array_api_strict", reason="needs several devices on one machine")
def test_device_mismatch_is_backend_error(xp):
    import array_api_strict as s

    d1, d2 = s.Device("device1"), s.Device("device2")
    a = xp.asarray([1.0, 2.0], device=d1)
    b = xp.asarray([3.0, 4.0], device=d2)
    cases = {
        "operator": lambda: a + b,
        "function": lambda: xp.multiply(a, b),
        "list": lambda: xp.concat([a, b]),
        "matmul": lambda: a @ b,
        "traced": lambda: ember.grad(lambda a: xp.sum(a * b))(a),
    }
    for name, op in cases.items():
        with pytest.raises(BackendError, match="different devices") as info:
            op()
        assert isinstance(info.value, TypeError), name
        assert "device1" in str(info.value) and "to_device" in str(info.value), name


@pytest.mark.backends("array_api_strict", reason="needs a non-default device")
def test_gradients_stay_on_a_non_default_device(xp):
    import array_api_strict as s

    dev = s.Device("device1")
    x = xp.asarray([1.0, 2.0, 3.0], device=dev)
    idx = xp.asarray([2, 0, 2], device=dev)

    def f(x):
        return (xp.sum(xp.sin(x) * x) + xp.sum(x[idx]) + xp.sum(xp.take(x, idx)) + xp.sum(x[1:])
                + xp.prod(x))  # (prod's VJP scans and slices arrays of its own: on x's device)

    g = ember.grad(f)(x)
    assert g.device == dev
    xn = np.array([1.0, 2.0, 3.0])
    want = np.cos(xn) * xn + np.sin(xn) + np.array([2.0, 1.0, 5.0]) + np.array([6.0, 3.0, 2.0])
    close(g, want)


@pytest.mark.backends("array_api_strict", reason="needs several devices on one machine")
def test_to_device_and_to_backend_device(xp):
    import array_api_strict as s

    d1, d2 = s.Device("device1"), s.Device("device2")
    x = xp.asarray([1.0, 2.0], device=d1)
    # to_device is differentiable: the gradient comes back on the input's device
    g = ember.grad(lambda x: xp.sum(x.to_device(d2) ** 2))(x)
    assert g.device == d1
    close(g, [2.0, 4.0])
    # asarray(device=) of a traced tensor keeps the gradient too
    g = ember.grad(lambda x: xp.sum(xp.asarray(x, device=d2) ** 3))(x)
    assert g.device == d1
    close(g, [3.0, 12.0])
    tree = to_backend({"w": xnp.asarray([1.0]), "raw": np.ones(2)}, xp, device=d2)
    assert tree["w"].device == d2 and tree["raw"].device == d2
    again = to_backend(tree, xp, device=d1)
    assert again["w"].device == d1
    close(again["w"], [1.0], 0.0)


# --------------------------------------------------------------------------- #
# ownership: consume reuses buffers where the backend writes in place
# --------------------------------------------------------------------------- #
def _pointer(a):
    for attr in ("__array_interface__", "__cuda_array_interface__"):
        iface = getattr(a, attr, None)
        if iface is not None:
            return iface["data"][0]
    return None


def test_consume_on_backend(xp, backend):
    x = xp.asarray([0.5, 1.0, 2.0], dtype=xp.float64, copy=True)
    before = _pointer(x.raw)
    y = xp.exp(x.consume())
    close(y, np.exp([0.5, 1.0, 2.0]))
    with pytest.raises(ember.ConsumedError):
        x + 1.0
    caps = ember.backend.capabilities(ember.backend.get(backend))
    if backend in ("numpy", "cupy") and caps.in_place:
        assert _pointer(y.raw) == before  # the buffer was reused
    # gradients through a consumed op are still right
    g = ember.grad(lambda a: xp.sum(xp.tanh((a * 2.0).consume())))(xp.asarray([0.25, -0.5], dtype=xp.float64))
    close(g, 2 * (1 - np.tanh([0.5, -1.0]) ** 2))


def test_mlp_training_step_on_backend_decreases_loss(xp, backend):
    model = to_backend(_mlp_np(), xp)
    x_np, y_np = _batch(16)
    x, y = xp.asarray(x_np), xp.asarray(y_np)
    first = None
    for _ in range(3):
        loss, g = ember.value_and_grad(_loss)(model, x, y)
        first = float(loss) if first is None else first
        model = ember.tree.map(lambda p, d: p - 0.5 * d, model, g)
    assert float(_loss(model, x, y)) < first
    assert math.isfinite(first)


def test_random_init_on_backend_is_reproducible(xp, backend):
    a = nn.MLP.init(er.key(5), 4, [8], 3, xp=xp, dtype=xp.float64)
    b = nn.MLP.init(er.key(5), 4, [8], 3, xp=xp, dtype=xp.float64)
    c = nn.MLP.init(er.key(6), 4, [8], 3, xp=xp, dtype=xp.float64)
    wa, wb, wc = host(a.out.weight), host(b.out.weight), host(c.out.weight)
    assert backend_of(a.out.weight) == backend and wa.dtype == np.float64
    assert np.array_equal(wa, wb) and not np.array_equal(wa, wc)
    bound = 1 / math.sqrt(8)  # torch-default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert np.all(np.abs(wa) <= bound)
    z = er.normal(er.key(1), (2000,), xp.float64, xp=xp)
    assert abs(float(xp.mean(z))) < 0.1 and abs(float(xp.std(z)) - 1.0) < 0.1
