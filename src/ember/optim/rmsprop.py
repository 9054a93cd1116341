"""RMSprop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ._base import Options, PathOptimizer
from .schedules import Schedule

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

__all__ = ["RMSprop"]


class RMSprop(PathOptimizer):
    """RMSprop: divide the gradient by a running root mean square of recent gradients.

    Update rule for a parameter ``w`` with gradient ``g`` (as ``torch.optim.RMSprop``)::

        g = g + weight_decay * w
        v = alpha * v + (1 - alpha) * g * g
        if centered:
            a = a + (1 - alpha) * (g - a)        (running mean of g)
            d = sqrt(v - a * a) + eps
        else:
            d = sqrt(v) + eps
        if momentum > 0:
            b = momentum * b + g / d
            w = w - lr * b
        else:
            w = w - lr * g / d

    Slots: ``v`` (square average), ``a`` (if centered), ``momentum`` (if momentum > 0).
    """

    HPARAMS: Mapping[str, Any] = {
        "lr": 0.01, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0, "centered": False,
    }

    def __init__(
        self,
        lr: float | Schedule = 0.01,
        alpha: float = 0.99,
        eps: float = 1e-8,
        *,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        **options: Unpack[Options],
    ) -> None:
        hp = {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay, "momentum": momentum, "centered": centered}
        super().__init__(hp, **options)

    def _slots(self, hp: Mapping[str, Any]) -> tuple[str, ...]:
        return ("v",) + (("a",) if hp["centered"] else ()) + (("momentum",) if hp["momentum"] > 0 else ())

    def _apply(self, xp: Any, p: Any, g: Any, s: dict[str, Any], hp: Mapping[str, Any], t: int):
        lr, alpha, eps, wd, mu = hp["lr"], hp["alpha"], hp["eps"], hp["weight_decay"], hp["momentum"]
        if wd != 0:
            g = g + wd * p
        v = s["v"] * alpha + ((1 - alpha) * g) * g
        out = {"v": v}
        if hp["centered"]:
            a = out["a"] = s["a"] + (1 - alpha) * (g - s["a"])
            d = xp.sqrt(v - a * a) + eps
        else:
            d = xp.sqrt(v) + eps
        if mu > 0:
            b = out["momentum"] = s["momentum"] * mu + g / d
            return p - lr * b, out
        return p - (lr * g) / d, out
