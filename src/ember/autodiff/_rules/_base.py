"""The rule registry: one :class:`Rule` per differentiable primitive.

A rule knows how to pull a cotangent back through its primitive (the VJP),
and whether the primitive is *compute-bound* (matmul, conv, linalg, fft,
sort: worth keeping its output) or *memory-bound* (elementwise, most
manipulation, reductions: cheap to recompute), which the checkpointing
strategies use.

VJPs are written with the wrapper namespace ``ns`` on the lower-level values,
so they are themselves recorded by any outer trace: higher order is free.

Register a rule per argument, like HIPS autograd's ``defvjp``::

    defvjp("sin", lambda ns, g, ans, x: g * ns.cos(x))

Each function receives ``(ns, g, ans, *args, **params)`` and returns the
cotangent of its argument (already reduced to that argument's shape).
Use ``None`` for an argument that never carries a gradient.

When nothing records the backward pass (no outer transform, an untracked
cotangent), it runs each VJP on the backend's arrays with the backend's own
namespace instead of the wrapper (no wrapping per op; see
``_trace.backward``). A VJP that needs the wrapper (its private helpers,
Tensor attributes) is registered with ``raw=False``.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .._api_tables import COMPUTE_BOUND, ELEMENTWISE

__all__ = ["Rule", "RULES", "defvjp", "defvjp_all", "defjvp", "COMPUTE", "MEMORY", "Spec", "spec_of",
           "NOT_KEPT"]


COMPUTE = "compute"
MEMORY = "memory"

RULES: dict[str, "Rule"] = {}

# What a node keeps of each argument for its VJP (``defvjp(..., saves=...)``): the value,
# only its shape and dtype (a Spec), its value only while another argument is tracked (the
# VJP reads it for the other argument's cotangent: ``x * y``), or nothing.
_SAVES = {"value": 0, "spec": 1, "other": 2, "none": 3}


class Spec:
    """The shape and dtype of an argument whose value a node did not keep.

    Rules that read only ``x.shape`` and ``x.dtype`` (``fit``) get this in
    place of the array, so the array is freed as soon as the forward pass
    drops it: a chain of elementwise ops keeps about half its intermediates.
    """

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"Spec(shape={tuple(self.shape)}, dtype={self.dtype})"


class _NotKept:
    __slots__ = ()

    def __repr__(self):
        return "NOT_KEPT"


#: What a node holds for an argument its VJPs do not read at all (``saves=("none",)``).
NOT_KEPT = _NotKept()

_SPECS: dict = {}


def spec_of(x) -> Spec:
    """The (shared) :class:`Spec` of backend array ``x``."""
    # the array type first: equal hashes of dtypes of two libraries (array_api_strict's and
    # NumPy's) then never get as far as comparing the dtypes, which warns
    key = (x.__class__, x.shape, x.dtype)
    try:
        s = _SPECS.get(key)
    except TypeError:  # an unhashable shape or dtype: a Spec of its own
        return Spec(x.shape, x.dtype)
    if s is None:
        if len(_SPECS) > 4096:  # (a bounded cache: programs with endless distinct shapes)
            _SPECS.clear()
        s = _SPECS[key] = Spec(x.shape, x.dtype)
    return s


class Rule:
    """VJP rule of one primitive plus its memory class."""

    __slots__ = ("name", "vjp", "bound", "nout", "select", "deterministic", "raw", "fns", "arity",
                 "scatter", "saves", "elementwise", "zero_masks", "jvp")

    def __init__(self, name, vjp, bound=MEMORY, nout=1, select=False, deterministic=True,
                 raw=True, saves=None, keep_ans=True):
        if bound not in (COMPUTE, MEMORY):
            raise ValueError(f"rule {name!r}: bound must be 'compute' or 'memory', not {bound!r}")
        self.name = name
        self.vjp = vjp
        self.bound = bound
        self.nout = nout
        self.select = select
        self.deterministic = deterministic
        self.raw = raw  # the VJP also runs on backend arrays with the backend namespace
        # per-argument VJPs (defvjp) that the raw backward may call directly
        fns = getattr(vjp, "fns", None)
        self.fns = fns if raw and nout == 1 and not select and fns and fns[0] is not None else None
        # 1 or 2: the raw backward calls fns directly for a node with that many arguments and
        # no parameters (the elementwise ops); 0: it calls vjp
        self.arity = len(self.fns) if self.fns is not None and len(self.fns) < 3 else 0
        # scatter(ns, acc, g, x, **params): add the cotangent into an accumulator of x's shape
        # that the backward loop owns (None: make one), in place; None when it cannot
        self.scatter = None
        # elementwise: output element i depends on input elements i only (after broadcasting),
        # so a cotangent known to be zero at some elements stays known zero there for the
        # inputs of the output's shape (symbolic zeros, see _trace._run)
        self.elementwise = name in ELEMENTWISE
        # zero_masks(ns, g, zmask, args, params): per argument, a bool mask of the elements
        # whose cotangent this op makes exactly zero (the ones ``x[key] = v`` overwrote, the
        # unselected side of ``where``), or None; ``zmask``: the output's own known zeros
        self.zero_masks = None
        # jvp(ns, tangents, ans, args, params): the forward-mode rule, where one is written
        # (defjvp); None: forward mode derives the tangent (autodiff/_jvp.py)
        self.jvp = None
        # None: the node keeps every argument and its result; else one code per argument
        # (_SAVES) and whether it keeps its result, read by the namespace's fast paths
        self.saves = None
        if saves is not None or not keep_ans:
            n = len(getattr(vjp, "fns", ()))
            saves = ("value",) * n if saves is None else tuple(saves)
            if len(saves) != n or not 0 < n < 3 or any(m not in _SAVES for m in saves):
                raise ValueError(
                    f"rule {name!r}: saves must give one of {sorted(_SAVES)} for each of the "
                    f"one or two arguments of a defvjp rule, not {saves!r}"
                )
            self.saves = (*(_SAVES[m] for m in saves), bool(keep_ans))

    def fill_cotangents(self, ns, gs, ans):
        """Replace missing cotangents of a multi-output node by zeros."""
        return [ns.zeros_like(a) if g is None else g for g, a in zip(gs, ans)]

    def __repr__(self):
        return f"<Rule {self.name} ({self.bound}-bound)>"


def _per_argument(fns: Sequence[Callable | None]):
    """One VJP over all arguments from per-argument functions (1- and 2-argument forms unrolled)."""
    if len(fns) == 1:
        (f0,) = fns

        def vjp1(ns, g, ans, args, params, parents):
            if parents[0] is None or f0 is None:
                return (None,)
            return (f0(ns, g, ans, *args, **params) if params else f0(ns, g, ans, *args),)

        vjp1.fns = tuple(fns)
        return vjp1
    if len(fns) == 2:
        f0, f1 = fns

        def vjp2(ns, g, ans, args, params, parents):
            p0, p1 = parents
            if params:
                return (
                    None if p0 is None or f0 is None else f0(ns, g, ans, *args, **params),
                    None if p1 is None or f1 is None else f1(ns, g, ans, *args, **params),
                )
            return (
                None if p0 is None or f0 is None else f0(ns, g, ans, *args),
                None if p1 is None or f1 is None else f1(ns, g, ans, *args),
            )

        vjp2.fns = tuple(fns)
        return vjp2

    def vjp(ns, g, ans, args, params, parents):
        return [
            None if (p is None or f is None) else f(ns, g, ans, *args, **params)
            for f, p in zip(fns, parents)
        ]

    vjp.fns = tuple(fns)  # the per-argument functions, for introspection (tests, docs)
    return vjp


def _bound(name: str, bound: str | None) -> str:
    """``bound`` as given, else the op table's (``compute`` where recomputing is dear)."""
    if bound is not None:
        return bound
    return COMPUTE if name in COMPUTE_BOUND else MEMORY


def defvjp(name: str, *fns: Callable | None, bound: str | None = None, nout: int = 1,
           raw: bool = True, saves: Sequence[str] | None = None, keep_ans: bool = True) -> Rule:
    """Register per-argument VJPs ``fns[i](ns, g, ans, *args, **params)`` for ``name``.

    ``raw=True`` (the default) promises that the functions also work on the
    backend's own arrays with the backend namespace as ``ns`` (they use only
    the array API), which the first-order backward pass does; pass
    ``raw=False`` when they need ember Tensors or wrapper-only helpers.

    ``saves`` (one entry per argument) and ``keep_ans`` say what the functions
    read, so the tape keeps no more: ``"value"`` (the default), ``"spec"``
    (only ``.shape``/``.dtype``: they get a :class:`Spec`), ``"other"`` (the
    value, but only the other argument's function reads it: kept while that
    one is tracked) or ``"none"`` (they get :data:`NOT_KEPT`); ``keep_ans=False``
    when none reads ``ans`` (they get None). Unary and binary rules only.
    ``defvjp("add", dx, dy, saves=("spec", "spec"), keep_ans=False)`` lets
    ``a + b`` keep no array.
    """
    rule = Rule(name, _per_argument(fns), bound=_bound(name, bound), nout=nout, raw=raw, saves=saves,
                keep_ans=keep_ans)
    RULES[name] = rule
    return rule


def defjvp(name: str, jvp: Callable) -> Rule:
    """Register ``jvp(ns, tangents, ans, args, params)`` as the forward-mode rule of ``name``.

    ``tangents[i]`` is the tangent of ``args[i]`` (None: zero); a multi-output
    rule returns one tangent per output. Written with ``ns``, it is recorded by
    outer traces like a VJP. Without one, forward mode derives the tangent
    (elementwise, linear and bilinear ops; else the VJP transposed).
    """
    rule = RULES[name]
    rule.jvp = jvp
    return rule


def defvjp_all(name: str, fn: Callable, *, bound: str | None = None, nout: int = 1,
               deterministic: bool = True, raw: bool = True) -> Rule:
    """Register one VJP ``fn(ns, g, ans, args, params, parents) -> list`` for all arguments.

    Used where arguments are variadic (concat, stack) or share work.
    """
    rule = Rule(name, fn, bound=_bound(name, bound), nout=nout, deterministic=deterministic, raw=raw)
    RULES[name] = rule
    return rule


SELECT = Rule("_select", None, select=True)
