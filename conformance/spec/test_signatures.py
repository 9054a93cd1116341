"""Names and signatures of the wrapper namespaces against ``array_api_strict``.

Three layers, each on every installed backend:

* names: every function of array_api_strict's main namespace, ``linalg`` and
  ``fft`` is in the wrapper, unless the backend itself lacks it (then the
  wrapper must lack it too, so ``hasattr`` tells the truth);
* declared signatures (``inspect.signature``): parameter names, kinds
  (positional-only / keyword-only markers) and defaults equal the spec's, read
  from array_api_strict (``SPEC_FIXES`` lists where array_api_strict itself
  differs from the spec text);
* honoured signatures: a sample call per function, then the same call with a
  positional-only parameter passed by keyword (must raise TypeError), with a
  keyword-only parameter passed positionally (must raise TypeError), with
  positional-or-keyword parameters passed by name, and with every default
  passed explicitly (must give the same result as leaving it out).

The Tensor methods are compared with the array object of the spec (the
dunder operators, ``__array_namespace__``, ``__dlpack__``, ``to_device`` ...).
"""

from __future__ import annotations

import enum
import inspect

import array_api_strict as strict
import numpy as np
import pytest
from _spec_helpers import SPEC_BACKENDS, to_numpy

import ember.backend as ember_backend

#: array_api_strict's own helpers, not names of the standard
STRICT_HELPERS = {"get_array_api_strict_flags", "set_array_api_strict_flags",
                  "reset_array_api_strict_flags"}

P = inspect.Parameter


def _functions(mod, ext: str | None):
    out = {}
    for n in dir(mod):
        o = getattr(mod, n)
        if n.startswith("_") or n in STRICT_HELPERS or not inspect.isfunction(o):
            continue
        if ext and o.__module__ != f"array_api_strict._{ext}":  # helpers the extension imports
            continue
        out[f"{ext}.{n}" if ext else n] = o
    return out


#: qualified name -> array_api_strict function (the reference)
REFERENCE = {**_functions(strict, None), **_functions(strict.linalg, "linalg"),
             **_functions(strict.fft, "fft")}


def _get(mod, qual):
    obj = mod
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _norm_default(v):
    """array_api_strict uses an ``Undef`` sentinel where the spec writes ``None``."""
    if isinstance(v, enum.Enum) and type(v).__name__ == "Undef":
        return None
    return v


def _norm(sig: inspect.Signature, method: bool = False):
    """(name, kind, default) of each parameter; annotations ignored.

    For methods ``self`` counts as positional-only, as the spec writes it.
    """
    out = []
    for i, p in enumerate(sig.parameters.values()):
        kind = P.POSITIONAL_ONLY if method and i == 0 else p.kind
        default = "<required>" if p.default is P.empty else repr(_norm_default(p.default))
        out.append((p.name, kind.name, default))
    return out


def _expected(qual):
    return _norm(inspect.signature(REFERENCE[qual]))


def _backend_lacks(xp, qual) -> bool:
    return _get(xp._backend, qual) is None


# ---------------------------------------------------------------------- #
# names
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("qual", sorted(REFERENCE))
def test_name_present_unless_backend_lacks_it_and_no_fill_in(xp, qual):
    f = _get(xp, qual)
    if _backend_lacks(xp, qual) and f is None:
        pytest.skip(f"backend deviation: {xp._backend_name} has no {qual} (and ember has no portable fill-in)")
    assert callable(f), f"{qual} missing from {xp.__name__}"
    assert f.__name__ == qual.split(".")[-1]


def test_module_identity(xp, backend):
    """The ready-made namespaces are importable modules named as imported (the suite needs this)."""
    assert xp.__name__ == SPEC_BACKENDS[backend]
    assert xp.linalg.__name__ == f"{xp.__name__}.linalg"
    assert xp.fft.__name__ == f"{xp.__name__}.fft"
    assert xp.bool is not None and xp.__array_api_version__ in ("2023.12", "2024.12", "2025.12")


# ---------------------------------------------------------------------- #
# declared signatures
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("qual", sorted(REFERENCE))
def test_declared_signature(xp, qual):
    f = _get(xp, qual)
    if f is None:
        pytest.skip(f"backend deviation: {xp._backend_name} has no {qual}")
    got = _norm(inspect.signature(f))
    assert got == _expected(qual), f"{qual}: declared {inspect.signature(f)}"


# ---------------------------------------------------------------------- #
# honoured signatures: sample calls
# ---------------------------------------------------------------------- #
def _data(xp):
    f = xp.asarray([[2.0, 0.5], [0.5, 1.0]])  # symmetric positive definite
    return dict(
        f=f,
        v=xp.asarray([0.25, 0.5, 1.0, 2.0]),
        i=xp.asarray([[3, 1], [2, 0]]),
        iv=xp.asarray([0, 2, 1]),
        b=xp.asarray([[True, False], [False, True]]),
        c=xp.asarray([1.0 + 1.0j, 2.0, 0.5j, -1.0]),
        c2=xp.asarray([[1.0 + 1.0j, 2.0], [0.5j, -1.0]]),
        v3=xp.asarray([1.0, 2.0, 3.0]),
        row=xp.asarray([[1.0, 2.0, 3.0, 4.0]]),
    )


_UNARY_INT = {"bitwise_invert"}
_UNARY_BOOL = {"logical_not"}
_UNARY_COMPLEX = {"imag"}
_BINARY_INT = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"}
_BINARY_BOOL = {"logical_and", "logical_or", "logical_xor"}

#: name -> (positional args, keyword args) built from ``_data``; functions not
#: listed take one float matrix ``f`` (unary) or two (binary elementwise).
SAMPLES = {
    "arange": lambda d, xp: ((5,), {}),
    "asarray": lambda d, xp: (([1.0, 2.0],), {}),
    "astype": lambda d, xp: ((d["f"], xp.float32), {}),
    "broadcast_arrays": lambda d, xp: ((d["f"], d["v"][:2]), {}),
    "broadcast_shapes": lambda d, xp: (((2, 1), (1, 3)), {}),
    "broadcast_to": lambda d, xp: ((d["f"], (3, 2, 2)), {}),
    "can_cast": lambda d, xp: ((xp.float32, xp.float64), {}),
    "concat": lambda d, xp: (([d["f"], d["f"]],), {}),
    "stack": lambda d, xp: (([d["f"], d["f"]],), {}),
    "cumulative_sum": lambda d, xp: ((d["v"],), {}),
    "cumulative_prod": lambda d, xp: ((d["v"],), {}),
    "empty": lambda d, xp: (((2, 2),), {}),
    "ones": lambda d, xp: (((2, 2),), {}),
    "zeros": lambda d, xp: (((2, 2),), {}),
    "expand_dims": lambda d, xp: ((d["f"], 0), {}),
    "eye": lambda d, xp: ((3,), {}),
    "finfo": lambda d, xp: ((xp.float32,), {}),
    "iinfo": lambda d, xp: ((xp.int32,), {}),
    "from_dlpack": lambda d, xp: ((d["f"],), {}),
    "full": lambda d, xp: (((2,), 1.5), {}),
    "full_like": lambda d, xp: ((d["f"], 1.5), {}),
    "isdtype": lambda d, xp: ((xp.float32, "real floating"), {}),
    "isin": lambda d, xp: ((d["i"], d["iv"]), {}),
    "linspace": lambda d, xp: ((0.0, 1.0, 5), {}),
    "meshgrid": lambda d, xp: ((d["v"], d["v3"]), {}),
    "moveaxis": lambda d, xp: ((d["f"], 0, 1), {}),
    "permute_dims": lambda d, xp: ((d["f"], (1, 0)), {}),
    "repeat": lambda d, xp: ((d["f"], 2), {}),
    "reshape": lambda d, xp: ((d["f"], (4,)), {}),
    "result_type": lambda d, xp: ((xp.float32, d["f"]), {}),
    "roll": lambda d, xp: ((d["f"], 1), {}),
    "searchsorted": lambda d, xp: ((d["v"], d["v3"]), {}),
    "squeeze": lambda d, xp: ((d["row"], 0), {}),
    "take": lambda d, xp: ((d["v"], d["iv"]), {}),
    "take_along_axis": lambda d, xp: ((d["f"], xp.asarray([[1, 0], [0, 1]])), {}),
    "tile": lambda d, xp: ((d["f"], (2, 1)), {}),
    "unique_all": lambda d, xp: ((d["v"],), {}),
    "unique_counts": lambda d, xp: ((d["v"],), {}),
    "unique_inverse": lambda d, xp: ((d["v"],), {}),
    "unique_values": lambda d, xp: ((d["v"],), {}),
    "where": lambda d, xp: ((d["b"], d["f"], d["f"]), {}),
    "linalg.cross": lambda d, xp: ((d["v3"], d["v3"]), {}),
    "linalg.matrix_power": lambda d, xp: ((d["f"], 2), {}),
    "linalg.outer": lambda d, xp: ((d["v"], d["v3"]), {}),
    "fft.fft": lambda d, xp: ((d["c"],), {}),
    "fft.ifft": lambda d, xp: ((d["c"],), {}),
    "fft.fftn": lambda d, xp: ((d["c2"],), {}),
    "fft.ifftn": lambda d, xp: ((d["c2"],), {}),
    "fft.rfft": lambda d, xp: ((d["v"],), {}),
    "fft.irfft": lambda d, xp: ((d["c"],), {}),
    "fft.rfftn": lambda d, xp: ((d["f"],), {}),
    "fft.irfftn": lambda d, xp: ((d["c2"],), {}),
    "fft.hfft": lambda d, xp: ((d["c"],), {}),
    "fft.ihfft": lambda d, xp: ((d["v"],), {}),
    "fft.fftfreq": lambda d, xp: ((4,), {}),
    "fft.rfftfreq": lambda d, xp: ((4,), {}),
    "fft.fftshift": lambda d, xp: ((d["v"],), {}),
    "fft.ifftshift": lambda d, xp: ((d["v"],), {}),
}

#: results that are not deterministic values (uninitialised memory)
_SHAPE_ONLY = {"empty", "empty_like"}


def _sample(xp, qual):
    d = _data(xp)
    if qual in SAMPLES:
        return SAMPLES[qual](d, xp)
    sig = inspect.signature(REFERENCE[qual])
    nreq = sum(1 for p in sig.parameters.values() if p.default is P.empty and p.kind != P.VAR_POSITIONAL)
    arg = d["c"] if qual in _UNARY_COMPLEX else d["i"] if qual in _UNARY_INT | _BINARY_INT else d["b"] if qual in _UNARY_BOOL | _BINARY_BOOL else d["f"]
    return (arg,) * nreq, {}


def _same(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(_same, a, b))
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        x, y = to_numpy(a), to_numpy(b)
        return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
    return a == b


def _call(f, args, kwargs, qual):
    out = f(*args, **kwargs)
    if qual in _SHAPE_ONLY:
        return (out.shape, out.dtype)
    return out


def _params(qual):
    return list(inspect.signature(REFERENCE[qual]).parameters.values())


#: (backend, function) -> why the backend itself fails a sample call; the test
#: checks the backend function fails the same calls and then xfails with this reason.
BACKEND_DEVIATIONS = {
    ("dask", "take"): "dask's take needs an integer axis (the spec allows axis=None for 1-D input)",
}


def _strip(v):
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        return type(v)(_strip(a) for a in v)
    return v.raw if hasattr(v, "raw") else v


def _signature_problems(f, qual, args, kwargs):
    """[(message, args, kwargs)] of the calls that do not honour the standard's signature."""
    problems = []

    def run(a, kw):
        try:
            return _call(f, a, kw, qual), None
        except Exception as e:  # noqa: BLE001 - reported
            return None, e

    base, err = run(args, kwargs)
    if err is not None:
        return [(f"sample call: {type(err).__name__}: {err}", args, kwargs)]
    params = _params(qual)
    varargs = any(p.kind == P.VAR_POSITIONAL for p in params)  # extra positionals are *args there
    positional = [] if varargs else [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]

    # positional-only parameters must not be accepted by keyword
    posonly = [i for i, p in enumerate(positional) if p.kind == P.POSITIONAL_ONLY and i < len(args)]
    if posonly:
        i = posonly[-1]
        kw = {**{positional[j].name: args[j] for j in range(i, len(args))}, **kwargs}
        if not isinstance(run(args[:i], kw)[1], TypeError):
            problems.append((f"positional-only {positional[i].name!r} accepted by keyword", args[:i], kw))

    # the first positional-or-keyword parameter (and the ones after it) are accepted by name
    for i, p in enumerate(positional):
        if p.kind == P.POSITIONAL_OR_KEYWORD and i < len(args):
            kw = {**{positional[j].name: args[j] for j in range(i, len(args))}, **kwargs}
            got, err = run(args[:i], kw)
            if err is not None:
                problems.append((f"{p.name!r} by keyword: {type(err).__name__}: {err}", args[:i], kw))
            elif not _same(got, base):
                problems.append((f"{p.name!r} by keyword changes the result", args[:i], kw))
            break

    # keyword-only parameters must not be accepted positionally
    kwonly = [p for p in params if p.kind == P.KEYWORD_ONLY and p.default is not P.empty]
    if kwonly and not varargs and len(args) >= sum(1 for p in positional if p.default is P.empty):
        fill = (*args, *(p.default for p in positional[len(args):]), _norm_default(kwonly[0].default))
        if not isinstance(run(fill, kwargs)[1], TypeError):
            problems.append((f"keyword-only {kwonly[0].name!r} accepted positionally", fill, kwargs))

    # every default given explicitly gives the same result as leaving it out
    for p in params:
        if p.default is P.empty or p.name in kwargs or p.kind == P.POSITIONAL_ONLY:
            continue
        if p in positional and positional.index(p) < len(args):
            continue
        kw = {**kwargs, p.name: _norm_default(p.default)}
        got, err = run(args, kw)
        if err is not None:
            problems.append((f"{p.name}={kw[p.name]!r}: {type(err).__name__}: {err}", args, kw))
        elif not _same(got, base):
            problems.append((f"{p.name}={kw[p.name]!r} changes the result", args, kw))
    return problems


@pytest.mark.parametrize("qual", sorted(REFERENCE))
def test_signature_honoured(xp, qual):
    f = _get(xp, qual)
    if f is None:
        pytest.skip(f"backend deviation: {xp._backend_name} has no {qual}")
    args, kwargs = _sample(xp, qual)
    problems = _signature_problems(f, qual, args, kwargs)
    reason = BACKEND_DEVIATIONS.get((xp._backend_name, qual))
    if problems and reason:
        raw = _get(xp._backend, qual)
        for msg, a, kw in problems:
            with pytest.raises(Exception):  # noqa: B017 - the backend's own failure, any type
                raw(*_strip(a), **{k: _strip(v) for k, v in kw.items()})
        pytest.xfail(f"backend deviation: {reason}")
    assert not problems, f"{qual}: " + "; ".join(m for m, _, _ in problems)
    assert not reason, f"{qual} now honours its signature on {xp._backend_name}: drop it from BACKEND_DEVIATIONS"


# ---------------------------------------------------------------------- #
# Tensor methods
# ---------------------------------------------------------------------- #
_ARRAY = type(strict.asarray(0.0))
#: array_api_strict's array internals and extras that are not in the standard
_NOT_SPEC = {"__buffer__", "__array__", "__iter__", "__init__", "__new__", "__repr__", "__str__",
             "__hash__", "__reduce__", "__reduce_ex__", "__getstate__", "__setattr__", "__getattribute__",
             "__delattr__", "__dir__", "__format__", "__sizeof__", "__init_subclass__", "__subclasshook__",
             "__class__", "__eq_ne_doc__"}


def _methods():
    out = []
    for n in dir(_ARRAY):
        if n.startswith("_") and not n.startswith("__") or n in _NOT_SPEC:
            continue
        o = inspect.getattr_static(_ARRAY, n)
        if inspect.isfunction(o):
            out.append(n)
    return out


#: where array_api_strict's array object differs from the spec text
#: (spec: ``to_device(self, device, /, *, stream=None)``)
SPEC_FIXES = {"to_device": [("self", "POSITIONAL_ONLY", "<required>"), ("device", "POSITIONAL_ONLY", "<required>"),
                            ("stream", "KEYWORD_ONLY", "None")]}


@pytest.mark.parametrize("name", _methods())
def test_tensor_method_signature(xp, name):
    m = getattr(xp._Tensor, name, None)
    assert m is not None, f"Tensor.{name} missing"
    want = SPEC_FIXES.get(name) or _norm(inspect.signature(getattr(_ARRAY, name)), method=True)
    assert _norm(inspect.signature(m), method=True) == want, f"Tensor.{name}{inspect.signature(m)}"


@pytest.mark.parametrize("name", ["shape", "dtype", "device", "ndim", "size", "T", "mT"])
def test_tensor_attributes(xp, name):
    assert isinstance(inspect.getattr_static(_ARRAY, name), property)
    x = xp.ones((2, 3))
    assert getattr(x, name) is not None


def test_binary_operators_positional_only(xp):
    """``x.__add__(other=y)`` is a TypeError: the operand is positional-only."""
    x = xp.ones((2,))
    for n in ("__add__", "__radd__", "__iadd__", "__lt__", "__getitem__"):
        with pytest.raises(TypeError):
            getattr(x, n)(**{"key" if n == "__getitem__" else "other": 0})


def test_backend_named_consistently(backend, xp):
    assert ember_backend.name(xp._backend) == backend
