"""Docs: every public name has a docstring and a reference entry; mkdocs builds; examples run.

Public names are ``ember.__all__`` and the ``__all__`` of every public
subpackage of ember (``ember.nn``, ``ember.optim``, ...). A name is in the
reference when a page of ``docs/reference/`` has a ``::: module`` directive
for its module (mkdocstrings renders the module's ``__all__``), a
``::: module.name`` directive, or (for plain constants) mentions it; the
mkdocs build test then checks that the built HTML has an anchor for it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import ember

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
EXAMPLES = ROOT / "examples"


def public_modules() -> list[str]:
    return ["ember"] + [f"ember.{m.name}" for m in pkgutil.iter_modules(ember.__path__)
                        if not m.name.startswith("_")]


def public_names() -> list[tuple[str, str, object]]:
    out = []
    for m in public_modules():
        mod = importlib.import_module(m)
        assert hasattr(mod, "__all__"), f"{m} has no __all__"
        out += [(m, n, getattr(mod, n)) for n in mod.__all__]
    return out


def _documentable(obj: object) -> bool:
    return isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)) or (
        callable(obj) and not isinstance(obj, (int, float, str, tuple, dict, frozenset))
    )


def _directives() -> tuple[set[str], str]:
    targets, text = set(), ""
    for page in sorted(REFERENCE.glob("*.md")):
        t = page.read_text()
        text += t
        targets |= set(re.findall(r"^:::\s*([\w.]+)", t, flags=re.M))
    return targets, text


def test_public_names_have_docstrings():
    missing = [f"{m}.{n}" for m, n, o in public_names() if _documentable(o) and not inspect.getdoc(o)]
    assert not missing, f"public names without a docstring: {missing}"


def test_every_public_module_has_a_reference_page():
    targets, _ = _directives()
    assert not [m for m in public_modules() if m not in targets]


def test_public_names_appear_in_reference():
    targets, text = _directives()
    missing = []
    for m, n, o in public_names():
        if m in targets or f"{m}.{n}" in targets:
            continue
        if not _documentable(o) and re.search(rf"\b{re.escape(n)}\b", text):
            continue
        missing.append(f"{m}.{n}")
    assert not missing, f"not in docs/reference/*.md: {missing}"


def test_nav_pages_exist_and_layers_are_covered():
    cfg = (ROOT / "mkdocs.yml").read_text()
    pages = re.findall(r":\s*([\w/.-]+\.md)\s*$", cfg, flags=re.M)
    # ownership.md is written by another task; everything else must exist
    absent = [p for p in pages if not (ROOT / "docs" / p).is_file() and p != "ownership.md"]
    assert not absent, absent
    for layer in ("backend", "tree", "autodiff", "func", "nn", "io", "optim", "distributed", "cli"):
        assert f"layers/{layer}.md" in pages
    for p in ("from-pytorch.md", "from-jax.md", "gradients.md", "ownership.md"):
        assert p in pages
    for ex in EXAMPLES.glob("*.py"):
        assert f"tutorials/{ex.stem.replace('_', '-')}.md" in pages, f"no tutorial for {ex.name}"


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    ids = set()
    for f in (tmp_path / "site").rglob("*.html"):
        ids |= set(re.findall(r'id="(ember[\w.]*)"', f.read_text()))
    missing = [f"{m}.{n}" for m, n, o in public_names() if not n.startswith("_") and f"{m}.{n}" not in ids]
    assert not missing, f"no anchor in the built reference for {missing}"


_SLOW_EXAMPLES = {"out_of_core_logistic.py"}  # starts a Dask cluster: > 20 s on 2 loaded cores


@pytest.mark.parametrize("script", [
    pytest.param(p.name, marks=pytest.mark.slow) if p.name in _SLOW_EXAMPLES else p.name
    for p in sorted(EXAMPLES.glob("*.py"))
])
def test_example_runs_quick(script, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, str(EXAMPLES / script), "--quick"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "Traceback" not in p.stderr
