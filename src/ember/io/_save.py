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
(a static array, as hex bytes). Anything else (functions, arbitrary objects)
cannot be stored, and save says at which path it found one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sys
from typing import Any

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


def _value(v: Any, path: str) -> Any:
    return _format.encode_value(v, path, to_host)


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

    def __init__(self) -> None:
        from ember.tree import Index, Key, Name

        self.Index, self.Key, self.Name = Index, Key, Name
        self.leaves: list[tuple[Any, dict[str, Any], Any]] = []  # (path, node, array)

    def node(self, x: Any, path: Any) -> dict[str, Any]:
        kind = node_kind(x)
        if kind == "array":
            node = {"k": "array", "path": str(path)}  # dtype/shape added after host transfer
            self.leaves.append((path, node, x))
            return node
        if kind == "const":
            return {"k": "const", "v": _value(x, str(path))}
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
            items.append([_value(k, str(path)), self.node(v, path / key)])
        return {"k": "dict", "type": tname, "factory": factory, "items": items}

    def _dataclass(self, x: Any, path: Any) -> dict[str, Any]:
        cls = type(x)
        static_names = _format.static_fields(cls)
        fields, static = [], []
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            sub = path / self.Name(f.name)
            if f.name in static_names:
                static.append([f.name, _value(v, str(sub))])
            else:
                fields.append([f.name, self.node(v, sub)])
        return {"k": "dataclass", "type": type_name(cls), "fields": fields, "static": static}

    def _custom(self, x: Any, path: Any) -> dict[str, Any]:
        children, aux = _format.custom_flatten(x)
        items = [[_format.encode_key(key), self.node(child, path / key)] for key, child in children]
        return {"k": "node", "type": type_name(type(x)), "aux": _value(aux, str(path)), "items": items}


def _check_metadata(metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise TypeError(BAD_METADATA.format(bad=metadata))
    bad = {k: v for k, v in metadata.items() if not (type(k) is str and type(v) is str) or k == EMBER_KEY}
    if bad:
        raise TypeError(BAD_METADATA.format(bad=bad))
    return dict(metadata)


def build(tree: Any, metadata: dict[str, str] | None) -> tuple[bytes, list[Any]]:
    """Encode ``tree``: the header bytes and the host arrays in file order."""
    from ember.tree import Path, parse_path

    meta = _check_metadata(metadata)
    enc = _Encoder()
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
    rows = []
    for (_, node, _), x in zip(enc.leaves, arrays, strict=True):
        p = node["path"]
        arr, name = to_host(x, p)
        shape = arr.shape[:-1] if name == "complex128" else arr.shape
        node["dtype"], node["shape"] = name, list(shape)
        code, itemsize = _format.DTYPES[name]
        rows.append((itemsize, p, code, arr))
    rows.sort(key=lambda r: (-r[0], r[1]))  # largest items first keeps every tensor aligned
    meta[EMBER_KEY] = json.dumps(
        {"format": FORMAT_NAME, "version": FORMAT_VERSION, "tree": root},
        separators=(",", ":"), ensure_ascii=False, allow_nan=False,
    )
    header = _format.encode_header([(p, code, tuple(a.shape), a.nbytes) for _, p, code, a in rows], meta)
    return header, [a for *_, a in rows]


# --- atomic write ---------------------------------------------------------

TEMP_PREFIX = ".{name}.tmp-"


def _temp_path(target: str) -> str:
    d, name = os.path.split(target)
    return os.path.join(d, f"{TEMP_PREFIX.format(name=name)}{os.getpid()}-{secrets.token_hex(6)}")


def clean_stale_temps(target: str) -> list[str]:
    """Remove temp files left by saves to ``target`` whose process has died (e.g. SIGKILL).

    A temp file is ``.{name}.tmp-{pid}-{random}`` in the target's directory; it is
    removed only when no process with that pid is alive. Returns what was removed.
    """
    d, name = os.path.split(os.path.abspath(target))
    prefix = TEMP_PREFIX.format(name=name)
    removed = []
    try:
        entries = os.listdir(d)
    except OSError:
        return removed
    for entry in entries:
        if not entry.startswith(prefix):
            continue
        pid_s, _, rand = entry[len(prefix):].partition("-")
        if not pid_s.isdigit() or not rand:
            continue
        pid = int(pid_s)
        if pid == os.getpid() or _alive(pid):
            continue
        try:
            os.remove(os.path.join(d, entry))
            removed.append(entry)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    except OSError:
        return True
    return True


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


def write_atomic(target: str, header: bytes, datas: list[Any]) -> None:
    """Write header + arrays to a temp file next to ``target``, fsync, then rename over it.

    A crash at any moment leaves ``target`` either as it was or complete.
    """
    tmp = _temp_path(target)
    try:
        with open(tmp, "xb") as f:
            f.write(header)
            for arr in datas:
                if arr.nbytes:
                    f.write(arr.reshape(-1).view("u1").data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(os.path.dirname(target))


def save(path: str | os.PathLike[str], tree: Any, *, metadata: dict[str, str] | None = None) -> None:
    """Save any structure (module, optimizer state, both) to one safetensors file.

    Arrays (any backend; Dask arrays are computed in one pass) are stored under
    their ember path; the structure, constants and static fields go as JSON into
    the file's metadata, so ``load(path)`` rebuilds the same structure without
    pickle. ``metadata`` adds your own string pairs (read them with
    :func:`ember.io.read_metadata`). The write is atomic: a crash leaves the old
    file or the new one, never a mix; temp files of crashed saves
    (``.{name}.tmp-{pid}-{random}``) are removed by the next save to that path.

    >>> import numpy as np, ember.io, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> ember.io.save(p, {"w": np.ones(2), "step": 3})
    >>> ember.io.load(p)["step"]
    3
    """
    target = os.fspath(path)
    header, datas = build(tree, metadata)
    clean_stale_temps(target)
    write_atomic(target, header, datas)
