"""Adam and AdamW."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ._base import BAD_HPARAM, PathOptimizer
from ._patterns import Pattern
from .groups import Group
from .schedules import Schedule

__all__ = ["Adam", "AdamW"]

BAD_BETAS = "must be a pair (beta1, beta2) with 0 <= beta < 1 (group {group})"


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

    Slots: ``m``, ``v`` (and ``v_max`` with ``amsgrad``).

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
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        groups: Sequence[Group] | None = None,
        freeze: Pattern | None = None,
        on_new: str = "init",
        on_missing: str = "keep",
        clip_norm: float | None = None,
    ) -> None:
        hp = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}
        super().__init__(hp, groups=groups, freeze=freeze, on_new=on_new, on_missing=on_missing, clip_norm=clip_norm)

    def _check_hparams(self, hp: Mapping[str, Any], group: str) -> None:
        super()._check_hparams(hp, group)
        b = hp["betas"]
        if not (isinstance(b, (tuple, list)) and len(b) == 2 and all(isinstance(x, (int, float)) and 0 <= x < 1 for x in b)):
            raise ValueError(BAD_HPARAM.format(op=type(self).__name__, name="betas", value=b, why=BAD_BETAS.format(group=group)))

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

    _DECOUPLED = True

    def __init__(
        self,
        lr: float | Schedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        groups: Sequence[Group] | None = None,
        freeze: Pattern | None = None,
        on_new: str = "init",
        on_missing: str = "keep",
        clip_norm: float | None = None,
    ) -> None:
        super().__init__(
            lr, betas, eps, weight_decay=weight_decay, amsgrad=amsgrad, groups=groups, freeze=freeze,
            on_new=on_new, on_missing=on_missing, clip_norm=clip_norm,
        )
