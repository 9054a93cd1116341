"""Ownership hooks used by the dispatch paths (filled in by the ownership layer).

``check_alive`` raises :class:`ember.ConsumedError` for a tensor whose buffer
was handed away; ``guard_write`` runs before any write into a backend buffer.
"""

from __future__ import annotations

from .._errors import ConsumedError

__all__ = ["check_alive", "guard_write"]


def check_alive(t, op: str) -> None:
    """Raise ConsumedError if ``t`` is a dead (consumed) tensor."""
    where = getattr(t, "_consumed_at", None)
    if where is not None:
        raise ConsumedError(
            f"{op}: this tensor was consumed at {where} and can no longer be used. "
            "Fix: pass x.share() (or x.clone()) to the consuming op if you still need x"
        )


def guard_write(t, op: str) -> None:
    """Hook run before ``op`` writes into ``t``'s buffer in place (no-op for now)."""
    return None
