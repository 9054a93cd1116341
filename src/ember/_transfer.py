"""``ember.to_backend``: move every array of a structure to another backend or device.

Why: model code is written against a namespace, so switching a trained
model (or an optimizer state, or a batch) from NumPy to CuPy or Dask is only
a matter of moving its arrays. Each array leaf goes through DLPack when the
two libraries can share or copy memory that way (no host round trip, often
no copy at all), and through a host NumPy copy otherwise (e.g. CuPy <->
NumPy, anything -> Dask, Dask -> anything).

- ember Tensors come back as Tensors of the target *wrapper* namespace
  (``ember.autodiff.namespace(target)``), raw arrays as raw arrays of the
  target library; constants (Python scalars, strings, keys, None) are kept.
- Static array fields of modules are moved too.
- ``device=`` puts every moved array on that device of the target backend.
- The move carries no gradient: a leaf tracked by an open transform is an
  error (call ``to_backend`` outside the transform or on
  ``ember.stop_gradient(x)``).

>>> import numpy as np, ember
>>> t = ember.to_backend({"w": np.ones(2), "step": 3}, "array_api_strict")
>>> type(t["w"]).__module__.split(".")[0], t["step"]
('array_api_strict', 3)
"""

from __future__ import annotations

import copy as _copy
import dataclasses
from typing import Any

from . import backend as _backend
from . import tree as _tree
from ._errors import BackendError, NotDifferentiableError
from .autodiff import Tensor
from .autodiff._tensor import raw_value

__all__ = ["to_backend"]

TRACKED_LEAF = (
    "ember.to_backend: the tensor at {path!r} is tracked by an open transform "
    "(grad/vjp); moving it to {target!r} would cut it off from the tape, so its "
    "gradient would silently be lost. Fix: call to_backend outside the transform, "
    "or on ember.stop_gradient(x) if only its value is needed"
)
NOT_MOVABLE = (
    "ember.to_backend: could not move the {src!r} array at {path!r} (shape {shape}, "
    "dtype {dtype}) to backend {target!r}{on}: {error}. Fix: check that the target "
    "supports this dtype and device, or convert the array first (e.g. xp.astype)"
)
BAD_TARGET = (
    "ember.to_backend: target {target!r} is not a backend; pass a name such as "
    "'numpy', 'cupy', 'dask', 'array_api_strict', 'torch' or 'jax', an ember "
    "wrapper namespace (ember.autodiff.numpy), or an array API namespace module"
)


def to_backend(tree: Any, target: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """Move every array leaf of ``tree`` to backend ``target`` (and ``device``).

    Why: the same model code runs on every backend, so moving a model,
    optimizer state or batch between NumPy, CuPy, Dask, array-api-strict,
    PyTorch and JAX is one call. ``target`` is a backend name, an ember
    wrapper namespace, a raw or array-API namespace module, or an array of
    the target library. Tensors become Tensors of the target's wrapper
    namespace; raw arrays become raw arrays of the target library.

    ``copy=None`` (default) shares memory when DLPack allows it (and leaves
    arrays already on the target as they are); ember then never writes in
    place into either side. ``copy=True`` always gives new buffers.

    >>> import ember, ember.autodiff.numpy as xp
    >>> m = ember.to_backend({"w": xp.ones(2)}, "dask")
    >>> m["w"].__array_namespace__()._backend_name
    'dask'
    """
    bxp, wrapper = _resolve_target(target)
    tname = _backend.name(bxp)

    def move(path: Any, leaf: Any) -> Any:
        if isinstance(leaf, Tensor):
            node = leaf._node
            if node is not None and node.trace.active:
                raise NotDifferentiableError(TRACKED_LEAF.format(path=str(path), target=tname))
            ns = wrapper if wrapper is not None else _wrapper_of(bxp)
            if type(leaf)._ns is ns and device is None and not copy:
                return leaf if node is None else ns._wrap(raw_value(leaf))
            return ns._wrap(_move(raw_value(leaf), bxp, tname, device, copy, str(path)))
        if _is_array(leaf):
            return _move(leaf, bxp, tname, device, copy, str(path))
        return leaf

    moved = _tree.map_with_path(move, tree)
    return _move_static(moved, lambda a, p: move(p, a), "")


# --------------------------------------------------------------------------- #
# targets and leaves
# --------------------------------------------------------------------------- #
def _resolve_target(target: Any) -> tuple[Any, Any]:
    """(array-API namespace of the target, its ember wrapper namespace or None)."""
    if getattr(target, "_dispatch", None) is not None and hasattr(target, "_backend"):
        return target._backend, target  # an ember wrapper namespace
    if isinstance(target, Tensor):
        ns = type(target)._ns
        return ns._backend, ns
    if target is None or isinstance(target, (bool, int, float)):
        raise BackendError(BAD_TARGET.format(target=target))
    return _backend.get(target), None


def _wrapper_of(bxp: Any) -> Any:
    from .autodiff import namespace

    return namespace(bxp)


def _is_array(x: Any) -> bool:
    import array_api_compat as compat

    return compat.is_array_api_obj(x)


def _static_names(cls: type) -> tuple[str, ...]:
    """Fields registered static with ``ember.tree.register(cls, static=...)``."""
    from .tree import _registry

    return tuple(getattr(_registry._DISPATCH.get(cls), "static", ()) or ())


def _move_static(x: Any, move: Any, prefix: str) -> Any:
    """Apply ``move(array, path)`` to static array fields of dataclasses inside ``x``."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        new = None
        static = _static_names(type(x))
        for f in dataclasses.fields(x):
            v = getattr(x, f.name, None)
            p = f"{prefix}.{f.name}" if prefix else f.name
            if (f.name in static or f.metadata.get("static", False)) and (_is_array(v) or isinstance(v, Tensor)):
                nv = move(v, p)
            elif isinstance(v, (list, tuple, dict)) or dataclasses.is_dataclass(v):
                nv = _move_static(v, move, p)
            else:
                continue
            if nv is not v:
                if new is None:
                    new = _copy.copy(x)
                object.__setattr__(new, f.name, nv)
        return x if new is None else new
    if isinstance(x, (list, tuple)):
        items = [_move_static(v, move, f"{prefix}.{i}" if prefix else str(i)) for i, v in enumerate(x)]
        if all(a is b for a, b in zip(items, x)):
            return x
        if hasattr(x, "_fields"):
            return type(x)(*items)
        return type(x)(items)
    if isinstance(x, dict):
        out = {k: _move_static(v, move, f"{prefix}.{k}" if prefix else str(k)) for k, v in x.items()}
        if all(out[k] is x[k] for k in x):
            return x
        new = _copy.copy(x)
        new.update(out)
        return new
    return x


# --------------------------------------------------------------------------- #
# moving one array
# --------------------------------------------------------------------------- #
def _lazy(xp: Any) -> bool:
    return _backend.capabilities(xp).lazy


def _source_name(a: Any) -> str:
    import array_api_compat as compat

    return _backend.name(compat.array_namespace(a))


def _move(a: Any, bxp: Any, tname: str, device: Any, copy: bool | None, path: str) -> Any:
    """One raw array of any backend -> a raw array of ``bxp`` (on ``device``)."""
    import array_api_compat as compat

    src = _source_name(a)
    try:
        if src == tname:
            res = a
            if device is not None and not _same_device(compat.device(a), device):
                res = compat.to_device(a, device)
            if copy and res is a:
                res = bxp.asarray(a, copy=True)
            return res
        if _lazy(compat.array_namespace(a)):  # a task graph: evaluate it, then move the result
            a = a.compute()
            src = _source_name(a)
            if src == tname:
                return _move(a, bxp, tname, device, copy, path)
        if _lazy(bxp):  # a lazy target takes host memory (it wraps it in a graph)
            res = bxp.asarray(_to_host(a))
        else:
            res = _via_dlpack(a, bxp, copy)
            if res is None:
                res = _from_host(_to_host(a), bxp, device)
        if device is not None and not _same_device(compat.device(res), device):
            res = compat.to_device(res, device)
        return res
    except BackendError:
        raise
    except Exception as exc:  # backend errors: name the leaf, the target and the fix
        on = "" if device is None else f" on device {device!r}"
        raise BackendError(
            NOT_MOVABLE.format(
                src=src, path=path, shape=tuple(getattr(a, "shape", ())), dtype=getattr(a, "dtype", "?"),
                target=tname, on=on, error=f"{type(exc).__name__}: {exc}",
            )
        ) from exc


def _same_device(have: Any, want: Any) -> bool:
    try:
        if have == want:
            return True
    except Exception:
        return False
    return str(have) == str(want)


def _via_dlpack(a: Any, bxp: Any, copy: bool | None) -> Any:
    """``bxp.from_dlpack(a)``, or None when the two libraries cannot exchange this array."""
    from_dlpack = getattr(bxp, "from_dlpack", None)
    if from_dlpack is None or not hasattr(a, "__dlpack__"):
        return None
    if copy:
        # Copy on the source side, then import that private buffer: from_dlpack(copy=True)
        # is not honoured everywhere (JAX may alias aligned host memory, arrays being immutable).
        try:
            import array_api_compat as compat

            a = compat.array_namespace(a).asarray(a, copy=True)
        except Exception:
            return None
    try:
        res = from_dlpack(a)
    except Exception:  # BufferError, RuntimeError...: other device or unsupported dtype
        return None
    if not copy:
        _protect(a, res)
    return res


def _protect(a: Any, res: Any) -> None:
    """Both sides may share memory now: ember must never write in place into either."""
    from .autodiff._ownership import mark_borrowed

    for r in (a, res):
        try:
            mark_borrowed(r)
        except Exception:  # arrays without weak references: nothing ember could reuse anyway
            pass


def _numpy():
    return _backend.raw(_backend.get("numpy"))


def _to_host(a: Any) -> Any:
    """A NumPy array with the values of ``a`` (copying from a device when needed)."""
    import array_api_compat as compat

    np = _numpy()
    if isinstance(a, np.ndarray):
        return a
    if compat.is_dask_array(a):
        return _to_host(a.compute())
    if compat.is_cupy_array(a):
        return a.get()
    if compat.is_torch_array(a):
        a = a.detach()
        if a.device.type != "cpu":
            a = a.cpu()
        try:
            return a.numpy()
        except Exception:  # e.g. bfloat16: go through DLPack
            return np.from_dlpack(a)
    if compat.is_array_api_strict_obj(a):
        cpu = type(compat.device(a))("CPU_DEVICE")
        if compat.device(a) != cpu:
            a = a.to_device(cpu)
    try:
        return np.from_dlpack(a)
    except Exception:
        return np.asarray(a)


def _from_host(h: Any, bxp: Any, device: Any) -> Any:
    """A ``bxp`` array from host NumPy array ``h`` (a copy), on ``device`` when given."""
    if device is not None:
        try:
            return bxp.asarray(h, device=device)
        except Exception:
            pass  # the final to_device step moves it
    try:
        return bxp.asarray(h)
    except Exception:
        res = _via_dlpack(h, bxp, True)
        if res is None:
            raise
        return res
