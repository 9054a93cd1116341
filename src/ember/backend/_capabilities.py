"""What a backend can do, probed once, and how ember draws random numbers on it.

Capabilities are *measured* on a tiny array rather than looked up in a table,
so a new library version (or an unknown conformant namespace) reports what it
really does. Random sources give reproducible arrays for ``seed + backend``.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any

from ember._errors import DTypeError
from ember.backend._registry import _import, _version, name, raw

__all__ = ["Capabilities", "capabilities", "RandomSource", "random_source"]

BAD_SEED = "ember.backend.random_source: seed must be a non-negative int, got {seed!r}"
BAD_DTYPE = (
    "ember.backend.random_source.{op}: dtype {dtype!r} is not a {kind} dtype of "
    "backend {backend!r}; pass one of {allowed}"
)
BAD_PROBABILITY = "ember.backend.random_source.bernoulli: p must be in [0, 1], got {p!r}"
BAD_BOUNDS = "ember.backend.random_source.{op}: need low < high, got low={low!r}, high={high!r}"

_REAL_FLOAT = ("float32", "float64")
_INTEGER = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@dataclass(frozen=True)
class Capabilities:
    """What one backend namespace can do, as probed on a tiny array.

    Attributes:
        name: canonical backend name (``ember.backend.name``).
        version: library version, or None when unknown.
        api_version: the namespace's ``__array_api_version__``.
        in_place: writing ``a[...] = v`` changes a's storage, so views see it
            (a consumed buffer can really be reused). False for Dask, whose
            setitem rebuilds the task graph, and for JAX.
        setitem: ``a[...] = v`` is accepted at all (True for Dask too).
        out_param: elementwise functions accept ``out=`` (``xp.add(a, b, out=o)``).
        lazy: arrays are task graphs computed on demand (Dask).
        host: arrays live in host memory (DLPack device CPU), so reading a
            value back (``bool(xp.any(m))``) needs no device transfer.
        base_views: a view names the array owning its memory (``view.base``) and
            arrays carry contiguity ``flags``, so ember can prove that a buffer has
            one holder before ``consume`` writes into it (NumPy, CuPy).
        ufuncs: the library's elementwise functions are NumPy ufuncs (with
            ``.reduce`` and ``out=``), which ember calls directly.
        devices: ``__array_namespace_info__().devices()`` (empty if unknown).
        default_device: the default device, or None when unknown.
        random: how :func:`random_source` draws numbers on this backend.
    """

    name: str
    version: str | None
    api_version: str | None
    in_place: bool
    setitem: bool
    out_param: bool
    lazy: bool
    host: bool
    base_views: bool
    ufuncs: bool
    devices: tuple[Any, ...]
    default_device: Any
    random: str

    @property
    def cheap_checks(self) -> bool:
        """Whether a data-dependent test (``bool(xp.any(mask))``) is cheap: eager and on
        the host, so a rule may test for a rare case instead of always correcting for it."""
        return self.host and not self.lazy


_lock = threading.Lock()
_caps: dict[int, tuple[Any, Capabilities]] = {}
_sources: dict[int, tuple[Any, RandomSource]] = {}


def _first(x: Any) -> bool:
    """True when the first element of a 1-d array equals 1 (computes lazy arrays)."""
    return bool(x[0] == 1) if x is not None else False


def _probe_setitem(xp: Any) -> tuple[bool, bool]:
    """(setitem works, write is visible through an existing view)."""
    try:
        a = xp.zeros((3,))
        view = a[0:2]  # a proper sub-slice: a[...] may return `a` itself (Dask)
        a[0] = 1
    except Exception:
        return False, False
    try:
        return _first(a), _first(view)
    except Exception:
        return True, False


def _probe_out(xp: Any) -> bool:
    """True when ``xp.add(a, b, out=o)`` writes the sum into o."""
    try:
        o = xp.zeros((2,))
        xp.add(xp.zeros((2,)), xp.ones((2,)), out=o)
        return _first(o)
    except Exception:
        return False


def _probe_lazy(xp: Any) -> bool:
    """True when the namespace's arrays are lazy (Dask-like).

    array-api-compat calls every JAX array lazy because it may be a tracer
    under ``jax.jit``; ember's transforms run eagerly, so JAX counts as eager.
    """
    import array_api_compat as compat

    try:
        x = xp.zeros((1,))
        return bool(compat.is_lazy_array(x)) and not compat.is_jax_array(x)
    except Exception:
        return False


def _probe_host(xp: Any) -> bool:
    """True when a new array's DLPack device is the CPU (kDLCPU, 1)."""
    try:
        return xp.zeros((1,)).__dlpack_device__()[0] == 1
    except Exception:
        return False


def _probe_base_views(xp: Any) -> bool:
    """True when a slice's ``.base`` is the sliced array and arrays have ``flags``."""
    lib = _raw_library(xp)
    try:
        a = lib.zeros((3,))
        return a[1:].base is a and hasattr(a, "flags")
    except Exception:
        return False


def _probe_ufuncs(xp: Any) -> bool:
    """True when the library under ``xp`` has NumPy ufuncs as its elementwise functions."""
    import sys

    np = sys.modules.get("numpy")
    lib = _raw_library(xp)
    return np is not None and lib is not None and isinstance(getattr(lib, "add", None), np.ufunc) \
        and isinstance(getattr(lib, "ndarray", None), type)


def _raw_library(xp: Any) -> Any:
    try:
        return raw(xp)
    except Exception:
        return None


def _probe_devices(xp: Any) -> tuple[tuple[Any, ...], Any]:
    """(devices, default device) from ``__array_namespace_info__``, when present."""
    try:
        info = xp.__array_namespace_info__()
    except Exception:
        return (), None
    try:
        with warnings.catch_warnings():  # torch warns while compat probes device types
            warnings.simplefilter("ignore")
            devices = tuple(info.devices())
    except Exception:
        devices = ()
    try:
        default = info.default_device()
    except Exception:
        default = None
    return devices, default


def capabilities(xp: Any) -> Capabilities:
    """Return the probed :class:`Capabilities` of a namespace (cached per namespace).

    Why: autodiff decides from these whether ``consume`` may write into a
    buffer and whether a ufunc ``out=`` fast path exists; the CLI prints them.

    >>> import ember.backend
    >>> caps = ember.backend.capabilities(ember.backend.get("numpy"))
    >>> caps.in_place, caps.out_param, caps.lazy
    (True, True, False)
    """
    hit = _caps.get(id(xp))
    if hit is not None and hit[0] is xp:
        return hit[1]
    backend = name(xp)
    setitem, in_place = _probe_setitem(xp)
    devices, default = _probe_devices(xp)
    known_version = _version(backend) if backend in _KNOWN_SOURCES else None
    caps = Capabilities(
        name=backend,
        version=known_version or _module_version(xp),
        api_version=getattr(xp, "__array_api_version__", None),
        in_place=in_place,
        setitem=setitem,
        out_param=_probe_out(xp),
        lazy=_probe_lazy(xp),
        host=_probe_host(xp),
        base_views=_probe_base_views(xp),
        ufuncs=_probe_ufuncs(xp),
        devices=devices,
        default_device=default,
        random=random_source(xp).description,
    )
    with _lock:
        _caps[id(xp)] = (xp, caps)
    return caps


def _module_version(xp: Any) -> str | None:
    """Best-effort version of an unknown namespace (its own or its package's)."""
    v = getattr(xp, "__version__", None)
    if v is None:
        top = str(getattr(xp, "__name__", "")).split(".")[0]
        try:
            v = getattr(_import(top), "__version__", None) if top else None
        except Exception:
            v = None
    return str(v) if v is not None else None


# --- random sources ---------------------------------------------------------


def _dtype_name(xp: Any, dtype: Any, allowed: tuple[str, ...]) -> str | None:
    """The standard name of ``dtype`` in ``xp`` if it is one of ``allowed``."""
    if isinstance(dtype, str):
        return dtype if dtype in allowed else None
    for n in allowed:
        candidate = getattr(xp, n, None)
        try:
            if candidate is not None and dtype == candidate:
                return n
        except Exception:
            continue
    return None


def _default_dtype(xp: Any, kind: str, fallback: str) -> Any:
    """The namespace's default dtype of a kind ('real floating', 'integral')."""
    try:
        return xp.__array_namespace_info__().default_dtypes()[kind]
    except Exception:
        return getattr(xp, fallback)


def _shape(shape: Any) -> tuple[int, ...]:
    """Normalise an int or sequence of ints to a shape tuple."""
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(s) for s in shape)


def _check_seed(seed: Any) -> int:
    """Reject seeds that are not non-negative ints (bools included)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(BAD_SEED.format(seed=seed))
    return seed


class RandomSource:
    """Draws reproducible random arrays of one backend from an integer seed.

    Why: ember's random keys (``ember.nn``) are plain ints; this object turns a
    key into numbers with the backend's own generator, so the same seed on the
    same backend always gives the same array. Different backends give
    different (but each reproducible) numbers.

    >>> import ember.backend
    >>> rs = ember.backend.random_source(ember.backend.get("numpy"))
    >>> bool((rs.normal(0, (3,)) == rs.normal(0, (3,))).all())
    True
    """

    description = "numpy.random.Generator(PCG64), converted with xp.asarray"

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.backend = name(xp)

    # Subclasses override these four; dtype arguments are standard names.
    def _normal(self, seed: int, shape: tuple[int, ...], dtype: str) -> Any:
        np = _import("numpy")
        g = np.random.Generator(np.random.PCG64(seed))
        return self._from_numpy(g.standard_normal(shape, dtype=dtype))

    def _uniform(self, seed: int, shape: tuple[int, ...], dtype: str, low: float, high: float) -> Any:
        np = _import("numpy")
        g = np.random.Generator(np.random.PCG64(seed))
        u = g.random(shape, dtype=dtype)
        return self._from_numpy((u * (high - low) + low).astype(dtype, copy=False))

    def _integers(self, seed: int, shape: tuple[int, ...], low: int, high: int, dtype: str) -> Any:
        np = _import("numpy")
        g = np.random.Generator(np.random.PCG64(seed))
        return self._from_numpy(g.integers(low, high, size=shape, dtype=dtype))

    def _bernoulli(self, seed: int, shape: tuple[int, ...], p: float) -> Any:
        np = _import("numpy")
        g = np.random.Generator(np.random.PCG64(seed))
        return self._from_numpy(g.random(shape) < p)

    def _from_numpy(self, a: Any) -> Any:
        return self.xp.asarray(a)

    # Public API: validation lives here, once for every backend.
    def _resolve(self, op: str, dtype: Any, allowed: tuple[str, ...], kind: str, fallback: str) -> str:
        if dtype is None:
            dtype = _default_dtype(self.xp, kind, fallback)
        n = _dtype_name(self.xp, dtype, allowed)
        if n is None:
            raise DTypeError(
                BAD_DTYPE.format(op=op, dtype=dtype, kind=kind, backend=self.backend, allowed=", ".join(allowed))
            )
        return n

    def normal(self, seed: int, shape: Any, dtype: Any = None) -> Any:
        """Standard normal samples of ``shape`` (default: the backend's default float)."""
        d = self._resolve("normal", dtype, _REAL_FLOAT, "real floating", "float64")
        return self._normal(_check_seed(seed), _shape(shape), d)

    def uniform(self, seed: int, shape: Any, dtype: Any = None, low: float = 0.0, high: float = 1.0) -> Any:
        """Uniform samples in ``[low, high)`` of ``shape`` and a real floating dtype."""
        d = self._resolve("uniform", dtype, _REAL_FLOAT, "real floating", "float64")
        if not low < high:
            raise ValueError(BAD_BOUNDS.format(op="uniform", low=low, high=high))
        return self._uniform(_check_seed(seed), _shape(shape), d, float(low), float(high))

    def integers(self, seed: int, shape: Any, low: int, high: int, dtype: Any = None) -> Any:
        """Uniform integers in ``[low, high)`` of ``shape`` (default: default integer dtype)."""
        d = self._resolve("integers", dtype, _INTEGER, "integral", "int64")
        if not low < high:
            raise ValueError(BAD_BOUNDS.format(op="integers", low=low, high=high))
        return self._integers(_check_seed(seed), _shape(shape), int(low), int(high), d)

    def bernoulli(self, seed: int, shape: Any, p: float = 0.5) -> Any:
        """Boolean array of ``shape`` whose entries are True with probability ``p``."""
        if not 0.0 <= p <= 1.0:
            raise ValueError(BAD_PROBABILITY.format(p=p))
        return self._bernoulli(_check_seed(seed), _shape(shape), float(p))

    def __repr__(self) -> str:
        return f"<RandomSource {self.backend}: {self.description}>"


class _NumpySource(RandomSource):
    description = "numpy.random.Generator(PCG64)"

    def _from_numpy(self, a: Any) -> Any:
        return a


class _DaskSource(RandomSource):
    description = "dask.array.random.default_rng (PCG64, one stream per chunk, chunks='auto')"

    def _gen(self, seed: int) -> Any:
        return _import("dask.array").random.default_rng(seed)

    def _normal(self, seed: int, shape: tuple[int, ...], dtype: str) -> Any:
        return self._gen(seed).standard_normal(shape, dtype=dtype)

    def _uniform(self, seed: int, shape: tuple[int, ...], dtype: str, low: float, high: float) -> Any:
        u = self._gen(seed).random(shape, dtype=dtype)
        return (u * (high - low) + low).astype(dtype)

    def _integers(self, seed: int, shape: tuple[int, ...], low: int, high: int, dtype: str) -> Any:
        return self._gen(seed).integers(low, high, size=shape, dtype=dtype)

    def _bernoulli(self, seed: int, shape: tuple[int, ...], p: float) -> Any:
        return self._gen(seed).random(shape) < p


class _CupySource(RandomSource):
    description = "cupy.random.default_rng (XORWOW)"

    def _gen(self, seed: int) -> Any:
        return _import("cupy").random.default_rng(seed)

    def _normal(self, seed: int, shape: tuple[int, ...], dtype: str) -> Any:
        return self._gen(seed).standard_normal(shape, dtype=dtype)

    def _uniform(self, seed: int, shape: tuple[int, ...], dtype: str, low: float, high: float) -> Any:
        u = self._gen(seed).random(shape, dtype=dtype)
        return (u * (high - low) + low).astype(dtype, copy=False)

    def _integers(self, seed: int, shape: tuple[int, ...], low: int, high: int, dtype: str) -> Any:
        return self._gen(seed).integers(low, high, size=shape, dtype=dtype)

    def _bernoulli(self, seed: int, shape: tuple[int, ...], p: float) -> Any:
        return self._gen(seed).random(shape) < p


class _TorchSource(RandomSource):
    description = "torch.Generator().manual_seed(seed) on CPU (mt19937)"

    def _gen(self, seed: int) -> Any:
        return _import("torch").Generator().manual_seed(seed)

    def _normal(self, seed: int, shape: tuple[int, ...], dtype: str) -> Any:
        torch = _import("torch")
        return torch.randn(shape, generator=self._gen(seed), dtype=getattr(torch, dtype))

    def _uniform(self, seed: int, shape: tuple[int, ...], dtype: str, low: float, high: float) -> Any:
        torch = _import("torch")
        u = torch.rand(shape, generator=self._gen(seed), dtype=getattr(torch, dtype))
        return u * (high - low) + low

    def _integers(self, seed: int, shape: tuple[int, ...], low: int, high: int, dtype: str) -> Any:
        torch = _import("torch")
        return torch.randint(low, high, shape, generator=self._gen(seed), dtype=getattr(torch, dtype))

    def _bernoulli(self, seed: int, shape: tuple[int, ...], p: float) -> Any:
        torch = _import("torch")
        return torch.rand(shape, generator=self._gen(seed)) < p


class _JaxSource(RandomSource):
    description = "jax.random.key(seed) (threefry2x32)"

    def _key(self, seed: int) -> Any:
        return _import("jax").random.key(seed)

    def _normal(self, seed: int, shape: tuple[int, ...], dtype: str) -> Any:
        jax = _import("jax")
        return jax.random.normal(self._key(seed), shape, dtype=getattr(jax.numpy, dtype))

    def _uniform(self, seed: int, shape: tuple[int, ...], dtype: str, low: float, high: float) -> Any:
        jax = _import("jax")
        return jax.random.uniform(self._key(seed), shape, dtype=getattr(jax.numpy, dtype), minval=low, maxval=high)

    def _integers(self, seed: int, shape: tuple[int, ...], low: int, high: int, dtype: str) -> Any:
        jax = _import("jax")
        return jax.random.randint(self._key(seed), shape, low, high, dtype=getattr(jax.numpy, dtype))

    def _bernoulli(self, seed: int, shape: tuple[int, ...], p: float) -> Any:
        jax = _import("jax")
        return jax.random.bernoulli(self._key(seed), p, shape)


class _StrictSource(RandomSource):
    description = "numpy.random.Generator(PCG64), then array_api_strict.asarray"


_KNOWN_SOURCES: dict[str, type[RandomSource]] = {
    "numpy": _NumpySource,
    "dask": _DaskSource,
    "cupy": _CupySource,
    "torch": _TorchSource,
    "jax": _JaxSource,
    "array_api_strict": _StrictSource,
}


def random_source(xp: Any) -> RandomSource:
    """Return the :class:`RandomSource` for a namespace (cached per namespace).

    NumPy and Dask use PCG64, CuPy its default_rng, array_api_strict and unknown
    namespaces draw with NumPy then ``xp.asarray``, torch a seeded CPU
    ``torch.Generator``, JAX ``jax.random.key``.

    >>> import ember.backend
    >>> rs = ember.backend.random_source(ember.backend.get("numpy"))
    >>> rs.integers(7, (2, 2), 0, 10).shape
    (2, 2)
    """
    hit = _sources.get(id(xp))
    if hit is not None and hit[0] is xp:
        return hit[1]
    cls = _KNOWN_SOURCES.get(name(xp), RandomSource)
    src = cls(xp)
    with _lock:
        _sources[id(xp)] = (xp, src)
    return src



def may_share_memory(a: Any, b: Any) -> bool | None:
    """Whether two arrays of a host backend may share memory; None when it cannot be told.

    Why: NumPy's ``reshape`` is a view only when the layout allows it (a copy
    otherwise), and autodiff keeps views of a tensor in step with writes to it
    inside transforms only when they alias eagerly too. NumPy arrays are
    compared directly, other host arrays (array-api-strict) through DLPack;
    device arrays, lazy arrays and arrays without DLPack give None.

    >>> import numpy as np
    >>> a = np.zeros((2, 3))
    >>> may_share_memory(a, a.reshape(6)), may_share_memory(a, a.T.reshape(6))
    (True, False)
    """
    import numpy as np

    try:
        ha = a if isinstance(a, np.ndarray) else np.from_dlpack(a)
        hb = b if isinstance(b, np.ndarray) else np.from_dlpack(b)
    except Exception:
        return None
    return bool(np.may_share_memory(ha, hb))
