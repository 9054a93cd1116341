"""Every setting ``ember train --resume`` reads from a checkpoint is checked: each bad or missing
value raises one message naming its key (test_cli_resume_checks.py runs the CLI on some)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from ember.cli._resume import BadCheckpointValue, check_checkpoint


GOOD = {
    "config": {"model": "mlp", "backend": "numpy", "epochs": 2, "batch": 64, "optimizer": "sgd",
               "lr": 0.1, "lr_decay": 0.8, "seed": 0, "checkpointing": "none", "quick": True},
    "epoch": 1,
    "history": {"loss": [2.3], "train_acc": [0.1], "test_acc": [0.1], "seconds": [0.3]},
}
BAD = [
    ("config.model", "resnet"), ("config.model", None), ("config.backend", "tf"), ("config.epochs", 0),
    ("config.epochs", 2.0), ("config.batch", True), ("config.batch", -3), ("config.optimizer", "adamw"),
    ("config.lr", 0.0), ("config.lr", math.inf), ("config.lr", "0.1"), ("config.lr_decay", 0),
    ("config.lr_decay", 1.5), ("config.seed", -1), ("config.seed", "0"), ("config.checkpointing", "all"),
    ("config.quick", "yes"), ("epoch", True), ("epoch", 0), ("epoch", 1.0), ("history", [1]),
    ("history.loss", [math.nan]), ("history.test_acc", []), ("history.seconds", "0.3"),
]


def _edited(key, value):
    ckpt = copy.deepcopy(GOOD)
    head, _, tail = key.partition(".")
    if tail:
        ckpt[head][tail] = value
    else:
        ckpt[head] = value
    return ckpt


def test_a_good_checkpoint_passes():
    check_checkpoint(_edited("epoch", 1), Path("run"), backends=("numpy",), models=("mlp", "cnn"))


@pytest.mark.parametrize("key, value", BAD)
def test_every_bad_value_names_its_key(key, value):
    with pytest.raises(BadCheckpointValue) as e:
        check_checkpoint(_edited(key, value), Path("run"), backends=("numpy",), models=("mlp", "cnn"))
    assert f"the checkpoint's {key} is" in str(e.value) and "--resume run" in str(e.value)


@pytest.mark.parametrize("key", ["config." + k for k in GOOD["config"]] + ["history." + k for k in GOOD["history"]])
def test_a_missing_key_is_named(key):
    ckpt = _edited("epoch", 1)
    head, _, tail = key.partition(".")
    del ckpt[head][tail]
    with pytest.raises(BadCheckpointValue, match=f"the checkpoint's {key} is missing"):
        check_checkpoint(ckpt, Path("run"), backends=("numpy",), models=("mlp", "cnn"))
