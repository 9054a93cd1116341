"""What an optimizer does when its state and the parameters do not have the same paths.

Three kinds of difference, each named by path, never resolved silently:

- **added**: a trainable parameter has no state (a layer was appended).
  ``on_new="init"`` starts it from a fresh state; ``on_new="error"`` raises.
- **removed**: the state has an entry whose parameter is gone (removed,
  renamed, or frozen). ``on_missing="keep"`` keeps the entry (it applies
  again if the path comes back), ``"drop"`` deletes it, ``"error"`` raises.
- **changed**: the entry no longer fits its parameter (shape, dtype or the
  optimizer's slots differ). It cannot be used; it is re-initialised under
  ``on_new="init"`` unless ``on_missing="error"``, and an error otherwise.

An error lists every path concerned, for every kind at once.

Left at their defaults (``on_new=None``, ``on_missing=None``: ``"init"`` and
``"keep"``), the policies still act but ``update`` says so once with a
:class:`StateMismatchWarning` naming the paths: a renamed parameter shows up
as a new path initialised plus a stale one kept, a reshaped one as an entry
re-initialised, and either usually means momentum lost by mistake. Passing
``on_new`` / ``on_missing`` explicitly (even ``"init"`` / ``"keep"``) says the
difference is expected and silences the warning for that policy.
:func:`load_state` applies the same rules to a state read from a file and
returns a :class:`StateReport` saying what it did.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping  # not typing's: isinstance through it is ~5 us
from numbers import Integral
from typing import TYPE_CHECKING, Any, Callable, Sequence

from array_api_compat import array_namespace, is_array_api_obj

from .. import tree as _tree
from .._errors import BackendError, StructureError

if TYPE_CHECKING:  # pragma: no cover
    from ._base import PathOptimizer

__all__ = ["ON_NEW", "ON_MISSING", "StateReport", "StateMismatchWarning", "load_state"]

ON_NEW = ("init", "error")
ON_MISSING = ("keep", "drop", "error")

# Error texts (module constants so tests can check them).
BAD_POLICY = "{op}: {name}={value!r} is not a policy; use one of {allowed}"
NEW_PATHS = (
    "the trainable parameters {paths} have no optimizer state and on_new='error'. "
    "Pass on_new='init' to start them from a fresh state, or load a state that has them"
)
MISSING_PATHS = (
    "the optimizer state has entries for {paths}, which are not trainable parameters "
    "(removed, renamed or frozen) and on_missing='error'. Pass on_missing='keep' or 'drop', "
    "or edit the state with ember.optim.rename / ember.optim.drop"
)
CHANGED_PATHS = (
    "the optimizer state no longer fits its parameter at {details}. Pass on_new='init' "
    "(with on_missing 'keep' or 'drop') to re-initialise those entries, or reset them "
    "with ember.optim.drop(state, pattern)"
)
POLICY_ERRORS = "{op}: the optimizer state and the parameters differ:\n{reasons}"
STATE_MISMATCH = (
    "{op}: the optimizer state and the parameters differ, handled by the default policies:\n"
    "{details}\nA renamed parameter loses its state this way: move it with "
    "ember.optim.rename(state, old, new) first. If the difference is expected, pass the "
    "policies explicitly to the optimizer (on_new='init' or 'error', on_missing='keep', "
    "'drop' or 'error') to silence this"
)
ADDED_PART = "  new paths, started from a fresh state (on_new='init'): {paths}"
CHANGED_PART = "  entries that no longer fit their parameter, re-initialised (on_new='init'): {details}"
REMOVED_PART = "  stale entries whose parameter is gone, kept (on_missing='keep'): {paths}"
BAD_STATE = (
    "{op}: {what}. An optimizer state is {{'step': int, 'params': {{path: {{'step': int, "
    "slot: array, ...}}}}}}, as made by opt.init(params)"
)
MOVE_FAILED = (
    "{op}: could not move the state of {path} (slot {slot!r}) to the backend of its parameter "
    "({target}): {exc}. Load the file with ember.io.load(path, like=...) onto the right backend"
)


class StateMismatchWarning(UserWarning):
    """``update`` applied a default policy (``on_new`` / ``on_missing`` not given) to a
    state whose paths or shapes differ from the parameters; the message names the paths."""


def warn_defaults(op: str, report: StateReport, new_default: bool, missing_default: bool,
                  told: set) -> None:
    """Warn about what the *default* policies did in ``report`` (internal).

    ``told``: stale paths already reported by this optimizer; a kept entry
    stays stale at every later step, and is named once.
    """
    parts = []
    if new_default:
        if report.added:
            parts.append(ADDED_PART.format(paths=", ".join(report.added)))
        if report.changed:
            parts.append(CHANGED_PART.format(details="; ".join(f"{k} ({v})" for k, v in report.changed.items())))
    if missing_default:
        fresh = [p for p in report.removed if p not in told]
        if fresh:
            parts.append(REMOVED_PART.format(paths=", ".join(fresh)))
            told.update(fresh)
    if parts:
        # (stacklevel: warn_defaults, _update_leaves, update, the caller)
        warnings.warn(STATE_MISMATCH.format(op=op, details="\n".join(parts)), StateMismatchWarning,
                      stacklevel=4)


def check_policies(op: str, on_new: str, on_missing: str) -> None:
    """Raise ValueError unless ``on_new`` / ``on_missing`` are known policies."""
    if on_new not in ON_NEW:
        raise ValueError(BAD_POLICY.format(op=op, name="on_new", value=on_new, allowed=list(ON_NEW)))
    if on_missing not in ON_MISSING:
        raise ValueError(BAD_POLICY.format(op=op, name="on_missing", value=on_missing, allowed=list(ON_MISSING)))


def check_state(op: str, state: Any, deep: bool = False) -> int:
    """Check the outer layout of an optimizer state and return its step.

    ``deep=True`` also checks every per-parameter entry (used when loading).
    """
    if state.__class__ is dict and not deep:  # the usual state (one an update made): no ABC checks
        step = state.get("step")
        if step.__class__ is int and step >= 0 and state.get("params").__class__ is dict:
            return step
    if not isinstance(state, Mapping) or "step" not in state or "params" not in state:
        what = f"the state is {type(state).__name__}" + (
            f" with keys {sorted(map(str, state))}" if isinstance(state, Mapping) else ""
        )
        raise StructureError(BAD_STATE.format(op=op, what=what))
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, Integral) or step < 0:  # (Integral: jit's traced ints)
        raise StructureError(BAD_STATE.format(op=op, what=f"its 'step' is {step!r}"))
    if not isinstance(state["params"], Mapping):
        raise StructureError(BAD_STATE.format(op=op, what=f"its 'params' is {type(state['params']).__name__}"))
    if deep:
        bad = []
        for path, s in state["params"].items():
            if not isinstance(path, str):
                bad.append(f"{path!r} (key is not a path string)")
            elif not isinstance(s, Mapping):
                bad.append(f"{path} ({type(s).__name__}, not a dict)")
            elif isinstance(s.get("step"), bool) or not isinstance(s.get("step"), int) or s["step"] < 0:
                bad.append(f"{path} (its 'step' is {s.get('step')!r})")
        if bad:
            raise StructureError(BAD_STATE.format(op=op, what="bad entries: " + ", ".join(bad)))
    return step


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a trainable parameter needs from its state entry (internal)."""

    param: Any
    slots: tuple[str, ...]
    fresh: Callable[[], dict[str, Any]]


def fits(s: Any, p: Any, slots: Sequence[str]) -> bool:
    """True when entry ``s`` has exactly ``slots`` with ``p``'s shape and dtype (fast check)."""
    if not slots and s.__class__ is dict and len(s) == 1 and s.get("step").__class__ is int:
        return True  # (SGD without momentum's entry {"step": t}, read without ABC checks)
    if not isinstance(s, dict) or len(s) != len(slots) + 1:
        return False
    st = s.get("step")
    if st.__class__ is not int and not isinstance(st, Integral):  # (Integral: jit's traced ints)
        return False
    if not slots:
        return True
    for name in slots:
        a = s.get(name)
        if a is None or getattr(a, "shape", None) != p.shape or getattr(a, "dtype", None) != p.dtype:
            return False
    return True


def _why(s: Any, p: Any, slots: Sequence[str]) -> str:
    """Why entry ``s`` does not fit parameter ``p`` (for reports and errors)."""
    if not isinstance(s, Mapping):
        return f"the entry is {type(s).__name__}, not a dict"
    have = sorted(k for k in s if k != "step")
    if have != sorted(slots):
        return f"slots {have} but the optimizer uses {sorted(slots)}"
    for name in slots:
        a = s[name]
        shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
        if shape != p.shape:
            return f"{name} has shape {tuple(shape) if shape is not None else None}, parameter {tuple(p.shape)}"
        if dtype != p.dtype:
            return f"{name} has dtype {dtype}, parameter {p.dtype}"
    return "its 'step' is not an int"


@dataclasses.dataclass(frozen=True)
class StateReport:
    """What fitting a state to the parameters found and did, by path.

    ``added``: parameters that had no state (initialised); ``removed``: state
    entries without a trainable parameter (kept or dropped, see
    ``on_missing``); ``changed``: ``{path: reason}`` for entries that no longer
    fit (re-initialised).
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    on_new: str = "init"
    on_missing: str = "keep"

    @property
    def clean(self) -> bool:
        """True when state and parameters had exactly the same paths and shapes."""
        return not (self.added or self.removed or self.changed)

    def __str__(self) -> str:
        if self.clean:
            return "optimizer state matches the parameters"
        parts = []
        if self.added:
            parts.append(f"added (initialised): {', '.join(self.added)}")
        if self.removed:
            done = "kept" if self.on_missing == "keep" else "dropped"
            parts.append(f"removed ({done}): {', '.join(self.removed)}")
        if self.changed:
            parts.append(
                "changed (re-initialised): " + "; ".join(f"{k}: {v}" for k, v in self.changed.items())
            )
        return "\n".join(parts)


def reconcile(
    op: str,
    old: Mapping[str, Any],
    specs: Mapping[str, Spec],
    on_new: str,
    on_missing: str,
) -> tuple[dict[str, Any], StateReport]:
    """Per-parameter states for ``specs`` built from ``old`` under the policies (internal)."""
    added = tuple(p for p in specs if p not in old)
    removed = tuple(p for p in old if p not in specs)
    changed = {
        p: _why(old[p], sp.param, sp.slots) for p, sp in specs.items() if p in old and not fits(old[p], sp.param, sp.slots)
    }
    reasons = []
    if added and on_new == "error":
        reasons.append(NEW_PATHS.format(paths=list(added)))
    if removed and on_missing == "error":
        reasons.append(MISSING_PATHS.format(paths=list(removed)))
    if changed and (on_new == "error" or on_missing == "error"):
        reasons.append(CHANGED_PATHS.format(details="; ".join(f"{k} ({v})" for k, v in changed.items())))
    if reasons:
        text = "\n".join(f"  {n}. {r}" for n, r in enumerate(reasons, 1))
        raise StructureError(POLICY_ERRORS.format(op=op, reasons=text))
    new: dict[str, Any] = {}
    for p, sp in specs.items():
        new[p] = sp.fresh() if (p not in old or p in changed) else old[p]
    if on_missing == "keep":
        for p in removed:
            new[p] = old[p]
    changed = {p: changed[p] for p in sorted(changed)}
    return new, StateReport(tuple(sorted(added)), tuple(sorted(removed)), changed, on_new, on_missing)


def _move(op: str, state_params: Mapping[str, Any], specs: Mapping[str, Spec]) -> dict[str, Any]:
    """Entries whose arrays are on another backend than their parameter, moved onto it."""
    out = dict(state_params)
    for path, sp in specs.items():
        s = out.get(path)
        if not isinstance(s, Mapping):
            continue
        xp = array_namespace(sp.param)
        moved = None
        for slot, a in s.items():
            if slot == "step" or not is_array_api_obj(a) or array_namespace(a) is xp:
                continue
            try:
                b = xp.asarray(a)
            except Exception as exc:  # noqa: BLE001 - reported with the path
                raise BackendError(MOVE_FAILED.format(op=op, path=path, slot=slot, target=xp.__name__, exc=exc)) from exc
            moved = dict(s) if moved is None else moved
            moved[slot] = b
        if moved is not None:
            out[path] = moved
    return out


def load_state(
    optimizer: PathOptimizer,
    state: Any,
    params: Any,
    *,
    on_new: str | None = None,
    on_missing: str | None = None,
) -> tuple[dict[str, Any], StateReport]:
    """Fit a state read from a file to ``params`` and report what differs, by path.

    Why: a checkpoint may come from a smaller model, a refactor, or another
    optimizer setting; this checks every entry against the parameters and
    applies ``on_new`` / ``on_missing`` (the optimizer's unless given here),
    never all-or-nothing. Arrays on another backend than their parameter are
    moved onto it. Returns ``(state, report)``.

    >>> import numpy as np, ember.optim as optim
    >>> opt = optim.SGD(0.1, momentum=0.9)
    >>> state = opt.init({"w": np.zeros(2, np.float32)})
    >>> state, report = optim.load_state(opt, state, {"w": np.zeros(2, np.float32), "b": np.zeros(1, np.float32)})
    >>> print(report)
    added (initialised): b
    """
    op = f"{type(optimizer).__name__}.load_state"
    on_new = optimizer.on_new if on_new is None else on_new
    on_missing = optimizer.on_missing if on_missing is None else on_missing
    check_policies(op, on_new, on_missing)
    step = check_state(op, state, deep=True)
    leaves, td = _tree.flatten(params)
    plan = optimizer._plan(op, leaves, td)
    hps = optimizer._group_hparams(step)
    specs = optimizer._specs(plan, leaves, hps)
    old = _move(op, state["params"], specs)
    new, report = reconcile(op, old, specs, on_new, on_missing)
    return {"step": step, "params": new}, report
