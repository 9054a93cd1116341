"""ember.backend.fuser: numexpr programs that ember writes compute what NumPy computes,
special values included; registers are reused; a program too wide to compile says so."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember.backend as eb
from ember.backend._fusion import SIGNATURES

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _fusion_cases import SPECIAL, _arity, _ref, random_program  # noqa: E402

FUSER = eb.fuser(eb.get("numpy"))
pytestmark = pytest.mark.skipif(FUSER is None, reason="numexpr is not installed (pip install ember[fuse])")

@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_each_function_equals_numpy_on_special_values(name, dtype):
    kind = SIGNATURES[name]
    n = _arity(name)
    a, b = np.meshgrid(np.array(SPECIAL, dtype), np.array(SPECIAL, dtype))
    a, b = a.ravel(), b.ravel()
    if kind == "logic":
        ins, dts = [a > 0, b > 0][:n], ["bool"] * n
    elif kind == "where":
        ins, dts = [a > b, a, b], ["bool", dtype, dtype]
    else:
        ins, dts = [a, b][:n], [dtype] * n
    real = "bool" if kind == "logic" else dtype
    program = [(name, real, [("in", k) for k in range(n)])]
    with np.errstate(all="ignore"):
        got = FUSER.compile(program, dts)(*ins)
        want = _ref(name)(*ins)
    assert got.dtype == want.dtype
    tol = 1e-6 if dtype == "float32" else 1e-14
    if name in ("pow",) or (kind == "float" and name not in ("add", "subtract", "multiply", "divide", "negative",
                                                             "positive", "square", "abs", "floor", "ceil", "trunc",
                                                             "copysign", "maximum", "minimum", "sqrt")):
        np.testing.assert_allclose(got, want, rtol=tol, atol=0, equal_nan=True)
    else:  # (one IEEE operation: exact, signed zeros and NaN included)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@settings(deadline=None, max_examples=30, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(["float64", "float32"]))
def test_random_programs_equal_numpy(data, dtype):
    # a random straight-line program of shared values (each instruction may read any earlier
    # one, an input of a broadcastable shape or a number) against the same NumPy calls
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), label="shape")
    ins = [data.draw(hnp.arrays(dtype, s, elements=st.floats(-2, 2, width=32)), label="input")
           for s in (shape, shape[1:] or shape, shape)]
    names = ["add", "subtract", "multiply", "divide", "sin", "tanh", "exp", "square", "negative", "maximum",
             "where", "greater", "positive"]
    program, last = random_program(lambda options, label: data.draw(st.sampled_from(options), label=label),
                                   data.draw(st.integers(1, 25), label="length"), ins, dtype, names,
                                   ("multiply", "add"), [0.5])
    if not program or program[-1][0] == "greater":
        return
    with np.errstate(all="ignore"):
        got = FUSER.compile(program, [dtype] * 3)(*ins)
    want = np.broadcast_to(last, got.shape)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6, equal_nan=True)


def test_registers_are_reused_and_a_program_too_wide_raises():
    x = np.linspace(0.1, 1.0, 8)
    long = [("sin", "float64", [("in", 0)])]
    for i in range(1, 1000):  # (each value read once: one register serves all of them)
        long.append(("multiply" if i % 2 else "cos", "float64", [("node", i - 1)] + ([("const", 0.5)] if i % 2 else [])))
    want = x
    for i, (name, _, _) in enumerate(long):
        want = np.sin(want) if i == 0 else (want * 0.5 if name == "multiply" else np.cos(want))
    np.testing.assert_allclose(FUSER.compile(long, ["float64"])(x), want, rtol=1e-14)
    wide = [("sin", "float64", [("in", 0)]) for _ in range(300)]  # (all alive until the sum)
    wide += [("add", "float64", [("node", 0), ("node", 1)])]
    for i in range(2, 300):
        wide.append(("add", "float64", [("node", len(wide) - 1), ("node", i)]))
    with pytest.raises(ValueError, match="too many values"):
        FUSER.compile(wide, ["float64"])


def test_only_numpy_arrays_have_a_fuser():
    assert eb.fuser(eb.get("array_api_strict")) is None
    assert FUSER.name == "numexpr" and FUSER.dtypes == {"float32", "float64"}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("exponent", [0.5, 2.0, -1.0, 3.0])
def test_a_constant_power_equals_numpy_on_special_values(exponent, dtype):
    # NumPy computes x ** 0.5 as sqrt(x): -inf and -0.0 give nan and -0.0, not C pow's inf, 0
    x = np.array(SPECIAL, dtype)
    program = [("pow", dtype, [("in", 0), ("const", exponent)]), ("add", dtype, [("node", 0), ("const", 0.0)])]
    with np.errstate(all="ignore"):
        got = FUSER.compile(program, [dtype])(x)
        want = np.power(x, exponent) + 0.0
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
