"""Dtype promotion of every binary function and operator against the spec's tables.

The oracle is ``array_api_strict.result_type`` (the spec's promotion lattice;
pairs it rejects, such as int64 with uint64 or integer with floating, are
left unspecified by the standard and are not checked). Each function is
checked only on the dtypes the spec allows for it. Forms checked, on every
installed backend:

* ``f(x1, x2)`` for every pair of the 13 dtypes, and with Python scalars
  (bool, int, float, complex) on either side;
* the operator ``x1 op x2``, the reflected form ``x2.__rop__(x1)`` and
  ``scalar op x`` / ``x op scalar``;
* the in-place form ``x1 op= x2``: the target keeps its identity and dtype,
  and a promotion that would change the target's dtype is an error or keeps
  the dtype (never a silent dtype change);
* unary functions: the result dtype equals array_api_strict's for each
  accepted input dtype.

The ember result is also compared with the backend's own function, so a
mismatch says whether ember or the backend deviates (``BACKEND_DEVIATIONS``).
"""

from __future__ import annotations

import operator

import array_api_strict as strict
import pytest

from ember._errors import EmberError

DTYPES = ("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 "
          "complex64 complex128").split()
_INT = {n for n in DTYPES if "int" in n}
_REAL_FLOAT = {"float32", "float64"}
_COMPLEX = {"complex64", "complex128"}
_FLOAT = _REAL_FLOAT | _COMPLEX
_REAL = _INT | _REAL_FLOAT
_NUMERIC = _REAL | _COMPLEX
_ALL = set(DTYPES)
_BOOL = {"bool"}

#: function -> (input dtypes the spec allows, result: "promote" or "bool")
BINARY = {
    "add": (_NUMERIC, "promote"), "subtract": (_NUMERIC, "promote"),
    "multiply": (_NUMERIC, "promote"), "pow": (_NUMERIC, "promote"),
    "divide": (_FLOAT, "promote"),  # integer inputs: implementation-defined
    "floor_divide": (_REAL, "promote"), "remainder": (_REAL, "promote"),
    "maximum": (_REAL, "promote"), "minimum": (_REAL, "promote"),
    "atan2": (_REAL_FLOAT, "promote"), "copysign": (_REAL_FLOAT, "promote"),
    "hypot": (_REAL_FLOAT, "promote"), "logaddexp": (_REAL_FLOAT, "promote"),
    "nextafter": (_REAL_FLOAT, "promote"),
    "bitwise_and": (_INT | _BOOL, "promote"), "bitwise_or": (_INT | _BOOL, "promote"),
    "bitwise_xor": (_INT | _BOOL, "promote"),
    "bitwise_left_shift": (_INT, "promote"), "bitwise_right_shift": (_INT, "promote"),
    "equal": (_ALL, "bool"), "not_equal": (_ALL, "bool"),
    "less": (_REAL, "bool"), "less_equal": (_REAL, "bool"),
    "greater": (_REAL, "bool"), "greater_equal": (_REAL, "bool"),
    "logical_and": (_BOOL, "bool"), "logical_or": (_BOOL, "bool"), "logical_xor": (_BOOL, "bool"),
    "matmul": (_NUMERIC, "promote"), "vecdot": (_NUMERIC, "promote"),
    "tensordot": (_NUMERIC, "promote"),
    "linalg.matmul": (_NUMERIC, "promote"), "linalg.vecdot": (_NUMERIC, "promote"),
    "linalg.outer": (_NUMERIC, "promote"), "linalg.cross": (_NUMERIC, "promote"),
}
#: the elementwise ones take Python scalars (2024.12+)
_NOT_ELEMENTWISE = {"matmul", "vecdot", "tensordot", "linalg.matmul", "linalg.vecdot", "linalg.outer",
                    "linalg.cross"}

#: operator -> function it computes
OPERATORS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "pow", "matmul": "matmul",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
    "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
    "eq": "equal", "ne": "not_equal",
}
_COMPARISON_OPS = {"lt", "le", "gt", "ge", "eq", "ne"}
SCALARS = (True, 1, 1.0, 1j)

#: (backend, what) -> reason the backend deviates from the spec table; the ember
#: result is still checked against the backend's own function.
BACKEND_DEVIATIONS = {
    ("dask", "tensordot"): "dask's tensordot returns int64 for every integer input (it sums in the default integer)",
}


def _get(mod, qual):
    for part in qual.split("."):
        mod = getattr(mod, part)
    return mod


def _strict_dtype(name):
    return getattr(strict, name)


def _expected(d1, d2, out):
    """Spec result dtype name of two dtype names (or scalars), or None when unspecified."""
    a = _strict_dtype(d1) if isinstance(d1, str) else d1
    b = _strict_dtype(d2) if isinstance(d2, str) else d2
    try:
        if not isinstance(d1, str):  # a Python scalar: result_type needs an array beside it
            r = strict.result_type(strict.ones((), dtype=b), a)
        elif not isinstance(d2, str):
            r = strict.result_type(strict.ones((), dtype=a), b)
        else:
            r = strict.result_type(a, b)
    except (TypeError, ValueError):
        return None
    return "bool" if out == "bool" else _name(strict, r)


def _name(xp, dtype):
    for n in DTYPES:
        if getattr(xp, n, None) == dtype:
            return n
    return str(dtype)


def _arr(xp, name, qual=""):
    shape = (3,) if qual == "linalg.cross" else (2,)
    return xp.ones(shape, dtype=getattr(xp, name))


def _case_args(qual):
    return {"tensordot": {"axes": 1}}.get(qual, {})


def _check_pairs(xp, qual, f_ember, f_backend):
    """Mismatches [(d1, d2, expected, ember, backend)] over all dtype pairs."""
    allowed, out = BINARY[qual]
    bad = []
    kw = _case_args(qual)
    for d1 in DTYPES:
        for d2 in DTYPES:
            if d1 not in allowed or d2 not in allowed:
                continue
            want = _expected(d1, d2, out)
            if want is None:
                continue
            a, b = _arr(xp, d1, qual), _arr(xp, d2, qual)
            got = _name(xp, f_ember(a, b, **kw).dtype)
            if got != want:
                ref = f_backend(a.raw, b.raw, **kw) if f_backend else None
                bad.append((d1, d2, want, got, None if ref is None else _name(xp, ref.dtype)))
    return bad


def _report(xp, what, bad):
    if not bad:
        return
    ember_wrong = [b for b in bad if b[3] != b[4]]
    assert not ember_wrong, f"{what}: ember differs from the backend: (d1, d2, spec, ember, backend) {ember_wrong}"
    reason = BACKEND_DEVIATIONS.get((xp._backend_name, what))
    assert reason, f"{what}: backend {xp._backend_name} differs from the spec table: {bad}"
    pytest.xfail(f"backend deviation: {reason}")


@pytest.mark.parametrize("qual", sorted(BINARY))
def test_function_promotion(xp, qual):
    try:
        f = _get(xp, qual)
    except AttributeError:
        f = None
    if f is None:
        pytest.skip(f"backend deviation: {xp._backend_name} has no {qual}")
    try:
        backend_f = _get(xp._backend, qual)
    except AttributeError:  # ember fills in a function the backend lacks: only the spec applies
        backend_f = None
    _report(xp, qual, _check_pairs(xp, qual, f, backend_f))


@pytest.mark.parametrize("qual", sorted(set(BINARY) - _NOT_ELEMENTWISE))
def test_function_promotion_with_scalars(xp, qual):
    f = _get(xp, qual)
    allowed, out = BINARY[qual]
    raw = _get(xp._backend, qual)
    bad = []
    for d in DTYPES:
        if d not in allowed:
            continue
        a = _arr(xp, d)
        for s in SCALARS:
            want = _expected(d, s, out)
            if want is None or _expected(d, s, "promote") not in allowed:  # e.g. atan2(x, 1j)
                continue
            for args in ((a, s), (s, a)):
                got = _name(xp, f(*args).dtype)
                if got != want:
                    ref = raw(*(x.raw if x is a else x for x in args))
                    bad.append((d, s, want, got, _name(xp, ref.dtype)))
    _report(xp, qual + " with scalars", bad)


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_operator_promotion(xp, op):
    qual = OPERATORS[op]
    fwd = getattr(operator, op if op not in ("and", "or") else op + "_")
    backend_f = _get(xp._backend, qual)
    bad = _check_pairs(xp, qual, fwd, backend_f)
    if op not in _COMPARISON_OPS:  # reflected: b.__radd__(a) computes a + b
        bad += _check_pairs(xp, qual, lambda a, b: getattr(b, f"__r{op}__")(a), backend_f)
    _report(xp, f"operator {op}", bad)


@pytest.mark.parametrize("op", sorted(set(OPERATORS) - {"matmul"}))
def test_operator_promotion_with_scalars(xp, op):
    qual = OPERATORS[op]
    allowed, out = BINARY[qual]
    fwd = getattr(operator, op if op not in ("and", "or") else op + "_")
    bad = []
    for d in DTYPES:
        if d not in allowed:
            continue
        a = _arr(xp, d)
        for s in SCALARS:
            want = _expected(d, s, out)
            if want is None or _expected(d, s, "promote") not in allowed:  # e.g. x % 1j
                continue
            forms = [(a, s)] + ([(s, a)] if op not in _COMPARISON_OPS else [])  # s op a: reflected
            for x1, x2 in forms:
                g = _name(xp, fwd(x1, x2).dtype)
                if g != want:
                    ref = fwd(*(x.raw if x is a else x for x in (x1, x2)))
                    bad.append((d, s, want, g, _name(xp, ref.dtype)))
    _report(xp, f"operator {op} with scalars", bad)


@pytest.mark.parametrize("op", sorted(set(OPERATORS) - _COMPARISON_OPS))
def test_inplace_operator_dtype(xp, op):
    """``x1 op= x2`` keeps x1 (the same object) and its dtype; a promotion past x1's dtype is refused."""
    qual = OPERATORS[op]
    allowed, _ = BINARY[qual]
    iop = getattr(operator, f"i{op}")
    problems = []
    operands = [(d2, None) for d2 in DTYPES] + [(None, s) for s in SCALARS]
    for d1 in DTYPES:
        if d1 not in allowed:
            continue
        for d2, s in operands:
            if d2 is not None and d2 not in allowed:
                continue
            want = _expected(d1, d2 if d2 is not None else s, "promote")
            if want is None:
                continue
            a = _arr(xp, d1)
            other = _arr(xp, d2) if d2 is not None else s
            if op == "matmul":  # the result must keep a's shape: (2, 2) @ (2, 2)
                a = xp.ones((2, 2), dtype=a.dtype)
                if d2 is None:
                    continue
                other = xp.ones((2, 2), dtype=other.dtype)
            before = a
            if want == d1:
                r = iop(a, other)
                if r is not before or r.dtype != getattr(xp, d1):
                    problems.append((d1, d2 or s, "kept" if r is before else "new object", _name(xp, r.dtype)))
            else:
                try:
                    r = iop(a, other)
                except (TypeError, ValueError, EmberError):
                    continue
                if r is not before or r.dtype != getattr(xp, d1):
                    problems.append((d1, d2 or s, f"promotes to {want}: must raise or keep {d1}",
                                     _name(xp, r.dtype)))
    assert not problems, f"__i{op}__: {problems}"


def _unary_names():
    from ember.autodiff import _api_tables

    return list(_api_tables.UNARY)


@pytest.mark.parametrize("name", _unary_names())
def test_unary_result_dtype(xp, name):
    f = getattr(xp, name, None)
    if f is None:
        pytest.skip(f"backend deviation: {xp._backend_name} has no {name}")
    bad = []
    for d in DTYPES:
        try:
            want = _name(strict, getattr(strict, name)(strict.ones((2,), dtype=_strict_dtype(d))).dtype)
        except TypeError:
            continue  # the spec does not define it for this dtype
        got = _name(xp, f(_arr(xp, d)).dtype)
        if got != want:
            bad.append((d, want, got, _name(xp, getattr(xp._backend, name)(_arr(xp, d).raw).dtype)))
    _report(xp, name, [(d, "-", w, g, r) for d, w, g, r in bad])


def test_where_promotion(xp):
    bad = []
    cond = xp.asarray([True, False])
    for d1 in DTYPES:
        for d2 in DTYPES:
            want = _expected(d1, d2, "promote")
            if want is None:
                continue
            a, b = _arr(xp, d1), _arr(xp, d2)
            got = _name(xp, xp.where(cond, a, b).dtype)
            if got != want:
                bad.append((d1, d2, want, got, _name(xp, xp._backend.where(cond.raw, a.raw, b.raw).dtype)))
    _report(xp, "where", bad)


def test_result_type_matches_strict(xp):
    bad = []
    for d1 in DTYPES:
        for d2 in DTYPES:
            want = _expected(d1, d2, "promote")
            if want is None:
                continue
            got = _name(xp, xp.result_type(getattr(xp, d1), getattr(xp, d2)))
            if got != want:
                ref = xp._backend.result_type(getattr(xp, d1), getattr(xp, d2))
                bad.append((d1, d2, want, got, _name(xp, ref)))
    _report(xp, "result_type", bad)
