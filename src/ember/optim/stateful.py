"""A stateful wrapper around a functional optimizer, for plain training loops."""

from __future__ import annotations

from typing import Any

from . import surgery as _surgery
from ._base import Optimizer, State
from ._patterns import Pattern
from .policies import StateReport, load_state

__all__ = ["Stateful"]


class Stateful:
    """Holds an optimizer's state so a loop reads ``params = opt.step(params, grads)``.

    Why: the functional core (``init`` / ``update``) composes and checkpoints
    well, but most loops only want to step. The state stays plain data:
    ``opt.state`` is what to save (``ember.io.save(path, {"params": params,
    "opt_state": opt.state})``) and ``opt.load(state, params)`` resumes.

    >>> import numpy as np
    >>> from ember.optim import SGD, Stateful
    >>> params = {"w": np.array([1.0], np.float32)}
    >>> opt = Stateful(SGD(0.5), params)
    >>> params = opt.step(params, {"w": np.array([1.0], np.float32)})
    >>> params["w"].tolist(), opt.step_count
    ([0.5], 1)
    """

    def __init__(self, optimizer: Optimizer, params: Any, state: State | None = None) -> None:
        self.optimizer = optimizer
        self.report = StateReport()
        if state is None:
            self.state: State = optimizer.init(params)
        else:
            self.load(state, params)

    @property
    def step_count(self) -> int:
        """Number of updates done so far (the state's ``step``)."""
        return int(self.state["step"])

    def step(self, params: Any, grads: Any) -> Any:
        """Apply one update and return the new parameters (the state is kept here)."""
        params, self.state = self.optimizer.update(params, grads, self.state)
        return params

    def load(self, state: State, params: Any, *, on_new: str | None = None, on_missing: str | None = None) -> StateReport:
        """Adopt a loaded state, fitted to ``params`` by :func:`ember.optim.load_state`; returns its report."""
        if hasattr(self.optimizer, "_plan"):
            self.state, self.report = load_state(self.optimizer, state, params, on_new=on_new, on_missing=on_missing)
        else:  # a protocol-only optimizer: its state is its own business
            self.state, self.report = state, StateReport()
        return self.report

    def reset(self, pattern: Pattern, *, missing_ok: bool = False) -> None:
        """:func:`ember.optim.reset` on the held state."""
        self.state = _surgery.reset(self.state, pattern, missing_ok=missing_ok)

    def drop(self, pattern: Pattern, *, missing_ok: bool = False) -> None:
        """:func:`ember.optim.drop` on the held state."""
        self.state = _surgery.drop(self.state, pattern, missing_ok=missing_ok)

    def select(self, pattern: Pattern, *, missing_ok: bool = False) -> None:
        """:func:`ember.optim.select` on the held state."""
        self.state = _surgery.select(self.state, pattern, missing_ok=missing_ok)

    def rename(self, old: str, new: str, *, missing_ok: bool = False) -> None:
        """:func:`ember.optim.rename` on the held state."""
        self.state = _surgery.rename(self.state, old, new, missing_ok=missing_ok)

    def __repr__(self) -> str:
        return f"Stateful({self.optimizer!r}, step={self.step_count}, entries={len(self.state['params'])})"
