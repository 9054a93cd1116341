"""Adam and AdamW."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ._base import Options, PathOptimizer
from .schedules import Schedule

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

__all__ = ["Adam", "AdamW"]


class Adam(PathOptimizer):
    """Adam: per-coordinate steps from running averages of the gradient and its square.

    Update rule for a parameter ``w`` with gradient ``g`` at its ``t``-th
    update (as ``torch.optim.Adam``; ``b1, b2 = betas``)::

        g = g + weight_decay * w                 (L2 penalty; see AdamW for decoupled decay)
        m = m + (1 - b1) * (g - m)
        v = b2 * v + (1 - b2) * g * g
        v_max = max(v_max, v)                    if amsgrad (then v_max replaces v below)
        step_size = lr / (1 - b1 ** t)
        w = w - step_size * m / (sqrt(v) / sqrt(1 - b2 ** t) + eps)

    Slots: ``m``, ``v`` (and ``v_max`` with ``amsgrad``). ``weight_decay=None``
    means the class's default (0.0; :class:`AdamW`: 0.01). The options
    (``groups``, ``freeze``, ...) are :class:`ember.optim.Options`.

    >>> import numpy as np
    >>> opt = Adam(0.1)
    >>> params = {"w": np.array([1.0], np.float32)}
    >>> params, state = opt.update(params, {"w": np.array([3.0], np.float32)}, opt.init(params))
    >>> round(float(params["w"][0]), 6)
    0.9
    """

    HPARAMS: Mapping[str, Any] = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False}
    _DECOUPLED = False

    def __init__(
        self,
        lr: float | Schedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        weight_decay: float | None = None,
        amsgrad: bool = False,
        **options: Unpack[Options],
    ) -> None:
        if weight_decay is None:  # the class's default: 0.0 for Adam, 0.01 for AdamW
            weight_decay = self.HPARAMS["weight_decay"]
        hp = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}
        super().__init__(hp, **options)

    def _slots(self, hp: Mapping[str, Any]) -> tuple[str, ...]:
        return ("m", "v", "v_max") if hp["amsgrad"] else ("m", "v")

    def _apply(self, xp: Any, p: Any, g: Any, s: dict[str, Any], hp: Mapping[str, Any], t: int):
        lr, (b1, b2), eps, wd = hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"]
        if wd != 0:
            if self._DECOUPLED:
                p = p * (1 - lr * wd)
            else:
                g = g + wd * p
        m = s["m"] + (1 - b1) * (g - s["m"])
        v = s["v"] * b2 + ((1 - b2) * g) * g
        out = {"m": m, "v": v}
        if hp["amsgrad"]:
            v = out["v_max"] = xp.maximum(s["v_max"], v)
        step_size = lr / (1 - b1**t)
        denom = xp.sqrt(v) / (1 - b2**t) ** 0.5 + eps
        return p - (step_size * m) / denom, out


class AdamW(Adam):
    """AdamW: Adam with weight decay decoupled from the gradient statistics.

    Update rule (as ``torch.optim.AdamW``): first ``w = w * (1 - lr * weight_decay)``,
    then the :class:`Adam` step without the L2 term. Default ``weight_decay=0.01``.
    """

    HPARAMS: Mapping[str, Any] = {**Adam.HPARAMS, "weight_decay": 0.01}
    _DECOUPLED = True
