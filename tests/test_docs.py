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
    for p in ("from-pytorch.md", "from-jax.md", "gradients.md", "ownership.md", "backends.md", "performance.md"):
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
    _check_reference_rendering(tmp_path / "site" / "reference")


def _check_reference_rendering(site: Path) -> None:
    """What the griffe extension (docs/_ext) fixes stays fixed in the built API reference."""
    import html

    pages = {f.relative_to(site).as_posix(): f.read_text() for f in site.rglob("*.html")}
    ember_page = pages["ember/index.html"]
    # the package docstring's doctest is a highlighted code block, not quotes nested three deep
    start = ember_page.index('id="ember"')
    block = ember_page[start:ember_page.index("</code></pre>", start)]
    assert '<span class="gp">&gt;&gt;&gt; </span>' in block and "<blockquote>" not in block
    for name, text in pages.items():
        assert "<blockquote>\n<blockquote>" not in text, f"{name}: a doctest rendered as nested quotes"
        plain = html.unescape(re.sub(r"<[^>]+>", " ", text))
        assert "Tensor(*args, **kwargs)" not in plain, name
        # an instance attribute shows its name, not the right-hand side of `self.x = x`
        same = re.search(r"(\w+)\s+instance-attribute\s+\S+\s+\1\s*=\s*\1\b", plain)
        assert same is None, f"{name}: attribute rendered as '{same and same.group(0)}'"


# --- README -------------------------------------------------------------------------------

README = ROOT / "README.md"


def _readme_commands() -> list[str]:
    """The indented command lines before the first heading: the two set-up commands."""
    head = README.read_text().split("\n## ", 1)[0]
    return [line.strip() for line in head.splitlines() if line.startswith("    ")]


def test_readme_opens_with_the_two_setup_commands():
    main_job, tests = _readme_commands()
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert main_job == venv + 'pip install -e ".[cli]" && python -m ember train'
    assert tests.startswith(venv + 'pip install -e ".[test]" && python -m pytest')
    assert "-n auto" in tests  # in parallel on every core (pytest-xdist)


def test_ci_runs_exactly_the_readme_test_command():
    test_cmd = _readme_commands()[1].rsplit(" && ", 1)[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in [line.strip() for line in ci], (test_cmd, ci)
    assert any('pip install -e ".[test]"' in line for line in ci)
    assert "torch==2.13.0" in "\n".join(ci)  # the local CPU wheel, not a range that downloads


def test_readme_is_a_short_first_page():
    text = README.read_text()
    assert len(text.split()) < 800
    # no run log: no clock times, no issue numbers, no "today"/"yesterday"
    assert not re.search(r"\b\d{1,2}:\d{2}\b|\bissue \d+|\btoday\b|\byesterday\b", text, flags=re.I)
    for heading in ("## Install", "## Backends", "## The `ember` command", "## Performance"):
        assert heading in text
    assert "(docs/performance.md)" in text and "(docs/backends.md)" in text


def test_readme_links_point_to_files():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_readme_example_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", README.read_text(), flags=re.S).group(1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert float(p.stdout.strip().splitlines()[-1]) < 0.6  # the loss fell from about log(2)
    assert (tmp_path / "run.safetensors").is_file()


# --- code shown in the docs runs as shown -------------------------------------------------------


def test_from_pytorch_doctest_holds():
    import doctest

    text = (ROOT / "docs" / "from-pytorch.md").read_text()
    block = re.search(r"```pycon\n(.*?)```", text, flags=re.S).group(1)
    test = doctest.DocTestParser().get_doctest(block, {}, "from-pytorch.md", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0 and runner.tries >= 4


def test_dask_training_loop_with_persist_runs(tmp_path):
    pytest.importorskip("dask.array", reason='the Dask page\'s loop needs Dask: pip install -e ".[dask]"')
    text = (ROOT / "docs" / "layers" / "distributed.md").read_text()
    section = text.split("## Persisting by hand", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    assert "ember.persist(" in code
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    losses = [float(line.split()[1]) for line in p.stdout.strip().splitlines()]
    assert len(losses) == 4 and losses[-1] < losses[0]  # it trains


_SLOW_EXAMPLES = {"out_of_core_logistic.py"}  # starts a Dask cluster: > 20 s on 2 loaded cores

#: a worker's heartbeat racing the scheduler's close when a LocalCluster stops: Dask logs it
#: with a traceback although nothing failed (dask/distributed#7105, open); only that record
#: is set aside, any other traceback of an example still fails the test
_HEARTBEAT_RACE = re.compile(
    r"^.*distributed\.worker - \w+ - Failed to communicate with scheduler during heartbeat\.\n"
    r"(?:(?!\d{4}-\d\d-\d\d ).*(?:\n|$))*", re.M)


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
    assert "Traceback" not in _HEARTBEAT_RACE.sub("", p.stderr), p.stderr[-4000:]


def test_only_dasks_heartbeat_race_is_set_aside():
    race = ("2026-12-05 01:02:03,456 - distributed.worker - ERROR - Failed to communicate with scheduler "
            "during heartbeat.\nTraceback (most recent call last):\n  File \"tcp.py\", line 226, in read\n"
            "distributed.comm.core.CommClosedError: in <TCP (closed)>: Stream is closed\n")
    other = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n"
    assert "Traceback" not in _HEARTBEAT_RACE.sub("", race)
    assert "Traceback" not in _HEARTBEAT_RACE.sub("", race + "2026-12-05 01:02:04,000 - distributed - INFO - ok\n")
    assert "ValueError" in _HEARTBEAT_RACE.sub("", race + "2026-12-05 01:02:04,000 - x - INFO - next\n" + other)
    assert "Traceback" in _HEARTBEAT_RACE.sub("", other)
