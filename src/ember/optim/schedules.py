"""Learning-rate schedules: plain callables ``step -> lr``.

``step`` is the number of updates already done (0 for the first update), so
``lr = schedule(state["step"])``. Any ``Callable[[int], float]`` works where an
``lr`` is taken; these are small frozen dataclasses, so they print and compare.

>>> from ember.optim import schedules
>>> s = schedules.linear_warmup(schedules.cosine(1.0, total_steps=10), warmup_steps=2)
>>> [round(s(t), 3) for t in range(4)]
[0.5, 1.0, 1.0, 0.976]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Union

__all__ = ["Schedule", "as_schedule", "constant", "step", "cosine", "linear_warmup"]

Schedule = Callable[[int], float]

BAD_LR = "lr must be a number >= 0 or a callable schedule(step) -> float, got {value!r}"
BAD_ARG = "{schedule}: {name}={value!r} {why}"


def _positive_int(schedule: str, name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(BAD_ARG.format(schedule=schedule, name=name, value=value, why="must be an int >= 1"))
    return value


@dataclasses.dataclass(frozen=True)
class constant:  # noqa: N801 - used like a function
    """The same learning rate at every step: ``lr(t) = value``."""

    value: float

    def __call__(self, t: int) -> float:
        return self.value


@dataclasses.dataclass(frozen=True)
class step:  # noqa: N801
    """Step decay (like torch's StepLR): ``lr(t) = lr * gamma ** (t // step_size)``."""

    lr: float
    step_size: int
    gamma: float = 0.1

    def __post_init__(self) -> None:
        _positive_int("step", "step_size", self.step_size)

    def __call__(self, t: int) -> float:
        return self.lr * self.gamma ** (t // self.step_size)


@dataclasses.dataclass(frozen=True)
class cosine:  # noqa: N801
    """Cosine decay from ``lr`` to ``min_lr`` over ``total_steps``, then ``min_lr``.

    ``lr(t) = min_lr + (lr - min_lr) * (1 + cos(pi * t / total_steps)) / 2`` for
    ``t <= total_steps`` (torch's CosineAnnealingLR in closed form).
    """

    lr: float
    total_steps: int
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        _positive_int("cosine", "total_steps", self.total_steps)

    def __call__(self, t: int) -> float:
        if t >= self.total_steps:
            return self.min_lr
        return self.min_lr + (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * t / self.total_steps)) / 2.0


@dataclasses.dataclass(frozen=True)
class linear_warmup:  # noqa: N801
    """Ramp linearly up to ``base`` over ``warmup_steps`` steps, then follow ``base``.

    ``lr(t) = base(0) * (t + 1) / warmup_steps`` for ``t < warmup_steps`` (the
    first step is not wasted at lr 0; the last warmup step reaches ``base(0)``),
    then ``base(t - warmup_steps)``: the wrapped schedule starts after warmup.
    ``base`` is a number or a schedule.
    """

    base: Union[float, Schedule]
    warmup_steps: int

    def __post_init__(self) -> None:
        _positive_int("linear_warmup", "warmup_steps", self.warmup_steps)
        object.__setattr__(self, "base", as_schedule(self.base))

    def __call__(self, t: int) -> float:
        if t < self.warmup_steps:
            return self.base(0) * (t + 1) / self.warmup_steps
        return self.base(t - self.warmup_steps)


def as_schedule(lr: Union[float, Schedule]) -> Schedule:
    """A schedule for ``lr``: a number becomes :class:`constant`, a callable is kept."""
    if callable(lr):
        return lr
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr >= 0:
        raise ValueError(BAD_LR.format(value=lr))
    return constant(float(lr))
