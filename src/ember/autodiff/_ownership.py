"""Ownership: ``consume`` / ``share`` / ``clone``, buffer reuse and safe writes.

Python keeps reference semantics and ops never write into their inputs,
unless the caller hands a buffer over with :func:`consume` (Burn's "an op
takes ownership of its input"). How it works:

- ``consume(x)`` returns a one-shot *marker* (class :class:`Owned`, not the
  namespace's Tensor class, so every fast path falls through to the slow
  path) and kills ``x``: its class becomes :class:`Dead`, whose every
  attribute, method and operator raises :class:`ember.ConsumedError` naming
  the file:line of the consume.
- The slow path (``_Dispatcher.normalize``) turns the marker into a *claim*.
  When the op runs without recording a tape node, :func:`run_owned` checks
  the reuse conditions (``why_not``) and, when they all hold, computes the
  result with ``out=`` into the consumed buffer. Otherwise it allocates,
  exactly as without consume; ``strict=True`` raises :class:`ember.ReuseError`
  naming the failed condition instead.
- A buffer is reusable only when the consumed handle is the *only* reference
  to the backend array: share handles, views (``.base``), ``x.raw`` held by
  the user and tape nodes (which keep their own handles) all add a
  reference, which ``sys.getrefcount`` sees. A consumed view is written only
  when it spans all of its base and nothing else holds the base (the
  transpose of a fresh result: ``_sole_view``).
- Borrowed arrays (``xp.asarray(a)`` without a copy, raw inputs of
  transforms) are never written: not by consume, and not by in-place
  operators, which copy first (copy-on-write). Buffers a live tape saved are
  copied before an in-place write too. ``config(on_hidden_copy=...)`` reports
  such copies.
"""

from __future__ import annotations

import sys
import warnings
import weakref

from .._config import CONFIG as _CONFIG
from .._config import config, get_config  # noqa: F401  (re-exported: ember.config started here)
from .._errors import ConsumedError, ReuseError
from ._tensor import Tensor, raw_value
from ._api_tables import REDUCTIONS, RESULT, UFUNC

__all__ = [
    "check_alive",
    "guard_write",
    "consume",
    "share",
    "clone",
    "config",
    "get_config",
    "Owned",
    "Dead",
    "HiddenCopyWarning",
    "mark_borrowed",
    "is_borrowed",
]

# --------------------------------------------------------------------------- #
# messages (module-level so tests can check them)
# --------------------------------------------------------------------------- #
USED_AFTER_CONSUME = (
    "{op}: this tensor was consumed at {where}{by} and can no longer be used. "
    "Fix: keep a handle before consuming (`s = x.share()` or `c = x.clone()`) and use "
    "that, or do not consume x"
)
CONSUMED_TWICE = (
    "consume: this tensor was already consumed at {where}; a buffer can be handed over "
    "only once. Fix: consume the value the first consume produced (its result), or "
    "take `x.clone()` before the first consume"
)
MARKER_SPENT = (
    "{op}: the value returned by consume() at {where} was already handed to `{by}`; "
    "a consumed value can be passed to one op only. Fix: call consume() again on the "
    "result you want to hand over, or pass a handle (x.share()) instead"
)
SAME_TWICE = (
    "{op}: the same tensor was passed twice, once through consume() (at {where}) and "
    "once directly; the op may write its result into that buffer while still reading "
    "it through the other argument. Fix: take a second handle first "
    "(`s = x.share(); f(consume(x), s)`; no buffer is reused then), or do not consume x"
)
NOT_A_TENSOR = (
    "{op}: expected an ember Tensor, got {kind}. Fix: wrap it first, e.g. "
    "`xp.asarray(a, copy=True)` (ember never writes into an array it borrowed without a copy)"
)
HIDDEN_COPY = (
    "{op}: copied a buffer of shape {shape} and dtype {dtype} before writing in place, "
    "because {reason}. Fix: {fix} (or silence this with ember.config(on_hidden_copy='ignore'))"
)

#: ReuseError reasons (``{op}``, ``{where}`` and the extras are filled in).
REUSE_PREFIX = "{op}: could not reuse the buffer of consume(x, strict=True) (consumed at {where}): "
REASONS = {
    "tracked": (
        "x is tracked by a transform (grad/vjp), so its tape keeps x's value for the "
        "backward pass. Fix: inside a transform consume only untracked values, or drop "
        "strict=True (the op then allocates, and gradients stay correct)"
    ),
    "tape": (
        "`{op}` records a tape node that keeps its inputs for the backward pass. "
        "Fix: drop strict=True here (the op allocates), or consume outside the transform"
    ),
    "backend": (
        "backend {backend!r} cannot write in place (capabilities: in_place={in_place}, "
        "out_param={out_param}); it accepts consume but always allocates. Fix: drop "
        "strict=True on this backend"
    ),
    "borrowed": (
        "x's buffer is borrowed from an array you passed in without a copy "
        "(xp.asarray(a) or a raw input of a transform) and ember never writes into it. "
        "Fix: create x with xp.asarray(a, copy=True)"
    ),
    "view": (
        "x is a view of another array (slicing, reshape, permute_dims, broadcast_to... "
        "return views) and does not own its memory. Fix: consume the array it views, or "
        "x.clone() it first"
    ),
    "readonly": "x's buffer is read-only. Fix: consume a writeable copy (x.clone())",
    "shared": (
        "{extra} other reference(s) to x's buffer are alive (a x.share() handle, a view "
        "such as x[...] or xp.reshape(x, ...), an array obtained through x.raw, or a tape "
        "node that saved x). Fix: delete those references (`del s`) before the op, or "
        "drop strict=True"
    ),
    "op": (
        "`{op}` has no in-place form (supported: elementwise functions and operators, "
        "where, clip). Fix: drop strict=True for this op"
    ),
    "shape": (
        "the result has shape {shape} but x has shape {xshape}. Fix: consume the input "
        "whose shape equals the broadcast result shape"
    ),
    "dtype": (
        "the result has dtype {dtype} but x has dtype {xdtype}. Fix: cast x first "
        "(xp.astype) or consume an input of the result dtype"
    ),
    "other": (
        "another consumed input of the same op already receives the result. Fix: consume "
        "only one input per op"
    ),
}

class HiddenCopyWarning(UserWarning):
    """An in-place write had to copy a protected buffer first (borrowed or tape-saved)."""


def _report_copy(op, arr, reason, fix):
    mode = _CONFIG["on_hidden_copy"]
    if mode == "ignore":
        return
    msg = HIDDEN_COPY.format(op=op, shape=tuple(arr.shape), dtype=arr.dtype, reason=reason, fix=fix)
    if mode == "error":
        raise ReuseError(msg)
    warnings.warn(msg, HiddenCopyWarning, stacklevel=4)


# --------------------------------------------------------------------------- #
# dead tensors
# --------------------------------------------------------------------------- #
class _Grave:
    """What a dead tensor keeps in ``_value``: where it was consumed and by which op."""

    __slots__ = ("where", "op", "marker", "left")

    def __init__(self, where, marker):
        self.where = where
        self.op = None
        self.marker = weakref.ref(marker) if marker is not None else _no_marker
        # the handle the consuming op got: its value stays the storage of x's other aliases
        # (shares, views) unless that op wrote into it (run_owned then empties the handle)
        self.left = None


def _no_marker():  # (a grave of donate(): no marker was made)
    return None


def _grave(t):
    return object.__getattribute__(t, "_value")


def _dead_message(t, op):
    g = _grave(t)
    by = f" (handed to `{g.op}`)" if g.op else ""
    return USED_AFTER_CONSUME.format(op=op, where=g.where, by=by)


_DEAD_OK = frozenset(("__class__", "_consumed_at", "__array_priority__", "__weakref__"))


class Dead(Tensor):
    """The class of a consumed tensor: every use raises :class:`ember.ConsumedError`."""

    __slots__ = ()

    def __getattribute__(self, name):
        if name in _DEAD_OK:
            return object.__getattribute__(self, name)
        raise ConsumedError(_dead_message(self, f"x.{name}"))

    @property
    def _consumed_at(self):
        return _grave(self).where

    def consume(self, strict=False):  # noqa: D102 (raises)
        raise ConsumedError(CONSUMED_TWICE.format(where=_grave(self).where))


def _dead_op(opname):
    def m(self, *args, **kwargs):
        for a in args:
            if a.__class__ is Owned and a._src is self:
                raise ConsumedError(SAME_TWICE.format(op=opname, where=a._where))
        raise ConsumedError(_dead_message(self, opname))

    m.__name__ = opname
    return m


_DEAD_NAMES = (
    "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift divmod".split()
)
for _n in _DEAD_NAMES:
    for _form in ("__{}__", "__r{}__", "__i{}__"):
        setattr(Dead, _form.format(_n), _dead_op(_form.format(_n)))
for _n in (
    "lt le gt ge eq ne neg pos abs invert bool float int complex index len iter array "
    "dlpack dlpack_device repr str getitem setitem reduce array_namespace format".split()
):
    setattr(Dead, f"__{_n}__", _dead_op(f"__{_n}__"))
for _n in ("to_device", "share", "clone", "_scalar"):
    setattr(Dead, _n, _dead_op(_n))
Dead.__hash__ = None


def check_alive(t, op: str) -> None:
    """Raise ConsumedError if ``t`` is a dead (consumed) tensor or a spent marker."""
    c = t.__class__
    if c is Dead:
        raise ConsumedError(_dead_message(t, op))
    if c is Owned and t._spent is not None:
        raise ConsumedError(MARKER_SPENT.format(op=op, where=t._where, by=t._spent))


# --------------------------------------------------------------------------- #
# consume markers
# --------------------------------------------------------------------------- #
class Owned(Tensor):
    """What ``consume(x)`` returns: x's value, handed to the next op that receives it.

    Not the namespace's Tensor class, so every fast path falls through to the
    slow path, which decides whether the op may write into x's buffer.
    """

    __slots__ = ("_src", "_where", "_strict", "_mod", "_spent")

    @property
    def _ns(self):  # the namespace (Tensor subclasses have it as a class attribute)
        return self._mod

    def __repr__(self):
        if self._spent is not None:
            return f"<consumed value (consumed at {self._where}, handed to {self._spent!r})>"
        return f"<consumed value of shape {self.shape} (consumed at {self._where})>"

    __str__ = __repr__

    def _plain(self):
        """A regular tensor holding the marker's value (spends the marker)."""
        return as_operand(self, "use")


def _owned_binop(fname, reflected):
    def m(self, other):
        f = getattr(self._mod, fname)
        return f(other, self) if reflected else f(self, other)

    return m


def _install_owned_methods():
    from ._api_tables import BINARY_OPERATORS, COMPARISONS, UNARY_OPERATORS

    for opname, fname in BINARY_OPERATORS.items():
        setattr(Owned, f"__{opname}__", _owned_binop(fname, False))
        setattr(Owned, f"__r{opname}__", _owned_binop(fname, True))
        setattr(Owned, f"__i{opname}__", _owned_binop(fname, False))  # x = op(x, y)
    for opname, fname in COMPARISONS.items():
        setattr(Owned, f"__{opname}__", _owned_binop(fname, False))
    for opname, fname in UNARY_OPERATORS.items():
        setattr(Owned, f"__{opname}__", (lambda fname: lambda self: getattr(self._mod, fname)(self))(fname))

    def getitem(self, key):
        return self._plain()[key]

    Owned.__getitem__ = getitem
    Owned.__hash__ = None


_install_owned_methods()


def _where(depth):
    f = sys._getframe(depth + 1)
    return f"{f.f_code.co_filename}:{f.f_lineno}"


def consume(x, strict: bool = False, *, _depth: int = 1):
    """Hand ``x``'s buffer to the next op that receives the returned value.

    Why: memory-bound code (inference, elementwise chains) spends its time
    allocating; a consuming op writes its result into x's buffer when that is
    safe (x is the only handle, no view aliases it, no tape saved it, the
    result fits, the backend writes in place) and allocates otherwise. After
    the call x is dead: any use raises :class:`ember.ConsumedError`.
    ``strict=True`` raises :class:`ember.ReuseError` instead of allocating.

    A structure (dict, list, tuple, dataclass module...) is consumed leaf by
    leaf: its Tensors become markers, other leaves stay as they are. That is
    how an optimizer receives gradients it may write the new parameters into:
    ``opt.update(params, ember.consume(grads), state)``. A Tensor at several
    leaves (tied weights) is consumed once: its first leaf becomes the marker and
    the others shares of it, so no op writes into the buffer they still read
    (as ``jit``'s ``donate`` treats it).

    >>> import ember, ember.autodiff.numpy as xp
    >>> y = xp.ones(3) * 2.0
    >>> y = xp.sin(ember.consume(y))   # written into y's old buffer
    """
    if isinstance(x, Tensor):
        return _consume(x, strict, _where(_depth))
    from .. import tree as _tree

    leaves, td = _tree.flatten(x)
    if not any(isinstance(a, Tensor) for a in leaves):
        raise TypeError(NOT_A_TENSOR.format(op="consume", kind=type(x).__module__.split(".")[0] + "." + type(x).__name__))
    where = _where(_depth)  # a structure: its Tensors, consumed at this one line
    first = {}  # id -> position of a Tensor's first leaf
    shares = {}  # positions of later leaves of a Tensor seen before -> its share
    for i, a in enumerate(leaves):
        if isinstance(a, Tensor):
            if id(a) in first:
                check_alive(a, "consume")  # (its CONSUMED_TWICE error below, else a share)
                if a.__class__ is not Owned:
                    shares[i] = a.share()
            else:
                first[id(a)] = i
    return td.unflatten([shares[i] if i in shares else _consume(a, strict, where) if isinstance(a, Tensor) else a
                         for i, a in enumerate(leaves)])


def _consume(x, strict, where):
    c = x.__class__
    if c is Dead:
        raise ConsumedError(CONSUMED_TWICE.format(where=_grave(x).where))
    if c is Owned:
        raise ConsumedError(CONSUMED_TWICE.format(where=x._where))
    mod = c._ns
    if strict:  # static conditions fail early, at the consume line, leaving x alive
        reason = _static_reason(mod._dispatch, x)
        if reason is not None:
            raise ReuseError(_reuse_message(reason, "consume", where, **_extras(mod._dispatch, reason, {})))
    m = object.__new__(Owned)
    m._value = x._value
    m._node = x._node
    m._src = x
    m._where = where
    m._strict = bool(strict)
    m._mod = mod
    m._spent = None
    x._value = _Grave(where, m)
    x._node = None
    x.__class__ = Dead
    return m


def donate(x, op, where):
    """``as_operand(consume(x), op)`` in one step, for a call that consumes many arguments
    (``jit``'s donated ones): ``x`` (a live, plain Tensor) is dead from here, consumed at
    ``where`` and handed to ``op``; returns the Tensor holding its value, which stays the
    storage of x's other aliases unless ``op`` writes into it (then it empties that handle)."""
    d = x.__class__._ns._dispatch
    v, node = x._value, x._node
    while node is not None and not node.trace.active:  # leaked from a finished transform
        v, node = v._value, v._node
    t = d.make(v, node)
    g = _Grave(where, None)
    g.op = op
    g.left = t
    x._value = g
    x._node = None
    x.__class__ = Dead
    return t


def share(x):
    """A second handle on x's storage (no copy); a later consume of either cannot reuse it.

    Why: Burn-style explicit aliasing. Writes through one handle are seen by
    the other, exactly like two names of one NumPy array.
    """
    if not isinstance(x, Tensor):
        raise TypeError(NOT_A_TENSOR.format(op="share", kind=type(x).__name__))
    check_alive(x, "share")
    if x.__class__ is Owned:
        x = x._plain()
    h = x.__class__()  # (of x's own class: a vmap's batched value stays batched)
    h._value = x._value
    h._node = x._node
    return h


def clone(x):
    """A copy of ``x`` with its own buffer (differentiable).

    Raw arrays are copied with their own namespace.
    """
    if not isinstance(x, Tensor):
        import array_api_compat

        return array_api_compat.array_namespace(x).asarray(x, copy=True)
    check_alive(x, "clone")
    if x.__class__ is Owned:
        x = x._plain()
    return x._ns._copy(x)


# --------------------------------------------------------------------------- #
# claims: consume markers reaching the slow path
# --------------------------------------------------------------------------- #
def claim(d, op, m):
    """Turn marker ``m`` into a Tensor of namespace ``d`` and record the claim on ``d``."""
    if m._spent is not None:
        raise ConsumedError(MARKER_SPENT.format(op=op, where=m._where, by=m._spent))
    if m._mod is not d.module:
        from ._tensor import mixing_error

        raise mixing_error(op, m._src, d.module)
    v, node = m._value, m._node
    tracked = False
    while node is not None and not node.trace.active:  # leaked from a finished transform
        tracked = True  # a finished, possibly retained tape may still need this value
        v, node = v._value, v._node
    t = d.make(v, node)
    m._value = m._node = None
    m._spent = op
    g = _grave(m._src)
    g.op = op
    g.left = t
    d._claims.append((t, m, tracked or node is not None))
    return t


class Writer:
    """The backend's ufuncs of one namespace, by name, for writing into consumed buffers.

    ``w.add(a, b, out=buf)`` runs the backend's own ``add`` on backend arrays
    or scalars, with ``out=`` a buffer from :func:`take_buffer` (which may be
    one of them); each name is looked up once (standard names, e.g. ``pow``).
    """

    def __init__(self, d):
        self._d = d

    def __getattr__(self, name):  # the first use of a name only
        f = _ufunc(self._d, name)
        if not f:
            raise AttributeError(f"Writer: the backend of {self._d.bname} has no ufunc {name!r}")
        self.__dict__[name] = f
        return f


_WRITERS: dict = {}  # dispatcher -> Writer


def take_buffer(m, op, like):
    """Spend marker ``m`` on ``op``, which computes a result of ``like``'s shape and dtype
    (an untracked Tensor of ``m``'s namespace) itself: ``(t, w, buf)``, with ``t`` a Tensor
    of the value and, when ``op`` may write its result into the value's buffer, ``buf`` that
    backend array and ``w`` the namespace's :class:`Writer` (else both None; ``strict``
    markers raise :class:`ember.ReuseError` naming the reason instead)."""
    d = m._mod._dispatch
    t = claim(d, op, m)  # (t is the one holder of the value now, besides the call below)
    if d._claims.pop()[2]:
        why, info = "tracked", {}
    else:
        why, info = reuse_reason(d, t._value, like._value, 1)
    if why is not None:
        if m._strict:
            raise ReuseError(_reuse_message(why, op, m._where, **_extras(d, why, info)))
        return t, None, None
    return t, writer(d), t._value


def reuse_reason(d, r, like, holders):
    """Why a result of backend array ``like``'s shape and dtype may not be written into
    backend array ``r`` of namespace ``d``, as ``(why, info)``; ``(None, None)`` when it may.

    ``holders``: the references to ``r`` the caller knows of (its own included); any
    other one means someone else may read the buffer ("shared"). The other reasons are
    :func:`_buffer_reason`'s and a different shape or dtype.
    """
    why = _buffer_reason(d, r)
    if why is not None:
        return why, {}
    extra = sys.getrefcount(r) - 2 - holders  # (r: this call's argument and getrefcount's)
    if extra > 0:
        return "shared", {"extra": extra}
    if r.dtype != like.dtype or r.shape != like.shape:
        info = {"shape": tuple(like.shape), "xshape": tuple(r.shape), "dtype": like.dtype, "xdtype": r.dtype}
        return ("dtype" if r.dtype != like.dtype else "shape"), info
    return None, None


def writer(d) -> Writer:
    """The :class:`Writer` of namespace dispatcher ``d`` (one per namespace)."""
    w = _WRITERS.get(d)
    if w is None:
        w = _WRITERS[d] = Writer(d)
    return w


def as_operand(m, op):
    """The value of marker ``m`` as a plain Tensor (spending it); used where no reuse applies."""
    check_alive(m, op)
    if m.__class__ is not Owned:
        return m
    d = m._mod._dispatch
    t = claim(d, op, m)
    claims, d._claims = d._claims, []
    fail_claims(d, op, claims, "op")
    return t


def same_twice(op, args):
    """Raise the specific error when ``consume(x)`` and x itself are arguments of one op."""
    srcs = {id(a._src): a for a in args if a.__class__ is Owned}
    for a in args:
        if a.__class__ is Dead and id(a) in srcs:
            raise ConsumedError(SAME_TWICE.format(op=op, where=srcs[id(a)]._where))


def _reuse_message(reason, op, where, **extra):
    return REUSE_PREFIX.format(op=op, where=where) + REASONS[reason].format(op=op, **extra)


def fail_claims(d, op, claims, reason, **extra):
    """No buffer is reused in this op: raise for strict claims, else do nothing."""
    for t, m, tracked in claims:
        if m._strict:
            r = "tracked" if tracked else reason
            raise ReuseError(_reuse_message(r, op, m._where, **_extras(d, r, extra)))


def _extras(d, reason, extra):
    if reason == "backend":
        from .. import backend

        caps = backend.capabilities(d.xp)
        return {"backend": d.bname, "in_place": caps.in_place, "out_param": caps.out_param}
    return extra


# --------------------------------------------------------------------------- #
# which buffers are protected
# --------------------------------------------------------------------------- #
_borrowed: dict = {}


def _owner(r):
    """The array that owns ``r``'s memory (walking ``.base``), or None for external memory."""
    b = getattr(r, "base", None)
    while b is not None:
        if not hasattr(b, "shape") or not hasattr(b, "dtype"):
            return None  # bytes, memoryview, mmap...: memory ember did not allocate
        r = b
        b = getattr(r, "base", None)
    return r


def mark_borrowed(r) -> None:
    """Record that backend array ``r`` (and anything viewing its owner) belongs to the caller."""
    o = _owner(r)
    if o is None:
        return
    key = id(o)
    try:
        ref = weakref.ref(o, lambda _, key=key: _borrowed.pop(key, None))
    except TypeError:
        return
    _borrowed[key] = ref


def is_borrowed(r) -> bool:
    """True when ``r``'s memory belongs to an array passed in without a copy."""
    o = r if getattr(r, "base", None) is None else _owner(r)  # (no walk for an owner)
    if o is None:
        return True
    if not _borrowed:
        return False
    ref = _borrowed.get(id(o))
    return ref is not None and ref() is o


def _tape_sees(r) -> bool:
    """True when a live (finished but retained) tape keeps a value on ``r``'s memory."""
    from ._trace import live_traces

    o = _owner(r)
    for tr in list(live_traces):
        for node in tr.nodes:
            vals = []
            if node.args:
                vals.extend(node.args)
            ans = node.ans
            if isinstance(ans, (tuple, list)):
                vals.extend(ans)
            elif ans is not None:
                vals.append(ans)
            for v in vals:
                if isinstance(v, Tensor) and v.__class__ is not Dead:
                    w = raw_value(v)
                    if w is r or (o is not None and _owner(w) is o):
                        return True
    return False


def guard_write(t, op: str) -> None:
    """Run before ``op`` writes into ``t``'s buffer in place (outside transforms).

    Copies the buffer first (copy-on-write of that one buffer) when the
    memory is borrowed from the caller or a live tape saved it, so neither
    ever sees the write; ``config(on_hidden_copy=...)`` reports the copy.
    """
    r = t._value
    if getattr(r, "base", None) is None and not _borrowed:
        from ._trace import live_traces

        if not live_traces:
            return
    if is_borrowed(r):
        if _read_only_broadcast(r):  # (the write raises ReadOnlyError, as on ember's own arrays)
            return
        reason = "the buffer is borrowed from an array passed in without a copy"
        fix = "create the tensor with xp.asarray(a, copy=True)"
    else:
        from ._trace import live_traces

        if not live_traces or not _tape_sees(r):
            return
        reason = "a tape (e.g. a vjp function still alive) saved this buffer for backward"
        fix = "write into a clone, or let the vjp function go before writing"
    _report_copy(op, r, reason, fix)
    t._value = t._ns._dispatch.xp.asarray(r, copy=True)


def _read_only_broadcast(r) -> bool:
    """Whether ``r`` is a read-only view repeating memory (a zero stride along an axis of
    several elements: ``broadcast_to``'s): a write into it is refused whoever owns the
    memory, so it gets no copy that would let it through."""
    flags = getattr(r, "flags", None)
    if flags is None or flags.writeable:
        return False
    return any(st == 0 and n > 1 for st, n in zip(r.strides, r.shape))


def _static_reason(d, x):
    """A reuse condition that fails whatever the op (or None)."""
    if x._node is not None:
        return "tracked"
    return _buffer_reason(d, x._value)


def _buffer_reason(d, r):
    """Why backend array ``r``'s memory may not be written in place whatever the op (or
    None): the backend cannot, the memory is borrowed, ``r`` is a view, or read-only."""
    if not _backend_writes(d):
        return "backend"
    if is_borrowed(r):
        return "borrowed"
    if getattr(r, "base", None) is not None and not _sole_view(r):
        return "view"
    flags = getattr(r, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):
        return "readonly"
    return None


def _sole_view(r, held: int = 0) -> bool:
    """Whether view ``r`` may be written as if it owned its memory: it spans all of its base
    (contiguous in C or Fortran order, the same bytes) and nothing but ``r`` holds that base
    (``held``: references to the base the caller itself holds). The transpose of a fresh
    result is such a view (``nn.linear``'s weight gradient for a column-major weight); a
    slice, a broadcast, a view of a base anyone else holds is not."""
    base = r.base
    # the base owns its memory, and its references are r's, this frame's and getrefcount's
    if getattr(base, "base", 0) is not None or sys.getrefcount(base) != 3 + held:
        return False
    flags = getattr(r, "flags", None)
    return (flags is not None and (flags.c_contiguous or flags.f_contiguous)
            and r.nbytes == getattr(base, "nbytes", -1))


def _backend_writes(d) -> bool:
    """Whether backend ``d`` can write results into a given buffer (cached per namespace)."""
    ok = _WRITES.get(d)
    if ok is None:
        from .. import backend

        caps = backend.capabilities(d.xp)
        ok = _WRITES[d] = bool(caps.base_views and caps.in_place and caps.out_param)
    return ok


_WRITES: dict = {}


def _extra_refs(t) -> int:
    # holders expected here: t._value and getrefcount's argument
    return sys.getrefcount(t._value) - 2


# --------------------------------------------------------------------------- #
# running an op into a consumed buffer
# --------------------------------------------------------------------------- #
_FLOAT_UNARY = {n for n, r in RESULT.items() if r == "float"}
_SAME_UNARY = {n for n, r in RESULT.items() if r == "same"}
_REAL_UNARY = {n for n, r in RESULT.items() if r == "real"}
_FLOAT_BINARY = {n for n, r in RESULT.items() if r == "float2"}
_PROMOTE_BINARY = {n for n, r in RESULT.items() if r == "promote"}
_ALIASES = {n: u for n, u in UFUNC.items() if n not in REDUCTIONS}
_ufuncs: dict = {}


def _ufunc(d, name):
    key = (id(d), name)
    f = _ufuncs.get(key)
    if f is None:
        from .. import backend

        lib = backend.raw(d.xp)
        f = getattr(lib, _ALIASES.get(name, name), None) or getattr(lib, name, None)
        if f is None or not hasattr(f, "nin"):
            f = False
        _ufuncs[key] = f
    return f


def _out_kernel(d, name):
    """What writes op ``name``'s result into a buffer (``out=``): the backend's ufunc, or the
    namespace's faster kernel around it where that takes ``out=`` itself (``takes_out``: NumPy's
    float32 ``maximum`` with a scalar, see autodiff/_direct.py)."""
    f = _ufunc(d, name)
    fix = d.fixes.get(name) if f else None
    return fix if getattr(fix, "takes_out", False) and getattr(fix, "plain", None) is f else f


def _kind(xp, dt):
    """'real', 'complex' or 'other' (integer, bool) for dtype ``dt``; cached."""
    k = _KINDS.get((xp, dt))
    if k is None:
        if xp.isdtype(dt, "real floating"):
            k = "real"
        elif xp.isdtype(dt, "complex floating"):
            k = "complex"
        else:
            k = "other"
        _KINDS[(xp, dt)] = k
    return k


_KINDS: dict = {}


def _same_layout(raw, r, rk) -> bool:
    """True when every operand is ``r``, an array of r's dtype and shape, or a Python
    int/float against a floating ``r``: then the result has r's dtype and shape
    without asking result_type / broadcast_shapes (the common case, and fast)."""
    if rk == "other":
        return False
    dt, shape = r.dtype, r.shape
    for a in raw:
        if a is r:
            continue
        c = a.__class__
        if c is float or c is int:
            continue
        if c is not r.__class__ or a.dtype != dt or a.shape != shape:
            return False
    return True


def _plan(d, name, raw, params, r):
    """(reason, kernel) for writing op ``name`` on ``raw`` args into ``r``."""
    xp = d.xp
    rk = _kind(xp, r.dtype)
    if name in _FLOAT_UNARY or name in _SAME_UNARY or name in _REAL_UNARY:
        if name in _FLOAT_UNARY and rk == "other" or name in _REAL_UNARY and rk == "complex":
            return "dtype", None
        if raw[0] is not r:
            return "shape", None
        f = _ufunc(d, name)
        return (None, lambda: f(r, out=r)) if f else ("op", None)
    arrays = [a for a in raw if hasattr(a, "shape")]
    if name in _FLOAT_BINARY or name in _PROMOTE_BINARY:
        if not _same_layout(raw, r, rk):
            try:
                dt = xp.result_type(*raw)
            except Exception:
                return "dtype", None
            if dt != r.dtype or name in _FLOAT_BINARY and rk == "other":
                return "dtype", None
            if xp.broadcast_shapes(*[tuple(a.shape) for a in arrays]) != tuple(r.shape):
                return "shape", None
        f = _out_kernel(d, name)
        return (None, lambda: f(*raw, out=r)) if f else ("op", None)
    if name == "where":
        cond, a, b = raw
        try:
            dt = xp.result_type(a, b)
        except Exception:
            return "dtype", None
        if dt != r.dtype:
            return "dtype", None
        if xp.broadcast_shapes(*[tuple(v.shape) for v in arrays]) != tuple(r.shape):
            return "shape", None
        lib = _lib(d)
        copyto = getattr(lib, "copyto", None)
        if copyto is None:
            return "op", None
        if b is r and a is not r:
            return None, lambda: (copyto(r, a, where=cond), r)[1]
        if a is r and b is not r:
            return None, lambda: (copyto(r, b, where=lib.logical_not(cond)), r)[1]
        return "op", None
    if name == "clip":
        x, lo, hi = raw
        if x is not r:
            return "op", None
        shapes = [tuple(v.shape) for v in arrays]
        if xp.broadcast_shapes(*shapes) != tuple(r.shape):
            return "shape", None
        if lo is None and hi is None:
            return None, lambda: r
        lib = _lib(d)
        return None, lambda: lib.clip(r, lo, hi, out=r)
    return "op", None


def _lib(d):
    from .. import backend

    return backend.raw(d.xp)


def run_owned(d, name, impl, norm, params, claims):
    """Compute op ``name`` writing into a consumed buffer when allowed; None to allocate."""
    T = d.T
    target = None
    reason = None
    info = {}
    for i, (t, m, tracked) in enumerate(claims):
        if tracked:
            why = "tracked"
        elif target is not None:
            why = "other"
        else:
            why = _static_reason(d, t)
            if why is None:
                extra = _extra_refs(t)
                if extra > 0:
                    why, info = "shared", {"extra": extra}
        if why is None:
            target = t
            continue
        if m._strict:
            raise ReuseError(_reuse_message(why, name, m._where, **_extras(d, why, info)))
        reason = why
    if target is None:
        return None
    r = target._value
    raw = [raw_value(a) if a.__class__ is T else a for a in norm]
    why, kernel = _plan(d, name, raw, params, r)
    if why is not None:
        m = next(m for t, m, _ in claims if t is target)
        if m._strict:
            extra = {}
            if why in ("shape", "dtype"):
                res = impl(*raw, **params)
                extra = {"shape": tuple(res.shape), "xshape": tuple(r.shape),
                         "dtype": res.dtype, "xdtype": r.dtype}
            raise ReuseError(_reuse_message(why, name, m._where, **extra))
        return None
    del reason
    try:
        out = kernel()
    except Exception as e:
        from ._op_errors import op_error

        raise op_error(name, e, raw) from e
    if out is not r:
        return None if out is None else d.wrap(out)
    target._value = None  # the one handle on r moves to the result
    return d.make(r, None)


def borrow(res, obj) -> None:
    """Mark ``res`` borrowed when ``asarray`` returned memory of the caller's ``obj``."""
    if res is obj:
        mark_borrowed(res)
        return
    o = _owner(obj) if hasattr(obj, "shape") else None
    ro = _owner(res)
    if ro is None or (o is not None and ro is o):
        mark_borrowed(res if ro is None else ro)


# --------------------------------------------------------------------------- #
# the Tensor methods of ownership
# --------------------------------------------------------------------------- #
def _consume_method(self, strict=False):
    """Hand this tensor's buffer to the next op (see ``ember.consume``); self dies."""
    return consume(self, strict, _depth=2)


def _share_method(self):
    """A second handle on the same storage, no copy (see ``ember.share``)."""
    return share(self)


def _clone_method(self):
    """A copy with its own buffer (differentiable; see ``ember.clone``)."""
    return clone(self)


for _name, _method in (("consume", _consume_method), ("share", _share_method), ("clone", _clone_method)):
    _method.__name__ = _method.__qualname__ = _name
    setattr(Tensor, _name, _method)
del _name, _method
