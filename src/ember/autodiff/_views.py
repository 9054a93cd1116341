"""Views under transforms: a write reaches every view, as it does outside them.

Outside transforms ``v = y[0:2]`` is a view on backends whose arrays alias
(``ember.backend.capabilities(xp).in_place``, e.g. NumPy): ``y[0] = 1`` then
changes ``v``, and ``v[0] = 1`` changes ``y``. Inside a transform an in-place
operator is a functional update that rebinds the written Tensor to a new
value (the tape keeps the old one), so without help ``v`` would keep the old
value and ``value_and_grad(f)`` would compute another value than ``f``.

This module keeps, for the tensors basic indexing makes while a transform
records, which base each view came from and with which key. After an
in-place write rebinds a tensor, :func:`written` carries the new value up
to its base (a functional ``setitem`` per level) and down again to every
other live view (a functional ``getitem``), so every handle holds what it
would hold eagerly, and gradients follow those recorded updates.

Only basic keys (ints, slices, ellipsis, None) make views; integer-array
and boolean-mask indexing copy, as in NumPy. Backends whose arrays do not
alias (Dask) keep eager semantics there too: their views never see writes.
"""

from __future__ import annotations

import weakref

from ._trace import active_traces

__all__ = ["note_view", "written", "basic_key"]

# id(view) -> (weakref to the view, its base Tensor (kept alive, as a NumPy view keeps its
# base), key); id(base) -> {id(view): weakref to the view}
_base_of: dict = {}
_views_of: dict = {}
_quiet = [False]  # True while written() rebinds views (their getitems are no new views)


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


def note_view(base, view, key) -> None:
    """Record that ``view`` is ``base[key]`` made while a transform records (basic ``key``)."""
    if _quiet[0] or not active_traces or not _aliases(base):
        return
    vid, bid = id(view), id(base)

    def gone(_ref, vid=vid, bid=bid):
        _base_of.pop(vid, None)
        kids = _views_of.get(bid)
        if kids is not None:
            kids.pop(vid, None)
            if not kids:
                del _views_of[bid]

    ref = weakref.ref(view, gone)
    _base_of[vid] = (ref, base, key)
    _views_of.setdefault(bid, {})[vid] = ref


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
        while entry is not None and entry[0]() is root:  # up: base[key] = view, level by level
            _, base, key = entry
            ns = type(base)._ns
            if ns is None:  # the base was consumed or released: nothing left to write into
                break
            new = ns._setitem(base, root, key=key)
            base._value, base._node = new._value, new._node
            root = base
            entry = _base_of.get(id(root))
        stack = [root]  # down: every other view of the tree, recomputed from its base
        while stack:
            b = stack.pop()
            for ref in list(_views_of.get(id(b), {}).values()):
                v = ref()
                if v is None:
                    continue
                if v is not t:  # (t holds its new value already; its own views follow it)
                    new = b[_base_of[id(v)][2]]
                    v._value, v._node = new._value, new._node
                stack.append(v)
    finally:
        _quiet[0] = False
