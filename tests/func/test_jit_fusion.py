"""ember.jit's fusion pass: small elementwise ops run as one numexpr call; the results and
gradients equal eager ones (1e-12, float64) and central differences; values read by two
regions are computed once; large arrays, other backends, small and wide regions stay unfused."""

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
def test_a_value_two_regions_read_is_computed_once():
    def f(x):
        t = xp.sin(x) * 2.0 + 0.5  # read by the sum's region and by the output's
        return xp.sum(xp.exp(t) * 0.5 + 1.0), xp.cos(t) * 3.0 - 1.0

    x = xp.asarray(np.linspace(0, 1, 16))
    j = ember.jit(f)
    assert str(j.lower(x)).count("sin(") == 1 and n_fused(j, x) == 3  # (t: a region of its own)
    for a, b in zip(j(x), f(x)):
        np.testing.assert_allclose(raw(a), raw(b), rtol=1e-12)


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
