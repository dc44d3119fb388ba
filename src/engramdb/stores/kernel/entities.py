"""SQL both backends share for ``Store.entities`` and ``Store.entity_memories``.

The store keeps one entity row per owner and normalised name, and one link
per memory and entity (``memory_entities``). A scope's entities are read from
its memories (the scope decides which memories count, the links which
entities): one aggregate, links counted per entity row first (a sort of
integers) and only then folded per name. An entity's memories are read from
its links, newest stored first: with one entity row (every scope that names a
user has one owner, so one row per name) that is an index read in order that
stops at the page; with several (a scope of an agent that served many users)
the links of every row are sorted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engramdb.core.records import EntityCount, Scope
from engramdb.stores.kernel.sql import Dialect, live_clause

__all__ = [
    "entities_query",
    "entity_count",
    "entity_links",
    "entity_rows_query",
]


def entities_query(
    d: Dialect,
    table: Callable[[str], str],
    scope_sql: str,
    scope_params: Sequence[Any],
    now: Any,
    *,
    include_expired: bool,
    entity_type: str | None,
    contains: str | None,
    limit: int,
    offset: int,
) -> tuple[str, list[Any]]:
    """The statement of ``Store.entities`` over the memories ``scope_sql`` matches (alias ``m``).

    Rows are ``(key, name, type, degree, total)``: ``total`` is the number of
    entities that match, whatever the page (a window over the groups).
    """
    live = live_clause(d, include_expired=include_expired)
    live_params = [] if include_expired else [now]
    kept: list[str] = []
    kept_params: list[Any] = []
    if entity_type is not None:
        kept.append(f"e.type = {d.mark}")
        kept_params.append(entity_type)
    if contains:
        by_key = d.find.format(text="e.normalized", part=d.mark)
        by_name = d.find.format(text="lower(e.name)", part=d.mark)
        kept.append(f"({by_key} OR {by_name})")
        kept_params += [contains, contains]
    where = f" WHERE {' AND '.join(kept)}" if kept else ""
    sql = (
        "SELECT e.normalized, min(e.name), min(e.type), sum(c.n) AS degree, count(*) OVER () "
        f"FROM (SELECT x.entity_rowid AS r, count(*) AS n FROM {table('memories')} m "
        f"JOIN {table('memory_entities')} x ON x.memory_rowid = m.rowid "
        f"WHERE {live} AND {scope_sql} GROUP BY x.entity_rowid) c "
        f"JOIN {table('entities')} e ON e.rowid = c.r{where} "
        f"GROUP BY e.normalized ORDER BY degree DESC, e.normalized{d.binary} "
        f"LIMIT {d.mark} OFFSET {d.mark}"
    )
    return sql, [*live_params, *scope_params, *kept_params, limit, offset]


def entity_rows_query(
    d: Dialect, table: Callable[[str], str], scope: Scope, keys: Sequence[str]
) -> tuple[str, list[Any]]:
    """The entity rows of ``keys`` the memories of ``scope`` may link: ``(key, rowid, name, type)``.

    A scope that names a user sees only that user's memories, whose owner is
    the user: one row per key. Any other scope may see several owners.
    """
    marks = ", ".join([d.mark] * len(keys))
    sql = (
        f"SELECT normalized, rowid, name, type FROM {table('entities')} "
        f"WHERE normalized IN ({marks})"
    )
    params: list[Any] = list(keys)
    if scope.user_id is not None:
        sql += f" AND owner = {d.mark}"
        params.append(scope.owner)
    return sql + " ORDER BY rowid", params


def entity_links(
    d: Dialect,
    table: Callable[[str], str],
    rowids: Sequence[int],
    row_scope_sql: str,
    row_scope_params: Sequence[Any],
    now: Any,
    *,
    include_expired: bool,
) -> tuple[str, list[Any]]:
    """``FROM … WHERE …`` of the scope's live memories linked to the entity rows ``rowids``.

    Over aliases ``x`` (the links) and ``m`` (the memories, read by row id);
    ``row_scope_sql`` checks the scope row by row. Select ``count(*)`` for the
    degree, or the memories ``ORDER BY x.memory_rowid DESC`` for the newest.
    """
    live = live_clause(d, include_expired=include_expired)
    live_params = [] if include_expired else [now]
    if len(rowids) == 1:
        which = f"x.entity_rowid = {d.mark}"
    else:
        which = f"x.entity_rowid IN ({', '.join([d.mark] * len(rowids))})"
    sql = (
        f"FROM {table('memory_entities')} x JOIN {table('memories')} m{d.by_rowid} "
        f"ON m.rowid = x.memory_rowid WHERE {which} AND {live} AND {row_scope_sql}"
    )
    return sql, [*rowids, *live_params, *row_scope_params]


def entity_count(key: str, rows: Sequence[Sequence[Any]], degree: int) -> EntityCount | None:
    """The entity ``key`` of its rows ``(key, rowid, name, type)`` and degree; ``None`` at 0."""
    if not rows or degree <= 0:
        return None
    return EntityCount(
        key=key,
        name=min(str(r[2]) for r in rows),
        type=min((str(r[3]) for r in rows if r[3] is not None), default=None),
        degree=degree,
    )
