"""Keep freed array memory in the process for the next step (glibc's malloc).

Why: a training step allocates its activations, then frees nearly all of
them when backward ends. With glibc's default policy the freed top of the
heap goes back to the operating system as soon as it exceeds twice the
largest array freed so far, and the next step gets fresh pages, each one a
page fault the kernel must zero. A transformer block step (batch 16, seq 64,
d 128) took about 11,000 page faults, 80 ms in place of 30; a small CNN
5,600 faults, 44 ms in place of 17. Raising the trim threshold keeps that
memory for reuse, as the caching allocators of GPU libraries do.

``ember.config(malloc_trim_threshold=...)`` sets it (bytes; 256 MiB,
:data:`RECOMMENDED_TRIM_THRESHOLD`, suits training steps). It is opt-in:
importing ember leaves malloc as it is unless ``$EMBER_MALLOC_TRIM_THRESHOLD``
(bytes or ``none``) asks for a value. Arrays below 4 MiB then come
from the heap; larger ones are still mapped and unmapped on their own,
because NumPy asks the kernel for huge pages for them and only a fresh
mapping gets those (from the heap, a Conv2d step with 4-8 MiB im2col
buffers took 1.11-1.23x PyTorch's time, mapped 0.61-0.63x). The price: up to that many
bytes of freed memory stay in the process instead of going back to the
system. ``None`` sets glibc's static defaults (128 KiB each) back and hands the
memory kept so far back to the system (``malloc_trim``); glibc's
dynamic threshold stays off once it has been set, so to keep glibc's policy
exactly set ``EMBER_MALLOC_TRIM_THRESHOLD=none`` before importing ember.
Where malloc was tuned through the environment (``MALLOC_TRIM_THRESHOLD_``
and the like, or ``glibc.malloc`` tunables in ``GLIBC_TUNABLES``), ember
leaves it as it is unless ``EMBER_MALLOC_TRIM_THRESHOLD`` asks otherwise.
Other C libraries (musl, macOS, Windows): nothing is changed.
"""

from __future__ import annotations

import os

#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: arrays below this size come from the heap while a trim threshold is set; from it up
#: they are mapped afresh, as NumPy asks for (transparent) huge pages from 4 MiB on
MMAP_THRESHOLD = 4 << 20
#: glibc's static defaults, set back by ``None``
_GLIBC_DEFAULT = 128 << 10
RECOMMENDED_TRIM_THRESHOLD = 256 << 20
ENV = "EMBER_MALLOC_TRIM_THRESHOLD"
BAD_ENV = (
    "${env}={value!r} is not a number of bytes or 'none'; set it to e.g. 268435456 "
    "(256 MiB, the default) or to 'none' to leave the C library's malloc as it is"
)

_mallopt = None
_malloc_trim = None


def _glibc_mallopt():
    """glibc's ``mallopt``, or None on another C library."""
    global _mallopt, _malloc_trim
    if _mallopt is None:
        _mallopt = False
        try:  # the C library this process runs on (platform.libc_ver reads the executable)
            glibc = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
        except (AttributeError, ValueError, OSError):  # no confstr, or not a GNU C library
            glibc = False
        if glibc:
            try:
                import ctypes

                libc = ctypes.CDLL(None)
                _mallopt = libc.mallopt
                _malloc_trim = getattr(libc, "malloc_trim", None)
            except (ImportError, OSError, AttributeError):  # pragma: no cover - no ctypes, odd build
                pass
    return _mallopt or None


def initial_trim_threshold() -> int | None:
    """The value to apply at import: ``$EMBER_MALLOC_TRIM_THRESHOLD`` (bytes or 'none'); None
    (malloc left as it is, glibc's own ``MALLOC_*_`` settings included) when it is unset."""
    value = os.environ.get(ENV)
    if value is None or not value.strip():
        return None
    if value.strip().lower() == "none":
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(BAD_ENV.format(env=ENV, value=value))
    return n


def malloc_tunable() -> bool:
    """Whether ``malloc_trim_threshold`` has an effect here (the C library is glibc)."""
    return _glibc_mallopt() is not None


def apply_trim_threshold(trim: int | None) -> bool:
    """Set glibc's trim threshold to ``trim`` bytes (and the mmap threshold to 4 MiB), or
    both back to glibc's static defaults for None. False where malloc is not glibc's."""
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    if trim is None:
        done = bool(mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT)) and bool(
            mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT))
        if _malloc_trim is not None:  # hand back what the old threshold kept, not at the next free
            # only: free pages amid the heap too (glibc trims only its top by itself)
            _malloc_trim(_GLIBC_DEFAULT)
        return done
    # mallopt takes a C int: clamp (2 GiB - 1 keeps everything below that in the process)
    trim = min(trim, 2**31 - 1)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, trim))
