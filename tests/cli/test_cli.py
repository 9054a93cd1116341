"""The ``ember`` command end to end, through ``python -m ember`` in a subprocess.

Covers: info; train --quick writing a checkpoint and a curves PNG; --resume
ending where the uninterrupted run ends; each error path (corrupted
checkpoint, missing checkpoint, unknown backend, missing extra, usage error)
giving one line on stderr, a non-zero exit and no traceback (unless --debug);
bench --quick on a tiny subset; conformance without the suite or without the
checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def ember(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 240):
    """Run ``python -m ember ARGS``; return the CompletedProcess (text)."""
    e = dict(os.environ)
    e.update(env or {})
    e["PYTHONPATH"] = os.pathsep.join(p for p in (e.get("PYTHONPATH", ""), str(SRC)) if p)
    if env and "PYTHONPATH" in env:  # caller's entries go first
        e["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(SRC)
    e.setdefault("OMP_NUM_THREADS", "1")
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    e["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "ember", *args], cwd=cwd or ROOT, env=e,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(p, rc=1):
    assert p.returncode == rc, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("ember: error: ")
    assert "Traceback" not in p.stderr + p.stdout
    return lines[0]


def final_accuracy(stdout: str) -> str:
    m = re.search(r"test accuracy (\d\.\d+) after", stdout)
    assert m, stdout
    return m.group(1)


def test_info_lists_numpy_with_a_checked_gradient():
    p = ember("info", env={"JAX_ENABLE_X64": "0"})  # as users run it (the tests set x64 on)
    assert p.returncode == 0, p.stderr
    block = p.stdout.split("[numpy]", 1)[1].split("\n[", 1)[0]
    assert "gradient ok: True" in block
    config = p.stdout.split("[config]", 1)[1]
    assert "malloc_trim_threshold: None" in config and "malloc: " in config  # opt-in: untouched
    assert "Warning" not in p.stderr  # probing each backend's dtypes warns nowhere (JAX without x64)


def test_version_and_help():
    p = ember("--help")
    assert p.returncode == 0 and all(c in p.stdout for c in ("train", "bench", "conformance", "info"))
    assert ember("--version").stdout.strip().endswith("0.1.0")


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """An uninterrupted 2-epoch quick run, and a 1-epoch run resumed to 2 epochs."""
    base = tmp_path_factory.mktemp("train")
    full = ember("train", "--quick", "--epochs", "2", "--out", str(base / "full"))
    half = ember("train", "--quick", "--epochs", "1", "--out", str(base / "half"))
    resumed = ember("train", "--resume", str(base / "half"), "--epochs", "2")
    return base, full, half, resumed


def test_train_quick_writes_checkpoint_and_curves(quick_runs):
    base, full, _, _ = quick_runs
    assert full.returncode == 0, full.stderr
    out = base / "full"
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    import ember.io

    ckpt = ember.io.load(out / "checkpoint.safetensors")
    assert ckpt["epoch"] == 2 and ckpt["config"]["model"] == "cnn" and ckpt["config"]["backend"] == "numpy"
    assert len(ckpt["history"]["test_acc"]) == 2
    import ember.tree

    assert type(ckpt["model"]).__name__ == "DigitsCNN"  # the model itself, through public ember.io
    assert "features.0.weight" in [str(p) for p in ember.tree.paths(ckpt["model"])]
    assert ckpt["opt_state"]["step"] > 0
    assert float(final_accuracy(full.stdout)) == pytest.approx(ckpt["history"]["test_acc"][-1], abs=1e-4)
    assert "epoch   2/2" in full.stdout


def test_resume_continues_to_the_same_accuracy(quick_runs):
    base, full, half, resumed = quick_runs
    assert half.returncode == 0 and resumed.returncode == 0, (half.stderr, resumed.stderr)
    assert "resuming from" in resumed.stdout and "epoch   1/2" not in resumed.stdout
    assert final_accuracy(resumed.stdout) == final_accuracy(full.stdout)
    import ember.io

    a = ember.io.load(base / "full" / "checkpoint.safetensors")
    b = ember.io.load(base / "half" / "checkpoint.safetensors")
    assert b["epoch"] == 2 and b["history"]["loss"] == pytest.approx(a["history"]["loss"], rel=1e-6)
    import ember.tree

    pa, pb = ember.tree.flatten_with_path(a["model"])[0], ember.tree.flatten_with_path(b["model"])[0]
    assert [str(p) for p, _ in pa] == [str(p) for p, _ in pb]
    for (k, v), (_, w) in zip(pa, pb):
        assert (v == w).all(), str(k)


def test_resume_past_the_last_epoch_says_how_to_continue(quick_runs):
    base = quick_runs[0]
    line = assert_one_line_error(ember("train", "--resume", str(base / "full"), "--epochs", "2"))
    assert "--epochs" in line


def test_corrupted_checkpoint_is_one_line(quick_runs, tmp_path):
    src = quick_runs[0] / "full" / "checkpoint.safetensors"
    (tmp_path / "checkpoint.safetensors").write_bytes(src.read_bytes()[:500])
    line = assert_one_line_error(ember("train", "--resume", str(tmp_path)))
    assert "cannot be read" in line and "without --resume" in line
    (tmp_path / "checkpoint.safetensors").write_bytes(b"\x00" * 64)
    assert "cannot be read" in assert_one_line_error(ember("train", "--resume", str(tmp_path)))


def test_missing_checkpoint_is_one_line_and_debug_shows_traceback(tmp_path):
    line = assert_one_line_error(ember("train", "--resume", str(tmp_path / "nope")))
    assert "no checkpoint.safetensors" in line and "--out" in line
    p = ember("--debug", "train", "--resume", str(tmp_path / "nope"))
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_unknown_backend_is_one_line():
    line = assert_one_line_error(ember("train", "--backend", "tensorflow"), rc=2)  # a usage error
    assert "'tensorflow'" in line and "numpy" in line and "array_api_strict" in line


def test_unknown_model_and_bad_option_are_one_line():
    assert "mlp, cnn" in assert_one_line_error(ember("train", "--model", "resnet"), rc=2)
    line = assert_one_line_error(ember("train", "--checkpointing", "all"), rc=2)
    assert "balanced" in line and "--help" in line
    assert "frobnicate" in assert_one_line_error(ember("frobnicate"), rc=2)


def test_missing_extra_names_it(tmp_path):
    # Simulate an absent (or broken) CuPy even where one is installed.
    fake = tmp_path / "fake"
    (fake / "cupy").mkdir(parents=True)
    (fake / "cupy" / "__init__.py").write_text("raise ImportError('No module named cupy')\n")
    line = assert_one_line_error(ember("train", "--backend", "cupy", "--quick", "--out", str(tmp_path / "o"),
                                       env={"PYTHONPATH": str(fake)}))
    assert 'pip install -e ".[cupy]"' in line
    assert not (tmp_path / "o").exists()


def test_out_that_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert "--out" in assert_one_line_error(ember("train", "--quick", "--out", str(f)), rc=2)


def test_bench_quick_tiny_subset(tmp_path):
    p = ember("bench", "--quick", "--script", "overhead", "--only", "numpy,ember-untracked",
              "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ember-untracked" in p.stdout and "x" in p.stdout
    assert (tmp_path / "results" / "overhead.json").is_file()
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_all_writes_the_acceptance_summary(tmp_path):
    p = ember("bench", "--all", "--quick", "--script", "overhead", "--only", "numpy,ember-untracked",
              "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "untracked op, ember / numpy" in p.stdout and "n/a (workload not run)" in p.stdout
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("| acceptance (issue 12) |") and "| overhead |" in summary
    assert (tmp_path / "overhead.json").is_file()


def test_bench_unknown_script_and_missing_checkout(tmp_path):
    assert "overhead" in assert_one_line_error(ember("bench", "--script", "nosuch", "--out", str(tmp_path)))
    line = assert_one_line_error(ember("bench", "--repo", str(tmp_path), "--out", str(tmp_path / "o")))
    assert "benchmarks/_harness.py not found" in line and "--repo" in line


def test_conformance_without_suite_says_how_to_get_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ARRAY_API_TESTS_DIR"}
    p = subprocess.run([sys.executable, "-m", "ember", "conformance", "ember.autodiff.numpy",
                        "--suite", str(tmp_path / "no-suite")],
                       cwd=ROOT, env={**env, "PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0
    assert "test suite not found" in p.stdout + p.stderr and "git clone" in p.stdout + p.stderr


def test_conformance_without_checkout_is_one_line(tmp_path):
    line = assert_one_line_error(ember("conformance", "numpy", "--repo", str(tmp_path)))
    assert "conformance/run not found" in line
