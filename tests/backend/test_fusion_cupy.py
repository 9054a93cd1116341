"""CuPy's fuser on a GPU: each function's kernel equals NumPy on special values, a random
program of shared values equals CuPy's own calls, and a kernel writes into ``out``.
Skipped without a CUDA device; test_fusion_kernel_source.py checks the same kernels' source
compiled for the CPU, and tests/gpu/run.sh runs these on a GPU."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import ember.backend as eb
from ember.backend._fusion import SIGNATURES

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _fusion_cases import SPECIAL, _arity, _ref  # noqa: E402

pytestmark = pytest.mark.gpu

_EXACT = {"add", "subtract", "multiply", "divide", "negative", "positive", "square", "abs", "floor", "ceil",
          "trunc", "copysign", "maximum", "minimum", "sqrt"}


def _fuser():
    f = eb.fuser(eb.get("cupy"))
    assert f is not None and f.name == "cupy"
    return f


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cupy_kernels_equal_numpy_on_special_values(dtype):
    import cupy

    f = _fuser()
    for name in sorted(SIGNATURES):
        kind, n = SIGNATURES[name], _arity(name)
        a, b = np.meshgrid(np.array(SPECIAL, dtype), np.array(SPECIAL, dtype))
        a, b = a.ravel(), b.ravel()
        ins, dts = (([a > 0, b > 0][:n], ["bool"] * n) if kind == "logic" else
                    ([a > b, a, b], ["bool", dtype, dtype]) if kind == "where" else ([a, b][:n], [dtype] * n))
        real = "bool" if kind == "logic" else dtype
        got = cupy.asnumpy(f.compile([(name, real, [("in", k) for k in range(n)])], dts)(
            *[cupy.asarray(x) for x in ins]))
        with np.errstate(all="ignore"):
            want = _ref(name)(*ins)
        assert got.dtype == want.dtype, name
        if kind == "float" and name not in _EXACT:
            np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-13, atol=0,
                                       equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


def test_cupy_kernel_with_numbers_broadcasts_and_writes_into_out():
    import cupy

    f = _fuser()
    program = [("sin", "float32", [("in", 0)]), ("multiply", "float32", [("node", 0), ("const", 0.5)]),
               ("add", "float32", [("node", 1), ("in", 1)]), ("maximum", "float32", [("node", 2), ("const", 0.0)])]
    x = cupy.linspace(-3, 3, 12, dtype=cupy.float32).reshape(3, 4)
    y = cupy.linspace(-1, 1, 4, dtype=cupy.float32)
    fn = f.compile(program, ["float32", "float32"])
    want = cupy.maximum(cupy.sin(x) * 0.5 + y, 0.0)
    out = fn(x, y)
    assert out.dtype == cupy.float32 and out.shape == (3, 4)
    cupy.testing.assert_allclose(out, want, rtol=1e-6)
    fn(x, y, out=x)  # (into an input's buffer, as jit's buffer planning asks)
    cupy.testing.assert_allclose(x, want, rtol=1e-6)
