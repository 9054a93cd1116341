"""API coverage: ember's wrapper namespaces have every name array_api_strict has,
and each function gives the backend's own result on generated inputs.

The reference list of names is read from array_api_strict itself (minus its
own helpers), so a name the standard adds shows up here as a failure. The
value check is table-driven: ``name -> strategy of (args, kwargs)``; args are
NumPy arrays converted to the backend, and the ember result (``.raw``) must
equal the backend function's result exactly.
"""

from __future__ import annotations

import inspect
import math

import array_api_strict as strict
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
from _gradcheck import broadcast_pair, namespace, shapes, to_numpy

BACKENDS = ("numpy", "array_api_strict")
#: array_api_strict's own helpers, not names of the standard
STRICT_HELPERS = {
    "ArrayAPIStrictFlags", "Device", "ModuleType", "get_array_api_strict_flags",
    "set_array_api_strict_flags", "reset_array_api_strict_flags",
}
#: Array internals that are not part of the standard's array object
ARRAY_INTERNALS = {"__annotations__", "__module__", "__slots__", "__weakref__", "__dict__", "__doc__",
                   "__buffer__"}  # __buffer__: strict-only (raises), not in the standard


def _main_names():
    return sorted(n for n in dir(strict) if n not in STRICT_HELPERS and (not n.startswith("_") or n.startswith("__array")))


def _ext_names(ext):
    mod = getattr(strict, ext)
    return sorted(
        n for n in dir(mod)
        if not n.startswith("_") and inspect.isfunction(getattr(mod, n)) and getattr(mod, n).__module__ == mod.__name__
    )


def _array_names():
    A = type(strict.asarray(0.0))
    return sorted(n for n in dir(A) if not n.startswith("_") or (n.startswith("__") and n not in ARRAY_INTERNALS
                  and n not in dir(object) or n in {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}))


@pytest.mark.parametrize("lib", BACKENDS)
def test_every_strict_name_exists(lib):
    xp = namespace(lib)
    missing = [n for n in _main_names() if not hasattr(xp, n)]
    for ext in ("linalg", "fft"):
        missing += [f"{ext}.{n}" for n in _ext_names(ext) if not hasattr(getattr(xp, ext, None), n)]
    T = xp._Tensor
    missing += [f"Tensor.{n}" for n in _array_names() if not hasattr(T, n)]
    assert not missing, f"ember.autodiff.{lib} lacks {missing}"
    # reflected and in-place forms of every arithmetic/bitwise operator
    for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
               "lshift", "rshift"):
        for form in (f"__{op}__", f"__r{op}__", f"__i{op}__"):
            assert hasattr(T, form), form
    assert xp.__array_api_version__ == strict.__array_api_version__
    assert T is not np.ndarray and not issubclass(T, np.ndarray)


def test_reference_lists_are_not_empty():
    assert len(_main_names()) > 150 and len(_ext_names("linalg")) >= 23 and len(_ext_names("fft")) >= 14
    assert {"__radd__", "__iadd__", "mT", "to_device", "__dlpack__"} <= set(_array_names())


# ============================================================ value table
def _f(shape=None, lo=-2.0, hi=2.0, dtype=np.float64):
    return hnp.arrays(dtype, shape if shape is not None else shapes(), elements=st.floats(lo, hi, width=64 if dtype == np.float64 else 32))


def _i(shape=None, lo=-5, hi=5):
    return hnp.arrays(np.int64, shape if shape is not None else shapes(), elements=st.integers(lo, hi))


def _b(shape=None):
    return hnp.arrays(np.bool_, shape if shape is not None else shapes())


def _c(shape=None):
    return st.tuples(_f(shape if shape is not None else (3,)), _f(shape if shape is not None else (3,))).map(lambda p: p[0] + 1j * p[1])


def A(*strats, **kw):
    """Strategy of (args, kwargs) from argument strategies and keyword strategies."""
    return st.tuples(st.tuples(*strats), st.fixed_dictionaries(kw))


@st.composite
def _pair(draw, mk=_f, **kw):
    s1, s2 = draw(broadcast_pair())
    return (draw(mk(s1, **kw)), draw(mk(s2, **kw))), {}


def _just(*args, **kw):
    return st.just((args, kw))


TABLE: dict = {}
DOMAIN = {"acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "atanh": (-0.9, 0.9), "acosh": (1.1, 3.0),
          "log": (0.1, 3.0), "log2": (0.1, 3.0), "log10": (0.1, 3.0), "sqrt": (0.0, 3.0), "log1p": (-0.9, 2.0)}
for n in ("abs acos acosh asin asinh atan atanh ceil cos cosh exp expm1 floor isfinite isinf isnan log "
          "log1p log2 log10 negative positive reciprocal round sign signbit sin sinh sqrt square tan tanh "
          "trunc real conj").split():
    TABLE[n] = A(_f(None, *DOMAIN.get(n, (-2.0, 2.0))))
TABLE["imag"] = A(_c())
TABLE["bitwise_invert"] = A(_i())
TABLE["logical_not"] = A(_b())
for n in ("add atan2 copysign divide equal greater greater_equal hypot less less_equal logaddexp maximum "
          "minimum multiply nextafter not_equal subtract").split():
    TABLE[n] = _pair()
TABLE["pow"] = _pair(lo=0.1, hi=2.0)
TABLE["floor_divide"] = _pair(lo=0.5, hi=3.0)
TABLE["remainder"] = _pair(lo=0.5, hi=3.0)
for n in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    TABLE[n] = _pair(_i)
for n in ("bitwise_left_shift", "bitwise_right_shift"):
    TABLE[n] = _pair(_i, lo=0, hi=4)
for n in ("logical_and", "logical_or", "logical_xor"):
    TABLE[n] = _pair(_b)

_AX = st.sampled_from([None, 0, -1])
for n in ("sum", "prod", "mean", "max", "min", "std", "var", "argmax", "argmin", "all", "any", "count_nonzero"):
    kw = {"axis": _AX} if n in ("argmax", "argmin") else {"axis": _AX, "keepdims": st.booleans()}
    TABLE[n] = A(_f((2, 3)) if n not in ("all", "any") else _b((2, 3)), **kw)
for n in ("cumulative_sum", "cumulative_prod"):
    TABLE[n] = A(_f((2, 3)), axis=st.sampled_from([0, 1]), include_initial=st.booleans())
TABLE["argsort"] = A(_f((4,)), descending=st.booleans())
TABLE["sort"] = A(_f((2, 3)), axis=st.sampled_from([0, -1]), descending=st.booleans())
TABLE["arange"] = _just(1, 7, 2)
TABLE["asarray"] = A(_f())
TABLE["astype"] = st.tuples(st.tuples(_f()), st.just({})).map(lambda a: ((a[0][0], "float32"), {}))
TABLE["broadcast_arrays"] = _pair()
TABLE["broadcast_to"] = A(_f((1, 3)), ).map(lambda a: ((a[0][0], (2, 3)), {}))
TABLE["clip"] = A(_f((5,)), min=st.just(-0.5), max=st.just(1.0))
TABLE["concat"] = A(_f((2, 2)), _f((1, 2))).map(lambda a: (([a[0][0], a[0][1]],), {"axis": 0}))
TABLE["stack"] = A(_f((2, 2)), _f((2, 2))).map(lambda a: (([a[0][0], a[0][1]],), {"axis": 1}))
TABLE["diff"] = A(_f((2, 4)), axis=st.sampled_from([0, 1]), n=st.integers(1, 2))
TABLE["empty"] = _just((2, 3))
TABLE["empty_like"] = A(_f((2,)))
TABLE["eye"] = _just(3, 4, k=1)
TABLE["expand_dims"] = A(_f((2, 3)), axis=st.sampled_from([0, -1, 2]))
TABLE["flip"] = A(_f((2, 3)), axis=_AX)
TABLE["full"] = _just((2, 2), 1.5)
TABLE["full_like"] = A(_f((3,))).map(lambda a: ((a[0][0], 2.5), {}))
TABLE["isin"] = A(_i((4,)), _i((3,)))
TABLE["linspace"] = _just(0.0, 1.0, 5)
TABLE["matmul"] = A(_f((2, 3)), _f((3, 2)))
TABLE["matrix_transpose"] = A(_f((2, 3, 4)))
TABLE["meshgrid"] = A(_f((2,)), _f((3,)))
TABLE["moveaxis"] = A(_f((2, 3, 4))).map(lambda a: ((a[0][0], 0, -1), {}))
TABLE["nonzero"] = A(_i((2, 3), 0, 1))
TABLE["ones"] = _just((2, 1))
TABLE["ones_like"] = A(_f())
TABLE["permute_dims"] = A(_f((2, 3, 4))).map(lambda a: ((a[0][0], (1, 2, 0)), {}))
TABLE["repeat"] = A(_f((2, 3))).map(lambda a: ((a[0][0], 2), {"axis": 1}))
TABLE["reshape"] = A(_f((2, 3))).map(lambda a: ((a[0][0], (3, 2)), {}))
TABLE["roll"] = A(_f((2, 3))).map(lambda a: ((a[0][0], 1), {"axis": 1}))
TABLE["searchsorted"] = A(_f((5,)).map(np.sort), _f((3,)))
TABLE["squeeze"] = A(_f((2, 1))).map(lambda a: ((a[0][0],), {"axis": 1}))
TABLE["take"] = A(_f((4, 2)), _i((3,), 0, 3), axis=st.just(0))
TABLE["take_along_axis"] = A(_f((2, 3)), _i((2, 2), 0, 2), axis=st.just(1))
TABLE["tensordot"] = A(_f((2, 3)), _f((3, 2)), axes=st.just(1))
TABLE["tile"] = A(_f((2, 3))).map(lambda a: ((a[0][0], (2, 1)), {}))
TABLE["tril"] = A(_f((3, 3)), k=st.integers(-1, 1))
TABLE["triu"] = A(_f((3, 3)), k=st.integers(-1, 1))
for n in ("unique_all", "unique_counts", "unique_inverse", "unique_values"):
    TABLE[n] = A(_i((6,), 0, 3))
TABLE["unstack"] = A(_f((2, 3)), axis=st.sampled_from([0, 1]))
TABLE["vecdot"] = A(_f((2, 3)), _f((3,)))
TABLE["where"] = A(_b((2, 3)), _f((2, 3)), _f((3,)))
TABLE["zeros"] = _just((0, 2))
TABLE["zeros_like"] = A(_f())
TABLE["from_dlpack"] = A(_f((3,)))
# dtype / shape helpers (results are not arrays)
TABLE["broadcast_shapes"] = _just((2, 1), (3,))
TABLE["can_cast"] = _just("float32", "float64")
TABLE["finfo"] = _just("float32")
TABLE["iinfo"] = _just("int16")
TABLE["isdtype"] = _just("float64", "real floating")
TABLE["result_type"] = _just("float32", "float64")

_spd = _f((3, 3), -1.0, 1.0).map(lambda m: m @ m.T + 3 * np.eye(3))
LINALG = {
    "cholesky": A(_spd), "cross": A(_f((2, 3)), _f((2, 3))), "det": A(_spd), "diagonal": A(_f((2, 3))),
    "eigh": A(_spd), "eigvalsh": A(_spd), "inv": A(_spd), "matmul": A(_f((2, 3)), _f((3, 2))),
    "matrix_norm": A(_f((3, 3)), ord=st.sampled_from(["fro", 1, np.inf])), "matrix_power": A(_spd).map(lambda a: ((a[0][0], 2), {})),
    "matrix_rank": A(_spd), "matrix_transpose": A(_f((2, 3))), "outer": A(_f((3,)), _f((2,))),
    "pinv": A(_spd), "qr": A(_spd), "slogdet": A(_spd), "solve": A(_spd, _f((3, 1))), "svd": A(_spd),
    "svdvals": A(_spd), "tensordot": A(_f((2, 3)), _f((3, 2)), axes=st.just(1)), "trace": A(_f((3, 3)), offset=st.just(0)),
    "vecdot": A(_f((2, 3)), _f((2, 3))), "vector_norm": A(_f((2, 3)), axis=_AX, ord=st.sampled_from([2, 1, np.inf])),
    "eig": A(_spd), "eigvals": A(_spd),
}
FFT = {
    "fft": A(_c((4,))), "ifft": A(_c((4,))), "fftn": A(_c((2, 2))), "ifftn": A(_c((2, 2))),
    "rfft": A(_f((4,))), "irfft": A(_c((3,))), "rfftn": A(_f((2, 4))), "irfftn": A(_c((2, 3))),
    "hfft": A(_c((3,))), "ihfft": A(_f((4,))), "fftfreq": _just(4), "rfftfreq": _just(5, d=0.5),
    "fftshift": A(_f((4,))), "ifftshift": A(_f((5,))),
}
_DTYPE_ARGS = {"float32", "float64", "int16", "real floating"}


def _convert(xp, bxp, v, ours):
    """NumPy value -> ember tensor (ours) or backend array; dtype names -> dtypes."""
    if isinstance(v, (np.ndarray, np.generic)):
        raw = bxp.asarray(np.array(v))
        return xp.asarray(raw) if ours else raw
    if isinstance(v, list):
        return [_convert(xp, bxp, a, ours) for a in v]
    if isinstance(v, str) and v in _DTYPE_ARGS and v != "real floating":
        return getattr(bxp, v)
    return v


def _same(a, b, name):
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), name
        if hasattr(b, "_fields"):
            assert hasattr(a, "_fields") and a._fields == b._fields, name
        for x, y in zip(a, b):
            _same(x, y, name)
        return
    if isinstance(a, ember.Tensor):
        assert not isinstance(b, ember.Tensor)
        ra = a.raw
        assert type(ra) is type(b) or np.isscalar(b), (name, type(ra), type(b))
        assert ra.dtype == b.dtype, (name, ra.dtype, b.dtype)
        if name in ("empty", "empty_like"):
            assert tuple(ra.shape) == tuple(b.shape), name
            return
        np.testing.assert_array_equal(to_numpy(ra), to_numpy(b), err_msg=name)
        return
    if hasattr(b, "dtype") and hasattr(b, "shape"):
        raise AssertionError(f"{name}: the backend gives an array, ember gives {type(a).__name__}")
    if hasattr(b, "eps") or hasattr(b, "max"):  # finfo / iinfo objects
        assert (a.bits, a.max, a.min) == (b.bits, b.max, b.min), name
        return
    assert a == b, (name, a, b)


def _check(lib, table, prefix, name, data):
    xp = namespace(lib)
    bxp = xp._backend
    args, kw = data.draw(table[name], label="args")
    fx, fb = xp, bxp
    for part in prefix:
        fx, fb = getattr(fx, part), getattr(fb, part)
    with np.errstate(all="ignore"):
        want = getattr(fb, name)(*[_convert(xp, bxp, a, False) for a in args], **kw)
        got = getattr(fx, name)(*[_convert(xp, bxp, a, True) for a in args], **kw)
    _same(got, want, ".".join(prefix + (name,)))


EXAMPLES = dict(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))


def test_value_table_covers_every_function():
    funcs = [n for n in _main_names() if callable(getattr(strict, n)) and not inspect.isclass(getattr(strict, n))
             and not n.startswith("__")]
    assert sorted(set(funcs) - set(TABLE)) == []
    assert sorted(set(_ext_names("linalg")) - set(LINALG)) == []
    assert sorted(set(_ext_names("fft")) - set(FFT)) == []


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(TABLE))
@settings(**EXAMPLES)
@given(data=st.data())
def test_function_equals_backend(lib, name, data):
    _check(lib, TABLE, (), name, data)


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(LINALG))
@settings(**EXAMPLES)
@given(data=st.data())
def test_linalg_equals_backend(lib, name, data):
    if lib == "array_api_strict" and name in ("eig", "eigvals") and not hasattr(strict.linalg, name):
        pytest.skip("not in this array_api_strict")
    _check(lib, LINALG, ("linalg",), name, data)


@pytest.mark.parametrize("lib", BACKENDS)
@pytest.mark.parametrize("name", sorted(FFT))
@settings(**EXAMPLES)
@given(data=st.data())
def test_fft_equals_backend(lib, name, data):
    _check(lib, FFT, ("fft",), name, data)


OPERATORS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lt", "le", "gt", "ge", "eq", "ne")
INT_OPERATORS = ("and", "or", "xor", "lshift", "rshift")


@pytest.mark.parametrize("lib", BACKENDS)
@settings(**EXAMPLES)
@given(x=_f((2, 3), 0.5, 2.0), y=_f((3,), 0.5, 2.0), i=_i((2, 3), 0, 4), j=_i((3,), 0, 4))
def test_operators_equal_backend(lib, x, y, i, j):
    xp = namespace(lib)
    bxp = xp._backend
    for (a, b), ops in (((x, y), OPERATORS), ((i, j), INT_OPERATORS)):
        ra, rb = bxp.asarray(a), bxp.asarray(b)
        ta, tb = xp.asarray(ra), xp.asarray(rb)
        for op in ops:
            fwd = f"__{op}__"
            _same(getattr(ta, fwd)(tb), getattr(ra, fwd)(rb), fwd)
            if op not in ("lt", "le", "gt", "ge", "eq", "ne"):
                scalar = 2 if op in INT_OPERATORS else 1.5
                _same(getattr(ta, f"__r{op}__")(scalar), getattr(ra, f"__r{op}__")(scalar), f"__r{op}__")
                t2, r2 = xp.asarray(bxp.asarray(np.array(a))), bxp.asarray(np.array(a))
                t2 = getattr(t2, f"__i{op}__")(tb)
                r2 = getattr(r2, f"__i{op}__")(rb)
                _same(t2, r2, f"__i{op}__")
    ra = bxp.asarray(x)
    ta = xp.asarray(ra)
    _same(ta @ xp.asarray(bxp.asarray(x.T)), ra @ bxp.asarray(x.T), "__matmul__")
    for op in ("neg", "pos", "abs"):
        _same(getattr(ta, f"__{op}__")(), getattr(ra, f"__{op}__")(), op)
    ri = bxp.asarray(i)
    _same(~xp.asarray(ri), ~ri, "__invert__")
    _same(ta.mT, ra.mT, "mT")
    _same(ta.T, ra.T, "T")
    _same(ta[0, 1:], ra[0, 1:], "__getitem__")
    assert (ta.shape, ta.ndim, ta.size, ta.dtype, ta.device) == (tuple(ra.shape), ra.ndim, ra.size, ra.dtype, ra.device)
    assert float(ta[0, 0]) == float(ra[0, 0]) and bool(ta[0, 0]) == bool(ra[0, 0])
    assert int(xp.asarray(ri)[0, 0]) == int(ri[0, 0]) and xp.asarray(ri)[0, 0].__index__() == int(ri[0, 0])
    assert ta.__array_namespace__() is xp and ta.__array_namespace__(api_version=None) is xp
    assert math.isclose(complex(ta[0, 0]).real, float(ra[0, 0]))
    _same(ta.to_device(ta.device), ra, "to_device")
    np.testing.assert_array_equal(np.from_dlpack(ta), to_numpy(ra))


@pytest.mark.parametrize("lib", BACKENDS)
def test_constants_and_dtypes_are_the_backends(lib):
    xp = namespace(lib)
    bxp = xp._backend
    for n in ("e", "pi", "inf"):
        assert getattr(xp, n) == getattr(bxp, n), n
    assert math.isnan(xp.nan) and xp.newaxis is None
    for n in ("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 "
              "complex128").split():
        assert getattr(xp, n) == getattr(bxp, n), n
    info = xp.__array_namespace_info__()
    assert info.default_dtypes() == bxp.__array_namespace_info__().default_dtypes()
