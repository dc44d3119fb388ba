"""SQL text that both backends write alike, over a small dialect table.

Only what is the same statement in both dialects lives here: the
placeholder, the literal for "true" and SQLite's unary ``+`` (which keeps
its planner off an index) are the differences, and :class:`Dialect` names
them. Where a backend words a condition differently for its planner (the
SQLite rowid sets of ``_scope_clause``), it keeps its own text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engramdb.core.records import Scope

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "live_clause",
    "row_scope_clause",
    "scope_counts_query",
    "source_messages_query",
]


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


def scope_counts_query(
    d: Dialect,
    table: Callable[[str], str],
    scope_sql: str,
    scope_params: Sequence[Any],
    now: Any,
    *,
    day: str,
) -> tuple[str, list[Any]]:
    """One statement counting the memories matching ``scope_sql`` (over alias ``m``).

    Rows are ``(tag, state, key, count)``: tag 0 counts every memory by
    ``state`` (0 live, 1 expired at ``now``, 2 deleted) and ``key`` = the
    ``day`` expression of ``created_at``; tags 1, 2 and 3 count live memories
    per user, agent and run (``state`` NULL), an agent or a run counting its
    own rows and the rows it is attached to as a session.
    :func:`~engramdb.stores.kernel.rows.scope_counts` reads them. ``table``
    names a table of the store (schema-qualified on PostgreSQL).
    """
    live = live_clause(d)
    memories, attached = table("memories"), table("memory_scope")
    one = [now, *scope_params]
    parts = [
        f"SELECT 0, CASE WHEN m.deleted_at IS NOT NULL THEN 2 WHEN m.expires_at IS NOT NULL "
        f"AND m.expires_at <= {d.mark} THEN 1 ELSE 0 END, {day}, count(*) FROM {memories} m "
        f"WHERE {scope_sql} GROUP BY 2, 3",
        f"SELECT 1, NULL, m.user_id, count(*) FROM {memories} m WHERE {live} AND {scope_sql} "
        "AND m.user_id IS NOT NULL GROUP BY m.user_id",
    ]
    params = [*one, *one]
    for tag, kind in ((2, "agent_id"), (3, "run_id")):
        parts.append(
            f"SELECT {tag}, NULL, x.v, count(*) FROM (SELECT m.{kind} AS v FROM {memories} m "
            f"WHERE {live} AND {scope_sql} AND m.{kind} IS NOT NULL UNION ALL SELECT a.value "
            f"FROM {attached} a JOIN {memories} m ON m.rowid = a.memory_rowid WHERE "
            f"a.kind = '{kind}' AND (m.{kind} IS NULL OR a.value <> m.{kind}) AND {live} "
            f"AND {scope_sql}) x GROUP BY x.v"
        )
        params += [*one, *one]
    return " UNION ALL ".join(parts), params


def source_messages_query(
    d: Dialect, table: Callable[[str], str], memory_id: str, visible: Scope | None
) -> tuple[str, list[Any]]:
    """The stored messages a memory was made from that ``visible`` may read, oldest first.

    Rows are ``(rowid, role, content, name, observed_at)``. A message belongs
    to the scope of the add that stored it; ``visible`` (``None``: every
    scope) reads it only if every id it sets is the message's own, as
    ``recent_messages`` reads a scope's conversation, so a memory seen from
    a wider scope never shows the words of a conversation the caller could
    not list.
    """
    parts = [f"m.id = {d.mark}"]
    params: list[Any] = [memory_id]
    for kind, value in visible.items() if visible is not None else ():
        parts.append(f"g.{kind} = {d.mark}")
        params.append(value)
    return (
        f"SELECT g.rowid, g.role, g.content, g.name, g.observed_at FROM {table('messages')} g "
        f"JOIN {table('memory_sources')} s ON s.message_rowid = g.rowid "
        f"JOIN {table('memories')} m ON m.rowid = s.memory_rowid "
        f"WHERE {' AND '.join(parts)} ORDER BY g.rowid",
        params,
    )
