"""The PostgreSQL store's entity reads: a scope's entities, and an entity's memories."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engramdb.core.filters import Node
from engramdb.stores.base import EntityCount, MemoryRow, Scope
from engramdb.stores.kernel.entities import (
    entities_query,
    entity_count,
    entity_links,
    entity_rows_query,
)
from engramdb.stores.kernel.sql import POSTGRES
from engramdb.stores.postgres._sql import _Q, Tx, _FlowBase, _now


class _EntityFlows(_FlowBase):
    """``Store.entities``, ``Store.entity_memories`` and ``Store.count_memories``."""

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
    ) -> Tx[tuple[list[EntityCount], int]]:
        """See :meth:`engramdb.stores.base.Store.entities`."""
        scope_sql, scope_params = self.scope_clause(scope)
        now = _now()

        def query(limit: int, offset: int) -> tuple[str, list[Any]]:
            return entities_query(
                POSTGRES,
                self.t,
                scope_sql,
                scope_params,
                now,
                include_expired=include_expired,
                entity_type=entity_type,
                contains=contains,
                limit=limit,
                offset=offset,
            )

        sql, params = query(limit, offset)
        rows = yield _Q(sql, params)
        if not rows and offset > 0:
            sql, params = query(1, 0)
            rows_total = yield _Q(sql, params)
            return [], int(rows_total[0][4]) if rows_total else 0
        found = [EntityCount(r[0], r[1], r[2], int(r[3])) for r in rows]
        if sample > 0 and found:
            by_key = yield from self._entity_rows(scope, [e.key for e in found])
            for entity in found:
                entity.sample = yield from self._newest(
                    scope, by_key.get(entity.key, []), now, sample, 0, include_expired
                )
        return found, int(rows[0][4]) if rows else 0

    def entity_memories(
        self,
        scope: Scope,
        key: str,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> Tx[tuple[EntityCount | None, list[MemoryRow]]]:
        """See :meth:`engramdb.stores.base.Store.entity_memories`."""
        now = _now()
        by_key = yield from self._entity_rows(scope, [key])
        rows = by_key.get(key, [])
        if not rows:
            return None, []
        links, params = self._links(scope, rows, now, include_expired)
        counted = yield _Q(f"SELECT count(*) {links}", params, fetch="one")
        entity = entity_count(key, rows, int(counted[0]))
        if entity is None:
            return None, []
        found = yield from self._newest(scope, rows, now, limit, offset, include_expired)
        return entity, found

    def count_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int | None = None,
        include_expired: bool = False,
    ) -> Tx[int]:
        """How many memories ``list_memories`` would list, counted up to ``limit``."""
        sql, params = self.where(scope, where, include_expired)
        row = yield _Q(
            f"SELECT count(*) FROM (SELECT 1 FROM {self.t('memories')} m WHERE {sql} LIMIT %s) c",
            [*params, None if limit is None else max(0, limit)],
            fetch="one",
        )
        return int(row[0])

    def _entity_rows(self, scope: Scope, keys: Sequence[str]) -> Tx[dict[str, list[Sequence[Any]]]]:
        sql, params = entity_rows_query(POSTGRES, self.t, scope, keys)
        rows = yield _Q(sql, params)
        out: dict[str, list[Sequence[Any]]] = {}
        for row in rows:
            out.setdefault(row[0], []).append(row)
        return out

    def _links(
        self, scope: Scope, rows: Sequence[Sequence[Any]], now: datetime, include_expired: bool
    ) -> tuple[str, list[Any]]:
        scope_sql, scope_params = self.scope_clause(scope)
        return entity_links(
            POSTGRES,
            self.t,
            [int(r[1]) for r in rows],
            scope_sql,
            scope_params,
            now,
            include_expired=include_expired,
        )

    def _newest(
        self,
        scope: Scope,
        rows: Sequence[Sequence[Any]],
        now: datetime,
        limit: int,
        offset: int,
        include_expired: bool,
    ) -> Tx[list[MemoryRow]]:
        """The newest stored of the scope's live memories linked to the entity rows ``rows``."""
        if not rows or limit <= 0:
            return []
        links, params = self._links(scope, rows, now, include_expired)
        raw = yield _Q(
            f"SELECT {self.cols} {links} ORDER BY x.memory_rowid DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return self.rows(raw)
