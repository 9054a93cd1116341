"""The CUDA kernels of CuPy's fuser, compiled for the CPU: ``kernel_source`` writes C++ that
uses only operators and ``<cmath>`` functions overloaded on float and double, as CUDA's are,
so the same text built by the system's C++ compiler must compute what NumPy computes,
special values included. (On a GPU, ``tests/gpu/run.sh`` runs the kernels themselves:
the ``cupy`` tests of test_fusion.py and test_jit_fusion.py.)"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from ember.backend._fusion import SIGNATURES, kernel_source

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _fusion_cases import SPECIAL, _arity, _ref, random_program  # noqa: E402

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler to build the kernels' source for "
                                "the CPU; tests/gpu/run.sh runs them on a GPU")

_C = {"float64": "double", "float32": "float", "bool": "bool"}
_CT = {"float64": ctypes.c_double, "float32": ctypes.c_float, "bool": ctypes.c_bool}


def _loop(fname, params, arrays, out_dtype, out_name, body) -> str:
    """A C function running a kernel's ``body`` over ``n`` elements: the parameters at the
    indices ``arrays`` are contiguous arrays read element by element, the others scalars."""
    args, loads = ["long n"], []
    for k, (d, name) in enumerate(params):
        if k in arrays:
            args.append(f"const {_C[d]}* p_{name}")
            loads.append(f"const {_C[d]} {name} = p_{name}[i];")
        else:
            args.append(f"{_C[d]} {name}")
    args.append(f"{_C[out_dtype]}* p_out")
    return (f'extern "C" void {fname}({", ".join(args)}) {{\n  for (long i = 0; i < n; ++i) {{\n'
            + "\n".join(loads) + f"\n{_C[out_dtype]} {out_name};\n{body}\np_out[i] = {out_name};\n  }}\n}}")


def _compile(functions: list, stem: str, tmp_path) -> ctypes.CDLL:
    """A shared library of ``functions`` (C sources), built by the system's C++ compiler."""
    cpp, lib = tmp_path / f"{stem}.cpp", tmp_path / f"{stem}.so"
    cpp.write_text("\n".join(["#include <cmath>", "using namespace std;", *functions]))
    subprocess.run([CXX, "-O1", "-shared", "-fPIC", "-o", str(lib), str(cpp)], check=True,
                   capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


def _build(kernels: dict, tmp_path) -> ctypes.CDLL:
    """One shared library with a C function per ``{name: (program, input_dtypes)}``: each
    runs the kernel's body over ``n`` elements of contiguous inputs."""
    functions = []
    for fname, (program, dtypes) in kernels.items():
        params, out, body, _ = kernel_source(program, dtypes)
        functions.append(_loop(fname, params, range(len(dtypes)), out, "out0", body))
    return _compile(functions, "kernels", tmp_path)


def _run(lib, fname, program, dtypes, arrays):
    params, out, _, consts = kernel_source(program, dtypes)
    arrays = [np.ascontiguousarray(a, dtype=d) for a, d in zip(np.broadcast_arrays(*arrays), dtypes)]
    result = np.empty(arrays[0].shape if arrays else (), dtype=out)
    call = getattr(lib, fname)
    call.restype = None
    args = [ctypes.c_long(result.size)] + [a.ctypes.data_as(ctypes.c_void_p) for a in arrays]
    args += [_CT[d](v) for (d, _), v in zip(params[len(dtypes):], consts)]
    args.append(result.ctypes.data_as(ctypes.c_void_p))
    call(*args)
    return result


def _inputs(name, dtype):
    kind, n = SIGNATURES[name], _arity(name)
    a, b = np.meshgrid(np.array(SPECIAL, dtype), np.array(SPECIAL, dtype))
    a, b = a.ravel(), b.ravel()
    if kind == "logic":
        return [a > 0, b > 0][:n], ["bool"] * n
    if kind == "where":
        return [a > b, a, b], ["bool", dtype, dtype]
    return [a, b][:n], [dtype] * n


_EXACT = {"add", "subtract", "multiply", "divide", "negative", "positive", "square", "abs", "floor", "ceil",
          "trunc", "copysign", "maximum", "minimum", "sqrt"}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_each_function_equals_numpy_on_special_values(dtype, tmp_path):
    kernels = {}
    for name in sorted(SIGNATURES):
        ins, dts = _inputs(name, dtype)
        real = "bool" if SIGNATURES[name] == "logic" else dtype
        kernels[f"k_{name}"] = ([(name, real, [("in", k) for k in range(len(dts))])], dts)
    lib = _build(kernels, tmp_path)
    for name in sorted(SIGNATURES):
        ins, dts = _inputs(name, dtype)
        got = _run(lib, f"k_{name}", *kernels[f"k_{name}"], ins)
        with np.errstate(all="ignore"):
            want = _ref(name)(*ins)
        assert got.dtype == want.dtype, name
        if SIGNATURES[name] == "float" and name not in _EXACT:  # (the C library's, not NumPy's)
            np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-14, atol=0,
                                       equal_nan=True, err_msg=name)
        else:  # (one IEEE operation: exact, signed zeros and NaN included)
            np.testing.assert_array_equal(got, want, err_msg=name)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


def _random_program(rng, dtype):
    """A random program of shared values over three inputs (``random_program``), its inputs
    and NumPy's value of its last instruction."""
    names = ["add", "subtract", "multiply", "divide", "sin", "tanh", "exp", "square", "negative", "maximum",
             "minimum", "where", "greater", "positive", "pow", "hypot"]
    ins = [rng.uniform(-2, 2, 6).astype(dtype) for _ in range(3)]
    program, last = random_program(lambda options, label: options[rng.integers(len(options))],
                                   rng.integers(1, 25), ins, dtype, names, ("multiply", "add", "maximum"),
                                   [0.5, -0.0, 3.0])
    return program, ins, last


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_random_programs_equal_numpy(dtype, tmp_path):
    rng = np.random.default_rng(7)
    cases = [_random_program(rng, dtype) for _ in range(60)]
    cases = [c for c in cases if c[0]]
    lib = _build({f"p{i}": (c[0], [dtype] * 3) for i, c in enumerate(cases)}, tmp_path)
    for i, (program, ins, want) in enumerate(cases):
        got = _run(lib, f"p{i}", program, [dtype] * 3, ins)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6,
                                   equal_nan=True, err_msg=str(program))


class _CpuElementwiseKernel:
    """CuPy's ``ElementwiseKernel(in_params, out_params, operation, name)`` on the CPU: the
    parameter strings parsed as CuPy parses them, the operation compiled by the system's C++
    compiler, called with the inputs (arrays broadcast, numbers as scalars) and optionally
    the output array, positionally, as CuPy's kernels are."""

    def __init__(self, in_params, out_params, operation, name, tmp_path):
        self.ins = [p.split() for p in in_params.split(",")]
        (self.out_dtype, self.out_name), = [p.split() for p in out_params.split(",")]
        self.operation, self.name, self.tmp_path = operation, name, tmp_path

    def __call__(self, *args):
        ins, out = args[:len(self.ins)], args[len(self.ins):]
        arrays = [k for k, a in enumerate(ins) if isinstance(a, np.ndarray)]
        lib = _compile([_loop(self.name, self.ins, arrays, self.out_dtype, self.out_name, self.operation)],
                       self.name, self.tmp_path)
        shape = np.broadcast_shapes(*[ins[k].shape for k in arrays], *[o.shape for o in out])
        result = np.empty(shape, self.out_dtype)
        call_args = [ctypes.c_long(result.size)]
        for k, (d, _) in enumerate(self.ins):
            if k in arrays:
                a = np.ascontiguousarray(np.broadcast_to(ins[k], shape), dtype=d)
                call_args.append(a.ctypes.data_as(ctypes.c_void_p))
                ins = ins[:k] + (a,) + ins[k + 1:]  # (kept alive until the call)
            else:
                call_args.append(_CT[d](ins[k]))
        call_args.append(result.ctypes.data_as(ctypes.c_void_p))
        getattr(lib, self.name)(*call_args)
        if out:
            out[0][...] = result
            return out[0]
        return result


def test_the_cupy_fuser_hands_cupy_its_kernel_as_cupy_calls_them(tmp_path):
    # the wiring around kernel_source: the parameter strings, numbers after the inputs, the
    # output array last (how jit's buffer planning writes into a donated input)
    from ember.backend._fusion import _cupy_fuser

    class CpuCupy:
        @staticmethod
        def ElementwiseKernel(in_params, out_params, operation, name):  # noqa: N802 (CuPy's name)
            return _CpuElementwiseKernel(in_params, out_params, operation, name, tmp_path)

    f = _cupy_fuser(CpuCupy)
    program = [("sin", "float32", [("in", 0)]), ("multiply", "float32", [("node", 0), ("const", 0.5)]),
               ("add", "float32", [("node", 1), ("in", 1)]), ("maximum", "float32", [("node", 2), ("const", 0.0)]),
               ("where", "float32", [("in", 2), ("node", 3), ("const", -0.5)])]
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    y = np.linspace(-1, 1, 4, dtype=np.float32)
    c = x > 0
    want = np.where(c, np.maximum(np.sin(x) * np.float32(0.5) + y, np.float32(0.0)), np.float32(-0.5))
    fn = f.compile(program, ["float32", "float32", "bool"])
    got = fn(x, y, c)
    assert got.dtype == np.float32 and got.shape == (3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert fn(x, y, c, out=x) is x  # (into an input's buffer)
    np.testing.assert_allclose(x, want, rtol=1e-6)
    assert f.name == "cupy" and f.out_params == {} and set(f.dtypes) == {"float32", "float64"}
