"""Forward mode: each op's tangent computed as the op runs (one pass, no tape kept).

A forward trace is a :class:`~ember.autodiff.Trace` whose *interpreter* (the
``saver`` hook every recorded op calls, see ``_namespace``) computes the new
node's tangent from its inputs' tangents right away, stores it in the node's
``g`` and drops the tape: the dispatcher, its fast paths and the nesting by
levels are the reverse mode's, so forward mode composes with ``grad`` both
ways (``jvp(grad(f))``, ``grad`` of a ``jvp``) at no cost to reverse mode.

The tangent of one op, in the order tried:

1. the rule's own JVP (``defjvp``; ``jvp(ns, tangents, ans, args, params)``);
2. elementwise ops: from the per-argument VJPs, which are the diagonal of the
   Jacobian: ``t * d`` is the VJP of cotangent ``t`` at inputs broadcast to the
   output's shape (conjugated around it for holomorphic complex ops); on backend
   arrays where nothing records the tangent, as the first-order backward does;
3. linear ops (reshape, sum, getitem, fft, ...): the op applied to the tangents;
4. bilinear ops (matmul, tensordot, vecdot, outer, cross): ``op(ta, b) + op(a, tb)``;
5. any other rule: its VJP transposed, one op at a time: ``J t`` is the gradient
   in ``u`` of ``<VJP(u), t>`` (a reverse pass over that one op).

Tangents are computed with the namespace one level down, so outer traces
record them (higher order).
"""

from __future__ import annotations

from ._rules import SELECT
from ._rules._util import is_complex
from ._tensor import Tensor
from ._trace import LeafNode, Trace, backward
from ._api_tables import BILINEAR, LINEAR, NOT_HOLOMORPHIC

__all__ = ["forward_trace", "leaf", "tangent_of", "LINEAR", "BILINEAR"]

# the op categories forward mode reads (the one table, _api_tables)


def tangent_of(node):
    """The tangent held for ``node`` of a forward trace (None: zero)."""
    if node is None:
        return None
    if node.rule is SELECT:
        slots = node.parents[0].g
        return None if slots is None else slots[node.params]
    return node.g


def _interpret(node, impl) -> None:
    """The forward trace's hook (its ``saver``): the tangent of each op as it is recorded."""
    node.trace.nodes.clear()  # no tape: each node lives as long as its result does
    rule = node.rule
    if rule.arity and rule.jvp is None and rule.elementwise:  # the common case, on backend arrays
        g = _elementwise_raw(node, rule.fns)
        if g is not _GENERAL:
            node.g = g
            node.args = node.params = None
            return
    tangents = [tangent_of(p) for p in node.parents]
    for t in tangents:
        if t is not None:
            node.g = _jvp(node, impl, tangents)
            break
    node.args = node.params = None


def forward_trace() -> Trace:
    """A new trace whose ops compute tangents as they run (enter it with ``with``).

    Its inputs are tracked tensors whose :class:`LeafNode` holds their tangent
    in ``g``; a result's tangent is :func:`tangent_of` its node.
    """
    tr = Trace()
    tr.saver = _interpret
    return tr


def leaf(trace: Trace, x: Tensor, tangent) -> Tensor:
    """``x`` tracked on forward trace ``trace`` with ``tangent`` (a Tensor one level down)."""
    ns = type(x)._ns
    node = LeafNode(trace, ns)
    node.g = tangent
    make = ns._dispatch.make  # the trace's own handle on x's value, never the caller's (ownership)
    inner = x.__class__()  # (x's own class: a vmap's batched value stays batched)
    inner._value = x._value
    inner._node = x._node
    return make(inner, node)


# ---------------------------------------------------------------------- the tangent of one op
def _jvp(node, impl, tangents):
    rule = node.rule
    own = rule.jvp
    if own is not None:
        return own(node.ns, tangents, node.ans, node.args, node.params)
    name = rule.name
    if name in LINEAR:
        return _linear(node, impl, tangents)
    if name in BILINEAR:
        return _bilinear(node, impl, tangents)
    if rule.elementwise and rule.nout == 1:
        out = _elementwise(node, tangents)
        if out is not None:
            return out
    return _transposed(node, tangents)


def _zero_or_arg(ns, a, t, data):
    """What a linear op gets for argument ``a`` with tangent ``t``: the tangent, a zero for a
    constant in a data position (a summand, a branch of ``where``), the argument itself in
    other positions (indices, conditions)."""
    if t is not None:
        return t
    if not data:
        return a
    if isinstance(a, Tensor):
        return ns.zeros_like(a)
    if isinstance(a, (int, float, complex)) and not isinstance(a, bool):
        return 0 * a
    return a


def _linear(node, impl, tangents):
    ns = node.ns
    fns = getattr(node.rule.vjp, "fns", None)  # per-argument VJPs: None marks a non-data position
    data = [True] * len(tangents) if fns is None else \
        [i < len(fns) and fns[i] is not None for i in range(len(tangents))]
    args = [_zero_or_arg(ns, a, t, k) for a, t, k in zip(node.args, tangents, data)]
    return ns._dispatch.call(node.rule.name, impl, tuple(args), node.params)


def _bilinear(node, impl, tangents):
    ns = node.ns
    call = ns._dispatch.call
    a, b = node.args
    ta, tb = tangents
    out = None if ta is None else call(node.rule.name, impl, (ta, b), node.params)
    if tb is not None:
        right = call(node.rule.name, impl, (a, tb), node.params)
        out = right if out is None else out + right
    return out


#: what _elementwise_raw returns where the general form must decide
_GENERAL = object()


def _elementwise_raw(node, fns):
    """The tangent of an elementwise op of one or two arguments, from its per-argument VJPs
    called on backend arrays as the first-order backward loop does: ``fns[i](R, t_i, ans,
    *args)`` is ``t_i`` times the Jacobian's diagonal where argument i has the output's shape
    (other arguments broadcast). The case of untracked real values and tangents of the
    output's shape; None: no argument has a tangent; ``_GENERAL``: the general form decides
    (complex values, a broadcast argument with a tangent, nesting)."""
    ans = node.ans
    d = node.ns._dispatch
    T = d.T
    if ans.__class__ is not T or ans._node is not None:
        return _GENERAL
    av = ans._value
    adt = av.dtype
    reals = d.real_floats
    if adt not in reals:
        return _GENERAL
    args = node.args
    n = len(args)
    if n != len(fns):
        return _GENERAL
    shape = av.shape
    R = d.raw_ns
    if n == 1:
        p = node.parents[0]
        t = None if p is None else p.g if p.rule is not SELECT else tangent_of(p)
        if t is None:
            return None
        a = args[0]
        if a.__class__ is not T or a._node is not None or t.__class__ is not T or t._node is not None:
            return _GENERAL
        x, tv = a._value, t._value
        if x.shape != shape or tv.shape != shape or x.dtype not in reals:
            return _GENERAL
        out = fns[0](R, tv, av, x)
    else:
        a1, a2 = args
        x1 = a1._value if a1.__class__ is T else a1
        x2 = a2._value if a2.__class__ is T else a2
        if x1.__class__ is T or x2.__class__ is T:  # a value tracked one more level down
            return _GENERAL
        out = None
        for p, a, f in zip(node.parents, args, fns):
            t = None if p is None else p.g if p.rule is not SELECT else tangent_of(p)
            if t is None:
                continue
            if a.__class__ is not T or a._node is not None or t.__class__ is not T or t._node is not None \
                    or f is None:
                return _GENERAL
            x, tv = a._value, t._value
            if x.shape != shape or tv.shape != shape or x.dtype not in reals:
                return _GENERAL
            term = f(R, tv, av, x1, x2)
            out = term if out is None else out + term
        if out is None:
            return None
    if out.dtype is not adt and out.dtype != adt:
        out = R.astype(out, adt)
    g = T()
    g._value = out if out.__class__ is d.A else d.coerce(out)
    g._node = None
    return g


def _elementwise(node, tangents):
    """``sum_i t_i * d_i`` from the per-argument VJPs (the diagonal of the Jacobian); None where
    that does not hold (non-holomorphic complex ops, shapes a lazy backend does not know)."""
    ns, ans, args = node.ns, node.ans, node.args
    fns = getattr(node.rule.vjp, "fns", None)
    if fns is None or len(fns) != len(args):
        return None
    cplx = is_complex(ns, ans) or any(a is not None and is_complex(ns, a) for a in args)
    if cplx and node.rule.name in NOT_HOLOMORPHIC:
        return None
    shape = tuple(ans.shape)
    try:
        full = [ns.broadcast_to(a, shape) if isinstance(a, Tensor) and tuple(a.shape) != shape else a
                for a in args]
        out = None
        for f, t, a in zip(fns, tangents, full):
            if t is None or f is None:
                continue
            if tuple(t.shape) != shape:
                t = ns.broadcast_to(t, shape)
            term = ns.conj(f(ns, ns.conj(t), ans, *full, **node.params)) if cplx else \
                f(ns, t, ans, *full, **node.params)
            out = term if out is None else out + term
    except (ValueError, TypeError):  # unknown sizes: the transposed VJP instead
        return None
    if out is not None and out.dtype != ans.dtype and ns._dispatch.is_differentiable(ans):
        out = ns.astype(out, ans.dtype)
    return out


def _transposed(node, tangents):
    """``J t`` as the gradient in ``u`` of ``sum <VJP(u), t>``: one small reverse pass."""
    rule, ns, ans = node.rule, node.ns, node.ans
    outs = tuple(ans) if rule.nout > 1 else (ans,)
    d = ns._dispatch
    tr = Trace()
    leaves = []
    with tr:
        us = []
        for o in outs:
            lf = LeafNode(tr, ns)
            leaves.append(lf)
            us.append(d.make(ns.zeros_like(o), lf))
        g = us if rule.nout > 1 else us[0]
        present = tuple(None if t is None else True for t in tangents)
        vjps = rule.vjp(ns, g, ans, node.args, node.params, present)
        total = None
        for v, t in zip(vjps, tangents):
            if v is None or t is None:
                continue
            if is_complex(ns, v) or is_complex(ns, t):
                term = ns.sum(ns.real(ns.conj(v) * t))
            else:
                term = ns.sum(v * t)
            total = term if total is None else total + term
    res = []
    if total is not None and total.__class__ is type(total)._ns._Tensor and total._node is not None \
            and total._node.trace is tr:
        backward(tr, [(total._node, ns.ones_like(total._value))])
    for o, lf in zip(outs, leaves):
        g = lf.g
        res.append(ns.zeros_like(o) if g is None else g)
    tr.release()
    return res if rule.nout > 1 else res[0]
