"""ember.io against corrupted and hostile files.

Every mutated file must either load (the mutation happened to keep it valid)
or raise FileFormatError (with like=: also LoadMismatchError); nothing else,
and never slowly. The default run tries 500 mutated files; the slow one 10,000.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import tempfile
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember.io as io
import ember.tree as tree
from ember._errors import FileFormatError, StructureError

#: Upper bound for one load of one small file; a hang or a huge allocation blows it.
CASE_SECONDS = 2.0


@tree.register
@dataclasses.dataclass
class Block:
    w: object
    b: object
    act: str = tree.field(static=True, default="relu")
    table: object = tree.field(static=True, default=None)


Pair = collections.namedtuple("Pair", ["left", "right"])

BASES = [
    {
        "model": {"enc": [Block(np.ones((2, 3), np.float32), np.arange(3.0), "tanh", np.arange(2))],
                  "pair": Pair(np.zeros((0, 2), np.int16), np.array(1 + 2j))},
        "opt": {"step": 7, "params": {"enc.0.w": {"m": np.full((2, 3), 0.5), "v": np.ones((2, 3), np.float16)}}},
        "flags": [True, None, 1.5, "x", np.array(True)],
        3: np.uint8(9),
    },
    [np.arange(5, dtype=np.int64), (np.float32(2.5), {"k": np.zeros(2, np.complex64)})],
]

_TMP = tempfile.mkdtemp(prefix="ember-io-fuzz-")


def _valid_files() -> list[bytes]:
    out = []
    for i, base in enumerate(BASES):
        p = os.path.join(_TMP, f"base{i}.safetensors")
        io.save(p, base, metadata={"note": "fuzz"})
        with open(p, "rb") as f:
            out.append(f.read())
    return out


VALID = _valid_files()


def _split(data: bytes) -> tuple[dict, bytes]:
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _join(header_text: str, body: bytes) -> bytes:
    raw = header_text.encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + body


# --- hostile values and a generic JSON mutator -----------------------------

DEEP_LIST = "[" * 5000 + "]" * 5000
HOSTILE = [
    -1, 0, 1, 2**31, 2**40, 2**63, 2**64 + 5, -(2**63), 1.5, float("1e308"), True, None, "", "x",
    "../../etc/passwd", "a..b", "[<x>]", '["unterminated', "model.enc.0.w", "os:system", "builtins:dict",
    "collections:OrderedDict", "F64", "I8", "BF16", "XYZ", "float64", "complex128",
    [], [0], [-1, 4], [4, 2], [0, 2**62], [2**40, 2**40], [1, "2"], [[1]], {}, {"k": "array"},
    {"$": "array", "dtype": "float64", "shape": [2**40], "hex": ""},
    {"$": "array", "dtype": "float64", "shape": [2**62, 0], "hex": ""},
    {"$": "dtype", "name": "object"}, {"$": "nope"}, {"$": "float", "v": "1e999"},
    {"$": "range", "items": [0, 10**12, 1]}, {"$": "dict", "items": [[[], 1]]},
    {"k": "list", "items": [{"k": "array", "path": "zz", "dtype": "float32", "shape": [1]}]},
    {"k": "dataclass", "type": "os:system", "fields": [], "static": []},
    {"k": "node", "type": "builtins:object", "aux": None, "items": []},
]


def _positions(obj, out, depth=0):
    """All (container, key) slots of a JSON value, for picking one to mutate."""
    if depth > 60:
        return
    if isinstance(obj, dict):
        for k in list(obj):
            out.append((obj, k))
            _positions(obj[k], out, depth + 1)
    elif isinstance(obj, list):
        for i in range(len(obj)):
            out.append((obj, i))
            _positions(obj[i], out, depth + 1)


def _mutate_json(obj, data):
    """Apply 1-3 random edits (replace, delete, duplicate, swap) to a JSON value in place."""
    for _ in range(data.draw(st.integers(1, 3))):
        slots = []
        _positions(obj, slots)
        if not slots:
            return
        container, key = slots[data.draw(st.integers(0, len(slots) - 1))]
        op = data.draw(st.sampled_from(["replace", "replace", "delete", "duplicate", "swap"]))
        if op == "replace":
            container[key] = json.loads(json.dumps(data.draw(st.sampled_from(HOSTILE))))
        elif op == "delete":
            del container[key]
        elif op == "duplicate" and isinstance(container, list):
            container.insert(key, json.loads(json.dumps(container[key])))
        elif op == "swap":
            other_c, other_k = slots[data.draw(st.integers(0, len(slots) - 1))]
            try:
                container[key], other_c[other_k] = other_c[other_k], container[key]
            except (KeyError, IndexError):
                pass


def _ember_arrays(node, out):
    if isinstance(node, dict):
        if node.get("k") == "array":
            out.append(node)
        for v in node.values():
            _ember_arrays(v, out)
    elif isinstance(node, list):
        for v in node:
            _ember_arrays(v, out)


def mutate(data) -> bytes:
    """One mutated file drawn from the hypothesis data object."""
    base = VALID[data.draw(st.integers(0, len(VALID) - 1))]
    kind = data.draw(st.sampled_from(
        ["truncate", "flip", "header_len", "st_json", "ember_json", "ember_path", "raw_header", "append"]
    ))
    if kind == "truncate":
        return base[: data.draw(st.integers(0, len(base) - 1))]
    if kind == "flip":
        b = bytearray(base)
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(b) - 1))
            b[i] ^= data.draw(st.integers(1, 255))
        return bytes(b)
    if kind == "header_len":
        n = int.from_bytes(base[:8], "little")
        v = data.draw(st.one_of(
            st.sampled_from([0, 1, 2, 7, n - 1, n + 1, n + 8, len(base), len(base) - 8, 2**63, 2**64 - 1]),
            st.integers(0, 2**64 - 1),
        ))
        return v.to_bytes(8, "little") + base[8:]
    if kind == "append":
        return base + data.draw(st.binary(min_size=1, max_size=16))
    header, body = _split(base)
    if kind == "st_json":
        meta = header.pop("__metadata__")
        _mutate_json(header, data)
        header = {"__metadata__": meta, **header} if isinstance(header, dict) else header
        return _join(json.dumps(header), body)
    if kind == "raw_header":
        text = json.dumps(header)
        choice = data.draw(st.sampled_from(["dup_key", "deep", "nan", "not_object", "bad_utf8", "meta"]))
        if choice == "dup_key":
            name = next(k for k in header if k != "__metadata__")
            text = "{" + json.dumps(name) + ":" + json.dumps(header[name]) + "," + text[1:]
        elif choice == "deep":
            text = DEEP_LIST
        elif choice == "nan":
            text = text.replace('"shape":[', '"shape":[NaN,', 1)
        elif choice == "not_object":
            text = json.dumps(list(header))
        elif choice == "bad_utf8":
            return _join(text, body)[:12] + b"\xff\xfe" + _join(text, body)[14:]
        else:
            header["__metadata__"] = {"ember": 5}
            text = json.dumps(header)
        return _join(text, body)
    ember = json.loads(header["__metadata__"]["ember"])
    if kind == "ember_json":
        _mutate_json(ember, data)
    else:  # ember_path: make array paths escape the structure or collide
        arrays = []
        _ember_arrays(ember, arrays)
        target = arrays[data.draw(st.integers(0, len(arrays) - 1))]
        other = arrays[data.draw(st.integers(0, len(arrays) - 1))]
        target["path"] = data.draw(st.sampled_from(
            [other["path"], "", "../" + target["path"], target["path"] + ".x", "a..b", "[<x>]", "0", '["x"]']
        ))
        if data.draw(st.booleans()):
            target["dtype"] = data.draw(st.sampled_from(["float64", "int8", "complex128", "bfloat16", "str"]))
    header["__metadata__"]["ember"] = json.dumps(ember)
    return _join(json.dumps(header), body)


def _check_one(blob: bytes) -> None:
    p = os.path.join(_TMP, "case.safetensors")
    with open(p, "wb") as f:
        f.write(blob)
    for call, allowed in (
        (lambda: io.load(p), (FileFormatError,)),
        (lambda: io.load(p, like=BASES[0]), (FileFormatError, io.LoadMismatchError)),
        (lambda: io.load_state_dict(p), (FileFormatError, StructureError)),
    ):
        t0 = time.perf_counter()
        try:
            call()
        except allowed:
            pass
        except Exception as exc:  # anything else is a bug: show the file
            raise AssertionError(f"{type(exc).__name__} escaped for a mutated file: {exc!r}\n{blob[:400]!r}") from exc
        assert time.perf_counter() - t0 < CASE_SECONDS, "a load of a tiny file took too long"


_SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None)


@settings(max_examples=500, **_SETTINGS)
@given(st.data())
def test_mutated_files_raise_only_file_format_error(data):
    _check_one(mutate(data))


@pytest.mark.slow
@settings(max_examples=10_000, **_SETTINGS)
@given(st.data())
def test_mutated_files_raise_only_file_format_error_10k(data):
    _check_one(mutate(data))


def test_valid_bases_load():
    for blob, base in zip(VALID, BASES):
        p = os.path.join(_TMP, "valid.safetensors")
        with open(p, "wb") as f:
            f.write(blob)
        back = io.load(p)
        assert tree.paths(back) == tree.paths(base)


@pytest.mark.parametrize(
    "blob, reason",
    [
        (b"", "8-byte header length"),
        ((2**63).to_bytes(8, "little") + b"{}", "limit"),
        ((100).to_bytes(8, "little") + b"{}      ", "invalid header length"),
        (_join('{"a":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,4]}}', b"\0" * 4), "offset"),
        (_join('{"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}}', b"\0" * 4),
         "overflow"),
        (_join('{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}', b"\0" * 4), "-4"),
        (_join('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
               '"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4), "offset"),
        (_join('{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4), "Q9"),
        # a duplicate name: the library keeps the last entry, so the file is valid but has no ember header
        (_join('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],'
               '"data_offsets":[0,4]}}', b"\0" * 4), "no ember structure"),
        (_join('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', b"\0" * 4), "not fully covered"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_specific_bad_headers_name_the_reason(blob, reason):
    p = os.path.join(_TMP, "specific.safetensors")
    with open(p, "wb") as f:
        f.write(blob)
    with pytest.raises(FileFormatError, match=reason):
        io.load(p)


def test_path_escape_is_reported():
    header, body = _split(VALID[1])
    ember = json.loads(header["__metadata__"]["ember"])
    arrays = []
    _ember_arrays(ember, arrays)
    arrays[0]["path"] = "../../x"
    header["__metadata__"]["ember"] = json.dumps(ember)
    p = os.path.join(_TMP, "escape.safetensors")
    with open(p, "wb") as f:
        f.write(_join(json.dumps(header), body))
    with pytest.raises(FileFormatError, match="not where the structure puts it"):
        io.load(p)
