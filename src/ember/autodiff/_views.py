"""Views under transforms: a write reaches every view, as it does outside them.

Outside transforms ``v = y[0:2]`` is a view on backends whose arrays alias
(``ember.backend.capabilities(xp).in_place``, e.g. NumPy): ``y[0] = 1`` then
changes ``v``, and ``v[0] = 1`` changes ``y``. Inside a transform an in-place
operator is a functional update that rebinds the written Tensor to a new
value (the tape keeps the old one), so without help ``v`` would keep the old
value and ``value_and_grad(f)`` would compute another value than ``f``.

This module keeps, for the views made while a transform records, which base
each view came from and how: a *forward* map (base -> view) and, for views a
write may go through, an *inverse* (base, new view -> new base). After an
in-place write rebinds a tensor, :func:`written` carries the new value up to
its base (the inverse, level by level) and down again to every other live
view (the forward map), so every handle holds what it would hold eagerly,
and gradients follow those recorded updates.

The views are NumPy's:

- basic indexing (ints, slices, ellipsis, None); integer-array and
  boolean-mask indexing copy;
- ``permute_dims`` (and ``.T``), ``matrix_transpose`` (and ``.mT``),
  ``expand_dims``, ``squeeze`` and ``flip``;
- ``reshape`` when the backend made it a view (the layout allowed one,
  ``copy`` was not True: ``ember.backend.may_share_memory`` of the two
  backend arrays; an unknown answer counts as a view);
- ``broadcast_to``, which sees writes to its base; a write through it
  raises, as NumPy's read-only broadcast views do.

Backends whose arrays do not alias (Dask) keep eager semantics there too:
their views never see writes. Nor does memory borrowed from the caller
(``xp.asarray(numpy_array)`` without a copy): eagerly a write copies such a
buffer first, which cuts the written array off from its views
(:func:`before_write` does the same here).
"""

from __future__ import annotations

import weakref

from ._ownership import Dead
from ._ownership import _grave
from ._trace import active_traces

__all__ = ["note_view", "note_function_view", "written", "before_write", "check_writable", "basic_key", "VIEW_FUNCTIONS"]

# id(view) -> (weakref to the view, its base Tensor (kept alive, as a NumPy view keeps its
# base), forward: base -> view, inverse: (base, view) -> base or None when read-only);
# id(base) -> {id(view): weakref to the view}
_base_of: dict = {}
_views_of: dict = {}
_quiet = [False]  # True while written() rebinds views (their recomputations are no new views)

#: the namespace functions whose result is a view of their first argument (NumPy's)
VIEW_FUNCTIONS = ("reshape", "permute_dims", "matrix_transpose", "expand_dims", "squeeze",
                  "flip", "broadcast_to")


def basic_key(key) -> bool:
    """Whether indexing with ``key`` gives a view (ints, slices, ellipsis, None only)."""
    for k in key if key.__class__ is tuple else (key,):
        c = k.__class__
        if not (c is int or c is slice or k is Ellipsis or k is None):
            return False
    return True


def _aliases(t) -> bool:
    """Whether eager views of ``t``'s backend see writes (cached on the namespace)."""
    ns = type(t)._ns
    a = getattr(ns, "_views_alias", None)
    if a is None:
        from .. import backend

        a = ns._views_alias = bool(backend.capabilities(ns._backend).in_place)
    return a


def _record(base, view, forward, inverse) -> None:
    vid, bid = id(view), id(base)

    def gone(_ref, vid=vid, bid=bid):
        _base_of.pop(vid, None)
        kids = _views_of.get(bid)
        if kids is not None:
            kids.pop(vid, None)
            if not kids:
                del _views_of[bid]

    ref = weakref.ref(view, gone)
    _base_of[vid] = (ref, base, forward, inverse)
    _views_of.setdefault(bid, {})[vid] = ref


def note_view(base, view, key) -> None:
    """Record that ``view`` is ``base[key]`` made while a transform records (basic ``key``)."""
    if _quiet[0] or not active_traces or not _aliases(base):
        return
    _record(base, view, lambda b: b[key], lambda b, v: type(b)._ns._setitem(b, v, key=key))


def note_function_view(name, f, args, kwargs, view) -> None:
    """Record that ``view = f(*args, **kwargs)`` (namespace function ``name``) views ``args[0]``."""
    if _quiet[0] or not active_traces or not args:
        return
    base = args[0]
    T = getattr(type(base), "_ns", None)
    T = getattr(T, "_Tensor", None)
    if T is None or base.__class__ is not T or view.__class__ is not T or not _aliases(base):
        return
    from .. import backend

    if backend.may_share_memory(base._value, view._value) is False:
        return  # a copy (reshape of a non-contiguous layout, copy=True), as it is eagerly
    rest = args[1:]
    ns = T._ns

    def forward(b):
        return f(b, *rest, **kwargs)

    if name in ("reshape", "expand_dims", "squeeze"):
        def inverse(b, v):
            return ns.reshape(v, b.shape)
    elif name == "permute_dims":
        axes = rest[0] if rest else kwargs["axes"]
        n = len(axes)
        back = [0] * n
        for i, a in enumerate(axes):
            back[a % n] = i

        def inverse(b, v, back=tuple(back)):
            return ns.permute_dims(v, back)
    elif name == "matrix_transpose":
        def inverse(b, v):
            return ns.matrix_transpose(v)
    elif name == "flip":
        def inverse(b, v):
            return ns.flip(v, *rest, **kwargs)
    else:  # broadcast_to: read-only
        inverse = None
    _record(base, view, forward, inverse)


def before_write(t, op) -> None:
    """Run before a transform's in-place ``op`` rebinds ``t``: refuse a read-only view, and
    cut ``t`` out of its views when its memory is borrowed from the caller. Eagerly such a
    write copies the buffer first (``_ownership.guard_write``: the caller's array never
    changes), so neither the array ``t`` views nor the views of ``t`` see it; nor do they here."""
    if not _base_of:
        return
    tid = id(t)
    if tid not in _base_of and tid not in _views_of:
        return
    check_writable(t, op)
    from ._ownership import is_borrowed
    from ._tensor import raw_value

    if not is_borrowed(raw_value(t)):
        return
    entry = _base_of.pop(tid, None)
    if entry is not None:
        kids = _views_of.get(id(entry[1]))
        if kids is not None:
            kids.pop(tid, None)
            if not kids:
                del _views_of[id(entry[1])]
    for vid in _views_of.pop(tid, {}):  # its views keep viewing the caller's memory
        _base_of.pop(vid, None)


def check_writable(t, op) -> None:
    """Raise before ``op`` writes into ``t`` when ``t`` views read-only memory (broadcast_to)."""
    entry = _base_of.get(id(t))
    while entry is not None and entry[0]() is t:
        _, base, _, inverse = entry
        if inverse is None:
            from .._errors import ReadOnlyError
            from ._error_causes import READ_ONLY

            raise ReadOnlyError(READ_ONLY.format(
                op=op, shape=tuple(t.shape), dtype=t.dtype,
                how=f" (a view made by broadcast_to from an array of shape {tuple(base.shape)}, "
                    "as NumPy's broadcast views are outside transforms too)",
                other=", or into the array that was broadcast"))
        t = base
        entry = _base_of.get(id(t))


def _alive(t):
    """``t``, or for a consumed ``t`` the handle its consuming op got, whose value is still the
    storage of t's other aliases (no op writes into an aliased buffer); None when that op did
    write into it or nothing took the value yet."""
    if t.__class__ is not Dead:
        return t
    g = _grave(t)
    left = g.left
    if left is None:
        m = g.marker()
        if m is None or m._value is None:
            return None
        return m._mod._dispatch.make(m._value, m._node)
    return left if left._value is not None else None


def _rebind(t, new) -> None:
    """Give ``t`` (or, consumed, the value its aliases still share) the result of a write."""
    if t.__class__ is Dead:
        g = _grave(t)
        holder = g.left if g.left is not None else g.marker()
        if holder is not None and holder._value is not None:
            holder._value, holder._node = new._value, new._node
        return
    t._value, t._node = new._value, new._node


def written(t) -> None:
    """``t`` was just rebound by an in-place write: update its bases and all their views."""
    if not _base_of:
        return
    entry = _base_of.get(id(t))
    if entry is None and id(t) not in _views_of:
        return
    _quiet[0] = True
    try:
        root = t
        while entry is not None and entry[0]() is root:  # up: base = inverse(base, view)
            _, base, _, inverse = entry
            live = _alive(base)
            if live is None:  # its value is gone (an op wrote into it): nothing to write into
                break
            _rebind(base, inverse(live, _alive(root)))
            root = base
            entry = _base_of.get(id(root))
        stack = [root]  # down: every other view of the tree, recomputed from its base
        while stack:
            b = stack.pop()
            live = _alive(b)
            if live is None:
                continue
            for ref in list(_views_of.get(id(b), {}).values()):
                v = ref()
                if v is None:
                    continue
                if v is not t:  # (t holds its new value already; its own views follow it)
                    _rebind(v, _base_of[id(v)][2](live))
                stack.append(v)
    finally:
        _quiet[0] = False
