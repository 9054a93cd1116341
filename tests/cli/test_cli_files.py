"""Where ``ember train`` writes: an unwritable ``--out`` is one line with the fix (also on a
read-only mount), and a symlink planted in a shared ``--out`` is never followed.

Every test runs the real console script (``python -m ember``) in a subprocess.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _cli_run import ROOT, cli_env, ember_argv, ember, one_line_error


def _assert_out_error(line: str, out: Path) -> None:
    assert line.startswith(f"ember: error: --out {out}: cannot write there (")
    assert "pass --out a directory you can write to" in line


def test_out_where_no_directory_can_be_made(tmp_path):
    out = Path(os.devnull) / "run"  # below a device file: no directory can exist there
    _assert_out_error(one_line_error(ember("train", "--quick", "--out", str(out))), out)


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs, where mkdir is refused")
def test_out_in_sysfs_names_the_fix_not_a_bare_errno():
    out = Path("/sys/ember-cli-test-run")
    line = one_line_error(ember("train", "--quick", "--out", str(out)))
    _assert_out_error(line, out)
    assert "[Errno" not in line


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root may write into any directory, whatever its mode")
def test_out_in_a_directory_without_write_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        for out in (locked, locked / "run"):
            _assert_out_error(one_line_error(ember("train", "--quick", "--out", str(out))), out)
    finally:
        locked.chmod(0o700)


def _read_only_mount_prefix(mnt: Path) -> tuple[str, ...]:
    """An ``unshare`` command line that runs its arguments with ``mnt`` a read-only tmpfs."""
    script = 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"'
    prefix = ("unshare", "--map-root-user", "--mount", "sh", "-c", script, str(mnt))
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to make a read-only mount without root")
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this machine allows no unprivileged read-only mount ({probe.stderr.strip()})")
    return prefix


def test_out_on_a_read_only_mount_is_one_line(tmp_path):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    prefix = _read_only_mount_prefix(mnt)
    for out in (mnt, mnt / "run"):  # an existing read-only directory, and one to be made there
        p = subprocess.run([*prefix, *ember_argv("train", "--quick", "--out", str(out))], cwd=ROOT,
                           env=cli_env(), capture_output=True, text=True, timeout=240)
        line = one_line_error(p)
        _assert_out_error(line, out)
        assert "Read-only file system" in line


def test_planted_symlinks_in_a_shared_out_are_not_followed(tmp_path):
    out = tmp_path / "shared"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    # The old temp name was predictable (.curves.png.tmp-PID.png): plant it for the PID the
    # command will have (exec keeps the shell's PID), and plant curves.png itself as well.
    script = 'ln -s "$0" "$1/.curves.png.tmp-$$.png" && ln -s "$0" "$1/curves.png" && shift && exec "$@"'
    p = subprocess.run(["sh", "-c", script, str(victim), str(out),
                        *ember_argv("train", "--quick", "--model", "mlp", "--epochs", "1", "--out", str(out))],
                       cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert victim.read_text() == "the user's own file\n"
    curves = out / "curves.png"
    assert not curves.is_symlink() and curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mode = curves.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # as a plain open() would make it, not mkstemp's 0600
    # besides the two outputs only the planted link is there: no temp file was left
    names = sorted(f.name for f in out.iterdir())
    assert names[:1] == [n for n in names if n.startswith(".")] and len(names) == 3, names
