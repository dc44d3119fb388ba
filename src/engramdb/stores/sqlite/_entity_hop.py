"""The SQLite store's ``entity_hop`` read: memories sharing an entity with given ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engramdb.core.filters import Node
from engramdb.stores.base import MemoryRow, Scope
from engramdb.stores.kernel.entity_hop import EntityHop, assemble, small_entities, unique
from engramdb.stores.sqlite._base import _COLS, _chunks, _Store


class _EntityHop(_Store):
    """Memories linked to the entities of given memories (the entity second hop of search)."""

    def entity_hop(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        max_degree: int,
        *,
        include_expired: bool = False,
    ) -> EntityHop:
        """See :meth:`engramdb.stores.base.Store.entity_hop`."""
        ids = unique(memory_ids)
        if max_degree <= 0 or not ids:
            return {}
        sql, params = self._where(scope, where, include_expired)
        with self._read() as con:
            anchors: list[tuple[Any, ...]] = []
            for chunk in _chunks(ids, 400):
                anchors.extend(
                    con.execute(
                        "SELECT a.id, a.rowid, e.rowid, e.normalized FROM memories a "
                        "JOIN memory_entities x ON x.memory_rowid = a.rowid "
                        "JOIN entities e ON e.rowid = x.entity_rowid "
                        f"WHERE a.id IN ({','.join('?' * len(chunk))})",
                        chunk,
                    ).fetchall()
                )
            entities = sorted({int(a[2]) for a in anchors})
            degrees: dict[int, int] = {}
            for chunk in _chunks(entities, 400):
                # NOT INDEXED: the links drive, each memory read by rowid (as in candidates).
                degrees.update(
                    con.execute(
                        "SELECT x.entity_rowid, count(*) FROM memory_entities x "
                        "JOIN memories m NOT INDEXED ON m.rowid = x.memory_rowid "
                        f"WHERE x.entity_rowid IN ({','.join('?' * len(chunk))}) AND {sql} "
                        "GROUP BY x.entity_rowid",
                        [*chunk, *params],
                    ).fetchall()
                )
            links: list[tuple[int, int]] = []
            for chunk in _chunks(small_entities(degrees, max_degree), 400):
                links.extend(
                    con.execute(
                        "SELECT x.memory_rowid, x.entity_rowid FROM memory_entities x "
                        "JOIN memories m NOT INDEXED ON m.rowid = x.memory_rowid "
                        f"WHERE x.entity_rowid IN ({','.join('?' * len(chunk))}) AND {sql}",
                        [*chunk, *params],
                    ).fetchall()
                )
            wanted = sorted({m for m, _ in links})
            raw: list[tuple[Any, ...]] = []
            for chunk in _chunks(wanted, 400):
                raw.extend(
                    con.execute(
                        f"SELECT {_COLS} FROM memories m "
                        f"WHERE m.rowid IN ({','.join('?' * len(chunk))})",
                        chunk,
                    ).fetchall()
                )
            found = self._hydrate(con, raw)
        rows: dict[int, MemoryRow] = {int(r[0]): row for r, row in zip(raw, found, strict=True)}
        return assemble(anchors, degrees, links, rows, max_degree)
