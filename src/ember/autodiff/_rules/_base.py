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

__all__ = ["Rule", "RULES", "defvjp", "defvjp_all", "COMPUTE", "MEMORY"]

COMPUTE = "compute"
MEMORY = "memory"

RULES: dict[str, "Rule"] = {}


class Rule:
    """VJP rule of one primitive plus its memory class."""

    __slots__ = ("name", "vjp", "bound", "nout", "select", "deterministic", "raw", "fns", "scatter")

    def __init__(self, name, vjp, bound=MEMORY, nout=1, select=False, deterministic=True,
                 raw=True):
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
        # scatter(ns, acc, g, x, **params): add the cotangent into an accumulator of x's shape
        # that the backward loop owns (None: make one), in place; None when it cannot
        self.scatter = None

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


def defvjp(name: str, *fns: Callable | None, bound: str = MEMORY, nout: int = 1,
           raw: bool = True) -> Rule:
    """Register per-argument VJPs ``fns[i](ns, g, ans, *args, **params)`` for ``name``.

    ``raw=True`` (the default) promises that the functions also work on the
    backend's own arrays with the backend namespace as ``ns`` (they use only
    the array API), which the first-order backward pass does; pass
    ``raw=False`` when they need ember Tensors or wrapper-only helpers.
    """
    rule = Rule(name, _per_argument(fns), bound=bound, nout=nout, raw=raw)
    RULES[name] = rule
    return rule


def defvjp_all(name: str, fn: Callable, *, bound: str = MEMORY, nout: int = 1,
               deterministic: bool = True, raw: bool = True) -> Rule:
    """Register one VJP ``fn(ns, g, ans, args, params, parents) -> list`` for all arguments.

    Used where arguments are variadic (concat, stack) or share work.
    """
    rule = Rule(name, fn, bound=bound, nout=nout, deterministic=deterministic, raw=raw)
    RULES[name] = rule
    return rule


SELECT = Rule("_select", None, select=True)
