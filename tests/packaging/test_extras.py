"""Without an extra, ember's core still works and each entry point says in one line what to install."""

import subprocess
import sys
from pathlib import Path

import pytest

from ember.cli import NO_CLI

ROOT = Path(__file__).resolve().parents[2]

# Runs a module or script as __main__ in a child where the named top-level packages cannot be
# imported (a finder ahead of all others refuses them), as in a venv that lacks them.
_RUN_WITHOUT = r"""
import runpy, sys
blocked, kind, target, *argv = sys.argv[1:]
blocked = set(blocked.split(","))

class Absent:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent)
sys.argv = [target, *argv]
if kind == "module":
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    runpy.run_path(target, run_name="__main__")
"""

EXTRAS = "click,rich,matplotlib,sklearn,scipy,torch,dask,distributed,zarr,array_api_strict"


def _run_without(blocked: str, kind: str, target: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RUN_WITHOUT, blocked, kind, target, *argv],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def _one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode != 0, p.stdout
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_command_without_cli_extra_names_it():
    line = _one_line_error(_run_without("click", "module", "ember", "train", "--quick"))
    assert line == NO_CLI.format(missing="click")
    assert 'pip install -e ".[cli]"' in line


def test_dask_example_without_dask_extra_names_it(tmp_path):
    line = _one_line_error(_run_without(
        "dask", "path", str(ROOT / "examples" / "out_of_core_logistic.py"), "--quick"))
    assert 'needs the dask extra (dask is not installed)' in line
    assert 'pip install -e ".[dask]"' in line


@pytest.mark.parametrize("script", ["mlp_digits.py", "cnn_digits.py"])
def test_digits_examples_need_no_extra(script):
    # the core install alone: no SciPy, scikit-learn, CLI libraries, torch or Dask
    p = _run_without(EXTRAS, "path", str(ROOT / "examples" / script), "--quick")
    assert p.returncode == 0, p.stderr
    assert float(p.stdout.strip().splitlines()[-1].split()[2]) > 0.3  # "test accuracy 0.xx ..."


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_core_install_is_an_array_librarys_core():
    names = sorted(d.split(">")[0].split("=")[0].split("<")[0] for d in _project()["dependencies"])
    assert names == ["array-api-compat", "array-api-extra", "numpy", "safetensors"]


def test_extras_cli_torch_and_a_torch_free_test_extra():
    extras = _project()["optional-dependencies"]
    assert {"click", "rich", "matplotlib"} <= {d.split(">")[0] for d in extras["cli"]}
    assert extras["torch"] == ["torch>=2.4,<3"]
    assert not any(d.startswith("torch") for d in extras["test"])  # a multi-GB download otherwise
    assert any(d.startswith("ember[") and "cli" in d and "dask" in d for d in extras["test"])
