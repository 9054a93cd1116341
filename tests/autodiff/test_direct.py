"""The direct NumPy calls (autodiff/_direct.py) give the compat layer's values, dtypes and errors."""

from __future__ import annotations

import warnings

import array_api_compat.numpy as cnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember.autodiff import namespace
from ember.autodiff._direct import direct_functions

DIRECT = direct_functions(np)
DTYPES = st.sampled_from([np.bool_, np.int8, np.int32, np.int64, np.uint16, np.float32, np.float64,
                          np.complex128])


@st.composite
def array_and_axis(draw, min_dims=0):
    dtype = draw(DTYPES)
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=0, max_side=3))
    x = draw(hnp.arrays(dtype, shape, elements={"allow_nan": True} if dtype().dtype.kind in "fc" else None))
    ndim = len(shape)
    axis = draw(st.none() | (st.integers(-ndim, ndim - 1) if ndim else st.none())
                | st.lists(st.integers(0, max(ndim - 1, 0)), unique=True, max_size=ndim).map(tuple))
    return x, axis


def _same(a, b):
    """Equal values (NaN where NaN), dtype and shape; or the same exception type."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def _both(f, g):
    try:
        want = g()
    except Exception as e:
        with pytest.raises(type(e)):
            f()
        return
    _same(f(), want)


def test_only_ufunc_libraries_get_direct_functions():
    import ember.backend as eb

    caps = {n: eb.capabilities(eb.get(n)).ufuncs for n in ("numpy", "array_api_strict", "dask")}
    assert caps == {"numpy": True, "array_api_strict": False, "dask": False}
    for n, has in caps.items():  # only ufunc libraries' namespaces get the direct kernels
        assert ("_seed_ones_like" in namespace(n)._dispatch.fixes) is has
    assert set(DIRECT) >= {"sum", "prod", "max", "min", "all", "any", "mean", "matmul", "permute_dims"}


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "all", "any", "mean"])
@given(data=array_and_axis(), keepdims=st.booleans())
@settings(max_examples=60, deadline=None)
def test_reductions_match_compat(name, data, keepdims):
    x, axis = data
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty slice
        _both(lambda: DIRECT[name](x, axis=axis, keepdims=keepdims),
              lambda: getattr(cnp, name)(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("name", ["max", "min"])
@given(x=hnp.arrays(st.sampled_from([np.float32, np.float64, np.int16, np.bool_]),
                    hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=70),
                    elements=None),
       view=st.sampled_from(["c", "reversed", "transposed"]), keepdims=st.booleans(), as_tuple=st.booleans())
@settings(max_examples=80, deadline=None)
def test_max_min_along_rows_match_compat(name, x, view, keepdims, as_tuple):
    # rows of a C-contiguous array go through reduceat; views and other axes through reduce
    if view == "reversed":
        x = x[..., ::-1]
    elif view == "transposed":
        x = x.T
    axis = (x.ndim - 1,) if as_tuple else -1
    _both(lambda: DIRECT[name](x, axis=axis, keepdims=keepdims),
          lambda: getattr(cnp, name)(x, axis=axis, keepdims=keepdims))


def test_max_along_rows_is_one_reduceat_call():
    from ember.autodiff import _direct

    x = np.random.default_rng(0).standard_normal((16, 4, 64, 64)).astype(np.float32)
    x[3, 2, 7, 5] = np.nan
    calls = []

    class Spy:  # numpy.maximum with its reduce replaced by a failure, reduceat counted
        reduce = staticmethod(lambda *a, **k: (_ for _ in ()).throw(AssertionError("reduce ran")))

        @staticmethod
        def reduceat(a, starts):
            calls.append(starts.shape)
            return np.maximum.reduceat(a, starts)

    got = _direct._row_reduction("max", Spy, np)(x, axis=-1, keepdims=True)
    assert calls == [(16 * 4 * 64,)]
    _same(got, np.max(x, axis=-1, keepdims=True))
    assert np.isnan(got[3, 2, 7, 0]) and not np.isnan(got[3, 2, 6, 0])


@pytest.mark.parametrize("name", ["sum", "prod"])
@pytest.mark.parametrize("dtype", [None, np.float64, np.int64, np.complex128])
def test_reduction_dtype_argument(name, dtype):
    x = np.arange(6, dtype=np.int16).reshape(2, 3)
    _same(DIRECT[name](x, axis=1, dtype=dtype), getattr(cnp, name)(x, axis=1, dtype=dtype))


@given(a=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=3)),
       b=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=3)))
@settings(max_examples=60, deadline=None)
def test_matmul_matches_compat(a, b):
    with np.errstate(all="ignore"):
        _both(lambda: DIRECT["matmul"](a, b), lambda: cnp.matmul(a, b))


@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3)))
@settings(max_examples=40, deadline=None)
def test_transposes_match_compat(x):
    if "matrix_transpose" in DIRECT:
        _both(lambda: DIRECT["matrix_transpose"](x), lambda: cnp.matrix_transpose(x))
    axes = tuple(reversed(range(x.ndim)))
    _same(DIRECT["permute_dims"](x, axes), cnp.permute_dims(x, axes))


def test_namespace_uses_them():
    """The wrapper's sum on NumPy is the direct one (and still follows the standard's signature)."""
    import ember.autodiff.numpy as xp

    d = xp._dispatch
    assert d.raw_ns.sum.__module__ == d.fixes["sum"].__module__ == "ember.autodiff._direct"
    x = xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    assert float(xp.sum(x)) == 10.0 and xp.sum(x, axis=0, keepdims=True).shape == (1, 2)
    with pytest.raises(TypeError):
        xp.sum(x, 0)  # axis is keyword-only in the standard


@given(x=hnp.arrays(st.sampled_from([np.float32, np.int64, np.bool_]),
                   hnp.array_shapes(min_dims=0, max_dims=2, max_side=2)),
       scalar=st.booleans(),
       shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
@settings(max_examples=60, deadline=None)
def test_broadcast_to_matches_compat(x, scalar, shape):
    if scalar and x.ndim == 0:
        x = x[()]  # a NumPy scalar (what a 0-d result of NumPy often is)
    _both(lambda: DIRECT["broadcast_to"](x, shape), lambda: cnp.broadcast_to(x, shape))
    try:
        r = DIRECT["broadcast_to"](x, shape)
    except ValueError:
        return
    assert not r.flags.writeable  # a view: writing would change every element


@pytest.mark.parametrize("layout", ["F", "transposed", "reversed", "strided"])
def test_broadcast_to_of_any_layout_matches_compat(layout):
    # the direct view is made for contiguous input (C or Fortran order); the rest go to NumPy
    a = np.arange(6.0).reshape(2, 3, 1)
    x = {"F": np.asfortranarray(a), "transposed": a.T, "reversed": a[::-1], "strided": a[:, ::2]}[layout]
    for shape in [(4,) + x.shape, x.shape[:-1] + (5,), (2,) + x.shape[:-1] + (3,)]:
        _both(lambda: DIRECT["broadcast_to"](x, shape), lambda: cnp.broadcast_to(x, shape))


@pytest.mark.parametrize("shape", [(-1,), (2, -3)])
def test_broadcast_to_rejects_negative_sizes(shape):
    with pytest.raises(ValueError):
        DIRECT["broadcast_to"](np.asarray(1.0), shape)


@pytest.mark.parametrize("copy", [True, False])
def test_astype_matches_compat(copy):
    x = np.arange(4, dtype=np.int32)
    for dtype in (np.float32, np.int32, np.bool_):
        r = DIRECT["astype"](x, dtype, copy=copy)
        _same(r, cnp.astype(x, dtype, copy=copy))
        assert (r is x) == (not copy and dtype == np.int32)
    _same(DIRECT["astype"](x, np.float64, device="cpu"), x.astype(np.float64))
    with pytest.raises(ValueError):
        DIRECT["astype"](x, np.float64, device="gpu")


@given(g=hnp.arrays(st.sampled_from([np.float32, np.float64, np.complex128]), (3, 4)),
       c=hnp.arrays(np.bool_, (3, 4)))
@settings(max_examples=40, deadline=None)
def test_mask_product_is_the_cast_product(g, c):
    with np.errstate(all="ignore"):
        _same(DIRECT["_mask_product"](g, c), g * c.astype(g.dtype))


def _bits(r):
    """The bytes of ``r`` in C order (NaN payloads and signed zeros compared exactly)."""
    return np.ascontiguousarray(r).view(np.uint8)


def _same_bits(r, want):
    assert r.dtype == want.dtype and r.shape == want.shape and r.strides == want.strides
    np.testing.assert_array_equal(_bits(r), _bits(want))


_SPECIAL = [-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 5e-324, 1e-45, 3.4e38, 1e300]
_SCALARS = [0.0, -0.0, 0, 1, -3, 0.5, 1e-45, 3.5e38, 1e300, 2**24, 2**24 + 1, 2**60, np.nan, np.inf,
            -np.inf, True, np.float32(1.5)]


@pytest.mark.parametrize("name", ["maximum", "minimum"])
@given(dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int32]),
       size=st.sampled_from([0, 1, 1023, 1024, 5000, (1 << 16) + 3]),
       scalar=st.sampled_from(_SCALARS), first=st.booleans(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=80, deadline=None)
def test_extremum_with_a_scalar_is_the_ufuncs_bit_for_bit(name, dtype, size, scalar, first, seed):
    # the kept filled operand (and the chunks of a large array) against the ufunc with the scalar:
    # signed zeros, NaN payloads, a scalar the dtype cannot hold, integers exact or not
    ufunc, f = getattr(np, name), DIRECT[name]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        x = np.random.default_rng(seed).choice(np.array(_SPECIAL), size).astype(dtype)
        x = x.reshape(-1, 7) if size % 7 == 0 and size else x
        args = (x, scalar) if first else (scalar, x)
        _both(lambda: f(*args), lambda: ufunc(*args))
        try:
            want = ufunc(*args)
        except Exception:
            return
        _same_bits(f(*args), want)
        for a in (f(*args), f(*args)):  # (again: the kept operand is read, never written)
            _same_bits(a, want)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("size", [4096, 3 * (1 << 16) + 8])
@pytest.mark.parametrize("out", ["none", "input", "other", "F", "float64"])
def test_extremum_takes_any_layout_and_out(name, layout, size, out):
    ufunc, f = getattr(np, name), DIRECT[name]
    base = np.random.default_rng(1).standard_normal(2 * size).astype(np.float32)
    base[::17] = -0.0
    x = {"C": base[:size].reshape(-1, 8), "F": np.asfortranarray(base[:size].reshape(-1, 8)),
         "strided": base[::2].reshape(-1, 8)}[layout]
    want = ufunc(x, 0.0)
    o = {"none": None, "input": x.copy(), "other": np.empty_like(want),
         "F": np.asfortranarray(np.empty_like(want)), "float64": np.empty(want.shape, np.float64)}[out]
    a = x if out != "input" else o
    r = f(a, 0.0, out=o)
    if o is not None:
        assert r is o
        want = ufunc(x, 0.0, out=np.empty_like(o))
    _same_bits(r, want)


def test_extremum_runs_the_ufunc_once_against_an_array():
    # the point of it: NumPy takes maximum(x, 0.0) element by element; against a filled array
    # it runs its vectorized loop (benchmarks/reductions.py, relu)
    from ember.autodiff import _direct

    calls = []

    class Spy:
        def __call__(self, a, b, out=None):
            calls.append((np.ndim(a), np.ndim(b)))
            return np.maximum(a, b, out=out)

    f = _direct._extremum("maximum", Spy(), np)
    x = np.ones((64, 64), np.float32)
    f(x, 0.0)
    f(0.0, x)
    f(np.ones(3, np.float32), 0.0)  # (small, float64, a view: the scalar as it is)
    f(np.ones((64, 64)), 0.0)
    f(x.T, 0.0)
    assert calls == [(2, 2), (2, 2), (1, 0), (2, 0), (2, 0)]
    big = np.ones(2 * _direct._FILL + 1, np.float32)
    calls.clear()
    _same(f(big, -1.0), np.ones_like(big))
    assert calls == [(1, 1)] * 3


def test_extremum_keeps_a_bounded_number_of_filled_arrays():
    # a new scalar each call (a schedule's floor) must not keep a filled array per value
    import tracemalloc

    from ember.autodiff import _direct

    f = _direct._extremum("maximum", np.maximum, np)
    x = np.random.default_rng(2).standard_normal(3 * _direct._FILL).astype(np.float32)
    tracemalloc.start()
    try:
        for k in range(5 * _direct._FILL_VALUES):
            v = -1.0 + k / 100
            _same_bits(f(x, v), np.maximum(x, v))
            _same_bits(f(x[:2000], v), np.maximum(x[:2000], v))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held <= (_direct._FILL_VALUES + 1) * _direct._FILL * 4, held


_BOUNDS = [None, 0.0, -0.0, 0, 6, -1.5, 1e-45, 3.5e38, 1e300, 2**24 + 1, np.nan, np.inf, True]


@given(dtype=st.sampled_from([np.float32, np.float64, np.int16, np.float16]),
       shape=st.sampled_from([(), (3,), (40, 50), (1100,)]), layout=st.sampled_from(["C", "F", "strided"]),
       lo=st.sampled_from(_BOUNDS), hi=st.sampled_from(_BOUNDS), by_keyword=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
@settings(max_examples=120, deadline=None)
def test_clip_between_numbers_is_compats_clip(dtype, shape, layout, lo, hi, by_keyword, seed):
    # NumPy's clip on the bounds cast to 0-d arrays of x's dtype, for Python-number bounds on
    # C-contiguous floating arrays (what compat >= 1.16 computes: bit for bit); anything else
    # goes to compat itself. Older compat versions kept x's own signed zero where x meets a
    # zero bound, so zeros are compared by value
    x = np.random.default_rng(seed).choice(np.array(_SPECIAL), shape).astype(dtype)
    if layout == "F" and x.ndim == 2:
        x = np.asfortranarray(x)
    elif layout == "strided" and x.ndim:
        x = x[..., ::2]
    direct = direct_functions(np, cnp.clip)["clip"]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if by_keyword:
            _both(lambda: direct(x, min=lo, max=hi), lambda: cnp.clip(x, min=lo, max=hi))
        else:
            _both(lambda: direct(x, lo, hi), lambda: cnp.clip(x, lo, hi))
        try:
            want = np.asarray(cnp.clip(x, lo, hi))
        except Exception:
            return
        got = np.asarray(direct(x, lo, hi))
    assert got.dtype == want.dtype and got.shape == want.shape and got.strides == want.strides
    np.testing.assert_array_equal(got, want)  # (NaN where NaN, -0.0 == 0.0)
    nonzero = want != 0
    np.testing.assert_array_equal(_bits(got[nonzero]), _bits(want[nonzero]))
    if x.dtype.kind == "f" and x.flags.c_contiguous and (lo is not None or hi is not None):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cast = [None if b is None else np.asarray(b, dtype=x.dtype) for b in (lo, hi)]
            np.testing.assert_array_equal(_bits(got), _bits(np.asarray(np.clip(x, *cast))))
    if lo is not None or hi is not None:
        assert not np.shares_memory(got, x)  # (a new array, as compat's)
