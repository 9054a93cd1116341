"""ember.io: round trips, like= checks, backends, state dicts, metadata."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember.io as io
import ember.tree as tree
from ember._errors import FileFormatError, StructureError
from ember.io import _format, _load, _save


@tree.register
@dataclasses.dataclass
class Linear:
    w: object
    b: object
    act: str = tree.field(static=True, default="relu")
    shape: tuple = tree.field(static=True, default=())


@tree.register
@dataclasses.dataclass(frozen=True)
class Frozen:
    x: object
    table: object = tree.field(static=True, default=None)  # a static array


Pair = collections.namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class NotRegistered:
    w: object


_TMP = tempfile.mkdtemp(prefix="ember-io-test-")


def _path(name: str = "t.safetensors") -> str:
    return os.path.join(_TMP, name)


# --- structural equality that sees types, dtypes and NaN ------------------


def assert_same(a, b, where="root", ordered=True):
    """Same types, dtypes, shapes and values; ``ordered=False`` ignores dict order.

    (ember.tree rebuilds dicts in sorted key order, so like= results may reorder.)
    """
    if isinstance(a, np.ndarray | np.generic):
        assert isinstance(b, np.ndarray), f"{where}: {type(b)}"
        a = np.asarray(a)
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
        return
    assert type(a) is type(b), f"{where}: {type(a)} vs {type(b)}"
    if isinstance(a, dict):
        assert (list(a) == list(b)) if ordered else (set(a) == set(b)), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]", ordered)
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}.{i}", ordered)
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", ordered)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


# --- strategies -----------------------------------------------------------

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]

arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
)
constants = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.text(max_size=5), st.complex_numbers(allow_nan=False), st.binary(max_size=4),
)
leaves = st.one_of(arrays, constants)
dict_keys = st.one_of(st.text(max_size=4), st.integers(-5, 5), st.tuples(st.integers(0, 3), st.text(max_size=2)))


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(dict_keys, children, max_size=3),
        st.dictionaries(st.text(max_size=3), children, max_size=3).map(collections.OrderedDict),
        st.tuples(children, children).map(lambda t: Pair(*t)),
        st.builds(Linear, children, children, st.sampled_from(["relu", "tanh"]),
                  st.tuples(st.integers(0, 9), st.integers(0, 9))),
    )


structures = st.recursive(leaves, _containers, max_leaves=12)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(structures)
def test_round_trip_any_structure(t):
    p = _path("rt.safetensors")
    io.save(p, t)
    assert_same(t, io.load(p))


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(structures)
def test_round_trip_with_like_gives_like_structure(t):
    p = _path("rtl.safetensors")
    io.save(p, t)
    assert_same(t, io.load(p, like=t), ordered=False)


def test_optimizer_state_and_model_together():
    model = {"encoder": [Linear(np.ones((2, 3), np.float32), np.zeros(3, np.float32), "tanh", (2, 3))]}
    opt = {"step": 3, "params": {"encoder.0.w": {"m": np.full((2, 3), 0.5), "v": np.ones((2, 3))}}}
    p = _path("both.safetensors")
    io.save(p, {"model": model, "opt": opt})
    back = io.load(p)
    assert_same({"model": model, "opt": opt}, back)
    assert back["model"]["encoder"][0].act == "tanh" and back["opt"]["step"] == 3
    # the dotted dict key "encoder.0.w" stays one key, not three
    assert '["encoder.0.w"]' in str(tree.paths(back["opt"])[0])


def test_static_array_and_frozen_dataclass():
    f = Frozen(np.arange(4.0), table=np.arange(6, dtype=np.int16).reshape(2, 3))
    p = _path("frozen.safetensors")
    io.save(p, f)
    back = io.load(p)
    assert_same(f, back)
    assert _tensor_names(p) == {"x"}  # static arrays are structure, not tensors


def test_dtype_constants_and_special_values():
    t = {"d": np.dtype("float32"), "t": np.int64, "s": slice(1, None, 2), "r": range(3), "e": ...,
         "inf": float("-inf"), "big": 2**100, "by": b"\x00\xff"}
    p = _path("consts.safetensors")
    io.save(p, t)
    back = io.load(p)
    assert back["d"] == np.float32 and back["t"] == np.int64
    assert back["s"] == slice(1, None, 2) and back["r"] == range(3) and back["e"] is Ellipsis
    assert back["inf"] == float("-inf") and back["big"] == 2**100 and back["by"] == b"\x00\xff"


def test_unsavable_constant_names_the_path():
    with pytest.raises(StructureError) as ei:
        io.save(_path("bad.safetensors"), {"model": {"act": lambda x: x}})
    assert "model.act" in str(ei.value) and "function" in str(ei.value)
    assert not os.path.exists(_path("bad.safetensors"))


def test_unregistered_type_is_not_resolved_without_like():
    p = _path("unreg.safetensors")
    io.save(p, {"l": Linear(np.ones(2), np.ones(2))})
    meta = json.loads(_metadata(p)["ember"])
    meta["tree"]["items"][0][1]["type"] = "os:system"  # a hostile type name
    _rewrite_ember(p, meta)
    with pytest.raises(FileFormatError, match="registered"):
        io.load(p)
    # with like=, the class comes from like and the file's type name does not matter
    back = io.load(p, like={"l": Linear(np.zeros(2), np.zeros(2))})
    assert_same(back["l"].w, np.ones(2))


def _metadata(p):
    from safetensors import safe_open

    with safe_open(p, framework="numpy") as f:
        return f.metadata()


def _tensor_names(p):
    from safetensors import safe_open

    with safe_open(p, framework="numpy") as f:
        return set(f.keys())


def _rewrite_ember(p, meta):
    """Rewrite a file's ember JSON keeping its tensors (test helper, through the safetensors package)."""
    import safetensors.numpy as sn

    md = _metadata(p)
    md["ember"] = json.dumps(meta)
    sn.save_file(sn.load_file(p), p, metadata=md)


def test_like_mismatch_lists_every_bad_path():
    saved = {"enc": Linear(np.ones((2, 3), np.float32), np.zeros(3, np.float32)),
             "head": [np.ones(4), np.ones(4)], "old": np.ones(1)}
    p = _path("mm.safetensors")
    io.save(p, saved)
    like = {"enc": Linear(np.ones((3, 3), np.float32), np.zeros(3, np.float64)),
            "head": [np.ones(4), np.ones(5, np.int32), np.ones(4)], "new": {"x": np.ones(1)}}
    with pytest.raises(io.LoadMismatchError) as ei:
        io.load(p, like=like)
    e = ei.value
    assert isinstance(e, StructureError)
    assert sorted(e.missing) == ["head.2", "new.x"]
    assert e.unexpected == ["old"]
    assert sorted(e.shape_changed) == ["enc.w", "head.1"]
    assert sorted(e.dtype_changed) == ["enc.b", "head.1"]
    for path in ("head.2", "new.x", "old", "enc.w", "enc.b", "head.1"):
        assert path in str(e)
    assert _load.MISMATCH_FIX in str(e)


def test_like_policies_keep_and_ignore():
    p = _path("pol.safetensors")
    io.save(p, {"a": np.ones(2), "extra": np.ones(1)})
    like = {"a": np.zeros(2), "b": np.full(3, 7.0)}
    back = io.load(p, like=like, on_missing="keep", on_unexpected="ignore")
    assert_same(back, {"a": np.ones(2), "b": np.full(3, 7.0)})
    with pytest.raises(ValueError, match="on_missing"):
        io.load(p, like=like, on_missing="drop")


def test_like_constants_come_from_the_file():
    """A checkpoint restores what it saved (step counts!); like gives structure and callables."""
    p = _path("lc.safetensors")
    io.save(p, {"lr": 0.1, "step": 7, "w": np.ones(2)})
    back = io.load(p, like={"lr": 0.5, "step": 0, "w": np.zeros(2), "extra": None},
                   on_missing="keep")
    assert back["lr"] == 0.1 and back["step"] == 7
    assert_same(back["w"], np.ones(2))


def test_like_keeps_callables_the_file_cannot_hold():
    p = _path("lcall.safetensors")
    io.save(p, {"act": "relu", "w": np.ones(2)})
    back = io.load(p, like={"act": np.tanh, "w": np.zeros(2)})
    assert back["act"] is np.tanh


def test_load_onto_dask_backend():
    da = pytest.importorskip("dask.array")
    p = _path("dask.safetensors")
    io.save(p, {"w": da.ones((4, 4), chunks=2), "b": np.arange(3.0), "n": 2})
    back = io.load(p, backend="dask")
    assert isinstance(back["w"], da.Array) and isinstance(back["b"], da.Array) and back["n"] == 2
    np.testing.assert_array_equal(back["w"].compute(), np.ones((4, 4)))
    # with like: each leaf goes to like's backend, with like's chunks
    like = {"w": da.zeros((4, 4), chunks=(1, 4)), "b": np.zeros(3), "n": 0}
    back = io.load(p, like=like)
    assert isinstance(back["w"], da.Array) and back["w"].chunks == like["w"].chunks
    assert type(back["b"]) is np.ndarray


def test_other_backends_save_and_like():
    strict = pytest.importorskip("array_api_strict")
    torch = pytest.importorskip("torch")
    p = _path("backends.safetensors")
    io.save(p, {"s": strict.asarray([1.0, 2.0]), "t": torch.arange(3, dtype=torch.int32)})
    back = io.load(p)
    assert_same(back, {"s": np.array([1.0, 2.0]), "t": np.arange(3, dtype=np.int32)})
    back = io.load(p, like={"s": strict.zeros(2, dtype=strict.float64), "t": torch.zeros(3, dtype=torch.int32)})
    assert type(back["s"]) is type(strict.zeros(1)) and isinstance(back["t"], torch.Tensor)
    assert back["t"].tolist() == [0, 1, 2]


def test_files_are_plain_safetensors():
    sn = pytest.importorskip("safetensors.numpy")
    p = _path("interop.safetensors")
    io.save(p, {"layers": [{"w": np.ones((2, 2), np.float32)}], "c": np.array([1j])}, metadata={"git": "abc"})
    raw = sn.load_file(p)
    assert set(raw) == {"layers.0.w", "c"} and raw["c"].shape == (1, 2)  # complex128 as (re, im)
    assert io.read_metadata(p) == {"git": "abc"}


def test_metadata_checked():
    with pytest.raises(TypeError, match="reserved"):
        io.save(_path("md.safetensors"), {}, metadata={"ember": "x"})
    with pytest.raises(TypeError):
        io.save(_path("md.safetensors"), {}, metadata={"a": 1})


def test_missing_file_is_oserror():
    with pytest.raises(FileNotFoundError):
        io.load(_path("does-not-exist.safetensors"))


def test_plain_file_needs_like_or_load_state_dict():
    sn = pytest.importorskip("safetensors.numpy")
    p = _path("plain.safetensors")
    sn.save_file({"a.w": np.ones(2)}, p)
    with pytest.raises(FileFormatError, match="load_state_dict"):
        io.load(p)
    assert_same(io.load(p, like={"a": {"w": np.zeros(2)}}), {"a": {"w": np.ones(2)}})


# --- PyTorch state dicts --------------------------------------------------


@tree.register
@dataclasses.dataclass
class Encoder:
    layers: list
    norm: object


def test_load_state_dict_from_torch_file():
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    sd = {"layers.0.weight": torch.ones(2, 3), "layers.0.bias": torch.zeros(2),
          "layers.1.weight": torch.full((3, 3), 2.0), "layers.1.bias": torch.zeros(3),
          "norm": torch.ones(3, dtype=torch.bfloat16)}
    p = _path("torch.safetensors")
    st_torch.save_file(sd, p)
    nested = io.load_state_dict(p)
    assert isinstance(nested["layers"], list) and nested["layers"][1]["weight"][0, 0] == 2.0
    assert nested["norm"].dtype == np.float32  # bfloat16 widened exactly
    like = Encoder([{"weight": np.zeros((2, 3), np.float32), "bias": np.zeros(2, np.float32)},
                    {"weight": np.zeros((3, 3), np.float32), "bias": np.zeros(3, np.float32)}],
                   np.zeros(3, np.float32))
    back = io.load_state_dict(p, like=like)
    assert isinstance(back, Encoder) and back.layers[1]["weight"][2, 2] == 2.0
    bad = Encoder([{"weight": np.zeros((2, 2), np.float32), "bias": np.zeros(2, np.float32)}], np.zeros(3))
    with pytest.raises(io.LoadMismatchError) as ei:
        io.load_state_dict(p, like=bad)
    assert ei.value.shape_changed == ["layers.0.weight"]
    assert sorted(ei.value.unexpected) == ["layers.1.bias", "layers.1.weight"]
    assert ei.value.dtype_changed == ["norm"]


def test_load_state_dict_from_mapping_and_names():
    sd = {"a.0": np.ones(1), "a.1": np.ones(2), "b.x": np.zeros(1), "c.2": np.ones(1)}
    nested = io.load_state_dict(sd)
    assert [x.shape for x in nested["a"]] == [(1,), (2,)]
    assert set(nested["c"]) == {"2"}  # not 0..n-1: stays a dict
    assert str(io._torch.name_to_path("enc.layers.10.w")) == "enc.layers.10.w"
    with pytest.raises(StructureError, match="no tree form"):
        io.load_state_dict({"a": np.ones(1), "a.b": np.ones(1)})


# --- atomic write details -------------------------------------------------


def test_failed_write_leaves_target_and_no_temp(monkeypatch):
    p = _path("atomic-unit.safetensors")
    io.save(p, {"v": np.ones(3)})

    def boom(fd):
        raise OSError("disk on fire")

    monkeypatch.setattr(_save.os, "fsync", boom)
    with pytest.raises(OSError, match="fire"):
        io.save(p, {"v": np.zeros(3)})
    monkeypatch.undo()
    assert_same(io.load(p), {"v": np.ones(3)})
    assert not [f for f in os.listdir(_TMP) if f.startswith(".atomic-unit.safetensors.tmp-")]


def test_stale_temp_of_dead_save_is_cleaned_locked_one_kept():
    """Dead = unlocked, whatever the pid says; a locked temp file is a live save and stays."""
    import fcntl

    p = _path("stale.safetensors")
    stale = _path(f".stale.safetensors.tmp-{os.getpid()}-abcdef012345")  # our own pid, yet dead
    other = _path(f".step-7.safetensors.tmp-{os.getppid()}-abcdef012345")  # another target, a live pid
    alive = _path(".stale.safetensors.tmp-1-0123456789ab")
    for f in (stale, other, alive):
        open(f, "wb").close()
    with open(alive, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live writer (in any PID namespace) holds its lock
        io.save(p, {"v": np.ones(1)})
        assert not os.path.exists(stale) and not os.path.exists(other) and os.path.exists(alive)
    os.remove(alive)


class Box:
    """A register_node type: children keyed by Name, aux data is the label."""

    def __init__(self, label, items):
        self.label, self.items = label, items


tree.register_node(
    Box,
    lambda b: ([(tree.Name(k), v) for k, v in b.items.items()], b.label),
    lambda label, children: Box(label, dict(zip(["a", "b"], children))),
)


def test_register_node_round_trip():
    p = _path("box.safetensors")
    io.save(p, [Box(("lbl", 2), {"a": np.ones(2), "b": 3})])
    back = io.load(p)[0]
    assert isinstance(back, Box) and back.label == ("lbl", 2) and back.items["b"] == 3
    assert_same(back.items["a"], np.ones(2))
    assert "0.a" in _tensor_names(p)


def test_leaf_under_unparseable_key_is_refused_at_save():
    with pytest.raises(StructureError, match="does not parse back"):
        io.save(_path("key.safetensors"), {b"raw": np.ones(1)})
    io.save(_path("key.safetensors"), {b"raw": 1})  # a constant below it is fine
    assert io.load(_path("key.safetensors")) == {b"raw": 1}
