"""The on-disk format: safetensors bytes plus an ember JSON header, and its checks.

A file written by :func:`ember.io.save` is a plain safetensors file:

* 8 bytes: little-endian unsigned length ``N`` of the header;
* ``N`` bytes: a UTF-8 JSON object ``{name: {"dtype", "shape", "data_offsets"}}``
  plus ``"__metadata__": {str: str}``, padded with spaces to a multiple of 8;
* the data section: every array's bytes (little-endian, C order), back to back.

Arrays are named by the canonical string of their ember path
(``encoder.layers.0.weight``). The structure around them goes, as a JSON string,
into ``__metadata__["ember"]`` (schema in :mod:`ember.io._save`), so the model,
its constants and its optimizer state stay in one file that any safetensors
reader (PyTorch, NumPy, Rust) can still open.

Everything read from a file is untrusted. :func:`read_file` checks the header
length against the file size, each dtype, each shape against its byte span and
the spans against each other (contiguous, no overlap, inside the file) *before*
it allocates anything, and turns every failure into
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
    "encode_header",
    "host_numpy",
    "read_file",
    "strict_json_loads",
]

# --- error texts (constants so tests can check them) -----------------------

BAD_FILE = "ember.io: {path} is not a valid safetensors file: {reason}"
TOO_SHORT = "the file is {size} bytes long; a safetensors file starts with an 8-byte header length"
BAD_HEADER_LEN = "the header length field says {n} bytes but only {avail} bytes follow it"
HEADER_TOO_BIG = "the header length field says {n} bytes, more than the {limit}-byte limit"
BAD_JSON = "the header is not valid UTF-8 JSON: {error}"
DUPLICATE_KEY = "the JSON object has the key {key!r} twice"
BAD_ENTRY = "tensor {name!r}: {reason}"
UNKNOWN_DTYPE = "tensor {name!r}: unknown dtype {dtype!r}; known dtypes are {known}"
SPAN_MISMATCH = (
    "tensor {name!r}: shape {shape} of {dtype} needs {need} bytes but data_offsets "
    "[{begin}, {end}] span {span} bytes"
)
OUT_OF_FILE = "tensor {name!r}: data_offsets [{begin}, {end}] end past the data section ({size} bytes)"
OVERLAP = "tensors {a!r} and {b!r} overlap or leave a gap (data_offsets {a_span} then {b_span})"
TRAILING = "the data section has {size} bytes but the tensors cover only {covered}"

#: Largest header accepted (same bound as the safetensors library).
MAX_HEADER_BYTES = 100_000_000
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
# as raw uint16 bits; load_state_dict widens it to float32 (exactly).
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
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise ValueError(DUPLICATE_KEY.format(key=k))
            out[k] = v
        return out

    def no_constant(name: str) -> Any:
        raise ValueError(f"the JSON number {name} is not allowed")

    return json.loads(text, object_pairs_hook=pairs, parse_constant=no_constant)


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header, already checked against the file size."""

    name: str
    code: str  # safetensors dtype code, e.g. "F32"
    shape: tuple[int, ...]
    begin: int  # offsets into the data section
    end: int


@dataclass
class SafetensorsFile:
    """A checked safetensors file held in memory: header entries, metadata and data bytes."""

    entries: dict[str, TensorEntry]
    metadata: dict[str, str]
    data: Any  # writable bytes-like (bytearray) of the data section

    def array(self, name: str) -> Any:
        """The tensor ``name`` as a NumPy array viewing the file's buffer (no copy)."""
        np = host_numpy()
        e = self.entries[name]
        np_dtype = np.dtype(_CODES[e.code][0]).newbyteorder("<")
        count = (e.end - e.begin) // np_dtype.itemsize
        arr = np.frombuffer(self.data, dtype=np_dtype, count=count, offset=e.begin)
        return arr.reshape(e.shape)


def fits_numpy(shape: Any, itemsize: int) -> bool:
    """Whether NumPy can make an array of this shape (its size check ignores zero dims)."""
    return math.prod(max(d, 1) for d in shape) * itemsize < 2**63


def _fail(path: Any, reason: str) -> FileFormatError:
    return FileFormatError(BAD_FILE.format(path=path, reason=reason))


def _is_int(x: Any) -> bool:
    return type(x) is int  # bool is not an int here


def _check_entry(name: str, raw: Any, data_size: int) -> TensorEntry:
    if not isinstance(raw, dict):
        raise ValueError(BAD_ENTRY.format(name=name, reason="entry is not a JSON object"))
    if set(raw) != {"dtype", "shape", "data_offsets"}:
        raise ValueError(
            BAD_ENTRY.format(
                name=name, reason=f"keys are {sorted(raw)}, expected ['data_offsets', 'dtype', 'shape']"
            )
        )
    code, shape, offsets = raw["dtype"], raw["shape"], raw["data_offsets"]
    if not isinstance(code, str) or code not in _CODES:
        raise ValueError(UNKNOWN_DTYPE.format(name=name, dtype=code, known=sorted(_CODES)))
    if not isinstance(shape, list) or len(shape) > MAX_NDIM:
        raise ValueError(BAD_ENTRY.format(name=name, reason=f"shape {shape!r} is not a list of <= {MAX_NDIM} ints"))
    if not all(_is_int(d) and 0 <= d <= MAX_DIM for d in shape):
        raise ValueError(BAD_ENTRY.format(name=name, reason=f"shape {shape!r} has a negative, huge or non-int size"))
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise ValueError(BAD_ENTRY.format(name=name, reason=f"data_offsets {offsets!r} is not [begin, end]"))
    begin, end = offsets
    if not 0 <= begin <= end:
        raise ValueError(BAD_ENTRY.format(name=name, reason=f"data_offsets {offsets!r} are negative or reversed"))
    if end > data_size:
        raise ValueError(OUT_OF_FILE.format(name=name, begin=begin, end=end, size=data_size))
    itemsize = _CODES[code][1]
    if not fits_numpy(shape, itemsize):
        raise ValueError(BAD_ENTRY.format(name=name, reason=f"shape {shape!r} is too large for an array"))
    need = math.prod(shape) * itemsize
    if need != end - begin:
        raise ValueError(
            SPAN_MISMATCH.format(
                name=name, shape=tuple(shape), dtype=code, need=need, begin=begin, end=end, span=end - begin
            )
        )
    return TensorEntry(name, code, tuple(shape), begin, end)


def _check_layout(entries: dict[str, TensorEntry], data_size: int) -> None:
    ordered = sorted(entries.values(), key=lambda e: (e.begin, e.end))
    pos, prev = 0, None
    for e in ordered:
        if e.begin != pos:
            a = prev.name if prev else "<start>"
            a_span = [prev.begin, prev.end] if prev else [0, 0]
            raise ValueError(OVERLAP.format(a=a, b=e.name, a_span=a_span, b_span=[e.begin, e.end]))
        pos, prev = e.end, e
    if pos != data_size:
        raise ValueError(TRAILING.format(size=data_size, covered=pos))


def _parse_header(header: bytes, data_size: int) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    try:
        text = header.decode("utf-8")
        obj = strict_json_loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(BAD_JSON.format(error=exc)) from exc
    if not isinstance(obj, dict):
        raise ValueError(f"the header is a JSON {type(obj).__name__}, expected an object")
    metadata = obj.pop("__metadata__", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError("__metadata__ is not a JSON object of string to string")
    entries = {name: _check_entry(name, raw, data_size) for name, raw in obj.items()}
    _check_layout(entries, data_size)
    return entries, metadata


def read_file(path: str | os.PathLike[str]) -> SafetensorsFile:
    """Read and check a whole safetensors file; any defect raises FileFormatError.

    OSError (missing file, permissions) passes through unchanged.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            if size < 8:
                raise ValueError(TOO_SHORT.format(size=size))
            head = f.read(8)
            if len(head) != 8:
                raise ValueError(TOO_SHORT.format(size=len(head)))
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise ValueError(HEADER_TOO_BIG.format(n=n, limit=MAX_HEADER_BYTES))
            if n > size - 8 or n < 2:
                raise ValueError(BAD_HEADER_LEN.format(n=n, avail=size - 8))
            header = f.read(n)
            if len(header) != n:  # file shrank while we read it
                raise ValueError(BAD_HEADER_LEN.format(n=n, avail=len(header)))
            data_size = size - 8 - n
            entries, metadata = _parse_header(header, data_size)
            data = bytearray(data_size)
            got = f.readinto(data)
            if got != data_size:
                raise ValueError(f"the data section should be {data_size} bytes but only {got} could be read")
        except FileFormatError:
            raise
        except OSError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError, MemoryError) as exc:
            raise _fail(os.fspath(path), str(exc)) from exc
    return SafetensorsFile(entries, metadata, data)


def encode_header(entries: list[tuple[str, str, tuple[int, ...], int]], metadata: dict[str, str]) -> bytes:
    """Build the header bytes (length prefix + padded JSON) for ``(name, code, shape, nbytes)`` rows.

    Rows are laid out in the given order; the caller sorts them (largest item
    size first keeps every tensor aligned to its item size).
    """
    obj: dict[str, Any] = {}
    if metadata:
        obj["__metadata__"] = dict(metadata)
    pos = 0
    for name, code, shape, nbytes in entries:
        obj[name] = {"dtype": code, "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
        pos += nbytes
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


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
# ellipsis, dtype (by name), array (a static array: dtype, shape, hex bytes).

FORMAT_NAME = "ember.io"
FORMAT_VERSION = 1
#: ``__metadata__`` key that carries the ember structure JSON.
EMBER_KEY = "ember"

UNSAVABLE_CONSTANT = (
    "ember.io.save: cannot store the constant at {path!r} (a {type}): a file holds only "
    "None, bool, int, float, complex, str, bytes, slices, ranges, dtypes, arrays and "
    "tuples/lists/dicts of these. Remove it (or make it one of these) before saving; "
    "load(..., like=...) takes constants from `like`."
)
BAD_VALUE = "bad constant encoding {value!r} at {path!r}: {why}"
UNKNOWN_TYPE = (
    "the file stores an object of type {type!r} at {path!r}, but no such {what} is registered "
    "with ember.tree in this process (ember.io never imports modules named by a file). "
    "Import the module that defines and registers it before loading, or pass like=."
)


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


def encode_value(v: Any, path: str, to_host: Any) -> Any:
    """Encode a constant as JSON VALUE; StructureError naming ``path`` when it cannot be."""
    from ember._errors import StructureError

    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return v if math.isfinite(v) else {"$": "float", "v": repr(v)}
    if t is complex:
        return {"$": "complex", "re": encode_value(v.real, path, to_host), "im": encode_value(v.imag, path, to_host)}
    if t is bytes:
        return {"$": "bytes", "hex": v.hex()}
    if t is tuple or t is list:
        return {"$": t.__name__, "items": [encode_value(i, path, to_host) for i in v]}
    if t is dict:
        return {"$": "dict", "items": [[encode_value(k, path, to_host), encode_value(i, path, to_host)]
                                       for k, i in v.items()]}
    if t is slice:
        return {"$": "slice", "items": [encode_value(i, path, to_host) for i in (v.start, v.stop, v.step)]}
    if t is range:
        return {"$": "range", "items": [v.start, v.stop, v.step]}
    if v is Ellipsis:
        return {"$": "ellipsis"}
    if is_array(v):
        arr, name = to_host(v, path)
        shape = arr.shape[:-1] if name == "complex128" else arr.shape
        return {"$": "array", "dtype": name, "shape": list(shape), "hex": arr.tobytes().hex()}
    name = dtype_name(v)
    if name is not None:
        return {"$": "dtype", "name": name}
    raise StructureError(UNSAVABLE_CONSTANT.format(path=path, type=t.__qualname__))


def decode_value(v: Any, path: str, xp: Any) -> Any:
    """Inverse of :func:`encode_value`; ValueError (becomes FileFormatError) for bad input.

    Dtypes and static arrays are made with namespace ``xp`` (None: NumPy).
    """
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return v
    if t is not dict or not isinstance(v.get("$"), str):
        raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="not a JSON scalar or a tagged object"))
    tag = v["$"]
    if tag == "float":
        s = v.get("v")
        if s not in ("nan", "inf", "-inf"):
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="float must be nan, inf or -inf"))
        return float(s)
    if tag == "complex":
        re_, im = decode_value(v.get("re"), path, xp), decode_value(v.get("im"), path, xp)
        if type(re_) is not float or type(im) is not float:
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="complex parts must be floats"))
        return complex(re_, im)
    if tag == "bytes":
        h = v.get("hex")
        if not isinstance(h, str):
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="bytes need a hex string"))
        return bytes.fromhex(h)
    if tag in ("tuple", "list", "slice", "range"):
        items = v.get("items")
        if not isinstance(items, list):
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="items must be a list"))
        vals = [decode_value(i, path, xp) for i in items]
        if tag == "tuple":
            return tuple(vals)
        if tag == "list":
            return vals
        if len(vals) != 3:
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why=f"{tag} needs 3 items"))
        if tag == "range":
            if not all(type(i) is int for i in vals):
                raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="range needs ints"))
            return range(*vals)
        return slice(*vals)
    if tag == "dict":
        items = v.get("items")
        if not isinstance(items, list) or not all(isinstance(i, list) and len(i) == 2 for i in items):
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="dict items must be [key, value] pairs"))
        out = {}
        for k, i in items:
            key = decode_value(k, path, xp)
            hash(key)  # TypeError for unhashable: converted by the caller
            out[key] = decode_value(i, path, xp)
        return out
    if tag == "ellipsis":
        return Ellipsis
    if tag == "dtype":
        name = v.get("name")
        if name not in DTYPES and name != "bfloat16":
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why=f"unknown dtype {name!r}"))
        if xp is None:
            return host_numpy().dtype(name)
        return getattr(xp, name)
    if tag == "array":
        name, shape, h = v.get("dtype"), v.get("shape"), v.get("hex")
        if name not in DTYPES or not isinstance(h, str) or not isinstance(shape, list):
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="array needs dtype, shape and hex"))
        if len(shape) > MAX_NDIM or not all(_is_int(d) and 0 <= d <= MAX_DIM for d in shape) or not fits_numpy(
            shape, 16
        ):
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why=f"bad shape {shape!r}"))
        np = host_numpy()
        raw = bytes.fromhex(h)
        dt = np.dtype(name).newbyteorder("<")
        if math.prod(shape) * dt.itemsize != len(raw):
            raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why="shape does not match the byte count"))
        arr = np.frombuffer(bytearray(raw), dtype=dt).reshape(shape)
        return arr if xp is None else xp.asarray(arr)
    raise ValueError(BAD_VALUE.format(value=_short(v), path=path, why=f"unknown tag {tag!r}"))


def encode_key(key: Any) -> Any:
    """JSON of an ember.tree key (Name/Index/Key) returned by a register_node flatten."""
    from ember.tree import Index, Name

    if type(key) is Name:
        return {"name": key.name}
    if type(key) is Index:
        return {"index": key.index}
    return {"key": encode_value(key.key, "<register_node key>", None)}


def decode_key(obj: Any, path: str) -> Any:
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
    raise ValueError(BAD_VALUE.format(value=_short(obj), path=path, why="not a Name/Index/Key encoding"))


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


def _lookup(name: Any, path: str) -> Any:
    """The object named ``"module:QualName"`` if its module is already imported, else None."""
    import sys

    if not isinstance(name, str) or name.count(":") != 1:
        raise ValueError(f"bad type name {_short(name)} at {path!r}")
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


def resolve_type(name: Any, what: str, path: str) -> Any:
    """The class named ``"module:QualName"`` if it is registered as ``what`` with ember.tree.

    ``what`` is "dataclass" or "node". Never imports anything: the module must
    already be in ``sys.modules``. Returns ``(cls, node_type)``; raises
    FileFormatError otherwise.
    """
    from ember.tree import node_info

    obj = _lookup(name, path)
    nt = node_info(cls=obj) if isinstance(obj, type) else None
    if nt is None or nt.kind != what:
        raise FileFormatError(UNKNOWN_TYPE.format(type=name, path=path, what=f"{what} type"))
    return obj, nt


def resolve_namedtuple(name: Any, fields: list[str], path: str) -> Any:
    """The namedtuple class ``name`` if already imported with these fields, else a new one.

    A file cannot make ember.io import a module; when the class is not around,
    an equivalent ``collections.namedtuple`` with the same name and fields is made.
    """
    import collections

    obj = _lookup(name, path)
    if obj is not None and issubclass(obj, tuple) and getattr(obj, "_fields", None) == tuple(fields):
        return obj
    typename = name.split(":")[1].rsplit(".", 1)[-1]
    return collections.namedtuple(typename, fields)  # ValueError for bad names
