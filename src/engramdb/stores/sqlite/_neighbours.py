"""The SQLite store's ``neighbours`` read: memories stored next to given ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engramdb.core.filters import Node
from engramdb.stores.base import MemoryRow, Scope
from engramdb.stores.kernel.neighbours import interleave, same_conversation
from engramdb.stores.sqlite._base import _COLS, _chunks, _Store


class _Neighbours(_Store):
    """Memories stored just before and after given ones, in their own conversation."""

    def neighbours(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        span: int,
        *,
        include_expired: bool = False,
    ) -> dict[str, list[tuple[int, MemoryRow]]]:
        """See :meth:`engramdb.stores.base.Store.neighbours`."""
        ids = list(dict.fromkeys(memory_ids))
        if span <= 0 or not ids:
            return {}
        sql, params = self._where(scope, where, include_expired)
        raw: list[tuple[str, list[tuple[Any, ...]], list[tuple[Any, ...]]]] = []
        with self._read() as con:
            anchors: list[tuple[Any, ...]] = []
            for chunk in _chunks(ids, 400):
                anchors.extend(
                    con.execute(
                        "SELECT m.id, m.created_at, m.rowid, m.user_id, m.agent_id, m.run_id "
                        f"FROM memories m WHERE m.id IN ({','.join('?' * len(chunk))})",
                        chunk,
                    ).fetchall()
                )
            for memory_id, created_at, rowid, user_id, agent_id, run_id in anchors:
                same, same_params = same_conversation(user_id, agent_id, run_id, "?")
                base = f"SELECT {_COLS} FROM memories m WHERE {sql} AND {same} AND "
                before = con.execute(
                    base + "(m.created_at, m.rowid) < (?, ?) "
                    "ORDER BY m.created_at DESC, m.rowid DESC LIMIT ?",
                    [*params, *same_params, created_at, rowid, span],
                ).fetchall()
                after = con.execute(
                    base + "(m.created_at, m.rowid) > (?, ?) "
                    "ORDER BY m.created_at, m.rowid LIMIT ?",
                    [*params, *same_params, created_at, rowid, span],
                ).fetchall()
                raw.append((memory_id, before, after))
            rows = self._hydrate(con, [r for _, b, a in raw for r in (*b, *a)])
        out: dict[str, list[tuple[int, MemoryRow]]] = {}
        at = 0
        for memory_id, before, after in raw:
            mine_before = rows[at : at + len(before)]
            at += len(before)
            mine_after = rows[at : at + len(after)]
            at += len(after)
            out[memory_id] = interleave(mine_before, mine_after)
        return out
