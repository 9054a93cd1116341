"""Elementwise fusion: a graph of elementwise functions compiled into one backend call.

A jitted graph of many small elementwise calls pays the library's fixed cost
per call for each of them (on small arrays, most of the time: docs/performance.md);
a backend's *fuser* turns a whole graph of them into one call. NumPy's comes
from numexpr (the ``fuse`` extra): ember writes the program of numexpr's virtual machine itself, one
instruction per function and one register per value, so a value read by
several functions is computed once. CuPy's writes one CUDA elementwise kernel
per program (``kernel_source``: C++ whose text also builds for the CPU, which
is how the tests check it without a GPU). Like every ability it is probed,
here on first use (numexpr's import is not paid by programs that never jit):
a backend without a fuser runs its calls as they are.

A program is a list of instructions ``(name, dtype, args)`` in order: ``name``
an array-API function, ``dtype`` the real dtype its operands compute in
(``"bool"`` for logical functions), each arg ``("in", k)`` (the k-th input),
``("const", number)`` or ``("node", j)`` (instruction j's result). The last
instruction's result is the call's result.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from ember.backend._registry import _probe_once

__all__ = ["Fuser", "fuser"]

#: function -> signature class: "float" (real floating operands and result), "compare"
#: (real floating operands, bool result), "logic" (bool operands and result), "where"
#: ((bool, float, float) -> float)
SIGNATURES = {
    **{n: "float" for n in (
        "add", "subtract", "multiply", "divide", "pow", "negative", "positive", "square", "sqrt",
        "abs", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
        "asinh", "acosh", "atanh", "exp", "expm1", "log", "log1p", "log2", "log10", "floor",
        "ceil", "trunc", "hypot", "copysign", "maximum", "minimum")},
    **{n: "compare" for n in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal")},
    **{n: "logic" for n in ("logical_and", "logical_or", "logical_xor", "logical_not",
                            "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert")},
    "where": "where",
}
#: functions one instruction computes: numexpr runs the others (a polynomial or a library
#: call per element) slower per element than NumPy's vector loops
_CHEAP = frozenset({"add", "subtract", "multiply", "divide", "negative", "positive", "square",
                    "abs", "floor", "ceil", "trunc", "copysign", "maximum", "minimum", "where"}
                   | {n for n, k in SIGNATURES.items() if k in ("compare", "logic")})


@dataclass(frozen=True)
class Fuser:
    """A backend's elementwise compiler.

    Attributes:
        name: the library that compiles (``"numexpr"``, ``"cupy"``).
        signatures: array-API function name -> its signature class (``"float"``,
            ``"compare"``, ``"logic"``, ``"where"``) for the functions it compiles.
        dtypes: the real floating dtypes (names) it computes in; bools are always allowed.
        max_inputs: the most inputs one compiled call takes.
        max_elements: function name -> the largest result (elements) worth fusing: above
            it one library call per function is as fast as the fused one (measured in
            ``benchmarks/fusion.py``).
        out_params: the keywords a compiled call takes beside ``out=`` to write its
            result into an existing array of the result's shape and dtype (which may be
            one of its inputs).
    """

    name: str
    signatures: dict = field(repr=False)
    dtypes: frozenset
    max_inputs: int
    max_elements: dict = field(repr=False)
    out_params: dict = field(repr=False)
    _compile: Callable = field(repr=False)

    def compile(self, program: list, input_dtypes: list[str]) -> Callable:
        """One function of the inputs (backend arrays of ``input_dtypes``, in order)
        computing ``program`` (see the module docstring); it raises ValueError when the
        library cannot compile it (too many values alive at once)."""
        return self._compile(program, input_dtypes)


# --- numexpr ------------------------------------------------------------------

_OPS = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "pow": "pow",
        "negative": "neg", "sqrt": "sqrt", "where": "where", "greater": "gt", "greater_equal": "ge",
        "equal": "eq", "not_equal": "ne", "logical_and": "and", "bitwise_and": "and",
        "logical_or": "or", "bitwise_or": "or", "logical_xor": "xor", "bitwise_xor": "xor",
        "logical_not": "invert", "bitwise_invert": "invert"}
_SWAPPED = {"less": "gt", "less_equal": "ge"}  # (numexpr has a > b, not b < a)
_FUNCS = {"abs": "absolute", "asin": "arcsin", "acos": "arccos", "atan": "arctan", "atan2": "arctan2",
          "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh"}
_CODES = {"float64": "d", "float32": "f", "bool": "b"}
_REGISTERS = 255  # (one byte a register; 255 means "none")


def _numexpr_fuser(interpreter: Any, np: Any) -> Fuser:
    opcodes, funccodes = interpreter.opcodes, interpreter.funccodes
    number = {"float64": float, "float32": np.float32, "bool": bool}

    def instruction(name: str, dtype: str, out: int, regs: list) -> bytes:
        """The VM instruction(s) of ``name`` writing register ``out`` from ``regs``."""
        t = _CODES[dtype]
        kind = SIGNATURES[name]
        if name in _SWAPPED:
            name, regs = _SWAPPED[name], regs[::-1]
        elif name == "square":
            name, regs = "multiply", regs * 2
        ret = "b" if kind in ("compare", "logic") else t
        args = "b" + t + t if kind == "where" else ("b" if kind == "logic" else t) * len(regs)
        op = opcodes.get(f"{_OPS.get(name, name)}_{ret}{args}".encode())
        if op is not None:
            if len(regs) == 3:  # (a third operand goes into a no-op instruction after it)
                return bytes([op, out, *regs[:2], opcodes[b"noop"], regs[2], 255, 255])
            return bytes([op, out, *regs] + [255] * (2 - len(regs)))
        code = funccodes.get(f"{_FUNCS.get(name, name)}_{ret}{args}".encode())
        op = opcodes.get(f"func_{ret}{args}n".encode())
        if code is None or op is None:
            raise ValueError(f"numexpr has no {name} on {dtype}")
        if len(regs) == 2:  # (the function's code goes into a no-op instruction after it)
            return bytes([op, out, *regs, opcodes[b"noop"], code, 255, 255])
        return bytes([op, out, *regs, code])

    def const_key(dtype: str, v: Any) -> tuple:
        return ("bool" if v.__class__ is bool else dtype, repr(v))  # (repr: -0.0 is not 0.0)

    def compile_program(program: list, input_dtypes: list[str]) -> Callable:
        # registers: 0 the result, then the inputs, the constants, the temporaries
        n_in = len(input_dtypes)
        end = len(program) - 1
        # a `positive` is its operand: the instructions reading it read that operand instead
        same: dict = {}
        resolved = []
        for i, (name, dtype, args) in enumerate(program):
            args = [same.get(a[1], a) if a[0] == "node" else a for a in args]
            if name == "positive" and i != end:
                same[i] = args[0]
            elif name == "pow" and args[1] == ("const", 0.5):
                # NumPy takes x ** 0.5 as sqrt(x) (C's pow differs at -inf and -0.0)
                name, args = "sqrt", args[:1]
            resolved.append((name, dtype, args))
        program = resolved
        consts: list = []
        const_reg: dict = {}
        last: dict = {}  # instruction -> the last instruction reading its result
        for i, (name, dtype, args) in enumerate(program):
            if i in same:
                continue
            for a in args:
                if a[0] == "node":
                    last[a[1]] = i
                elif a[0] == "const":
                    k = const_key(dtype, a[1])
                    if k not in const_reg:
                        const_reg[k] = 1 + n_in + len(consts)
                        consts.append(number[k[0]](a[1]))
        first_temp = 1 + n_in + len(consts)
        reg: dict = {}
        free: dict = {}  # typecode -> free temporary registers
        temps: list = []  # typecode of each temporary
        code = []
        for i, (name, dtype, args) in enumerate(program):
            if i in same:  # (no instruction)
                continue
            regs = [1 + a[1] if a[0] == "in" else const_reg[const_key(dtype, a[1])] if a[0] == "const"
                    else reg[a[1]] for a in args]
            out = "b" if SIGNATURES[name] in ("compare", "logic") else _CODES[dtype]
            for a in args:  # (operands read for the last time give their registers back)
                if a[0] == "node" and last[a[1]] == i and reg[a[1]] >= first_temp:
                    free.setdefault(temps[reg[a[1]] - first_temp], []).append(reg[a[1]])
                    last[a[1]] = -1  # (an operand given twice is given back once)
            if i == end:
                r = 0
            elif free.get(out):
                r = free[out].pop()
            else:
                r = first_temp + len(temps)
                temps.append(out)
                if r >= _REGISTERS:
                    raise ValueError("numexpr: too many values alive at once")
            reg[i] = r
            if name == "positive":
                code.append(bytes([opcodes[f"copy_{out}{out}".encode()], r, regs[0], 255]))
            else:
                code.append(instruction(name, dtype, r, regs))
        sig = "".join(_CODES[d] for d in input_dtypes).encode()
        try:
            return interpreter.NumExpr(sig, "".join(temps).encode(), b"".join(code), tuple(consts),
                                       tuple(f"a{k}" for k in range(n_in)))
        except (ValueError, TypeError, RuntimeError) as e:
            raise ValueError(f"numexpr could not compile the fused program: {e}") from e

    small, cheap = 64, 512  # elements: see Fuser.max_elements
    return Fuser(
        name="numexpr",
        signatures=dict(SIGNATURES),
        dtypes=frozenset({"float32", "float64"}),
        max_inputs=24,  # (NumPy 1.x iterates at most 32 operands, the result included)
        max_elements={n: cheap if n in _CHEAP else small for n in SIGNATURES},
        out_params={"ex_uses_vml": False},
        _compile=compile_program,
    )


def _probe_numexpr(lib: Any) -> Fuser | None:
    """numexpr's fuser when numexpr imports, has the VM ember writes for, and computes on
    ``lib``'s arrays."""
    try:
        import numpy as np
        from numexpr import interpreter
    except ImportError:
        return None
    try:
        a = lib.asarray([1.0, 2.0])
        if type(a) is not np.ndarray:
            return None
        f = _numexpr_fuser(interpreter, np)
        program = [("sin", "float64", [("in", 0)]), ("multiply", "float64", [("node", 0), ("const", 2)]),
                   ("add", "float64", [("node", 1), ("in", 1)])]
        out = f.compile(program, ["float64", "float64"])(a, a)
        want = np.sin(a) * 2.0 + a
        return f if type(out) is np.ndarray and np.array_equal(out, want) else None
    except Exception:
        return None


# --- CuPy: a CUDA elementwise kernel -------------------------------------------

#: C operators of the functions that are one (``a OP b``; the logical ones on bools)
_C_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "less": "<", "less_equal": "<=",
            "greater": ">", "greater_equal": ">=", "equal": "==", "not_equal": "!=", "logical_and": "&&",
            "bitwise_and": "&&", "logical_or": "||", "bitwise_or": "||", "logical_xor": "!=",
            "bitwise_xor": "!="}
#: C++ math functions (overloaded on float and double, as CUDA's are) of other names
_C_FUNCS = {"abs": "fabs"}
_C_TYPES = {"float64": "double", "float32": "float", "bool": "bool"}


def kernel_source(program: list, input_dtypes: list[str]) -> tuple[list, str, str, list]:
    """The parts of an elementwise kernel computing ``program``: its parameters
    ``[(dtype, name)]`` (the inputs ``in0``..., then the program's numbers ``c0``...,
    scalars), its result's dtype (``out0``), its body (C++, one ``const`` temporary per
    instruction) and the numbers to pass after the inputs.

    The body uses only C++ operators and ``<cmath>`` functions, overloaded on float and
    double as CUDA's device functions are: the same text compiles for a GPU (CuPy's
    ``ElementwiseKernel``) and, in the tests, for the CPU.
    """
    params = [(d, f"in{k}") for k, d in enumerate(input_dtypes)]
    consts: list = []
    const_name: dict = {}
    lines = []
    out = None
    for i, (name, dtype, args) in enumerate(program):
        ops = []
        for a in args:
            if a[0] == "in":
                ops.append(f"in{a[1]}")
            elif a[0] == "node":
                ops.append(f"t{a[1]}")
            else:
                v = a[1]
                d = "bool" if v.__class__ is bool else dtype
                key = (d, repr(v))  # (repr: -0.0 is not 0.0)
                if key not in const_name:
                    const_name[key] = f"c{len(consts)}"
                    params.append((d, const_name[key]))
                    consts.append(v)
                ops.append(const_name[key])
        kind = SIGNATURES[name]
        out = "bool" if kind in ("compare", "logic") else dtype
        if name in _C_INFIX:
            expr = f"({ops[0]} {_C_INFIX[name]} {ops[1]})"
        elif name in ("negative", "logical_not", "bitwise_invert"):
            expr = f"({'-' if name == 'negative' else '!'}{ops[0]})"
        elif name == "positive":
            expr = ops[0]
        elif name == "square":
            expr = f"({ops[0]} * {ops[0]})"
        elif name in ("maximum", "minimum"):  # (NaN from either side and, on a tie such as
            # -0.0 and 0.0, the second operand: as NumPy's)
            cmp = ">" if name == "maximum" else "<"
            expr = f"(({ops[0]} != {ops[0]} || {ops[0]} {cmp} {ops[1]}) ? {ops[0]} : {ops[1]})"
        elif name == "where":
            expr = f"({ops[0]} ? {ops[1]} : {ops[2]})"
        else:
            expr = f"{_C_FUNCS.get(name, name)}({', '.join(ops)})"
        lines.append(f"const {_C_TYPES[out]} t{i} = {expr};")
    lines.append(f"out0 = t{len(program) - 1};")
    return params, out, "\n".join(lines), consts


def _cupy_fuser(cupy: Any) -> Fuser:
    def compile_program(program: list, input_dtypes: list[str]) -> Callable:
        params, out, body, consts = kernel_source(program, input_dtypes)
        kernel = cupy.ElementwiseKernel(", ".join(f"{d} {n}" for d, n in params), f"{out} out0", body,
                                        "ember_fused")
        extra = tuple(consts)

        def run(*arrays, out=None):
            return kernel(*arrays, *extra) if out is None else kernel(*arrays, *extra, out)

        return run

    every = 1 << 62  # (one kernel reads and writes memory once: worth it at any size)
    return Fuser(
        name="cupy",
        signatures=dict(SIGNATURES),
        dtypes=frozenset({"float32", "float64"}),
        max_inputs=64,
        max_elements=dict.fromkeys(SIGNATURES, every),
        out_params={},
        _compile=compile_program,
    )


def _probe_cupy(lib: Any) -> Fuser | None:
    """CuPy's fuser when ``lib``'s arrays are CuPy's and a kernel it writes computes what
    CuPy's own functions do (so a machine without a GPU, or whose compiler fails, has none)."""
    cupy = sys.modules.get("cupy")  # (an array of CuPy's means CuPy is imported already)
    if cupy is None:
        return None
    try:
        a = lib.asarray([1.0, 2.0])
        if type(a) is not cupy.ndarray:
            return None
        f = _cupy_fuser(cupy)
        program = [("sin", "float64", [("in", 0)]), ("multiply", "float64", [("node", 0), ("const", 2.0)]),
                   ("add", "float64", [("node", 1), ("in", 1)])]
        out = f.compile(program, ["float64", "float64"])(a, a)
        want = cupy.sin(a) * 2.0 + a
        return f if type(out) is cupy.ndarray and bool(cupy.allclose(out, want, rtol=1e-14, atol=0)) else None
    except Exception:
        return None


_fusers: dict[int, tuple[Any, Fuser | None]] = {}


def fuser(xp: Any) -> Fuser | None:
    """The elementwise compiler of namespace ``xp``, or None (probed once per namespace).

    Why: ``ember.jit`` compiles graphs of elementwise calls into one call where the
    backend has one (NumPy with numexpr installed: ``pip install ember[fuse]``; CuPy
    where a kernel it writes runs on the device).

    >>> import ember.backend as eb
    >>> f = eb.fuser(eb.get("numpy"))
    >>> f is None or f.name == "numexpr"
    True
    """
    return _probe_once(_fusers, xp, lambda lib: _probe_numexpr(lib) or _probe_cupy(lib))
