"""What both backends share for ``Store.neighbours``: the session match and the order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engramdb.core.records import MemoryRow

__all__ = ["interleave", "same_conversation"]


def same_conversation(
    user_id: str | None, agent_id: str | None, run_id: str | None, mark: str
) -> tuple[str, list[Any]]:
    """SQL over alias ``m``: the memory's own ``user_id``, ``agent_id`` and ``run_id`` are these.

    ``mark`` is the backend's parameter placeholder (``?`` or ``%s``).
    """
    parts: list[str] = []
    params: list[Any] = []
    for column, value in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)):
        if value is None:
            parts.append(f"m.{column} IS NULL")
        else:
            parts.append(f"m.{column} = {mark}")
            params.append(value)
    return " AND ".join(parts), params


def interleave(
    before: Sequence[MemoryRow], after: Sequence[MemoryRow]
) -> list[tuple[int, MemoryRow]]:
    """``(offset, row)`` nearest first: -1, +1, -2, +2, ... (``before`` nearest first)."""
    out: list[tuple[int, MemoryRow]] = []
    for step in range(max(len(before), len(after))):
        if step < len(before):
            out.append((-(step + 1), before[step]))
        if step < len(after):
            out.append((step + 1, after[step]))
    return out
