"""``__array_namespace_info__`` of the wrapper namespaces.

The inspection API must answer exactly as the backend's does (ember adds no
devices or dtypes of its own) and its answers must hold for ember Tensors:
new tensors land on ``default_device()`` with the ``default_dtypes()``,
every listed dtype is the namespace's dtype object of that name, the ``kind``
filter of ``dtypes`` agrees with ``isdtype``, and the capabilities it claims
work (boolean indexing, data-dependent shapes, the maximum rank).
"""

from __future__ import annotations

import pytest

DTYPE_NAMES = ("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 "
               "complex64 complex128").split()
KINDS = ("bool", "signed integer", "unsigned integer", "integral", "real floating", "complex floating",
         "numeric", ("bool", "real floating"), ("signed integer", "complex floating"))
CAPABILITIES = {"boolean indexing": bool, "data-dependent shapes": bool, "max dimensions": (int, type(None))}
DEFAULT_DTYPE_KEYS = {"real floating", "complex floating", "integral", "indexing"}


@pytest.fixture(scope="module")
def info(xp):
    return xp.__array_namespace_info__()


@pytest.fixture(scope="module")
def ref(xp):
    return xp._backend.__array_namespace_info__()


def _dtypes_equal(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(a[k] == b[k] for k in a)


def test_info_answers_as_backend(info, ref):
    assert info.capabilities() == ref.capabilities()
    assert info.default_device() == ref.default_device()
    assert list(info.devices()) == list(ref.devices())
    assert _dtypes_equal(info.default_dtypes(), ref.default_dtypes())
    assert _dtypes_equal(info.dtypes(), ref.dtypes())
    for kind in KINDS:
        assert _dtypes_equal(info.dtypes(kind=kind), ref.dtypes(kind=kind)), kind
    for dev in info.devices():
        assert _dtypes_equal(info.default_dtypes(device=dev), ref.default_dtypes(device=dev)), dev
        assert _dtypes_equal(info.dtypes(device=dev), ref.dtypes(device=dev)), dev


def test_capabilities_keys(info, xp):
    caps = info.capabilities()
    for key, types in CAPABILITIES.items():
        if key == "max dimensions" and xp.__array_api_version__ < "2024.12":
            continue
        assert key in caps, f"capabilities() lacks {key!r}"
        assert isinstance(caps[key], types), (key, caps[key])


def test_capabilities_hold(info, xp):
    caps = info.capabilities()
    x = xp.asarray([1.0, -2.0, 3.0])
    if caps["boolean indexing"]:
        y = x[x > 0]
        assert y.ndim == 1
    if caps["data-dependent shapes"]:
        assert xp.unique_values(x).ndim == 1
        assert len(xp.nonzero(x)) == 1
    n = caps.get("max dimensions")
    if n:
        z = xp.ones((1,) * n)
        assert z.ndim == n and float(xp.sum(z)) == 1.0


def test_default_device(info, xp):
    dev = info.default_device()
    assert dev in list(info.devices())
    for t in (xp.asarray([1.0]), xp.ones((2,)), xp.arange(3), xp.zeros((2,)) + 1):
        assert t.device == dev


def test_devices_usable(info, xp):
    for dev in info.devices():
        if str(dev) == "DASK_DEVICE" or "DASK_DEVICE" in repr(dev):
            continue  # dask's placeholder device: arrays only report it for their chunks
        t = xp.asarray([1.0, 2.0], device=dev) if info.dtypes(device=dev).get("float64") is not None \
            else xp.asarray([1.0, 2.0], dtype=xp.float32, device=dev)
        assert t.device == dev, (dev, t.device)
        assert (t + t).device == dev


def test_dtypes_are_namespace_dtypes(info, xp):
    dts = info.dtypes()
    assert set(dts) <= set(DTYPE_NAMES)
    for name, dt in dts.items():
        assert dt == getattr(xp, name), name
        assert xp.asarray([0], dtype=dt).dtype == getattr(xp, name)


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_dtype_kinds_agree_with_isdtype(info, xp, kind):
    got = info.dtypes(kind=kind)
    want = {n: d for n, d in info.dtypes().items() if xp.isdtype(d, kind)}
    assert set(got) == set(want)


def test_default_dtypes_are_used(info, xp):
    dd = info.default_dtypes()
    assert set(dd) == DEFAULT_DTYPE_KEYS
    assert xp.asarray(1.0).dtype == dd["real floating"]
    assert xp.ones((2,)).dtype == dd["real floating"]
    assert xp.asarray(1j).dtype == dd["complex floating"]
    assert xp.asarray(1).dtype == dd["integral"]
    assert xp.arange(3).dtype == dd["integral"]
    assert xp.argmax(xp.asarray([1.0, 3.0])).dtype == dd["indexing"]
    assert xp.nonzero(xp.asarray([0.0, 1.0]))[0].dtype == dd["indexing"]


def test_info_is_reachable_from_tensors(xp):
    x = xp.asarray([1.0])
    ns = x.__array_namespace__()
    assert ns is xp
    assert ns.__array_namespace_info__().default_device() == x.device
