"""Parameter groups chosen by path patterns.

A :class:`Group` selects parameters by path glob (``"*.bias"``,
``"encoder.*"``), may exclude some, overrides hyperparameters
(``weight_decay=0.0``) and scales the learning rate (``lr_scale=0.1``).
Every trainable parameter must fall in **exactly one** group; otherwise the
optimizer raises a :class:`~ember.StructureError` listing the parameters in
no group and those in several (with the groups' names), so an overlap is
never resolved by list order behind the user's back. A group with
``match=None`` takes the rest: every parameter that no other group matches.

Example: no weight decay on biases and norms, lr x 0.1 on the encoder::

    no_decay = ["*.bias", "*norm*"]
    groups = [
        Group("encoder.*", exclude=no_decay, lr_scale=0.1, name="encoder"),
        Group(no_decay, exclude="encoder.*", weight_decay=0.0, name="no_decay"),
        Group(["encoder.*bias", "encoder.*norm*"], lr_scale=0.1, weight_decay=0.0, name="encoder_no_decay"),
        Group(name="rest"),
    ]
    opt = ember.optim.AdamW(1e-3, weight_decay=0.01, groups=groups)
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import tree as _tree
from .._errors import StructureError
from ._patterns import Pattern, describe, matcher

__all__ = ["Group", "assign_groups"]

# Error texts (module constants so tests can check them).
NO_GROUP = "in no group: {paths} (add a group for them, or a catch-all Group(name='rest'))"
MANY_GROUPS = "in several groups: {details} (make the patterns disjoint, e.g. with exclude=...)"
GROUP_ERRORS = "{op}: every trainable parameter must be in exactly one group; parameters\n{reasons}"
TWO_RESTS = "{op}: the groups {names} both take the rest (match=None); keep one"
BAD_SCALE = "Group {name}: lr_scale={value!r} must be a number >= 0"


class Group:
    """Parameters selected by path pattern, with their own hyperparameters.

    ``match``: glob, list of globs, or callable on the path text; ``None``
    takes every parameter no other group matches. ``exclude``: pattern of
    paths to leave out. ``lr_scale`` multiplies the learning rate (after the
    schedule). Other keywords override the optimizer's hyperparameters
    (``lr`` may be a number or a schedule).
    """

    def __init__(
        self,
        match: Pattern | None = None,
        *,
        exclude: Pattern | None = None,
        name: str | None = None,
        lr_scale: float = 1.0,
        **hparams: Any,
    ) -> None:
        self.match = match
        self.exclude = exclude
        self.name = name
        self.label = name if name is not None else (describe(match) if match is not None else "rest")
        if isinstance(lr_scale, bool) or not isinstance(lr_scale, (int, float)) or not lr_scale >= 0:
            raise ValueError(BAD_SCALE.format(name=self.label, value=lr_scale))
        self.lr_scale = float(lr_scale)
        self.hparams = dict(hparams)
        self._match = matcher(match, f"Group({self.label})") if match is not None else None
        self._exclude = matcher(exclude, f"Group({self.label}, exclude=...)") if exclude is not None else None

    @property
    def is_rest(self) -> bool:
        """True for the catch-all group (``match=None``)."""
        return self._match is None

    def matches(self, path: str) -> bool:
        """Whether this group's own patterns select ``path`` (the rest group selects nothing here)."""
        if self._match is None or not self._match(path):
            return False
        return self._exclude is None or not self._exclude(path)

    def __repr__(self) -> str:
        args = [] if self.match is None else [repr(self.match)]
        if self.exclude is not None:
            args.append(f"exclude={self.exclude!r}")
        if self.name is not None:
            args.append(f"name={self.name!r}")
        if self.lr_scale != 1.0:
            args.append(f"lr_scale={self.lr_scale!r}")
        args += [f"{k}={v!r}" for k, v in self.hparams.items()]
        return f"Group({', '.join(args)})"


def assign(groups: Sequence[Group], paths: Sequence[str], op: str = "groups") -> list[int]:
    """Index of the one group of each path; StructureError listing every offender otherwise."""
    rests = [i for i, g in enumerate(groups) if g.is_rest]
    if len(rests) > 1:
        raise StructureError(TWO_RESTS.format(op=op, names=[groups[i].label for i in rests]))
    rest = rests[0] if rests else None
    out: list[int] = []
    none: list[str] = []
    many: list[str] = []
    for path in paths:
        hits = [i for i, g in enumerate(groups) if g.matches(path)]
        if len(hits) == 1:
            out.append(hits[0])
        elif not hits and rest is not None:
            out.append(rest)
        elif not hits:
            none.append(path)
        else:
            many.append(f"{path} (in {', '.join(groups[i].label for i in hits)})")
    if none or many:
        reasons = []
        if none:
            reasons.append(NO_GROUP.format(paths=none))
        if many:
            reasons.append(MANY_GROUPS.format(details="; ".join(many)))
        raise StructureError(GROUP_ERRORS.format(op=op, reasons="\n".join(f"  {r}" for r in reasons)))
    return out


def assign_groups(groups: Sequence[Group], params: Any) -> dict[str, str]:
    """``{path: group label}`` for every array leaf of ``params``; raises like the optimizer would.

    Why: to look at (or test) a grouping before training with it.

    >>> import numpy as np
    >>> assign_groups([Group("*.bias", name="nd"), Group(name="rest")],
    ...               {"fc": {"weight": np.ones(2), "bias": np.ones(1)}})
    {'fc.bias': 'nd', 'fc.weight': 'rest'}
    """
    paths = [str(p) for p in _tree.paths(params)]
    idx = assign(groups, paths, "assign_groups")
    return {p: groups[i].label for p, i in zip(paths, idx)}
