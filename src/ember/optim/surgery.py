"""State surgery: public operations on an optimizer state, selected by path pattern.

Each function returns a new state (the input is not modified; arrays are
shared, not copied) and keeps the global ``step``. Patterns are the globs of
:func:`ember.tree.filter` (``*`` crosses dots). A pattern that selects no
entry is an error (a typo should not pass silently) unless ``missing_ok=True``.

>>> import numpy as np
>>> from ember.optim import SGD, rename, select
>>> opt = SGD(0.1, momentum=0.9)
>>> state = opt.init({"encoder": {"w": np.zeros(2)}, "head": {"w": np.zeros(1)}})
>>> sorted(rename(state, "encoder", "backbone.encoder")["params"])
['backbone.encoder.w', 'head.w']
>>> sorted(select(state, "head.*")["params"])
['head.w']
"""

from __future__ import annotations

from typing import Any, Mapping

from array_api_compat import array_namespace, is_array_api_obj

from .. import tree as _tree
from .._errors import StructureError
from ._patterns import Pattern, describe, glob_regex, matcher
from .policies import check_state

__all__ = ["reset", "select", "drop", "rename"]

# Error texts (module constants so tests can check them).
NO_MATCH = (
    "{op}: the pattern {pattern} matches no path of the optimizer state (it has {paths}); "
    "check the pattern, or pass missing_ok=True"
)
RENAME_STARS = (
    "rename: {old!r} has {n_old} '*' but {new!r} has {n_new}; a pattern rename puts what each "
    "'*' of the old pattern matched into the '*' of the new one, so the counts must be equal"
)
RENAME_COLLISION = (
    "rename: {details}. Drop the entries in the way first (ember.optim.drop), or rename to "
    "other paths"
)


def _listing(paths: list[str], limit: int = 8) -> str:
    shown = ", ".join(paths[:limit])
    return f"{len(paths)} paths: {shown}{', ...' if len(paths) > limit else ''}" if paths else "no paths"


def _selected(op: str, state: Mapping[str, Any], pattern: Pattern, missing_ok: bool) -> list[str]:
    check_state(op, state)
    match = matcher(pattern, op)
    hit = [p for p in state["params"] if match(p)]
    if not hit and not missing_ok:
        raise StructureError(NO_MATCH.format(op=op, pattern=describe(pattern), paths=_listing(list(state["params"]))))
    return hit


def reset(state: Mapping[str, Any], pattern: Pattern, *, missing_ok: bool = False) -> dict[str, Any]:
    """Fresh per-parameter state (zero slots, step 0) for the paths matching ``pattern``.

    Why: restart the statistics of a part of the model (e.g. after
    re-initialising a head) without touching the rest. A fresh state is zeros
    for every ember optimizer, so this equals a new ``init`` for those paths.
    """
    hit = set(_selected("reset", state, pattern, missing_ok))
    params = {}
    for path, s in state["params"].items():
        if path in hit:
            fresh = {}
            for k, a in s.items():
                fresh[k] = array_namespace(a).zeros_like(a) if is_array_api_obj(a) else a
            fresh["step"] = 0
            params[path] = fresh
        else:
            params[path] = s
    return {**state, "params": params}


def select(state: Mapping[str, Any], pattern: Pattern, *, missing_ok: bool = False) -> dict[str, Any]:
    """Only the entries whose path matches ``pattern`` (e.g. to transplant a sub-model's state)."""
    hit = set(_selected("select", state, pattern, missing_ok))
    return {**state, "params": {p: s for p, s in state["params"].items() if p in hit}}


def drop(state: Mapping[str, Any], pattern: Pattern, *, missing_ok: bool = False) -> dict[str, Any]:
    """The state without the entries whose path matches ``pattern`` (they re-initialise under on_new='init')."""
    hit = set(_selected("drop", state, pattern, missing_ok))
    return {**state, "params": {p: s for p, s in state["params"].items() if p not in hit}}


def _prefix_renamer(old: str, new: str):
    old_keys = tuple(_tree.parse_path(old))
    new_keys = tuple(_tree.parse_path(new))

    def f(path: str) -> str | None:
        try:
            keys = tuple(_tree.parse_path(path))
        except Exception:  # noqa: BLE001 - an unparseable key cannot be under a prefix
            return None
        if keys[: len(old_keys)] != old_keys:
            return None
        return str(_tree.Path(new_keys + keys[len(old_keys):]))

    return f


def _pattern_renamer(old: str, new: str):
    n_old, n_new = old.count("*"), new.count("*")
    if n_old != n_new:
        raise ValueError(RENAME_STARS.format(old=old, new=new, n_old=n_old, n_new=n_new))
    rx = glob_regex(old)
    parts = new.split("*")

    def f(path: str) -> str | None:
        m = rx.fullmatch(path)
        if m is None:
            return None
        out = [parts[0]]
        for captured, part in zip(m.groups(), parts[1:]):
            out += [captured, part]
        return "".join(out)

    return f


def rename(state: Mapping[str, Any], old: str, new: str, *, missing_ok: bool = False) -> dict[str, Any]:
    """Move entries to new paths, so a refactor keeps the optimizer state.

    ``old`` is either a path prefix, compared key by key (``"encoder"``
    renames ``encoder.w`` and ``encoder.layers.0.b`` but not ``encoder2.w``),
    whose keys are replaced by ``new``'s; or a glob with ``*`` (``"encoder.*"``
    -> ``"backbone.encoder.*"``), where each ``*`` of ``new`` receives what the
    corresponding ``*`` of ``old`` matched. Renaming onto a path that stays
    in the state, or two entries onto one path, is an error naming them.
    """
    check_state("rename", state)
    if not isinstance(old, str) or not isinstance(new, str):
        raise TypeError(f"rename: old and new must be str paths or globs, got {type(old).__name__}, {type(new).__name__}")
    f = _pattern_renamer(old, new) if ("*" in old or "?" in old) else _prefix_renamer(old, new)
    moves = {}
    for path in state["params"]:
        target = f(path)
        if target is not None and target != path:
            moves[path] = target
    if not moves and not missing_ok and not any(f(p) is not None for p in state["params"]):
        raise StructureError(NO_MATCH.format(op="rename", pattern=repr(old), paths=_listing(list(state["params"]))))
    staying = {p for p in state["params"] if p not in moves}
    problems = []
    seen: dict[str, str] = {}
    for src, dst in moves.items():
        if dst in staying:
            problems.append(f"{src} -> {dst}, which already has state")
        if dst in seen:
            problems.append(f"{seen[dst]} and {src} -> {dst}")
        seen[dst] = src
    if problems:
        raise StructureError(RENAME_COLLISION.format(details="; ".join(problems)))
    params = {}
    for path, s in state["params"].items():
        params[moves.get(path, path)] = s
    return {**state, "params": params}
