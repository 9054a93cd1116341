"""``ember train --resume`` checks what it reads and what it is asked: a seed (or ``--quick``)
that would change a half-done run's data is refused, and every setting read back from the
checkpoint is validated, each failure one line naming the key and the fix.

Each case runs the real console script; test_resume_values.py checks every key in-process.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from _cli_run import ember, one_line_error

from ember.io import load as load_file
from ember.io import save as save_file


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory):
    """The directory of a 1-epoch --quick MLP run (seed 0)."""
    out = tmp_path_factory.mktemp("resume") / "run"
    p = ember("train", "--quick", "--model", "mlp", "--epochs", "1", "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out


def _copy(src: Path, dst: Path, edit=None) -> Path:
    shutil.copytree(src, dst)
    if edit is not None:
        ckpt = load_file(dst / "checkpoint.safetensors")
        edit(ckpt)
        save_file(dst / "checkpoint.safetensors", ckpt)
    return dst


def test_a_different_seed_is_refused(one_epoch, tmp_path):
    run = _copy(one_epoch, tmp_path / "run")
    before = (run / "checkpoint.safetensors").read_bytes()
    line = one_line_error(ember("train", "--resume", str(run), "--seed", "5", "--epochs", "2"))
    assert "--seed 0, not 5" in line and "train/test split" in line and "drop --seed" in line
    assert (run / "checkpoint.safetensors").read_bytes() == before  # nothing trained or written


def test_the_checkpoints_seed_is_taken_when_none_is_given(one_epoch, tmp_path):
    run = _copy(one_epoch, tmp_path / "run", edit=lambda c: c["config"].update(seed=3))
    for extra in ((), ("--seed", "3")):
        p = ember("train", "--resume", str(run), "--epochs", "2", "--out", str(tmp_path / f"o{len(extra)}"), *extra)
        assert p.returncode == 0, p.stderr
        assert load_file(tmp_path / f"o{len(extra)}" / "checkpoint.safetensors")["config"]["seed"] == 3


def test_quick_on_a_full_run_is_refused(one_epoch, tmp_path):
    run = _copy(one_epoch, tmp_path / "run", edit=lambda c: c["config"].update(quick=False))
    line = one_line_error(ember("train", "--resume", str(run), "--quick", "--epochs", "2"))
    assert "without --quick" in line and "drop --quick" in line


def _set(key, value):
    def edit(ckpt):
        if key == "config":
            ckpt["config"] = value
        elif key.startswith("config."):
            ckpt["config"][key.split(".", 1)[1]] = value
        else:
            ckpt[key] = value
    return edit


@pytest.mark.parametrize("key, value, need", [
    ("config.batch", 0, "an integer >= 1"),
    ("config.lr", math.nan, "a finite number > 0"),
    ("config.optimizer", "evil", "one of 'sgd', 'adam'"),
    ("config.lr_decay", -1, "a finite number in (0, 1]"),
    ("epoch", "2", "an integer >= 1"),
    ("epoch", -1, "an integer >= 1"),
])
def test_bad_values_in_the_checkpoint_are_one_line(one_epoch, tmp_path, key, value, need):
    run = _copy(one_epoch, tmp_path / "run", edit=_set(key, value))
    line = one_line_error(ember("train", "--resume", str(run), "--epochs", "3"))
    assert f"the checkpoint's {key} is {value!r}, but it must be {need}" in line, line
    assert "without --resume" in line


def test_a_config_that_is_a_list_is_one_line(one_epoch, tmp_path):
    run = _copy(one_epoch, tmp_path / "run", edit=_set("config", [1, 2]))
    line = one_line_error(ember("train", "--resume", str(run), "--epochs", "3"))
    assert "the checkpoint's config is a list, not a mapping" in line and "without --resume" in line
