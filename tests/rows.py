"""Hand-made MemoryRows for tests of the ranking rules (no store behind them)."""

from __future__ import annotations

from engramdb.core.records import MemoryRow

__all__ = ["memory_row"]


def memory_row(
    mid: str, *, observed: str | None = None, actor: str | None = None, user_id: str = "u"
) -> MemoryRow:
    """A live memory ``mid`` (its text and hash are its id) stated at ``observed``."""
    stamp = observed or "2024-01-01T00:00:00Z"
    return MemoryRow(
        id=mid,
        text=mid,
        hash=mid,
        user_id=user_id,
        agent_id=None,
        run_id=None,
        actor_id=actor,
        role="user",
        attributed_to=None,
        memory_type=None,
        metadata={},
        created_at=stamp,
        updated_at=stamp,
        observed_at=observed,
        expires_at=None,
        deleted_at=None,
        version=1,
    )
