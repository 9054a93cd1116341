"""Helpers for the tests of the ``ember`` command: run the real console script in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def cli_env(env: dict | None = None) -> dict[str, str]:
    """The environment of a CLI subprocess: ember from this checkout, one BLAS thread, wide COLUMNS.

    A value of None in ``env`` removes that variable (e.g. ``{"COLUMNS": None}``
    to see what a pipe without COLUMNS gets).
    """
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), e.get("PYTHONPATH", "")) if p)
    e.setdefault("OMP_NUM_THREADS", "1")
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    e["COLUMNS"] = "200"
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def ember_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ember", *args]


def ember(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 240,
          prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``python -m ember ARGS`` (after ``prefix``, e.g. an ``unshare`` line); text output captured."""
    return subprocess.run([*prefix, *ember_argv(*args)], cwd=cwd or ROOT, env=cli_env(env),
                          capture_output=True, text=True, timeout=timeout)


def popen_ember(*args: str, env: dict | None = None) -> subprocess.Popen:
    """Start ``python -m ember ARGS`` with Ctrl-C's default action (a test runner may ignore SIGINT)."""
    return subprocess.Popen(ember_argv(*args), cwd=ROOT, env=cli_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def one_line_error(p: subprocess.CompletedProcess, rc: int = 1) -> str:
    """The single ``ember: error: ...`` line of a failed run (asserts exit ``rc`` and no traceback)."""
    assert p.returncode == rc, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("ember: error: "), lines[0]
    assert "Traceback" not in p.stderr + p.stdout
    return lines[0]
