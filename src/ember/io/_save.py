"""``ember.io.save``: any structure to one safetensors file, written atomically.

The structure goes into ``__metadata__["ember"]`` as JSON (never pickle):

``{"format": "ember.io", "version": 1, "tree": NODE}`` where NODE is one of

* ``{"k": "array", "path": "enc.w", "dtype": "float32", "shape": [2, 3]}`` -
  an array leaf, stored in the safetensors part under the name ``path``;
* ``{"k": "const", "v": VALUE}`` - a constant (see below);
* ``{"k": "list" | "tuple", "items": [NODE, ...]}``;
* ``{"k": "namedtuple", "type": "mod:Qual", "fields": [...], "items": [...]}``;
* ``{"k": "dict", "type": "dict" | "OrderedDict" | "defaultdict", "factory": ...,
  "items": [[VALUE_key, NODE], ...]}`` (insertion order kept);
* ``{"k": "dataclass", "type": "mod:Qual", "fields": [[name, NODE], ...],
  "static": [[name, VALUE], ...]}`` - a class registered with ember.tree;
* ``{"k": "node", "type": "mod:Qual", "aux": VALUE, "items": [[KEY, NODE], ...]}``
  - a type registered with ``ember.tree.register_node``.

VALUE (constants, static fields, dict keys, aux data) is plain JSON for None,
bool, int, str and finite floats, and a tagged object ``{"$": tag, ...}`` for
everything else that can be stored: ``float`` (nan/inf), ``complex``,
``bytes``, ``tuple``, ``list``, ``dict``, ``dtype`` (by name) and ``array``
(a static array, as hex bytes), ``function`` (by registered name),
``callable`` (an import path, opt-in) and ``partial``. Anything else
cannot be stored unless registered (see :mod:`ember.io._functions`), and save says
at which path it found one.
"""

from __future__ import annotations

import dataclasses
import json
import errno
import os
import re
import secrets
import stat
import sys
import time
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no flock; stale temps are then judged by age
    fcntl = None  # type: ignore[assignment]

from ember._errors import StructureError
from ember.io import _format
from ember.io._format import EMBER_KEY, FORMAT_NAME, FORMAT_VERSION, node_kind, type_name

__all__ = ["save"]

# --- error texts (constants so tests can check them) -----------------------

UNSAVABLE_ARRAY = "ember.io.save: cannot bring the array at {path!r} (a {type}) to host memory: {error}"
UNSUPPORTED_DTYPE = (
    "ember.io.save: the array at {path!r} has dtype {dtype}, which ember files cannot hold; "
    "supported dtypes are {known}. Cast it first (e.g. xp.astype(x, xp.float32))."
)
BAD_METADATA = (
    "ember.io.save: metadata must be a dict of str to str without the reserved key 'ember'; got {bad!r}"
)
UNSAVABLE_TYPE = "ember.io.save: cannot store the {what} at {path!r}: {why}"
UNPARSEABLE_PATH = (
    "ember.io.save: the leaf at {path!r} has a path that does not parse back (a dict key without "
    "a JSON form); use str, int, float, bool, None or tuples of those as dict keys"
)




# --- arrays ---------------------------------------------------------------


def to_host(x: Any, path: str) -> tuple[Any, str]:
    """Bring an array of any backend to a C-contiguous little-endian NumPy array.

    Returns ``(array, dtype name)``. complex128 comes back viewed as float64
    pairs (safetensors has no complex128 code).
    """
    np = _format.host_numpy()
    import array_api_compat as compat

    try:
        if isinstance(x, np.ndarray | np.generic):
            arr = np.asarray(x)
        elif compat.is_dask_array(x):
            arr = np.asarray(x.compute())
        elif compat.is_cupy_array(x):
            arr = x.get()
        elif compat.is_torch_array(x):
            arr = x.detach().cpu().numpy()
        elif hasattr(x, "__array__"):
            arr = np.asarray(x)
        else:
            arr = np.from_dlpack(x)
    except Exception as exc:
        raise StructureError(UNSAVABLE_ARRAY.format(path=path, type=type(x).__qualname__, error=exc)) from exc
    name = str(arr.dtype.name)
    if name not in _format.DTYPES:
        raise StructureError(UNSUPPORTED_DTYPE.format(path=path, dtype=arr.dtype, known=sorted(_format.DTYPES)))
    arr = np.asarray(arr, dtype=arr.dtype.newbyteorder("<"), order="C")  # keeps 0-d (ascontiguousarray does not)
    if name == "complex128":
        arr = arr.reshape((*arr.shape, 1)).view("<f8")  # (..., 2): real, imag
    return arr, name


def _compute_dask(leaves: list[Any]) -> list[Any]:
    """Compute all Dask leaves in one pass, so shared graph pieces run once."""
    import array_api_compat as compat

    idx = [i for i, x in enumerate(leaves) if compat.is_dask_array(x)]
    if len(idx) < 2:
        return leaves
    dask = sys.modules["dask"]  # a dask array exists, so dask is imported
    done = dask.compute(*[leaves[i] for i in idx])
    out = list(leaves)
    for i, v in zip(idx, done, strict=True):
        out[i] = v
    return out


# --- structure ------------------------------------------------------------

_FACTORIES = {"list": list, "dict": dict, "int": int, "float": float, "str": str, "set": set, "tuple": tuple}


class _Encoder:
    """Walks a structure the way ember.tree does and emits the NODE JSON."""

    def __init__(self, allow_callables: bool = False) -> None:
        from ember.tree import Index, Key, Name

        self.Index, self.Key, self.Name = Index, Key, Name
        self.allow_callables = allow_callables
        self.leaves: list[tuple[Any, dict[str, Any], Any]] = []  # (path, node, array)

    def _value(self, v: Any, path: str) -> Any:
        return _format.encode_value(v, path, to_host, self.allow_callables)

    def node(self, x: Any, path: Any) -> dict[str, Any]:
        kind = node_kind(x)
        if kind == "array":
            node = {"k": "array", "path": str(path)}  # dtype/shape added after host transfer
            self.leaves.append((path, node, x))
            return node
        if kind == "const":
            return {"k": "const", "v": self._value(x, str(path))}
        if kind in ("list", "tuple"):
            return {"k": kind, "items": [self.node(c, path / self.Index(i)) for i, c in enumerate(x)]}
        if kind == "namedtuple":
            cls = type(x)
            return {
                "k": "namedtuple",
                "type": type_name(cls),
                "fields": list(cls._fields),
                "items": [self.node(c, path / self.Name(f)) for f, c in zip(cls._fields, x, strict=True)],
            }
        if kind == "dict":
            return self._dict(x, path)
        if kind == "dataclass":
            return self._dataclass(x, path)
        return self._custom(x, path)

    def _dict(self, x: dict[Any, Any], path: Any) -> dict[str, Any]:
        t = type(x)
        factory = None
        if t is dict:
            tname = "dict"
        elif t.__name__ == "OrderedDict":
            tname = "OrderedDict"
        else:  # collections.defaultdict
            tname = "defaultdict"
            f = x.default_factory  # type: ignore[attr-defined]
            if f is not None and _FACTORIES.get(getattr(f, "__name__", "")) is not f:
                why = f"its default_factory {f!r} is not None or one of {sorted(_FACTORIES)}"
                raise StructureError(UNSAVABLE_TYPE.format(what="defaultdict", path=str(path), why=why))
            factory = None if f is None else f.__name__
        items = []
        for k, v in x.items():
            key = self.Name(k) if type(k) is str else self.Key(k)
            items.append([self._value(k, str(path)), self.node(v, path / key)])
        return {"k": "dict", "type": tname, "factory": factory, "items": items}

    def _dataclass(self, x: Any, path: Any) -> dict[str, Any]:
        cls = type(x)
        static_names = _format.static_fields(cls)
        fields, static = [], []
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            sub = path / self.Name(f.name)
            if f.name in static_names:
                static.append([f.name, self._value(v, str(sub))])
            else:
                fields.append([f.name, self.node(v, sub)])
        return {"k": "dataclass", "type": type_name(cls), "fields": fields, "static": static}

    def _custom(self, x: Any, path: Any) -> dict[str, Any]:
        children, aux = _format.custom_flatten(x)
        items = [[_format.encode_key(key), self.node(child, path / key)] for key, child in children]
        return {"k": "node", "type": type_name(type(x)), "aux": self._value(aux, str(path)), "items": items}


def _check_metadata(metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise TypeError(BAD_METADATA.format(bad=metadata))
    bad = {k: v for k, v in metadata.items() if not (type(k) is str and type(v) is str) or k == EMBER_KEY}
    if bad:
        raise TypeError(BAD_METADATA.format(bad=bad))
    return dict(metadata)


def build(
    tree: Any, metadata: dict[str, str] | None, allow_callables: bool = False
) -> tuple[dict[str, Any], dict[str, str]]:
    """Encode ``tree``: the host arrays by tensor name and the safetensors metadata."""
    from ember.tree import Path, parse_path

    meta = _check_metadata(metadata)
    enc = _Encoder(allow_callables)
    root = enc.node(tree, Path(()))
    seen: set[str] = set()
    for path, node, _ in enc.leaves:
        p = node["path"]
        try:
            ok = parse_path(p) == path
        except (StructureError, TypeError, ValueError):
            ok = False
        if not ok:
            raise StructureError(UNPARSEABLE_PATH.format(path=p))
        if p in seen:  # two different keys with one text form: cannot happen for valid paths
            raise StructureError(f"ember.io.save: two leaves share the path {p!r}")
        seen.add(p)
    arrays = _compute_dask([x for _, _, x in enc.leaves])
    tensors: dict[str, Any] = {}
    for (_, node, _), x in zip(enc.leaves, arrays, strict=True):
        p = node["path"]
        arr, name = to_host(x, p)
        shape = arr.shape[:-1] if name == "complex128" else arr.shape
        node["dtype"], node["shape"] = name, list(shape)
        tensors[p] = arr
    meta[EMBER_KEY] = json.dumps(
        {"format": FORMAT_NAME, "version": FORMAT_VERSION, "tree": root},
        separators=(",", ":"), ensure_ascii=False, allow_nan=False,
    )
    return tensors, meta


# --- atomic write ---------------------------------------------------------
#
# A save writes ``.{name}.tmp-{pid}-{12 hex}`` next to the target, holding an
# exclusive flock on it from creation until after the rename. A temp file of
# that pattern that nobody holds locked belongs to a dead save (killed, or a
# crashed machine): any later save into the same directory removes it. The
# pid in the name is informational only: it means nothing across PID
# namespaces (containers) or machines (shared filesystems), the lock does.

TEMP_PREFIX = ".{name}.tmp-"
TEMP_PATTERN = re.compile(r"\..+\.tmp-[0-9]+-[0-9a-f]{12}")
#: Without flock (Windows), an unlocked-looking temp file is removed only past this age.
NO_LOCK_MIN_AGE_S = 3600.0


def _temp_path(target: str) -> str:
    d, name = os.path.split(target)
    return os.path.join(d, f"{TEMP_PREFIX.format(name=name)}{os.getpid()}-{secrets.token_hex(6)}")


def _try_lock(fd: int) -> bool:
    """Take an exclusive flock on ``fd`` without waiting; True when taken."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def clean_stale_temps(target: str) -> list[str]:
    """Remove temp files of dead saves from ``target``'s directory; returns their names.

    A temp file (any target name, ``.{name}.tmp-{pid}-{random}``) is dead when
    no process holds its lock: every live save holds one on its own temp file
    for as long as it writes. The lock is taken here before the unlink, so a
    save starting at that moment waits, sees its file gone, and starts over.
    """
    d = os.path.dirname(os.path.abspath(target))
    removed: list[str] = []
    try:
        entries = os.listdir(d)
    except OSError:
        return removed
    for entry in entries:
        if not TEMP_PATTERN.fullmatch(entry):
            continue
        full = os.path.join(d, entry)
        try:
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            if fcntl is None and time.time() - st.st_mtime < NO_LOCK_MIN_AGE_S:
                continue
            if not _try_lock(fd):
                continue  # a live save holds it
            try:
                if os.stat(full, follow_symlinks=False).st_ino != st.st_ino:
                    continue
                os.remove(full)
                removed.append(entry)
            except OSError:
                pass
        finally:
            os.close(fd)
    return removed


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d or ".", os.O_RDONLY)
    except OSError:  # platforms (Windows) that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _create_locked_temp(target: str, mode: int | None) -> tuple[str, int]:
    """Create a fresh temp file next to ``target`` and lock it; retried if a cleaner took it."""
    for _ in range(100):
        tmp = _temp_path(target)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits out a cleaner that locked it first
        if _same_file(fd, tmp):
            if mode is not None:
                os.fchmod(fd, mode)
            return tmp, fd
        os.close(fd)  # a cleaner removed it between create and lock
    raise OSError(f"ember.io.save: could not create a temp file next to {target!r}")


def write_atomic(target: str, tensors: dict[str, Any], metadata: dict[str, str]) -> None:
    """Write the file to a locked temp file next to ``target``, fsync, then rename over it.

    A crash at any moment leaves ``target`` either as it was or complete. An
    existing target keeps its permission bits (a 0600 file stays 0600).
    """
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = None
    tmp, fd = _create_locked_temp(target, mode)
    try:
        _format.write_tensors(fd, tensors, metadata)
        os.fsync(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            if _same_file(fd, tmp):
                os.remove(tmp)
        except OSError:
            pass
        os.close(fd)
        raise
    os.close(fd)
    _fsync_dir(os.path.dirname(target))


def save(
    path: str | os.PathLike[str],
    tree: Any,
    *,
    metadata: dict[str, str] | None = None,
    allow_callables: bool = False,
) -> None:
    """Save any structure (module, optimizer state, both) to one safetensors file.

    Arrays (any backend; Dask arrays are computed in one pass) are stored under
    their ember path; the structure, constants and static fields go as JSON into
    the file's metadata, so ``load(path)`` rebuilds the same structure without
    pickle. Functions are stored by registered name (ember's own activations are
    registered; add yours with :func:`ember.io.register_function`); with
    ``allow_callables=True`` other module-level callables are stored by import
    path. ``metadata`` adds your own string pairs (read them with
    :func:`ember.io.read_metadata`). The write is atomic: a crash leaves the old
    file or the new one, never a mix; temp files of dead saves in the same
    directory are removed by the next save there.

    >>> import numpy as np, ember.io, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> ember.io.save(p, {"w": np.ones(2), "step": 3})
    >>> ember.io.load(p)["step"]
    3
    """
    target = os.fspath(path)
    tensors, meta = build(tree, metadata, allow_callables)
    _check_target(target)
    try:
        clean_stale_temps(target)
        write_atomic(target, tensors, meta)
    except OSError as e:
        if e.errno is None or (e.strerror or "").startswith("ember.io.save"):
            raise
        fix = _SAVE_FIXES.get(e.errno, "check the path and that its directory can be written")
        raise type(e)(e.errno, f"ember.io.save: could not write {target!r} ({e.strerror}); "
                      f"the file there, if any, is unchanged. Fix: {fix}") from e


#: How to fix a failed save, by errno
_SAVE_FIXES = {
    errno.EACCES: "save into a directory you may write to, or change its permissions",
    errno.EPERM: "save into a directory you may write to, or change its permissions",
    errno.EROFS: "the file system is mounted read-only: save somewhere else",
    errno.ENOSPC: "free some disk space, or save somewhere else",
    getattr(errno, "EDQUOT", errno.ENOSPC): "free some disk space (or quota), or save somewhere else",
    errno.ENAMETOOLONG: "use a shorter file name",
}


def _check_target(target: str) -> None:
    """Refuse a target that is a directory, or whose directory does not exist, by name."""
    if os.path.isdir(target):
        raise IsADirectoryError(
            errno.EISDIR, f"ember.io.save: {target!r} is a directory. Fix: give a file path, e.g. "
            f"{os.path.join(target, 'model.safetensors')!r}")
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise FileNotFoundError(
            errno.ENOENT if what == "does not exist" else errno.ENOTDIR,
            f"ember.io.save: the directory {parent!r} of {target!r} {what}. Fix: create it "
            f"first (os.makedirs({parent!r}, exist_ok=True)), or save elsewhere")
