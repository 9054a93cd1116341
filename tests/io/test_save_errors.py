"""ember.io.save into a place it cannot write: one clear error naming the target and a fix;
nothing half-written, no temp file left, an existing file unchanged.

Before, a missing directory or a directory as the target gave a bare errno
naming the hidden temp file (``.m.safetensors.tmp-PID-...``) instead of the
path the user passed.
"""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import ember.io as io
from ember.io import _format


def test_missing_directory_names_it_and_the_fix(tmp_path):
    target = tmp_path / "nope" / "m.safetensors"
    with pytest.raises(FileNotFoundError) as e:
        io.save(target, {"w": np.ones(2)})
    msg = str(e.value)
    assert f"{str(tmp_path / 'nope')!r}" in msg and "does not exist" in msg and "os.makedirs" in msg
    assert ".tmp-" not in msg
    assert os.listdir(tmp_path) == []


def test_a_file_where_the_directory_should_be(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OSError, match="is not a directory"):
        io.save(tmp_path / "f" / "m.safetensors", {"w": np.ones(2)})


def test_a_directory_as_the_target(tmp_path):
    with pytest.raises(IsADirectoryError) as e:
        io.save(tmp_path, {"w": np.ones(2)})
    assert "is a directory" in str(e.value) and "model.safetensors" in str(e.value)
    assert ".tmp-" not in str(e.value) and os.listdir(tmp_path) == []
    assert not [f for f in os.listdir(tmp_path.parent) if f.startswith(f".{tmp_path.name}.tmp-")]


@pytest.mark.parametrize("code, fix", [(errno.ENOSPC, "disk space"), (errno.EACCES, "permissions"),
                                       (errno.EROFS, "read-only")])
def test_a_failed_write_keeps_the_old_file_and_says_why(tmp_path, monkeypatch, code, fix):
    target = tmp_path / "m.safetensors"
    io.save(target, {"w": np.ones(2)})
    before = target.read_bytes()

    def fail(*a, **k):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(_format, "write_tensors", fail)
    with pytest.raises(OSError) as e:
        io.save(target, {"w": np.zeros(2)})
    msg = str(e.value)
    assert e.value.errno == code and str(target) in msg and fix in msg and "unchanged" in msg
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.safetensors"]  # no temp file left
    np.testing.assert_array_equal(io.load(target)["w"], np.ones(2))
