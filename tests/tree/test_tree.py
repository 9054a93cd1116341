"""Tests for ember.tree: flatten/unflatten, typed paths, n-ary map, filter, registry."""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember.tree as tree
from ember._errors import StructureError
from ember.tree import Index, Key, Name, Path, TreeDef, parse_path
from ember.tree import _ops, _paths, _registry


# ----------------------------------------------------------------------------- fixtures


class Point(NamedTuple):
    x: Any
    y: Any


@tree.register
@dataclasses.dataclass
class Linear:
    weight: Any
    bias: Any
    act: str = tree.field(static=True, default="relu")


@tree.register(static=("scale",))
@dataclasses.dataclass(frozen=True)
class Scaled:
    value: Any
    scale: Any = 1.0


@dataclasses.dataclass
class Unregistered:
    w: Any


class Pair:
    """A plain class made a node with register_node."""

    def __init__(self, a: Any, b: Any, tag: str = "t") -> None:
        self.a, self.b, self.tag = a, b, tag

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Pair and self.tag == other.tag and _same(self.a, other.a) and _same(self.b, other.b)
        )


tree.register_node(
    Pair,
    lambda p: ([(Name("a"), p.a), (Key(7), p.b)], p.tag),
    lambda aux, ch: Pair(ch[0], ch[1], aux),
)


def _same(a: Any, b: Any) -> bool:
    """Deep equality that also checks types; arrays compare by identity."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a is b
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        if isinstance(a, collections.defaultdict) and a.default_factory is not b.default_factory:
            return False
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (Linear, Scaled)):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


# ----------------------------------------------------------------------------- strategies

arrays = st.builds(
    lambda n, v: np.full((n,), v), st.integers(0, 3), st.floats(-10, 10, allow_nan=False)
)
constants = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=4)
)
base = st.one_of(arrays, constants)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
        st.dictionaries(st.integers(-3, 3), children, max_size=3),
        st.builds(Point, children, children),
        st.builds(Linear, children, children, st.sampled_from(["relu", "tanh"])),
        st.builds(Scaled, children, st.one_of(st.floats(allow_nan=False), arrays)),
        st.builds(Pair, children, children, st.sampled_from(["p", "q"])),
        st.dictionaries(st.text(max_size=2), children, max_size=3).map(collections.OrderedDict),
    )


trees = st.recursive(base, _extend, max_leaves=12)

name_text = st.text(
    alphabet=st.one_of(st.sampled_from('._ "\'[]\\x0aZ9'), st.characters()), max_size=6
)
json_scalars = st.one_of(
    st.integers(-(10**20), 10**20), st.floats(allow_nan=False), st.booleans(), st.none()
)
path_keys = st.one_of(
    st.builds(Name, name_text),
    st.builds(Index, st.integers(0, 10**6)),
    st.builds(Key, json_scalars),
    st.builds(Key, st.tuples(json_scalars, st.text(max_size=3))),
)
path_strategy = st.lists(path_keys, max_size=6).map(Path)


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=150, deadline=None)
@given(trees)
def test_flatten_unflatten_round_trip(t: Any) -> None:
    leaves, td = tree.flatten(t)
    assert td.num_leaves == len(leaves)
    assert all(isinstance(x, np.ndarray) for x in leaves)
    back = tree.unflatten(td, leaves)
    assert _same(back, t)
    # the leaves come back as the very same objects, in the same order
    assert all(a is b for a, b in zip(tree.leaves(back), leaves))
    assert tree.structure(back) == td
    assert hash(tree.structure(back)) == hash(td)


@settings(max_examples=100, deadline=None)
@given(trees)
def test_paths_follow_leaves_and_parse_back(t: Any) -> None:
    pairs, td = tree.flatten_with_path(t)
    plain = tree.leaves(t)
    assert len(pairs) == len(plain) and all(a is b for (_, a), b in zip(pairs, plain))
    ps = [p for p, _ in pairs]
    assert ps == td.paths() == tree.paths(t)
    assert len(set(ps)) == len(ps)  # paths are unique
    assert len({str(p) for p in ps}) == len(ps)  # and so are their texts
    for p in ps:
        assert parse_path(str(p)) == p


@settings(max_examples=100, deadline=None)
@given(trees)
def test_map_identity_and_map_with_path(t: Any) -> None:
    assert _same(tree.map(lambda x: x, t), t)
    got = tree.map_with_path(lambda p, x: (p, x), t)
    pairs, td = tree.flatten(got, is_leaf=lambda v: type(v) is tuple and len(v) == 2
                             and isinstance(v[0], Path))
    assert [p for p, _ in pairs] == tree.paths(t)
    assert all(x is y for (_, x), y in zip(pairs, tree.leaves(t)))


def test_unflatten_rebuilds_types() -> None:
    a, b, c = np.ones(1), np.ones(2), np.ones(3)
    dd = collections.defaultdict(list, {"k": a})
    od = collections.OrderedDict([("z", b), ("a", c)])
    t = {"p": Point(a, 1), "dd": dd, "od": od, "s": Scaled(b, 2.0), "l": Linear(a, None, "tanh")}
    leaves, td = tree.flatten(t)
    back = tree.unflatten(td, [x * 2 for x in leaves])
    assert type(back["p"]) is Point and back["p"].y == 1
    assert type(back["dd"]) is collections.defaultdict and back["dd"].default_factory is list
    assert type(back["od"]) is collections.OrderedDict
    assert type(back["s"]) is Scaled and back["s"].scale == 2.0
    assert back["l"].act == "tanh" and back["l"].bias is None
    np.testing.assert_array_equal(back["p"].x, a * 2)


def test_constants_are_not_leaves() -> None:
    t = [1, 2.5, "s", None, b"b", True, 1j, np.float64, len, Unregistered(np.ones(2)), np.ones(2)]
    leaves, td = tree.flatten(t)
    assert len(leaves) == 1 and leaves[0] is t[-1]
    assert tree.unflatten(td, [np.zeros(2)])[:9] == t[:9]


def test_dict_key_order_sorted_or_insertion() -> None:
    assert tree.paths({"b": np.ones(1), "a": np.ones(1)}) == [Path([Name("a")]), Path([Name("b")])]
    mixed = {"b": np.ones(1), 1: np.ones(1)}  # not mutually sortable: insertion order
    assert [str(p) for p in tree.paths(mixed)] == ["b", "[1]"]


def test_unflatten_wrong_number_of_leaves() -> None:
    _, td = tree.flatten([np.ones(1), np.ones(1)])
    with pytest.raises(StructureError, match="has 2 leaves but 3 were given"):
        tree.unflatten(td, [1, 2, 3])
    with pytest.raises(StructureError):
        td.unflatten([1])


def test_is_leaf_stops_recursion() -> None:
    t = {"a": [np.ones(1), np.ones(1)], "b": (np.ones(1),)}
    leaves, td = tree.flatten(t, is_leaf=lambda x: isinstance(x, list))
    assert len(leaves) == 2 and leaves[0] is t["a"]
    assert tree.unflatten(td, leaves)["a"] is t["a"]


def test_root_leaf_and_root_constant() -> None:
    x = np.ones(3)
    leaves, td = tree.flatten(x)
    assert leaves == [x] and tree.unflatten(td, [5]) == 5
    assert tree.paths(x) == [Path()] and str(Path()) == ""
    leaves, td = tree.flatten(None)
    assert leaves == [] and tree.unflatten(td, []) is None


def test_deep_and_lists_of_modules() -> None:
    layers = [Linear(np.ones((2, 2)), np.zeros(2)) for _ in range(3)]
    model = {"encoder": {"layers": layers}}
    ps = [str(p) for p in tree.paths(model)]
    assert ps[:2] == ["encoder.layers.0.weight", "encoder.layers.0.bias"]
    assert len(ps) == 6
    deep: Any = np.ones(1)
    for _ in range(200):
        deep = [deep]
    assert str(tree.paths(deep)[0]) == ".".join(["0"] * 200)


# ----------------------------------------------------------------------------- paths


@settings(max_examples=300, deadline=None)
@given(path_strategy)
def test_parse_path_inverts_str(p: Path) -> None:
    s = str(p)
    assert parse_path(s) == p
    assert str(parse_path(s)) == s


def test_index_vs_str_key_vs_int_key() -> None:
    a = Path([Name("layers"), Index(0)])
    b = Path([Name("layers"), Name("0")])
    c = Path([Name("layers"), Key(0)])
    texts = {str(a), str(b), str(c)}
    assert texts == {"layers.0", 'layers["0"]', "layers[0]"}
    assert len({a, b, c}) == 3
    assert [parse_path(s) for s in ("layers.0", 'layers["0"]', "layers[0]")] == [a, b, c]
    # and the same distinction arises from real structures
    t = {"l": [np.ones(1)], "s": {"0": np.ones(1)}, "i": {0: np.ones(1)}}
    assert sorted(str(p) for p in tree.paths(t)) == ['i[0]', 'l.0', 's["0"]']


def test_path_rendering_rules() -> None:
    assert str(Path([Name("a"), Name("x y"), Name("b")])) == 'a["x y"].b'
    assert str(Path([Name("x y"), Name("b")])) == '["x y"].b'
    assert str(Path([Name("a.b")])) == '["a.b"]'
    assert str(Path([Name("a"), Key(True), Key(None), Key(1.5)])) == "a[true][null][1.5]"
    assert str(Path([Key((1, "a"))])) == '[[1, "a"]]'
    assert parse_path('[[1, "a"]]') == Path([Key((1, "a"))])
    assert str(Path([Name("é")])) == '["é"]'


def test_path_keys_are_typed_and_ordered() -> None:
    assert Key(1) != Key(True) and Key(1) != Key(1.0)
    assert Name("a") < Name("b") and Index(1) < Index(2)
    assert sorted([Key(2), Index(3), Name("a")]) == [Index(3), Name("a"), Key(2)]
    with pytest.raises(TypeError):
        Key("s")
    with pytest.raises(TypeError):
        Name(3)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        Name("a").name = "b"  # type: ignore[misc]
    p = Path([Name("a")]) / Index(0)
    assert type(p) is Path and str(p) == "a.0" and type(p[:1]) is Path and p.parent == Path([Name("a")])


@pytest.mark.parametrize("bad", ["a..b", ".a", "a.", "1a", "a[", 'a["x"', "a[{}]", "a b", "a.[1]"])
def test_parse_path_errors(bad: str) -> None:
    with pytest.raises(StructureError, match="parse_path: cannot parse"):
        parse_path(bad)


def test_unparseable_key_is_readable_but_refused() -> None:
    p = Path([Name("d"), Key(frozenset({1}))])
    assert str(p) == "d[<frozenset({1})>]"
    with pytest.raises(StructureError, match="has no JSON form"):
        parse_path(str(p))


# ----------------------------------------------------------------------------- map


def test_nary_map_three_trees() -> None:
    t1 = {"w": np.array([1.0, 2.0]), "b": [np.array(3.0)], "lr": 0.1}
    t2 = {"w": np.array([10.0, 20.0]), "b": [np.array(30.0)], "lr": "other constant"}
    t3 = {"w": np.array([100.0, 200.0]), "b": [np.array(300.0)], "lr": None}
    out = tree.map(lambda a, b, c: a + b + c, t1, t2, t3)
    np.testing.assert_array_equal(out["w"], [111.0, 222.0])
    np.testing.assert_array_equal(out["b"][0], 333.0)
    assert out["lr"] == 0.1  # constants come from the first tree
    got = tree.map_with_path(lambda p, a, b, c: (str(p), float(a.sum() + b.sum() + c.sum())), t1, t2, t3)
    assert got["b"][0] == ("b.0", 333.0)


def test_map_error_names_first_differing_path() -> None:
    a = {"encoder": {"layers": [np.ones(1)] * 3}, "z": np.ones(1)}
    b = {"encoder": {"layers": [np.ones(1)] * 2}, "z": [np.ones(1)]}
    with pytest.raises(StructureError) as e:
        tree.map(lambda x, y: x, a, b)
    msg = str(e.value)
    assert "at encoder.layers:" in msg
    assert "left has a list of 3 items, right has a list of 2 items" in msg
    assert "tree 0 and tree 1" in msg


def test_map_error_leaf_vs_constant_and_dict_keys() -> None:
    with pytest.raises(StructureError, match=r"at b: left has a leaf \(ndarray of shape \(2,\)"):
        tree.map(lambda x, y: x, {"a": 1, "b": np.ones(2)}, {"a": 1, "b": None})
    with pytest.raises(StructureError, match="only on the left: \\['b'\\].*only on the right: \\['c'\\]"):
        tree.map(lambda x, y: x, {"a": np.ones(1), "b": 1}, {"a": np.ones(1), "c": 1})
    with pytest.raises(StructureError, match="tree 0 and tree 2 differ at the root"):
        tree.map(lambda *x: x[0], [np.ones(1)], [np.ones(1)], (np.ones(1),))


def test_map_ignores_static_values_of_rest() -> None:
    p = Linear(np.ones(2), np.ones(2), "relu")
    g = Linear(np.ones(2), np.ones(2), "tanh")
    out = tree.map(lambda x, y: x + y, p, g)
    assert out.act == "relu"
    np.testing.assert_array_equal(out.weight, [2.0, 2.0])
    assert not (tree.structure(p) == tree.structure(g))
    assert tree.structure(p).matches(tree.structure(g))


# ----------------------------------------------------------------------------- filter


def test_filter_globs() -> None:
    model = {
        "encoder": {"layers": [Linear(np.ones(1), np.zeros(1)) for _ in range(2)]},
        "head": Linear(np.ones(1), np.zeros(1)),
        "odd": {"x y": np.ones(1), 3: np.ones(1)},
    }
    assert sorted(tree.filter(model, "*.bias")) == [
        "encoder.layers.0.bias",
        "encoder.layers.1.bias",
        "head.bias",
    ]
    assert sorted(tree.filter(model, "encoder.*")) == [
        "encoder.layers.0.bias",
        "encoder.layers.0.weight",
        "encoder.layers.1.bias",
        "encoder.layers.1.weight",
    ]
    assert sorted(tree.filter(model, ["head.*", "*.0.weight"])) == [
        "encoder.layers.0.weight",
        "head.bias",
        "head.weight",
    ]
    assert list(tree.filter(model, 'odd["x y"]')) == ['odd["x y"]']
    assert list(tree.filter(model, "odd[?]")) == ["odd[3]"]
    assert list(tree.filter(model, lambda s: s.startswith("head") and "w" in s)) == ["head.weight"]
    got = tree.filter(model, "head.weight")
    assert got["head.weight"] is model["head"].weight
    with pytest.raises(TypeError, match="filter: pattern"):
        tree.filter(model, 3)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- registry


def test_register_node_custom_class() -> None:
    x, y = np.ones(1), np.ones(2)
    p = Pair(x, {"k": y}, "tag1")
    pairs, td = tree.flatten_with_path(p)
    assert [str(q) for q, _ in pairs] == ["a", "[7].k"]
    back = td.unflatten([y, x])
    assert type(back) is Pair and back.tag == "tag1" and back.a is y and back.b["k"] is x
    assert "Pair['tag1']" in repr(td)
    assert tree.structure(Pair(x, y, "other")) != tree.structure(Pair(x, y, "tag1"))


def test_register_node_validation() -> None:
    class Bad:
        pass

    tree.register_node(Bad, lambda b: ([("not-a-key", 1)], None), lambda aux, ch: Bad())
    with pytest.raises(TypeError, match="keys must be ember.tree.Name, Index or Key"):
        tree.flatten(Bad())
    with pytest.raises(TypeError, match="built-in node type"):
        tree.register_node(list, lambda x: ([], None), lambda a, c: [])
    with pytest.raises(TypeError, match="not a dataclass"):
        tree.register(Bad)
    with pytest.raises(TypeError, match="no field"):

        @tree.register(static=("nope",))
        @dataclasses.dataclass
        class C:
            a: int


def test_static_field_kept_in_treedef_not_a_leaf() -> None:
    w = np.ones(2)
    s = Scaled(w, np.array([2.0, 3.0]))  # static field holding an array
    leaves, td = tree.flatten(s)
    assert len(leaves) == 1 and leaves[0] is w
    assert tree.paths(s) == [Path([Name("value")])]
    back = td.unflatten([np.zeros(2)])
    assert back.scale is s.scale
    assert "scale=array" in repr(td)
    # equal static arrays give equal treedefs; different ones do not
    assert tree.structure(Scaled(w, np.array([2.0, 3.0]))) == td
    assert hash(tree.structure(Scaled(w, np.array([2.0, 3.0])))) == hash(td)
    assert tree.structure(Scaled(w, np.array([2.0, 4.0]))) != td
    lin = Linear(np.ones(1), np.ones(1), "tanh")
    assert tree.paths(lin) == [Path([Name("weight")]), Path([Name("bias")])]
    f = {f.name: f for f in dataclasses.fields(Linear)}
    assert f["act"].metadata["static"] is True and f["weight"].metadata == {}


def test_unregistered_dataclass_is_constant() -> None:
    u = Unregistered(np.ones(2))
    leaves, td = tree.flatten({"u": u})
    assert leaves == [] and td.unflatten([])["u"] is u


# ----------------------------------------------------------------------------- TreeDef


def test_treedef_equality_and_hash() -> None:
    a = tree.structure({"x": np.ones(2), "y": [1, None]})
    b = tree.structure({"y": [1, None], "x": np.zeros(5)})
    c = tree.structure({"x": np.ones(2), "y": [2, None]})
    d = tree.structure({"x": np.ones(2), "y": (1, None)})
    assert a == b and hash(a) == hash(b)
    assert a != c and a.matches(c)  # constants differ
    assert a != d and not a.matches(d)
    assert len({a, b, c, d}) == 3
    assert tree.structure([1]) != tree.structure([1.0]) != tree.structure([True])
    assert tree.structure([float("nan")]) == tree.structure([float("nan")])
    assert repr(a) == "TreeDef({'x': *, 'y': [1, None]})"
    assert isinstance(a, TreeDef) and a.num_leaves == 1


def test_treedef_repr_shapes() -> None:
    td = tree.structure((Point(np.ones(1), 2), (np.ones(1),), collections.OrderedDict(a=None)))
    assert repr(td) == "TreeDef((Point(x=*, y=2), (*,), OrderedDict({'a': None})))"


def test_array_type_cache() -> None:
    class FakeArray:
        def __array_namespace__(self, api_version: Any = None) -> Any:
            return np

    fa = FakeArray()
    assert tree.leaves([fa]) == [fa]
    assert _registry._DISPATCH[FakeArray] is _registry.LEAF
    tree.leaves(np.ones(1))
    assert _registry._DISPATCH[np.ndarray] is _registry.LEAF
    tree.leaves(Unregistered(1))
    assert _registry._DISPATCH[Unregistered] is _registry.CONST


def test_error_texts_are_constants() -> None:
    assert "{path}" in _ops.STRUCTURE_MISMATCH and "{left}" in _ops.STRUCTURE_MISMATCH
    assert "{expected}" in _ops.LEAF_COUNT_MISMATCH
    assert "{text" in _paths.PARSE_ERROR


# ----------------------------------------------------------------------------- leaves_of


def _numbers(x: Any) -> bool:
    return x.__class__ is int or x.__class__ is float


def _same_leaves(got: Any, want: list[Any]) -> bool:
    return got is not None and len(got) == len(want) and all(g is w for g, w in zip(got, want))


@settings(deadline=None, max_examples=200)
@given(a=trees, b=trees, numbers_are_leaves=st.booleans())
def test_leaves_of_is_flatten_where_the_structure_is_the_treedef_else_none(a, b, numbers_are_leaves):
    il = _numbers if numbers_are_leaves else None
    la, ta = tree.flatten(a, il)
    assert _same_leaves(ta.leaves_of(a, il), la)
    new = [np.full((2,), float(i)) for i in range(len(la))]  # (the same structure, new leaves)
    assert _same_leaves(ta.leaves_of(ta.unflatten(new), il), new)
    lb, tb = tree.flatten(b, il)
    got = ta.leaves_of(b, il)
    assert _same_leaves(got, lb) if tb == ta else got is None


def test_leaves_of_refuses_what_flatten_would_structure_differently():
    a = np.zeros(2)
    td = tree.structure({"w": a, "layer": Linear(a, None, "relu"), "xs": [a, (a, 1.0)]})
    assert len(td.leaves_of({"w": a, "layer": Linear(a, None, "relu"), "xs": [a, (a, 1.0)]})) == 4
    for other in (
        {"w": a, "layer": Linear(a, None, "tanh"), "xs": [a, (a, 1.0)]},  # a static field
        {"w": a, "layer": Linear(a, a, "relu"), "xs": [a, (a, 1.0)]},  # a leaf for a constant
        {"w": a, "layer": Linear(a, None, "relu"), "xs": [a, (a, 2.0)]},  # a constant's value
        {"w": a, "layer": Linear(a, None, "relu"), "xs": [a, [a, 1.0]]},  # a list for a tuple
        {"w": {"x": a}, "layer": Linear(a, None, "relu"), "xs": [a, (a, 1.0)]},  # a node for a leaf
        {"w": a, "v": a, "layer": Linear(a, None, "relu"), "xs": [a, (a, 1.0)]},  # a key more
        collections.OrderedDict(w=a, layer=Linear(a, None, "relu"), xs=[a, (a, 1.0)]),  # the class
    ):
        assert td.leaves_of(other) is None
    # a number is a leaf only where is_leaf says so
    tn = tree.structure({"step": 3, "w": a}, is_leaf=_numbers)
    assert tn.leaves_of({"step": 4, "w": a}, is_leaf=_numbers)[0] == 4
    assert tn.leaves_of({"step": 4, "w": a}) is None


@settings(deadline=None, max_examples=200)
@given(a=trees, numbers_are_leaves=st.booleans())
def test_unflattener_builds_what_unflatten_builds(a, numbers_are_leaves):
    il = _numbers if numbers_are_leaves else None
    la, ta = tree.flatten(a, il)
    new = [np.full((2,), float(i)) for i in range(len(la))]
    got, want = ta.unflattener()(new), ta.unflatten(new)
    lg, tg = tree.flatten(got, il)
    assert tg == ta and _same_leaves(lg, new)
    assert type(got) is type(want) and tree.flatten(want, il)[1] == tg
    assert ta.unflattener() is ta.unflattener()  # (made once per treedef)
