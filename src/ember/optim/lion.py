"""Lion (EvoLved Sign Momentum)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ._base import Options, PathOptimizer
from .schedules import Schedule

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

__all__ = ["Lion"]


class Lion(PathOptimizer):
    """Lion: the sign of an interpolated momentum as the step (Chen et al., 2023).

    Update rule for a parameter ``w`` with gradient ``g`` (``b1, b2 = betas``)::

        c = b1 * m + (1 - b1) * g
        w = w * (1 - lr * weight_decay) - lr * sign(c)
        m = b2 * m + (1 - b2) * g

    Slot: ``m``. Use a learning rate 3-10x smaller than AdamW's (every
    coordinate moves by exactly ``lr``).
    """

    HPARAMS: Mapping[str, Any] = {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0}

    def __init__(
        self,
        lr: float | Schedule = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        *,
        weight_decay: float = 0.0,
        **options: Unpack[Options],
    ) -> None:
        hp = {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay}
        super().__init__(hp, **options)

    def _slots(self, hp: Mapping[str, Any]) -> tuple[str, ...]:
        return ("m",)

    def _apply(self, xp: Any, p: Any, g: Any, s: dict[str, Any], hp: Mapping[str, Any], t: int):
        lr, (b1, b2), wd = hp["lr"], hp["betas"], hp["weight_decay"]
        m = s["m"]
        c = m * b1 + (1 - b1) * g
        if wd != 0:
            p = p * (1 - lr * wd)
        p = p - lr * xp.sign(c)
        return p, {"m": m * b2 + (1 - b2) * g}
