"""The SQLite store's entity reads: a scope's entities, and an entity's memories."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from engramdb._time import utc_now
from engramdb.stores.base import EntityCount, MemoryRow, Scope
from engramdb.stores.kernel.entities import (
    entities_query,
    entity_count,
    entity_links,
    entity_rows_query,
)
from engramdb.stores.kernel.sql import SQLITE
from engramdb.stores.sqlite._base import _COLS, _scope_clause, _sees_clause, _Store


def _table(name: str) -> str:
    return name


class _Entities(_Store):
    """``Store.entities`` and ``Store.entity_memories`` (the SQL is the kernel's)."""

    def entities(
        self,
        scope: Scope,
        *,
        limit: int,
        offset: int = 0,
        entity_type: str | None = None,
        contains: str | None = None,
        sample: int = 0,
        include_expired: bool = False,
    ) -> tuple[list[EntityCount], int]:
        """See :meth:`engramdb.stores.base.Store.entities`."""
        scope_sql, scope_params = _scope_clause(scope)
        now = utc_now()
        sql, params = entities_query(
            SQLITE,
            _table,
            scope_sql,
            scope_params,
            now,
            include_expired=include_expired,
            entity_type=entity_type,
            contains=contains,
            limit=limit,
            offset=offset,
        )
        with self._read() as con:
            rows = con.execute(sql, params).fetchall()
            found = [EntityCount(r[0], r[1], r[2], int(r[3])) for r in rows]
            total = int(rows[0][4]) if rows else 0
            if not rows and offset > 0:
                total = self._entity_total(con, scope, entity_type, contains, include_expired)
            if sample > 0 and found:
                by_key = self._entity_rows(con, scope, [e.key for e in found])
                for entity in found:
                    entity.sample = self._newest(
                        con, scope, by_key.get(entity.key, []), now, sample, 0, include_expired
                    )
        return found, total

    def _entity_total(
        self,
        con: sqlite3.Connection,
        scope: Scope,
        entity_type: str | None,
        contains: str | None,
        include_expired: bool,
    ) -> int:
        """How many entities match, for a page past the last one (which has no rows to tell)."""
        scope_sql, scope_params = _scope_clause(scope)
        sql, params = entities_query(
            SQLITE,
            _table,
            scope_sql,
            scope_params,
            utc_now(),
            include_expired=include_expired,
            entity_type=entity_type,
            contains=contains,
            limit=1,
            offset=0,
        )
        row = con.execute(sql, params).fetchone()
        return int(row[4]) if row else 0

    def entity_memories(
        self,
        scope: Scope,
        key: str,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> tuple[EntityCount | None, list[MemoryRow]]:
        """See :meth:`engramdb.stores.base.Store.entity_memories`."""
        now = utc_now()
        with self._read() as con:
            rows = self._entity_rows(con, scope, [key]).get(key, [])
            if not rows:
                return None, []
            sees_sql, sees_params = _sees_clause(scope)
            links, params = entity_links(
                SQLITE,
                _table,
                [int(r[1]) for r in rows],
                sees_sql,
                sees_params,
                now,
                include_expired=include_expired,
            )
            degree = int(con.execute(f"SELECT count(*) {links}", params).fetchone()[0])
            entity = entity_count(key, rows, degree)
            if entity is None:
                return None, []
            found = self._newest(con, scope, rows, now, limit, offset, include_expired)
        return entity, found

    @staticmethod
    def _entity_rows(
        con: sqlite3.Connection, scope: Scope, keys: Sequence[str]
    ) -> dict[str, list[tuple[Any, ...]]]:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for start in range(0, len(keys), 400):
            sql, params = entity_rows_query(SQLITE, _table, scope, keys[start : start + 400])
            for row in con.execute(sql, params):
                out.setdefault(row[0], []).append(row)
        return out

    def _newest(
        self,
        con: sqlite3.Connection,
        scope: Scope,
        rows: Sequence[tuple[Any, ...]],
        now: str,
        limit: int,
        offset: int,
        include_expired: bool,
    ) -> list[MemoryRow]:
        """The newest stored of the scope's live memories linked to the entity rows ``rows``."""
        if not rows or limit <= 0:
            return []
        sees_sql, sees_params = _sees_clause(scope)
        links, params = entity_links(
            SQLITE,
            _table,
            [int(r[1]) for r in rows],
            sees_sql,
            sees_params,
            now,
            include_expired=include_expired,
        )
        raw = con.execute(
            f"SELECT {_COLS} {links} ORDER BY x.memory_rowid DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        ).fetchall()
        return self._hydrate(con, raw)
