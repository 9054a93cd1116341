"""Dask-specific corrections of the backend namespace: what ``array_api_compat.dask.array``
lacks or gets wrong, filled so that ``ember.autodiff.dask`` follows the standard.

Why a module of its own: these are forward (backend) functions only. The
namespace factory looks each name up here before the backend (through
``_wrappers.backend_fixes``), so the VJP rules, written with the wrapper
namespace, apply to them unchanged and they are differentiable for free.

Linear algebra works blockwise over stacks (``dask.array.apply_gufunc``): the
two matrix axes are put in one chunk, the stack axes keep their chunks, and
each block runs the block library's own array-API ``linalg`` function (NumPy's
via array-api-compat for NumPy blocks). Matrices split across rows (tall
and skinny, bigger than a chunk) keep Dask's out-of-core ``qr``/``svd``.
"""

from __future__ import annotations

import operator
from collections import namedtuple

# Error texts (module-level so tests can match them).
EXPAND_DIMS_AXIS = ("expand_dims: axis {axis} is out of range for the result's {n} axes "
                    "(valid: {lo} to {hi}). Fix: pass axes in that range")
EXPAND_DIMS_REPEATED = ("expand_dims: axes {axes} name result axis {ax} twice. "
                        "Fix: give each new axis once")
MATMUL_SHAPES = ("matmul: shapes {s1} and {s2} do not multiply ({why}). Fix: the last axis of "
                 "x1 must match the second-to-last of x2 (the only one of a 1-D x2), and the "
                 "leading axes must broadcast")
SEARCHSORTED_1D = ("searchsorted: x1 must be 1-D, got shape {shape}. "
                   "Fix: flatten it or search each row separately")

EigResult = namedtuple("EigResult", ["eigenvalues", "eigenvectors"])


def _block_ns(a):
    import array_api_compat

    return array_api_compat.array_namespace(a)


def _complex_of(xp, dtype):
    return xp.complex64 if dtype in (xp.float32, xp.complex64) else xp.complex128


def _real_of(xp, dtype):
    return xp.float32 if dtype in (xp.float32, xp.complex64) else xp.float64


# Block kernels: top-level functions (picklable for a distributed scheduler), each
# calling the block library's standard linalg function. They take the stack.
def _k_det(a):
    return _block_ns(a).linalg.det(a)


def _k_slogdet(a):
    return tuple(_block_ns(a).linalg.slogdet(a))


def _k_eigh(a):
    return tuple(_block_ns(a).linalg.eigh(a))


def _k_eigvalsh(a):
    return _block_ns(a).linalg.eigvalsh(a)


def _k_eig(a):
    ns = _block_ns(a)
    w, v = ns.linalg.eig(a)
    c = _complex_of(ns, a.dtype)
    return ns.astype(w, c), ns.astype(v, c)


def _k_eigvals(a):
    ns = _block_ns(a)
    return ns.astype(ns.linalg.eigvals(a), _complex_of(ns, a.dtype))


def _k_pinv(a, rtol=None):
    return _block_ns(a).linalg.pinv(a, rtol=rtol)


def _k_pinv_arr(a, rtol):
    return _block_ns(a).linalg.pinv(a, rtol=rtol)


def _k_cholesky(a, upper=False):
    return _block_ns(a).linalg.cholesky(a, upper=upper)


def _k_inv(a):
    return _block_ns(a).linalg.inv(a)


def _k_solve(a, b):
    return _block_ns(a).linalg.solve(a, b)


def _k_qr(a, mode="reduced"):
    return tuple(_block_ns(a).linalg.qr(a, mode=mode))


def _k_svd(a, full_matrices=True):
    return tuple(_block_ns(a).linalg.svd(a, full_matrices=full_matrices))


def _k_svdvals(a):
    return _block_ns(a).linalg.svdvals(a)


def _k_matrix_rank(a, rtol=None):
    return _block_ns(a).linalg.matrix_rank(a, rtol=rtol)


def _k_matrix_rank_arr(a, rtol):
    return _block_ns(a).linalg.matrix_rank(a, rtol=rtol)


def linalg_fixes(xp) -> dict:
    """``{"linalg.<name>": function}``: stacked, blockwise linalg for Dask (``xp`` the compat namespace)."""
    import dask.array as da
    import numpy as np

    la = xp.linalg
    Slogdet = getattr(la, "SlogdetResult", None) or namedtuple("SlogdetResult", ["sign", "logabsdet"])
    Eigh = getattr(la, "EighResult", None) or namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
    QR = getattr(la, "QRResult", None) or namedtuple("QRResult", ["Q", "R"])
    SVD = getattr(la, "SVDResult", None) or namedtuple("SVDResult", ["U", "S", "Vh"])

    def gufunc(kernel, sig, args, dtypes, sizes=None, **kw):
        # the output metas: empty NumPy-like arrays of each output's rank and dtype
        outs = sig.split("->")[1].split("),(")
        ranks = [o.count(",") + 1 if o.strip("()") else 0 for o in outs]
        loop = max(a.ndim - len(c.split(",")) if c.strip("()") else a.ndim
                   for a, c in zip(args, sig.split("->")[0].split("),(")))
        single = len(dtypes) == 1
        # matrix axes in one chunk each (Dask's own rechunking divides by zero at size 0);
        # with two inputs also the stack axes, so that their broadcast chunks agree
        ins = sig.split("->")[0].split("),(")
        args = tuple(a.rechunk({i: -1 for i in range(
            a.ndim - (c.count(",") + 1 if c.strip("()") else 0) if len(args) == 1 else 0, a.ndim)})
            for a, c in zip(args, ins))
        meta = tuple(np.empty((0,) * (loop + r), dtype=dt) for r, dt in zip(ranks, dtypes))
        return da.apply_gufunc(kernel, sig, *args, output_sizes=sizes,
                               meta=meta[0] if single else meta, **kw)

    def square(name, x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"linalg.{name}: x must be a stack of square matrices, got shape "
                             f"{x.shape}. Fix: pass an array of shape (..., M, M)")

    def det(x, /):
        square("det", x)
        return gufunc(_k_det, "(m,m)->()", (x,), (x.dtype,))

    def slogdet(x, /):
        square("slogdet", x)
        s, l = gufunc(_k_slogdet, "(m,m)->(),()", (x,), (x.dtype, _real_of(xp, x.dtype)))
        return Slogdet(s, l)

    def eigh(x, /):
        square("eigh", x)
        w, v = gufunc(_k_eigh, "(m,m)->(m),(m,m)", (x,), (_real_of(xp, x.dtype), x.dtype))
        return Eigh(w, v)

    def eigvalsh(x, /):
        square("eigvalsh", x)
        return gufunc(_k_eigvalsh, "(m,m)->(m)", (x,), (_real_of(xp, x.dtype),))

    def eig(x, /):
        square("eig", x)
        c = _complex_of(xp, x.dtype)
        w, v = gufunc(_k_eig, "(m,m)->(m),(m,m)", (x,), (c, c))
        return EigResult(w, v)

    def eigvals(x, /):
        square("eigvals", x)
        return gufunc(_k_eigvals, "(m,m)->(m)", (x,), (_complex_of(xp, x.dtype),))

    def pinv(x, /, *, rtol=None):
        if isinstance(rtol, da.Array) and rtol.ndim:
            return gufunc(_k_pinv_arr, "(m,n),()->(n,m)", (x, rtol), (x.dtype,))
        return gufunc(_k_pinv, "(m,n)->(n,m)", (x,), (x.dtype,), rtol=rtol)

    def cholesky(x, /, *, upper=False):
        square("cholesky", x)
        return gufunc(_k_cholesky, "(m,m)->(m,m)", (x,), (x.dtype,), upper=upper)

    def inv(x, /):
        square("inv", x)
        return gufunc(_k_inv, "(m,m)->(m,m)", (x,), (x.dtype,))

    def solve(x1, x2, /):
        square("solve", x1)
        dt = xp.result_type(x1, x2)
        x1, x2 = xp.astype(x1, dt), xp.astype(x2, dt)
        if x2.ndim == 1:  # a vector only when 1-D (2024.12), broadcast over x1's stack
            return gufunc(_k_solve, "(m,m),(m)->(m)", (x1, x2), (dt,))
        return gufunc(_k_solve, "(m,m),(m,k)->(m,k)", (x1, x2), (dt,))

    def split_rows(x):  # a matrix larger than a chunk: keep Dask's tall-and-skinny algorithms
        return x.ndim == 2 and x.numblocks[0] > 1 and x.shape[0] >= x.shape[1] > 0

    raw_qr, raw_svd = la.qr, la.svd

    def qr(x, /, *, mode="reduced"):
        if mode == "reduced" and split_rows(x):
            return raw_qr(x.rechunk({1: -1}), mode=mode)
        m, n = x.shape[-2:]
        if mode == "complete":
            q, r = gufunc(_k_qr, "(m,n)->(m,i),(i,n)", (x,), (x.dtype, x.dtype),
                          sizes={"i": m}, mode=mode)
        else:
            q, r = gufunc(_k_qr, "(m,n)->(m,k),(k,n)", (x,), (x.dtype, x.dtype),
                          sizes={"k": min(m, n)}, mode=mode)
        return QR(q, r)

    def svd(x, /, *, full_matrices=True):
        if not full_matrices and split_rows(x):
            return SVD(*raw_svd(x.rechunk({1: -1}), full_matrices=False))
        m, n = x.shape[-2:]
        r = _real_of(xp, x.dtype)
        if full_matrices:
            u, s, vh = gufunc(_k_svd, "(m,n)->(m,i),(k),(j,n)", (x,), (x.dtype, r, x.dtype),
                              sizes={"i": m, "j": n, "k": min(m, n)}, full_matrices=True)
        else:
            u, s, vh = gufunc(_k_svd, "(m,n)->(m,k),(k),(k,n)", (x,), (x.dtype, r, x.dtype),
                              sizes={"k": min(m, n)}, full_matrices=False)
        return SVD(u, s, vh)

    def svdvals(x, /):
        m, n = x.shape[-2:]
        return gufunc(_k_svdvals, "(m,n)->(k)", (x,), (_real_of(xp, x.dtype),),
                      sizes={"k": min(m, n)})

    def matrix_rank(x, /, *, rtol=None):
        idt = xp.__array_namespace_info__().default_dtypes()["indexing"]
        if isinstance(rtol, da.Array) and rtol.ndim:
            return gufunc(_k_matrix_rank_arr, "(m,n),()->()", (x, rtol), (idt,))
        return gufunc(_k_matrix_rank, "(m,n)->()", (x,), (idt,), rtol=rtol)

    def tensordot(x1, x2, /, *, axes=2):
        return _keep_dtype(xp, la.tensordot(x1, x2, axes=axes), x1, x2)

    raw_matrix_norm = la.matrix_norm

    def matrix_norm(x, /, *, keepdims=False, ord="fro"):
        if ord not in (2, -2, "nuc") or x.ndim <= 2:
            return raw_matrix_norm(x, keepdims=keepdims, ord=ord)
        s = svdvals(x)  # Dask's SVD-based norms are 2-D only: from the stacked singular values
        r = xp.max(s, axis=-1) if ord == 2 else xp.min(s, axis=-1) if ord == -2 else xp.sum(s, axis=-1)
        return r[..., None, None] if keepdims else r

    return {f"linalg.{f.__name__}": f for f in (
        det, slogdet, eigh, eigvalsh, eig, eigvals, pinv, cholesky, inv, solve, qr, svd,
        svdvals, matrix_rank, tensordot, matrix_norm)}


def _known(n) -> bool:
    """Whether a Dask size is known (unknown ones are NaN until computed)."""
    return n == n and n is not None


def _keep_dtype(xp, r, x1, x2):
    """``r`` in the standard's result dtype of ``x1``, ``x2`` (Dask promotes small ints in sums)."""
    dt = xp.result_type(x1, x2)
    return r if r.dtype == dt else xp.astype(r, dt)


def fixes(xp, earlier: dict) -> dict:
    """``{name: corrected function}`` for Dask (``xp``: ``array_api_compat.dask.array``).

    ``earlier``: the fixes made so far (they are wrapped, not replaced).
    """
    import dask.array as da

    out = linalg_fixes(xp)
    raw_expand = earlier.get("expand_dims", xp.expand_dims)

    def expand_dims(x, /, axis=0):  # (2024.12: axis may be positional)
        if isinstance(axis, tuple):  # Dask raises StopIteration for some bad tuples
            n = x.ndim + len(axis)
            norm = []
            for ax in axis:
                if not -n <= ax < n:
                    raise IndexError(EXPAND_DIMS_AXIS.format(axis=ax, n=n, lo=-n, hi=n - 1))
                if ax % n in norm:
                    raise ValueError(EXPAND_DIMS_REPEATED.format(axes=axis, ax=ax % n))
                norm.append(ax % n)
        return raw_expand(x, axis=axis)

    raw_linspace = xp.linspace

    def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
        r = raw_linspace(start, stop, num, dtype=dtype, device=device, endpoint=endpoint)
        if endpoint and num > 1:  # Dask computes start + i * step: the last one misses stop
            last = xp.arange(num) == num - 1
            r = xp.where(last, xp.asarray(stop, dtype=r.dtype), r)
        return r

    raw_tensordot = xp.tensordot

    def tensordot(x1, x2, /, *, axes=2):
        return _keep_dtype(xp, raw_tensordot(x1, x2, axes=axes), x1, x2)

    raw_repeat = xp.repeat

    def repeat(x, repeats, /, *, axis=None):
        import numpy as np

        if axis is None:  # Dask wants an axis: the flattened array's
            x, axis = xp.reshape(x, (-1,)), 0
        n = x.shape[axis]
        if isinstance(repeats, int) and repeats > 0 and n:
            return raw_repeat(x, repeats, axis=axis)
        # Dask repeats by a Python int only (and fails on empty results): gather instead,
        # with the counts computed (the result's size depends on them; they are small)
        counts = np.asarray(repeats.compute() if isinstance(repeats, da.Array) else repeats)
        idx = np.repeat(np.arange(n), np.broadcast_to(counts, (n,)) if counts.ndim == 0 else counts)
        return x[(slice(None),) * (axis % x.ndim) + (idx,)]

    raw_roll = xp.roll

    def roll(x, /, shift, *, axis=None):
        if 0 in x.shape:  # nothing to move (Dask's flattening reshape fails on empty arrays)
            return x
        if axis is None and x.ndim > 1:  # Dask flattens by reshape, which needs even chunks
            x = x.rechunk(-1)
        return raw_roll(x, shift, axis=axis)

    def creation(raw):  # Dask's automatic chunking divides by zero for an empty shape
        def f(shape, *args, **kwargs):
            dims = (shape,) if isinstance(shape, int) else tuple(shape)
            if 0 in dims and "chunks" not in kwargs:
                kwargs["chunks"] = -1
            return raw(shape, *args, **kwargs)

        f.__name__, f.__doc__ = raw.__name__, raw.__doc__
        return f

    for name in ("zeros", "ones", "empty", "full"):
        out[name] = creation(getattr(xp, name))

    def searchsorted(x1, x2, /, *, side="left", sorter=None):
        if x1.ndim != 1:
            raise ValueError(SEARCHSORTED_1D.format(shape=x1.shape))
        if sorter is not None:  # search the sorted values: Dask takes no sorter
            x1 = xp.take(x1, sorter, axis=0)
        if not isinstance(x2, da.Array):  # a Python scalar (2025.12)
            x2 = xp.asarray(x2, dtype=x1.dtype)
        if x2.ndim == 0:  # Dask's block kernel writes into its result: a 0-d one has no items
            return da.searchsorted(x1, xp.reshape(x2, (1,)), side=side)[0]
        return da.searchsorted(x1, x2, side=side)

    def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
        # Dask's eye fails for some (n_cols, k) chunkings: an outer comparison of aranges
        n_cols = n_rows if n_cols is None else n_cols
        if dtype is None:
            dtype = xp.float64
        rows = da.arange(n_rows)[:, None]
        cols = da.arange(n_cols)[None, :]
        return xp.astype(cols - rows == k, dtype)

    raw_matmul = earlier.get("matmul", xp.matmul)

    def matmul(x1, x2, /):
        # Dask multiplies a 1-D x1 without comparing its length with x2's rows (a wrong-shaped
        # result instead of an error): checked here, on the sizes Dask knows
        s1, s2 = tuple(x1.shape), tuple(x2.shape)
        why = None
        if not s1 or not s2:
            why = "0-d operand"
        else:
            k2 = s2[0] if len(s2) == 1 else s2[-2]
            if _known(s1[-1]) and _known(k2) and s1[-1] != k2:
                why = f"{s1[-1]} against {k2}"
            else:
                lead1, lead2 = s1[:-2][::-1], s2[:-2][::-1]
                if any(_known(a) and _known(b) and a != b and 1 not in (a, b)
                       for a, b in zip(lead1, lead2)):
                    why = "leading axes do not broadcast"
        if why is not None:
            raise ValueError(MATMUL_SHAPES.format(s1=s1, s2=s2, why=why))
        return raw_matmul(x1, x2)

    out.update(expand_dims=expand_dims, linspace=linspace, tensordot=tensordot, repeat=repeat,
               searchsorted=searchsorted, eye=eye, roll=roll, _getitem=getitem, matmul=matmul)
    out["linalg.matmul"] = matmul
    return out


def _int_array(k) -> bool:
    import numpy as np

    dt = getattr(k, "dtype", None)
    return dt is not None and getattr(k, "ndim", None) is not None and np.issubdtype(dt, np.integer)


def _index(v):
    """A slice bound as an int: 0-d integer arrays (lazy ones too) through ``__index__``."""
    return v if v is None or isinstance(v, int) else operator.index(v)


def _slice_bounds(key):
    """``key`` with array-valued slice bounds made ints (NumPy takes them, Dask does not)."""
    if isinstance(key, slice):
        return slice(_index(key.start), _index(key.stop), _index(key.step))
    if isinstance(key, tuple) and any(isinstance(k, slice) for k in key):
        return tuple(_slice_bounds(k) if isinstance(k, slice) else k for k in key)
    return key


def getitem(x, key):
    """``x[key]`` where Dask lacks it: keys of integers and integer arrays together.

    Dask indexes one 1-D integer array per call; the standard's integer-array
    indexing (2024.12) broadcasts all index arrays (and integers) together.
    Here the indexed axes are flattened and gathered with one ``take`` of the
    linear index, which stays lazy with lazy index arrays. Any other key is Dask's.
    """
    key = _slice_bounds(key)
    if not isinstance(key, tuple) or not any(_int_array(k) for k in key):
        return x[key]
    if not all(_int_array(k) or isinstance(k, int) and not isinstance(k, bool) for k in key):
        return x[key]
    if len(key) > x.ndim:
        return x[key]  # Dask's IndexError
    if sum(_int_array(k) for k in key) == 1 and all(
            getattr(k, "ndim", 1) <= 1 for k in key):
        return x[key]  # one 1-D index array: Dask's own
    import dask.array as da
    import numpy as np

    m = len(key)
    idx = [da.asarray(k) for k in key]
    shape = tuple(int(s) for s in x.shape[:m])
    lin = None
    stride = 1
    for dim in range(m - 1, -1, -1):
        i = idx[dim]
        n = shape[dim]
        i = da.where(i < 0, i + n, i)
        term = i * stride
        lin = term if lin is None else lin + term
        stride *= n
    bshape = tuple(np.broadcast_shapes(*(i.shape for i in idx)))
    lin = da.broadcast_to(lin, bshape)
    flat = x.reshape((stride,) + tuple(x.shape[m:]))
    out = flat[lin.reshape(-1)]
    return out.reshape(bshape + tuple(x.shape[m:]))

