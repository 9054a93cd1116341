"""What the fuser tests share: the special values, each function's arity, NumPy's function
of each array-API name (the reference) and a random program's generator."""

from __future__ import annotations

import numpy as np

from ember.backend._fusion import SIGNATURES

#: NumPy's function of each array-API name (the reference)
_NP = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2, "asinh": np.arcsinh,
       "acosh": np.arccosh, "atanh": np.arctanh, "pow": np.power, "bitwise_invert": np.logical_not,
       "bitwise_and": np.logical_and, "bitwise_or": np.logical_or, "bitwise_xor": np.logical_xor}
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 1e300, -1e-310]


def _ref(name):
    return _NP.get(name) or getattr(np, name)


def _arity(name):
    kind = SIGNATURES[name]
    if kind == "where":
        return 3
    return 1 if name in ("negative", "positive", "square", "logical_not", "bitwise_invert") or (
        kind == "float" and name not in ("add", "subtract", "multiply", "divide", "pow", "atan2", "hypot",
                                         "copysign", "maximum", "minimum")) else 2


def random_program(pick, length, inputs, dtype, names, number_names, numbers):
    """A random straight-line program of shared values over ``inputs`` (each instruction may
    read any earlier value; the functions in ``number_names`` sometimes read one of
    ``numbers`` as their second operand), and NumPy's value of its last instruction.

    ``pick(options, label)`` chooses one of ``options`` (a Hypothesis draw, or a seeded
    generator's choice where many programs must be compiled at once).
    """
    vals = [np.asarray(v) for v in inputs]
    refs = [("in", k) for k in range(len(inputs))]
    floats = list(range(len(inputs)))
    program = []
    for _ in range(length):
        name = pick(names, "name")
        if name == "where":
            conds = [i for i, v in enumerate(vals) if v.dtype == bool]
            if not conds:
                continue
            idx = [pick(conds, "condition"), pick(floats, "operand"), pick(floats, "operand")]
        else:
            idx = [pick(floats, "operand") for _ in range(_arity(name))]
        args, ref = [refs[i] for i in idx], [vals[i] for i in idx]
        if name in number_names and pick([False, True], "number"):
            c = pick(numbers, "value")
            args[1], ref[1] = ("const", c), np.asarray(c, dtype)
        with np.errstate(all="ignore"):
            vals.append(np.asarray(_ref(name)(*ref)))
        program.append((name, dtype, args))
        refs.append(("node", len(program) - 1))
        if vals[-1].dtype != bool:
            floats.append(len(vals) - 1)
    return program, vals[-1]

