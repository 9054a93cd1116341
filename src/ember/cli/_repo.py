"""Find the ember source checkout that holds ``benchmarks/`` or ``conformance/``.

Why: the benchmark scripts and the conformance runner live next to the
package in the repository (they compare ember with peers and need tools that
are not runtime dependencies), not inside it. ``ember bench`` and ``ember
conformance`` therefore work from a source checkout (an editable install or
``PYTHONPATH=src``) and say so clearly otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._errors import EmberError

NOT_FOUND = (
    "{what} not found: it ships with ember's source checkout, not with the installed package "
    "(looked in {where}); run from a checkout (pip install -e .) or pass --repo /path/to/ember"
)


class RepoNotFoundError(EmberError, FileNotFoundError):
    """The source checkout (with benchmarks/ or conformance/) was not found."""


def find(marker: str, repo: Path | None = None) -> Path:
    """The repository root holding ``marker`` (e.g. ``benchmarks/_harness.py``).

    Looks in ``repo`` when given; else ``$EMBER_REPO``, the checkout this
    package was imported from, then the current directory and its parents.
    """
    if repo is not None:
        candidates = [Path(repo)]
    else:
        candidates = []
        if os.environ.get("EMBER_REPO"):
            candidates.append(Path(os.environ["EMBER_REPO"]))
        candidates.append(Path(__file__).resolve().parents[3])  # src/ember/cli/_repo.py -> root
        cwd = Path.cwd().resolve()
        candidates += [cwd, *cwd.parents]
    for c in candidates:
        if (c / marker).is_file():
            return c.resolve()
    where = ", ".join(str(c) for c in candidates[:3]) + (", ..." if len(candidates) > 3 else "")
    raise RepoNotFoundError(NOT_FOUND.format(what=marker, where=where))
