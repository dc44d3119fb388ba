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
    find: str = "instr({text}, {part}) > 0"
    """A condition: ``{text}`` contains ``{part}`` (both SQL expressions)."""
    by_rowid: str = ""
    """After a table's alias: read that table by row id only, as a join's inner side."""
    binary: str = ""
    """After a text expression in ORDER BY: order by bytes, whatever the database's collation."""


SQLITE = Dialect(mark="?", true="1", off_index="+", by_rowid=" NOT INDEXED")
POSTGRES = Dialect(
    mark="%s",
    true="TRUE",
    off_index="",
    find="strpos({text}, {part}) > 0",
    binary=' COLLATE "C"',
)


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
    days: tuple[str, Sequence[Any]] | None = None,
) -> tuple[str, list[Any]]:
    """One statement counting the memories matching ``scope_sql`` (over alias ``m``).

    Rows are ``(tag, a, b, c, n0, n1, n2)``, three reads of the scope:

    - tag 0, one row per ``(user_id, agent_id, run_id)`` = ``(a, b, c)``: its
      live memories ``n0``, expired at ``now`` ``n1``, deleted ``n2``;
    - tag 1, one row per ``day`` expression of ``created_at`` = ``a``: every
      memory added that day ``n0``;
    - tag 2, one row per session attached to a live memory other than its own,
      ``(kind, value)`` = ``(a, b)``: how many ``n0``.

    The first groups by the columns an index of the store can give in order
    (SQLite's ``memories_tally`` covers it: no sort, no row read), where one
    group per id and state would sort every memory of the scope. Only the
    days are sorted, unless ``days`` gives a statement (and its parameters)
    with the rows of tag 1 that a backend can read without a sort.
    :func:`~engramdb.stores.kernel.rows.scope_counts` folds the rows;
    ``table`` names a table of the store (schema-qualified on PostgreSQL).
    """
    live = live_clause(d)
    memories, attached = table("memories"), table("memory_scope")
    expired = f"m.expires_at IS NOT NULL AND m.expires_at <= {d.mark}"
    ids = (
        f"SELECT 0, m.user_id, m.agent_id, m.run_id, "
        f"sum(CASE WHEN m.deleted_at IS NULL AND NOT ({expired}) THEN 1 ELSE 0 END), "
        f"sum(CASE WHEN m.deleted_at IS NULL AND {expired} THEN 1 ELSE 0 END), "
        "sum(CASE WHEN m.deleted_at IS NOT NULL THEN 1 ELSE 0 END) "
        f"FROM {memories} m WHERE {scope_sql} GROUP BY m.user_id, m.agent_id, m.run_id"
    )
    if days is None:
        days = (
            f"SELECT 1, {day}, NULL, NULL, count(*), 0, 0 FROM {memories} m WHERE {scope_sql} "
            f"GROUP BY {day}",
            scope_params,
        )
    parts = [ids, days[0]]
    params = [now, now, *scope_params, *days[1]]
    for kind in ("agent_id", "run_id"):
        parts.append(
            f"SELECT 2, a.kind, a.value, NULL, count(*), 0, 0 FROM {attached} a JOIN {memories} m "
            f"ON m.rowid = a.memory_rowid WHERE a.kind = '{kind}' AND (m.{kind} IS NULL OR "
            f"a.value <> m.{kind}) AND {live} AND {scope_sql} GROUP BY a.kind, a.value"
        )
        params += [now, *scope_params]
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
