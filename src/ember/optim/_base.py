"""The optimizer protocol and the path-indexed machinery every ember optimizer shares.

An optimizer is a pair of pure functions (like optax):

    state = opt.init(params)
    params, state = opt.update(params, grads, state)

``params`` is any ember structure (dicts, lists, registered dataclasses,
modules); its *parameters* are its real floating-point array leaves. The
state is plain data that :func:`ember.io.save` can write::

    {"step": <int: updates done>,
     "params": {"encoder.layers.0.weight": {"step": <int>, "m": <array>, ...}, ...}}

It is indexed by the parameter's path text, not by object identity or
position, so it survives a restart, a refactor that keeps paths (or one that
:func:`ember.optim.rename` follows), and a model that grows. Per-parameter
arrays live on the parameter's own backend (``zeros_like(p)`` of its
namespace) and have its shape and dtype.

Convention for the per-parameter state: a fresh one is ``{"step": 0}`` plus
zero arrays, one per *slot*; update rules treat ``step == 0`` as the first
update. That is what makes :func:`ember.optim.reset` exact without knowing
the optimizer.

:class:`PathOptimizer` implements parameter groups, freezing, the
``on_new`` / ``on_missing`` policies, gradient clipping and learning-rate
schedules once; a concrete optimizer only names its hyperparameters and
slots and writes ``_apply``: the update of one parameter, with the array-API
namespace of that parameter.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Mapping, Protocol, Sequence, TypedDict, runtime_checkable

from .. import tree as _tree
from ..autodiff import host_call
from ..autodiff.ownership import Owned, as_operand, take_buffer
from .._errors import DTypeError, ShapeError, StructureError
from . import lazy as _lazy
from . import policies as _policies
from ._patterns import Pattern, kind, matcher, namespace
from .clip import clip_by_global_norm
from .groups import Group, assign
from .schedules import as_schedule, constant

__all__ = ["Optimizer", "PathOptimizer", "State", "Options"]

State = dict  # {"step": int, "params": {path: {"step": int, slot: array}}}
_DTYPE = attrgetter("dtype")


def _lr_at(schedule: Callable[[int], float], step: int) -> float:
    return float(schedule(step))


# Error texts (module constants so tests can check them).
MISSING_GRADS = (
    "{op}: no gradient for the trainable parameters {paths}. Pass grads with the same "
    "structure as params (e.g. from ember.grad), or freeze those paths with freeze=..."
)
GRAD_SHAPE = (
    "{op}: the gradient of {path} has shape {gshape} but the parameter has shape {pshape}; "
    "gradients must have their parameter's shape (no broadcasting)"
)
COMPLEX_PARAM = (
    "{op}: the parameters {paths} are complex; ember optimizers update real floating-point "
    "parameters only. Store them as separate real and imaginary arrays, or freeze them"
)
UNKNOWN_HPARAM = (
    "{op}: unknown hyperparameter(s) {names} in group {group}; {op} takes {known}"
)
BAD_HPARAM = "{op}: {name}={value!r} is invalid: {why}"
BAD_BETAS = "must be a pair (beta1, beta2) with 0 <= beta < 1 (group {group})"
BAD_STEP = (
    "{op}: the state's 'step' is {value!r}; it must be a non-negative int (the number of "
    "updates done). Was the state built by {op}.init?"
)


@runtime_checkable
class Optimizer(Protocol):
    """What ember's training code needs from an optimizer: two pure functions.

    ``init(params) -> state`` builds the state for a parameter structure;
    ``update(params, grads, state) -> (params, state)`` returns new ones and
    never mutates its arguments.
    """

    def init(self, params: Any) -> State: ...

    def update(self, params: Any, grads: Any, state: State) -> tuple[Any, State]: ...


class Options(TypedDict, total=False):
    """The keyword options every ember optimizer takes besides its hyperparameters.

    See :class:`PathOptimizer` for what each does; e.g.
    ``SGD(0.1, freeze="encoder.*", clip_norm=1.0)``.
    """

    groups: Sequence[Group] | None
    freeze: Pattern | None
    on_new: str | None
    on_missing: str | None
    clip_norm: float | None
    persist: str | int
    graph_warn: int | None


class _Plan:
    """What one structure (treedef + which leaves are parameters) means for an optimizer."""

    __slots__ = ("paths", "trainable", "frozen", "lazy")

    def __init__(self, paths: list[str], trainable: list[tuple[int, str, int]], frozen: list[str],
                 lazy: tuple[int, str] | None = None):
        self.paths = paths
        self.trainable = trainable  # (leaf index, path text, group index)
        self.frozen = frozen
        self.lazy = lazy  # (leaf index, path) of the first lazy trainable parameter, or None


class PathOptimizer:
    """Base class of ember's optimizers: path-indexed state, groups, freezing, policies.

    Subclasses set ``HPARAMS`` (defaults of their hyperparameters, ``lr``
    first), implement ``_slots(hp)`` (names of the per-parameter arrays for
    hyperparameters ``hp``) and ``_apply(xp, p, g, s, hp, t)``, the update of
    one parameter ``p`` with gradient ``g`` and slot arrays ``s`` at its
    ``t``-th update (``t`` starts at 1), returning ``(new_p, new_slots)``.

    Options shared by every optimizer (the keywords of :class:`Options`,
    which subclasses pass on as ``**options``):

    - ``groups``: a list of :class:`ember.optim.Group`; each trainable
      parameter must fall in exactly one (checked at every new structure).
      A group overrides hyperparameters and scales the learning rate.
    - ``freeze``: a path pattern; matching parameters get no update and no state.
    - ``on_new``: ``"init"`` (a parameter without state starts from a fresh
      one) or ``"error"``.
    - ``on_missing``: what happens to state entries whose parameter is gone
      (removed, renamed or frozen): ``"keep"``, ``"drop"`` or ``"error"``.
      Not given, they are ``"init"`` and ``"keep"`` and ``update`` warns
      (:class:`ember.optim.StateMismatchWarning`) naming the paths they
      acted on; given explicitly, they act quietly.
    - ``clip_norm``: if set, gradients of the trainable parameters are scaled
      by :func:`ember.optim.clip_by_global_norm` before the update.
    - ``persist``: for parameters on a lazy backend (Dask), when the new
      parameters and state are persisted so graphs stay bounded: ``"step"``
      (every update, the default), an int N (every N updates) or ``"never"``.
    - ``graph_warn``: warn (:class:`ember.optim.GraphGrowthWarning`) once when a
      lazy parameter's graph exceeds this many layers (None: never). See
      :mod:`ember.optim.lazy`.
    """

    HPARAMS: Mapping[str, Any] = {"lr": 1e-3}

    def __init__(
        self,
        hparams: Mapping[str, Any],
        *,
        groups: Sequence[Group] | None = None,
        freeze: Pattern | None = None,
        on_new: str | None = None,
        on_missing: str | None = None,
        clip_norm: float | None = None,
        persist: str | int = "step",
        graph_warn: int | None = _lazy.GRAPH_WARN_LAYERS,
    ) -> None:
        op = type(self).__name__
        # policies left at their defaults act as "init" / "keep" but warn (policies.warn_defaults)
        self._default_new, self._default_missing, self._told = on_new is None, on_missing is None, set()
        on_new = "init" if on_new is None else on_new
        on_missing = "keep" if on_missing is None else on_missing
        _policies.check_policies(op, on_new, on_missing)
        _lazy.check_persist(op, persist, graph_warn)
        self.persist, self.graph_warn, self._warned_growth = persist, graph_warn, False
        self.hparams = dict(hparams)
        self.hparams["lr"] = as_schedule(self.hparams["lr"])
        self._check_hparams(self.hparams, "default")
        self.groups: tuple[Group, ...] | None = tuple(groups) if groups is not None else None
        if self.groups is not None:
            if not self.groups:
                raise ValueError(f"{op}: groups=[] has no group; pass None for one group of everything")
            for grp in self.groups:
                unknown = sorted(set(grp.hparams) - set(self.HPARAMS))
                if unknown:
                    raise TypeError(
                        UNKNOWN_HPARAM.format(op=op, names=unknown, group=grp.label, known=list(self.HPARAMS))
                    )
                hp = dict(self.hparams, **grp.hparams)
                hp["lr"] = as_schedule(hp["lr"])
                self._check_hparams(hp, grp.label)
        self.freeze = freeze
        self._frozen = matcher(freeze, f"{op}(freeze=...)") if freeze is not None else None
        self.on_new = on_new
        self.on_missing = on_missing
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(BAD_HPARAM.format(op=op, name="clip_norm", value=clip_norm, why="must be > 0"))
        self.clip_norm = clip_norm
        self._plans: dict[Any, _Plan] = {}
        self._at: tuple[dict[str, Any], Any] | None = None  # (hparams, _hparams_at's result)

    # ------------------------------------------------------------------ hooks
    def _check_hparams(self, hp: Mapping[str, Any], group: str) -> None:
        """Raise ValueError for invalid hyperparameters (subclasses extend)."""
        for name, value in hp.items():
            if name in ("lr",) or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if value < 0:
                raise ValueError(
                    BAD_HPARAM.format(op=type(self).__name__, name=name, value=value, why=f"must be >= 0 (group {group})")
                )
        if "betas" in hp:
            self._check_betas(hp["betas"], group)

    def _check_betas(self, b: Any, group: str) -> None:
        """Raise ValueError unless ``b`` is a pair of numbers in [0, 1) (Adam's and Lion's ``betas``)."""
        if not (isinstance(b, (tuple, list)) and len(b) == 2 and all(isinstance(x, (int, float)) and 0 <= x < 1 for x in b)):
            raise ValueError(
                BAD_HPARAM.format(op=type(self).__name__, name="betas", value=b, why=BAD_BETAS.format(group=group))
            )

    def _slots(self, hp: Mapping[str, Any]) -> tuple[str, ...]:
        """Names of the per-parameter state arrays under hyperparameters ``hp``."""
        return ()

    def _apply(
        self, xp: Any, p: Any, g: Any, s: dict[str, Any], hp: Mapping[str, Any], t: int
    ) -> tuple[Any, dict[str, Any]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _inplace(self, w: Any, hp: Mapping[str, Any]) -> Callable[..., tuple[Any, dict[str, Any]]] | None:
        """``_apply`` computing into the gradient's buffer, for hyperparameters ``hp``: a
        function ``(buf, p, s, t) -> (new_p, new_slots)`` on backend arrays, where ``buf``
        holds ``g`` and may be overwritten, and ``p`` and the slots ``s`` are only read; or
        None where the subclass has no such form for ``hp`` (then ``_apply`` runs).
        ``w.add(a, b, out=buf)`` etc. are the backend's ufuncs (``autodiff._ownership.Writer``).
        Made once per update and group, so hyperparameter choices are taken once."""
        return None

    # ------------------------------------------------------------ structure
    def _group_hparams(self, step: int) -> list[dict[str, Any]]:
        """Hyperparameters of each group with ``lr`` evaluated at ``step`` (under ``ember.jit``,
        with a traced step, the schedule runs at each call: ``host_call``)."""
        if not self.groups:  # the usual case
            hp = dict(self.hparams)
            hp["lr"] = host_call(_lr_at, as_schedule(hp["lr"]), step)
            return [hp]
        out = []
        for grp in self.groups:
            hp = dict(self.hparams, **grp.hparams)
            hp["lr"] = host_call(_lr_at, as_schedule(hp["lr"]), step) * grp.lr_scale
            out.append(hp)
        return out

    def _hparams_at(self, step: int) -> tuple[list[dict[str, Any]], list[tuple[str, ...]], dict]:
        """``(hyperparameters per group, their slot names, kernels)`` at ``step``; ``kernels``
        maps ``(group, Writer)`` to ``self._inplace(w, hp)`` (filled by the caller). Kept from
        one step to the next while the learning rate is a constant and ``hparams`` unchanged."""
        cached = self._at
        if cached is not None and cached[0] == self.hparams:
            return cached[1]
        hps = self._group_hparams(step)
        out = hps, [self._slots(hp) for hp in hps], {}
        if self.groups is None and self.hparams["lr"].__class__ is constant:
            self._at = (dict(self.hparams), out)
        return out

    def _plan(self, op: str, leaves: list[Any], td: Any) -> _Plan:
        """The plan of a structure, cached by treedef and the leaves' array types and dtypes
        (which decide their kinds: the key is found without a Python loop)."""
        try:
            key = (td, tuple(map(type, leaves)), tuple(map(_DTYPE, leaves)))
            plan = self._plans.get(key)
        except (AttributeError, TypeError):  # a leaf without a (hashable) dtype: not cached
            key = plan = None
        if plan is not None:
            return plan
        plan = self._plan_of(op, leaves, td)
        if key is not None:
            if len(self._plans) >= 16:  # a bounded cache; structures rarely change
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def _plan_of(self, op: str, leaves: list[Any], td: Any) -> _Plan:
        mask = []
        complex_at = []
        for i, x in enumerate(leaves):
            k = kind(x)
            mask.append(k == "real")
            if k == "complex":
                complex_at.append(i)
        paths = [str(p) for p in td.paths()]
        if complex_at:
            cpaths = [paths[i] for i in complex_at if not (self._frozen and self._frozen(paths[i]))]
            if cpaths:
                raise DTypeError(COMPLEX_PARAM.format(op=op, paths=cpaths))
        trainable_idx = []
        frozen = []
        for i, (pth, m) in enumerate(zip(paths, mask)):
            if not m:
                continue
            if self._frozen is not None and self._frozen(pth):
                frozen.append(pth)
            else:
                trainable_idx.append(i)
        tpaths = [paths[i] for i in trainable_idx]
        gidx = assign(self.groups, tpaths, op) if self.groups else [0] * len(tpaths)
        lazy = next(((i, paths[i]) for i in trainable_idx if _lazy.is_lazy_leaf(leaves[i])), None)
        return _Plan(paths, [(i, pth, gi) for i, pth, gi in zip(trainable_idx, tpaths, gidx)], frozen, lazy)

    def trainable_paths(self, params: Any) -> list[str]:
        """Paths (text) of the parameters this optimizer updates: real floating, not frozen."""
        leaves, td = _tree.flatten(params)
        return [pth for _, pth, _ in self._plan(f"{type(self).__name__}.trainable_paths", leaves, td).trainable]

    def _fresh(self, p: Any, hp: Mapping[str, Any]) -> dict[str, Any]:
        xp = namespace(p)
        s: dict[str, Any] = {"step": 0}
        for name in self._slots(hp):
            s[name] = xp.zeros_like(p)
        return s

    def _specs(self, plan: _Plan, leaves: list[Any], hps: list[dict[str, Any]]) -> dict[str, _policies.Spec]:
        return {
            pth: _policies.Spec(leaves[i], self._slots(hps[gi]), lambda i=i, gi=gi: self._fresh(leaves[i], hps[gi]))
            for i, pth, gi in plan.trainable
        }

    # ------------------------------------------------------------ protocol
    def init(self, params: Any) -> State:
        """A fresh state for ``params``: step 0, zero slots for every trainable parameter."""
        op = f"{type(self).__name__}.init"
        leaves, td = _tree.flatten(params)
        plan = self._plan(op, leaves, td)
        hps = self._group_hparams(0)
        return {"step": 0, "params": {pth: self._fresh(leaves[i], hps[gi]) for i, pth, gi in plan.trainable}}

    def update(self, params: Any, grads: Any, state: State) -> tuple[Any, State]:
        """One optimization step: ``(params, state) -> (new params, new state)``; pure.

        ``grads`` may be ``ember.consume(grads)``: an optimizer with an in-place
        form (``SGD``) then writes its new values into the gradients' buffers
        where :func:`ember.consume`'s rules allow.

        Parameters without state follow ``on_new``, state without parameter
        ``on_missing``; state that no longer fits its parameter (shape, dtype
        or slots changed) is re-initialised under ``on_new="init"`` (unless
        ``on_missing="error"``) and an error otherwise.
        """
        op = f"{type(self).__name__}.update"
        leaves, td = _tree.flatten(params)
        plan = self._plan(op, leaves, td)
        grad_list = self._grads(op, grads, td, plan)
        if self.clip_norm is not None:  # (consumed gradients are read twice: plain values)
            grad_list = [as_operand(g, op) if g.__class__ is Owned else g for g in grad_list]
        into = []  # per trainable parameter: (Writer, buffer) where g's buffer takes the result
        for (i, _, _), g in zip(plan.trainable, grad_list):
            if g.__class__ is not Owned:
                into.append(None)
                continue
            p = leaves[i]  # consume(grads): the new value may go into g's buffer
            if p.__class__ is g._mod._Tensor and p._node is None:
                g, w, buf = take_buffer(g, op, p)
            else:
                g, buf = as_operand(g, op), None
            grad_list[len(into)] = g
            into.append(None if buf is None else (w, buf))
        return self._update_leaves(op, leaves, td, plan, grad_list, into, state)

    def _update_leaves(self, op: str, leaves: list[Any], td: Any, plan: _Plan, grad_list: list[Any],
                       into: list[Any], state: State, bound: bool = True) -> tuple[Any, State]:
        """``update`` on flat lists: ``grad_list[j]`` is the gradient of ``plan.trainable[j]``
        (a Tensor), ``into[j]`` a ``(Writer, buffer)`` pair where the result may be written
        into that gradient's buffer (then ``grad_list[j]`` may be None: the buffer holds the
        gradient; never with ``clip_norm``, which reads them all first), else None.
        ``bound``: apply the lazy-backend persist policy here (``train_step`` applies it
        itself, with the loss in the same persist)."""
        step = _policies.check_state(op, state)
        hps, slots, kernels = self._hparams_at(step)
        old = state["params"]

        # the per-parameter states, reconciled with the parameters (fast when nothing changed)
        fits = len(old) == len(plan.trainable)
        if fits:
            fit = _policies.fits
            for i, pth, gi in plan.trainable:
                s = old.get(pth)
                if s.__class__ is dict and len(s) == 1 and not slots[gi] and s.get("step").__class__ is int:
                    continue  # (a slotless entry {"step": t}, SGD's: fits's first case, without a call)
                if s is None or not fit(s, leaves[i], slots[gi]):
                    fits = False
                    break
        if fits:
            pstates = old
        else:
            pstates, report = _policies.reconcile(
                op, old, self._specs(plan, leaves, hps), self.on_new, self.on_missing
            )
            if not report.clean and (self._default_new or self._default_missing):
                _policies.warn_defaults(op, report, self._default_new, self._default_missing, self._told)

        if self.clip_norm is not None:
            grad_list, _ = clip_by_global_norm(grad_list, self.clip_norm)
        new_leaves = list(leaves)
        new_states = dict(pstates)
        for (i, pth, gi), g, w_buf in zip(plan.trainable, grad_list, into):
            p = leaves[i]
            s = pstates[pth]
            t = s["step"] + 1
            names = slots[gi]
            if w_buf is not None:  # (g has p's shape and dtype: checked when the buffer was taken)
                w, buf = w_buf
                k = kernels.get((gi, w), False)
                if k is False:
                    k = kernels[gi, w] = self._inplace(w, hps[gi])
                if k is not None:
                    T = p.__class__
                    raw = {n: s[n]._value if s[n].__class__ is T else s[n] for n in names} if names else {}
                    new_value, raw_slots = k(buf, p._value, raw, t)
                    new_leaves[i] = new_p = T()
                    new_p._value = new_value
                    new_p._node = None
                    new_states[pth] = new_slots = {"step": t}
                    if raw_slots:
                        for n, v in raw_slots.items():
                            new_slots[n] = x = T()
                            x._value = v
                            x._node = None
                    continue
                if g is None:
                    g = p._ns._dispatch.make(buf, None)
            if g.shape != p.shape:
                raise ShapeError(GRAD_SHAPE.format(op=op, path=pth, gshape=tuple(g.shape), pshape=tuple(p.shape)))
            xp = namespace(p)
            new_p, new_slots = self._apply(xp, p, g, {k: s[k] for k in names}, hps[gi], t)
            if new_p.__class__ is not p.__class__:  # a raw 0-d NumPy parameter: arithmetic gives scalars
                new_p = xp.asarray(new_p)
                new_slots = {n: xp.asarray(v) for n, v in new_slots.items()}
            new_leaves[i] = new_p
            new_slots["step"] = t
            new_states[pth] = new_slots
        # (the function, not the method: one frame fewer a step)
        if plan.lazy is not None and bound:  # lazy backend: keep the graphs bounded
            i, pth = plan.lazy
            return _lazy.bound(self, op, new_leaves[i], pth, step + 1,
                               (_tree.unflatten(td, new_leaves), {"step": step + 1, "params": new_states}))
        return _tree.unflatten(td, new_leaves), {"step": step + 1, "params": new_states}

    def _grads(self, op: str, grads: Any, td: Any, plan: _Plan) -> list[Any]:
        """Gradients of the trainable parameters, in plan order."""
        gleaves, gtd = _tree.flatten(grads)
        if gtd == td or gtd.matches(td):
            return [gleaves[i] for i, _, _ in plan.trainable]
        by_path = {str(p): g for p, g in zip(gtd.paths(), gleaves)}
        missing = [pth for _, pth, _ in plan.trainable if pth not in by_path]
        if missing:
            raise StructureError(MISSING_GRADS.format(op=op, paths=missing))
        return [by_path[pth] for _, pth, _ in plan.trainable]

    # ------------------------------------------------------------ helpers
    def load_state(
        self,
        state: Any,
        params: Any,
        *,
        on_new: str | None = None,
        on_missing: str | None = None,
    ) -> tuple[State, _policies.StateReport]:
        """Fit a loaded ``state`` to ``params``: see :func:`ember.optim.load_state`."""
        return _policies.load_state(self, state, params, on_new=on_new, on_missing=on_missing)

    def __repr__(self) -> str:
        hp = ", ".join(f"{k}={v!r}" for k, v in self.hparams.items())
        extra = []
        if self.groups is not None:
            extra.append(f"groups={list(self.groups)!r}")
        if self.freeze is not None:
            extra.append(f"freeze={self.freeze!r}")
        if self.on_new != "init":
            extra.append(f"on_new={self.on_new!r}")
        if self.on_missing != "keep":
            extra.append(f"on_missing={self.on_missing!r}")
        if self.clip_norm is not None:
            extra.append(f"clip_norm={self.clip_norm!r}")
        return f"{type(self).__name__}({', '.join([hp, *extra])})"
