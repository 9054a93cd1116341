"""``ember.config``: the library's few global options, settable for a block.

Options (defaults first):

- ``on_hidden_copy``: ``"ignore"``, ``"warn"`` or ``"error"``. ember copies a
  buffer when correctness demands it (writing into a borrowed input or into
  a buffer a tape saved, see the ownership docs); users who want to remove
  such copies ask to be told: a :class:`ember.HiddenCopyWarning` or an
  :class:`ember.ReuseError`.
- ``gc_threshold``: ``None`` (an int, or ``None``; opt-in, ``50000`` suits long
  tapes: :data:`RECOMMENDED` holds both tuning values). While a transform
  records a tape or runs its backward pass, Python's cyclic garbage
  collector starts a young-generation pass after this many allocations
  instead of its default 700, and the passes over older generations wait
  until the last tape closes (the thresholds are restored afterwards; a
  larger threshold the user set is kept). Why: a tape is millions of small
  objects that all live until backward and then die together, the opposite
  of the "most objects die young" premise of generational collection, so
  with the default Python rescans the tape again and again (a 1,000,000-op
  chain ran 1.8x slower per op than a 1,000-op one). Only the timing of
  cycle collection changes, never a value; ``None`` (the default) leaves the
  collector alone.
- ``malloc_trim_threshold``: ``None`` (bytes, or ``None``; opt-in, 256 MiB suits
  training steps).
  How much freed memory glibc's malloc keeps in the process instead of
  returning it to the system, so that the next training step reuses its
  pages instead of page-faulting fresh ones (the measured effect is in
  docs/performance.md). Applied whenever it is set; importing ember
  changes nothing unless ``$EMBER_MALLOC_TRIM_THRESHOLD`` (bytes) asks for a
  value at import. Setting it back to ``None`` restores glibc's static
  defaults. No effect where the C library is not glibc
  (:func:`malloc_tunable`). See ``ember/_heap.py``.

Both tuning options are opt-in because they change the whole process, not
just ember: ``ember.config(**ember._config.RECOMMENDED)`` is what the
benchmarks run with (see docs/performance.md).
"""

from __future__ import annotations

import contextlib

from ._heap import RECOMMENDED_TRIM_THRESHOLD, apply_trim_threshold, initial_trim_threshold, malloc_tunable

__all__ = ["config", "get_config", "malloc_tunable", "CONFIG", "RECOMMENDED", "BAD_CONFIG",
           "UNKNOWN_CONFIG"]

BAD_CONFIG = "ember.config: {key} must be {allowed}, not {value!r}"
UNKNOWN_CONFIG = "ember.config: unknown option {key!r}; known options: {known}"

#: The current values; read by the layers that use them (ownership, traces).
CONFIG: dict = {"on_hidden_copy": "ignore", "gc_threshold": None,
               "malloc_trim_threshold": initial_trim_threshold()}
#: The process tuning a training program may opt into (``ember.config(**RECOMMENDED)``).
RECOMMENDED: dict = {"gc_threshold": 50_000, "malloc_trim_threshold": RECOMMENDED_TRIM_THRESHOLD}
if CONFIG["malloc_trim_threshold"] is not None:
    apply_trim_threshold(CONFIG["malloc_trim_threshold"])


def _positive_int_or_none(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0)


#: option -> (check, description of the allowed values)
_ALLOWED = {
    "on_hidden_copy": (lambda v: v in ("ignore", "warn", "error"), "one of ('ignore', 'warn', 'error')"),
    "gc_threshold": (_positive_int_or_none, "a positive int or None"),
    "malloc_trim_threshold": (lambda v: v is None or (
        isinstance(v, int) and not isinstance(v, bool) and v >= 0), "a number of bytes (int >= 0) or None"),
}
#: options that take effect outside ember when set (the others are read where they are used)
_APPLY = {"malloc_trim_threshold": apply_trim_threshold}


def _update(values: dict) -> None:
    CONFIG.update(values)
    for key, value in values.items():
        if key in _APPLY:
            _APPLY[key](value)


def get_config() -> dict:
    """A copy of the current ember configuration."""
    return dict(CONFIG)


def config(**options) -> contextlib.AbstractContextManager:
    """Set ember options; usable as a plain call or as a ``with`` block that restores them.

    See the module docstring for the options.

    >>> import ember
    >>> with ember.config(on_hidden_copy="warn", gc_threshold=None):
    ...     pass
    """
    for key, value in options.items():
        if key not in _ALLOWED:
            raise TypeError(UNKNOWN_CONFIG.format(key=key, known=sorted(_ALLOWED)))
        check, allowed = _ALLOWED[key]
        if not check(value):
            raise ValueError(BAD_CONFIG.format(key=key, allowed=allowed, value=value))
    old = {k: CONFIG[k] for k in options}
    _update(options)

    @contextlib.contextmanager
    def restore():
        try:
            yield get_config()
        finally:
            _update(old)

    return restore()
