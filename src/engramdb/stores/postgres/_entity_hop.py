"""The PostgreSQL store's ``entity_hop`` flow: memories sharing an entity with given ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engramdb.core.filters import Node
from engramdb.stores.base import MemoryRow, Scope
from engramdb.stores.kernel.entity_hop import EntityHop, assemble, small_entities, unique
from engramdb.stores.postgres._sql import _Q, Tx, _FlowBase


class _EntityHopFlows(_FlowBase):
    """Memories linked to the entities of given memories (the entity second hop of search)."""

    def entity_hop(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        max_degree: int,
        *,
        include_expired: bool = False,
    ) -> Tx[EntityHop]:
        """See :meth:`engramdb.stores.base.Store.entity_hop`."""
        ids = unique(memory_ids)
        if max_degree <= 0 or not ids:
            return {}
        sql, params = self.where(scope, where, include_expired)
        mems, me = self.t("memories"), self.t("memory_entities")
        anchors: list[Sequence[Any]] = yield _Q(
            f"SELECT a.id, a.rowid, e.rowid, e.normalized FROM {mems} a "
            f"JOIN {me} x ON x.memory_rowid = a.rowid "
            f"JOIN {self.t('entities')} e ON e.rowid = x.entity_rowid WHERE a.id = ANY(%s)",
            [ids],
        )
        entities = sorted({int(a[2]) for a in anchors})
        if not entities:
            return {}
        counted: list[Sequence[Any]] = yield _Q(
            f"SELECT x.entity_rowid, count(*) FROM {me} x JOIN {mems} m "
            f"ON m.rowid = x.memory_rowid WHERE x.entity_rowid = ANY(%s) AND {sql} "
            "GROUP BY x.entity_rowid",
            [entities, *params],
        )
        degrees = {int(e): int(n) for e, n in counted}
        small = small_entities(degrees, max_degree)
        links: list[tuple[int, int]] = []
        rows: dict[int, MemoryRow] = {}
        if small:
            raw: list[Sequence[Any]] = yield _Q(
                f"SELECT x.memory_rowid, x.entity_rowid FROM {me} x JOIN {mems} m "
                f"ON m.rowid = x.memory_rowid WHERE x.entity_rowid = ANY(%s) AND {sql}",
                [small, *params],
            )
            links = [(int(m), int(e)) for m, e in raw]
            wanted = sorted({m for m, _ in links})
            found: list[Sequence[Any]] = yield _Q(
                f"SELECT {self.cols} FROM {mems} m WHERE m.rowid = ANY(%s)", [wanted]
            )
            rows = {int(r[0]): row for r, row in zip(found, self.rows(found), strict=True)}
        return assemble(
            [(str(a[0]), int(a[1]), int(a[2]), str(a[3])) for a in anchors],
            degrees,
            links,
            rows,
            max_degree,
        )
