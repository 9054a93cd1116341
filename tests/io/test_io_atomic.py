"""ember.io.save is atomic: a save killed with SIGKILL at any moment leaves old or new, whole.

A child process saves a ~20 MB structure to one target over and over, each
generation k filled with the value k; the parent kills it at a random moment.
The target must then be absent (killed before the first save finished) or
load completely with every array equal to the generation recorded inside it.
A killed save may leave its temp file ``.{name}.tmp-{pid}-{random}`` behind;
the next save to that target removes temp files of dead processes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ember.io as io

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import ember.io as io

    target = sys.argv[1]
    n = 5_000_000 // 2  # two float32 arrays: 20 MB per file
    k = 0
    while True:
        k += 1
        io.save(target, {"gen": k, "params": {"w": np.full(n, k, np.float32), "b": np.full(n, -k, np.float32)}})
        print(k, flush=True)
    """
)


def _src_path() -> str:
    import ember

    return os.path.dirname(os.path.dirname(os.path.abspath(ember.__path__[0])))


def _kill_rounds(tmp_path, rounds: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    target = str(tmp_path / "ckpt.safetensors")
    env = dict(os.environ, PYTHONPATH=_src_path() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    seen = []
    for _ in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, target], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.2, 1.5))  # imports take ~0.3 s: some kills land before the first save
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
        if not os.path.exists(target):
            seen.append(0)
            continue
        back = io.load(target)
        k = back["gen"]
        assert isinstance(k, int) and k >= 1
        np.testing.assert_array_equal(back["params"]["w"], np.float32(k))
        np.testing.assert_array_equal(back["params"]["b"], np.float32(-k))
        assert back["params"]["w"].shape == (2_500_000,)
        seen.append(k)
    # the next save cleans temp files that killed saves left behind
    io.save(target, {"gen": 0})
    leftovers = [f for f in os.listdir(tmp_path) if f != "ckpt.safetensors"]
    assert leftovers == [], leftovers
    return seen


def test_sigkill_during_save_leaves_old_or_new(tmp_path):
    seen = _kill_rounds(tmp_path, rounds=5, seed=1234)
    assert len(seen) == 5


@pytest.mark.slow
def test_sigkill_during_save_many_rounds(tmp_path):
    seen = _kill_rounds(tmp_path, rounds=20, seed=98765)
    assert any(k > 0 for k in seen)
