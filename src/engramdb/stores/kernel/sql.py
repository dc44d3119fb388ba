"""SQL text that both backends write alike, over a small dialect table.

Only what is the same statement in both dialects lives here: the
placeholder, the literal for "true" and SQLite's unary ``+`` (which keeps
its planner off an index) are the differences, and :class:`Dialect` names
them. Where a backend words a condition differently for its planner (the
SQLite rowid sets of ``_scope_clause``), it keeps its own text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engramdb.core.records import Scope

__all__ = ["POSTGRES", "SQLITE", "Dialect", "live_clause", "row_scope_clause"]


@dataclass(frozen=True)
class Dialect:
    """What differs between the backends' SQL in the statements of this module."""

    mark: str
    """The parameter placeholder."""
    true: str
    """The literal for an always-true condition."""
    off_index: str
    """A prefix that keeps the planner off a column's index ('' where none is needed)."""


SQLITE = Dialect(mark="?", true="1", off_index="+")
POSTGRES = Dialect(mark="%s", true="TRUE", off_index="")


def live_clause(d: Dialect, *, include_expired: bool = False) -> str:
    """SQL over alias ``m``: not deleted and not expired at the one parameter (now).

    ``include_expired``: not deleted, whatever the expiry; no parameter.
    """
    if include_expired:
        return "m.deleted_at IS NULL"
    return f"m.deleted_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > {d.mark})"


def row_scope_clause(scope: Scope, d: Dialect, scope_table: str) -> tuple[str, list[Any]]:
    """SQL over alias ``m``: whether ``scope`` sees the row, checked row by row.

    Every id of ``scope`` must match: the user on the row, an agent or a run
    on the row or attached to it as a session (``scope_table``). Made for the
    rows another condition found (dedup looks rows up by hash, reads by id):
    correlated lookups, with the agent and run columns kept off their
    indexes where the dialect can say so.
    """
    parts: list[str] = []
    params: list[Any] = []
    for kind, value in scope.items():
        if kind == "user_id":
            parts.append(f"m.user_id = {d.mark}")
            params.append(value)
        else:
            parts.append(
                f"({d.off_index}m.{kind} = {d.mark} OR EXISTS (SELECT 1 FROM {scope_table} s "
                f"WHERE s.memory_rowid = m.rowid AND s.kind = {d.mark} AND s.value = {d.mark}))"
            )
            params.extend([value, kind, value])
    return " AND ".join(parts) or d.true, params
