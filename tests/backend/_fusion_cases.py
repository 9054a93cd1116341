"""What the fuser tests share: the special values, each function's arity and NumPy's
function of each array-API name (the reference)."""

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
