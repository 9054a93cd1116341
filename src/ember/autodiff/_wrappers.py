"""Hand-written wrappers for functions whose arguments need reshaping.

Most functions go through the generic wrapper (positional arrays may carry a
gradient, keywords are parameters). The ones here take a *list* of arrays
(concat, stack), take arrays by keyword (clip), create arrays (asarray), or
are compositions of differentiable ops when an input is traced (meshgrid,
unstack, broadcast_arrays, diff) and the backend's own function otherwise.
"""

from __future__ import annotations

from ._tensor import Tensor, raw_value


def build(d) -> dict:
    """Return ``{name: function}`` for the namespace built by dispatcher ``d``."""
    xp, T, call, mod = d.xp, d.T, d.call, d.module
    A = d.A
    out: dict = {}

    def traced(*arrays):
        return any(a.__class__ is T and a._node is not None for a in arrays)

    def fast_generic(name, impl):
        """Generic wrapper with a fast path for untracked inputs."""
        strip, wrap_out = d.strip, d.wrap_out

        def f(*args, **kwargs):
            for a in args:
                c = a.__class__
                if c is T:
                    if a._node is not None:
                        return call(name, impl, args, kwargs)
                elif isinstance(a, Tensor) or isinstance(a, A):
                    return call(name, impl, args, kwargs)
            if kwargs and any(isinstance(v, (Tensor, list, tuple)) for v in kwargs.values()):
                kwargs = {k: strip(v) for k, v in kwargs.items()}
            raw = [a._value if a.__class__ is T else strip(a) if isinstance(a, (list, tuple)) else a
                   for a in args]
            try:
                res = impl(*raw, **kwargs)
            except Exception as e:
                from ._namespace import op_error

                raise op_error(name, e, raw) from e
            return wrap_out(res)

        return f

    # Every generic function gets the fast path.
    from . import _api_tables as api

    for name in api.OTHER:
        raw = getattr(xp, name, None)
        if raw is not None:
            out[name] = fast_generic(name, raw)
    for ext, names in (("linalg", api.LINALG), ("fft", api.FFT)):
        bext = getattr(xp, ext, None)
        for name in names:
            raw = getattr(bext, name, None) if bext is not None else None
            if raw is not None:
                out[f"{ext}.{name}"] = fast_generic(f"{ext}.{name}", raw)

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
    def clip_impl(x, lo, hi):
        return xp.clip(x, lo, hi)

    def clip(x, /, min=None, max=None):
        return call("clip", clip_impl, (x, min, max), {})

    out["clip"] = clip

    # ----- creation ------------------------------------------------------
    def asarray(obj, /, *, dtype=None, device=None, copy=None):
        from_tensor = isinstance(obj, Tensor)
        if from_tensor:
            if obj.__class__ is not T:
                from ._ownership import Owned, as_operand

                if obj.__class__ is Owned:  # asarray(consume(x)): the value, no reuse
                    obj = as_operand(obj, "asarray")
            if obj.__class__ is not T:
                d.check_own(obj, "asarray")
            if obj._node is not None and (dtype is None or dtype == obj.dtype):
                if device is not None:  # keep the gradient: to_device has a VJP
                    obj = mod._to_device(obj, device, None)
                return mod._copy(obj) if copy else obj
            obj = raw_value(obj)
        elif isinstance(obj, (list, tuple)):
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
            from ._namespace import op_error

            raise op_error("asarray", e, (obj,)) from e
        if not copy and not from_tensor and hasattr(obj, "shape"):
            from ._ownership import borrow

            borrow(res, obj)  # no copy made: the caller's memory, never written by ember
        return d.wrap(res)

    out["asarray"] = asarray

    def copy_impl(x):
        return xp.asarray(x, copy=True)

    out["_copy"] = lambda x: call("copy", copy_impl, (x,), {})

    # ----- compositions when traced -------------------------------------
    def meshgrid(*arrays, indexing="xy"):
        if not traced(*arrays):
            return fast_generic("meshgrid", xp.meshgrid)(*arrays, indexing=indexing)
        n = len(arrays)
        sizes = [a.shape[0] for a in arrays]
        if indexing == "xy" and n >= 2:
            sizes[0], sizes[1] = sizes[1], sizes[0]
        res = []
        for i, a in enumerate(arrays):
            axis = i
            if indexing == "xy" and n >= 2 and i < 2:
                axis = 1 - i
            shape = [1] * n
            shape[axis] = a.shape[0]
            res.append(mod.broadcast_to(mod.reshape(a, tuple(shape)), tuple(sizes)))
        return tuple(res)

    def unstack(x, /, *, axis=0):
        if not traced(x):
            return fast_generic("unstack", xp.unstack)(x, axis=axis)
        axis = axis % x.ndim
        pre = (slice(None),) * axis
        return tuple(x[pre + (i, ...)] for i in range(x.shape[axis]))

    def broadcast_arrays(*arrays):
        if not traced(*arrays):
            return fast_generic("broadcast_arrays", xp.broadcast_arrays)(*arrays)
        shape = xp.broadcast_shapes(*[a.shape for a in arrays])
        return [mod.broadcast_to(a, shape) for a in arrays]

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

    # ----- functional updates (used by __setitem__ and by VJPs) ----------
    def setitem_impl(x, value, key):
        y = xp.asarray(x, copy=True)
        y[key] = value
        return y

    def _setitem(x, value, *, key):
        return call("setitem", setitem_impl, (x, value), {"key": key})

    def index_add_impl(x, g, key):
        return _index_add_raw(d, x, g, key)

    def _index_add(x, g, *, key):
        return call("index_add", index_add_impl, (x, g), {"key": key})

    out["_setitem"], out["_index_add"] = _setitem, _index_add
    return out


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
    if bincount is not None and d.bname in ("numpy", "cupy"):
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
