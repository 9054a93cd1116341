"""Replay of a staged graph: Python source generated once per graph, then compiled.

Each op becomes one line ``v5 = f3(v1, c0, axis=c2)`` on backend arrays (no
Tensor wrappers, no tape), a planned one ``v6 = f4(v5, v2, out=v5)``; a value
is deleted right after its last use so its buffer goes back to the allocator
at once. Constants and callables are bound as globals of the generated
function, so every name is a fast local or global load.

The host steps on traced Python numbers come first (the ones some backend
call or output needs); a graph with guards also gets ``_guards(numbers...)``,
which runs the host steps the guards need and says whether they all hold.
"""

from __future__ import annotations

from ..autodiff import Tensor
from ..autodiff._ownership import Dead, Owned
from ..autodiff._staging import Graph, Ref, _collect

__all__ = ["compile_graph", "describe", "wrapper", "taker"]


class _Names:
    def __init__(self):
        self.env: dict = {}
        self.ids: dict = {}

    def const(self, v, prefix="c") -> str:
        if v is None or v.__class__ in (bool, int, str):
            return repr(v)
        if v.__class__ is float and v == v and v not in (float("inf"), float("-inf")):
            return repr(v)
        k = id(v)
        name = self.ids.get(k)
        if name is None:
            name = self.ids[k] = f"{prefix}{len(self.ids)}"
            self.env[name] = v
        return name


def _expr(t, names: _Names) -> str:
    c = t.__class__
    if c is Ref:
        return f"v{t.slot}"
    if c is tuple:
        inner = ", ".join(_expr(a, names) for a in t)
        return f"({inner},)" if t else "()"
    if c is list:
        return "[" + ", ".join(_expr(a, names) for a in t) + "]"
    if c is dict:
        return "{" + ", ".join(f"{names.const(k)}: {_expr(a, names)}" for k, a in t.items()) + "}"
    if c is slice:
        return f"slice({_expr(t.start, names)}, {_expr(t.stop, names)}, {_expr(t.step, names)})"
    return names.const(t)


def _host_lines(g: Graph, names: _Names, needed) -> list:
    """The host steps that the slots in ``needed`` depend on, in trace order, as lines."""
    need = {s for s in needed if g.disp[s] is None}
    chosen = []
    for op in reversed(g.host):
        if op.outs[0] in need:
            chosen.append(op)
            need.update(op.refs())
    lines = []
    for op in reversed(chosen):
        args = ", ".join(_expr(a, names) for a in op.args)
        lines.append(f"    v{op.outs[0]} = {names.const(op.fn, 'f')}({args})")
    return lines


def _number_inputs(g: Graph) -> str:
    return ", ".join(f"v{s}" for s in g.inputs if g.disp[s] is None)


def guard_source(g: Graph, names: _Names) -> str:
    """``_guards(numbers...) -> bool``: whether this call's traced numbers meet every guard."""
    lines = [f"def _guards({_number_inputs(g)}):"]
    lines += _host_lines(g, names, [s for s, _ in g.guards])
    for s, truth in g.guards:
        lines.append(f"    if {'not ' if truth else ''}v{s}:\n        return False")
    lines.append("    return True")
    return "\n".join(lines) + "\n"


def _needs_coerce(g: Graph, s) -> bool:
    """A 0-d result: NumPy's ufuncs return a scalar there, which the wrapper makes an array."""
    if s is None or g.disp[s] is None:
        return False
    v = g.values[s]
    return len(v.shape) == 0


def source(g: Graph, names: _Names) -> str:
    """The replay function's source: ``_replay(v0, v1, ...) -> tuple of outputs``."""
    params = ", ".join(f"v{s}" for s in g.inputs)
    lines = [f"def _replay({params}):"]
    # last use of each slot (outputs are never deleted)
    last: dict = {}
    for i, op in enumerate(g.ops):
        for r in op.refs():
            last[r] = i
    outs: list = []
    _collect(g.outputs, outs)
    keep = set(outs)
    for s in g.inputs:
        if s not in last and s not in keep:
            last[s] = -1
    dead_before = {}
    for s, i in last.items():
        if s not in keep:
            dead_before.setdefault(i, []).append(s)
    if g.host:  # (first: they read number inputs that no backend call reads)
        reads = [r for op in g.ops for r in op.refs()]
        lines += _host_lines(g, names, reads + outs)
    if -1 in dead_before:
        lines.append("    del " + ", ".join(f"v{s}" for s in dead_before[-1]))
    for i, op in enumerate(g.ops):
        f = names.const(op.fn, "f")
        args = ", ".join(_expr(a, names) for a in op.args)
        kw = ", ".join(f"{k}={_expr(v, names)}" for k, v in op.params.items())
        if op.out_into is not None:
            kw = (kw + ", " if kw else "") + f"out=v{op.out_into}"
        call = f"{f}({args}{', ' if args and kw else ''}{kw})"
        if op.multi:
            targets = ", ".join("_" if s is None else f"v{s}" for s in op.outs)
            lines.append(f"    {targets}, = {call}" if len(op.outs) == 1 else f"    {targets} = {call}")
            for s in op.outs:
                if _needs_coerce(g, s):
                    lines.append(f"    v{s} = {names.const(g.disp[s].coerce, 'f')}(v{s})")
        else:
            s = op.outs[0]
            if _needs_coerce(g, s):
                call = f"{names.const(g.disp[s].coerce, 'f')}({call})"
            lines.append(f"    v{s} = {call}")
        dead = [s for s in dead_before.get(i, ()) if s not in op.outs]
        if dead:
            lines.append("    del " + ", ".join(f"v{s}" for s in dead))
    copies = g.copies  # (outputs that must not share the buffer they would)
    ret = ", ".join(f"{names.const(copies[i], 'f')}({_expr(o, names)})" if i in copies else _expr(o, names)
                    for i, o in enumerate(g.outputs))
    lines.append(f"    return ({ret},)" if g.outputs else "    return ()")
    return "\n".join(lines) + "\n"


def compile_graph(g: Graph, name: str = "jit"):
    """The replay function of ``g``, its source, and its guard check (None without guards)."""
    names = _Names()
    src = source(g, names)
    if g.guards:
        src += "\n\n" + guard_source(g, names)
    env = _exec(src, dict(names.env), name)
    return env["_replay"], src, env.get("_guards")


def _exec(src: str, env: dict, where: str) -> dict:
    """Run generated source ``src`` with ``env`` as its globals (``where`` names it in
    tracebacks); returns ``env``, now holding its functions."""
    exec(compile(src, f"<ember.jit {where}>", "exec"), env)
    return env


def wrapper(out_kinds: list, out_disp: list, out_def):
    """``_wrap(outs)``: the replay's outputs as the call's results, in straight-line code:
    a kind-1 output becomes a Tensor of its dispatcher's class, the others stay as they are,
    and ``out_def``'s structure is built around them."""
    env = {"_build": out_def.unflattener()}
    lines = ["def _wrap(o):"]
    items = []
    for i, (kind, d) in enumerate(zip(out_kinds, out_disp)):
        if kind == 1:
            env[f"T{i}"] = d.T
            lines += [f"    t{i} = T{i}()", f"    t{i}._value = o[{i}]", f"    t{i}._node = None"]
            items.append(f"t{i}")
        else:
            items.append(f"o[{i}]")
    lines.append(f"    return _build([{', '.join(items)}])")
    return _exec("\n".join(lines) + "\n", env, "results")["_wrap"]


def taker(leaves: list, in_idx: list, traced: list, check, donated, written, donate, where, hand_over,
          op: str, number_key):
    """``_take(l)``: the graph's inputs for a call's leaves ``l`` (as ``Jitted._values`` gives
    them, donated leaves consumed), or None, consuming nothing, where the leaves do not have
    the classes, shapes and dtypes of ``leaves`` (untraced Python numbers: the same values) or
    the traced numbers (positions ``traced``) fail the guards ``check``; an untraced float
    zero or NaN is compared by ``number_key``, the signature's key. Straight-line code:
    the checks first, then the donations (``donate(x, op, where(2))`` per donated Tensor, once
    for one given twice), then ``hand_over(vals, [(input, handle), ...])`` for the donated
    inputs the graph writes into. None where a leaf is of a kind only the general path
    handles (a consumed or owned Tensor, a Tensor of Tensors)."""
    env: dict = {"_check": check, "_donate": donate, "_where": where, "_hand_over": hand_over, "OP": op}
    lines = ["def _take(l):"]
    for j, x in enumerate(leaves):
        c = x.__class__
        lines.append(f"    x{j} = l[{j}]")
        if c is int or c is float:
            cond = f"x{j}.__class__ is not {c.__name__}"
            if j not in traced:
                if c is float and (x == 0 or x != x):  # (0.0 == -0.0, nan != nan: the key decides)
                    env["_key"], env[f"N{j}"] = number_key, number_key(x)
                    cond += f" or _key(x{j}) != N{j}"
                else:
                    env[f"N{j}"] = x
                    cond += f" or x{j} != N{j}"
            lines.append(f"    if {cond}: return None")
            continue
        v = f"x{j}"
        if isinstance(x, Tensor):
            if c is Owned or c is Dead or isinstance(x._value, Tensor):
                return None
            env[f"C{j}"] = c
            # (a donated Tensor still on a finished transform's tape: the general path)
            node = f" or x{j}._node is not None" if j in donated else ""
            lines += [f"    if x{j}.__class__ is not C{j}{node}: return None", f"    v{j} = x{j}._value"]
            x, v = x._value, f"v{j}"
        env[f"R{j}"], env[f"S{j}"], env[f"D{j}"] = x.__class__, tuple(x.shape), x.dtype
        lines.append(f"    if {v}.__class__ is not R{j} or {v}.shape != S{j} or {v}.dtype != D{j}: return None")
    if check is not None:
        lines.append(f"    if not _check({', '.join(f'x{j}' for j in traced)}): return None")
    pos = {j: i for i, j in enumerate(in_idx)}
    if donated:
        lines.append("    w = _where(2)")
        # (a Tensor given twice is donated once: its later leaves are already dead here)
        lines += [f"    t{j} = _donate(x{j}, OP, w) if x{j}.__class__ is C{j} else None" for j in sorted(donated)]
    vals = [f"v{j}" if isinstance(leaves[j], Tensor) else f"x{j}" for j in in_idx]
    lines.append(f"    vals = [{', '.join(vals)}]")
    if written:
        # (the hand-over counts the references to each buffer: drop this function's own)
        lines.append("    del " + ", ".join(f"v{j}" for j in sorted(written)))
        spent = ", ".join(f"({pos[j]}, t{j})" for j in sorted(written))
        lines.append(f"    _hand_over(vals, [{spent}])")
    lines.append("    return vals")
    return _exec("\n".join(lines) + "\n", env, "arguments")["_take"]


def _spec(v) -> str:
    if v.shape is None:  # a traced Python number (jit's _Spec: its type's name as dtype)
        return v.dtype
    dt = str(v.dtype).replace("float", "f").replace("int", "i").replace("complex", "c")
    return f"{dt}[{','.join(str(n) for n in v.shape)}]"


def describe(g: Graph, name: str, passes: str = "") -> str:
    """A readable listing of the graph: one op a line with the result's dtype and shape."""
    def arg(t):
        c = t.__class__
        if c is Ref:
            return f"v{t.slot}"
        if c is tuple:
            return "(" + ", ".join(arg(a) for a in t) + ("," if len(t) == 1 else "") + ")"
        if c is list:
            return "[" + ", ".join(arg(a) for a in t) + "]"
        if c is dict:
            return "{" + ", ".join(f"{k!r}: {arg(a)}" for k, a in t.items()) + "}"
        if hasattr(t, "shape") and hasattr(t, "dtype") and not isinstance(t, type):  # (not a dtype)
            return f"const {_spec(t)}"
        return repr(t)

    ins = ", ".join(f"v{s}: {_spec(g.values[s])}" for s in g.inputs)
    lines = [f"jit({name})({ins}) {{"]
    for op in g.host:  # (Python operations on traced numbers)
        lines.append(f"  v{op.outs[0]}: {_spec(g.values[op.outs[0]])} = host {op.name}({', '.join(arg(x) for x in op.args)})")
    for s, truth in g.guards:
        lines.append(f"  guard bool(v{s}) is {truth}")
    for op in g.ops:
        outs = ", ".join("_" if s is None else f"v{s}: {_spec(g.values[s])}" for s in op.outs)
        a = [arg(x) for x in op.args] + [f"{k}={arg(v)}" for k, v in op.params.items()]
        into = f"  [in place of v{op.out_into}]" if op.out_into is not None else ""
        note = f"  # {op.note}" if op.note else ""
        lines.append(f"  {outs} = {op.name}({', '.join(a)}){into}{note}")
    lines.append(f"  return {', '.join(arg(o) for o in g.outputs)}")
    lines.append("}")
    if passes:
        lines.append(passes)
    return "\n".join(lines)
