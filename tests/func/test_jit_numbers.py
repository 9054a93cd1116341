"""ember.jit traces Python numbers that change from call to call (autodiff/_numbers.py):
host steps, scalars meeting arrays, guards, host_call, and optimizers' step counters, so a
jitted training step traces twice instead of once per step."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
import ember.autodiff.numpy as xp
from ember.autodiff import host_call
from ember.optim import schedules

SETTINGS = dict(deadline=None, max_examples=20, suppress_health_check=list(HealthCheck))


def raw(x):
    return np.asarray(x.raw) if isinstance(x, ember.Tensor) else np.asarray(x)


def same(a, b):
    la, lb = ember.tree.leaves(a), ember.tree.leaves(b)
    assert len(la) == len(lb) and ember.tree.structure(a) == ember.tree.structure(b)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(raw(x), raw(y))


@pytest.fixture(autouse=True)
def _no_retrace_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ember.RetraceWarning)
        yield


def test_a_changing_number_is_traced_from_its_second_value_on():
    f = ember.jit(lambda x, n: x * n)
    x = xp.asarray([1.0, 2.0])
    for n in range(8):
        same(f(x, float(n)), x * float(n))
    assert f.trace_count == 2  # the first value is a constant, the second one traces it
    listing = str(f.lower(x, 3.0))
    assert "v1: float" in listing and "asarray(v1" in listing  # an input, converted for multiply


def _host_arith(x, n, m):
    k = (n // 2) + (n % 3) ** 2 - abs(-n) + round(m / 3) + math.floor(m) + math.ceil(-m)
    k = k + divmod(n, 4)[0] - divmod(7, n + 1)[1] + divmod(m, 2.5)[1]
    return x * k - (m**2) / (1 + abs(m)) + (n << 1) - (-m)


@settings(**SETTINGS)
@given(st.lists(st.tuples(st.integers(0, 50), st.floats(-9, 9, allow_nan=False)), min_size=3, max_size=8))
def test_number_arithmetic_runs_as_host_steps_equal_to_eager(calls):
    f = ember.jit(_host_arith)
    x = xp.asarray([0.5, -1.5, 2.0])
    for n, m in calls:
        same(f(x, n, m), _host_arith(x, n, m))
    # no guard: arithmetic alone never needs another graph; each number is traced from its
    # second value on (a new trace when n, then m, first changes)
    assert f.trace_count <= 3


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_a_traced_number_meets_an_array_as_a_python_scalar(dtype):
    # the array API converts a scalar to the array's dtype: float32 stays float32, bit for bit
    x = xp.asarray(np.arange(1, 5), dtype=getattr(xp, dtype))
    value = 0.1 if "float" in dtype else 3

    def f(x, n):
        return (x * n + n) / (n + x), n - x, n**2 * x

    jf = ember.jit(f)
    for k in range(1, 5):
        out = jf(x, value * k)
        ref = f(x, value * k)
        same(out, ref)
        assert [o.dtype for o in out] == [r.dtype for r in ref]
    assert jf.trace_count == 2


def test_branches_on_a_number_become_guards():
    def f(x, n):
        if n > 3:
            return x * 2.0
        return x - n

    jf = ember.jit(f)
    x = xp.asarray([1.0, 2.0])
    for n in [0, 1, 2, 5, 6, 1, 7, 2]:
        same(jf(x, n), f(x, n))
    assert jf.trace_count == 3  # static n=0, then one graph per outcome of `n > 3`
    listing = str(jf.lower(x, 2))
    assert "guard bool(" in listing and "host >(" in listing
    assert "_guards" in jf.lower(x, 2).source


def test_a_number_given_to_a_function_is_guarded_by_its_value():
    # axis=n picks the graph's shapes: each value of n gets its own graph, checked by a guard
    def f(x, n):
        return xp.sum(x, axis=n) * 2.0

    jf = ember.jit(f)
    x = xp.asarray(np.arange(6.0).reshape(2, 3))
    for n in [0, 1, 0, 1, -1, 0]:
        same(jf(x, n), f(x, n))
    assert jf.trace_count == 3  # n=0 static (still used for 0), then guarded graphs for 1 and -1


def test_bools_and_static_arguments_stay_static():
    jf = ember.jit(lambda x, flag, k: x * k if flag else -x, static_argnums=2)
    x = xp.asarray([1.0, 2.0])
    for flag, k in [(True, 2.0), (False, 2.0), (True, 3.0), (True, 2.0), (False, 3.0)]:
        same(jf(x, flag, k), x * k if flag else -x)
    assert jf.trace_count == 4  # (True, 2), (False, 2), (True, 3), (False, 3)


@pytest.mark.parametrize("static", [False, True])
def test_nan_arguments_find_their_graph(static):
    # no NaN equals another: keyed as itself, each call with a new NaN traced again (static
    # arguments: one more graph kept per call)
    x = xp.asarray([1.0, 2.0])
    f = ember.jit(lambda x, a: x * a + (1.0 if a != a else 0.0), static_argnums=1 if static else ())
    values = [float("nan"), float("nan"), 1.0, float("nan"), 2.0, float("nan")]
    got = [raw(f(x, a))[0] for a in values]
    np.testing.assert_array_equal(got, [math.nan, math.nan, 1.0, math.nan, 2.0, math.nan])
    assert f.trace_count == (3 if static else 2)
    for _ in range(20):
        f(x, float("nan"))
    assert f.trace_count == (3 if static else 2)


def test_signed_zeros_and_nans_are_keyed_by_sign_also_inside_static_tuples():
    x = xp.asarray([1.0, -2.0])
    j = ember.jit(lambda x, s: xp.copysign(x, s[0]) * s[1], static_argnums=1)
    for s in [(0.0, 1.0), (-0.0, 1.0), (math.nan, 2.0), (-math.nan, 2.0), (float("nan"), 2.0)]:
        want = xp.copysign(x, s[0]) * s[1]
        np.testing.assert_array_equal(np.signbit(raw(j(x, s))), np.signbit(raw(want)))
    assert j.trace_count == 4
    k = ember.jit(lambda x, a: xp.copysign(x, a))
    for a in [math.nan, -math.nan, math.nan]:
        np.testing.assert_array_equal(np.signbit(raw(k(x, a))), [math.copysign(1, a) < 0] * 2)


def test_a_number_pinned_by_its_value_keeps_its_zeros_sign_and_its_nan():
    # a function given a traced number (copysign) guards the value the graph was made for;
    # 0.0 == -0.0 let -0.0 replay the 0.0 graph, and nan == nan never held
    x = xp.asarray([1.0, -2.0])
    j = ember.jit(lambda x, a: xp.copysign(x, a))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ember.RetraceWarning)  # (one graph per value: its point)
        for a in [1.0, 2.0, 0.0, -0.0, -0.0, 0.0, math.nan, math.nan, -math.nan, -math.nan]:
            np.testing.assert_array_equal(raw(j(x, a)), raw(xp.copysign(x, a)))
    assert j.trace_count == 6  # (1.0; traced from 2.0 on, one graph each for 0.0, -0.0, nan, -nan)


def test_a_repeated_untraced_zero_or_nan_takes_the_generated_check(monkeypatch):
    from ember.func import _jit

    calls = []
    general = _jit.Jitted._signature
    monkeypatch.setattr(_jit.Jitted, "_signature", lambda self, *a: calls.append(1) or general(self, *a))
    x = xp.asarray([1.0, -2.0])
    for a in (math.nan, -0.0, 0.0, 2.5):
        calls.clear()
        j = ember.jit(lambda x, a: xp.copysign(x, a) * 2)
        for _ in range(6):
            got = j(x, a)
        np.testing.assert_array_equal(raw(got), raw(xp.copysign(x, a) * 2))
        assert len(calls) == 2 and j.trace_count == 1  # (the first two calls: then generated code)


def test_numbers_come_back_as_python_numbers():
    jf = ember.jit(lambda x, state: (x * 2.0, {"step": state["step"] + 1, "t": state["t"] / 2}))
    x = xp.asarray([1.0])
    state = {"step": 0, "t": 1.0}
    for _ in range(5):
        _, state = jf(x, state)
    assert state == {"step": 5, "t": 1 / 32} and type(state["step"]) is int
    assert jf.trace_count == 2


def test_gradients_scaled_by_a_changing_number():
    def loss(w, scale):
        return xp.sum(xp.sin(w) * scale) * scale

    g = ember.jit(ember.grad(loss))
    w = xp.asarray([0.3, -1.2, 2.0])
    for s in [0.5, 1.5, -2.0, 3.25]:
        same(g(w, s), ember.grad(loss)(w, s))
    assert g.trace_count == 2


def test_host_call_runs_each_call_without_a_guard():
    sched = schedules.cosine(1.0, total_steps=5)

    def f(x, t):
        return x * host_call(lambda s: float(sched(s)), t)

    jf = ember.jit(f)
    x = xp.asarray([2.0])
    for t in range(8):  # past total_steps the cosine branches to min_lr: no new graph
        same(jf(x, t), x * sched(t))
    assert jf.trace_count == 2
    assert host_call(lambda a, b: a * b, 3, 4) == 12  # eagerly: the call itself

    bad = ember.jit(lambda x, t: x * host_call(lambda s: 2.0 if s == 0 else [s], t))
    bad(x, 0)
    with pytest.raises(TypeError, match="must return a Python number"):
        bad(x, 1)


def test_donation_skips_numbers():
    # numbers before and among the donated arrays (an optimizer state: {"step": t, "m": array})
    def step(t, state):
        return t + 1, {"step": state["step"] + 1, "m": state["m"] * 0.5 + t}

    jf = ember.jit(step, donate=(0, 1))
    out = (0, {"step": 0, "m": xp.asarray([1.0, 2.0])})
    ref = (0, {"step": 0, "m": xp.asarray([1.0, 2.0])})
    for _ in range(4):
        m = out[1]["m"]
        out = jf(*out)
        ref = step(*ref)
        with pytest.raises(ember.ConsumedError):
            m + 1.0  # the donated array is spent
    same(out, ref)
    assert jf.trace_count == 2


def test_raw_numpy_arrays_meet_traced_numbers_through_guards():
    # a closed-over NumPy array does not know traced numbers: it gets this call's value under a
    # guard; the results stay right (and each value needs a graph, which jit reports)
    c = np.array([1.0, 2.0])
    jf = ember.jit(lambda x, n: x + c * n)
    x = xp.asarray([0.0, 1.0])
    with pytest.warns(ember.RetraceWarning):
        for n in range(12):
            same(jf(x, float(n)), x + c * float(n))


def _problem(lib):
    ns = ember.autodiff.namespace(lib)
    model = ember.nn.MLP.init(ember.random.key(0), 6, [8, 8], 3, xp=ns)
    rng = np.random.default_rng(0)
    x = ns.asarray(rng.standard_normal((5, 6)))
    y = ns.asarray(np.eye(3)[rng.integers(0, 3, 5)])
    return model, x, y


def _loss(m, x, y):
    return ember.nn.cross_entropy(m(x), y)


OPTIMIZERS = [
    lambda: ember.optim.SGD(0.1),
    lambda: ember.optim.SGD(0.1, momentum=0.9, dampening=0.1),
    lambda: ember.optim.Adam(1e-2),
    lambda: ember.optim.Adam(schedules.linear_warmup(schedules.cosine(1e-2, 6), 3), amsgrad=True),
    lambda: ember.optim.AdamW(schedules.step(1e-2, 3), clip_norm=0.5),
    lambda: ember.optim.RMSprop(1e-2, momentum=0.5, centered=True),
    lambda: ember.optim.Adagrad(1e-2, lr_decay=0.1, initial_accumulator_value=0.1),
    lambda: ember.optim.Lion(1e-3),
    lambda: ember.optim.SGD(schedules.cosine(0.1, 4),
                            groups=[ember.optim.Group("*.bias", lr_scale=0.5), ember.optim.Group()]),
]


@pytest.mark.parametrize("lib", ["numpy", "array_api_strict"])
@pytest.mark.parametrize("make", OPTIMIZERS, ids=lambda m: repr(m()))
def test_jitted_train_step_traces_twice_and_equals_eager(make, lib, tmp_path):
    # the step counters are traced numbers: schedules, bias corrections and first-step
    # branches run at each call, bit for bit as eagerly
    opt = make()
    model, x, y = _problem(lib)
    step = ember.training.train_step(_loss, opt)
    jstep = ember.jit(step)
    m1 = m2 = model
    s1 = s2 = opt.init(model)
    for _ in range(10):
        l1, m1, s1 = step(m1, s1, x, y)
        l2, m2, s2 = jstep(m2, s2, x, y)
        same((l1, m1, s1), (l2, m2, s2))
    assert jstep.trace_count == 2
    assert type(s2["step"]) is int and s2["step"] == 10
    ember.io.save(tmp_path / "state.safetensors", s2)  # plain data, saved as an eager state is
    same(ember.io.load(tmp_path / "state.safetensors", like=s1), s1)


def _scaled(y, s):
    return xp.sin(y) * s + s**2


TRANSFORMS = {
    "vmap": lambda x, s: ember.vmap(lambda r: _scaled(r, s))(x),
    "jvp": lambda x, s: ember.jvp(lambda y: _scaled(y, s), (x,), (x,)),
    "hessian": lambda x, s: ember.hessian(lambda y: xp.sum(_scaled(y, s)))(x[0]),
    "vmap-grad": lambda x, s: ember.vmap(ember.grad(lambda r: xp.sum(_scaled(r, s))))(x),
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_a_changing_number_inside_transforms(name):
    # the number meets batched, tangent and tracked values as a scalar: no guard, no new graph
    f = TRANSFORMS[name]
    jf = ember.jit(f)
    x = xp.asarray(np.arange(6.0).reshape(3, 2) / 7)
    for s in [0.5, 1.5, -2.5, 3.25]:
        same(jf(x, s), f(x, s))
    assert jf.trace_count == 2


def test_the_repeated_structures_generated_check_falls_back_on_every_difference():
    # once a structure repeats, each call is checked by code generated for the last graph
    # (classes, shapes, dtypes, untraced numbers, guards): any difference takes the general
    # path, which traces, picks another graph or raises as before
    def f(p, n, k):
        y = p["w"] * k
        return {"y": y * 2.0 if n > 3 else y - n, "n": n + 1}

    jf = ember.jit(f)
    w = xp.asarray([1.0, 2.0])
    for n in [5, 6, 7, 1, 8, 2, 9]:  # traced from its second value on, guarded by n > 3
        same(jf({"w": w}, n, 1.5), f({"w": w}, n, 1.5))
    assert jf._entry is not None
    traces = jf.trace_count
    for w2 in (xp.asarray([1.0, 2.0, 3.0]), xp.asarray([1.0, 2.0], dtype=xp.float32),
               np.array([1.0, 2.0]), xp.asarray([[1.0, 2.0]])):
        for _ in range(3):
            same(jf({"w": w2}, 5, 1.5), f({"w": w2}, 5, 1.5))
            same(jf({"w": w}, 2, 1.5), f({"w": w}, 2, 1.5))
    same(jf({"w": w}, 5, 2.5), f({"w": w}, 5, 2.5))  # an untraced number's new value
    same(jf({"w": w}, 5, 1.5), f({"w": w}, 5, 1.5))
    assert jf.trace_count > traces
    dead = xp.asarray([1.0, 2.0])
    ember.consume(dead)
    with pytest.raises(ember.ConsumedError):
        jf({"w": dead}, 5, 1.5)
    same(jf({"w": ember.consume(xp.asarray([1.0, 2.0]))}, 5, 1.5), f({"w": w}, 5, 1.5))
    same(jf({"w": w}, 5, 1.5), f({"w": w}, 5, 1.5))
