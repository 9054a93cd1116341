"""Shared pieces of ember's own array-API spec checks (``conformance/spec``).

These checks run in CI with the normal test command (pytest's ``testpaths``
include this folder); they need no checkout of the official suite. Each check
runs on every installed backend wrapper: ``ember.autodiff.numpy``,
``ember.autodiff.array_api_strict`` and ``ember.autodiff.dask``. A backend that
is not installed is skipped with the reason.

``array_api_strict`` is the oracle for names, signatures and dtype promotion
(it is a test dependency, so it is always here).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# src layout: make `import ember` work from a plain checkout (no install needed).
_SRC = str(Path(__file__).resolve().parents[2] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

from _spec_helpers import SPEC_BACKENDS, load  # noqa: E402


@pytest.fixture(params=list(SPEC_BACKENDS), scope="module")
def backend(request) -> str:
    """Name of one backend (every installed one in turn)."""
    load(request.param)
    return request.param


@pytest.fixture(scope="module")
def xp(backend):
    """The ember wrapper namespace of ``backend``."""
    return load(backend)
