"""``ember conformance``: run ``conformance/run`` (the official array-API suite) per namespace.

The runner lives in the source checkout (``conformance/run``); it prints one
summary line per namespace and explains how to obtain the suite when it is
missing. This command runs it once per namespace with the same interpreter
and returns non-zero if any run failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from . import _repo

MARKER = "conformance/run"


def run_conformance(
    namespaces: tuple[str, ...] | list[str],
    *,
    version: str | None = None,
    max_examples: int | None = None,
    suite: Path | None = None,
    repo: Path | None = None,
) -> int:
    """Run ``conformance/run NAMESPACE`` for each namespace; the worst exit status."""
    root = _repo.find(MARKER, repo)
    worst = 0
    for ns in namespaces:
        cmd = [sys.executable, str(root / MARKER), ns]
        if version:
            cmd += ["--version", version]
        if max_examples is not None:
            cmd += ["--max-examples", str(max_examples)]
        if suite is not None:
            cmd += ["--suite", str(suite)]
        rc = subprocess.run(cmd, cwd=root).returncode
        worst = max(worst, rc)
    return worst
