"""Adagrad."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ._base import Options, PathOptimizer
from .schedules import Schedule

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

__all__ = ["Adagrad"]


class Adagrad(PathOptimizer):
    """Adagrad: per-coordinate steps shrinking with the sum of squared gradients.

    Update rule for a parameter ``w`` with gradient ``g`` at its ``t``-th
    update (as ``torch.optim.Adagrad``)::

        g = g + weight_decay * w
        clr = lr / (1 + (t - 1) * lr_decay)
        s = initial_accumulator_value            if t == 1   (then, every step:)
        s = s + g * g
        w = w - clr * g / (sqrt(s) + eps)

    Slot: ``sum``. A fresh state holds zeros and ``initial_accumulator_value``
    is added at the first update, so a reset state (zeros, step 0) is exact.
    """

    HPARAMS: Mapping[str, Any] = {
        "lr": 0.01, "lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0, "eps": 1e-10,
    }

    def __init__(
        self,
        lr: float | Schedule = 0.01,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        **options: Unpack[Options],
    ) -> None:
        hp = {
            "lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value, "eps": eps,
        }
        super().__init__(hp, **options)

    def _slots(self, hp: Mapping[str, Any]) -> tuple[str, ...]:
        return ("sum",)

    def _apply(self, xp: Any, p: Any, g: Any, s: dict[str, Any], hp: Mapping[str, Any], t: int):
        wd, init = hp["weight_decay"], hp["initial_accumulator_value"]
        if wd != 0:
            g = g + wd * p
        clr = hp["lr"] / (1 + (t - 1) * hp["lr_decay"])
        acc = s["sum"] + init if t == 1 and init != 0 else s["sum"]
        acc = acc + g * g
        return p - (clr * g) / (xp.sqrt(acc) + hp["eps"]), {"sum": acc}
