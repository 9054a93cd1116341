"""ember.jit: results equal eager ones (bitwise where the same kernels run), retracing,
static arguments, donation, the control-flow error and lower()."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
import ember.autodiff as ad

BACKENDS = ["numpy", "array_api_strict"]
SETTINGS = dict(deadline=None, max_examples=15, suppress_health_check=list(HealthCheck))
floats = st.floats(-3, 3, allow_nan=False, width=64)


def ns(lib):
    return ad.namespace(lib)


def raw(x):
    return np.asarray(x.raw) if isinstance(x, ember.Tensor) else np.asarray(x)


def same(a, b, tol=0.0):
    la, lb = ember.tree.leaves(a), ember.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        if tol == 0.0:
            np.testing.assert_array_equal(raw(x), raw(y))
        else:
            np.testing.assert_allclose(raw(x), raw(y), rtol=tol, atol=tol)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=floats)


@pytest.mark.parametrize("lib", BACKENDS)
@settings(**SETTINGS)
@given(a=arrays((3, 4)), b=arrays((4,)))
def test_elementwise_chain_is_bitwise_eager(lib, a, b):
    xp = ns(lib)

    def f(x, y):
        z = xp.sin(x) * y + 2.0
        z = xp.tanh(z) - xp.exp(-xp.abs(z)) / (1.0 + z * z)
        return xp.where(z > 0, z, 0.5 * z) ** 2

    x, y = xp.asarray(a), xp.asarray(b)
    same(ember.jit(f, fuse=False)(x, y), f(x, y))
    same(ember.jit(f)(x, y), f(x, y), tol=1e-12)  # (fused: numexpr's sin, tanh and exp)


@pytest.mark.parametrize("lib", BACKENDS)
@settings(**SETTINGS)
@given(a=arrays((5, 3)), b=arrays((3, 2)))
def test_reductions_matmul_and_indexing(lib, a, b):
    xp = ns(lib)

    def f(x, w):
        y = x @ w
        return (xp.sum(y, axis=0), xp.mean(y), xp.max(x, axis=1, keepdims=True), y[1:, 0], x[..., ::-1],
                xp.reshape(y, (-1,)), xp.argmax(y, axis=0))

    x, w = xp.asarray(a), xp.asarray(b)
    same(ember.jit(f)(x, w), f(x, w))


@pytest.mark.parametrize("lib", BACKENDS)
@settings(**SETTINGS)
@given(a=arrays((4, 3)), idx=hnp.arrays(np.int64, (5,), elements=st.integers(0, 3)))
def test_integer_array_index_is_an_input(lib, a, idx):
    xp = ns(lib)

    def f(x, i):
        return xp.take(x, i, axis=0) * 2.0, x[:, 0][i]

    x, i = xp.asarray(a), xp.asarray(idx)
    jf = ember.jit(f)
    same(jf(x, i), f(x, i))
    i2 = xp.asarray(idx[::-1].copy())
    same(jf(x, i2), f(x, i2))  # the index is not baked into the graph
    assert jf.trace_count == 1


def _loss(xp):
    def loss(p, x):
        h = xp.tanh(x @ p["w"] + p["b"])
        return xp.sum(h * h) / 7.0 + xp.sum(xp.maximum(x, 0.1))
    return loss


@pytest.mark.parametrize("lib", BACKENDS)
@settings(**SETTINGS)
@given(w=arrays((3, 2)), b=arrays((2,)), x=arrays((4, 3)))
def test_transforms_inside_jit(lib, w, b, x):
    xp = ns(lib)
    loss = _loss(xp)
    p = {"w": xp.asarray(w), "b": xp.asarray(b), "name": "layer"}
    xt = xp.asarray(x)
    same(ember.jit(ember.value_and_grad(loss))(p, xt), ember.value_and_grad(loss)(p, xt), 1e-12)
    same(ember.jit(ember.grad(loss, argnums=1))(p, xt), ember.grad(loss, argnums=1)(p, xt), 1e-12)

    def pulled(p, x):
        out, pull = ember.vjp(lambda x: xp.sin(x @ p["w"]), x)
        return out, pull(xp.ones_like(out))

    same(ember.jit(pulled)(p, xt), pulled(p, xt), 1e-12)

    def tangent(x):
        return ember.jvp(lambda x: xp.sum(xp.exp(x) * x, axis=1), (x,), (xp.ones_like(x),))

    same(ember.jit(tangent)(xt), tangent(xt), 1e-12)
    hess = lambda x: ember.grad(ember.grad(lambda x: xp.sum(xp.sin(x) ** 3)))(x[0, 0])  # noqa: E731
    same(ember.jit(hess)(xt), hess(xt), 1e-12)


def test_raw_numpy_inputs_give_raw_outputs():
    f = ember.jit(lambda x: x * 2.0 + 1.0)
    out = f(np.arange(3.0))
    assert isinstance(out, np.ndarray) and out.tolist() == [1.0, 3.0, 5.0]


def test_static_argnums_and_retracing():
    xp = ns("numpy")
    calls = []

    def f(x, n, mode):
        calls.append(1)
        y = x
        for _ in range(n):
            y = xp.sin(y)
        return y * 2.0 if mode == "double" else y

    jf = ember.jit(f, static_argnums=(1, 2))
    x = xp.asarray([0.5, 1.0])
    same(jf(x, 3, "double"), f(x, 3, "double"))
    jf(x, 3, "double")
    assert jf.trace_count == 1
    same(jf(x, 2, "double"), f(x, 2, "double"))
    assert jf.trace_count == 2
    jf(xp.asarray([0.5, 1.0, 2.0]), 2, "double")  # shape change
    assert jf.trace_count == 3
    jf(xp.asarray([0.5, 1.0], dtype=xp.float32), 2, "double")  # dtype change
    assert jf.trace_count == 4
    jf(x, 2, "double")
    assert jf.trace_count == 4
    with pytest.raises(TypeError, match="not hashable"):
        jf(x, [2], "double")


@pytest.mark.parametrize("what", ["static_argnums", "donate"])
def test_a_position_the_function_has_no_parameter_for_raises(what):
    def f(x, y, mode="a"):
        return x

    for bad in (3, -4):
        with pytest.raises(ValueError, match=rf"{what}={bad} names no argument: f takes 3 .*\(x, y, mode\)"):
            ember.jit(f, **{what: bad})
    for good in (0, 2, -1, -3):  # (a parameter with a default counts: a call may pass it)
        ember.jit(f, **{what: good})
    ember.jit(lambda *args: args[0], **{what: 7})  # (*args: any position may come)
    with pytest.raises(ValueError, match="names no argument"):
        ember.jit(**{what: 1})(lambda x: x)


def test_python_scalars_in_arguments_are_static():
    xp = ns("numpy")
    jf = ember.jit(lambda p: p["x"] * p["scale"])
    x = xp.asarray([1.0, 2.0])
    assert raw(jf({"x": x, "scale": 2.0})).tolist() == [2.0, 4.0]
    assert raw(jf({"x": x, "scale": 3.0})).tolist() == [3.0, 6.0]
    assert jf.trace_count == 2


def test_donate_consumes_the_input_and_reuses_its_buffer():
    xp = ns("numpy")
    f = ember.jit(lambda x, y: xp.exp(x * 2.0) + y, donate=0)
    x = xp.asarray(np.linspace(0, 1, 1000))
    buf = x.raw
    y = xp.asarray(np.ones(1000))
    expect = np.exp(np.linspace(0, 1, 1000) * 2.0) + 1.0
    del buf  # (held, the buffer would be shared: jit copies instead of writing)
    out = f(x, y)
    np.testing.assert_array_equal(raw(out), expect)
    with pytest.raises(ember.ConsumedError):
        x + 1.0
    assert "in place of v0" in str(f.lower(xp.asarray(np.zeros(1000)), y))
    # a donated buffer someone else holds is copied, never written
    x2 = xp.asarray(np.linspace(0, 1, 1000))
    keep = x2.share()
    f(x2, y)
    np.testing.assert_array_equal(raw(keep), np.linspace(0, 1, 1000))
    # y is not donated: untouched and alive
    np.testing.assert_array_equal(raw(y), np.ones(1000))


@pytest.mark.parametrize("fuse", [True, False])
def test_a_raw_array_in_a_donated_argument_is_never_written(fuse):
    # donation consumes ember Tensors; a NumPy array is the caller's (the docs: raw backend
    # arrays are never written), on the call that traces and on the ones that replay
    f = ember.jit(lambda a: a * 2.0 + 1.0, donate=0, fuse=fuse)
    g = ember.jit(lambda w, a: w - 0.5 * (a.T @ a), donate=0, fuse=fuse)
    for _ in range(3):
        a, w = np.linspace(0.0, 1.0, 6).reshape(3, 2), np.ones((2, 2))
        out, w2 = f(a), g(w, a)
        np.testing.assert_array_equal(a, np.linspace(0.0, 1.0, 6).reshape(3, 2))
        np.testing.assert_array_equal(w, np.ones((2, 2)))
        np.testing.assert_array_equal(raw(out), a * 2.0 + 1.0)
        np.testing.assert_allclose(raw(w2), 1.0 - 0.5 * (a.T @ a), rtol=1e-15)
    assert "in place of v0" not in str(f.lower(a)) + str(g.lower(w, a))


def test_a_consumed_value_in_a_donated_argument_is_handed_over_without_reuse():
    # ember.consume(x) passed where jit donates: x is dead, and a share of its buffer keeps
    # its values (the graph does not write into a buffer someone else may hold)
    xp = ns("numpy")
    f = ember.jit(lambda a: a * 2.0 + 1.0, donate=0)
    for _ in range(3):
        a = xp.ones(4)
        keep = a.share()
        out = f(ember.consume(a))
        np.testing.assert_array_equal(raw(keep), np.ones(4))
        np.testing.assert_array_equal(raw(out), np.full(4, 3.0))
        with pytest.raises(ember.ConsumedError):
            a + 1.0


def _address(t) -> int:
    return t.raw.__array_interface__["data"][0]


def test_a_donated_buffer_nobody_else_holds_receives_the_result_without_a_copy():
    xp = ns("numpy")
    f = ember.jit(lambda x, y: xp.exp(x * 2.0) + y, donate=0)
    y = xp.ones(1000)
    for _ in range(3):  # (the first call traces; the later ones replay)
        x = xp.linspace(0.0, 1.0, 1000)  # (ember's own buffer: not borrowed from the caller)
        at = _address(x)
        out = f(x, y)
        assert _address(out) == at
        np.testing.assert_array_equal(raw(out), np.exp(np.linspace(0, 1, 1000) * 2.0) + 1.0)


def test_a_fresh_primitives_result_does_not_pin_the_donated_inputs():
    # nn.linear is declared fresh: the loss computed from it is no alias of the weight, so a
    # jitted step may write into the donated weight (its decay, the op reading it last)
    xp = ns("numpy")

    def step(w, x):
        g = ember.grad(lambda w: xp.sum(ember.nn.linear(x, w) ** 2))(w)
        return w * 0.9 - 0.1 * g

    f = ember.jit(step, donate=0)
    x = xp.reshape(xp.linspace(-1.0, 1.0, 12), (4, 3))
    want = step(xp.reshape(xp.linspace(0.0, 1.0, 6), (2, 3)), x)
    for _ in range(2):
        out = f(xp.reshape(xp.linspace(0.0, 1.0, 6), (2, 3)), x)
        np.testing.assert_array_equal(raw(out), raw(want))
    listing = str(f.lower(xp.reshape(xp.linspace(0.0, 1.0, 6), (2, 3)), x))
    assert "[in place of v0]" in listing


def test_of_two_dying_buffers_a_tail_op_writes_the_one_made_last():
    # w - lr * g at the end: the gradient's buffer (just written, in cache) receives the new
    # weight, not the donated weight's (read back from memory and written out again)
    xp = ns("numpy")

    def step(w, x):
        return w - 0.1 * ember.grad(lambda w: xp.sum((x @ w) ** 2))(w)

    f = ember.jit(step, donate=0, fuse=False)  # (a fused call writes only into donated buffers)
    x = xp.reshape(xp.linspace(-1.0, 1.0, 12), (4, 3))
    w = xp.reshape(xp.linspace(0.0, 1.0, 9), (3, 3))

    def update_line(f, *args):
        sub = [line for line in str(f.lower(*args)).splitlines() if "subtract(v0," in line]
        assert len(sub) == 1 and "[in place of" in sub[0]
        return sub[0]

    assert "[in place of v0]" not in update_line(f, w, x)
    want = raw(w) - 0.1 * raw(ember.grad(lambda w: xp.sum((x @ w) ** 2))(w))
    np.testing.assert_allclose(raw(f(w, x)), want, rtol=1e-15)
    with pytest.raises(ember.ConsumedError):
        w + 1.0
    # an array made after the update: the donated buffer is written, else it would stay
    # alive (its dead Tensor's handle) beside that new array
    g = ember.jit(lambda w, x: (step(w, x), xp.exp(x)), donate=0, fuse=False)
    assert "[in place of v0]" in update_line(g, xp.reshape(xp.linspace(0.0, 1.0, 9), (3, 3)), x)


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_jitted_sgd_step_keeps_the_weights_layout_in_the_gradients_buffer(order):
    # the new weight goes into its gradient's buffer (the tail rule): that buffer has the
    # weight's layout, as eagerly, so the layout holds from step to step, and values are eager's
    xp = ns("numpy")
    rng = np.random.default_rng(5)
    w0 = np.asarray(rng.standard_normal((64, 32)), order=order)
    x = xp.asarray(rng.standard_normal((8, 32)))
    opt = ember.optim.SGD(0.01)
    step = ember.training.train_step(lambda p: xp.sum(ember.nn.linear(x, p["w"]) ** 2), opt)
    jstep = ember.jit(step, donate=(0, 1))
    p, e = {"w": xp.asarray(w0, copy=True)}, {"w": xp.asarray(w0, copy=True)}
    s, es = opt.init(p), opt.init(e)
    for _ in range(3):
        _, p, s = jstep(p, s)
        _, e, es = step(e, es)
        np.testing.assert_array_equal(raw(p["w"]), raw(e["w"]))
        flags = raw(p["w"]).flags
        assert flags.c_contiguous if order == "C" else flags.f_contiguous
    update = [line for line in str(jstep.lower(p, s)).splitlines() if "subtract(v0," in line]
    assert len(update) == 1 and "[in place of v0]" not in update[0]


def test_a_primitive_not_declared_fresh_may_return_a_view_of_its_argument():
    # a primitive returning (a view of) its argument: jit must not write into that buffer
    # while the argument is alive, so its result counts as an alias unless declared fresh
    xp = ns("numpy")
    head = ember.primitive(lambda ns_, x: x[:2])
    head.defvjp(lambda ns_, g, ans, x: ns_.concat([g, ns_.zeros_like(x[2:])]))

    def f(x):
        h = head(x)
        return xp.exp(h) + 1.0, x  # (x is still returned: its buffer must stay as it was)

    jf = ember.jit(f)
    x = xp.linspace(0.0, 1.0, 4)
    for _ in range(2):
        a, b = jf(x)
        np.testing.assert_array_equal(raw(b), np.linspace(0.0, 1.0, 4))
        np.testing.assert_array_equal(raw(a), np.exp(np.linspace(0.0, 1.0, 4)[:2]) + 1.0)


def test_buffer_planning_never_writes_inputs_or_live_values():
    xp = ns("numpy")

    def f(x):
        a = xp.exp(x)
        b = a * 2.0
        v = xp.reshape(a, (-1,))  # a view of a: a's buffer stays live while v is
        c = b + 1.0
        return c, v, x

    x = xp.asarray(np.arange(6.0).reshape(2, 3))
    same(ember.jit(f)(x), f(x))
    np.testing.assert_array_equal(raw(x), np.arange(6.0).reshape(2, 3))


def test_data_dependent_control_flow_names_the_line_and_the_fix():
    xp = ns("numpy")

    def f(x):
        if xp.sum(x) > 0:  # the line the error names
            return x
        return -x

    with pytest.raises(ember.TracingError, match=r"test_jit\.py:\d+ \(`if xp\.sum\(x\) > 0:.*static_argnums"):
        ember.jit(f)(xp.asarray([1.0]))
    for conv in (float, int, bool):
        with pytest.raises(ember.TracingError, match=conv.__name__):
            ember.jit(lambda x: conv(x[0]))(xp.asarray([1.0]))
    with pytest.raises(ember.TracingError):
        ember.jit(lambda x: np.sin(x))(xp.asarray([1.0]))
    with pytest.raises(ember.TracingError, match="x.raw"):
        ember.jit(lambda x: x.raw)(xp.asarray([1.0]))


def test_stop_gradient_and_constants_inside_jit():
    xp = ns("numpy")
    c = xp.asarray([10.0, 20.0])

    def f(x):
        s = ember.stop_gradient(x)  # still the input, not a constant
        return x * s + c

    jf = ember.jit(f)
    x = xp.asarray([1.0, 2.0])
    same(jf(x), f(x))
    x2 = xp.asarray([3.0, 4.0])
    same(jf(x2), f(x2))


def test_passes_cse_dce_and_lower():
    xp = ns("numpy")

    def f(x):
        a = xp.sin(x)
        b = xp.sin(x)  # the same op: one
        xp.cos(x)  # dead: dropped
        return a + b

    jf = ember.jit(f)
    x = xp.asarray([1.0, 2.0])
    low = jf.lower(x)
    text = str(low)
    assert text.count("sin(") == 1 and "cos" not in text
    assert "jit(f)(v0: f64[2])" in text and "return" in text
    assert "def _replay" in low.source
    same(jf(x), f(x))
    assert jf.trace_count == 1


def test_jit_under_a_transform_is_inlined():
    xp = ns("numpy")
    jf = ember.jit(lambda x: xp.sum(xp.sin(x) ** 2))
    x = xp.asarray([0.3, 0.7])
    same(ember.grad(jf)(x), ember.grad(lambda x: xp.sum(xp.sin(x) ** 2))(x))
    nested = ember.jit(lambda x: jf(x) * 2.0)
    same(nested(x), jf(x) * 2.0)


def test_numbers_that_decide_each_graph_retrace_warn_and_the_cache_stays_bounded(monkeypatch):
    # a number traced after its second value but used as a loop count needs a graph per value:
    # past MAX_GUARDED graphs it is part of the signature again, and jit says (once) that
    # every call traces instead of silently running slower than eager
    import ember.func._jit as jit_mod

    monkeypatch.setattr(jit_mod, "CACHE_SIZE", 5)
    import ember.autodiff.numpy as xp

    def f(x, n):
        for _ in range(n):
            x = x * 2.0
        return x

    jf = ember.jit(f)
    x = xp.asarray([1.0, 2.0])
    with pytest.warns(ember.RetraceWarning, match="Python numbers in its arguments changed") as rec:
        outs = [jf(x, n) for n in range(14)]
    assert len(rec) == 1 and rec[0].filename == __file__  # once, at the caller's line
    assert [o.raw.tolist() for o in outs] == [[2.0**n, 2.0 ** (n + 1)] for n in range(14)]
    assert jf.trace_count == 14 and jf.signatures() <= 5  # the oldest signatures dropped
    jf(x, 13)
    assert jf.trace_count == 14  # the latest ones still cached


def test_jitted_relu_gradient_decides_product_or_where_on_each_calls_values():
    # a ReLU's masked cotangent is one staged op that checks the values it runs on: the fast
    # product where it is exact, where() when an inf would meet the mask (0 * inf = NaN)
    import ember.autodiff.numpy as xp

    def f(x, w):
        return xp.sum(ember.nn.relu(x) * w)

    g = ember.jit(ember.grad(f))
    x = xp.asarray([-1.0, 2.0, 3.0])
    for w in ([1.0, 2.0, 3.0], [np.inf, 1.0, 2.0], [4.0, 5.0, 6.0]):
        w = xp.asarray(w)
        np.testing.assert_array_equal(g(x, w).raw, ember.grad(f)(x, w).raw)
    assert g.trace_count == 1
    assert "_select" in str(g.lower(x, w))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_jitted_linear_relu_gradient_reads_the_masks_exactness_off_the_bias_gradient():
    # nn.linear's ReLU-masked cotangent and its bias gradient are one staged op: the product
    # and its sum where the sum is finite, where() (and its sum) when an inf meets the mask
    import ember.autodiff.numpy as xp

    def f(x, w, b, v):
        return xp.sum(ember.nn.linear(x, w, b, activation=ember.nn.relu) * v)

    g = ember.jit(ember.grad(f, argnums=(1, 2)))
    x = xp.asarray([[1.0, -2.0], [0.5, 1.5]])
    w = xp.asarray([[1.0, 1.0], [-1.0, 0.0], [2.0, 1.0]])
    b = xp.asarray([0.0, -1.0, 0.5])
    for v in ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[1.0, np.inf, 3.0], [4.0, 5.0, 6.0]],
              [[-np.inf, 2.0, 3.0], [4.0, 5.0, 6.0]], [[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]],
              [[-1e308] * 3, [-1e308] * 3]):  # (the last: finite, but its sums overflow)
        v = xp.asarray(v)
        for got, want in zip(g(x, w, b, v), ember.grad(f, argnums=(1, 2))(x, w, b, v)):
            np.testing.assert_array_equal(got.raw, want.raw)
            assert np.signbit(got.raw).tolist() == np.signbit(want.raw).tolist()
    assert g.trace_count == 1
    assert "_select_summed" in str(g.lower(x, w, b, v))


def test_buffer_planning_writes_into_a_dying_transpose_never_into_a_read_only_view():
    # a transposed gradient's update goes into the product's buffer (as eager does); a
    # broadcast view is read-only and is never written
    import ember.autodiff.numpy as xp

    rng = np.random.default_rng(0)
    a, b = xp.asarray(rng.standard_normal((4, 3))), xp.asarray(rng.standard_normal((3, 5)))

    def f(a, b):
        return xp.matrix_transpose(a @ b) * 2.0

    def h(a):
        return xp.broadcast_to(xp.sum(a, axis=0), (2, 3)) * 2.0

    jf, jh = ember.jit(f), ember.jit(h)
    np.testing.assert_array_equal(jf(a, b).raw, f(a, b).raw)
    assert "[in place of" in str(jf.lower(a, b)).split("multiply")[1].split("\n")[0]
    np.testing.assert_array_equal(jh(a).raw, h(a).raw)
    assert "[in place of" not in str(jh.lower(a)).split("multiply")[1].split("\n")[0]


def test_a_scalar_maximum_writes_in_place_through_its_own_kernel():
    # on NumPy, maximum(x, 0.0) runs against a kept array of zeros (autodiff/_direct.py's
    # _extremum: NumPy's loop with a scalar is not vectorized); written into a dying buffer,
    # it keeps that kernel and passes it out=, not the ufunc itself
    xp = ns("numpy")
    f = ember.jit(lambda x: xp.maximum(x * 2.0, 0.0) + 1.0)
    x = xp.asarray(np.linspace(-1, 1, 5000))
    same(f(x), xp.maximum(x * 2.0, 0.0) + 1.0)
    low = f.lower(x)
    assert re.search(r"maximum\(v\d+, 0\.0\)  \[in place of", str(low))
    called = {v for v in low._c.fn.__globals__.values() if callable(v)}
    assert xp._dispatch.fixes["maximum"] in called and np.maximum not in called


def _sum_exp_with_residuals(name, jit_only=False):
    """``sum(exp(x))`` as a primitive whose forward keeps ``exp(x)`` as a residual, and the
    list of whether each VJP call got it."""
    def fwd(ns_, x):
        e = ns_.exp(x)
        return ns_.sum(e), {"e": e}

    calls = []
    sum_exp = ember.primitive(lambda ns_, x: ns_.sum(ns_.exp(x)), name=name)
    sum_exp.defvjp(lambda ns_, g, ans, x, e=None: calls.append(e is not None) or g * (
        ns_.exp(x) if e is None else e))
    sum_exp.defresiduals(fwd, jit_only=jit_only)
    return sum_exp, calls


@pytest.mark.parametrize("lib", BACKENDS)
def test_a_primitives_residuals_are_computed_by_its_staged_op_on_each_calls_values(lib):
    # a primitive with defresiduals under jit(grad): the forward op also yields what the
    # node keeps, and the VJP reads those slots (never the staging values as constants)
    xp = ns(lib)
    sum_exp, calls = _sum_exp_with_residuals("sum_exp")

    def loss(x, w):
        return sum_exp(x * w)

    g = ember.jit(ember.grad(loss))
    for k in range(3):
        x, w = xp.asarray([0.5 * k, -1.0, 2.0]), xp.asarray([1.0, 0.25 * k, -0.5])
        same(g(x, w), ember.grad(loss)(x, w))
    assert g.trace_count == 1 and calls and all(calls)  # (the VJP always got the residual)
    text = str(g.lower(x, w))
    assert " exp(" not in text  # (the VJP reads the residual: no second exp)
    assert any(line.count(": ") == 2 and "= sum_exp" in line for line in text.splitlines())


@pytest.mark.parametrize("lib", BACKENDS)
def test_jitted_cross_entropy_and_layer_norm_keep_their_residuals_as_eager_does(lib):
    # the fused loss and layer norm under jit(grad): one op yields the value and what the
    # VJP reads, so the backward pass recomputes no softmax or statistics; equal to eager
    xp = ns(lib)
    nn = ember.nn
    rng = np.random.default_rng(0)

    def loss(p, x, t):
        return nn.cross_entropy(p["norm"](x) * p["s"], t)

    p = {"norm": nn.LayerNorm(xp.asarray(rng.normal(size=3)), xp.asarray(rng.normal(size=3)), (3,)),
         "s": xp.asarray(2.0)}
    g = ember.jit(ember.value_and_grad(loss))
    for _ in range(3):
        x = xp.asarray(rng.normal(size=(4, 3)))
        t = xp.asarray(np.eye(3)[rng.integers(0, 3, 4)])
        same(g(p, x, t), ember.value_and_grad(loss)(p, x, t))
    text = str(g.lower(p, x, t))
    assert "_softmax_cross_entropy(" in text and "exp(" not in text  # (no recomputed softmax)
    assert "mean(" not in text  # (the layer norm's statistics are not recomputed)


@pytest.mark.parametrize("lib", BACKENDS)
def test_jit_only_residuals_are_kept_by_jits_graph_and_not_by_an_eager_tape(lib):
    # defresiduals(jit_only=True): jit(grad) stages the residual forward and the VJP reads
    # its slot; an eager tape keeps the input alone and the VJP recomputes (same values)
    xp = ns(lib)
    sum_exp, calls = _sum_exp_with_residuals("sum_exp_jit_only", jit_only=True)

    def loss(x, w):
        return sum_exp(x * w)

    x, w = xp.asarray([0.5, -1.0, 2.0]), xp.asarray([1.0, 0.25, -0.5])
    eager = ember.grad(loss)(x, w)
    assert calls == [False]  # (the eager node kept no residual)
    calls.clear()
    g = ember.jit(ember.grad(loss))
    for k in range(3):
        x, w = xp.asarray([0.5 * k, -1.0, 2.0]), xp.asarray([1.0, 0.25 * k, -0.5])
        eager = ember.grad(loss)(x, w)
        same(g(x, w), eager)
    assert True in calls and g.trace_count == 1
    assert " exp(" not in str(g.lower(x, w))  # (the VJP read the staged residual)


@pytest.mark.parametrize("lib", BACKENDS)
def test_jitted_gelu_reads_its_forwards_logistic_and_equals_eager(lib):
    # nn.gelu(approximate=True) under jit(grad): the backward reads the logistic factor its
    # forward op computed (no second exp) and equals the eager gradient, which recomputes it
    xp = ns(lib)
    nn = ember.nn
    rng = np.random.default_rng(0)

    def loss(w, x):
        return xp.sum(nn.gelu(nn.linear(x, w, None), approximate=True) ** 2)

    g = ember.jit(ember.grad(loss), fuse=False)  # (the subject: NumPy's calls and their buffers)
    for _ in range(3):
        w, x = xp.asarray(rng.normal(size=(5, 4))), xp.asarray(rng.normal(size=(2, 3, 4)))
        same(g(w, x), ember.grad(loss)(w, x))
    text = str(g.lower(w, x))
    assert "exp" not in text and "tanh" not in text.replace("_gelu_tanh", "")
    assert text.count("= _gelu_tanh(") == 1
    if lib == "numpy":  # (buffer planning: the op's input and its factor are fresh buffers)
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if "= _gelu_tanh(" in line)
        s = re.findall(r"(v\d+):", lines[at])[1]  # (its second result)
        x = lines[at].split("_gelu_tanh(")[1].split(")")[0]
        after = lines[at + 1:]
        assert any(f"[in place of {x}]" in line for line in after), x
        # s's last reader writes into s or into its other operand, which dies there too
        last = [line for line in after if re.search(rf"\b{s}\b", line)][-1]
        assert "[in place of v" in last, last


@pytest.mark.parametrize("lib", BACKENDS)
def test_a_fresh_primitives_results_that_share_a_buffer_are_not_overwritten_early(lib):
    # a layer norm without scale and shift returns x_hat itself as its value and keeps it
    # as a residual: one buffer behind two results of one op; jit writes into it only once
    # neither is read again, so the gradient equals eager's
    xp = ns(lib)
    fused = ad.fused
    rng = np.random.default_rng(1)

    def loss(x):
        y = fused.layer_norm(x, None, None, axes=(1,), eps=1e-5)
        return xp.sum(xp.exp(y) * y)

    g = ember.jit(ember.value_and_grad(loss))
    for _ in range(3):
        x = xp.asarray(rng.normal(size=(3, 4)))
        same(g(x), ember.value_and_grad(loss)(x))


@pytest.mark.parametrize("lib", BACKENDS)
def test_a_stacked_product_is_one_matrix_product_under_jit_as_eagerly(lib):
    # a linear layer on (batch, seq, features) and a stacked matmul with a matrix: their
    # gradients flatten the leading axes into rows while jit stages too (NumPy runs a
    # stacked product as one GEMM per matrix); values equal eager
    xp = ns(lib)
    nn = ember.nn
    rng = np.random.default_rng(2)

    def loss(w, v, x):
        return xp.sum(nn.linear(x, w, None) ** 2) + xp.sum(xp.matmul(x, v) ** 2)

    g = ember.jit(ember.grad(loss, argnums=(0, 1, 2)))
    w, v, x = (xp.asarray(rng.normal(size=s)) for s in ((5, 4), (4, 3), (2, 6, 4)))
    same(g(w, v, x), ember.grad(loss, argnums=(0, 1, 2))(w, v, x))
    products = [line for line in str(g.lower(w, v, x)).splitlines() if "= matmul(" in line]
    assert products
    if lib == "numpy":  # (an eager host backend: every product of the backward is of matrices)
        ranks = [re.search(r": \w+\[([^]]*)\]", line).group(1).count(",") + 1 for line in products]
        assert ranks[0] == 3 and ranks[1:] == [2] * (len(ranks) - 1), products  # (forward: stacked)


@pytest.mark.parametrize("lib", BACKENDS)
def test_jitted_softmax_and_layer_norm_backward_reduce_rows_as_eager_does(lib):
    # their backward passes sum along the last axis: under jit one op each that picks the
    # product with ones or the reduction on the array it runs on, as the eager rule does
    xp = ns(lib)
    nn = ember.nn
    rng = np.random.default_rng(3)
    norm = nn.LayerNorm(xp.asarray(rng.normal(size=5)), xp.asarray(rng.normal(size=5)), (5,))

    def loss(x, t):
        return xp.sum(nn.softmax(norm(x), axis=-1) * t)

    g = ember.jit(ember.grad(loss))
    for shape in ((2, 3, 5), (2, 3, 5), (8, 64, 5)):  # (512 rows: the product with ones)
        x, t = xp.asarray(rng.normal(size=shape)), xp.asarray(rng.normal(size=shape))
        same(g(x, t), ember.grad(loss)(x, t))
    assert str(g.lower(x, t)).count("= _reduce_last(") == 3  # (softmax's sum, the two means)


def test_an_array_given_twice_is_two_inputs():
    # tied arguments at the first call (f(a, a), one weight in two places) stay two inputs:
    # a later call with two different arrays must not compute with the first one twice
    xp = ns("numpy")
    a, b = xp.asarray([1.0, 2.0]), xp.asarray([3.0, 4.0])
    f = ember.jit(lambda x, w: x * w + 0.0)
    same(f(a, a), a * a)
    same(f(a, b), a * b)
    g = ember.jit(ember.grad(lambda p: xp.sum(p["enc"] * p["dec"])))
    same(g({"enc": a, "dec": a}), {"enc": a, "dec": a})
    same(g({"enc": a, "dec": b}), {"enc": b, "dec": a})
    assert f.trace_count == g.trace_count == 1


@pytest.mark.parametrize("lib", BACKENDS)
def test_fused_ops_with_residuals_under_jit_of_vmap_and_of_hessian(lib):
    # residuals are staged only for one tape right over the staging trace: under vmap (a
    # batched argument) or a second tape the node recomputes them, as eager does
    xp = ns(lib)
    nn = ember.nn
    rng = np.random.default_rng(1)
    ln = nn.LayerNorm.init((3,), xp=xp, dtype=xp.float64)
    z = xp.asarray(rng.normal(size=(4, 3)))
    t = xp.asarray(np.eye(3)[rng.integers(0, 3, 4)])
    per_example = ember.vmap(ember.grad(lambda m, a, y: nn.cross_entropy(m(a) ** 3, y)),
                             in_axes=(None, 0, 0))
    same(ember.jit(per_example)(ln, z, t), per_example(ln, z, t))
    hess = ember.hessian(lambda a: nn.cross_entropy(ln(a), t))
    same(ember.jit(hess)(z), hess(z), tol=1e-12)


@pytest.mark.parametrize("lib", BACKENDS)
def test_products_with_one_are_dropped_only_where_exact(lib):
    # x * 1 and x / 1 (a number or an array of ones) are x bit for bit (signed zeros, inf,
    # NaN) when nothing broadcasts or promotes; a one that broadcasts x or changes its dtype
    # stays an op, and so does a product that is an output
    xp = ns(lib)
    one = xp.asarray(1.0)
    ones, almost = xp.ones(3), xp.asarray([1.0, 1.0, 2.0])  # (constants of the graph)

    def f(x, y):
        x32, neg = xp.astype(x, xp.float32), xp.negative  # (outputs stay their own buffers)
        return (neg(x * one), neg(1.0 * y / 1.0), neg(x * xp.ones((2, 3))), neg(x32 * one), neg(x32 * 1.0),
                neg(ones * x), neg(x / ones), neg(x * almost))

    jf = ember.jit(f)
    x = xp.asarray([-0.0, np.inf, np.nan])
    y = xp.asarray([0.0, -2.5, -np.inf])
    for got, want in zip(jf(x, y), f(x, y)):
        np.testing.assert_array_equal(raw(got), raw(want))
        assert np.signbit(raw(got)).tolist() == np.signbit(raw(want)).tolist()
    text = str(jf.lower(x, y))
    # (kept: the broadcast, the promotion, the array not all ones)
    assert text.count("multiply(") == 3 and "divide(" not in text
    # an output stays its own buffer: writing into it leaves the input as it was
    h = ember.jit(lambda x: (x * 1.0, xp.sin(x * 1.0)))
    out, _ = h(x)
    assert "multiply(" in str(h.lower(x))
    out[0] = 5.0
    assert np.signbit(raw(x)[0]) and raw(x)[0] == 0.0
    # a complex product with one is not the value itself ((a + inf j) * 1 = nan + inf j): kept
    z = xp.asarray(np.array([complex(1.0, np.inf), complex(-0.0, -2.0)]))
    c = ember.jit(lambda z: xp.negative(z * 1.0))
    np.testing.assert_array_equal(raw(c(z)), raw(xp.negative(z * 1.0)))
    assert "multiply(" in str(c.lower(z))


def test_jitted_maximum_gradient_decides_ties_and_infs_on_each_calls_values():
    # maximum's cotangent is one staged op on NumPy: the product (with the half for ties only
    # when a tie exists) where the cotangent is finite, where() otherwise; equal to eager
    import ember.autodiff.numpy as xp

    def f(x, y, w):
        return xp.sum(xp.maximum(x, y) * w) + xp.sum(xp.minimum(x, 0.0) * w)

    g = ember.jit(ember.grad(f, argnums=(0, 1)))
    for x, y, w in [([1.0, -2.0, 3.0], [0.5, -1.0, 4.0], [1.0, 2.0, 3.0]),   # no tie
                    ([1.0, -2.0, 0.0], [1.0, -1.0, 4.0], [1.0, -2.0, 3.0]),  # a tie, a zero
                    ([1.0, -2.0, 3.0], [0.5, -1.0, 4.0], [np.inf, 2.0, -np.inf]),
                    ([1.0, -2.0, 3.0], [0.5, -1.0, 4.0], [np.inf, 2.0, 1.0]),  # inf where x wins
                    ([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1e308, 1e308, -1.0])]:  # a sum overflows
        args = [xp.asarray(a) for a in (x, y, w)]
        for got, want in zip(g(*args), ember.grad(f, argnums=(0, 1))(*args)):
            np.testing.assert_array_equal(raw(got), raw(want))
            assert np.signbit(raw(got)).tolist() == np.signbit(raw(want)).tolist()
    assert g.trace_count == 1
    assert "_ties(" in str(g.lower(*args)) and "where(" not in str(g.lower(*args))


def test_a_call_whose_structure_differs_from_the_last_ones_retraces():
    # each call's arguments are checked against the previous call's structure first
    # (TreeDef.leaves_of); a different key, length or constant is a new signature
    import ember.autodiff.numpy as xp

    f = ember.jit(lambda p, scale: {k: v * scale for k, v in p.items()})
    a, b = xp.asarray([1.0, 2.0]), xp.asarray([3.0])
    calls = [({"a": a}, 2.0), ({"a": a, "b": b}, 2.0), ({"a": a}, 2.0), ({"b": a}, 2.0),
             ({"a": a, "b": b}, 3.0), ({"a": b}, 2.0)]
    for p, scale in calls:
        got = f(p, scale)
        assert sorted(got) == sorted(p)
        for k in p:
            np.testing.assert_array_equal(raw(got[k]), raw(p[k]) * scale)
    # ({a}, {a, b}, {b}, {a, b} again with its number traced once it changed, {a} of another shape)
    assert f.trace_count == 5


def test_value_checks_come_back_after_traces_that_overlap():
    # jit and vmap turn the namespace's cheap value checks off while they trace; blocks that
    # end out of order (traces in two threads) must leave them on once the last one ends
    xp = ns("numpy")
    d = xp._dispatch
    a, b = d.unseen_values(), d.unseen_values(raw=False)
    a.__enter__()
    b.__enter__()
    assert not xp._cheap_any and not d.raw_ns._cheap_any
    a.__exit__(None, None, None)  # (the first to begin ends first)
    assert not xp._cheap_any and not d.raw_ns._cheap_any
    b.__exit__(None, None, None)
    assert xp._cheap_any and d.raw_ns._cheap_any


def test_traces_in_several_threads_leave_value_checks_on():
    import sys
    import threading

    xp = ns("numpy")
    errors = []

    def work(k):
        try:
            for i in range(30):
                x = xp.asarray(np.linspace(-1.0, 1.0, 4 + i % 3 + k))  # (a new shape: a new trace)
                f = ember.jit(lambda x: xp.sum(xp.maximum(x, 0.0) * 2.0))
                ember.vmap(ember.grad(lambda x: xp.sum(xp.maximum(x, 0.0))))(xp.reshape(x, (1, -1)))
                assert float(f(x)) == pytest.approx(float(xp.sum(xp.maximum(x, 0.0) * 2.0)), rel=1e-12)
        except Exception as e:  # (reported below, from the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads switch often: traces interleave)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert xp._cheap_any and xp._dispatch.raw_ns._cheap_any


@pytest.mark.parametrize("fuse", [True, False])
def test_a_tensor_given_twice_in_donated_arguments_is_donated_once(fuse):
    # tied weights: one Tensor at two leaves is consumed once, both read its values, and a
    # graph writing into one of them gets a copy (the other still reads the original)
    xp = ns("numpy")
    f = ember.jit(lambda p: {k: v * 2.0 for k, v in p.items()}, donate=0, fuse=fuse)
    g = ember.jit(lambda p, q: (p["a"] * 2.0, p["b"] + q), donate=0, fuse=fuse)
    for i in range(4):  # (the trace, then the generated path; distinct Tensors in between)
        a, b = xp.linspace(0.0, 1.0, 5), xp.linspace(1.0, 2.0, 5)
        tied = {"a": a, "b": a if i != 2 else b}
        out = f(tied)
        np.testing.assert_array_equal(raw(out["a"]), np.linspace(0.0, 1.0, 5) * 2.0)
        with pytest.raises(ember.ConsumedError):
            a + 1.0
        a = xp.linspace(0.0, 1.0, 5)
        x2, y2 = g({"a": a, "b": a}, xp.ones(5))
        np.testing.assert_array_equal(raw(x2), np.linspace(0.0, 1.0, 5) * 2.0)
        np.testing.assert_array_equal(raw(y2), np.linspace(0.0, 1.0, 5) + 1.0)
        a = xp.linspace(0.0, 1.0, 5)  # (also read by an argument not donated)
        x3, y3 = g({"a": a, "b": xp.zeros(5)}, a)
        np.testing.assert_array_equal(raw(x3), np.linspace(0.0, 1.0, 5) * 2.0)
        np.testing.assert_array_equal(raw(y3), np.linspace(0.0, 1.0, 5))


@pytest.mark.parametrize("fuse", [True, False])
def test_outputs_share_memory_only_where_eager_ones_do(fuse):
    # results are the caller's to write into: a folded constant is a new array each call,
    # results merged as common subexpressions are two arrays, and dropping x * 1 does not
    # make a result the input or its view; where eager results alias (x, x.T) they still do
    xp = ns("numpy")

    def loss(p, x):
        return xp.sum(x @ p["w"] + p["b"])

    g = ember.jit(ember.grad(loss), fuse=fuse)
    p, x = {"w": xp.ones((3, 2)), "b": xp.zeros(2)}, xp.ones((4, 3))
    twice = ember.jit(lambda x: (x + 1.0, x + 1.0), fuse=fuse)
    unit = ember.jit(lambda x: xp.reshape(x * 1, (6,)), fuse=fuse)
    views = ember.jit(lambda x: (x, x.T, x + 0.0), fuse=fuse)
    for _ in range(3):
        gb = g(p, x)["b"]
        np.testing.assert_array_equal(raw(gb), [4.0, 4.0])
        gb *= 0.5
        a, b = twice(xp.zeros(3))
        a += 100.0
        np.testing.assert_array_equal(raw(b), np.ones(3))
        x6 = xp.asarray(np.arange(6.0).reshape(2, 3), copy=True)
        y = unit(x6)
        y += 100.0
        np.testing.assert_array_equal(raw(x6), np.arange(6.0).reshape(2, 3))
        v = xp.ones((2, 2))
        same, t, fresh = views(v)
        assert np.shares_memory(raw(same), raw(v)) and np.shares_memory(raw(t), raw(v))
        assert not np.shares_memory(raw(fresh), raw(v))


@pytest.mark.parametrize("fuse", [True, False])
def test_zero_and_negative_zero_are_different_constants_and_arguments(fuse):
    xp = ns("numpy")
    x = xp.asarray([1.0, -2.0, 3.0])

    def f(x):
        return xp.copysign(xp.ones_like(x), x * 0.0), xp.copysign(xp.ones_like(x), x * -0.0)

    for _ in range(2):
        same(ember.jit(f, fuse=fuse)(x), f(x))
    h = ember.jit(lambda x, s: x * s, fuse=fuse)
    for s in (0.0, -0.0, 0.0, -0.0, 1.0, -0.0):  # (a constant first, then traced)
        got = raw(h(x, s))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(raw(x) * s))
    k = ember.jit(lambda x, s: x * s, static_argnums=1, fuse=fuse)
    for s in (0.0, -0.0):
        np.testing.assert_array_equal(np.signbit(raw(k(x, s))), np.signbit(raw(x) * s))



def _heads(xp, x):
    """(batch, seq, heads * d) -> (batch, heads, seq, d): a permuted view, as attention's."""
    b, s, hd = x.shape
    return xp.permute_dims(xp.reshape(x, (b, s, 4, hd // 4)), (0, 2, 1, 3))


@pytest.mark.parametrize("lib", BACKENDS)
def test_a_small_stacked_product_with_a_transposed_operand_reads_a_contiguous_copy(lib):
    # attention's q @ k^T: NumPy calls BLAS per matrix, slower on a transposed operand; the
    # jitted graph copies it first (NumPy's functions only), and a later call gets the same
    # values whatever its operand's layout
    xp = ns(lib)
    rng = np.random.default_rng(0)
    q, k = (xp.asarray(rng.standard_normal((4, 64, 128))) for _ in range(2))

    def scores(q, k):
        return _heads(xp, q) @ xp.matrix_transpose(_heads(xp, k))

    f = ember.jit(scores)
    assert ("_contiguous(" in str(f.lower(q, k))) is (lib == "numpy")
    same(f(q, k), scores(q, k), tol=1e-13)
    k_before = raw(k).copy()
    k2 = xp.asarray(np.ascontiguousarray(raw(k)[:, ::-1]))  # another call, other values
    same(f(q, k2), scores(q, k2), tol=1e-13)
    assert np.array_equal(raw(k), k_before)

    def loss(q, k):
        return xp.sum(scores(q, k) ** 2)

    for got, want in zip(ember.jit(ember.grad(loss, argnums=(0, 1)))(q, k), ember.grad(loss, argnums=(0, 1))(q, k)):
        same(got, want, tol=1e-12)


@pytest.mark.parametrize("case", ["large", "tiny", "plain", "not transposed"])
def test_other_products_keep_their_operands(case):
    xp = ns("numpy")
    rng = np.random.default_rng(0)
    sa, sb = {"large": ((4, 256, 256), (4, 256, 256)), "tiny": ((4, 8, 8), (4, 8, 8)),
              "plain": ((64, 64), (64, 64)), "not transposed": ((4, 64, 32), (4, 32, 64))}[case]
    a, b = xp.asarray(rng.standard_normal(sa)), xp.asarray(rng.standard_normal(sb))

    def f(a, b):
        return a @ (b if case == "not transposed" else xp.matrix_transpose(b))

    assert "_contiguous(" not in str(ember.jit(f).lower(a, b))


def test_a_bias_gradient_over_many_rows_equals_eager_bitwise_whatever_the_layout():
    # from kernels.reductions.LEADING_ROWS rows on, the sum over the leading axes is a product
    # with ones where the array is C-contiguous: staged as one op that decides on each call
    xp = ns("numpy")
    rng = np.random.default_rng(0)
    b = xp.asarray(rng.standard_normal(8))

    def loss(b, x):
        return xp.sum(xp.sin(x + b) * x)

    g = ember.jit(ember.grad(loss))
    for x in (rng.standard_normal((300, 8)), np.asfortranarray(rng.standard_normal((300, 8))),
              rng.standard_normal((4, 200, 8))[:, ::2]):
        xt = xp.asarray(x)
        same(g(b, xt), ember.grad(loss)(b, xt))
    assert "_reduce_leading" in str(g.lower(b, xp.asarray(rng.standard_normal((300, 8)))))


def test_a_broadcast_read_only_by_elementwise_ops_is_absorbed_by_them():
    # the gradient of a sum with keepdims, times the array summed: the product broadcasts
    xp = ns("numpy")
    x = xp.asarray(np.random.default_rng(0).standard_normal((6, 5)))

    def f(x):
        return xp.sum(xp.log(xp.sum(xp.exp(x), axis=1, keepdims=True)))

    g = ember.jit(ember.grad(f))
    assert "broadcast_to" not in str(g.lower(x))
    same(g(x), ember.grad(f)(x))

    def kept(x):  # an output, and a reader that is not elementwise: the broadcast stays
        b = xp.broadcast_to(xp.sum(x, axis=1, keepdims=True), (6, 5))
        return b, b @ xp.ones((5, 2), dtype=x.dtype), b * x

    k = ember.jit(kept)
    assert str(k.lower(x)).count("broadcast_to(") == 1
    same(k(x), kept(x))


@given(data=st.data())
@settings(**SETTINGS)
def test_two_broadcasts_meeting_in_one_op_both_stay(data):
    # meshgrid's operands: each the other's broadcast shape; dropping both would shrink it
    xp = ns("numpy")
    a, b, c = (xp.asarray(data.draw(arrays(hnp.array_shapes(max_dims=1, min_side=0, max_side=3)))) for _ in range(3))

    def pulled(a, b, c):
        out, vjp_fn = ember.vjp(lambda a, b, c: (lambda u, v, w: u * v + w)(*xp.meshgrid(a, b, c)), a, b, c)
        return out, vjp_fn(xp.ones_like(out))

    same(ember.jit(pulled)(a, b, c), pulled(a, b, c))


def test_buffer_planning_never_writes_into_a_transposed_broadcast():
    # a permuted view of a broadcast_to view repeats memory and is read-only: the multiply
    # allocates (it raised "output array is read-only")
    xp = ns("numpy")
    rng = np.random.default_rng(0)
    a, w = xp.asarray(rng.standard_normal((4, 3, 5))), xp.asarray(rng.standard_normal((1, 3, 5)))

    def f(a, w):
        t = xp.permute_dims(xp.permute_dims(a, (0, 2, 1)) * 0.5, (0, 2, 1))
        return xp.sum(xp.sum(t, axis=0, keepdims=True) * xp.exp(w))

    for fuse in (True, False):
        same(ember.jit(ember.grad(f), fuse=fuse)(a, w), ember.grad(f)(a, w))


@pytest.mark.parametrize("fuse", [False, True])
def test_mixed_memory_layouts_give_eagers_bits(fuse):
    # an in-place result keeps its buffer's layout; eager's new array may have another, and a
    # reduction's order (NumPy's pairwise sum, the product with ones) follows the layout
    xp = ns("numpy")
    rng = np.random.default_rng(0)
    x, w = xp.asarray(np.asfortranarray(rng.standard_normal((439, 4)))), xp.asarray(rng.standard_normal((439, 4)))
    b = xp.asarray(rng.standard_normal(4))

    def f(x, w, b):
        return xp.sum(xp.sin(x + b) * w)

    same(ember.jit(ember.grad(f, argnums=(0, 2)), fuse=fuse)(x, w, b), ember.grad(f, argnums=(0, 2))(x, w, b))

    def rows(x, y):
        return xp.sum(xp.exp(x) * y, axis=1)

    a, c = xp.asarray(np.asfortranarray(rng.standard_normal((2, 49)))), xp.asarray(rng.standard_normal((2, 49)))
    same(ember.jit(rows, fuse=fuse)(a, c), rows(a, c))
