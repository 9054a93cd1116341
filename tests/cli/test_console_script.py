"""The installed ``ember`` console script itself (the ``[project.scripts]`` entry point), not
only ``python -m ember``: issue 39 asks that each CLI point be tested through the real console
script. The points that need no training run are checked here through it: the bare command
prints the help (exit 0), an unknown backend is a one-line usage error (exit 2), a --resume
without a checkpoint and an --out that cannot be written are one line, and ``bench --help``
describes the command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_run import ROOT, cli_env, one_line_error

SCRIPT = Path(sys.executable).parent / ("ember.exe" if os.name == "nt" else "ember")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no ember console script at {SCRIPT} "
                                "(pip install -e '.[cli]' installs it)")


def script(*args: str) -> subprocess.CompletedProcess:
    # cli_env puts this checkout's src first on PYTHONPATH: the script imports this ember
    return subprocess.run([str(SCRIPT), *args], cwd=ROOT, env=cli_env(), capture_output=True,
                          text=True, timeout=240)


def test_bare_command_prints_the_help():
    bare, helped = script(), script("--help")
    assert bare.returncode == 0 and bare.stderr == "", bare.stderr
    assert bare.stdout == helped.stdout and bare.stdout.startswith("Usage: ember [OPTIONS] COMMAND")
    assert len(bare.stdout.splitlines()) > 10


def test_unknown_backend_is_a_usage_error_exit_2(tmp_path):
    line = one_line_error(script("train", "--backend", "tensorflow", "--out", str(tmp_path / "o")), rc=2)
    assert "'tensorflow'" in line and "ember train --help" in line
    assert not (tmp_path / "o").exists()


def test_resume_without_a_checkpoint_is_one_line(tmp_path):
    line = one_line_error(script("train", "--resume", str(tmp_path)))
    assert str(tmp_path) in line


def test_out_that_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    line = one_line_error(script("train", "--quick", "--out", str(f)), rc=2)  # a usage error
    assert str(f) in line and "Errno" not in line


def test_bench_help_speaks_of_what_it_does():
    p = script("bench", "--help")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split()).lower()
    assert "issue" not in text and "ratio" in text
