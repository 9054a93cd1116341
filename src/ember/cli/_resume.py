"""Checks on what ``ember train --resume`` reads back from a checkpoint.

Why: a checkpoint is a file anyone may have edited, truncated by hand or
written with another program. Every setting the training loop takes from it
(learning rate, batch size, optimizer, epoch ...) is checked here before use,
so a bad value is one line naming the key and the fix, never a traceback deep
in the loop and never a silent fallback (an unknown optimizer used to become
Adam, ``lr=nan`` trained NaNs).
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any, Callable

__all__ = ["check_checkpoint", "BadCheckpointValue", "BAD_VALUE", "NOT_A_MAPPING", "HISTORY_KEYS"]

BAD_VALUE = (
    "--resume {path}: the checkpoint's {key} is {value}, but it must be {need}; the file was "
    "edited or not written by `ember train`: fix that value, or train again without --resume"
)
NOT_A_MAPPING = (
    "--resume {path}: the checkpoint's {key} is a {kind}, not a mapping of names to values; the "
    "file was edited or not written by `ember train`: point --resume at another run, or train "
    "again without --resume"
)

HISTORY_KEYS = ("loss", "train_acc", "test_acc", "seconds")
OPTIMIZERS = ("sgd", "adam")
CHECKPOINTING = ("none", "balanced")


class BadCheckpointValue(ValueError):
    """A value read from a checkpoint is missing or outside what ``ember train`` writes."""


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


def _one_of(options: tuple[str, ...]) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, str) and v in options), "one of " + ", ".join(repr(o) for o in options)


def _config_rules(backends: tuple[str, ...], models: tuple[str, ...]) -> dict[str, tuple[Callable[[Any], bool], str]]:
    """``key -> (accepts(value), what it must be)`` for every key of the saved run configuration."""
    return {
        "model": _one_of(models),
        "backend": _one_of(backends),
        "epochs": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        "batch": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        "optimizer": _one_of(OPTIMIZERS),
        "lr": (lambda v: _is_real(v) and v > 0, "a finite number > 0"),
        "lr_decay": (lambda v: _is_real(v) and 0 < v <= 1, "a finite number in (0, 1]"),
        "seed": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
        "checkpointing": _one_of(CHECKPOINTING),
        "quick": (lambda v: isinstance(v, bool), "true or false"),
    }


_MISSING = object()


def _show(v: Any) -> str:
    text = "missing" if v is _MISSING else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_checkpoint(ckpt: dict[str, Any], path: Path, *, backends: tuple[str, ...],
                     models: tuple[str, ...]) -> None:
    """Raise :class:`BadCheckpointValue` (message names the key and the fix) unless ``ckpt`` is sane.

    Checks the run configuration (every key ``ember train`` writes), the
    epoch (an integer >= 1) and the history (one finite number per finished
    epoch for each curve).
    """

    def bad(key: str, value: Any, need: str) -> BadCheckpointValue:
        return BadCheckpointValue(BAD_VALUE.format(path=path, key=key, value=_show(value), need=need))

    config = ckpt["config"]
    if not isinstance(config, dict):
        raise BadCheckpointValue(NOT_A_MAPPING.format(path=path, key="config", kind=type(config).__name__))
    for key, (ok, need) in _config_rules(backends, models).items():
        value = config.get(key, _MISSING)
        if value is _MISSING or not ok(value):
            raise bad(f"config.{key}", value, need)
    epoch = ckpt["epoch"]
    if not (_is_int(epoch) and epoch >= 1):
        raise bad("epoch", epoch, "an integer >= 1 (the number of finished epochs)")
    history = ckpt["history"]
    if not isinstance(history, dict):
        raise BadCheckpointValue(NOT_A_MAPPING.format(path=path, key="history", kind=type(history).__name__))
    for key in HISTORY_KEYS:
        values = history.get(key, _MISSING)
        if not (isinstance(values, list) and len(values) == epoch and all(_is_real(v) for v in values)):
            raise bad(f"history.{key}", values, f"a list of {epoch} finite numbers (one per finished epoch)")
