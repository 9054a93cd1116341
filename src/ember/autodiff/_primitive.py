"""User-defined differentiable primitives: ``ember.primitive`` and its ``defvjp``.

A primitive is a function ember treats as one op: its forward runs on the
backend's own arrays (no tape inside it), and its gradient comes from the
VJPs registered for it, like HIPS autograd's ``primitive`` + ``defvjp``::

    @ember.primitive
    def softplus(xp, x):
        return xp.log1p(xp.exp(-xp.abs(x))) + xp.maximum(x, 0.0)

    softplus.defvjp(lambda xp, g, ans, x: g / (1.0 + xp.exp(-x)))
    softplus.defjvp(lambda xp, tangents, ans, x: tangents[0] / (1.0 + xp.exp(-x)))  # optional

Both functions get the namespace to compute with as ``xp``: the backend's own
for the forward and the first-order backward pass, ember's wrapper namespace
when an outer transform records the backward pass (so ``grad(grad(f))``,
``hessian`` and ``jvp`` differentiate the VJP itself). A primitive crosses the
same dispatcher as the standard's functions, so it works on every backend,
under every transform, with ``checkpointing="balanced"`` (a memory-bound
primitive's output is recomputed from its inputs) and with ``ember.consume``.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Callable

import array_api_compat

from .._errors import NotDifferentiableError
from ._rules._base import COMPUTE, MEMORY, RULES, defjvp, defvjp, defvjp_all
from ._rules._util import RUN_TIME_KERNELS
from ._batching import _PRIMITIVES
from ._tensor import Tensor

__all__ = ["primitive", "Primitive", "FRESH"]

#: the keys of the primitives declared ``fresh`` (their result is always a new buffer), and
#: the rules' run-time kernels, whose results are too
FRESH: set = set(RUN_TIME_KERNELS)

NO_VJP = (
    "{name}: this ember.primitive has no VJP, so it cannot be differentiated. Register one "
    "per argument with {name}.defvjp(lambda xp, g, ans, *args, **params: ...), or wrap the "
    "argument in ember.stop_gradient if no gradient should flow"
)
JVP_BEFORE_VJP = (
    "{name}.defjvp: register the VJPs first ({name}.defvjp(...)); the JVP is forward mode's "
    "shortcut for an op reverse mode can already differentiate"
)
BAD_BOUND = "ember.primitive: bound must be {compute!r} or {memory!r}, got {bound!r}"
BAD_VJP_COUNT = (
    "{name}.defvjp: got {got} VJP functions; give one per positional argument "
    "(None for an argument that never carries a gradient)"
)

_ids = itertools.count()


class Primitive:
    """A function ember differentiates through the VJPs registered for it.

    Made by :func:`primitive`; call it like the function it wraps, without the
    leading ``xp`` (positional arguments may be arrays, keywords are static
    parameters handed to the forward and to every VJP).
    """

    def __init__(self, fn: Callable, *, name: str | None = None, bound: str = MEMORY,
                 specialize: Callable[[Any], Callable | None] | None = None, elementwise: bool = False,
                 fresh: bool = False):
        if bound not in (COMPUTE, MEMORY):
            raise ValueError(BAD_BOUND.format(compute=COMPUTE, memory=MEMORY, bound=bound))
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", repr(fn))
        self.bound = bound
        # the rule's key (and the op's name in messages): unique, so two primitives of one
        # name never share VJPs
        taken = self.name in RULES or self.name in RUN_TIME_KERNELS
        self.key = f"{self.name}#{next(_ids)}" if taken else self.name
        self.specialize = specialize
        self.elementwise = elementwise
        self.fresh = fresh
        if fresh:  # (ember.jit may then write later results into its buffer)
            FRESH.add(self.key)
        self._fwd_residuals: Callable | None = None
        self._jit_only = False
        self._one_argument = False
        self._ops: dict = {}  # dispatcher -> the op on that backend's Tensors (built once)
        _PRIMITIVES.add(self.key)  # (named in vmap's message when it has no batching rule)
        if elementwise:  # an elementwise op batches by aligning ranks (_batch_rules)
            from ._batch_rules import elementwise as batch_elementwise
            from ._batching import BATCH_RULES

            BATCH_RULES[self.key] = batch_elementwise
        functools.update_wrapper(self, fn)

    def defvjp(self, *vjps: Callable | None, saves=None, keep_ans: bool = True) -> "Primitive":
        """Register one VJP per positional argument: ``vjp(xp, g, ans, *args, **params)``.

        Each returns the cotangent of its argument, reduced to that argument's
        shape (sum over the axes broadcasting added). ``saves`` and
        ``keep_ans`` say what the VJPs read, as for :func:`ember.autodiff.defvjp`
        (one- and two-argument primitives), so the tape keeps no more.
        Returns the primitive, so it chains.
        """
        if not vjps:
            raise TypeError(BAD_VJP_COUNT.format(name=self.name, got=0))
        defvjp(self.key, *vjps, bound=self.bound, saves=saves, keep_ans=keep_ans).elementwise = self.elementwise
        self._one_argument = len(vjps) == 1
        self._ops.clear()  # (ops built before refused tracked arguments)
        return self

    def defvjp_all(self, vjp: Callable) -> "Primitive":
        """Register one VJP for all arguments: ``vjp(xp, g, ans, args, params, needed)``.

        For arguments that share work (a product's three gradients): it returns
        one cotangent per positional argument; ``needed[i]`` is None where no
        cotangent of argument ``i`` is wanted (skip computing it).
        """
        defvjp_all(self.key, vjp, bound=self.bound).elementwise = self.elementwise
        self._one_argument = False
        self._ops.clear()
        return self

    def defresiduals(self, fwd: Callable, *, jit_only: bool = False) -> "Primitive":
        """Register a forward that also returns what the VJPs need: ``fwd(xp, *args, **params)``
        gives ``(ans, {name: value})`` (JAX's ``custom_vjp`` residuals).

        Recorded on a tape, the op runs ``fwd`` and its VJPs get the values as
        extra keyword parameters, so a VJP does not recompute what the forward
        had in hand (a softmax, a normalisation's statistics); untracked, or
        where checkpointing may recompute the op, the plain forward runs and the
        VJPs get none of them (they must then compute them).
        ``jit_only=True`` keeps them only in ``ember.jit``'s graphs (``jit(grad(f))``)
        and lets an eager tape keep the inputs alone: for residuals as large as
        the input that the VJP can recompute (GELU's ``tanh``), traded for
        speed where the graph is compiled and for memory where it is not.
        """
        self._fwd_residuals = fwd
        self._jit_only = jit_only
        self._ops.clear()
        return self

    def defjvp(self, jvp: Callable) -> "Primitive":
        """Register the forward-mode rule ``jvp(xp, tangents, ans, *args, **params)``.

        ``tangents`` has one entry per positional argument (None: zero); the
        result is the tangent of ``ans``. Without one, forward mode derives the
        tangent from the VJPs (one small reverse pass per call), so this is an
        optimisation, not a requirement. Needs the VJPs registered first.
        """
        if not self.has_vjp:
            raise TypeError(JVP_BEFORE_VJP.format(name=self.name))
        defjvp(self.key, lambda ns, tangents, ans, args, params: jvp(ns, tuple(tangents), ans, *args,
                                                                     **params))
        return self

    def defvmap(self, rule: Callable | str) -> "Primitive":
        """Register how the primitive runs on a batch under ``ember.vmap``.

        ``rule(xp, batched, *args, **params)`` gets the arguments with the batch axis in
        front of a batched one (``batched[i]`` says which) and returns the batched result,
        batch axis in front; ``xp`` computes on those values (calling the primitive itself
        is fine). ``"elementwise"`` registers the elementwise rule (ranks aligned, the
        primitive called once on the batch), ``"loop"`` runs it once per example and stacks
        the results (slow: for primitives that cannot batch). Returns the primitive.
        """
        from . import _batch_rules as br
        from ._batching import BATCH_RULES, loop_rule

        if rule == "elementwise":
            BATCH_RULES[self.key] = br.elementwise
        elif rule == "loop":
            BATCH_RULES[self.key] = loop_rule
        elif callable(rule):
            def batched(c, vals, flags, params):
                return rule(c.ns, tuple(flags), *vals, **params)

            BATCH_RULES[self.key] = batched
        else:
            raise TypeError(f"{self.name}.defvmap: give a function, 'elementwise' or 'loop', not {rule!r}")
        return self

    @property
    def has_vjp(self) -> bool:
        """Whether VJPs are registered (without them the primitive is a constant op)."""
        return self.key in RULES

    def _forward_on(self, d) -> Callable:
        """The forward on dispatcher ``d``'s backend arrays: ``specialize``'s kernel for that
        backend where it gives one, else ``fn`` with the backend namespace."""
        raw_ns = d.raw_ns
        kernel = self.specialize(raw_ns) if self.specialize is not None else None
        if kernel is not None:
            return kernel
        fn = self.fn

        def impl(*raw, **params):
            return fn(raw_ns, *raw, **params)

        return impl

    def _op(self, d) -> Callable:
        """This primitive as an op of dispatcher ``d``, built once: untracked inputs take the
        dispatcher's fast path (the forward and one Tensor, no tape)."""
        key, impl, fwd_res = self.key, self._forward_on(d), self._fwd_residuals
        if not self.has_vjp:
            def op(*args, **params):
                if any(isinstance(a, Tensor) and getattr(a, "_node", None) is not None
                       and a.__class__ is not d.B and d.is_differentiable(a)
                       for a in args):  # (a vmap's batched value is no trace)
                    raise NotDifferentiableError(NO_VJP.format(name=self.name))  # never cut silently
                return d.call(key, impl, args, params)
        elif fwd_res is not None:
            raw_ns, fast, keeping = d.raw_ns, d.fast_op(key, impl), d.record_keeping

            def with_residuals(*raw, **params):
                return fwd_res(raw_ns, *raw, **params)

            eager = not self._jit_only

            def op(*args, **params):
                res = keeping(key, with_residuals, args, params, args, eager)
                return fast(*args, **params) if res is None else res
        elif self._one_argument:  # the unary fast path: it keeps only what the VJP reads (saves)
            unary, fast = d._unary(key, impl), d.fast_op(key, impl)

            def op(*args, **params):
                return unary(*args) if not params and len(args) == 1 else fast(*args, **params)
        else:
            op = d.fast_op(key, impl)
        self._ops[d] = op
        return op

    def __call__(self, *args: Any, **params: Any) -> Any:
        for a in args:
            if isinstance(a, Tensor):  # (a consume() marker has its namespace per instance)
                d = a._ns._dispatch
                break
        else:  # backend arrays only: the forward as it is
            arrays = [a for a in args if array_api_compat.is_array_api_obj(a)]
            xp = array_api_compat.array_namespace(*arrays) if arrays else None
            return self.fn(xp, *args, **params)
        op = self._ops.get(d)
        return (op if op is not None else self._op(d))(*args, **params)

    def __repr__(self) -> str:
        return f"<ember.primitive {self.name} ({self.bound}-bound)>"


def primitive(fn: Callable | None = None, *, name: str | None = None, bound: str = MEMORY,
              specialize: Callable[[Any], Callable | None] | None = None, elementwise: bool = False,
              fresh: bool = False) -> Any:
    """Make ``fn(xp, *args, **params)`` one differentiable op; add its VJPs with ``.defvjp``.

    ``bound`` says what checkpointing does with its output: ``"memory"``
    (cheap to recompute: ``checkpointing="balanced"`` drops it and recomputes it
    in the backward pass) or ``"compute"`` (worth keeping). Usable bare
    (``@ember.primitive``) or with options (``@ember.primitive(bound="compute")``).
    ``specialize(xp)`` may give a faster forward for one backend (called once per
    backend with its namespace; None keeps ``fn``); it must compute the same values.
    ``elementwise=True`` promises that each output element depends only on the
    same element of each (broadcast) input: the tape then knows which cotangent
    elements are exactly zero (symbolic zeros), and forward mode derives the JVP
    from the VJPs without a reverse pass. ``fresh=True`` promises that the
    forward always returns a new array, never an argument or a view of one (as a
    product or a reduction does): ``ember.jit`` may then write later results
    into that buffer instead of treating the result as an alias of the inputs.

    >>> import ember, ember.autodiff.numpy as xp
    >>> @ember.primitive
    ... def cube(xp, x):
    ...     return x * x * x
    >>> _ = cube.defvjp(lambda xp, g, ans, x: g * 3.0 * x * x)
    >>> float(ember.grad(lambda x: cube(x))(xp.asarray(2.0)))
    12.0
    """
    opts = dict(name=name, bound=bound, specialize=specialize, elementwise=elementwise, fresh=fresh)
    if fn is None:
        return lambda f: Primitive(f, **opts)
    return Primitive(fn, **opts)
