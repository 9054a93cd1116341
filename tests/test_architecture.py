"""DESIGN.md's layering, checked on the source: imports flow downward through public names,
and no backend is told apart by its name outside ``ember.backend``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "ember"

#: Layers whose imports of other layers must use public names only (issue 36's acceptance).
STRICT_LAYERS = ("nn", "optim", "io", "distributed", "cli", "training")
#: Modules of the root package every layer may use for their public names: the error
#: classes and the configuration (they belong to no layer).
SHARED = {"ember._errors", "ember._config"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path):
    """``(line, module, names)`` of every import in ``path``, at any depth (function-level too)."""
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", None) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}  # annotations only: no import
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target, tuple(a.name for a in node.names)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "ember" else None


def _files(layer: str):
    root = SRC / layer
    return sorted(root.rglob("*.py")) if root.is_dir() else ([root.with_suffix(".py")]
                                                              if root.with_suffix(".py").exists() else [])


def _private_imports(layer: str) -> list[str]:
    bad = []
    for path in _files(layer):
        for line, target, names in _imports(path):
            other = _layer(target)
            if other is None or other == layer:
                continue
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if target in SHARED:
                bad += [f"{where}: {target}.{n}" for n in names if n.startswith("_")]
                continue
            if any(p.startswith("_") for p in target.split(".")[1:]):
                bad.append(f"{where}: {target}")
            if target == "ember":  # from .. import x: x is a layer or a name of the package
                bad += [f"{where}: ember.{n}" for n in names if n.startswith("_")]
            else:
                bad += [f"{where}: {target}.{n}" for n in names if n.startswith("_")]
    return bad


@pytest.mark.parametrize("layer", STRICT_LAYERS)
def test_layer_imports_only_public_names_of_other_layers(layer):
    bad = _private_imports(layer)
    assert not bad, f"ember.{layer} uses private names of other layers:\n" + "\n".join(bad)


def test_private_import_check_would_catch_a_violation(tmp_path, monkeypatch):
    """The walker itself: a private import of another layer is reported."""
    pkg = tmp_path / "ember" / "nn"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("from ..autodiff._tensor import raw_value\n"
                                "from .._errors import _hidden\nfrom ..kernels import relu\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path / "ember")
    bad = _private_imports("nn")
    assert len(bad) == 2 and "autodiff._tensor" in bad[0] and "_hidden" in bad[1]


# --------------------------------------------------------------------------- import cycles
def _graph(layer: str) -> dict[str, set[str]]:
    """Module -> the modules of the same layer it imports (module-level and in functions)."""
    mods = {_module_name(p): p for p in _files(layer)}
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        for _, target, names in _imports(path):
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
            for cand in subs or [target]:  # `from . import x`: the submodule x, when it is one
                if cand in mods and cand != m:
                    graph[m].add(cand)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in graph:
        if v not in index:
            visit(v)
    return out


LAYERS = ("backend", "tree", "kernels", "autodiff", "func", "nn", "io", "optim", "training",
          "distributed", "cli", "data")


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_cycle_inside_a_layer(layer):
    assert _cycles(_graph(layer)) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]


# --------------------------------------------------------------------------- backend names
_NAMES = r"(numpy|cupy|dask|array_api_strict|torch|jax)"
_COMPARISON = re.compile(
    rf"""(==|!=|\bin|\bnot in)\s*\(?\s*["']{_NAMES}["']|["']{_NAMES}["']\s*(==|!=)|"""
    rf"""\.startswith\(\s*["']{_NAMES}""")


def test_no_backend_name_comparison_outside_backend():
    """Abilities come from ember.backend.capabilities, never from a backend's name."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path.is_relative_to(SRC / "backend"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _COMPARISON.search(code):
                bad.append(f"{path.relative_to(SRC.parent)}:{i}: {line.strip()}")
    assert not bad, "backend told apart by name:\n" + "\n".join(bad)


def test_name_comparison_pattern_catches_the_usual_forms():
    for code in ('if d.bname == "dask":', "ok = name in ('numpy', 'cupy')",
                 'if mod.startswith("dask"):', 'if "torch" != n:'):
        assert _COMPARISON.search(code), code
    assert not _COMPARISON.search('BACKENDS = ("numpy", "dask")')


# --------------------------------------------------------------------------- tape nodes
def _node_builders(source: str, path: str) -> list[str]:
    """Where ``source`` builds a tape node (``Node()``) or appends to a tape (``.nodes.append``)
    outside ``make_node``."""
    found = []

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call) and inner != "make_node":
                f = child.func
                built = isinstance(f, ast.Name) and f.id == "Node"
                appended = (isinstance(f, ast.Attribute) and f.attr == "append"
                            and isinstance(f.value, ast.Attribute) and f.value.attr == "nodes")
                if built or appended:
                    found.append(f"{path}:{child.lineno}: {ast.unparse(child)}")
            visit(child, inner)

    visit(ast.parse(source), None)
    return found


def test_one_function_builds_tape_nodes():
    """Every op's recording, the elementwise fast paths included, goes through make_node."""
    bad = []
    for path in sorted((SRC / "autodiff").rglob("*.py")) + sorted((SRC / "func").rglob("*.py")):
        bad += _node_builders(path.read_text(), str(path.relative_to(SRC.parent)))
    assert not bad, "tape nodes built outside make_node:\n" + "\n".join(bad)


def test_node_builder_check_would_catch_an_inline_node():
    inline = "def f(top):\n    node = Node()\n    node.rule = 1\n    top.nodes.append(node)\n"
    assert len(_node_builders(inline, "x.py")) == 2
    assert not _node_builders("def make_node(trace):\n    n = Node()\n    trace.nodes.append(n)\n", "x.py")
