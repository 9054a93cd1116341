"""Tests for ember.backend: registry, capabilities, random sources."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember.backend as eb
from ember._errors import BackendError, BackendNotInstalledError, DTypeError
from ember.backend import _capabilities, _registry

AVAILABLE = eb.available()
INSTALLED = [n for n, v in AVAILABLE.items() if v is not None]

# name -> (module name of the namespace ember must return, raw module name)
EXPECTED = {
    "numpy": ("array_api_compat.numpy", "numpy"),
    "cupy": ("array_api_compat.cupy", "cupy"),
    "dask": ("array_api_compat.dask.array", "dask.array"),
    "array_api_strict": ("array_api_strict", "array_api_strict"),
    "torch": ("array_api_compat.torch", "torch"),
    "jax": ("jax.numpy", "jax.numpy"),
}


def _needs(backend: str) -> None:
    if AVAILABLE.get(backend) is None:
        pytest.skip(f"backend {backend!r} not available here")


@pytest.fixture
def fresh_cache():
    """Empty the registry cache before and after a test that fakes missing libraries."""
    _registry._clear_cache()
    yield
    _registry._clear_cache()


# --- get / name / raw ---------------------------------------------------------


def test_available_lists_every_known_backend_and_numpy():
    assert list(AVAILABLE) == list(eb.KNOWN)
    assert AVAILABLE["numpy"] == np.__version__


@pytest.mark.parametrize("backend", eb.KNOWN)
def test_get_by_name_returns_conformant_namespace(backend):
    _needs(backend)
    xp = eb.get(backend)
    assert xp.__name__ == EXPECTED[backend][0]
    assert eb.get(backend) is xp  # cached
    assert eb.name(xp) == backend
    assert eb.raw(xp).__name__ == EXPECTED[backend][1]


@pytest.mark.parametrize("backend", eb.KNOWN)
def test_get_from_array_and_raw_module(backend):
    _needs(backend)
    xp = eb.get(backend)
    x = xp.ones((2,))
    assert eb.get(x) is xp
    raw_module = importlib.import_module(EXPECTED[backend][1])
    assert eb.get(raw_module) is xp
    assert eb.get(xp) is xp


def test_get_maps_raw_numpy_array_to_compat():
    import array_api_compat.numpy as cnp

    assert eb.get(np.zeros(3)) is cnp
    assert eb.get(np) is cnp
    assert eb.raw(cnp) is np


def test_aliases():
    assert eb.get("strict") is eb.get("array_api_strict")
    if "dask" in INSTALLED:
        assert eb.get("dask.array") is eb.get("dask")


def test_unknown_name_lists_known_names():
    with pytest.raises(BackendError) as info:
        eb.get("tensorflow")
    msg = str(info.value)
    assert msg == _registry.UNKNOWN_BACKEND.format(spec="tensorflow", known=", ".join(eb.KNOWN))
    for known in eb.KNOWN:
        assert known in msg
    assert isinstance(info.value, TypeError)


def test_conformant_foreign_namespace_is_returned_as_is():
    ns = types.ModuleType("my_array_lib")
    ns.asarray = lambda x: x
    ns.__array_api_version__ = "2024.12"
    assert eb.get(ns) is ns
    assert eb.name(ns) == "my_array_lib"
    assert eb.raw(ns) is ns
    obj = types.SimpleNamespace(asarray=lambda x: x, __array_api_version__="2024.12")
    assert eb.get(obj) is obj


def test_non_namespace_module_is_rejected():
    import math

    with pytest.raises(BackendError) as info:
        eb.get(math)
    assert str(info.value) == _registry.NOT_A_NAMESPACE.format(obj=math)


def test_non_array_object_is_rejected():
    with pytest.raises(BackendError, match="cannot find an array API namespace for an object of type object"):
        eb.get(object())


# --- missing backends ---------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "module", "install"),
    [
        ("dask", "dask.array", 'pip install -e ".[dask]" in the ember checkout'),
        ("array_api_strict", "array_api_strict", 'pip install -e ".[strict]" in the ember checkout'),
        ("cupy", "cupy", 'pip install -e ".[cupy]" in the ember checkout'),
        ("torch", "torch", "pip install torch"),
        ("jax", "jax.numpy", "pip install jax"),
    ],
)
def test_missing_backend_says_what_to_install(monkeypatch, fresh_cache, backend, module, install):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(BackendNotInstalledError) as info:
        eb.get(backend)
    assert str(info.value) == f"backend {backend!r} is not installed: {install}"
    assert isinstance(info.value, ImportError)
    assert eb.available()[backend] is None


def test_real_cupy_absence_message():
    try:
        import cupy  # noqa: F401
    except Exception:
        expected = r'backend \'cupy\' is not installed: pip install -e "\.\[cupy\]" in the ember checkout'
        with pytest.raises(BackendNotInstalledError, match=expected):
            eb.get("cupy")
    else:
        pytest.skip("cupy is installed")


def test_available_never_raises(monkeypatch, fresh_cache):
    def broken(module):
        raise RuntimeError("library crashed on import")

    monkeypatch.setattr(_registry, "_import", broken)
    assert eb.available() == {n: None for n in eb.KNOWN}


def test_import_is_lazy():
    code = (
        "import sys, ember.backend as eb\n"
        "print([m for m in ('numpy', 'dask', 'cupy', 'torch', 'jax', 'array_api_strict') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": "src"},
        cwd=_repo_root(),
    )
    assert out.stdout.strip() == "[]"


def _repo_root() -> str:
    import pathlib

    return str(pathlib.Path(__file__).resolve().parents[2])


# --- capabilities -------------------------------------------------------------


def test_capabilities_numpy():
    caps = eb.capabilities(eb.get("numpy"))
    assert (caps.name, caps.version) == ("numpy", np.__version__)
    assert caps.in_place and caps.setitem and caps.out_param
    assert not caps.lazy
    assert "cpu" in caps.devices and caps.default_device == "cpu"
    assert caps.random == "numpy.random.Generator(PCG64)"
    assert eb.capabilities(eb.get("numpy")) is caps  # probed once
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.in_place = False  # type: ignore[misc]


def test_capabilities_array_api_strict():
    caps = eb.capabilities(eb.get("array_api_strict"))
    assert caps.out_param is False  # the standard has no out=
    assert caps.in_place is True and caps.lazy is False
    assert caps.default_device in caps.devices


def test_capabilities_dask():
    _needs("dask")
    caps = eb.capabilities(eb.get("dask"))
    assert caps.lazy is True
    # setitem is accepted but rebuilds the graph: existing views do not see it,
    # so a consumed buffer cannot really be reused.
    assert caps.setitem is True
    assert caps.in_place is False
    assert caps.out_param is True


def test_capabilities_torch():
    _needs("torch")
    caps = eb.capabilities(eb.get("torch"))
    assert caps.in_place and caps.setitem and not caps.lazy


def test_capabilities_jax():
    _needs("jax")
    caps = eb.capabilities(eb.get("jax"))
    assert not caps.in_place and not caps.setitem and not caps.out_param and not caps.lazy


def test_capabilities_of_foreign_namespace_do_not_crash():
    ns = types.ModuleType("my_array_lib")
    ns.asarray = lambda x: x
    ns.__array_api_version__ = "2024.12"
    caps = eb.capabilities(ns)
    assert (caps.name, caps.in_place, caps.out_param, caps.lazy, caps.devices) == (
        "my_array_lib", False, False, False, ())


# --- random sources -----------------------------------------------------------


def _equal(xp, a, b) -> bool:
    return bool(xp.all(a == b))


def _draws(rs, xp, seed):
    return [
        rs.normal(seed, (64,)),
        rs.uniform(seed, (64,), xp.float32, -2.0, 3.0),
        rs.integers(seed, (64,), 0, 1000, xp.int32),
        rs.bernoulli(seed, (64,), 0.5),
    ]


@pytest.mark.parametrize("backend", eb.KNOWN)
def test_random_source_is_reproducible(backend):
    _needs(backend)
    xp = eb.get(backend)
    rs = eb.random_source(xp)
    assert rs.description == eb.capabilities(xp).random
    first, again, other = _draws(rs, xp, 7), _draws(rs, xp, 7), _draws(rs, xp, 8)
    for a, b, c in zip(first, again, other):
        assert eb.get(a) is xp
        assert a.shape == (64,)
        assert _equal(xp, a, b)
        assert not _equal(xp, a, c)
    normal, uniform, ints, bits = first
    assert normal.dtype == xp.__array_namespace_info__().default_dtypes()["real floating"]
    assert uniform.dtype == xp.float32
    assert bool(xp.all(uniform >= -2.0)) and bool(xp.all(uniform <= 3.0))
    assert ints.dtype == xp.int32
    assert bool(xp.all(ints >= 0)) and bool(xp.all(ints < 1000))
    assert bits.dtype == xp.bool


def test_random_numpy_statistics_and_defaults():
    xp = eb.get("numpy")
    rs = eb.random_source(xp)
    z = rs.normal(0, (20000,))
    assert z.dtype == np.float64
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    b = rs.bernoulli(1, 20000, 0.25)
    assert abs(b.mean() - 0.25) < 0.02
    assert rs.normal(0, 3, "float32").dtype == np.float32  # string dtypes work
    assert rs.integers(0, (2, 3), 0, 5).dtype == np.int64


def test_random_strict_matches_numpy_stream():
    xs, xn = eb.get("array_api_strict"), eb.get("numpy")
    a = eb.random_source(xs).normal(3, (5,))
    b = eb.random_source(xn).normal(3, (5,))
    assert _equal(xs, a, xs.asarray(b))


def test_random_bad_arguments():
    xp = eb.get("numpy")
    rs = eb.random_source(xp)
    with pytest.raises(DTypeError, match="not a real floating dtype"):
        rs.normal(0, 3, xp.int32)
    with pytest.raises(DTypeError, match="not a integral dtype"):
        rs.integers(0, 3, 0, 5, xp.float32)
    with pytest.raises(ValueError, match="non-negative int"):
        rs.normal(-1, 3)
    with pytest.raises(ValueError, match="non-negative int"):
        rs.normal(True, 3)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        rs.bernoulli(0, 3, 1.5)
    with pytest.raises(ValueError, match="need low < high"):
        rs.uniform(0, 3, None, 1.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**63 - 1),
    shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    low=st.integers(-100, 100),
    span=st.integers(1, 100),
)
def test_random_integers_property(seed, shape, low, span):
    rs = eb.random_source(eb.get("numpy"))
    a = rs.integers(seed, shape, low, low + span)
    assert a.shape == shape
    assert np.array_equal(a, rs.integers(seed, shape, low, low + span))
    assert ((a >= low) & (a < low + span)).all()
