"""A backend's BLAS ``gemm`` that accumulates into an existing array: ``c += alpha * (a @ b)``.

An SGD step's ``w - lr * (x.T @ g)`` costs a matrix product, then two passes
over the result (scale, subtract) that read and write a weight-sized array
each. BLAS computes the product and the update in one call (``gemm`` with
``beta = 1``) writing into ``w``'s buffer; ``ember.jit`` does that where a
donated weight dies in such an update (``func._jit_gemm``).

NumPy's ``gemm`` is the one of the BLAS NumPy itself calls: the OpenBLAS its
wheels ship, found among the libraries the process has loaded (threadpoolctl,
the ``fuse`` extra) and called through ctypes. Calling that same library keeps
one BLAS thread pool (a second OpenBLAS beside NumPy's, SciPy's, fights it for
the cores). Another BLAS (a system or conda build, Accelerate, MKL), or a
backend other than NumPy, has none for now: jit then keeps the product and the
update as separate calls. Probed on first use and checked on a small product.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from ember.backend._registry import _probe_once

__all__ = ["Gemm", "gemm"]

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # (CBLAS's enums)


@dataclass(frozen=True)
class Gemm:
    """A backend's matrix product accumulating into an array (see :func:`gemm`).

    Attributes:
        name: the library (``"openblas"``).
        dtypes: the dtypes (names) it computes in.
        min_elements: the smallest result (elements) worth it: below it the call's fixed
            cost is more than the passes it saves (measured in ``benchmarks/gemm_layout.py``).
        max_inner: the longest inner dimension (``a``'s columns) worth it: past it the two
            passes saved are a small part of the product, and the product reading the
            updated array from memory measured slower in a whole step (the transformer's
            1024-long products, ``benchmarks/jit.py``).
    """

    name: str
    dtypes: frozenset
    min_elements: int
    max_inner: int
    _accumulate: Callable = field(repr=False)

    def accumulate(self, c: Any, a: Any, b: Any, alpha: float) -> bool:
        """``c += alpha * (a @ b)`` in ``c``'s buffer; True when done.

        False, with ``c`` untouched, where the call does not apply: arrays not
        2-D or not of one dtype of :attr:`dtypes`, shapes that do not match, an
        empty product, ``c`` read-only, not C- or F-contiguous or sharing memory
        with ``a`` or ``b``, or ``a`` or ``b`` neither C- nor F-contiguous.
        """
        return self._accumulate(c, a, b, alpha)


def _operand(x) -> tuple | None:
    """CBLAS's transpose flag and leading dimension of row-major operand ``x``, or None."""
    if x.flags.c_contiguous:
        return _NO_TRANS, max(1, x.shape[1])
    if x.flags.f_contiguous:
        return _TRANS, max(1, x.shape[0])
    return None


def _numpy_gemm(np: Any, fns: dict) -> Gemm:
    may_share = np.may_share_memory

    def accumulate(c, a, b, alpha):
        f = fns.get(c.dtype)
        if (f is None or a.dtype != c.dtype or b.dtype != c.dtype or c.ndim != 2 or a.ndim != 2
                or b.ndim != 2):
            return False
        m, n = c.shape
        k = a.shape[1]
        if a.shape[0] != m or b.shape != (k, n) or m * n * k == 0 or not c.flags.writeable:
            return False
        if not c.flags.c_contiguous:
            if not c.flags.f_contiguous:
                return False
            c, a, b, m, n = c.T, b.T, a.T, n, m  # (c.T = alpha * b.T @ a.T + c.T, row-major)
        oa, ob = _operand(a), _operand(b)
        if oa is None or ob is None or may_share(c, a) or may_share(c, b):
            return False
        f(_ROW_MAJOR, oa[0], ob[0], m, n, k, alpha, a.ctypes.data, oa[1], b.ctypes.data, ob[1], 1.0,
          c.ctypes.data, max(1, n))
        return True

    return Gemm("openblas", frozenset(str(d) for d in fns), 1 << 15, 256, accumulate)


def _affixes(lib) -> tuple[str, str] | None:
    """The symbol prefix and suffix of an OpenBLAS build (``scipy_``, ``64_``: NumPy's wheels)."""
    for prefix in ("scipy_", ""):
        for suffix in ("64_", "_64", ""):
            if hasattr(lib, f"{prefix}openblas_get_config{suffix}"):
                return prefix, suffix
    return None


def _numpy_blas(np: Any) -> Any:
    """NumPy's own OpenBLAS (a library loaded from NumPy's package tree), as a ctypes
    library, or None."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    here = os.path.realpath(os.path.dirname(np.__file__))
    homes = (here + os.sep, here + ".libs" + os.sep)
    for info in threadpool_info():
        path = os.path.realpath(info.get("filepath") or "")
        if info.get("internal_api") == "openblas" and path.startswith(homes):
            # (already loaded by NumPy: opening it again gives the same library, its threads)
            return ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0))
    return None


def _probe_numpy(lib: Any) -> Gemm | None:
    """NumPy's gemm when ``lib``'s arrays are NumPy's and its BLAS is found and computes a
    small product right."""
    try:
        import numpy as np

        if type(lib.asarray([1.0])) is not np.ndarray:
            return None
        blas = _numpy_blas(np)
        affixes = blas and _affixes(blas)
        if not affixes:
            return None
        prefix, suffix = affixes
        config = getattr(blas, f"{prefix}openblas_get_config{suffix}")
        config.restype = ctypes.c_char_p
        blasint = ctypes.c_int64 if b"USE64BITINT" in (config() or b"") else ctypes.c_int
        fns = {}
        for dtype, letter, real in ((np.float32, "s", ctypes.c_float), (np.float64, "d", ctypes.c_double)):
            f = getattr(blas, f"{prefix}cblas_{letter}gemm{suffix}")
            f.restype = None
            f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, blasint, blasint, blasint, real,
                          ctypes.c_void_p, blasint, ctypes.c_void_p, blasint, real, ctypes.c_void_p, blasint]
            fns[np.dtype(dtype)] = f
        g = _numpy_gemm(np, fns)
        for dtype in fns:  # (small integers: every result exact, whatever the order of the sums)
            a = np.arange(6, dtype=dtype).reshape(2, 3)
            b = np.arange(12, dtype=dtype).reshape(3, 4) - 5
            c = np.ones((2, 4), dtype=dtype)
            want = c - 2 * (a @ b)
            cf = np.asfortranarray(c)
            if not (g.accumulate(c, a, b, -2.0) and g.accumulate(cf, np.asfortranarray(a), b, -2.0)
                    and np.array_equal(c, want) and np.array_equal(cf, want)):
                return None
        return g
    except Exception:  # (a library that is not what it says: no gemm rather than a wrong one)
        return None


_found: dict[int, tuple[Any, Gemm | None]] = {}


def gemm(xp: Any) -> Gemm | None:
    """The accumulating matrix product of namespace ``xp``, or None (probed once per namespace).

    Why: ``ember.jit`` runs a matrix product that a dying array accumulates
    (``w - lr * (x.T @ g)``) as one BLAS call writing into that array: NumPy
    from pip with threadpoolctl installed (``pip install ember[fuse]``).

    >>> import ember.backend as eb
    >>> g = eb.gemm(eb.get("numpy"))
    >>> g is None or g.name == "openblas"
    True
    """
    return _probe_once(_found, xp, _probe_numpy)
