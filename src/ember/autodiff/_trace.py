"""Traces, tape nodes and the reverse pass.

A *trace* is one level of differentiation, opened by a transform such as
``ember.grad``. While it is open, every op whose inputs carry a node of that
trace appends a :class:`Node` to ``trace.nodes``; the recording order is a
topological order, so the backward pass is one reversed loop (no recursion,
linear in the number of ops) that frees each node as soon as it has run.

Nested transforms open nested traces with higher levels. A tensor tracked at
level k wraps a value of a lower level; an op unwraps only the top level and
calls itself on the inner values, which records them on the outer traces.
That is how ``grad(grad(f))`` works without perturbation confusion.
"""

from __future__ import annotations

import weakref

__all__ = ["Trace", "Node", "active_traces", "live_traces", "backward"]

#: Stack of traces that are open right now, innermost last.
active_traces: list = []
#: Every Trace object still alive (open or retained, e.g. by a vjp function); the
#: ownership layer scans their tapes before an in-place write (copy-on-write).
live_traces: "weakref.WeakSet" = weakref.WeakSet()


class Trace:
    """One level of differentiation: a tape of nodes in recording order."""

    __slots__ = ("level", "nodes", "active", "checkpointing", "saver", "remat", "__weakref__")

    def __init__(self, checkpointing: str = "none"):
        self.level = active_traces[-1].level + 1 if active_traces else 1
        self.nodes: list = []
        self.active = False
        self.checkpointing = checkpointing
        live_traces.add(self)
        # saver(node, impl): called for each recorded node while a checkpointing
        # strategy or region is in effect; remat: the per-trace recompute state
        # (see _checkpoint.py) once any value may have been dropped.
        self.saver = None
        self.remat = None
        if checkpointing != "none":
            from ._checkpoint import install_strategy

            install_strategy(self, checkpointing)

    def __enter__(self):
        self.active = True
        active_traces.append(self)
        return self

    def __exit__(self, *exc):
        active_traces.remove(self)
        self.active = False
        return False

    def __repr__(self):
        return f"<Trace level={self.level} nodes={len(self.nodes)} active={self.active}>"


class Node:
    """One recorded op: its rule, its inputs (one level down) and its result.

    ``parents[i]`` is the node of input i on the same trace, or None when input
    i is a constant for this trace. ``g`` accumulates the cotangent of ``ans``
    during the backward pass. Leaves (the inputs of a transform) have
    ``rule is None``.
    """

    __slots__ = ("rule", "args", "params", "parents", "ans", "g", "trace", "ns", "index")

    def __init__(self, rule, args, params, parents, ans, trace, ns, index=None):
        self.rule = rule
        self.args = args
        self.params = params
        self.parents = parents
        self.ans = ans
        self.g = None
        self.trace = trace
        self.ns = ns
        self.index = index

    def __repr__(self):
        name = self.rule.name if self.rule is not None else "leaf"
        return f"<Node {name} level={self.trace.level}>"


def _accumulate(node, g):
    """Add cotangent ``g`` into ``node.g``."""
    old = node.g
    node.g = g if old is None else old + g


def route_to_slot(node, g) -> None:
    """Add ``g``, the cotangent of output ``node.index`` of a multi-output node, into its slot."""
    parent = node.parents[0]
    slots = parent.g
    if slots is None:
        slots = parent.g = [None] * len(parent.ans)
    i = node.index
    slots[i] = g if slots[i] is None else slots[i] + g


def backward(trace: Trace, seeds, retain: bool = False) -> None:
    """Run the reverse pass of ``trace`` from ``seeds``, a list of ``(node, cotangent)``.

    Visits the tape once in reverse recording order, calls each reached rule's
    VJP and accumulates into the parents. Unless ``retain`` is set (a VJP
    function that may be called again), each visited node drops its saved
    values right away, so memory falls as backward proceeds.
    """
    if trace.remat is not None:  # some values were not kept: recompute them on the way
        from ._checkpoint import backward_remat

        return backward_remat(trace, seeds, retain)
    for node, g in seeds:
        _accumulate(node, g)
    nodes = trace.nodes
    for node in reversed(nodes):
        g = node.g
        if g is None:
            if not retain:
                node.args = node.ans = None
            continue
        node.g = None
        rule = node.rule
        if rule.select:
            route_to_slot(node, g)
            continue
        if rule.nout > 1:
            g = rule.fill_cotangents(node.ns, g, node.ans)
        parents = node.parents
        grads = rule.vjp(node.ns, g, node.ans, node.args, node.params, parents)
        for parent, gi in zip(parents, grads):
            if parent is not None and gi is not None:
                old = parent.g
                parent.g = gi if old is None else old + gi
        if not retain:  # free what this node saved as soon as it has run
            node.args = node.ans = node.params = None
    if not retain:
        nodes.clear()
