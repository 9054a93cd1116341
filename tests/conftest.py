"""Backend matrix for the test-suite: ``backend`` / ``xp`` fixtures and markers.

A test that takes the ``xp`` fixture (the ember wrapper namespace,
``ember.autodiff.namespace(name)``) or the ``backend`` fixture (its name)
runs once per backend: numpy, array_api_strict, dask, cupy, torch, jax.
Backends that cannot run here are *skipped with the reason* (not installed,
no CUDA device, not selected), so the report says why.

Selecting backends
    ``EMBER_TEST_BACKENDS=cupy`` (comma-separated names, or ``all``) runs only
    those, and a named backend that cannot run is skipped with its reason.
    The default is every known backend that is usable here (cupy only with a
    CUDA device; torch and jax when installed); the report header lists the
    ones left out and why.

Markers
    ``@pytest.mark.backends("numpy", "dask", reason=...)``: run the test only
    on these backends; the others are skipped with ``reason``.
    ``@pytest.mark.skip_backend("dask", reason=...)``: skip it on one backend
    (repeatable; ``reason`` is required, so every skip says why).
    ``@pytest.mark.gpu``: needs a CUDA device (skipped without cupy on one).

JAX runs in float64 here: ``JAX_ENABLE_X64=1`` is set before JAX is imported
(the suite compares float64 results to 1e-12).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# src layout: make `import ember` work from a plain checkout (no install needed).
_SRC = str(Path(__file__).resolve().parent.parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

os.environ.setdefault("JAX_ENABLE_X64", "1")

#: Every backend the matrix knows, in report order.
ALL_BACKENDS = ("numpy", "array_api_strict", "dask", "cupy", "torch", "jax")
ENV_VAR = "EMBER_TEST_BACKENDS"

RESTRICTED = "test runs only on backends {allowed} ({reason})"
UNKNOWN_ENV = ENV_VAR + ": unknown backend(s) {bad}; known: {known} (or 'all')"

_usable_cache: dict[str, str | None] = {}


def selected_backends() -> tuple[str, ...]:
    """The backends chosen by EMBER_TEST_BACKENDS (default: all known)."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value or value == "all":
        return ALL_BACKENDS
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    bad = [n for n in names if n not in ALL_BACKENDS]
    if bad:
        raise pytest.UsageError(UNKNOWN_ENV.format(bad=bad, known=", ".join(ALL_BACKENDS)))
    return names


def unusable_reason(name: str) -> str | None:
    """Why backend ``name`` cannot run here (None when it can). Cached."""
    if name in _usable_cache:
        return _usable_cache[name]
    reason = None
    try:
        import ember.backend as eb

        eb.get(name)
        if name == "cupy":
            import cupy

            try:
                count = int(cupy.cuda.runtime.getDeviceCount())
            except Exception as exc:  # no driver, no device
                count, why = 0, f"{type(exc).__name__}: {exc}"
            else:
                why = "getDeviceCount() == 0"
            if count == 0:
                reason = f"cupy is installed but no CUDA device is usable ({why})"
    except ImportError as exc:
        reason = str(exc) if name in str(exc) else f"backend {name!r} is not installed ({exc})"
    except Exception as exc:  # pragma: no cover - broken installs
        reason = f"backend {name!r} does not load: {type(exc).__name__}: {exc}"
    _usable_cache[name] = reason
    return reason


def usable_backends() -> tuple[str, ...]:
    """Selected backends that can run here."""
    return tuple(n for n in selected_backends() if unusable_reason(n) is None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "backends(*names, reason=...): run a backend-parametrized test only on these backends",
    )
    config.addinivalue_line(
        "markers",
        "skip_backend(name, reason=...): skip a backend-parametrized test on one backend, saying why",
    )
    config.addinivalue_line("markers", "gpu: needs a CUDA device (cupy)")


def pytest_report_header(config: pytest.Config) -> str:
    parts = []
    for n in selected_backends():
        why = unusable_reason(n)
        parts.append(n if why is None else f"{n} (skipped: {why.split(' (')[0]})")
    return "ember backends: " + ", ".join(parts)


def _parametrizes_backend_itself(metafunc: pytest.Metafunc) -> bool:
    """True when a test brings its own ``backend`` (parametrize mark or own fixture)."""
    for m in metafunc.definition.iter_markers("parametrize"):
        names = m.args[0] if m.args else m.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "backend" in names:
            return True
    defs = getattr(metafunc, "_arg2fixturedefs", {}).get("backend") or ()
    return bool(defs) and defs[-1].func is not backend.__wrapped__


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames and not _parametrizes_backend_itself(metafunc):
        # Default: the usable backends (the header says why others are left out).
        # Backends named in EMBER_TEST_BACKENDS are all kept, so an unusable one
        # shows up as skipped with its reason.
        names = selected_backends() if os.environ.get(ENV_VAR, "").strip() else usable_backends()
        metafunc.parametrize("backend", names, ids=list(names), indirect=True)


def _skip_reason(item: pytest.Item, name: str) -> str | None:
    for m in item.iter_markers("backends"):
        if name not in m.args:
            reason = m.kwargs.get("reason", "restricted by @pytest.mark.backends")
            return RESTRICTED.format(allowed=", ".join(m.args), reason=reason)
    for m in item.iter_markers("skip_backend"):
        if name in m.args:
            reason = m.kwargs.get("reason")
            if not reason:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.skip_backend({name!r}) needs reason=... saying why"
                )
            return f"not on {name}: {reason}"
    return None


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend this test instance runs on (parametrized)."""
    name = request.param
    why = unusable_reason(name)
    if why is not None:
        pytest.skip(why)
    why = _skip_reason(request.node, name)
    if why is not None:
        pytest.skip(why)
    return name


@pytest.fixture
def xp(backend: str):
    """The ember wrapper namespace of the current backend (``ember.autodiff.namespace``)."""
    import ember.autodiff as ad

    return ad.namespace(backend)


@pytest.fixture
def raw_xp(backend: str):
    """The plain array-API namespace of the current backend (``ember.backend.get``)."""
    import ember.backend as eb

    return eb.get(backend)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = None
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        if gpu is None:
            gpu = unusable_reason("cupy")
        if gpu is not None:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA device: {gpu}"))


@pytest.fixture(params=["raw", "wrapped"])
def backward_loop(request, monkeypatch):
    """Run a test with the first-order backward on backend arrays (``raw``, the default
    fast loop) and again with every rule on Tensors (``wrapped``, the loop an outer
    trace records), so both forms of each VJP are checked against finite differences."""
    if request.param == "wrapped":
        from ember.autodiff import _trace

        monkeypatch.setattr(_trace, "_backward_raw", _trace._backward_general)
    return request.param
