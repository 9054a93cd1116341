"""Batching rules: each op's result on a batch, the batch axis kept in front (``ember.vmap``).

A rule is ``rule(c, vals, batched, params)``: ``vals`` are the op's positional
arguments one level down (a batched argument's value has the batch axis 0 in
front of one example's axes), ``batched`` says which are batched, ``c`` is the
call's :class:`~._batching.Ctx`. It returns the result one level down with
the batch axis in front. Rules compute with the namespace's functions
(``c.ns``) and the op itself (``c.op``), so outer levels (a ``grad`` around
the ``vmap``) record what they do.

Families come from tables: elementwise ops align ranks (a batched operand of
lower rank gets singleton axes after the batch axis; unbatched operands
broadcast from the right as they are), ops with an ``axis`` shift it past the
batch axis, ops on trailing matrices (linalg) take the batch as one more stack
axis, and shape and indexing ops get the batch prepended.
"""

from __future__ import annotations

from .._errors import AxisError
from ..kernels import meshgrid
from ._api_tables import BINARY, ELEMENTWISE, UNARY
from ._batching import BATCH_RULES, BatchingError, is_batched, wrap
from ._tensor import Tensor

__all__ = ["BATCH_RULES"]


# ---------------------------------------------------------------------- helpers
def _nd(v, b) -> int:
    """One example's rank of value ``v`` (batched or not); 0 for non-arrays."""
    if not isinstance(v, Tensor):
        return 0
    return v.ndim - 1 if b else v.ndim


def _expand(c, v, k):
    """Batched ``v`` with ``k`` singleton axes inserted after the batch axis."""
    for _ in range(k):
        v = c.ns.expand_dims(v, axis=1)
    return v


def _bcast(c, v):
    """Unbatched array ``v`` repeated along a new batch axis in front (a broadcast view)."""
    return c.ns.broadcast_to(c.ns.expand_dims(v, axis=0), (c.size, *tuple(v.shape)))


def _batch_all(c, vals, batched):
    """Every array of ``vals`` batched (unbatched ones broadcast along a new batch axis)."""
    return [_bcast(c, v) if not b and isinstance(v, Tensor) else v for v, b in zip(vals, batched)]


def _axis(a, nd, name) -> int:
    """Logical axis ``a`` of a rank-``nd`` example as an axis of the batched value."""
    if not -nd <= a < nd:
        raise AxisError(f"{name}: axis {a} is out of range for an array of {nd} dimensions "
                        "(one example's, under ember.vmap)")
    return a % nd + 1


def _axes(a, nd, name):
    """An int, a tuple of ints, or None (all of one example's axes), shifted past the batch."""
    if a is None:
        return tuple(range(1, nd + 1))
    if isinstance(a, (tuple, list)):
        return tuple(_axis(i, nd, name) for i in a)
    return _axis(a, nd, name)


def _get(vals, params, i, key, default):
    """Argument ``key`` given at position ``i`` or by keyword."""
    if len(vals) > i:
        return vals[i]
    return params.get(key, default)


def _set(vals, params, i, key, value):
    """``vals`` and ``params`` with argument ``key`` (position ``i``) replaced by ``value``."""
    vals = list(vals)
    params = dict(params)
    if len(vals) > i:
        vals[i] = value
    else:
        params[key] = value
    return vals, params


def _compose(c, fn, vals, batched, params):
    """The op as ``fn`` composed of ops that have rules: the values batched again at this level,
    ``fn`` run on them with one example's semantics, the result's value taken back out."""
    d, tr = c.d, c.trace
    args = [wrap(d, tr, v) if b else v for v, b in zip(vals, batched)]
    out = fn(*args, **params)
    return _unwrap(c, out)


def _unwrap(c, out):
    if isinstance(out, (tuple, list)):
        items = [_unwrap(c, o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    if is_batched(out, c.trace):
        return out._value
    if isinstance(out, Tensor):  # the same for every example
        return _bcast(c, out)
    return out


def register(names, rule):
    for n in names.split() if isinstance(names, str) else names:
        BATCH_RULES[n] = rule


# ---------------------------------------------------------------------- elementwise
def elementwise(c, vals, batched, params):
    """Ranks aligned so the batch axis stays in front; unbatched operands broadcast as they are."""
    if len(vals) == 1:  # (a unary op: nothing to align)
        return c.op(vals, params)
    nd = max(_nd(v, b) for v, b in zip(vals, batched))
    out = [_expand(c, v, nd - (v.ndim - 1)) if b and v.ndim - 1 < nd else v
           for v, b in zip(vals, batched)]
    return c.op(out, params)


register(UNARY + BINARY, elementwise)
register(sorted(ELEMENTWISE - set(UNARY + BINARY)) + ["_relu", "_erf", "_gelu_tanh", "_neg_logistic", "_to_device"],
         elementwise)


def first_only(c, vals, batched, params):
    """Ops on one array whose leading axes are a stack (creation ``*_like``, linalg on matrices,
    ``tril``): the batch is one more stack axis. Other batched arguments: per example."""
    if any(batched[1:]):
        return _missing(c, vals, batched, params)
    return c.op(vals, params)


register("zeros_like ones_like empty_like full_like tril triu matrix_transpose "
         "linalg.matrix_transpose linalg.cholesky linalg.det linalg.eigh linalg.eigvalsh linalg.eig "
         "linalg.eigvals linalg.inv linalg.pinv linalg.qr linalg.slogdet linalg.svd linalg.svdvals "
         "linalg.matrix_rank linalg.diagonal linalg.trace linalg.matrix_power linalg.matrix_norm",
         first_only)


def _missing(c, vals, batched, params):
    from ._batching import NO_RULE, NO_RULE_BUILTIN_FIX, loop_rule

    if c.trace.fallback == "loop":
        return loop_rule(c, vals, batched, params)
    raise BatchingError(NO_RULE.format(name=c.name, size=c.size, fix=(
        f"this rule batches the first argument only; {NO_RULE_BUILTIN_FIX}")))


# ---------------------------------------------------------------------- axis ops
def _axis_rule(default=None, none="all", key="axis"):
    """Rule of an op on one array with an ``axis`` keyword; ``none`` says what axis=None means:
    "all" (every axis of an example), "keep" (the op's own meaning), or over the flattened
    example: "flat" (the result stays flat: repeat), "back" (reshaped back: roll), "arg"
    (argmax: keepdims gives one example's rank of ones)."""

    def rule(c, vals, batched, params):
        if any(batched[1:]):
            return _missing(c, vals, batched, params)
        x = vals[0]
        nd = x.ndim - 1
        a = params.get(key, default)
        if a is None and none == "keep":
            return c.op(vals, params)
        if a is None and none != "all":
            out = c.op([c.ns.reshape(x, (c.size, -1)), *vals[1:]], {**params, key: 1})
            if none == "back":
                return c.ns.reshape(out, tuple(x.shape))
            if none == "arg" and params.get("keepdims"):
                return c.ns.reshape(out, (c.size, *([1] * nd)))
            return out
        return c.op(vals, {**params, key: _axes(a, nd, c.name)})

    return rule


register("sum prod mean std var max min all any count_nonzero flip", _axis_rule())
register("fft.fftshift fft.ifftshift", _axis_rule(key="axes"))
register("argmax argmin", _axis_rule(none="arg"))
BATCH_RULES["repeat"] = _axis_rule(none="flat")
BATCH_RULES["roll"] = _axis_rule(none="back")
register("sort argsort fft.fft fft.ifft fft.rfft fft.irfft fft.hfft fft.ihfft", _axis_rule(default=-1))
register("_softmax _log_softmax", _axis_rule(none="keep"))
BATCH_RULES["unstack"] = _axis_rule(default=0)


def _cumulative(c, vals, batched, params):
    x = vals[0]
    if params.get("axis") is None and x.ndim - 1 == 1:
        params = {**params, "axis": 0}
    return _axis_rule(none="keep")(c, vals, batched, params)


register("cumulative_sum cumulative_prod", _cumulative)


def _vector_norm(c, vals, batched, params):
    x = vals[0]
    if x.ndim == 1 and params.get("axis") is None:  # 0-d examples: the norm of one number
        return _axis_rule()(c, [c.ns.expand_dims(x, axis=1)], batched, {**params, "axis": 0})
    return _axis_rule()(c, vals, batched, params)


BATCH_RULES["linalg.vector_norm"] = _vector_norm


def _fftn(c, vals, batched, params):
    x = vals[0]
    nd = x.ndim - 1
    axes = params.get("axes")
    s = params.get("s")
    if axes is None:
        axes = tuple(range(nd - len(s), nd)) if s is not None else tuple(range(nd))
    return c.op(vals, {**params, "axes": _axes(tuple(axes), nd, c.name)})


register("fft.fftn fft.ifftn fft.rfftn fft.irfftn", _fftn)


def _shifted_axis_op(pos, key, default=0, relative=0):
    """Ops whose axis argument is at position ``pos`` or keyword ``key`` (expand_dims: the
    axis is one of the result's, ``relative=1``)."""

    def rule(c, vals, batched, params):
        if any(batched[1:]):
            return _missing(c, vals, batched, params)
        nd = vals[0].ndim - 1 + relative
        a = _get(vals, params, pos, key, default)
        vals2, p2 = _set(vals, params, pos, key, _axes(a, nd, c.name))
        return c.op(vals2, p2)

    return rule


BATCH_RULES["expand_dims"] = _shifted_axis_op(1, "axis", 0, relative=1)
BATCH_RULES["squeeze"] = _shifted_axis_op(1, "axis", None)


# ---------------------------------------------------------------------- shape ops
def _reshape(c, vals, batched, params):
    shape = _get(vals, params, 1, "shape", None)
    vals2, p2 = _set(vals, params, 1, "shape", (c.size, *tuple(shape)))
    return c.op(vals2, p2)


def _permute_dims(c, vals, batched, params):
    nd = vals[0].ndim - 1
    axes = _get(vals, params, 1, "axes", None)
    vals2, p2 = _set(vals, params, 1, "axes", (0, *(_axis(a, nd, c.name) for a in axes)))
    return c.op(vals2, p2)


def _broadcast_to(c, vals, batched, params):
    x = vals[0]
    shape = tuple(_get(vals, params, 1, "shape", None))
    x = _expand(c, x, len(shape) - (x.ndim - 1))
    vals2, p2 = _set([x, *vals[1:]], params, 1, "shape", (c.size, *shape))
    return c.op(vals2, p2)


def _tile(c, vals, batched, params):
    x = vals[0]
    reps = tuple(_get(vals, params, 1, "repetitions", None))
    nd = x.ndim - 1
    if len(reps) > nd:
        x = _expand(c, x, len(reps) - nd)
    reps = (1,) * (max(nd, len(reps)) - len(reps)) + reps
    vals2, p2 = _set([x, *vals[1:]], params, 1, "repetitions", (1, *reps))
    return c.op(vals2, p2)


def _moveaxis(c, vals, batched, params):
    x, source, destination = vals[0], vals[1], vals[2]
    nd = x.ndim - 1
    src = [s % nd for s in ((source,) if isinstance(source, int) else source)]
    dst = [s % nd for s in ((destination,) if isinstance(destination, int) else destination)]
    order = [i for i in range(nd) if i not in src]
    for s, t in sorted(zip(dst, src)):
        order.insert(s, t)
    return c.ns.permute_dims(x, (0, *(o + 1 for o in order)))


def _concat(c, vals, batched, params):
    vals = _batch_all(c, vals, batched)
    axis = params.get("axis", 0)
    if axis is None:
        vals = [c.ns.reshape(v, (c.size, -1)) for v in vals]
        return c.op(vals, {**params, "axis": 1})
    return c.op(vals, {**params, "axis": _axis(axis, vals[0].ndim - 1, c.name)})


def _stack(c, vals, batched, params):
    vals = _batch_all(c, vals, batched)
    return c.op(vals, {**params, "axis": _axis(params.get("axis", 0), vals[0].ndim, c.name)})


def _broadcast_arrays(c, vals, batched, params):
    def fn(*arrays):
        shape = c.d.xp.broadcast_shapes(*[tuple(a.shape) for a in arrays])
        return tuple(c.ns.broadcast_to(a, shape) for a in arrays)

    return _compose(c, fn, vals, batched, params)


def _meshgrid(c, vals, batched, params):
    indexing = params.get("indexing", "xy")

    def fn(*arrays):
        return tuple(meshgrid(c.ns, arrays, indexing))

    return _compose(c, fn, vals, batched, {})


def _diff(c, vals, batched, params):
    ns = c.ns
    prepend, append = params.get("prepend"), params.get("append")
    axis, n = params.get("axis", -1), params.get("n", 1)
    x = wrap(c.d, c.trace, vals[0]) if batched[0] else vals[0]
    if n == 0:
        return _unwrap(c, x)
    parts = [p for p in (prepend, x, append) if p is not None]
    y = ns.concat(parts, axis=axis) if len(parts) > 1 else x
    ax = axis % y.ndim
    lo = (slice(None),) * ax
    for _ in range(n):
        if y.shape[ax] == 0:
            break
        y = y[lo + (slice(1, None), ...)] - y[lo + (slice(None, -1), ...)]
    return _unwrap(c, y)


BATCH_RULES.update(reshape=_reshape, permute_dims=_permute_dims, broadcast_to=_broadcast_to,
                   tile=_tile, moveaxis=_moveaxis, concat=_concat, stack=_stack,
                   broadcast_arrays=_broadcast_arrays, meshgrid=_meshgrid, diff=_diff)


# ---------------------------------------------------------------------- linear algebra
def _matmul(c, vals, batched, params):
    """Vectors become matrices, stack ranks are aligned after the batch axis, the added axes
    are squeezed again."""
    ns = c.ns
    a, b = vals
    ba, bb = batched
    va = _nd(a, ba) == 1
    vb = _nd(b, bb) == 1
    if va and not bb and b.ndim == 2:  # a batch of vectors times one matrix: one matrix product
        return c.op([a, b], params)
    if vb and not ba and a.ndim == 2:  # one matrix times a batch of vectors: (b a^T) rows
        return c.op([b, ns.matrix_transpose(a)], params)
    if va:
        a = ns.expand_dims(a, axis=-2)
    if vb:
        b = ns.expand_dims(b, axis=-1)
    a, b, _ = _align_stacks(c, a, b, ba, bb)
    out = c.op([a, b], params)
    if va and vb:
        return ns.reshape(out, (c.size,))
    if va:
        return ns.squeeze(out, axis=-2)
    if vb:
        return ns.squeeze(out, axis=-1)
    return out


def _tensordot(c, vals, batched, params):
    ns = c.ns
    a, b = vals
    ba, bb = batched
    na, nb = _nd(a, ba), _nd(b, bb)
    axes = params.get("axes", 2)
    if isinstance(axes, int):
        xa, xb = list(range(na - axes, na)), list(range(axes))
    else:
        xa, xb = [i % na for i in axes[0]], [i % nb for i in axes[1]]
    if ba and not bb:
        return c.op([a, b], {**params, "axes": ([i + 1 for i in xa], xb)})
    if bb and not ba:
        out = c.op([a, b], {**params, "axes": (xa, [i + 1 for i in xb])})
        free_a = na - len(xa)
        return ns.moveaxis(out, free_a, 0) if free_a else out
    # both batched: a (B, free_a, contracted) @ b (B, contracted, free_b) as one batched matmul
    fa = [i for i in range(na) if i not in xa]
    fb = [i for i in range(nb) if i not in xb]
    a = ns.permute_dims(a, (0, *(i + 1 for i in fa), *(i + 1 for i in xa)))
    b = ns.permute_dims(b, (0, *(i + 1 for i in xb), *(i + 1 for i in fb)))
    sa = tuple(a.shape[1:1 + len(fa)])
    sb = tuple(b.shape[1 + len(xb):])
    k = 1
    for s in tuple(a.shape[1 + len(fa):]):
        k *= s
    out = ns.matmul(ns.reshape(a, (c.size, -1, k)), ns.reshape(b, (c.size, k, -1)))
    return ns.reshape(out, (c.size, *sa, *sb))


def _vecdot(c, vals, batched, params):
    nd = max(_nd(v, b) for v, b in zip(vals, batched))
    axis = params.get("axis", -1)
    if axis >= 0:
        axis -= nd
    out = [_expand(c, v, nd - (v.ndim - 1)) if b and v.ndim - 1 < nd else v
           for v, b in zip(vals, batched)]
    return c.op(out, {**params, "axis": axis})


def _outer(c, vals, batched, params):
    a, b = vals
    return c.ns.multiply(c.ns.expand_dims(a, axis=-1), c.ns.expand_dims(b, axis=-2))


def _align_stacks(c, a, b, ba, bb):
    """Matrix operands ``a``, ``b`` (batched per ``ba``, ``bb``) with the batched one's stack
    axes padded to the other's count, so the batch axis stays in front: ``(a, b, stack rank)``."""
    sa, sb = _nd(a, ba) - 2, _nd(b, bb) - 2
    s = max(sa, sb)
    if ba and sa < s:
        a = _expand(c, a, s - sa)
    if bb and sb < s:
        b = _expand(c, b, s - sb)
    return a, b, s


def _solve(c, vals, batched, params):
    ns = c.ns
    a, b = vals
    ba, bb = batched
    vec = _nd(b, bb) == 1
    if vec:
        b = ns.expand_dims(b, axis=-1)
    sa, sb = _nd(a, ba) - 2, _nd(b, bb) - 2
    a, b, s = _align_stacks(c, a, b, ba, bb)
    if not ba:  # solve does not broadcast in every backend: the stack made explicit
        a = _bcast(c, a)
        a = _expand(c, a, s - sa) if sa < s else a
    if not bb:
        b = _bcast(c, b)
        b = _expand(c, b, s - sb) if sb < s else b
    out = c.op([a, b], params)
    return ns.squeeze(out, axis=-1) if vec else out


register("matmul linalg.matmul", _matmul)
register("tensordot linalg.tensordot", _tensordot)
register("vecdot linalg.vecdot linalg.cross", _vecdot)
BATCH_RULES["linalg.outer"] = _outer
BATCH_RULES["linalg.solve"] = _solve


# ---------------------------------------------------------------------- indexing
def _key_tuple(key):
    return key if isinstance(key, tuple) else (key,)


def _advanced_front(key) -> int | None:
    """Where NumPy puts the index arrays' axes of ``x[(slice(None),) + key]`` when they are not
    adjacent in ``key`` (then the batch axis follows them): their rank; None when the batch
    axis stays in front."""
    pos = [i for i, k in enumerate(key) if hasattr(k, "shape") and hasattr(k, "dtype")]
    if not pos:
        return None
    ints = [i for i, k in enumerate(key) if isinstance(k, int) and not isinstance(k, bool)]
    allpos = sorted(pos + ints)
    if allpos == list(range(allpos[0], allpos[-1] + 1)):
        return None
    nd = 0
    for i in pos:
        k = key[i]
        nd = max(nd, 1 if "bool" in str(k.dtype) else len(k.shape))
    return nd


def _as_take(c, x, key):
    """``x[(slice(None),) + key]`` as a ``take`` where ``key`` is one 1-d index array (or a 1-d
    mask) among full slices: backends that refuse index arrays mixed with slices (array-api-
    strict) take it, and it is one gather. None where that does not apply."""
    arrays = [i for i, k in enumerate(key) if hasattr(k, "shape") and hasattr(k, "dtype")]
    if len(arrays) != 1:
        return None
    p = arrays[0]
    idx = key[p]
    full = slice(None)
    if len(idx.shape) != 1 or any(k is Ellipsis for k in key[:p]) or not all(
            (isinstance(k, slice) and k == full) or k is Ellipsis for k in key[:p] + key[p + 1:]):
        return None
    xp = c.d.xp
    if xp.isdtype(idx.dtype, "bool"):
        if not c.d.caps.cheap_checks:
            return None
        idx = xp.nonzero(idx)[0]
    elif not xp.isdtype(idx.dtype, "integral"):
        return None
    return c.ns.take(x, c.d.wrap(idx), axis=p + 1)


def _all_integer_key(c, key, least=2):
    """For a key of index arrays and ints only: the batch's own index array in front (shaped to
    broadcast against them), so the key stays integer-only (array-api-strict refuses index
    arrays next to slices); None for other keys."""
    arrays = [k for k in key if hasattr(k, "shape") and hasattr(k, "dtype")]
    if len(arrays) < least or not all(hasattr(k, "shape") or (isinstance(k, int) and not isinstance(k, bool))
                                  for k in key):
        return None
    xp = c.d.xp
    if not all(xp.isdtype(k.dtype, "integral") for k in arrays):
        return None
    nd = max(len(k.shape) for k in arrays)
    first = xp.reshape(xp.arange(c.size, dtype=arrays[0].dtype), (c.size, *([1] * nd)))
    return (first, *key)


def _masks_as_indices(c, key):
    """``key`` with each boolean array replaced by the index arrays of its True elements (the
    same selection), on eager backends: they then batch as integer keys do."""
    xp = c.d.xp
    if not c.d.caps.cheap_checks or not any(
            hasattr(k, "dtype") and hasattr(k, "shape") and xp.isdtype(k.dtype, "bool") for k in key):
        return key
    out = []
    for k in key:
        if hasattr(k, "dtype") and hasattr(k, "shape") and xp.isdtype(k.dtype, "bool"):
            out.extend(xp.nonzero(k))
        else:
            out.append(k)
    return tuple(out)


def _getitem(c, vals, batched, params):
    key = _masks_as_indices(c, _key_tuple(params["key"]))
    taken = _as_take(c, vals[0], key)
    if taken is not None:
        return taken
    ints = _all_integer_key(c, key)
    if ints is not None:
        return c.op(vals, {**params, "key": ints})
    out = c.op(vals, {**params, "key": (slice(None), *key)})
    front = _advanced_front(key)
    return c.ns.moveaxis(out, front, 0) if front else out


def _target_rank(c, x, key) -> int:
    """One example's rank of ``x[key]`` (x batched), from a zero-stride probe."""
    xp = c.d.xp
    probe = xp.broadcast_to(xp.asarray(False), tuple(x.shape[1:]))
    return probe[key].ndim


def _setitem(c, vals, batched, params):
    x, v = vals
    key = params["key"]
    if not batched[0]:
        x = _bcast(c, x)
    if batched[1]:
        k = _target_rank(c, x, key) - (v.ndim - 1)
        if k > 0:
            v = _expand(c, v, k)
    key = _masks_as_indices(c, _key_tuple(key))
    new = _all_integer_key(c, key, least=1)  # (array-api-strict: no index arrays next to slices)
    if new is None:
        if _advanced_front(key):
            return _missing(c, vals, batched, params)
        new = (slice(None), *key)
    return c.op([x, v], {**params, "key": new})


def _take(c, vals, batched, params):
    ns = c.ns
    x, idx = vals
    bx, bi = batched
    axis = params.get("axis")
    nx = _nd(x, bx)
    if axis is None:
        if nx != 1:
            raise AxisError("take: axis is needed for an array of more than one dimension")
        axis = 0
    a = axis % nx
    if bx and not bi:
        return c.op([x, idx], {**params, "axis": a + 1})
    if bi and not bx:
        n = idx.shape[1]
        flat = c.op([x, ns.reshape(idx, (-1,))], {**params, "axis": a})
        shape = tuple(x.shape)
        flat = ns.reshape(flat, (*shape[:a], c.size, n, *shape[a + 1:]))
        return ns.moveaxis(flat, a, 0) if a else flat
    n = idx.shape[1]
    shape = tuple(x.shape[1:])
    i = ns.reshape(idx, (c.size, *([1] * a), n, *([1] * (nx - a - 1))))
    i = ns.broadcast_to(i, (c.size, *shape[:a], n, *shape[a + 1:]))
    return ns.take_along_axis(x, i, axis=a + 1)


def _take_along_axis(c, vals, batched, params):
    vals = _batch_all(c, vals, batched)
    nd = vals[0].ndim - 1
    return c.op(vals, {**params, "axis": _axis(params.get("axis", -1), nd, c.name)})


BATCH_RULES.update(getitem=_getitem, setitem=_setitem, index_add=_setitem, take=_take,
                   take_along_axis=_take_along_axis)


def _full(c, vals, batched, params):
    """``full(shape, fill_value)`` with a batched 0-d fill: the fills broadcast over the shape."""
    shape = _get(vals, params, 0, "shape", ())
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    fill = _get(vals, params, 1, "fill_value", None)
    if batched[0] or fill.ndim != 1:
        return _missing(c, vals, batched, params)
    ns = c.ns
    dtype = params.get("dtype")
    if dtype is not None and dtype != fill.dtype:
        fill = ns.astype(fill, dtype)
    out = ns.broadcast_to(ns.reshape(fill, (c.size, *([1] * len(shape)))), (c.size, *shape))
    return ns.asarray(out, copy=True)


BATCH_RULES["full"] = _full


def _searchsorted(c, vals, batched, params):
    if batched[0]:
        return _missing(c, vals, batched, params)
    return c.op(vals, params)


def _isin(c, vals, batched, params):
    if batched[1]:
        return _missing(c, vals, batched, params)
    return c.op(vals, params)


BATCH_RULES.update(searchsorted=_searchsorted, isin=_isin)


# ---------------------------------------------------------------------- nn's fused ops
def _linear(c, vals, batched, params):
    """x batched alone: the fused op on the stacked rows; batched weights: its composition."""
    if not any(batched[1:]):
        return c.op(vals, params)
    ns = c.ns

    def fn(x, w, b, relu=False):
        y = ns.matmul(x, ns.matrix_transpose(w))
        if b is not None:
            y = y + b
        return ns._relu(y) if relu else y

    return _compose(c, fn, vals, batched, params)


def _softmax_cross_entropy(c, vals, batched, params):
    """Per example: the loss of each row ("none") on the batch, then that example's sum or
    mean over its rows."""
    ns = c.ns
    z, t = _batch_all(c, vals, batched)
    nd = max(z.ndim, t.ndim) - 1
    z = _expand(c, z, nd - (z.ndim - 1))
    t = _expand(c, t, nd - (t.ndim - 1))
    reduction = params.get("reduction", "none")
    out = c.op([z, t], {**params, "axis": _axis(params["axis"], nd, c.name), "reduction": "none"})
    if reduction == "none" or out.ndim == 1:
        return out
    rest = tuple(range(1, out.ndim))
    return ns.sum(out, axis=rest) if reduction == "sum" else ns.mean(out, axis=rest)


def _layer_norm(c, vals, batched, params):
    if not any(batched[1:]):
        nd = vals[0].ndim - 1
        return c.op(vals, {**params, "axes": tuple(_axis(a, nd, c.name) for a in params["axes"])})
    from ..kernels import layer_norm

    return _compose(c, lambda x, w, b, axes, eps: layer_norm(c.ns, x, w, b, axes, eps)[0],
                    vals, batched, params)


def _max_pool_tiles(c, vals, batched, params):
    return c.op(vals, params)  # windows over the trailing axes: the batch is a leading one


BATCH_RULES.update(_linear=_linear, _softmax_cross_entropy=_softmax_cross_entropy,
                   _layer_norm=_layer_norm, _max_pool_tiles=_max_pool_tiles)
