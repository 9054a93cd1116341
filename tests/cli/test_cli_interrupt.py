"""Ctrl-C during ``ember train``: the run keeps its last epoch (checkpoint and curves) and says how
to continue. Runs the real console script and sends it SIGINT, as a terminal's Ctrl-C does."""

from __future__ import annotations

import shlex
import signal
import time

from _cli_run import ember, popen_ember

from ember.io import load as load_file


#: what ``ember train`` ends with after Ctrl-C: exit status 130, or, rarely, death by SIGINT
#: itself at the interpreter's shutdown after the message (cause not found); a shell reports
#: either as status 130
_CTRL_C_EXIT = (130, -signal.SIGINT)


def _wait_for(paths, proc, timeout=120.0):
    t0 = time.monotonic()
    while not all(p.exists() for p in paths):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout, f"{paths} not written within {timeout}s"
        time.sleep(0.05)


def test_ctrl_c_keeps_the_last_epoch_and_prints_the_resume_command(tmp_path):
    out = tmp_path / "run"
    # far more epochs than can finish before the signal: the run is always mid-training
    proc = popen_ember("train", "--quick", "--model", "mlp", "--epochs", "500", "--out", str(out))
    try:
        _wait_for([out / "checkpoint.safetensors", out / "curves.png"], proc)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode in _CTRL_C_EXIT, (proc.returncode, stdout, stderr)
    assert "Traceback" not in stderr + stdout
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ember: aborted: the checkpoint of epoch "), stderr

    # the plot of an interrupted run is there (written every epoch, not at the end), whole
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[-8:] == b"IEND\xaeB`\x82"
    assert not [f for f in out.iterdir() if f.name.startswith(".")]  # no temp file left behind

    saved = load_file(out / "checkpoint.safetensors")["epoch"]
    assert 1 <= saved < 500
    hint = lines[0]
    assert f"epoch {saved} is in {out}" in hint
    command = hint.split("continue with: ", 1)[1]
    assert shlex.split(command) == ["ember", "train", "--resume", str(out), "--epochs", "500"]

    # the printed command continues the run (with fewer epochs here, to keep the test short)
    argv = shlex.split(command)[1:]
    argv[argv.index("--epochs") + 1] = str(saved + 1)
    p = ember(*argv)
    assert p.returncode == 0, p.stderr
    assert f"epoch {saved + 1:3d}/{saved + 1}" in p.stdout
    assert load_file(out / "checkpoint.safetensors")["epoch"] == saved + 1


def test_ctrl_c_before_the_first_epoch_says_nothing_was_saved(tmp_path):
    out = tmp_path / "run"
    proc = popen_ember("train", "--epochs", "3", "--out", str(out))
    try:
        while not out.is_dir():  # --out is made (and checked) just before training starts
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode in _CTRL_C_EXIT and "Traceback" not in stderr, (proc.returncode, stderr)
    assert not (out / "checkpoint.safetensors").exists()  # a full epoch takes seconds
    assert [ln for ln in stderr.splitlines() if ln.strip()] == [
        "ember: aborted: no epoch had finished, so nothing was saved"]


def test_a_ctrl_c_that_python_swallows_is_raised_again_at_the_next_batch(monkeypatch):
    # a KeyboardInterrupt raised inside a weakref callback (an ember trace's end, matplotlib's
    # while the curves are drawn) is ignored by Python; the run must stop at its next batch all
    # the same, and Python's report of it ("Exception ignored in ..." and a traceback on
    # stderr) is dropped; any other exception in a callback is still reported
    import sys
    import weakref

    import pytest

    from ember.cli._train import _CtrlC

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_type))
    before, hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    with _CtrlC() as ctrl_c:
        assert signal.getsignal(signal.SIGINT) == ctrl_c._handler
        ctrl_c.check()  # (nothing yet)
        obj = type("Drawn", (), {})()
        ref = weakref.ref(obj, lambda _: ctrl_c._handler(signal.SIGINT, None))
        del obj
        assert reported == [] and ref() is None
        other = type("Other", (), {})()
        ref2 = weakref.ref(other, lambda _: 1 / 0)
        del other
        assert reported == [ZeroDivisionError] and ref2() is None
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
    assert signal.getsignal(signal.SIGINT) == before and sys.unraisablehook is hook
