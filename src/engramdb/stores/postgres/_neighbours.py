"""The PostgreSQL store's ``neighbours`` flow: memories stored next to given ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engramdb.core.filters import Node
from engramdb.stores.base import MemoryRow, Scope
from engramdb.stores.kernel.neighbours import interleave, same_conversation
from engramdb.stores.postgres._sql import _Q, Tx, _FlowBase


class _NeighbourFlows(_FlowBase):
    """Memories stored just before and after given ones, in their own conversation."""

    def neighbours(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        span: int,
        *,
        include_expired: bool = False,
    ) -> Tx[dict[str, list[tuple[int, MemoryRow]]]]:
        """See :meth:`engramdb.stores.base.Store.neighbours`."""
        ids = list(dict.fromkeys(memory_ids))
        if span <= 0 or not ids:
            return {}
        sql, params = self.where(scope, where, include_expired)
        mems = self.t("memories")
        anchors: list[Sequence[Any]] = yield _Q(
            f"SELECT m.id, m.created_at, m.rowid, m.user_id, m.agent_id, m.run_id "
            f"FROM {mems} m WHERE m.id = ANY(%s)",
            [ids],
        )
        out: dict[str, list[tuple[int, MemoryRow]]] = {}
        for memory_id, created_at, rowid, user_id, agent_id, run_id in anchors:
            same, same_params = same_conversation(user_id, agent_id, run_id, "%s")
            base = f"SELECT {self.cols} FROM {mems} m WHERE {sql} AND {same} AND "
            before = yield _Q(
                base + "(m.created_at, m.rowid) < (%s, %s) "
                "ORDER BY m.created_at DESC, m.rowid DESC LIMIT %s",
                [*params, *same_params, created_at, rowid, span],
            )
            after = yield _Q(
                base + "(m.created_at, m.rowid) > (%s, %s) ORDER BY m.created_at, m.rowid LIMIT %s",
                [*params, *same_params, created_at, rowid, span],
            )
            out[str(memory_id)] = interleave(self.rows(before), self.rows(after))
        return out
