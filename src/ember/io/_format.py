"""The on-disk format: safetensors (through the ``safetensors`` library) plus ember's JSON.

A file written by :func:`ember.io.save` is a plain safetensors file, read,
checked and written by the maintained `safetensors` package (its Rust core
validates the header: lengths, dtypes, shapes against byte spans, contiguous
non-overlapping offsets covering the file). Arrays are named by the canonical
string of their ember path (``encoder.layers.0.weight``). The structure around
them goes, as a JSON string, into ``__metadata__["ember"]`` (schema in
:mod:`ember.io._save`), so any safetensors reader (PyTorch, NumPy, Rust) can
still open the file.

ember's own code here is the part the library does not do: dtypes it cannot
hold (complex128 is stored as float64 with a trailing ``(re, im)`` axis;
bfloat16 tensors of PyTorch files are read as raw bits and widened), and the
bounds that keep a hostile header cheap: a header size limit, a decode budget
estimated *before* the JSON is parsed, a nesting limit, a node count limit and
a limit on distinct types (with a class cache). Every failure is an
:class:`ember.FileFormatError` with the reason.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from ember._errors import FileFormatError

__all__ = [
    "DTYPES",
    "SafetensorsFile",
    "TensorEntry",
    "host_numpy",
    "open_file",
    "strict_json_loads",
    "write_tensors",
]

# --- error texts (constants so tests can check them) -----------------------

BAD_FILE = "ember.io: {path} is not a valid safetensors file: {reason}"
TOO_SHORT = "the file is {size} bytes long; a safetensors file starts with an 8-byte header length"
HEADER_TOO_BIG = (
    "the header length field says {n} bytes, more than ember's {limit}-byte limit (store large "
    "data as arrays, not as constants)"
)
DUPLICATE_KEY = "the JSON object has the key {key!r} twice"
UNKNOWN_DTYPE = "tensor {name!r}: unknown dtype {dtype!r}; known dtypes are {known}"
BAD_TENSOR = "tensor {name!r} cannot be read: {reason}"
OVER_BUDGET = (
    "the ember structure header would take about {need} MB to decode, more than the {limit} MB "
    "bound for a file of this size; it is hostile or was not written by ember.io.save"
)
TOO_DEEP = "the structure is nested deeper than {limit} levels at {path!r}"
TOO_MANY_NODES = "the structure has more than {limit} nodes"
TOO_MANY_TYPES = "the structure names more than {limit} distinct types"

#: Largest safetensors header ember reads (the library allows 100 MB). Headers of
#: real models are far smaller (about 150 bytes per tensor).
MAX_HEADER_BYTES = 16 * 2**20
#: Decode budget for the ember JSON: this many bytes, or the file size if larger.
MAX_DECODE_BYTES = 64 * 2**20
#: Nesting limit of a stored structure (nodes and tagged constants).
MAX_DEPTH = 200
#: Node limit of a stored structure.
MAX_NODES = 1_000_000
#: Distinct namedtuple / dataclass / node types one file may name.
MAX_TYPES = 1_000
#: NumPy cannot hold more dimensions than this.
MAX_NDIM = 64
#: Largest single dimension accepted (keeps shape products in int64).
MAX_DIM = 2**62

# ember dtype name -> (safetensors code, itemsize). complex128 has no
# safetensors code: it is stored as F64 with a trailing dimension of 2
# (real, imag), and the ember header records the true dtype.
DTYPES: dict[str, tuple[str, int]] = {
    "bool": ("BOOL", 1),
    "int8": ("I8", 1),
    "uint8": ("U8", 1),
    "int16": ("I16", 2),
    "uint16": ("U16", 2),
    "int32": ("I32", 4),
    "uint32": ("U32", 4),
    "int64": ("I64", 8),
    "uint64": ("U64", 8),
    "float16": ("F16", 2),
    "float32": ("F32", 4),
    "float64": ("F64", 8),
    "complex64": ("C64", 8),
    "complex128": ("F64", 8),  # stored with a trailing (re, im) axis
}
# safetensors code -> (numpy dtype name, itemsize) for reading. BF16 is read
# as raw uint16 bits (NumPy has no bfloat16); ember.io widens it to float32.
_CODES: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 1),
    "I8": ("int8", 1),
    "U8": ("uint8", 1),
    "I16": ("int16", 2),
    "U16": ("uint16", 2),
    "I32": ("int32", 4),
    "U32": ("uint32", 4),
    "I64": ("int64", 8),
    "U64": ("uint64", 8),
    "F16": ("float16", 2),
    "F32": ("float32", 4),
    "F64": ("float64", 8),
    "C64": ("complex64", 8),
    "BF16": ("uint16", 2),
}

_NP: Any = None


def host_numpy() -> Any:
    """Return the NumPy module, through the backend registry (the one place that imports it).

    NumPy is ember.io's host format: bytes from disk become NumPy arrays, which
    are then handed to the target backend's ``asarray``.
    """
    global _NP
    if _NP is None:
        import ember.backend as backend

        _NP = backend.raw(backend.get("numpy"))
    return _NP


def strict_json_loads(text: str | bytes) -> Any:
    """``json.loads`` that rejects duplicate keys and NaN/Infinity (hostile-file guards)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items):
            seen: set[str] = set()
            for k, _ in items:
                if k in seen:
                    raise ValueError(DUPLICATE_KEY.format(key=k))
                seen.add(k)
        return out

    def no_constant(name: str) -> Any:
        raise ValueError(f"the JSON number {name} is not allowed")

    return json.loads(text, object_pairs_hook=pairs, parse_constant=no_constant)


def decode_cost(text: str) -> int:
    """Upper estimate, in bytes, of what ``strict_json_loads(text)`` allocates.

    Counted before parsing (``str.count`` is a C loop), so a header made of
    millions of tiny objects is refused before it costs anything. The weights
    are measured CPython sizes: a dict with its pair list, a list, one value
    with its slot, and the characters themselves.
    """
    return 200 * text.count("{") + 72 * text.count("[") + 160 * text.count(",") + 4 * len(text) + 1024


def check_decode_budget(text: str, file_size: int) -> None:
    """Raise ValueError (becomes FileFormatError) when ``text`` is too costly to decode."""
    limit = max(MAX_DECODE_BYTES, file_size)
    need = decode_cost(text)
    if need > limit:
        raise ValueError(OVER_BUDGET.format(need=need // 2**20, limit=limit // 2**20))


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a checked safetensors file: its name, dtype code and shape."""

    name: str
    code: str  # safetensors dtype code, e.g. "F32"
    shape: tuple[int, ...]


def _fail(path: Any, reason: str) -> FileFormatError:
    return FileFormatError(BAD_FILE.format(path=path, reason=reason))


def fits_numpy(shape: Any, itemsize: int) -> bool:
    """Whether NumPy can make an array of this shape (its size check ignores zero dims)."""
    return math.prod(max(d, 1) for d in shape) * itemsize < 2**63


def _is_int(x: Any) -> bool:
    return type(x) is int  # bool is not an int here


class SafetensorsFile:
    """An open, checked safetensors file: entries, metadata and lazy (memory-mapped) tensors.

    Use as a context manager; :meth:`array` copies one tensor out of the map,
    so a loaded array never keeps the file (or its mapping) alive.
    """

    def __init__(self, path: str, handle: Any, size: int, header_len: int) -> None:
        self.path, self._handle, self.size, self._header_len = path, handle, size, header_len
        try:
            meta = handle.metadata()
            names = list(handle.keys())
            entries = {}
            for name in names:
                sl = handle.get_slice(name)
                code, shape = sl.get_dtype(), tuple(sl.get_shape())
                if code not in _CODES:
                    raise ValueError(UNKNOWN_DTYPE.format(name=name, dtype=code, known=sorted(_CODES)))
                if len(shape) > MAX_NDIM or not fits_numpy(shape, _CODES[code][1]):
                    raise ValueError(BAD_TENSOR.format(name=name, reason=f"shape {shape} is too large for an array"))
                entries[name] = TensorEntry(name, code, shape)
        except ValueError as exc:
            self.close()
            raise _fail(path, str(exc)) from exc
        except Exception as exc:  # the library's SafetensorError
            self.close()
            raise _fail(path, str(exc)) from exc
        self.entries: dict[str, TensorEntry] = entries
        self.metadata: dict[str, str] = dict(meta or {})

    def array(self, name: str) -> Any:
        """The tensor ``name`` as a NumPy array that owns its memory (a copy out of the file)."""
        e = self.entries[name]
        try:
            if e.code == "BF16":
                return self._raw(e)
            return self._handle.get_tensor(name)
        except Exception as exc:
            raise _fail(self.path, BAD_TENSOR.format(name=name, reason=exc)) from exc

    def _raw(self, e: TensorEntry) -> Any:
        """Raw bits of a tensor whose dtype NumPy lacks (BF16), at offsets the library checked."""
        np = host_numpy()
        with open(self.path, "rb") as f:
            f.seek(8)
            header = strict_json_loads(f.read(self._header_len))
            begin, end = header[e.name]["data_offsets"]
            f.seek(8 + self._header_len + begin)
            raw = f.read(end - begin)
        return np.frombuffer(bytearray(raw), dtype=np.dtype("<u2")).reshape(e.shape)

    def close(self) -> None:
        """Release the library's handle (and its memory map)."""
        h, self._handle = self._handle, None
        if h is not None:
            h.__exit__(None, None, None)

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_file(path: str | os.PathLike[str]) -> SafetensorsFile:
    """Open and check a safetensors file; any defect raises FileFormatError.

    The 8-byte header length is checked against ember's bound first, so the
    library never parses an oversized header. OSError (missing file,
    permissions) passes through unchanged.
    """
    from safetensors import safe_open

    p = os.fspath(path)
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
    if size < 8 or len(head) != 8:
        raise _fail(p, TOO_SHORT.format(size=size))
    n = int.from_bytes(head, "little")
    if n > MAX_HEADER_BYTES:
        raise _fail(p, HEADER_TOO_BIG.format(n=n, limit=MAX_HEADER_BYTES))
    try:
        handle = safe_open(p, framework="numpy")
        handle.__enter__()
    except OSError:
        raise
    except Exception as exc:  # SafetensorError: the library's verdict on the container
        raise _fail(p, str(exc)) from exc
    return SafetensorsFile(p, handle, size, n)


def write_tensors(fd: int, arrays: dict[str, Any], metadata: dict[str, str]) -> None:
    """Write ``arrays`` (little-endian C-contiguous NumPy) and ``metadata`` to the open ``fd``.

    The safetensors library lays the tensors out (sorted by alignment, then
    name) and encodes the file in memory; it is written here, to the caller's
    locked temp file (the library's own ``save_file`` writes through a temp
    file of its own, which ember could neither lock nor clean up).
    """
    from safetensors.numpy import save

    data = memoryview(save(arrays, metadata=metadata))
    while data:
        n = os.write(fd, data)
        data = data[n:]


# ============================================================================
# The ember JSON (structure) part: constants codec and the ember.tree adapter.
# ============================================================================
#
# ``__metadata__["ember"]`` holds ``{"format": "ember.io", "version": 1,
# "tree": NODE}``; NODE is documented in :mod:`ember.io._save`. VALUE (a
# constant, a static field, a dict key, register_node aux data) is plain JSON
# for None, bool, int, str and finite floats, else a tagged object
# ``{"$": tag, ...}`` with tag one of: float (nan/inf, as repr), complex,
# bytes (hex), tuple, list, dict (items as [key, value] pairs), slice, range,
# ellipsis, dtype (by name), array (a static array: dtype, shape, hex bytes),
# function (a registered function, by name), callable (an import path, only
# with allow_callables=True), partial (functools.partial of those).

FORMAT_NAME = "ember.io"
FORMAT_VERSION = 1
#: ``__metadata__`` key that carries the ember structure JSON.
EMBER_KEY = "ember"

UNSAVABLE_CONSTANT = (
    "ember.io.save: cannot store the constant at {path!r} (a {type}): a file holds only "
    "None, bool, int, float, complex, str, bytes, slices, ranges, dtypes, arrays, registered "
    "functions and tuples/lists/dicts of these. Remove it (or make it one of these) before saving; "
    "load(..., like=...) takes constants from `like`."
)
UNSAVABLE_CALLABLE = (
    "ember.io.save: cannot store the callable {name} at {path!r}: it is not registered with "
    "ember.io.register_function. Register it (ember.io.register_function(fn)), or pass "
    "allow_callables=True to store its import path (load then needs allow_callables=True too)."
)
NO_IMPORT_PATH = (
    "ember.io.save: cannot store the callable {name} at {path!r}: it has no import path "
    "(a lambda, a local or bound function); register it with ember.io.register_function(fn, name)"
)
BAD_VALUE = "bad constant encoding {value!r} at {path!r}: {why}"
UNKNOWN_TYPE = (
    "the file stores an object of type {type!r} at {path!r}, but no such {what} is registered "
    "with ember.tree in this process (ember.io never imports modules named by a file). "
    "Import the module that defines and registers it before loading, or pass like=."
)


class DecodeOptions:
    """How a load treats callables and how much work the file may cause.

    ``callables``: "refuse" (FileFormatError), "import" (allow_callables=True)
    or "placeholder" (like= gives them). Counters enforce MAX_NODES/MAX_TYPES.
    """

    def __init__(self, callables: str = "refuse") -> None:
        self.callables = callables
        self.nodes = 0
        self.types: set[Any] = set()

    def count_node(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ValueError(TOO_MANY_NODES.format(limit=MAX_NODES))

    def count_type(self, key: Any) -> None:
        if key not in self.types:
            if len(self.types) >= MAX_TYPES:
                raise ValueError(TOO_MANY_TYPES.format(limit=MAX_TYPES))
            self.types.add(key)


#: Stands for a callable the file names when like= supplies the real one.
UNRESOLVED = type("Unresolved", (), {"__repr__": lambda self: "<callable from like=>"})()


def type_name(cls: type) -> str:
    """``"module:QualName"`` of a class, the way files refer to it."""
    return f"{cls.__module__}:{cls.__qualname__}"


def dtype_name(dtype: Any) -> str | None:
    """The standard name (``"float32"``) of a dtype object of any backend, else None."""
    np = host_numpy()
    if isinstance(dtype, np.dtype):
        return str(dtype.name)
    if isinstance(dtype, type):
        if issubclass(dtype, np.generic):
            return str(np.dtype(dtype).name)
        return None
    t = type(dtype)
    if "dtype" not in t.__name__.lower():
        return None
    name = getattr(dtype, "name", None)
    if not isinstance(name, str):
        name = str(dtype).rsplit(".", 1)[-1]
    return name


def encode_value(v: Any, path: Any, to_host: Any, allow_callables: bool = False) -> Any:
    """Encode a constant as JSON VALUE; StructureError naming ``path`` when it cannot be."""
    from ember._errors import StructureError

    def enc(x: Any) -> Any:
        return encode_value(x, path, to_host, allow_callables)

    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return v if math.isfinite(v) else {"$": "float", "v": repr(v)}
    if t is complex:
        return {"$": "complex", "re": enc(v.real), "im": enc(v.imag)}
    if t is bytes:
        return {"$": "bytes", "hex": v.hex()}
    if t is tuple or t is list:
        return {"$": t.__name__, "items": [enc(i) for i in v]}
    if t is dict:
        return {"$": "dict", "items": [[enc(k), enc(i)] for k, i in v.items()]}
    if t is slice:
        return {"$": "slice", "items": [enc(i) for i in (v.start, v.stop, v.step)]}
    if t is range:
        return {"$": "range", "items": [v.start, v.stop, v.step]}
    if v is Ellipsis:
        return {"$": "ellipsis"}
    if is_array(v):
        arr, name = to_host(v, str(path))
        shape = arr.shape[:-1] if name == "complex128" else arr.shape
        return {"$": "array", "dtype": name, "shape": list(shape), "hex": arr.tobytes().hex()}
    name = dtype_name(v)
    if name is not None:
        return {"$": "dtype", "name": name}
    if callable(v):
        from ember.io import _functions

        import functools

        if t is functools.partial:
            return {"$": "partial", "fn": enc(v.func), "args": [enc(a) for a in v.args],
                    "kwargs": [[k, enc(a)] for k, a in v.keywords.items()]}
        reg = _functions.name_of(v)
        if reg is not None:
            return {"$": "function", "name": reg}
        label = getattr(v, "__qualname__", t.__qualname__)
        if not allow_callables:
            raise StructureError(UNSAVABLE_CALLABLE.format(name=label, path=str(path)))
        ref = _functions.import_path(v)
        if ref is None:
            raise StructureError(NO_IMPORT_PATH.format(name=label, path=str(path)))
        return {"$": "callable", "ref": ref}
    raise StructureError(UNSAVABLE_CONSTANT.format(path=str(path), type=t.__qualname__))


def decode_value(v: Any, path: Any, xp: Any, opts: DecodeOptions | None = None, depth: int = 0) -> Any:
    """Inverse of :func:`encode_value`; ValueError (becomes FileFormatError) for bad input.

    Dtypes and static arrays are made with namespace ``xp`` (None: NumPy).
    ``path`` is only turned into text for an error message.
    """
    t = type(v)
    if v is None or t is bool or t is int or t is str or t is float:
        return v
    if depth > MAX_DEPTH:
        raise ValueError(TOO_DEEP.format(limit=MAX_DEPTH, path=str(path)))
    if opts is None:
        opts = DecodeOptions()

    def dec(x: Any) -> Any:
        return decode_value(x, path, xp, opts, depth + 1)

    def bad(why: str) -> ValueError:
        return ValueError(BAD_VALUE.format(value=_short(v), path=str(path), why=why))

    if t is not dict or not isinstance(v.get("$"), str):
        raise bad("not a JSON scalar or a tagged object")
    tag = v["$"]
    if tag == "float":
        s = v.get("v")
        if s not in ("nan", "inf", "-inf"):
            raise bad("float must be nan, inf or -inf")
        return float(s)
    if tag == "complex":
        re_, im = dec(v.get("re")), dec(v.get("im"))
        if type(re_) is not float or type(im) is not float:
            raise bad("complex parts must be floats")
        return complex(re_, im)
    if tag == "bytes":
        h = v.get("hex")
        if not isinstance(h, str):
            raise bad("bytes need a hex string")
        return bytes.fromhex(h)
    if tag in ("tuple", "list", "slice", "range"):
        items = v.get("items")
        if not isinstance(items, list):
            raise bad("items must be a list")
        vals = [dec(i) for i in items]
        if tag == "tuple":
            return tuple(vals)
        if tag == "list":
            return vals
        if len(vals) != 3:
            raise bad(f"{tag} needs 3 items")
        if tag == "range":
            if not all(type(i) is int for i in vals):
                raise bad("range needs ints")
            return range(*vals)
        return slice(*vals)
    if tag == "dict":
        items = v.get("items")
        if not isinstance(items, list) or not all(isinstance(i, list) and len(i) == 2 for i in items):
            raise bad("dict items must be [key, value] pairs")
        out = {}
        for k, i in items:
            key = dec(k)
            hash(key)  # TypeError for unhashable: converted by the caller
            out[key] = dec(i)
        return out
    if tag == "ellipsis":
        return Ellipsis
    if tag == "dtype":
        name = v.get("name")
        if name not in DTYPES and name != "bfloat16":
            raise bad(f"unknown dtype {name!r}")
        if xp is None:
            return host_numpy().dtype(name)
        return getattr(xp, name)
    if tag == "array":
        name, shape, h = v.get("dtype"), v.get("shape"), v.get("hex")
        if name not in DTYPES or not isinstance(h, str) or not isinstance(shape, list):
            raise bad("array needs dtype, shape and hex")
        if len(shape) > MAX_NDIM or not all(_is_int(d) and 0 <= d <= MAX_DIM for d in shape) or not fits_numpy(
            shape, 16
        ):
            raise bad(f"bad shape {shape!r}")
        np = host_numpy()
        dt = np.dtype(name).newbyteorder("<")
        if math.prod(shape) * dt.itemsize * 2 != len(h):
            raise bad("shape does not match the byte count")
        arr = np.frombuffer(bytearray.fromhex(h), dtype=dt).reshape(shape)
        return arr if xp is None else xp.asarray(arr)
    if tag in ("function", "callable", "partial"):
        return _decode_callable(v, tag, path, dec, opts, bad)
    raise bad(f"unknown tag {tag!r}")


def _decode_callable(v: dict[str, Any], tag: str, path: Any, dec: Any, opts: DecodeOptions, bad: Any) -> Any:
    from ember.io import _functions

    if tag == "partial":
        import functools

        fn, args, kwargs = dec(v.get("fn")), v.get("args"), v.get("kwargs")
        if not isinstance(args, list) or not isinstance(kwargs, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is str for p in kwargs
        ):
            raise bad("partial needs fn, args and kwargs")
        if fn is UNRESOLVED:
            return UNRESOLVED
        return functools.partial(fn, *[dec(a) for a in args], **{k: dec(a) for k, a in kwargs})
    name = v.get("name" if tag == "function" else "ref")
    if not isinstance(name, str):
        raise bad(f"{tag} needs a name")
    opts.count_type((tag, name))
    if tag == "function":
        fn = _functions.lookup(name)
        if fn is not None:
            return fn
        if opts.callables == "placeholder":
            return UNRESOLVED
        raise FileFormatError(_functions.UNKNOWN_FUNCTION.format(name=name, path=str(path)))
    if opts.callables == "placeholder":
        return UNRESOLVED
    if opts.callables != "import":
        raise FileFormatError(_functions.CALLABLE_REFUSED.format(ref=name, path=str(path)))
    return _functions.resolve_import(name, str(path))


def encode_key(key: Any) -> Any:
    """JSON of an ember.tree key (Name/Index/Key) returned by a register_node flatten."""
    from ember.tree import Index, Name

    if type(key) is Name:
        return {"name": key.name}
    if type(key) is Index:
        return {"index": key.index}
    return {"key": encode_value(key.key, "<register_node key>", None)}


def decode_key(obj: Any, path: Any) -> Any:
    """Inverse of :func:`encode_key` (ValueError for bad input)."""
    from ember.tree import Index, Key, Name

    if isinstance(obj, dict) and len(obj) == 1:
        (tag, v), = obj.items()
        if tag == "name" and type(v) is str:
            return Name(v)
        if tag == "index" and type(v) is int and v >= 0:
            return Index(v)
        if tag == "key":
            k = decode_value(v, path, None)
            if type(k) is not str:
                return Key(k)
    raise ValueError(BAD_VALUE.format(value=_short(obj), path=str(path), why="not a Name/Index/Key encoding"))


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


# --- ember.tree adapter -----------------------------------------------------


def is_array(x: Any) -> bool:
    """Whether ember.tree treats ``x`` as a leaf (an array of any backend or a Tensor)."""
    return node_kind(x) == "array"


def node_kind(x: Any) -> str:
    """How ember.tree sees ``x``: array, const, list, tuple, namedtuple, dict, dataclass or node."""
    from ember.tree import node_info

    return node_info(x).kind


def static_fields(cls: type) -> tuple[str, ...]:
    """Names of the static fields of a registered dataclass."""
    from ember.tree import node_info

    return node_info(cls=cls).static


def custom_flatten(x: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """``(children as (key, child) pairs, aux)`` of a register_node object."""
    from ember.tree import node_info

    children, aux = node_info(x).flatten(x)
    return list(children), aux


def _lookup(name: Any, path: Any) -> Any:
    """The object named ``"module:QualName"`` if its module is already imported, else None."""
    import sys

    if not isinstance(name, str) or name.count(":") != 1 or len(name) > 1000:
        raise ValueError(f"bad type name {_short(name)} at {str(path)!r}")
    mod_name, qual = name.split(":")
    obj: Any = sys.modules.get(mod_name)
    for part in qual.split("."):
        if obj is None or not part.isidentifier():
            return None
        # vars(), not getattr(): a module __getattr__ could import something
        try:
            obj = vars(obj).get(part)
        except TypeError:
            return None
    return obj if isinstance(obj, type) else None


def resolve_type(name: Any, what: str, path: Any, opts: DecodeOptions | None = None) -> Any:
    """The class named ``"module:QualName"`` if it is registered as ``what`` with ember.tree.

    ``what`` is "dataclass" or "node". Never imports anything: the module must
    already be in ``sys.modules``. Returns ``(cls, node_type)``; raises
    FileFormatError otherwise.
    """
    from ember.tree import node_info

    if opts is not None:
        opts.count_type((what, name if isinstance(name, str) else repr(name)[:100]))
    obj = _lookup(name, path)
    nt = node_info(cls=obj) if isinstance(obj, type) else None
    if nt is None or nt.kind != what:
        raise FileFormatError(UNKNOWN_TYPE.format(type=name, path=str(path), what=f"{what} type"))
    return obj, nt


#: namedtuple classes made for files, by (type name, fields); shared across loads.
_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], type] = {}
_NAMEDTUPLE_CACHE_MAX = 4096


def resolve_namedtuple(name: Any, fields: list[str], path: Any, opts: DecodeOptions | None = None) -> Any:
    """The namedtuple class ``name`` if already imported with these fields, else an equivalent one.

    A file cannot make ember.io import a module; when the class is not around,
    an equivalent ``collections.namedtuple`` with the same name and fields is
    made once and cached (a file naming many distinct types fails at MAX_TYPES).
    """
    import collections

    key = (name if isinstance(name, str) else "", tuple(fields))
    if opts is not None:
        opts.count_type(("namedtuple", key))
    obj = _lookup(name, path)
    if obj is not None and issubclass(obj, tuple) and getattr(obj, "_fields", None) == tuple(fields):
        return obj
    cls = _NAMEDTUPLES.get(key)
    if cls is None:
        typename = name.split(":")[1].rsplit(".", 1)[-1]
        cls = collections.namedtuple(typename, fields)  # ValueError for bad names
        if len(_NAMEDTUPLES) >= _NAMEDTUPLE_CACHE_MAX:
            _NAMEDTUPLES.clear()
        _NAMEDTUPLES[key] = cls
    return cls
