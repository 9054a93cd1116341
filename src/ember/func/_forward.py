"""Forward mode and Jacobians: jvp, jacfwd, jacrev, hessian, hvp.

``jvp`` runs ``f`` once on a forward trace (``ember.autodiff.forward_trace``):
every op computes its output's tangent as it runs, from the rule's JVP (or,
for a rule without one, from its VJP: see ``ember.autodiff``'s forward mode),
and no tape is kept. ``jacfwd`` is one such pass per input element; ``hvp`` is
forward-over-reverse (``jvp`` of ``grad``). ``linearize_transpose`` keeps the
older construction by transposing reverse mode (``J v`` as the VJP of
``u -> J^T u``), whose linear map can be applied many times after one
forward pass.

All transforms take and return structures (``ember.tree``), accept raw
backend arrays (results then come back raw) and nest with each other and
with ``grad``/``vjp``: forward-over-reverse (``jvp(grad(f))``),
reverse-over-forward (``grad`` of a function using ``jvp``), and
reverse-over-reverse.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

from .. import tree as _tree
from ..autodiff import Tensor, forward_trace, namespace, tangent_of, track_forward
from ..kernels import shapes_fit
from ..autodiff._tensor import raw_value
from ._transforms import grad, taken_over, vjp

__all__ = ["jvp", "jacfwd", "jacrev", "hessian", "hvp", "linearize_transpose"]

TANGENT_SHAPE = (
    "jvp: the tangent at {path} has shape {tshape} but the primal has shape {pshape}; "
    "give one tangent per primal array, of the same shape"
)
NOT_TUPLE = (
    "{op}: primals and tangents must be tuples (one entry per positional argument of f), "
    "got {what}. Fix: write {op}(f, (x,), (v,))"
)


def _is_array(x) -> bool:
    return isinstance(x, Tensor) or (hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "__array_namespace__"))


def _as_tensor(x):
    """Raw backend arrays as untracked Tensors (so gradients keep their tracking)."""
    if isinstance(x, Tensor) or not _is_array(x):
        return x
    return namespace(x).asarray(x)


def _to_raw(x):
    return raw_value(x) if isinstance(x, Tensor) else x


def _any_raw(trees) -> bool:
    return _all_raw(_tree.leaves(trees))


def _all_raw(leaves) -> bool:
    """Whether ``leaves`` hold arrays and all of them are raw backend arrays (not Tensors)."""
    arrays = [a for a in leaves if _is_array(a)]
    return bool(arrays) and all(not isinstance(a, Tensor) for a in arrays)


def _tensor_args(args, nums):
    """``(args as a list with args[nums] as Tensors, whether those were all raw arrays)``."""
    args = list(args)
    raw = _any_raw([args[i] for i in nums])
    for i in nums:
        args[i] = _tree.map(_as_tensor, args[i])
    return args, raw


def _transpose_vjp(f: Callable, primals: tuple):
    """``(out, push)`` where ``push(tangents) = J @ tangents`` (one tangent per primal).

    Built by transposing ``pull = vjp(f, *primals)[1]``: ``push`` is the VJP of
    the linear map ``u -> pull(u)``. ``push`` may be called many times.
    """
    out, pull = vjp(f, *primals)
    u0 = _tree.map(lambda o: type(o)._ns.zeros_like(o) if isinstance(o, Tensor) else o, out)
    _, push_t = vjp(lambda u: pull(u), u0)

    def push(tangents):
        return push_t(tuple(tangents))[0]

    return out, push


def _check_tangents(primals, tangents):
    def check(path, p, t):
        if not _fits(p, t):
            raise ValueError(
                TANGENT_SHAPE.format(path=str(path) or "<root>", tshape=tuple(t.shape), pshape=tuple(p.shape))
            )
        return t

    _tree.map_with_path(check, primals, tangents)


def jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any]):
    """Evaluate ``f(*primals)`` and its Jacobian-vector product with ``tangents``.

    Returns ``(out, tangent_out)``, both with the structure of ``f``'s output.
    One pass of ``f`` whose ops carry tangents (see the module docstring): it
    works for every function that has a VJP rule, and nests.

    >>> import ember, ember.autodiff.numpy as xp
    >>> y, t = ember.func.jvp(lambda x: x ** 3, (xp.asarray(2.0),), (xp.asarray(1.0),))
    >>> float(y), float(t)
    (8.0, 12.0)
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        bad = primals if not isinstance(primals, (tuple, list)) else tangents
        raise TypeError(NOT_TUPLE.format(op="jvp", what=type(bad).__name__))
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(
            f"jvp: got {len(primals)} primals but {len(tangents)} tangents; give one tangent per primal"
        )
    p_leaves, p_def = _tree.flatten(primals)
    t_leaves, t_def = _tree.flatten(tangents)
    if t_def != p_def or not all(_fits(p, t) for p, t in zip(p_leaves, t_leaves)):
        _check_tangents(primals, tangents)  # (raises, naming the path)
    raw = _all_raw(p_leaves)
    out, t_out = _forward_flat(f, [_as_tensor(p) for p in p_leaves], p_def, [_as_tensor(t) for t in t_leaves])
    if raw:
        out, t_out = _tree.map(_to_raw, out), _tree.map(_to_raw, t_out)
    return out, t_out


def _fits(p, t) -> bool:
    """Whether tangent ``t`` can have primal ``p``'s shape (or either is not an array)."""
    return not (_is_array(p) and _is_array(t)) or shapes_fit(tuple(p.shape), tuple(t.shape))


def _forward(f: Callable, primals: tuple, tangents: tuple):
    """``(f(*primals), its tangent)``: one pass of ``f`` on a forward trace."""
    p_leaves, p_def = _tree.flatten(primals)
    return _forward_flat(f, p_leaves, p_def, _tree.leaves(tangents))


def _forward_flat(f: Callable, p_leaves: list, p_def, t_leaves: list):
    """``_forward`` on the primals' leaves and treedef and the tangents' leaves."""
    trace = forward_trace()
    p_leaves = [taken_over(p) for p in p_leaves]
    with trace:
        tracked = [track_forward(trace, p, t) if _diff(p) else p for p, t in zip(p_leaves, t_leaves)]
        try:
            out = f(*_tree.unflatten(p_def, tracked))
        finally:
            trace.nodes.clear()  # (the select nodes of multi-output ops)

    def split(o):
        node = o._node if isinstance(o, Tensor) else None
        if node is None or node.trace is not trace:
            return o, (type(o)._ns.zeros_like(o) if _diff(o) else o)
        value = o._value
        t = tangent_of(node)
        return value, (type(value)._ns.zeros_like(value) if t is None else t)

    o_leaves, o_def = _tree.flatten(out)
    flat = [split(o) for o in o_leaves]
    return _tree.unflatten(o_def, [v for v, _ in flat]), _tree.unflatten(o_def, [t for _, t in flat])


def linearize_transpose(f: Callable, *primals: Any):
    """``(out, push)``: ``push(*tangents)`` gives ``J @ tangents`` at ``primals``, reusable.

    The expensive part (forward and recorded backward pass) runs once; each
    ``push`` is one more backward pass. ``jacfwd`` uses it.
    """
    raw = _any_raw(primals)
    tp = _tree.map(_as_tensor, tuple(primals))
    out, push = _transpose_vjp(f, tp)

    def push_fn(*tangents):
        res = push(_tree.map(_as_tensor, tuple(tangents)))
        return _tree.map(_to_raw, res) if raw else res

    return (_tree.map(_to_raw, out) if raw else out), push_fn


# ------------------------------------------------------------------ Jacobians
def _nums(argnums):
    return ((argnums,), True) if isinstance(argnums, int) else (tuple(argnums), False)


def _partial(f, args, nums):
    """``f`` as a function of ``args[nums]`` only (the rest fixed)."""

    def g(*diff):
        full = list(args)
        for i, d in zip(nums, diff):
            full[i] = d
        return f(*full)

    return g


def _basis(leaf, k):
    """The k-th unit array of ``leaf``'s shape and dtype."""
    ns = type(leaf)._ns
    n = math.prod(leaf.shape)
    e = ns.zeros((n,), dtype=leaf.dtype, device=leaf.device)
    e = ns.where(ns.arange(n, device=leaf.device) == k, ns.ones_like(e), e)
    return ns.reshape(e, tuple(leaf.shape))


def _one_hot_trees(t):
    """Yield ``(leaf_index, flat_index, tree)``: each unit vector of structure ``t``."""
    leaves, td = _tree.flatten(t)
    zeros = [type(a)._ns.zeros_like(a) if isinstance(a, Tensor) else a for a in leaves]
    for i, a in enumerate(leaves):
        if not _diff(a):
            continue
        for k in range(math.prod(a.shape)):
            cur = list(zeros)
            cur[i] = _basis(a, k)
            yield i, k, _tree.unflatten(td, cur)


def _diff(x) -> bool:
    return isinstance(x, Tensor) and type(x)._ns._dispatch.is_differentiable(x)


def jacrev(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """Jacobian of ``f`` by reverse mode: one backward pass per output element.

    The result has the structure of the output; each output leaf of shape
    ``o`` is replaced by the structure of ``args[argnums]`` (a tuple of them
    for a sequence ``argnums``) with leaves of shape ``o + input_shape``.
    Best when outputs are fewer than inputs.

    >>> import ember, ember.autodiff.numpy as xp
    >>> ember.func.jacrev(lambda x: x * x)(xp.asarray([1.0, 2.0])).raw.tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    nums, single = _nums(argnums)

    @functools.wraps(f)
    def wrapped(*args):
        args, raw = _tensor_args(args, nums)
        g = _partial(f, args, nums)
        res = vjp(g, *[args[i] for i in nums], has_aux=has_aux)
        out, pull = res[0], res[1]
        aux = res[2] if has_aux else None
        out_leaves, out_def = _tree.flatten(out)
        ins = tuple(args[i] for i in nums)
        in_leaves, in_def = _tree.flatten(ins)
        rows_per_out = []
        for oi, o in enumerate(out_leaves):
            if not _diff(o):
                rows_per_out.append(o)
                continue
            rows = [[] for _ in in_leaves]
            for k in range(math.prod(o.shape)):
                ct = [type(a)._ns.zeros_like(a) if isinstance(a, Tensor) else a for a in out_leaves]
                ct[oi] = _basis(o, k)
                grads = pull(_tree.unflatten(out_def, ct))
                for j, gl in enumerate(_tree.leaves(grads)):
                    rows[j].append(gl)
            blocks = []
            for j, x in enumerate(in_leaves):
                if not _diff(x):
                    blocks.append(x)  # constants keep their value
                    continue
                ns = type(x)._ns
                if rows[j]:
                    # stack on the last axis, then move it first (the core's stack VJP
                    # indexes only leading axes on array_api_strict otherwise)
                    st = ns.stack(rows[j], axis=-1)
                    st = ns.permute_dims(st, (x.ndim,) + tuple(range(x.ndim)))
                else:
                    st = ns.zeros((0,) + tuple(x.shape), dtype=x.dtype, device=x.device)
                blocks.append(ns.reshape(st, tuple(o.shape) + tuple(x.shape)))
            block = _tree.unflatten(in_def, blocks)
            rows_per_out.append(block[0] if single else block)
        jac = _tree.unflatten(out_def, rows_per_out)
        if raw:
            jac = _tree.map(_to_raw, jac)
        return (jac, aux) if has_aux else jac

    return wrapped


def jacfwd(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """Jacobian of ``f`` by forward mode: one JVP per input element.

    Same result layout as :func:`jacrev` (output leaf shape, then input leaf
    shape). One forward-mode pass (:func:`jvp`) per input element. Best when
    inputs are fewer than outputs.

    >>> import ember, ember.autodiff.numpy as xp
    >>> ember.func.jacfwd(lambda x: xp.sin(x))(xp.asarray([0.0])).raw.tolist()
    [[1.0]]
    """
    nums, single = _nums(argnums)

    @functools.wraps(f)
    def wrapped(*args):
        args, raw = _tensor_args(args, nums)
        ins = tuple(args[i] for i in nums)
        g = _partial(f, args, nums)
        out = None
        cols = {}  # (in_leaf, out_leaf) -> list of columns
        for j, _, t in _one_hot_trees(ins):  # one forward-mode pass per input element
            out, tan = _forward(g, ins, t)
            for oi, col in enumerate(_tree.leaves(tan)):
                cols.setdefault((j, oi), []).append(col)
        if out is None:  # no input element: the function once, for its output's layout
            out = g(*ins)
        out_leaves, out_def = _tree.flatten(out)
        in_leaves, in_def = _tree.flatten(ins)
        per_out = []
        for oi, o in enumerate(out_leaves):
            if not _diff(o):
                per_out.append(o)
                continue
            ns = type(o)._ns
            blocks = []
            for j, x in enumerate(in_leaves):
                if not _diff(x):
                    blocks.append(x)
                    continue
                pieces = cols.get((j, oi), [])
                if pieces:
                    st = ns.stack(pieces, axis=-1)  # o.shape + (n_in,)
                else:
                    st = ns.zeros(tuple(o.shape) + (0,), dtype=o.dtype, device=o.device)
                blocks.append(ns.reshape(st, tuple(o.shape) + tuple(x.shape)))
            block = _tree.unflatten(in_def, blocks)
            per_out.append(block[0] if single else block)
        jac = _tree.unflatten(out_def, per_out)
        return _tree.map(_to_raw, jac) if raw else jac

    return wrapped


def hessian(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """Hessian of scalar ``f``: ``jacrev(jacrev(f))`` (reverse-over-reverse).

    For an input of shape ``s`` the result has shape ``s + s``; for
    structured inputs, nested structures as in :func:`jacrev`. Reverse over
    reverse is used because ember's forward mode is itself transposed
    reverse mode, so ``jacfwd(jacrev(f))`` would only add passes.

    >>> import ember, ember.autodiff.numpy as xp
    >>> ember.func.hessian(lambda x: xp.sum(x ** 3))(xp.asarray([1.0, 2.0])).raw.tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacrev(jacrev(f, argnums), argnums)


def hvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any]):
    """Hessian-vector product of scalar ``f`` at ``primals`` along ``tangents``.

    Returns a tuple with one entry per primal (the structure of each).
    Forward over reverse: one forward-mode pass over ``grad(f)`` (its forward
    and backward passes carry tangents), no Hessian is formed.

    >>> import ember, ember.autodiff.numpy as xp
    >>> ember.func.hvp(lambda x: xp.sum(x ** 3), (xp.asarray([1.0, 2.0]),), (xp.asarray([1.0, 0.0]),))[0].raw.tolist()
    [6.0, 0.0]
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        bad = primals if not isinstance(primals, (tuple, list)) else tangents
        raise TypeError(NOT_TUPLE.format(op="hvp", what=type(bad).__name__))
    primals, tangents = tuple(primals), tuple(tangents)
    _check_tangents(primals, tangents)
    raw = _any_raw(primals)
    tp = _tree.map(_as_tensor, primals)
    tt = _tree.map(_as_tensor, tangents)
    nums = tuple(range(len(tp)))
    res = _forward(grad(f, argnums=nums), tp, tt)[1]  # forward over reverse: jvp of the gradient
    return _tree.map(_to_raw, res) if raw else res
