"""Files the ``ember`` command writes besides checkpoints: atomic, with unguessable temp names.

Why: an output directory may be shared (``--out /shared/runs``). A temp file
with a predictable name there lets anyone who can write to the directory
plant a symlink under that name and have the command overwrite a file the
symlink points at. So a temp file is created exclusively (``O_EXCL``, a
random name from :func:`tempfile.mkstemp`, never following a symlink) next
to its target, written, flushed to disk and renamed over the target in one
step: a reader sees the old file or the new one, never half of one, and an
interrupted write leaves no temp file behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Callable

__all__ = ["write_atomic", "check_writable"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(f)`` on a new exclusive temp file beside ``path``, then rename it onto ``path``.

    The file gets the mode a plain ``open(path, "w")`` would give (``0o666``
    less the umask), not ``mkstemp``'s ``0o600``. A planted symlink at
    ``path`` itself is replaced, not followed (``rename`` never follows it).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # an interrupt included: leave no temp file
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def check_writable(directory: str | os.PathLike[str]) -> None:
    """Create ``directory`` (with parents) and prove a file can be made in it; OSError if not.

    Why: finding out that ``--out`` is read-only after a whole epoch of
    training (or as a traceback) wastes the user's time; one exclusive temp
    file made and removed up front answers the question for this process.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".ember-write-check.", suffix=".tmp")
    os.close(fd)
    os.unlink(tmp)
