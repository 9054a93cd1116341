"""Hand-written wrappers for functions whose arguments need reshaping.

Most functions go through the generic wrapper (positional arrays may carry a
gradient, keywords are parameters). The ones here take a *list* of arrays
(concat, stack), take arrays by keyword (clip), create arrays (asarray), or
are compositions of differentiable ops when an input is traced (meshgrid,
unstack, broadcast_arrays, diff) and the backend's own function otherwise.
"""

from __future__ import annotations

import math
import warnings

from .._errors import DTypeError, ShapeError
from ..kernels import meshgrid as meshgrid_composed
from ._tensor import Tensor, raw_value




def build(d) -> dict:
    """Return ``{name: function}`` for the namespace built by dispatcher ``d``."""
    xp, T, call, mod = d.xp, d.T, d.call, d.module
    A = d.A
    out: dict = {}

    def traced(*arrays):
        return any(a.__class__ is T and a._node is not None for a in arrays)

    def fast_generic(name, impl, checked=False):
        """Generic wrapper with a fast path for untracked inputs.

        ``checked``: enforce the standard's signature (positional-only and
        keyword-only markers), which lenient backends such as NumPy do not.
        """
        strip, wrap_out, record = d.strip, d.wrap_out, d.record_one_level
        from ._op_errors import GENERAL as general

        npos, posonly = _arity(name) if checked else (1 << 30, frozenset())

        def f(*args, **kwargs):
            if len(args) > npos or (kwargs and not posonly.isdisjoint(kwargs)):
                raise TypeError(_signature_error(name, args, kwargs))
            raw = []
            for a in args:
                c = a.__class__
                if c is T:
                    if a._node is not None:  # traced: record it (one level deep: directly)
                        if not d._claims:
                            out = record(name, impl, args, kwargs)
                            if out is not general:
                                return out
                        return call(name, impl, args, kwargs)
                    raw.append(a._value)
                elif isinstance(a, Tensor) or isinstance(a, A):
                    return call(name, impl, args, kwargs)
                else:
                    raw.append(strip(a) if isinstance(a, (list, tuple)) else a)
            if kwargs and any(isinstance(v, (Tensor, list, tuple)) for v in kwargs.values()):
                kwargs = {k: strip(v) for k, v in kwargs.items()}
            try:
                res = impl(*raw, **kwargs)
            except Exception as e:
                from ._op_errors import op_error

                raise op_error(name, e, raw) from e
            if res.__class__ is A:
                t = T()
                t._value = res
                t._node = None
                return t
            return wrap_out(res)

        return f

    # Every generic function gets the fast path.
    from . import _api_tables as api

    for name in api.OTHER:
        raw = d.fixes.get(name) or getattr(xp, name, None)
        if raw is not None:
            out[name] = fast_generic(name, raw, checked=True)
    for ext, names in (("linalg", api.LINALG), ("fft", api.FFT)):
        bext = getattr(xp, ext, None)
        for name in names:
            raw = d.fixes.get(f"{ext}.{name}") or (getattr(bext, name, None) if bext is not None else None)
            if raw is not None:
                out[f"{ext}.{name}"] = fast_generic(f"{ext}.{name}", raw, checked=True)

    # ----- lists of arrays ---------------------------------------------
    def concat_impl(*arrays, axis=0):
        return xp.concat(arrays, axis=axis)

    def stack_impl(*arrays, axis=0):
        return xp.stack(arrays, axis=axis)

    def concat(arrays, /, *, axis=0):
        return call("concat", concat_impl, tuple(arrays), {"axis": axis})

    def stack(arrays, /, *, axis=0):
        return call("stack", stack_impl, tuple(arrays), {"axis": axis})

    out["concat"], out["stack"] = concat, stack

    # ----- arrays passed by keyword --------------------------------------
    raw_clip = d.raw_ns.clip  # (the backend's, or its direct one: NumPy's between numbers)

    def clip_impl(x, lo, hi):
        return raw_clip(x, lo, hi)

    def clip(x, /, min=None, max=None):
        return call("clip", clip_impl, (x, min, max), {})

    out["clip"] = clip

    # ----- creation ------------------------------------------------------
    def traced_asarray(t, dtype, device, copy):
        """``asarray`` of a traced Tensor: ``astype`` and ``to_device``, which have VJPs."""
        if dtype is not None and dtype != t.dtype:
            if copy is False:
                raise ValueError(f"asarray: copy=False, but casting {t.dtype} to "
                                 f"{getattr(dtype, '__name__', dtype)} makes a copy; pass copy=None")
            t, copy = mod.astype(t, dtype), None  # (a fresh array already)
        if device is not None:
            t = mod._to_device(t, device, None)
        return mod._copy(t) if copy else t

    def any_traced(seq):
        return any(any_traced(e) if isinstance(e, (list, tuple)) else (
            isinstance(e, Tensor) and e._node is not None) for e in seq)

    def stack_nested(seq, dt):
        """A nested sequence holding traced Tensors as one stacked Tensor of dtype ``dt``."""
        items = [stack_nested(e, dt) if isinstance(e, (list, tuple)) else e for e in seq]
        return mod.stack([(e if e.dtype == dt else mod.astype(e, dt)) if isinstance(e, Tensor)
                          else mod.asarray(e, dtype=dt) for e in items])

    writes_alias = bool(d.caps.in_place)  # whether two handles on one buffer see each other's writes

    def asarray(obj, /, *, dtype=None, device=None, copy=None):
        from_tensor = isinstance(obj, Tensor)
        if from_tensor:
            if obj.__class__ is not T:
                from ._ownership import Owned, as_operand

                if obj.__class__ is Owned:  # asarray(consume(x)): the value, no reuse
                    obj = as_operand(obj, "asarray")
            if obj.__class__ is not T:
                d.check_own(obj, "asarray")
            if obj._node is not None:  # traced: the result is too (a cast, a move, a copy)
                return traced_asarray(obj, dtype, device, copy)
            if (copy is False and not writes_alias and obj.__class__ is T
                    and (dtype is None or dtype == obj.dtype) and (device is None or device == obj.device)):
                return obj  # (Dask) only this very handle sees later writes, as no copy promises
            obj = raw_value(obj)
        elif isinstance(obj, (list, tuple)):
            if any_traced(obj):  # asarray([x[0] * y, 1.0]): stacked, so the gradient flows
                # the dtype (and any error) of the same values untraced: tracing changes neither
                ref = asarray(d.strip(obj), dtype=dtype)
                return traced_asarray(stack_nested(obj, ref.dtype), None, device, copy)
            obj = d.strip(obj)
        kw = {}
        if dtype is not None:
            kw["dtype"] = dtype
        if device is not None:
            kw["device"] = device
        if copy is not None:
            kw["copy"] = copy
        try:
            res = xp.asarray(obj, **kw)
        except Exception as e:
            if _object_like(obj):  # (backends that refuse the object dtype: the same message)
                raise DTypeError(_object_message(obj)) from e
            not_numbers = _not_numbers(obj)  # (backends that refuse text: the same message)
            if not_numbers is not None:
                raise DTypeError(not_numbers) from e
            from ._op_errors import op_error

            raise op_error("asarray", e, (obj,)) from e
        kind = getattr(res.dtype, "kind", None)
        if kind == "O":  # no array-API dtype: not an array of numbers
            raise DTypeError(_object_message(obj))
        if kind in _NOT_NUMBERS:  # strings, bytes, records, datetimes: no array-API dtype either
            raise DTypeError(_not_numbers(obj, res.dtype))
        if not copy and not from_tensor and hasattr(obj, "shape"):
            from ._ownership import borrow

            borrow(res, obj)  # no copy made: the caller's memory, never written by ember
        return d.wrap(res)

    out["asarray"] = asarray

    # ember.primitive's ops (its fused ops among them, autodiff/fused.py): the generic fast
    # path, and recording that keeps what a forward computed for the VJP (defresiduals)
    record = d.record_one_level
    from ._op_errors import GENERAL as _GENERAL

    def one_level_over_staging(args):
        """Whether each tracked argument is tracked by one active trace right over jit's
        staging trace or by the staging trace alone, some by the former and some value
        staged (not under vmap: no batched value)."""
        top, staged = None, False
        for a in args:
            if a.__class__ is not T:
                if isinstance(a, Tensor):  # (a vmap's batched value)
                    return False
                continue
            n = a._node
            if n is None:
                continue
            if n.trace.stages:
                staged = True
                continue
            if top is None:
                top = n.trace
            elif n.trace is not top:
                return False
            v = a._value
            if v.__class__ is not T:  # (a vmap's batched value)
                return False
            if v._node is not None:
                if not v._node.trace.stages:
                    return False
                staged = True
        return staged and top is not None and top.active

    def record_keeping(name, compute, args, params, deciding, eager=True):
        """Record ``name`` on one level with a node that also keeps, in its params, what the
        forward computes for the VJP anyway: ``compute(*raw args, **params)`` gives
        ``(result, {param: value})``. None where the general path must run the op: no
        argument of ``deciding`` tracked, checkpointing (it may recompute, and then keeps
        nothing), ``consume`` markers, or a call ``record_one_level`` does not take, or
        (``eager=False``) any tape but one right over jit's staging trace."""
        n = None
        for a in deciding:  # the first tracked one (a loop: a generator is a frame per call)
            if a.__class__ is T and a._node is not None and not a._node.trace.stages:
                n = a._node  # (jit's staging trace records every op: it is no tape)
                break
        if n is None or n.trace.saver is not None or d._claims:
            return None
        kept = []

        def impl(*raw, **p):
            res, extra = compute(*raw, **p)
            kept.append(extra)
            return res

        res = record(name, impl, args, params) if eager else _GENERAL
        if res is _GENERAL:
            if not one_level_over_staging(deciding):
                return None
            # the stager records ``compute`` as one op whose results include what the node
            # keeps, as staged values (StagingTrace.stage)
            impl.residuals, impl.kept = compute, kept
            res = d.call(name, impl, args, params)
        if kept and res._node is not None:
            res._node.params = {**params, **kept[0]}
        return res

    d.fast_op, d.record_keeping = fast_generic, record_keeping

    def copy_impl(x):
        return xp.asarray(x, copy=True)

    out["_copy"] = lambda x: call("copy", copy_impl, (x,), {})

    # ----- compositions when traced -------------------------------------
    # the standard's sequence type for several results: list up to 2024.12, tuple from 2025.12
    seq = list if d.version < "2025.12" else tuple

    def meshgrid(*arrays, indexing="xy"):
        if not traced(*arrays):
            return seq(fast_generic("meshgrid", xp.meshgrid)(*arrays, indexing=indexing))
        return seq(meshgrid_composed(mod, arrays, indexing))

    def unstack(x, /, *, axis=0):
        if not traced(x):
            return fast_generic("unstack", xp.unstack)(x, axis=axis)
        axis = axis % x.ndim
        pre = (slice(None),) * axis
        return tuple(x[pre + (i, ...)] for i in range(x.shape[axis]))

    def broadcast_arrays(*arrays):
        if not traced(*arrays):
            return seq(fast_generic("broadcast_arrays", xp.broadcast_arrays)(*arrays))
        shape = xp.broadcast_shapes(*[a.shape for a in arrays])
        return seq(mod.broadcast_to(a, shape) for a in arrays)

    def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
        if not traced(x, *(a for a in (prepend, append) if a is not None)):
            kw = {k: v for k, v in (("prepend", prepend), ("append", append)) if v is not None}
            return fast_generic("diff", xp.diff)(x, axis=axis, n=n, **kw)
        if n == 0:  # as the backends do: prepend/append are ignored
            return x
        parts = [p for p in (prepend, x, append) if p is not None]
        y = mod.concat(parts, axis=axis) if len(parts) > 1 else x
        ax = axis % y.ndim
        lo = (slice(None),) * ax
        for _ in range(n):
            if y.shape[ax] == 0:  # nothing to difference (strict rejects y[1:] here)
                break
            y = y[lo + (slice(1, None), ...)] - y[lo + (slice(None, -1), ...)]
        return y

    def moveaxis(x, source, destination, /):
        if not traced(x):
            return fast_generic("moveaxis", xp.moveaxis)(x, source, destination)
        nd = x.ndim
        src = [s % nd for s in ((source,) if isinstance(source, int) else source)]
        dst = [s % nd for s in ((destination,) if isinstance(destination, int) else destination)]
        order = [i for i in range(nd) if i not in src]
        for s, t in sorted(zip(dst, src)):
            order.insert(s, t)
        return mod.permute_dims(x, tuple(order))

    out.update(meshgrid=meshgrid, unstack=unstack, broadcast_arrays=broadcast_arrays,
               diff=diff, moveaxis=moveaxis)

    # ----- finfo: Python scalars, as the standard asks (numpy gives numpy.float32) -------
    finfo_raw = fast_generic("finfo", xp.finfo, checked=True) if hasattr(xp, "finfo") else None

    def finfo(type, /):
        r = finfo_raw(type)
        if isinstance(r.eps, float) and isinstance(r.max, float):
            return r
        return FInfo(bits=int(r.bits), eps=float(r.eps), max=float(r.max), min=float(r.min),
                     smallest_normal=float(r.smallest_normal), dtype=r.dtype)

    if finfo_raw is not None:
        out["finfo"] = finfo

    # ----- functional updates (used by __setitem__ and by VJPs) ----------
    def setitem_impl(x, value, key):
        from ._rules.indexing import written

        return written(xp, x, value, key)

    def _setitem(x, value, *, key):
        return call("setitem", setitem_impl, (x, value), {"key": key})

    def index_add_impl(x, g, key):
        return _index_add_raw(d, x, g, key)

    def _index_add(x, g, *, key):
        return call("index_add", index_add_impl, (x, g), {"key": key})

    def mask_scatter_impl(g, key, like):
        from ._rules.indexing import MASK_OF_UNKNOWN_SIZE

        out = dask_mask_scatter(like, g, key)
        if out is None:
            raise ShapeError(MASK_OF_UNKNOWN_SIZE.format(x=tuple(like.shape), g=tuple(g.shape)))
        return out

    def _mask_scatter(g, *, key, like):
        """The cotangent of ``like[key]`` (Dask, a boolean mask, unknown sizes): dask_mask_scatter."""
        return call("mask_scatter", mask_scatter_impl, (g,), {"key": key, "like": like})

    def mask_gather_impl(g, key, like):
        from ._op_errors import _unknown

        if not _unknown(like.shape):  # like's blocks give the selection's blocks, as in the forward
            g = g.rechunk(like.chunks)
        return g[key]

    def _mask_gather(g, *, key, like):
        """``g[key]`` in the blocks of ``like[key]``: the VJP of _mask_scatter (and the reverse)."""
        return call("mask_gather", mask_gather_impl, (g,), {"key": key, "like": like})

    out["_setitem"], out["_index_add"] = _setitem, _index_add
    if d.caps.lazy:  # (the backward of getitem asks for them on lazy masks only)
        out["_mask_scatter"], out["_mask_gather"] = _mask_scatter, _mask_gather
    return out


def fallbacks(d) -> dict:
    """Portable versions of standard functions, used only where the backend lacks them (dask).

    Written with the wrapper namespace itself, so they are differentiable.
    """
    mod = d.module

    def broadcast_shapes(*shapes):
        ndim = max((len(s) for s in shapes), default=0)
        out = []
        for i in range(-ndim, 0):
            size = 1
            for s in shapes:
                n = s[i] if -i <= len(s) else 1
                if n is None or size is None:
                    size = None if n != 1 and size != 1 else (size if n == 1 else n)
                elif n != 1:
                    if size != 1 and size != n:
                        raise ValueError(
                            f"broadcast_shapes: shapes {shapes} do not broadcast (axis {i}: "
                            f"{size} vs {n}). Fix: make each trailing dimension equal or 1")
                    size = n
            out.append(size)
        return tuple(out)

    def cross(x1, x2, /, *, axis=-1):
        if x1.shape[axis] != 3 or x2.shape[axis] != 3:
            raise ValueError(
                f"linalg.cross: axis {axis} must have size 3 in both inputs, got shapes "
                f"{x1.shape} and {x2.shape}")
        a = mod.moveaxis(x1, axis, -1)
        b = mod.moveaxis(x2, axis, -1)
        a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
        b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
        c = mod.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
        return mod.moveaxis(c, -1, axis)

    def matrix_power(x, n, /):
        if n == 0:
            return mod.zeros_like(x) + mod.eye(x.shape[-1], dtype=x.dtype)
        base = mod.linalg.inv(x) if n < 0 else x
        n = abs(n)
        res = None
        while n:  # binary exponentiation: O(log n) matmuls
            if n & 1:
                res = base if res is None else mod.matmul(res, base)
            n >>= 1
            if n:
                base = mod.matmul(base, base)
        return res

    def take_along_axis(x, indices, /, *, axis=-1):
        nd = x.ndim
        ax = axis % nd
        size = x.shape[ax]
        idx = mod.where(indices < 0, indices + size, indices)
        xs = x.shape[:ax] + (1,) + x.shape[ax + 1:]
        out_shape = broadcast_shapes(xs, idx.shape)
        out_shape = out_shape[:ax] + (idx.shape[ax],) + out_shape[ax + 1:]
        stride = 1
        lin = None
        for dim in range(nd - 1, -1, -1):  # linear index into x flattened in C order
            if dim == ax:
                term = idx * stride
            elif x.shape[dim] == 1:
                term = None
            else:
                shp = [1] * nd
                shp[dim] = out_shape[dim]
                term = mod.reshape(mod.arange(out_shape[dim], dtype=idx.dtype), tuple(shp)) * stride
            if term is not None:
                lin = term if lin is None else lin + term
            stride *= x.shape[dim]
        lin = mod.broadcast_to(lin, out_shape)
        flat = mod.take(mod.reshape(x, (-1,)), mod.reshape(lin, (-1,)), axis=0)
        return mod.reshape(flat, out_shape)

    return {"broadcast_shapes": broadcast_shapes, "linalg.cross": cross,
            "linalg.matrix_power": matrix_power, "take_along_axis": take_along_axis}


class FInfo:
    """``finfo`` result with Python ``int``/``float`` fields, as the standard specifies."""

    __slots__ = ("bits", "eps", "max", "min", "smallest_normal", "dtype")

    def __init__(self, *, bits, eps, max, min, smallest_normal, dtype):
        self.bits, self.eps, self.max, self.min = bits, eps, max, min
        self.smallest_normal, self.dtype = smallest_normal, dtype

    def __repr__(self):
        return "finfo(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


def backend_fixes(xp) -> dict:
    """``{name: corrected function}`` for elementwise functions where backend ``xp`` deviates.

    Why: the wrapper namespace should follow the standard even where the backend
    does not. Each deviation is probed once, so a conforming backend pays nothing,
    and a fix only touches the dtypes concerned.
    """
    import warnings

    fixes: dict = {}
    # sets of the dtypes arrays report (numpy's dtype objects, not its scalar types): a fix
    # runs on every call, and `dtype in set` is one hash lookup where a tuple compares each
    realf = _dtype_set(xp, ("float32", "float64"))
    cplx = _dtype_set(xp, ("complex64", "complex128"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            probe = xp.floor_divide(xp.asarray([float("inf"), 1.0]), xp.asarray([2.0, -float("inf")]))
            bad_floordiv = not (float(probe[0]) == float("inf") and float(probe[1]) == 0.0)
        except Exception:
            bad_floordiv = False
        try:
            z = xp.asarray([complex(float("inf"), 0.0), complex(-float("inf"), float("inf"))])
            e = xp.expm1(z)
            bad_expm1 = not (float(xp.imag(e)[0]) == 0.0 and float(xp.real(e)[1]) == -1.0)
        except Exception:
            bad_expm1 = False
        try:
            t = xp.tanh(xp.asarray([complex(float("inf"), 2.0)]))
            bad_tanh = bool(xp.signbit(xp.imag(t))[0])
        except Exception:
            bad_tanh = False
        try:
            bad_sign = bool(xp.signbit(xp.real(xp.sign(xp.asarray([complex(-0.0, -0.0)]))))[0])
        except Exception:
            bad_sign = False
    if bad_floordiv:
        raw_fd = xp.floor_divide

        def floor_divide(x1, x2, /):
            # spec: floor(x1 / x2); numpy's divmod-based result is nan/-1 with an infinite operand
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = raw_fd(x1, x2)
                if r.dtype not in realf:
                    return r
                q = xp.floor(xp.divide(x1, x2))
                return xp.where(xp.isinf(q) | (q == 0), q, r)

        fixes["floor_divide"] = floor_divide
    if bad_expm1:
        raw_em1 = xp.expm1

        def expm1(x, /):
            # spec special cases of complex expm1 are those of exp(x) - 1 at non-finite x,
            # and expm1(-0 + 0j) is +0 + 0j (numpy keeps the -0; -conj flips only the real sign)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = raw_em1(x)
                if r.dtype not in cplx:
                    return r
                r = xp.where((x == 0) & xp.signbit(xp.real(r)), -xp.conj(r), r)
                return xp.where(xp.isfinite(x), r, xp.exp(x) - 1)

        fixes["expm1"] = expm1
    if bad_tanh:

        def tanh(x, r):
            # spec: tanh(+-inf + bj), b finite, is +-1 + 0j with the sign of b on the zero
            b = xp.imag(x)
            flip = xp.isinf(xp.real(x)) & xp.isfinite(b) & (xp.signbit(xp.imag(r)) != xp.signbit(b))
            return xp.where(flip, xp.conj(r), r)

        fixes["tanh"] = _result_fix(xp.tanh, cplx, tanh)
    if bad_sign:

        def sign(x, r):
            # spec: complex sign of +-0 +-0j is 0 + 0j (x / |x| gives -0 from -0)
            return xp.where(x == 0, xp.zeros_like(r), r)

        fixes["sign"] = _result_fix(xp.sign, cplx, sign)
    if getattr(xp, "__name__", "").startswith("array_api_compat.dask"):
        from ._op_errors import _unknown

        raw_expand = xp.expand_dims  # dask reshapes, which needs every size

        def expand_dims(x, /, axis=0):  # (2024.12: axis may be positional)
            # at unknown (NaN) sizes (after boolean-mask indexing) index with None instead
            n = x.ndim + 1
            if not _unknown(x.shape) or not isinstance(axis, int):  # (2025.12: tuples of axes)
                return raw_expand(x, axis=axis)
            if not -n <= axis < n:
                raise IndexError(f"expand_dims: axis {axis} is out of range for the result's {n} "
                                 f"axes (valid: {-n} to {n - 1})")
            return x[(slice(None),) * (axis % n) + (None, ...)]

        fixes["expand_dims"] = expand_dims
        fixes["max"], fixes["min"] = (_dask_extremum(xp, n) for n in ("max", "min"))
        fixes["cumulative_sum"] = _dask_scan(xp.cumulative_sum, 0)
        fixes["cumulative_prod"] = _dask_scan(xp.cumulative_prod, 1)
        fixes["_drop_first"] = _dask_drop_first
        fixes["flip"] = _dask_flip(xp.flip)
        from . import _dask

        fixes.update(_dask.fixes(xp, fixes))  # linalg over stacks and the other Dask gaps
    return fixes


def _second(a, b):
    """``b``: a mask block in the blocks ``elemwise`` unifies with x's (as Dask's selection)."""
    return b


def _row_mask_block(x, mask):
    """A block of a mask over x's first axes, at the shape of x's block."""
    import array_api_compat

    ns = array_api_compat.array_namespace(mask)
    return ns.broadcast_to(ns.reshape(mask, tuple(mask.shape) + (1,) * (x.ndim - mask.ndim)), x.shape)


def _scatter_block(mask, g):
    """One block of :func:`dask_mask_scatter`: zeros of ``mask``'s shape, ``g`` where it holds."""
    import array_api_compat

    out = array_api_compat.array_namespace(g).zeros(mask.shape, dtype=g.dtype)
    out[mask] = g.reshape(-1)
    return out


def dask_mask_scatter(x, g, key):
    """The cotangent of Dask's ``x[mask]`` from ``g`` when the selection's size is unknown:
    zeros of x's shape with ``g`` where the boolean Dask array ``mask`` holds (a mask of x's
    shape, or over its first axis). None where ``g`` or the key do not allow it.

    Why: the usual form, zeros with ``g`` assigned at ``mask``, needs the number of
    selected elements, which Dask counts only when it computes. Dask selects block by
    block: a full-shape mask elementwise on the raveled arrays (unified chunks), a row
    mask blockwise; each block of the selection comes from one block of the mask. The
    same calls here give the mask in those very blocks, and ``g``, when it kept the
    selection's blocks (elementwise ops do), is written back block by block, lazily.
    """
    import dask.array as da
    from dask.array.core import blockwise, elemwise

    from ._op_errors import _unknown

    keys = key if isinstance(key, tuple) else (key,)
    if len(keys) != 1 or not isinstance(keys[0], da.Array) or keys[0].dtype != bool:
        return None
    mask, shape, raveled = keys[0], tuple(x.shape), False
    if mask.ndim == x.ndim:
        if not _unknown(x.shape) and not _unknown(mask.shape):
            x, mask, raveled = x.ravel(), mask.ravel(), True
        if x.ndim != 1:  # (Dask lists the blocks of an N-d selection in one axis)
            return None
        m = elemwise(_second, x, mask, dtype=bool)
    elif mask.ndim == 1:
        m = blockwise(_row_mask_block, tuple(range(x.ndim)), x, tuple(range(x.ndim)), mask, (0,), dtype=bool)
    else:
        return None
    if g.ndim != m.ndim or g.numblocks != m.numblocks or g.chunks[1:] != m.chunks[1:]:
        return None  # the cotangent has other blocks than the selection (e.g. a broadcast)
    ind = tuple(range(m.ndim))
    out = blockwise(_scatter_block, ind, m, ind, g, ind, align_arrays=False, dtype=g.dtype)
    return out.reshape(shape) if raveled else out


def _dask_flip(raw):
    """Dask's ``flip`` that also flips along an axis of unknown (NaN) size.

    Dask flips by slicing, which needs the sizes; at unknown sizes ember puts
    the blocks in reverse order along the flipped axes (``x.blocks``) and flips
    each block, which is the same array. This is what a scan's gradient down
    the rows a boolean mask kept uses (a reverse cumulative sum). Known sizes,
    an axis out of range or named twice: Dask's own.
    """
    from ._op_errors import _unknown
    from ._rules._util import norm_axes

    def flip(x, /, *, axis=None):
        if not _unknown(x.shape):
            return raw(x, axis=axis)
        try:
            names = range(x.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
            if any(not -x.ndim <= a < x.ndim for a in names):
                return raw(x, axis=axis)  # (its error)
            axes = norm_axes(axis, x.ndim)
        except TypeError:
            return raw(x, axis=axis)
        if len(set(axes)) < len(axes):
            return raw(x, axis=axis)
        rev = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))
        return x.blocks[rev].map_blocks(lambda b: b[rev], dtype=x.dtype)

    return flip


def _dask_scan(raw, identity):
    """Dask's ``cumsum``/``cumprod`` (under array-api-compat's names) that also compute at
    unknown (NaN) sizes. There Dask's default sequential scan builds blocks of NaN shape and
    fails at compute time, so the Blelloch scan runs; and ``include_initial`` prepends the
    ``identity`` (0 or 1) as a block of its own, one element along the axis, made from x's
    first blocks there: the compat layer's ``ones(shape)`` and concatenation need the sizes,
    and down the unknown axis its own ``include_initial`` runs the sequential scan, which
    fails at compute time where a mask emptied the first block. The cotangent then starts
    with that one-element block, which the gradient drops by blocks (``_dask_drop_first``).
    Known sizes: the default, unchanged."""
    import dask.array as da

    from ._op_errors import _unknown

    def scan(x, /, *, axis=None, dtype=None, include_initial=False):
        ax = 0 if axis is None and x.ndim == 1 else axis
        if not _unknown(x.shape) or not isinstance(ax, int) or not -x.ndim <= ax < x.ndim:
            return raw(x, axis=axis, dtype=dtype, include_initial=include_initial)  # (its errors)
        res = raw(x, axis=ax, dtype=dtype, method="blelloch")  # (passed on to dask)
        if not include_initial:
            return res
        ax %= x.ndim
        head = x.blocks[(slice(None),) * ax + (slice(0, 1),)]
        chunks = tuple((1,) if i == ax else c for i, c in enumerate(x.chunks))
        first = head.map_blocks(_identity_block, ax, identity, res.dtype, dtype=res.dtype, chunks=chunks)
        return da.concatenate([first, res], axis=ax, allow_unknown_chunksizes=True)

    return scan


def _identity_block(b, axis, value, dtype):
    """A block of ``value``: ``b``'s shape with one element along ``axis`` (b may be empty)."""
    import array_api_compat

    shape = b.shape[:axis] + (1,) + b.shape[axis + 1:]
    return array_api_compat.array_namespace(b).full(shape, value, dtype=dtype)


def _dask_drop_first(x, axis):
    """``x`` without its first element along ``axis`` (>= 0), at an unknown size too.

    A scan's cotangent with ``include_initial`` comes with the identity's block
    of one element first (see :func:`_dask_scan`): dropping that block needs no
    sizes. Any other chunking: the slice, which needs them and says so.
    """
    if x.chunks[axis][:1] == (1,):
        return x.blocks[(slice(None),) * axis + (slice(1, None),)]
    return x[(slice(None),) * axis + (slice(1, None), ...)]


def _dask_extremum(xp, name):
    """Dask's ``max``/``min`` (``name`` of namespace ``xp``), computing also at unknown (NaN) sizes.

    Why: Dask's tree reduction fails on a block that a boolean mask emptied (it
    turns a zero-size block into one of the wrong shape), so a row-wise max
    (cross-entropy's shift) of filtered rows, or a max down those rows, failed at
    compute time. At unknown sizes ember reduces each block on its own where
    each reduced axis is one chunk of known size; otherwise in two stages:
    each block to one value per reduced axis (an emptied one to the identity,
    -inf for max), then, with each reduced axis rechunked into one chunk, each
    block of those partials on its own. An extremum over no elements at all
    raises at compute time, as NumPy's does. Known sizes, an axis out of range
    or named twice: Dask's own.
    """
    from ._op_errors import _unknown
    from ._rules._util import norm_axes

    raw = getattr(xp, name)

    def reduced_axes(x, axis):
        """The reduced axes when ember's stages apply, else None."""
        if not _unknown(x.shape):
            return None
        if axis is None:
            return tuple(range(x.ndim))
        try:
            if any(not -x.ndim <= a < x.ndim for a in ((axis,) if isinstance(axis, int) else axis)):
                return None
            axes = norm_axes(axis, x.ndim)
        except TypeError:
            return None
        return None if len(set(axes)) < len(axes) else axes

    def identity(dtype):
        """What an emptied block stands for: -inf for max (the dtype's least value), etc."""
        if xp.isdtype(dtype, "bool"):
            return name == "min"
        if xp.isdtype(dtype, "integral"):
            info = xp.iinfo(dtype)
            return info.min if name == "max" else info.max
        return -xp.inf if name == "max" else xp.inf

    def filled(b, axes, value, dtype):
        """``value`` in the shape of block ``b`` reduced along ``axes`` (kept as size 1)."""
        import array_api_compat

        bp = array_api_compat.array_namespace(b)
        shape = tuple(1 if i in axes else n for i, n in enumerate(b.shape))
        return bp.full(shape, value, dtype=dtype or bp.int64, device=array_api_compat.device(b))

    def partial(b, axes, ident):
        """One block reduced along ``axes`` (kept as size 1); an emptied one gives ``ident``."""
        if all(b.shape[a] for a in axes):
            return getattr(b, name)(axis=axes, keepdims=True)
        return filled(b, axes, ident, b.dtype)

    def count(b, axes):
        """How many elements the block holds along the reduced axes (one number per block)."""
        return filled(b, range(b.ndim), math.prod(b.shape[a] for a in axes), None)

    def final(p, total, axes, keepdims):
        if not total:  # (also where the kept axes are empty: NumPy raises there too)
            raise ValueError(f"{name}: the reduced axes hold no elements (a boolean mask or filter "
                             f"kept none); {name} of an empty array has no identity")
        return getattr(p, name)(axis=axes, keepdims=keepdims)

    def extremum(x, /, *, axis=None, keepdims=False):
        axes = reduced_axes(x, axis)
        if axes is None:
            return raw(x, axis=axis, keepdims=keepdims)
        if all(len(x.chunks[a]) == 1 for a in axes) and not _unknown([x.shape[a] for a in axes]):
            # each block holds whole reduced axes of known sizes (a row-wise max): one stage
            def block(b):
                return getattr(b, name)(axis=axes, keepdims=keepdims)

            if keepdims:
                out = tuple((1,) if i in axes else c for i, c in enumerate(x.chunks))
                return x.map_blocks(block, chunks=out, dtype=x.dtype)
            return x.map_blocks(block, drop_axis=axes, dtype=x.dtype)
        chunks = tuple(((1,) * len(c)) if i in axes else c for i, c in enumerate(x.chunks))
        p = x.map_blocks(partial, axes, identity(x.dtype), chunks=chunks, dtype=x.dtype)
        ones = tuple((1,) * len(c) for c in x.chunks)
        total = x.map_blocks(count, axes, chunks=ones, dtype="int64").sum()  # (0-d: every block's)
        if any(len(x.chunks[a]) > 1 for a in axes):
            p = p.rechunk({a: -1 for a in axes})
        if keepdims:
            out = tuple((1,) if i in axes else ch for i, ch in enumerate(p.chunks))
            return p.map_blocks(final, total, axes, True, chunks=out, dtype=x.dtype)
        return p.map_blocks(final, total, axes, False, drop_axis=axes, dtype=x.dtype)

    return extremum


def _result_fix(plain, dtypes, correct):
    """Unary ``plain`` whose results of a dtype in ``dtypes`` are corrected by ``correct(x, r)``.

    The parts are kept as attributes (``plain``, ``dtypes``, ``correct``) so the
    namespace's fast path can call the backend function directly and pay only
    a dtype check on the dtypes that are fine (the common case: float32 and
    float64 pass by identity, without hashing the dtype for the set).
    """

    def fixed(x, /):
        r = plain(x)
        return correct(x, r) if r.dtype in dtypes else r

    fixed.plain, fixed.dtypes, fixed.correct = plain, dtypes, correct
    return fixed


def _dtype_set(xp, names) -> frozenset:
    """The dtypes named ``names``, as arrays of backend ``xp`` report them (JAX without x64
    makes float64 arrays float32, and warns: the probe is there to learn exactly that)."""
    out = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for n in names:
            if hasattr(xp, n):
                out.add(xp.empty((0,), dtype=getattr(xp, n)).dtype)
    return frozenset(out)


SIGNATURE_MISMATCH = (
    "{op}{sig}: {what}; the array API standard fixes which arguments are positional-only "
    "(before /) and keyword-only (after *). Fix: call it as {op}{sig}"
)


def _arity(qualname):
    """(number of positional parameters, names of positional-only ones) of the standard's signature."""
    from ._op_errors import reference_signature as _reference_signature

    sig = _reference_signature(qualname)
    if sig is None:
        return 1 << 30, frozenset()
    ps = list(sig.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in ps):
        n = 1 << 30
    else:
        n = sum(1 for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return n, frozenset(p.name for p in ps if p.kind is p.POSITIONAL_ONLY)


def _signature_error(qualname, args, kwargs) -> str:
    from ._op_errors import reference_signature as _reference_signature

    sig = _reference_signature(qualname)
    npos, posonly = _arity(qualname)
    if len(args) > npos:
        what = f"takes {npos} positional argument(s) but {len(args)} were given"
    else:
        what = f"positional-only argument(s) {sorted(posonly & kwargs.keys())} passed by keyword"
    return SIGNATURE_MISMATCH.format(op=qualname, sig=sig, what=what)


ASARRAY_SPARSE = (
    "asarray: got a sparse matrix ({kind}, shape {shape}), which would become a 0-d array of "
    "dtype object holding it; ember arrays hold numbers. Fix: convert it to a dense array "
    "first, xp.asarray(m.toarray())"
)
ASARRAY_OBJECT = (
    "asarray: {kind} became an array of dtype object, which no array-API function takes (and "
    "nothing can be differentiated through). Fix: pass numbers, nested lists of equal lengths, "
    "or an array of a numeric or bool dtype"
)


ASARRAY_NOT_NUMBERS = (
    "asarray: a {kind} became an array of dtype {dtype} ({what}), which the array API does not "
    "have: its arrays hold numbers or bools. Fix: convert the values to numbers first (e.g. "
    "[float(s) for s in values]), or pass a numeric array"
)
_NOT_NUMBERS = {"U": "text", "S": "bytes", "V": "structured records", "M": "datetimes",
                "m": "time deltas"}


def _not_numbers(obj, dtype=None) -> str | None:
    """The asarray error for ``obj`` when it holds text, bytes, records or datetimes, else None
    (``dtype``: what the backend made of it; else NumPy's reading, on this error path only)."""
    if dtype is None:
        import numpy as np  # (an error path: what NumPy makes of obj names its kind)

        try:
            dtype = np.asarray(obj).dtype
        except Exception:
            return None
    what = _NOT_NUMBERS.get(getattr(dtype, "kind", None))
    if what is None:
        return None
    return ASARRAY_NOT_NUMBERS.format(kind=f"{type(obj).__module__.split('.')[0]}.{type(obj).__name__}",
                                      dtype=dtype, what=what)


def _object_like(obj) -> bool:
    """Whether ``obj`` is a sparse matrix or an array of dtype object (asarray refuses both)."""
    return (hasattr(obj, "toarray") and hasattr(obj, "nnz")) or getattr(
        getattr(obj, "dtype", None), "kind", None) == "O"


def _object_message(obj) -> str:
    """The asarray error for ``obj``, whose conversion gave an object array."""
    kind = f"{type(obj).__module__.split('.')[0]}.{type(obj).__name__}"
    if hasattr(obj, "toarray") and hasattr(obj, "nnz"):  # SciPy (or similar) sparse matrix
        return ASARRAY_SPARSE.format(kind=kind, shape=tuple(obj.shape))
    return ASARRAY_OBJECT.format(kind=f"a {kind}")


def _index_add_raw(d, x, g, key):
    """``x`` with ``g`` added at ``x[key]``, adding duplicates (scatter-add)."""
    from .. import backend

    xp = d.xp
    n = 1
    for s in x.shape:
        n *= s
    import array_api_compat

    dk = {"device": array_api_compat.device(x)}  # array_api_strict and GPUs: index arrays on x's device
    flat = xp.reshape(xp.arange(n, **dk), tuple(x.shape))
    lin = xp.reshape(flat[key], (-1,))
    gflat = xp.reshape(xp.broadcast_to(g, tuple(flat[key].shape)), (-1,))
    lib = backend.raw(xp)
    bincount = getattr(lib, "bincount", None) if lib is not None else None
    is_complex = xp.isdtype(x.dtype, "complex floating")
    if bincount is not None and not d.caps.lazy and d.caps.ufuncs:
        if is_complex:
            acc = bincount(lin, weights=xp.real(gflat), minlength=n) + 1j * bincount(
                lin, weights=xp.imag(gflat), minlength=n
            )
        else:
            acc = bincount(lin, weights=gflat, minlength=n)
        acc = xp.astype(xp.asarray(acc, **dk), x.dtype)
    else:  # portable: one-hot matrix product (memory O(len(lin) * n))
        onehot = xp.astype(xp.reshape(lin, (-1, 1)) == xp.reshape(xp.arange(n, **dk), (1, -1)), x.dtype)
        acc = xp.reshape(xp.reshape(gflat, (1, -1)) @ onehot, (-1,))
    return x + xp.reshape(acc, tuple(x.shape))
