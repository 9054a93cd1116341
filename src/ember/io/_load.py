"""``ember.io.load``: a file back into a structure, checked against ``like`` if given.

Two phases. First the file is read and checked completely (safetensors
layout, then the ember JSON against the arrays it names); any defect is a
:class:`ember.FileFormatError`. Then the structure is built: either the saved
one (types resolved only among classes already registered with ember.tree),
or ``like``'s, leaf by leaf, where every path, shape and dtype is compared
and all differences are reported at once in a :class:`LoadMismatchError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ember._errors import FileFormatError, StructureError
from ember.io import _format
from ember.io._format import DTYPES, EMBER_KEY, FORMAT_NAME, FORMAT_VERSION

__all__ = ["LoadMismatchError", "load", "read_metadata"]

# --- error texts (constants so tests can check them) -----------------------

BAD_EMBER = "ember.io: {path} has an invalid ember structure header: {reason}"
NO_EMBER = (
    "the file has no ember structure (no __metadata__['ember']); it was not written by "
    "ember.io.save. Pass like= to load its arrays by path, or use ember.io.load_state_dict"
)
MISMATCH_HEAD = "ember.io.load: {source} does not match `like` at {n} path(s):"
MISMATCH_FIX = (
    "Fix: rebuild `like` with the configuration the file was saved with, or load without "
    "like= and convert; on_missing='keep' keeps like's value for missing paths and "
    "on_unexpected='ignore' skips arrays that like does not have."
)
BAD_POLICY = "ember.io.load: {name} must be one of {allowed}, got {value!r}"


class LoadMismatchError(StructureError):
    """A file does not match the ``like`` structure given to load.

    ``missing``, ``unexpected``, ``shape_changed`` and ``dtype_changed`` list
    the path strings of each group (all of them, not only the first).
    """

    def __init__(
        self,
        message: str,
        missing: list[str],
        unexpected: list[str],
        shape_changed: list[str],
        dtype_changed: list[str],
    ) -> None:
        super().__init__(message)
        self.missing = missing
        self.unexpected = unexpected
        self.shape_changed = shape_changed
        self.dtype_changed = dtype_changed


@dataclass
class Stored:
    """One array of a checked file: its dtype name, shape and how to read it."""

    dtype: str
    shape: tuple[int, ...]
    file: _format.SafetensorsFile
    name: str  # safetensors tensor name

    def host(self) -> Any:
        """The array as NumPy, copied out of the file (complex128 re-joined, BF16 widened)."""
        arr = self.file.array(self.name)
        np = _format.host_numpy()
        if self.dtype == "complex128":
            arr = arr.view(np.dtype("<c16")).reshape(self.shape)
        elif self.file.entries[self.name].code == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)  # exact widening
        return arr


class _Passthrough(Exception):
    """Carries an exception that is not the file's fault (e.g. a backend's) past the converter."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _LazyPath:
    """A path built one key at a time, turned into an ember Path only when needed.

    Why: a hostile header nests deeply; materialising every node's full path
    would cost O(nodes x depth). Only arrays and error messages need it.
    """

    __slots__ = ("parent", "key", "_path")

    def __init__(self, parent: _LazyPath | None, key: Any) -> None:
        self.parent, self.key, self._path = parent, key, None

    def __truediv__(self, key: Any) -> _LazyPath:
        return _LazyPath(self, key)

    def path(self) -> Any:
        if self._path is None:
            from ember.tree import Path

            keys, node = [], self
            while node is not None and node.parent is not None:
                keys.append(node.key)
                node = node.parent
            self._path = Path(reversed(keys))
        return self._path

    def __str__(self) -> str:
        return str(self.path())


# --- phase 1: read and check ---------------------------------------------


def _code_dtype(code: str) -> str:
    return "float32" if code == "BF16" else _format._CODES[code][0]  # BF16 is widened on read


def _plain_arrays(st: _format.SafetensorsFile) -> dict[str, Stored]:
    """Arrays of a file without ember header, keyed by tensor name."""
    return {n: Stored(_code_dtype(e.code), e.shape, st, n) for n, e in st.entries.items()}


class _Decoder:
    """Checks the ember NODE JSON against the file and (if ``build``) rebuilds the structure.

    Work is bounded: nesting (MAX_DEPTH), nodes (MAX_NODES) and distinct types
    (MAX_TYPES) are counted, so any header costs at most linear time.
    """

    def __init__(self, st: _format.SafetensorsFile, build: bool, convert: Any, xp: Any,
                 opts: _format.DecodeOptions) -> None:
        from ember.tree import Index, Key, Name, parse_path

        self.Index, self.Key, self.Name, self.parse_path = Index, Key, Name, parse_path
        self.st, self.build, self.convert, self.xp, self.opts = st, build, convert, xp, opts
        self.arrays: dict[str, Stored] = {}

    def _bad(self, path: Any, why: str) -> ValueError:
        return ValueError(f"at {str(path)!r}: {why}")

    def _list(self, n: dict[str, Any], key: str, path: Any) -> list[Any]:
        v = n.get(key)
        if not isinstance(v, list):
            raise self._bad(path, f"{n.get('k')!r} node needs a list {key!r}")
        return v

    def _pairs(self, n: dict[str, Any], key: str, path: Any) -> list[list[Any]]:
        v = self._list(n, key, path)
        if not all(isinstance(i, list) and len(i) == 2 for i in v):
            raise self._bad(path, f"{key!r} must be a list of pairs")
        return v

    def _names(self, pairs: list[list[Any]], path: Any) -> list[str]:
        names = [p[0] for p in pairs]
        if not all(type(x) is str for x in names) or len(set(names)) != len(names):
            raise self._bad(path, "field names must be distinct strings")
        return names

    def _value(self, v: Any, path: Any, depth: int) -> Any:
        return _format.decode_value(v, path, self.xp, self.opts, depth)

    def node(self, n: Any, path: Any, depth: int = 0) -> Any:
        if type(n) is not dict:
            raise self._bad(path, "a node must be a JSON object")
        if depth > _format.MAX_DEPTH:
            raise ValueError(_format.TOO_DEEP.format(limit=_format.MAX_DEPTH, path=str(path)))
        self.opts.count_node()
        d = depth + 1
        k = n.get("k")
        if k == "array":
            return self._array(n, path)
        if k == "const":
            if "v" not in n:
                raise self._bad(path, "const node without 'v'")
            return self._value(n["v"], path, d)
        if k in ("list", "tuple"):
            items = [self.node(c, path / self.Index(i), d) for i, c in enumerate(self._list(n, "items", path))]
            return tuple(items) if k == "tuple" else items
        if k == "namedtuple":
            fields = self._list(n, "fields", path)
            items = self._list(n, "items", path)
            if len(fields) != len(items) or not all(type(f) is str for f in fields) or len(set(fields)) != len(fields):
                raise self._bad(path, "namedtuple fields must be distinct strings, one per item")
            vals = [self.node(c, path / self.Name(f), d) for f, c in zip(fields, items, strict=True)]
            cls = _format.resolve_namedtuple(n.get("type"), fields, path, self.opts)
            return cls._make(vals) if self.build else None
        if k == "dict":
            return self._dict(n, path, d)
        if k == "dataclass":
            return self._dataclass(n, path, d)
        if k == "node":
            return self._custom(n, path, d)
        raise self._bad(path, f"unknown node kind {k!r}")

    def _array(self, n: dict[str, Any], path: Any) -> Any:
        p = str(path)
        if n.get("path") != p:
            raise self._bad(path, f"the array claims the path {n.get('path')!r}, which is not where the structure puts it")
        if self.parse_path(p) != path.path():
            raise self._bad(path, "the path does not parse back to itself")
        if p in self.arrays:
            raise self._bad(path, "two arrays share this path")
        dtype, shape = n.get("dtype"), n.get("shape")
        if dtype not in DTYPES:
            raise self._bad(path, f"unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int for d in shape):
            raise self._bad(path, f"bad shape {shape!r}")
        entry = self.st.entries.get(p)
        if entry is None:
            raise self._bad(path, "the structure names an array the file does not have")
        want_shape = (*shape, 2) if dtype == "complex128" else tuple(shape)
        if entry.code != DTYPES[dtype][0]:
            raise self._bad(path, f"the structure says {dtype} but the tensor is stored as {entry.code}")
        if entry.shape != want_shape:
            raise self._bad(path, f"the structure says shape {tuple(shape)} but the tensor has {entry.shape}")
        stored = Stored(dtype, tuple(shape), self.st, p)
        self.arrays[p] = stored
        return self.convert(stored) if self.build else None

    def _dict(self, n: dict[str, Any], path: Any, d: int) -> Any:
        import collections

        tname, factory = n.get("type"), n.get("factory")
        if tname not in ("dict", "OrderedDict", "defaultdict"):
            raise self._bad(path, f"unknown dict type {tname!r}")
        out: dict[Any, Any] = {}
        for kv, child in self._pairs(n, "items", path):
            key = self._value(kv, path, d)
            hash(key)
            if key in out:
                raise self._bad(path, f"the dict key {key!r} appears twice")
            tk = self.Name(key) if type(key) is str else self.Key(key)
            out[key] = self.node(child, path / tk, d)
        if tname == "OrderedDict":
            return collections.OrderedDict(out)
        if tname == "defaultdict":
            from ember.io._save import _FACTORIES

            if factory is not None and factory not in _FACTORIES:
                raise self._bad(path, f"unknown defaultdict factory {factory!r}")
            return collections.defaultdict(_FACTORIES.get(factory), out)  # type: ignore[arg-type]
        if factory is not None:
            raise self._bad(path, "a plain dict has no factory")
        return out

    def _dataclass(self, n: dict[str, Any], path: Any, d: int) -> Any:
        fields = self._pairs(n, "fields", path)
        static = self._pairs(n, "static", path)
        names = self._names(fields + static, path)
        vals = [self.node(c, path / self.Name(f), d) for f, c in fields]
        svals = [self._value(v, path / self.Name(f), d) for f, v in static]
        if not self.build:
            return None
        cls, nt = _format.resolve_type(n.get("type"), "dataclass", path, self.opts)
        if list(nt.names) != names[: len(fields)] or list(nt.static) != names[len(fields):]:
            raise FileFormatError(
                f"the file stores {cls.__qualname__} with fields {names[:len(fields)]} and static "
                f"{names[len(fields):]}, but the registered class has {list(nt.names)} and static "
                f"{list(nt.static)}; pass like= built from the current class"
            )
        obj = object.__new__(cls)
        for f, v in zip(names, vals + svals, strict=True):
            object.__setattr__(obj, f, v)
        return obj

    def _custom(self, n: dict[str, Any], path: Any, d: int) -> Any:
        vals, seen = [], set()
        for kj, child in self._pairs(n, "items", path):
            key = _format.decode_key(kj, path)
            if key in seen:
                raise self._bad(path, f"the key {key!r} appears twice")
            seen.add(key)
            vals.append(self.node(child, path / key, d))
        if "aux" not in n:
            raise self._bad(path, "register_node object without 'aux'")
        aux = self._value(n["aux"], path, d)
        if not self.build:
            return None
        _, nt = _format.resolve_type(n.get("type"), "node", path, self.opts)
        return nt.unflatten(aux, vals)


def _read_ember(st: _format.SafetensorsFile) -> Any:
    """The ember tree JSON of a checked file, or None when it has none (decode budget checked first)."""
    text = st.metadata.get(EMBER_KEY)
    if text is None:
        return None
    _format.check_decode_budget(text, st.size)
    obj = _format.strict_json_loads(text)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
        raise ValueError("__metadata__['ember'] is not an ember.io structure object")
    if obj.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"format version {obj.get('version')!r} is not {FORMAT_VERSION}; it was written by "
            "another ember version (upgrade ember to read it)"
        )
    if "tree" not in obj:
        raise ValueError("the ember structure has no 'tree'")
    return obj["tree"]


def _decode(st: _format.SafetensorsFile, root: Any, build: bool, convert: Any, xp: Any, callables: str
            ) -> tuple[Any, dict[str, Stored]]:
    """Check ``root`` against the open file ``st``; returns (built tree or None, arrays by path)."""
    dec = _Decoder(st, build, convert, xp, _format.DecodeOptions(callables))
    tree = dec.node(root, _LazyPath(None, None))
    extra = sorted(set(st.entries) - set(dec.arrays))
    if extra:
        raise ValueError(f"the file has arrays its structure does not mention: {extra[:10]}")
    return tree, dec.arrays


def _format_errors(path: str, fn: Any) -> Any:
    """Run ``fn()``; anything a hostile header provokes becomes FileFormatError."""
    try:
        return fn()
    except (FileFormatError, _Passthrough):
        raise
    except Exception as exc:
        raise FileFormatError(BAD_EMBER.format(path=path, reason=f"{type(exc).__name__}: {exc}")) from exc


# --- phase 2: like --------------------------------------------------------


def _like_dtype(x: Any) -> str:
    name = _format.dtype_name(getattr(x, "dtype", None))
    return name if name is not None else str(getattr(x, "dtype", "?"))


def _place(host: Any, like_leaf: Any) -> Any:
    """Put a NumPy array on ``like_leaf``'s backend (and Dask chunks)."""
    import array_api_compat as compat

    xp = compat.array_namespace(like_leaf)
    out = xp.asarray(host)
    if compat.is_dask_array(like_leaf) and compat.is_dask_array(out) and tuple(out.shape) == tuple(like_leaf.shape):
        out = out.rechunk(like_leaf.chunks)
    return out


def _check_policy(on_missing: str, on_unexpected: str) -> None:
    if on_missing not in ("error", "keep"):
        raise ValueError(BAD_POLICY.format(name="on_missing", allowed=("error", "keep"), value=on_missing))
    if on_unexpected not in ("error", "ignore"):
        raise ValueError(BAD_POLICY.format(name="on_unexpected", allowed=("error", "ignore"), value=on_unexpected))


def fill_like(stored: dict[str, Stored], like: Any, source: str, on_missing: str, on_unexpected: str) -> Any:
    """Build ``like``'s structure from ``stored`` arrays; LoadMismatchError lists every difference."""
    import ember.tree as tree

    pairs, treedef = tree.flatten_with_path(like)
    keyed = [(str(p), leaf) for p, leaf in pairs]
    like_paths = {p for p, _ in keyed}
    missing = [p for p, _ in keyed if p not in stored]
    unexpected = [p for p in stored if p not in like_paths]
    shape_changed, dtype_changed, lines = [], [], []
    for p, leaf in keyed:
        s = stored.get(p)
        if s is None:
            continue
        like_shape = tuple(int(d) if d is not None else -1 for d in leaf.shape)
        if like_shape != s.shape:
            shape_changed.append(p)
            lines.append(f"  shape changed at {p}: like has {like_shape}, the file has {s.shape}")
        ld = _like_dtype(leaf)
        if ld != s.dtype:
            dtype_changed.append(p)
            lines.append(f"  dtype changed at {p}: like has {ld}, the file has {s.dtype}")
    bad_missing = missing if on_missing == "error" else []
    bad_unexpected = unexpected if on_unexpected == "error" else []
    n = len(bad_missing) + len(bad_unexpected) + len(set(shape_changed) | set(dtype_changed))
    if n:
        msg = [MISMATCH_HEAD.format(source=source, n=n)]
        if bad_missing:
            msg.append(f"  missing (in like, not in the file): {', '.join(bad_missing)}")
        if bad_unexpected:
            msg.append(f"  unexpected (in the file, not in like): {', '.join(bad_unexpected)}")
        msg.extend(lines)
        msg.append(MISMATCH_FIX)
        raise LoadMismatchError("\n".join(msg), bad_missing, bad_unexpected, shape_changed, dtype_changed)
    new = [leaf if p not in stored else _place(stored[p].host(), leaf) for p, leaf in keyed]
    return treedef.unflatten(new)


_NOTHING = object()
_JSON_SCALARS = (bool, int, float, str, type(None))


def _merge_constants(like: Any, saved: Any) -> Any:
    """``like`` with its constants (step counts, static fields, config scalars) taken from the file.

    Why: a checkpoint restores everything it saved; ``like`` only supplies the
    structure and what a file cannot hold (callables, class objects). Array
    leaves are left to :func:`fill_like`, which checks and places them.
    """
    import dataclasses

    import array_api_compat as compat

    if compat.is_array_api_obj(like):
        return like
    if isinstance(like, dict) and isinstance(saved, dict):
        out = like.copy()
        for k in like:
            if k in saved:
                out[k] = _merge_constants(like[k], saved[k])
        return out
    if isinstance(like, (list, tuple)) and isinstance(saved, (list, tuple)) and len(like) == len(saved):
        items = [_merge_constants(a, b) for a, b in zip(like, saved)]
        if hasattr(like, "_fields"):
            return type(like)(*items)
        return type(like)(items)
    if dataclasses.is_dataclass(like) and not isinstance(like, type) and type(saved) is type(like):
        import copy

        out = copy.copy(like)
        for f in dataclasses.fields(like):
            if hasattr(like, f.name) and hasattr(saved, f.name):
                object.__setattr__(out, f.name, _merge_constants(getattr(like, f.name), getattr(saved, f.name)))
        return out
    if isinstance(like, _JSON_SCALARS) and isinstance(saved, _JSON_SCALARS):
        return saved
    return like


def _namespace(backend: Any) -> Any:
    if backend is None or not isinstance(backend, str):
        return backend
    import ember.backend

    return ember.backend.get(backend)


def load(
    path: str | os.PathLike[str],
    like: Any = None,
    *,
    backend: Any = None,
    on_missing: str = "error",
    on_unexpected: str = "error",
    allow_callables: bool = False,
) -> Any:
    """Load a structure saved by :func:`ember.io.save`.

    Without ``like`` the saved structure comes back: NumPy arrays, or arrays of
    ``backend`` (a name such as ``"dask"`` or any namespace with ``asarray``);
    dataclasses are rebuilt only if their class is registered with ember.tree
    in this process (a file never makes ember import a module).

    With ``like`` (e.g. a freshly built model) every saved path, shape and
    dtype is checked against it and all differences are reported together in
    a :class:`LoadMismatchError`; arrays go to each like leaf's backend.
    Constants the file recorded (step counts, static fields such as running
    statistics, Python scalars) come from the file, so a checkpoint restores
    everything it saved; callables and classes come from ``like``. ``on_missing="keep"`` keeps like's leaf for
    paths the file lacks; ``on_unexpected="ignore"`` skips extra file arrays.

    Functions come back by registered name (:func:`ember.io.register_function`);
    callables stored by import path are imported only with
    ``allow_callables=True`` (importing runs the module's code: trusted files only).
    Every loaded array owns its memory (nothing keeps the file mapped), and
    a header's cost is bounded (size, nesting, node and type counts).

    A truncated, corrupted or hostile file raises :class:`ember.FileFormatError`;
    a missing or unreadable one raises OSError.

    >>> import numpy as np, ember.io, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "s.safetensors")
    >>> ember.io.save(p, {"step": 3, "params": {"w": {"m": np.zeros(2)}}})
    >>> ember.io.load(p)["params"]["w"]["m"]
    array([0., 0.])
    """
    _check_policy(on_missing, on_unexpected)
    fpath = os.fspath(path)
    with _format.open_file(fpath) as st:  # the file is opened and read once
        root = _format_errors(fpath, lambda: _read_ember(st))
        if like is not None:
            return _load_like(st, root, like, fpath, on_missing, on_unexpected, allow_callables)
        if root is None:
            raise FileFormatError(BAD_EMBER.format(path=fpath, reason=NO_EMBER))
        xp = _namespace(backend)

        def convert(stored: Stored) -> Any:
            host = stored.host()
            if xp is None:
                return host
            try:
                return xp.asarray(host)
            except Exception as exc:
                raise _Passthrough(exc) from exc

        callables = "import" if allow_callables else "refuse"
        try:
            tree, _ = _format_errors(fpath, lambda: _decode(st, root, True, convert, xp, callables))
        except _Passthrough as p:
            raise p.exc from None
        return tree


def _load_like(st: _format.SafetensorsFile, root: Any, like: Any, fpath: str, on_missing: str,
               on_unexpected: str, allow_callables: bool) -> Any:
    """``load(like=...)`` on an open file: check the structure, take its constants, fill like."""
    if root is None:
        stored = _plain_arrays(st)
    else:
        _, stored = _format_errors(fpath, lambda: _decode(st, root, False, None, None, "placeholder"))
        try:  # the saved structure with arrays left out, for its constants
            callables = "import" if allow_callables else "placeholder"
            saved, _ = _decode(st, root, True, lambda s: None, None, callables)
        except Exception:  # a class not registered here: like gives the structure
            saved = _NOTHING
        if saved is not _NOTHING:
            like = _merge_constants(like, saved)
    return fill_like(stored, like, repr(fpath), on_missing, on_unexpected)


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The user metadata given to :func:`ember.io.save` (the ember structure key left out).

    Why: provenance (git hash, config name, epoch) travels with the weights.
    """
    with _format.open_file(os.fspath(path)) as st:
        return {k: v for k, v in st.metadata.items() if k != EMBER_KEY}
