"""Direct NumPy calls for hot functions where the compat layer only adds Python frames.

Why: on the small arrays of a training step the Python frames around a NumPy
kernel cost as much as the kernel. ``numpy.sum`` runs two Python functions
(argument dispatch, ``_wrapreduction``) before ``numpy.add.reduce``, and
array-api-compat's ``matmul``, ``matrix_transpose`` and ``permute_dims`` are
Python wrappers around NumPy's own. Each function here calls the kernel
directly with the standard's signature; values, dtypes and errors are NumPy's
(``tests/autodiff/test_direct.py`` compares them with the compat layer's).

Only for the NumPy backend: other libraries keep their compat functions.

==================  ============================================
standard function   direct call
==================  ============================================
sum, prod           ``add.reduce``, ``multiply.reduce``
mean                ``add.reduce`` / count (float32/64, complex)
max, min            ``maximum.reduce``, ``minimum.reduce``; along the last axis of a
                    C-contiguous array, ``reduceat`` over its rows
all, any            ``logical_and/or.reduce`` to ``bool``
matmul              ``numpy.matmul``
matrix_transpose    ``x.mT`` (NumPy >= 2)
permute_dims        ``numpy.transpose``
broadcast_to        a zero-stride view of a contiguous array
astype              the ``ndarray.astype`` method
maximum, minimum    the ufunc; float32 beside a Python scalar, against a kept array of it
clip                ``numpy.clip`` between Python numbers cast to 0-d arrays (real floating)
``_mask_product``   ``numpy.multiply`` of a cotangent by a bool mask
``_linear``         ``matmul`` (over all rows at once), then bias and ReLU in place
``_seed_ones_like`` ``asarray(1, dtype)`` for a 0-d backward seed
==================  ============================================
"""

from __future__ import annotations

import functools
import math
import operator
from math import prod
from typing import Any

from ._api_tables import REDUCTION_RESULT, REDUCTIONS

#: reduction name -> (ufunc name, whether it takes ``dtype``), and the logical ones (the table's)
_REDUCTIONS = {n: (u, REDUCTION_RESULT[n] == "promote") for n, u in REDUCTIONS.items()
               if REDUCTION_RESULT[n] != "bool"}
_LOGICAL = {n: u for n, u in REDUCTIONS.items() if REDUCTION_RESULT[n] == "bool"}


def _reduction(name: str, reduce, takes_dtype: bool):
    if takes_dtype:

        def f(x, /, *, axis=None, dtype=None, keepdims=False):
            return reduce(x, axis, dtype, None, keepdims)
    else:

        def f(x, /, *, axis=None, keepdims=False):
            return reduce(x, axis, None, None, keepdims)

    f.__name__ = f.__qualname__ = name
    return f


#: row counts up to this keep their ``reduceat`` start offsets cached (``_row_starts``)
_CACHED_ROWS = 1 << 16


@functools.lru_cache(maxsize=16)
def _cached_starts(lib, size: int, n: int):
    starts = lib.arange(0, size, n, dtype=lib.intp)
    starts.flags.writeable = False  # shared by every call with these sizes
    return starts


def _row_starts(lib, size: int, n: int):
    """The flat offsets where the rows of ``n`` elements of a ``size``-element array begin."""
    if size // n <= _CACHED_ROWS:
        return _cached_starts(lib, size, n)
    return lib.arange(0, size, n, dtype=lib.intp)


def _row_reduction(name: str, ufunc, lib):
    """``max`` / ``min``: ``ufunc.reduce``, except along the last axis of a C-contiguous array
    of several rows, where ``ufunc.reduceat`` over the flat array takes each row.

    Why: NumPy's reduce pays a fixed cost per row, most of the time of a row of 64 (the
    attention scores' softmax); ``reduceat`` pays less of it, from rows of one element to
    rows of thousands (``benchmarks/reductions.py``, ``scores-max-rows``). The values are
    the same: a maximum or minimum is exact whichever order takes it.
    """
    reduce, reduceat, ndarray = ufunc.reduce, ufunc.reduceat, lib.ndarray

    def f(x, /, *, axis=None, keepdims=False):
        if axis is not None and x.__class__ is ndarray:
            shape = x.shape
            nd = len(shape)
            a = axis[0] if axis.__class__ is tuple and len(axis) == 1 else axis
            if nd >= 2 and a.__class__ is int and (a == -1 or a == nd - 1):
                n, size = shape[-1], x.size
                if n and size > n and x.flags.c_contiguous:  # (rows: at least two, none empty)
                    r = reduceat(x.reshape(-1), _row_starts(lib, size, n))
                    return r.reshape(shape[:-1] + (1,) if keepdims else shape[:-1])
        return reduce(x, axis, None, None, keepdims)

    f.__name__ = f.__qualname__ = name
    return f


#: elements of the arrays :func:`_extremum` keeps, filled with a scalar: at most this many are
#: taken per call (256 KB of float32)
_FILL = 1 << 16
#: smaller arrays take the ufunc with the scalar: the kept array's lookup costs about what
#: the element loop does there
_FILL_MIN = 1 << 10
#: integers up to this size are exact in float32 (a larger one takes the ufunc's own cast)
_EXACT_INT = 1 << 24
#: the (value, shape) keys :func:`_extremum` remembers, at most (then it starts over)
_FILLS_KEPT = 64
#: the filled arrays it keeps (one per value), at most: 2 MB
_FILL_VALUES = 8


def _extremum(name: str, ufunc, lib):
    """``maximum`` / ``minimum``: with a Python scalar beside a float32 array of at least
    :data:`_FILL_MIN` elements, the ufunc of that array and a kept array filled with the
    scalar; anything else, the ufunc itself.

    Why: NumPy has no SIMD loop for a scalar (stride-0) operand of float32 ``maximum`` and
    ``minimum``: ``maximum(x, 0.0)``, a ReLU, runs element by element, about 3x as long as
    against an array of zeros (``benchmarks/extremum.py``; float64's loop with a scalar is
    about as fast as against the array, so it keeps the scalar). The values are the
    ufunc's: the same comparisons, the operands in the same order, the scalar cast to the
    array's dtype as NumPy casts a weak scalar (an integer only where that is exact). A
    filled array of the array's shape is a view of one :data:`_FILL`-element array per
    value, remembered per shape; a larger array is taken in chunks of that many elements.
    Only C-contiguous arrays (the result's layout is then the ufunc's). ``out=`` is the
    ufunc's (the jit's buffer planning writes through it).
    """
    ndarray, full, f32 = lib.ndarray, lib.full, lib.dtype(lib.float32)
    largest = float(lib.finfo(f32).max)
    chunks: dict = {}  # (value, sign) -> the filled array
    kept: dict = {}  # (value, type, shape, sign) -> a filled view, (filled array,) or None

    def filled(v, shape):
        """A filled view of ``shape``; ``(the filled array,)`` for a larger array, taken in
        chunks; None for a value that float32 cannot hold exactly as NumPy casts it."""
        lim = _EXACT_INT if v.__class__ is int else largest
        if not -lim <= v <= lim:  # (NaN too)
            return None
        key = (v, math.copysign(1.0, v))  # (-0.0 == 0.0: the sign keeps them apart)
        c = chunks.get(key)
        if c is None:
            if len(chunks) >= _FILL_VALUES:  # (with the views of them: then none is held)
                chunks.clear()
                kept.clear()
            c = chunks[key] = full(_FILL, v, dtype=f32)
            c.flags.writeable = False  # shared by every call with this value
        n = prod(shape)
        return c[:n].reshape(shape) if n <= _FILL else (c,)

    def f(x1, x2, /, *, out=None):
        c1, c2 = x1.__class__, x2.__class__
        if c1 is ndarray and (c2 is float or c2 is int):
            a, v = x1, x2
        elif c2 is ndarray and (c1 is float or c1 is int):
            a, v = x2, x1
        else:
            return ufunc(x1, x2, out=out)
        # (the result's layout is the ufunc's for a C-contiguous array only)
        if a.dtype is not f32 or a.size < _FILL_MIN or not a.flags.c_contiguous:
            return ufunc(x1, x2, out=out)
        key = (v, v.__class__, a.shape, math.copysign(1.0, v))
        fv = kept.get(key, False)
        if fv is False:
            if len(kept) >= _FILLS_KEPT:
                kept.clear()
            fv = kept[key] = filled(v, a.shape)
        if fv is None:
            return ufunc(x1, x2, out=out)
        if fv.__class__ is tuple:
            return _chunked(ufunc, x1, x2, a, fv[0], out, lib)
        return ufunc(a, fv, out=out) if a is x1 else ufunc(fv, a, out=out)

    f.__name__ = f.__qualname__ = name
    f.plain, f.takes_out = ufunc, True  # (the jit: a fresh ufunc result, and out= through f)
    return f


def _chunked(ufunc, x1, x2, a, fill, out, lib):
    """``ufunc(x1, x2, out=out)`` for the larger array ``a`` (one of them), the scalar's
    filled array ``fill`` taken :data:`_FILL` elements at a time along the flat arrays
    (``a`` is C-contiguous; ``out`` must be too, else the ufunc with the scalar)."""
    if out is None:
        out = lib.empty_like(a)  # (C-contiguous, as ``a`` is)
    elif out.__class__ is not lib.ndarray or out.shape != a.shape or out.dtype != a.dtype \
            or not out.flags.c_contiguous:
        return ufunc(x1, x2, out=out)
    af, of, n = a.reshape(-1), out.reshape(-1), a.size
    for i in range(0, n, _FILL):
        j = min(i + _FILL, n)
        if a is x1:
            ufunc(af[i:j], fill[:j - i], out=of[i:j])
        else:
            ufunc(fill[:j - i], af[i:j], out=of[i:j])
    return out


def _clip(lib, general):
    """``clip`` of a C-contiguous real floating array between Python numbers (or None): NumPy's
    ``clip`` with the bounds cast to the array's dtype as 0-d arrays, what array-api-compat's
    ``clip`` computes; anything else, ``general`` (compat's).

    Why: compat's ``clip`` checks and broadcasts the bounds and fills a new array through
    ``out=``, Python that costs more than the loop on arrays of thousands of elements
    (``benchmarks/extremum.py``; ``kernels.erf``'s series clips every input). The same
    ``numpy.clip`` loop on the same cast bounds: the same bits.
    """
    ndarray, np_clip, asarray = lib.ndarray, lib.clip, lib.asarray
    floating = {lib.dtype(t) for t in (lib.float16, lib.float32, lib.float64)}
    numbers = (float, int, bool, type(None))

    def clip(x, /, min=None, max=None):
        if x.__class__ is not ndarray or x.dtype not in floating or min.__class__ not in numbers \
                or max.__class__ not in numbers or (min is None and max is None) or not x.flags.c_contiguous:
            return general(x, min, max)
        dt = x.dtype
        return np_clip(x, None if min is None else asarray(min, dtype=dt),
                       None if max is None else asarray(max, dtype=dt))

    return clip


def _logical(name: str, reduce):
    def f(x, /, *, axis=None, keepdims=False):
        return reduce(x, axis, bool, None, keepdims)

    f.__name__ = f.__qualname__ = name
    return f


def _mean(lib):
    """``add.reduce`` divided by the count, as ``numpy.mean`` computes it (float32/64, complex).

    Other dtypes (float16 accumulates in float32, integers give float64) and
    empty reductions (a warning and NaN) go to ``numpy.mean`` itself.
    """
    general, add, divide = lib.mean, lib.add.reduce, lib.true_divide
    fast = {lib.dtype(t) for t in ("float32", "float64", "complex64", "complex128")}

    def mean(x, /, *, axis=None, keepdims=False):
        if x.dtype not in fast:
            return general(x, axis=axis, keepdims=keepdims)
        shape = x.shape
        if axis is None:
            n = x.size
        elif isinstance(axis, int):
            n = shape[axis] if -len(shape) <= axis < len(shape) else 0
        else:
            n = 1
            for a in axis:
                n *= shape[a] if -len(shape) <= a < len(shape) else 0
        if n == 0:
            return general(x, axis=axis, keepdims=keepdims)
        return divide(add(x, axis, None, None, keepdims), n)

    return mean


def _broadcast_to(lib):
    """A read-only view with zero strides along the broadcast axes, made directly where
    ``x`` is contiguous (a reduction's cotangent, 0-d or with kept axes); anything else, and
    every error, is ``numpy.broadcast_to``'s."""
    general, ndarray, generic, asarray = lib.broadcast_to, lib.ndarray, lib.generic, lib.asarray

    def broadcast_to(x, /, shape):
        c = x.__class__
        if c is not ndarray:
            if not isinstance(x, generic):  # (a NumPy scalar is taken as 0-d)
                return general(x, shape)
            x = asarray(x)
        shape = tuple(shape)
        if shape and min(shape) < 0:
            return general(x, shape)  # its error
        xs = x.shape
        if not xs:
            strides = (0,) * len(shape)
        else:
            k = len(shape) - len(xs)
            if k < 0 or not (x.flags.c_contiguous or x.flags.f_contiguous):
                return general(x, shape)  # (its result, or its error)
            strides = [0] * k
            for n, m, st in zip(shape[k:], xs, x.strides):
                if m == n:
                    strides.append(st)
                elif m == 1:
                    strides.append(0)
                else:
                    return general(x, shape)  # its error
            strides = tuple(strides)
        r = ndarray(shape, x.dtype, x, 0, strides)
        r.flags.writeable = False  # as numpy.broadcast_to's views
        return r

    return broadcast_to


def _astype(lib):
    """``x.astype`` (the method), except for a device the compat layer must check."""
    import array_api_compat.numpy as cnp

    general = cnp.astype

    def astype(x, dtype, /, *, copy=True, device=None):
        if device is None:
            return x.astype(dtype, copy=copy)
        return general(x, dtype, copy=copy, device=device)

    return astype


def _linear(lib, maximum):
    """``nn.linear``'s kernel: the bias and the ReLU (:func:`_extremum`'s ``maximum``) go into
    the product's fresh buffer."""
    from ..kernels import check_linear

    matmul = lib.matmul
    complex_dtypes = {lib.dtype(lib.complex64), lib.dtype(lib.complex128)}
    # ReLU's 0 as a Python float where the result is floating: a weak scalar (NEP 50) keeps the
    # dtype, and NumPy takes it about twice as fast as a NumPy scalar (0.7 vs 1.5 us)
    floating = {lib.dtype(t) for t in (lib.float16, lib.float32, lib.float64)}

    def linear(x, w, b, *, relu=False):
        ws, shape = w.shape, x.shape  # (check_linear's test inline: it raises the error)
        if len(ws) != 2 or not shape or shape[-1] != ws[1] or (b is not None and b.shape != (ws[0],)):
            check_linear(x, w, b)
        if len(shape) > 2:  # one product over all rows: a stacked matmul runs a GEMM per matrix
            y = linear(x.reshape(prod(shape[:-1]), shape[-1]), w, b, relu=relu)
            return y.reshape(shape[:-1] + y.shape[-1:])
        y = matmul(x, w.T)
        if b is not None:
            if b.dtype == y.dtype:
                y += b
            else:  # promotes
                y = y + b
        if relu:
            dt = y.dtype  # complex if any input is (a fresh buffer: nothing written yet but y)
            if dt in floating:
                maximum(y, 0.0, out=y)
            else:
                if dt in complex_dtypes:
                    check_linear(x, w, b, relu, complex_dtypes)  # raises the DTypeError
                maximum(y, dt.type(0), out=y)
        return y

    return linear


def direct_functions(lib: Any, compat_clip: Any = None) -> dict:
    """``{name: function}`` to use instead of the compat layer's for library ``lib``.

    For a library whose elementwise functions are NumPy ufuncs (the
    ``ufuncs`` capability; the caller checks it). ``compat_clip``: the compat
    layer's ``clip``, which the direct one falls back on (without it, no ``clip``).
    """
    out: dict = {}
    for name, (ufunc, takes_dtype) in _REDUCTIONS.items():
        if ufunc in ("maximum", "minimum"):
            out[name] = _row_reduction(name, getattr(lib, ufunc), lib)
        else:
            out[name] = _reduction(name, getattr(lib, ufunc).reduce, takes_dtype)
    for name, ufunc in _LOGICAL.items():
        out[name] = _logical(name, getattr(lib, ufunc).reduce)
    out["matmul"] = lib.matmul  # a ufunc: same positional signature
    if hasattr(lib.ndarray, "mT"):  # NumPy >= 2: the attribute raises ValueError for ndim < 2
        out["matrix_transpose"] = operator.attrgetter("mT")  # (a C callable: no Python frame)
    out["permute_dims"] = lib.transpose  # its second parameter is ``axes`` too
    out["mean"] = _mean(lib)
    out["_mask_product"] = lib.multiply  # g * mask with a bool mask: no cast to g's dtype first
    out["broadcast_to"] = _broadcast_to(lib)
    out["astype"] = _astype(lib)
    for name in ("maximum", "minimum"):
        out[name] = _extremum(name, getattr(lib, name), lib)
    out["_linear"] = _linear(lib, out["maximum"])
    if compat_clip is not None:
        out["clip"] = _clip(lib, compat_clip)
    asarray0, ones_like = lib.asarray, lib.ones_like

    def seed_ones_like(x):  # the 0-d seed of a gradient: one C call (ones_like is Python)
        return asarray0(1, dtype=x.dtype) if x.ndim == 0 else ones_like(x)

    out["_seed_ones_like"] = seed_ones_like
    # nn.erf's kernel: SciPy's erf ufunc where SciPy is installed (not a dependency), looked up
    # at the first call so that importing ember never imports SciPy; else the Chebyshev series
    asarray, chosen = lib.asarray, []

    def erf_kernel(x):
        if not chosen:
            chosen.append(_erf_ufunc_or_series(lib))
        return asarray(chosen[0](x))  # an array also for 0-d input (the ufunc gives a scalar)

    out["_erf_kernel"] = erf_kernel
    out["_neg_logistic"] = _neg_logistic(lib)
    return out


def _neg_logistic(lib):
    """``kernels.neg_logistic``'s ``1 / (1 + exp(w))``: ``exp`` without NumPy's overflow and
    underflow warnings (inf and 0 are the intended results there: the quotient is exactly 0
    or 1), and the quotient by ``divide`` into ``exp``'s new array (NumPy's ``reciprocal``
    is not vectorized: about 1.7x ``divide``'s time)."""
    exp, add, divide, errstate = lib.exp, lib.add, lib.divide, lib.errstate

    def neg_logistic(w):
        with errstate(over="ignore", under="ignore"):
            e = exp(w)
        if e.__class__ is not lib.ndarray:  # (0-d: a scalar, as the ufunc returns it)
            return 1.0 / (e + 1.0)
        add(e, 1.0, out=e)
        return divide(1.0, e, out=e)

    return neg_logistic


def _erf_ufunc_or_series(lib):
    """``scipy.special.erf`` if SciPy is installed, else ember's series on ``lib``."""
    try:
        from scipy.special import erf
    except ImportError:
        from ._erf import erf_series

        return functools.partial(erf_series, lib)
    return erf
