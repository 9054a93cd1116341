"""ember.jit's fusion pass: small elementwise ops run as one numexpr call; the results and
gradients equal eager ones (1e-12, float64) and central differences; a value two regions read
is recomputed in each while that is cheap, else computed once; large arrays, other backends, small and wide regions stay unfused."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _TESTS)
import ember  # noqa: E402
import ember.autodiff as ad  # noqa: E402
from _gradcheck import _fd, arrays, broadcast_pair  # noqa: E402

xp = ad.namespace("numpy")
FUSES = ember.backend.fuser(ember.backend.get("numpy")) is not None
needs_fuser = pytest.mark.skipif(not FUSES, reason="numexpr is not installed (pip install ember[fuse])")
SETTINGS = dict(deadline=None, max_examples=25, suppress_health_check=list(HealthCheck))


def raw(x):
    return np.asarray(x.raw)


def calls(jitted, name, *args) -> int:
    """How many ops of the jitted graph call ``name`` (a fused op's note not counted)."""
    return len(re.findall(rf"^ +v\d+: \S+ = {name}\(", str(jitted.lower(*args)), re.M))


def n_fused(jitted, *args) -> int:
    return calls(jitted, "_fused", *args)


def loss(x, y):
    # smooth where x stays away from 0 (where) and below y + 5 (maximum): no kink for the FD
    z = xp.tanh(xp.sin(x) * y + x) * xp.exp(-y * y)
    z = xp.where(x > 0, z, 0.5 * z) + xp.maximum(x, y + 5.0) ** 2
    return xp.sum(z / (1.0 + z * z))


@needs_fuser
@settings(**SETTINGS)
@given(data=st.data())
def test_fused_gradient_equals_eager_and_central_differences(data):
    # generated broadcasting pairs, 0-d and empty arrays included (those stay unfused)
    sx, sy = data.draw(broadcast_pair(), label="shapes")
    x = data.draw(arrays(sx, away_from=0.0), label="x")
    y = data.draw(arrays(sy), label="y")
    g = ember.grad(loss, argnums=(0, 1))
    j = ember.jit(g)
    got = j(xp.asarray(x), xp.asarray(y))
    want = g(xp.asarray(x), xp.asarray(y))
    for a, b in zip(got, want):
        np.testing.assert_allclose(raw(a), raw(b), rtol=1e-12, atol=1e-12)

    def scalar(arrs):
        return float(raw(loss(xp.asarray(arrs[0]), xp.asarray(arrs[1]))))

    for i, a in enumerate(got):
        fd = _fd(scalar, [x.copy(), y.copy()], i, 1e-6)
        np.testing.assert_allclose(raw(a), fd, rtol=1e-5, atol=1e-6)
    if x.size and y.size and len(np.broadcast_shapes(sx, sy)):
        assert n_fused(j, xp.asarray(x), xp.asarray(y)) >= 1


@needs_fuser
def test_the_chain_is_one_call_and_float32_stays_float32():
    def chain(a):
        y = a
        for _ in range(10):
            y = xp.tanh(xp.exp(xp.cos(xp.sin(y) * 0.9) + a) * 0.5 + 0.1)
        return xp.sum(y)

    for dtype in (xp.float64, xp.float32):
        x = xp.asarray(np.linspace(-1, 1, 8), dtype=dtype)
        j = ember.jit(ember.grad(chain))
        got, want = j(x), ember.grad(chain)(x)
        assert got.dtype == dtype
        tol = 1e-12 if dtype == xp.float64 else 1e-5
        np.testing.assert_allclose(raw(got), raw(want), rtol=tol, atol=tol)
        assert n_fused(j, x) == 1 and calls(j, "sin", x) == 0


@needs_fuser
def test_a_value_two_regions_read_is_recomputed_in_each_while_that_is_cheap():
    def f(x):
        t = xp.sin(x) * 2.0 + 0.5  # read by the sum's region and by the output's
        return xp.sum(xp.exp(t) * 0.5 + 1.0), xp.cos(t) * 3.0 - 1.0

    x = xp.asarray(np.linspace(0, 1, 16))
    j = ember.jit(f)
    assert str(j.lower(x)).count("sin(") == 2 and n_fused(j, x) == 2  # (t: in both programs)
    for a, b in zip(j(x), f(x)):
        np.testing.assert_allclose(raw(a), raw(b), rtol=1e-12)


@needs_fuser
@pytest.mark.parametrize("n, calls_wanted", [(8, 2), (64, 3)])
def test_recomputing_stops_where_its_work_would_pass_the_limit(n, calls_wanted):
    # per step: a sin (as costly as max_elements' ratio says: 8 elements of a cheap op each)
    # and a product; ten steps on 64 elements are more work than RECOMPUTE_WORK
    from ember.func._jit_fusion import RECOMPUTE_WORK

    steps = 10
    assert steps * 8 * (8 + 1) <= RECOMPUTE_WORK < steps * 64 * (8 + 1)

    def f(x):
        t = x
        for _ in range(steps):
            t = xp.sin(t) * 0.9
        return xp.sum(xp.exp(t) * 0.5 + 1.0), xp.cos(t) * 3.0 - 1.0

    x = xp.asarray(np.linspace(0, 1, n))
    j = ember.jit(f)
    assert n_fused(j, x) == calls_wanted  # (64: part of t's chain is a call of its own)
    for a, b in zip(j(x), f(x)):
        np.testing.assert_allclose(raw(a), raw(b), rtol=1e-12)


@needs_fuser
def test_a_value_recomputed_in_a_region_left_unfused_is_still_computed():
    # the second region reads more inputs than the fuser takes: its ops stay NumPy calls,
    # t's among them, while the first region's program recomputes t
    ys = [xp.asarray(np.full(8, float(i))) for i in range(30)]

    def f(x, ys):
        t = xp.sin(x) * 2.0 + 0.5
        acc = t * 1.5
        for y in ys:
            acc = acc + y * 0.5
        return xp.sum(xp.exp(t) * 0.5 + 1.0), acc

    x = xp.asarray(np.linspace(0, 1, 8))
    j = ember.jit(f)
    assert n_fused(j, x, ys) == 1 and calls(j, "sin", x, ys) == 1
    for a, b in zip(j(x, ys), f(x, ys)):
        np.testing.assert_allclose(raw(a), raw(b), rtol=1e-12)


_UNARY = [xp.sin, xp.cos, xp.tanh, lambda a: xp.exp(xp.tanh(a)), lambda a: a * 0.75]
_BINARY = [xp.add, xp.subtract, xp.multiply, xp.maximum]


@needs_fuser
@settings(**SETTINGS)
@given(data=st.data(), n=st.sampled_from([1, 8, 64, 300]))
def test_random_graphs_with_shared_values_equal_eager(data, n):
    # values read by several regions (sums, outputs, other values), on sizes below and above
    # the recomputation limit: jit's programs equal the eager ops
    steps = data.draw(st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 3),
                                         st.integers(0, 1 << 16), st.integers(0, 1 << 16)),
                               min_size=1, max_size=30), label="steps")
    kinds = data.draw(st.lists(st.integers(0, 2), min_size=len(steps), max_size=len(steps)), label="outs")

    def f(x):
        vals = [x]
        for binary, u, b, i, k in steps:
            a = vals[i % len(vals)]
            vals.append(_BINARY[b](a, vals[k % len(vals)]) if binary else _UNARY[u](a))
        # each value: dropped (0), summed (1) or returned (2); the last one always returned
        outs = [xp.sum(v) if kind == 1 else v for v, kind in zip(vals[1:], kinds) if kind]
        return outs + [vals[-1]]

    x = xp.asarray(np.linspace(-1.0, 1.0, n))
    for a, b in zip(ember.jit(f)(x), f(x)):  # (the C library's sin and NumPy's may differ in the
        # last bit: a sum of O(1) terms that cancel keeps an absolute error of that order)
        np.testing.assert_allclose(raw(a), raw(b), rtol=1e-12, atol=1e-12)


@needs_fuser
def test_large_arrays_and_other_backends_are_not_fused_and_fuse_false_is_bitwise():
    def f(x):
        return xp.tanh(xp.sin(x) * 0.5 + 1.0)

    big = xp.asarray(np.linspace(0, 1, 1 << 12))  # (above every function's max_elements)
    assert n_fused(ember.jit(f), big) == 0
    small = xp.asarray(np.linspace(0, 1, 8))
    assert n_fused(ember.jit(lambda x: xp.sin(x) * 0.5), small) == 0  # (two ops: NumPy's calls)
    small = xp.asarray(np.linspace(0, 1, 8))
    assert n_fused(ember.jit(f, fuse=False), small) == 0
    np.testing.assert_array_equal(raw(ember.jit(f, fuse=False)(small)), raw(f(small)))
    strict = ad.namespace("array_api_strict")
    s = strict.asarray(np.linspace(0, 1, 8))
    j = ember.jit(lambda x: strict.tanh(strict.sin(x) * 0.5 + 1.0))
    assert "_fused" not in str(j.lower(s))
    np.testing.assert_allclose(np.asarray(j(s).raw), np.tanh(np.sin(np.linspace(0, 1, 8)) * 0.5 + 1.0))


@needs_fuser
def test_a_region_with_more_inputs_than_the_fuser_takes_stays_as_it_was():
    def f(*xs):
        acc = xs[0] * 1.5
        for x in xs[1:]:
            acc = acc + x * 0.5
        return acc

    xs = [xp.asarray(np.full(4, float(i))) for i in range(40)]
    j = ember.jit(f)
    assert n_fused(j, *xs) == 0
    np.testing.assert_array_equal(raw(j(*xs)), raw(f(*xs)))


@needs_fuser
def test_a_fused_call_writes_into_a_donated_input():
    def step(w, g):
        return w - 0.1 * xp.tanh(g)

    f = ember.jit(step, donate=0)
    g = xp.asarray(np.linspace(-1, 1, 8))
    for _ in range(2):
        w = xp.linspace(0.0, 1.0, 8)  # (ember's own buffer: a NumPy array given to asarray is borrowed)
        at = w.raw.__array_interface__["data"][0]
        want = np.linspace(0, 1, 8) - 0.1 * np.tanh(np.linspace(-1, 1, 8))
        out = f(w, g)
        assert out.raw.__array_interface__["data"][0] == at
        np.testing.assert_allclose(raw(out), want, rtol=1e-15)
    assert "in place of" in str(f.lower(xp.asarray(np.zeros(8)), g))


@needs_fuser
def test_a_fused_call_reading_the_donated_buffer_through_a_view_does_not_write_into_it():
    # the update reads w reversed or transposed while it would be written: a new buffer instead
    def flip(w, g):
        return (w * 0.5 + g) - w[::-1]

    def transpose(w, g):
        return (w * 0.5 + g) - xp.matrix_transpose(w)

    for f, shape in ((flip, (8,)), (transpose, (4, 4))):
        j = ember.jit(f, donate=0)
        a = np.arange(float(np.prod(shape))).reshape(shape)
        want = raw(f(xp.asarray(a), xp.asarray(np.ones(shape))))
        w = xp.reshape(xp.arange(float(np.prod(shape))), shape)
        np.testing.assert_array_equal(raw(j(w, xp.asarray(np.ones(shape)))), want)
        w = xp.reshape(xp.arange(float(np.prod(shape))), shape)
        listing = str(j.lower(w, xp.asarray(np.ones(shape))))
        assert n_fused(j, w, xp.asarray(np.ones(shape))) == 1 and "in place of" not in listing


@pytest.mark.gpu
def test_cupy_jitted_chain_is_one_kernel_and_equals_eager():
    cp = ad.namespace("cupy")

    def chain(a):
        y = a
        for _ in range(10):
            y = cp.tanh(cp.exp(cp.cos(cp.sin(y) * 0.9) + a) * 0.5 + 0.1)
        return cp.sum(y)

    x = cp.asarray(np.linspace(-1, 1, 4096))
    j = ember.jit(ember.grad(chain))
    got, want = j(x), ember.grad(chain)(x)
    np.testing.assert_allclose(np.asarray(got.raw.get()), np.asarray(want.raw.get()), rtol=1e-12, atol=1e-12)
    assert n_fused(j, x) == 1 and calls(j, "sin", x) == 0

