"""``ember.Tensor``: one backend array, optionally tracked by a trace.

A Tensor is *not* an ndarray subclass. Outside a transform it is a thin
wrapper (``_value`` is the backend array, ``_node`` is None). Inside one, a
tracked Tensor's ``_value`` is a Tensor one level down and ``_node`` is its
tape node. Each wrapper namespace makes its own subclass, so a class check
both finds the fast path and catches tensors of two namespaces mixed in one
op. Operators and methods are installed by the namespace factory.
"""

from __future__ import annotations

import os
import sys
from operator import attrgetter

from .._errors import BackendError, NotDifferentiableError

TRACED_TO_NUMPY = (
    "Tensor traced by an ember transform (level {level}) cannot be converted to a NumPy array: "
    "the array would not carry the gradient (NumPy functions, numpy.asarray, or an operator "
    "with an array of another library do this). Compute with the namespace's functions "
    "(xp.sin(x), not numpy.sin(x)), or read the value as a constant with x.raw"
)

TRACED_TO_SCALAR = (
    "{kind}() of a {dtype} Tensor of shape {shape} traced by an ember transform (level {level}) "
    "would cut its gradient: a Python number carries none, so everything computed from it "
    "would silently get a wrong gradient. Keep it an array (index it, x[0], and compute with "
    "the namespace's functions), or read it as a constant on purpose with "
    "{kind}(ember.stop_gradient(x))"
)

__all__ = ["Tensor", "raw_value"]


class Tensor:
    """A differentiable array of one backend; see the module docstring.

    Create tensors with a wrapper namespace, e.g.::

        import ember.autodiff.numpy as xp
        x = xp.asarray([1.0, 2.0])
    """

    __slots__ = ("_value", "_node", "__weakref__")
    __hash__ = None  # == is elementwise, as for every array-API array
    __array_priority__ = 1000  # NumPy defers reflected operators to Tensor
    _ns = None  # set on the per-namespace subclass

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "ember.Tensor is not created directly: use a wrapper namespace, e.g. "
            "`import ember.autodiff.numpy as xp; xp.asarray(data)`"
        )

    # ----- attributes (read from the backend array) -----------------------
    @property
    def raw(self):
        """The backend array under all trace levels (no gradient flows through it)."""
        x = self
        while x._node is not None:
            if x._node.trace.stages and x._node.trace.active and not _internal(sys._getframe(1)):
                raise _staged_error(self, "x.raw")  # ember.jit is staging: the value is unknown
                # (ember's own code reads shapes through .raw: allowed)
            x = x._value
        return x._value

    # the backend array's dtype, read through every trace level (each level's ``_value`` is a
    # Tensor one level down, whose own dtype is this property again): C-level, no Python frame
    dtype = property(attrgetter("_value.dtype"), doc="The data type of the elements.")

    @property
    def shape(self):
        v = self._value
        while isinstance(v, Tensor):
            v = v._value
        s = v.shape
        return s if s.__class__ is tuple else tuple(s)

    # the same for ndim (a Python property cost a frame and raw_value's loop a read)
    ndim = property(attrgetter("_value.ndim"), doc="The number of axes.")

    @property
    def size(self):
        s = raw_value(self).size
        return None if s is None else int(s) if not isinstance(s, float) or s == s else None

    @property
    def device(self):
        v = raw_value(self)
        dev = getattr(v, "device", None)
        if dev is None:
            return type(self)._ns.__array_namespace_info__().default_device()
        return dev

    @property
    def T(self):
        return type(self)._ns.permute_dims(self, tuple(range(self.ndim))[::-1])

    @property
    def mT(self):
        return type(self)._ns.matrix_transpose(self)

    def __array_namespace__(self, /, *, api_version=None):
        ns = self._ns  # (a class attribute; a consume() marker reads its own)
        if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12"):
            raise ValueError(f"Unrecognized array API version: {api_version!r}")
        return ns

    def to_device(self, device, /, *, stream=None):
        return type(self)._ns._to_device(self, device, stream)

    # ----- conversion to Python scalars / NumPy ---------------------------
    def _scalar(self, kind):
        node = self._node
        if node is not None:
            _check_not_staged(self, f"{kind}()")
        if node is not None and node.trace.active and type(self)._ns.isdtype(
            self.dtype, ("real floating", "complex floating")
        ):  # (bool, integer: no gradient to cut, so `if xp.any(x > 0)` keeps working)
            raise NotDifferentiableError(TRACED_TO_SCALAR.format(
                kind=kind, dtype=self.dtype, shape=tuple(self.shape), level=node.trace.level))
        if self.ndim != 0:
            raise TypeError(
                f"{kind}() of a Tensor needs a 0-d tensor, got shape {self.shape}; "
                f"index it first, e.g. {kind}(x[0])"
            )
        return raw_value(self)

    def __bool__(self):
        return bool(self._scalar("bool"))

    def __float__(self):
        return float(self._scalar("float"))

    def __int__(self):
        return int(self._scalar("int"))

    def __complex__(self):
        return complex(self._scalar("complex"))

    def __index__(self):
        return self._scalar("index").__index__()

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d Tensor")
        n = self.shape[0]
        if n is None or n != n:
            raise TypeError(
                "len() of a Tensor whose first dimension is unknown (NaN, e.g. after a "
                "boolean mask on dask); resolve it with ember.distributed.resolve_sizes(x) "
                "or ember.compute(x)"
            )
        return n

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d Tensor")
        n = self.shape[0]
        if n is None or n != n:
            raise TypeError("iteration over a Tensor whose first dimension is unknown")
        for i in range(n):
            yield self[i, ...]

    def __array__(self, dtype=None, copy=None):
        node = self._node
        if node is not None:
            _check_not_staged(self, "conversion to a NumPy array")
        if node is not None and node.trace.active:  # (as JAX and PyTorch refuse it)
            raise NotDifferentiableError(TRACED_TO_NUMPY.format(level=node.trace.level))
        v = raw_value(self)
        conv = getattr(v, "__array__", None)
        if conv is None:
            raise TypeError(
                f"Tensor of backend {type(self)._ns._backend_name!r} cannot be converted to a "
                "NumPy array implicitly; move it first with ember.to_backend(x, 'numpy')"
            )
        if copy is None:
            return conv(dtype) if dtype is not None else conv()
        return conv(dtype, copy=copy) if dtype is not None else conv(copy=copy)

    def __dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
        kw = {k: v for k, v in (("stream", stream), ("max_version", max_version),
                                ("dl_device", dl_device), ("copy", copy)) if v is not None}
        return raw_value(self).__dlpack__(**kw)

    def __dlpack_device__(self, /):
        return raw_value(self).__dlpack_device__()

    def __repr__(self):
        ns = type(self)._ns
        node = self._node
        track = "" if node is None else f", traced at level {node.trace.level}"
        return f"Tensor({raw_value(self)!r}, backend={ns._backend_name!r}{track})"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("ember Tensors are not pickled; save them with ember.io.save")

    # consume(), share() and clone() are the ownership layer's: autodiff/_ownership.py adds
    # them to this class when it is imported (it builds on Tensor, so Tensor cannot import it)


def raw_value(x):
    """The backend array under every trace level of Tensor ``x`` (``x.raw`` as a function).

    Reading it cuts the gradient: use it for values that only steer (shapes,
    statistics kept as constants), never inside a function being differentiated
    for a value the result depends on.
    """
    while x._node is not None:
        x = x._value
    return x._value


def mixing_error(op: str, a, ns) -> BackendError:
    """Error for an argument that belongs to another namespace or library."""
    other = type(a)._ns._backend_name if isinstance(a, Tensor) else type(a).__module__.split(".")[0]
    return BackendError(
        f"{op}: cannot mix a tensor of namespace {ns._backend_name!r} with "
        f"{'a tensor of namespace' if isinstance(a, Tensor) else 'an array of library'} "
        f"{other!r}; move one with ember.to_backend(x, {ns._backend_name!r}) or "
        f"convert it with xp.asarray"
    )


def _check_not_staged(t, what: str) -> None:
    """Raise :class:`ember.TracingError` when ``t`` is staged by an active ``ember.jit``."""
    x = t
    while x._node is not None:
        tr = x._node.trace
        if tr.stages and tr.active:
            raise _staged_error(t, what)
        x = x._value


def _staged_error(t, what: str):
    from ._tracing_errors import concrete_value_error

    return concrete_value_error(t, what)


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _internal(frame) -> bool:
    """Whether ``frame`` runs ember's own code."""
    return os.path.abspath(frame.f_code.co_filename).startswith(_PKG)
