"""Backend registry: from a name, an array or a module to a conformant namespace.

This is the only place in ember that imports array libraries, and it does so
lazily: importing ``ember.backend`` imports none of NumPy, CuPy, Dask, PyTorch
or JAX. Each backend is one row of :data:`_BACKENDS`.
"""

from __future__ import annotations

import importlib
import threading
import types
from dataclasses import dataclass
from typing import Any

from ember._errors import BackendError, BackendNotInstalledError

__all__ = ["KNOWN", "get", "name", "raw", "available"]

# --- error texts (constants so tests can check them) -----------------------

NOT_INSTALLED = "backend {name!r} is not installed: {install}"
UNKNOWN_BACKEND = (
    "ember.backend.get: unknown backend {spec!r}; known names are {known}. "
    "You may also pass an array or an array API namespace module."
)
NOT_A_NAMESPACE = (
    "ember.backend.get: {obj!r} is not an array API namespace (it lacks "
    "`asarray` or `__array_api_version__`). Pass a backend name such as "
    "'numpy', an array, or a module that follows the array API standard."
)
NOT_AN_ARRAY = (
    "ember.backend.get: cannot find an array API namespace for an object of "
    "type {type}: {error}. Pass a backend name such as 'numpy', an array of a "
    "supported library, or a namespace module."
)


@dataclass(frozen=True)
class _Backend:
    """One row of the registry: where a backend lives and how to install it."""

    name: str
    raw_module: str  # the library module users know (numpy, dask.array, ...)
    namespace_module: str  # the array-API conformant namespace ember uses
    version_module: str  # top-level package that carries __version__
    install: str  # the fix printed when the import fails


_BACKENDS: dict[str, _Backend] = {
    b.name: b
    for b in (
        _Backend("numpy", "numpy", "array_api_compat.numpy", "numpy", "pip install numpy"),
        _Backend("cupy", "cupy", "array_api_compat.cupy", "cupy",
                 'pip install -e ".[cupy]" in the ember checkout'),
        _Backend("dask", "dask.array", "array_api_compat.dask.array", "dask",
                 'pip install -e ".[dask]" in the ember checkout'),
        _Backend(
            "array_api_strict",
            "array_api_strict",
            "array_api_strict",
            "array_api_strict",
            'pip install -e ".[strict]" in the ember checkout',
        ),
        _Backend("torch", "torch", "array_api_compat.torch", "torch", "pip install torch"),
        _Backend("jax", "jax.numpy", "jax.numpy", "jax", "pip install jax"),
    )
}

#: Canonical backend names, in the order ``available()`` reports them.
KNOWN: tuple[str, ...] = tuple(_BACKENDS)

# Other spellings accepted by ``get``.
_ALIASES = {"dask.array": "dask", "jax.numpy": "jax", "strict": "array_api_strict"}

_lock = threading.Lock()
_by_name: dict[str, Any] = {}  # canonical name -> namespace
_by_module: dict[int, tuple[Any, Any]] = {}  # id(module) -> (module, namespace)


def _import(module: str) -> types.ModuleType:
    """Import a module by dotted name (one seam, so tests can simulate absence)."""
    return importlib.import_module(module)


def _clear_cache() -> None:
    """Forget every resolved namespace (for tests that fake a missing library)."""
    with _lock:
        _by_name.clear()
        _by_module.clear()


def _load(backend_name: str) -> Any:
    """Import a registry row's namespace, translating ImportError into ember's."""
    ns = _by_name.get(backend_name)
    if ns is not None:
        return ns
    row = _BACKENDS[backend_name]
    try:
        _import(row.raw_module)
        ns = _import(row.namespace_module)
    except ImportError as exc:
        raise BackendNotInstalledError(
            NOT_INSTALLED.format(name=backend_name, install=row.install)
        ) from exc
    with _lock:
        _by_name[backend_name] = ns
    return ns


def _compat_name(obj: Any) -> str | None:
    """The canonical name of a known library namespace (raw or compat), else None."""
    import array_api_compat as compat

    checks = (
        ("numpy", compat.is_numpy_namespace),
        ("cupy", compat.is_cupy_namespace),
        ("dask", compat.is_dask_namespace),
        ("array_api_strict", compat.is_array_api_strict_namespace),
        ("torch", compat.is_torch_namespace),
        ("jax", compat.is_jax_namespace),
    )
    for backend_name, check in checks:
        try:
            if check(obj):
                return backend_name
        except Exception:  # a check must never make get() fail
            continue
    return None


def _is_namespace(obj: Any) -> bool:
    """True for modules and namespace objects; arrays have ``__array_namespace__``."""
    if isinstance(obj, types.ModuleType):
        return True
    return hasattr(obj, "__array_api_version__") and not hasattr(obj, "__array_namespace__")


def _from_namespace(module: Any) -> Any:
    """Map a raw library module to its conformant namespace, or accept a conformant one."""
    key = id(module)
    hit = _by_module.get(key)
    if hit is not None and hit[0] is module:
        return hit[1]
    known = _compat_name(module)
    if known is not None:
        ns = _load(known)
    elif hasattr(module, "asarray") and hasattr(module, "__array_api_version__"):
        ns = module
    else:
        raise BackendError(NOT_A_NAMESPACE.format(obj=module))
    with _lock:
        _by_module[key] = (module, ns)  # keep module alive so id() stays unique
    return ns


def get(spec: Any) -> Any:
    """Return the array-API conformant namespace for a backend name, array or module.

    ember writes every computation against this namespace, so raw libraries are
    mapped onto their ``array_api_compat`` wrappers (``array_api_strict`` and
    ``jax.numpy`` are used as they are). Results are cached.

    ``spec`` may be a name (``"numpy"``, ``"cupy"``, ``"dask"``,
    ``"array_api_strict"``, ``"torch"``, ``"jax"``), an array of any of these,
    a raw library module (``numpy``, ``dask.array``, ...), or any module that
    follows the standard (returned unchanged).

    >>> import ember.backend
    >>> ember.backend.get("numpy").__name__
    'array_api_compat.numpy'

    Raises BackendNotInstalledError when the library is missing (the message
    says what to ``pip install``) and BackendError for anything else unusable.
    Note that ``get("cupy")`` only imports CuPy; see :func:`available` to know
    whether a CUDA device exists.
    """
    if isinstance(spec, str):
        key = _ALIASES.get(spec, spec)
        if key not in _BACKENDS:
            raise BackendError(UNKNOWN_BACKEND.format(spec=spec, known=", ".join(KNOWN)))
        return _load(key)
    if _is_namespace(spec):
        return _from_namespace(spec)
    import array_api_compat as compat

    try:
        return compat.array_namespace(spec)
    except TypeError as exc:
        raise BackendError(NOT_AN_ARRAY.format(type=type(spec).__name__, error=exc)) from exc


def name(xp: Any) -> str:
    """Return the short canonical name of a namespace (``"numpy"``, ``"dask"``, ...).

    Used in messages, capability tables and file headers, where the module path
    of a compat wrapper would be noise. Unknown namespaces give their module name.

    >>> import ember.backend
    >>> ember.backend.name(ember.backend.get("numpy"))
    'numpy'
    """
    for backend_name, ns in list(_by_name.items()):
        if ns is xp:
            return backend_name
    known = _compat_name(xp)
    if known is not None:
        return known
    return str(getattr(xp, "__name__", type(xp).__name__))


def raw(xp: Any) -> Any:
    """Return the library module behind a namespace (``numpy`` for compat NumPy).

    Why: the autodiff layer uses it for fast paths the standard does not offer,
    e.g. NumPy/CuPy ufuncs with ``out=`` to write into a consumed buffer.
    Mapping: numpy -> ``numpy``, cupy -> ``cupy``, dask -> ``dask.array``,
    torch -> ``torch``, jax -> ``jax.numpy``; array_api_strict and unknown
    namespaces have no separate library and are returned unchanged.

    >>> import numpy, ember.backend
    >>> ember.backend.raw(ember.backend.get("numpy")) is numpy
    True
    """
    known = _compat_name(xp)
    if known is None or known == "array_api_strict":
        return xp
    try:
        return _import(_BACKENDS[known].raw_module)
    except ImportError as exc:  # cannot happen for a namespace we were handed
        row = _BACKENDS[known]
        raise BackendNotInstalledError(NOT_INSTALLED.format(name=known, install=row.install)) from exc


def _version(backend_name: str) -> str | None:
    """The installed version of a backend's library, or None when unknown."""
    try:
        mod = _import(_BACKENDS[backend_name].version_module)
    except Exception:
        return None
    v = getattr(mod, "__version__", None)
    return str(v) if v is not None else None


def _usable(backend_name: str) -> bool:
    """True when the backend imports (and, for CuPy, sees a CUDA device)."""
    try:
        _load(backend_name)
        if backend_name == "cupy":
            cupy = _import("cupy")
            return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False
    return True


def available() -> dict[str, str | None]:
    """Return ``{name: version or None}`` for every known backend; never raises.

    A backend counts (has a version) when it imports; CuPy counts only when a
    CUDA device exists. ``ember info`` and the test-suite use this to list or
    skip backends.

    >>> import ember.backend
    >>> ember.backend.available()["numpy"] is not None
    True
    """
    out: dict[str, str | None] = {}
    for backend_name in KNOWN:
        out[backend_name] = (_version(backend_name) or "unknown") if _usable(backend_name) else None
    return out


_probe_lock = threading.Lock()


def _probe_once(cache: dict, xp: Any, probe: Any) -> Any:
    """``probe(lib)`` for the library of namespace ``xp`` (None where it has none), computed
    once per namespace: ``cache`` maps ``id(xp)`` to ``(xp, result)``."""
    hit = cache.get(id(xp))
    if hit is not None and hit[0] is xp:
        return hit[1]
    try:
        lib = raw(xp)
    except Exception:
        lib = None
    found = probe(lib) if lib is not None else None
    with _probe_lock:
        cache[id(xp)] = (xp, found)
    return found
