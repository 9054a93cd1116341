"""Stochastic gradient descent with momentum, Nesterov momentum and weight decay."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ._base import BAD_HPARAM, Options, PathOptimizer
from .schedules import Schedule

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

__all__ = ["SGD"]

NESTEROV = "nesterov=True needs momentum > 0 and dampening == 0 (group {group})"


class SGD(PathOptimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum and weight decay.

    Update rule for a parameter ``w`` with gradient ``g`` at its ``t``-th
    update (as ``torch.optim.SGD``)::

        g = g + weight_decay * w
        if momentum == 0:
            w = w - lr * g
        else:
            b = g                                        if t == 1
            b = momentum * b + (1 - dampening) * g       otherwise
            w = w - lr * (g + momentum * b)              if nesterov
            w = w - lr * b                               otherwise

    Slot (per-parameter state): ``momentum`` (the buffer ``b``), only when
    ``momentum > 0``.

    >>> import numpy as np
    >>> opt = SGD(0.1, momentum=0.9)
    >>> params = {"w": np.array([1.0, 2.0], np.float32)}
    >>> state = opt.init(params)
    >>> params, state = opt.update(params, {"w": np.array([1.0, 1.0], np.float32)}, state)
    >>> params["w"].tolist(), state["step"]
    ([0.8999999761581421, 1.899999976158142], 1)
    """

    HPARAMS: Mapping[str, Any] = {"lr": 0.01, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}

    def __init__(
        self,
        lr: float | Schedule = 0.01,
        momentum: float = 0.0,
        *,
        nesterov: bool = False,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        **options: Unpack[Options],
    ) -> None:
        hp = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay, "nesterov": nesterov}
        super().__init__(hp, **options)

    def _check_hparams(self, hp: Mapping[str, Any], group: str) -> None:
        super()._check_hparams(hp, group)
        if hp["nesterov"] and (hp["momentum"] <= 0 or hp["dampening"] != 0):
            raise ValueError(
                BAD_HPARAM.format(op="SGD", name="nesterov", value=True, why=NESTEROV.format(group=group))
            )

    def _slots(self, hp: Mapping[str, Any]) -> tuple[str, ...]:
        return ("momentum",) if hp["momentum"] != 0 else ()

    def _apply(self, xp: Any, p: Any, g: Any, s: dict[str, Any], hp: Mapping[str, Any], t: int):
        lr, mu, wd = hp["lr"], hp["momentum"], hp["weight_decay"]
        if wd != 0:
            g = g + wd * p
        if mu == 0:
            return p - lr * g, {}
        b = g if t == 1 else s["momentum"] * mu + (1 - hp["dampening"]) * g
        d = g + mu * b if hp["nesterov"] else b
        return p - lr * d, {"momentum": b}

    def _inplace(self, w: Any, hp: Mapping[str, Any]):
        # the plain form's values, each computed into g's buffer (the same bits):
        # g + wd * p; without momentum then (g + wd * p) * -lr + p, the new parameter; with it
        # the new momentum buffer b * mu + (1 - dampening) * g, which the state keeps
        # (Nesterov reads g again after b: the plain form)
        lr, mu, wd, keep = hp["lr"], hp["momentum"], hp["weight_decay"], 1 - hp["dampening"]
        if mu != 0 and hp["nesterov"]:
            return None
        add, mul, sub = w.add, w.multiply, w.subtract
        if mu == 0:
            nlr = -lr

            def step(buf, p, s, t):
                if wd != 0:
                    add(buf, mul(p, wd), out=buf)
                mul(buf, nlr, out=buf)
                add(buf, p, out=buf)
                return buf, {}

            return step

        def step_momentum(buf, p, s, t):
            if wd != 0:
                add(buf, mul(p, wd), out=buf)
            if t > 1:
                mul(buf, keep, out=buf)
                add(buf, mul(s["momentum"], mu), out=buf)
            return sub(p, mul(buf, lr)), {"momentum": buf}

        return step_momentum
