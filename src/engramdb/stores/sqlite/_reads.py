"""The plain reads of the SQLite store: by id, lists, counts, messages, failures, export.

Search and the per-scope caches it reads are in ``_search.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from engramdb._time import utc_now
from engramdb.core.filters import Node
from engramdb.errors import StoreError
from engramdb.stores.base import MemoryRow, NewMessage, Scope, ScopeCounts
from engramdb.stores.kernel.rows import scope_counts
from engramdb.stores.kernel.sql import SQLITE, scope_counts_query, source_messages_query
from engramdb.stores.sqlite._base import _COLS, F32, _chunks, _scope_clause, _sees_clause, _Store


def _table(name: str) -> str:
    return name


_NEXT = "char(1114111)"
"""After a prefix: above every text that starts with it (U+10FFFF sorts last in UTF-8)."""
_USER_DAYS = (
    "SELECT * FROM (WITH RECURSIVE days(d) AS (SELECT substr((SELECT min(m.created_at) FROM "
    "memories m WHERE m.user_id = ?), 1, 10) UNION ALL SELECT substr((SELECT min(m.created_at) "
    f"FROM memories m WHERE m.user_id = ? AND m.created_at >= days.d || {_NEXT}), 1, 10) "
    "FROM days WHERE days.d IS NOT NULL) SELECT 1, d, NULL, NULL, (SELECT count(*) FROM "
    f"memories m WHERE m.user_id = ? AND m.created_at >= d AND m.created_at < d || {_NEXT}), "
    "0, 0 FROM days WHERE d IS NOT NULL)"
)
"""The memories of one user per day (tag 1 of ``scope_counts_query``) without a sort.

The index ``(user_id, created_at)`` walked a day at a time: the first memory
at or after the end of the day before, then the day's rows counted in the
index. Two seeks per day instead of a sort of every memory of the user."""


class _Reads(_Store):
    """Reads by id and by scope that go to the file: no cache is involved."""

    def failure(self, failure_id: int) -> tuple[Scope, list[tuple[int, NewMessage]], bool] | None:
        """A recorded extraction failure: its scope, its messages, and whether resolved."""
        with self._read() as con:
            row = con.execute(
                "SELECT user_id, agent_id, run_id, resolved_at FROM extraction_failures "
                "WHERE rowid = ?",
                (failure_id,),
            ).fetchone()
            if row is None:
                return None
            msgs = con.execute(
                "SELECT m.rowid, m.role, m.content, m.name, m.observed_at FROM messages m "
                "JOIN failure_messages f ON f.message_rowid = m.rowid "
                "WHERE f.failure_rowid = ? ORDER BY m.rowid",
                (failure_id,),
            ).fetchall()
        return (
            Scope(row[0], row[1], row[2]),
            [(r[0], NewMessage(r[1], r[2], r[3], r[4])) for r in msgs],
            row[3] is not None,
        )

    def failures(self, scope: Scope, *, include_resolved: bool = False) -> list[dict[str, Any]]:
        """Recorded extraction failures of a scope, newest first."""
        clause = " AND ".join(f"{k} = ?" for k, _ in scope.items())
        resolved = "" if include_resolved else " AND resolved_at IS NULL"
        with self._read() as con:
            rows = con.execute(
                "SELECT rowid, error, created_at, resolved_at, (SELECT count(*) FROM "
                "failure_messages f WHERE f.failure_rowid = e.rowid), reply "
                f"FROM extraction_failures e WHERE {clause}{resolved} ORDER BY rowid DESC",
                [v for _, v in scope.items()],
            ).fetchall()
        return [
            {
                "id": r[0],
                "error": r[1],
                "created_at": r[2],
                "resolved_at": r[3],
                "messages": r[4],
                "reply": r[5],
            }
            for r in rows
        ]

    def recent_messages(self, scope: Scope, limit: int) -> list[NewMessage]:
        """The last ``limit`` raw messages of a scope, oldest first."""
        clause = " AND ".join(f"{k} = ?" for k, _ in scope.items())
        with self._read() as con:
            rows = con.execute(
                f"SELECT role, content, name, observed_at, rowid FROM messages WHERE {clause} "
                "ORDER BY rowid DESC LIMIT ?",
                [*(v for _, v in scope.items()), limit],
            ).fetchall()
        return [NewMessage(r[0], r[1], r[2], r[3], rowid=r[4]) for r in reversed(rows)]

    def source_messages(self, memory_id: str, visible: Scope | None = None) -> list[NewMessage]:
        """The messages ``memory_id`` was made from that ``visible`` may read, oldest first."""
        sql, params = source_messages_query(SQLITE, _table, memory_id, visible)
        with self._read() as con:
            rows = con.execute(sql, params).fetchall()
        return [NewMessage(r[1], r[2], r[3], r[4], rowid=r[0]) for r in rows]

    def scope_counts(self, visible: Scope | None = None) -> ScopeCounts:
        """Memories ``visible`` sees (``None``: all), counted per state, id and day."""
        scope_sql, scope_params = _scope_clause(visible) if visible is not None else ("1", [])
        user = visible.user_id if visible is not None and len(visible.items()) == 1 else None
        sql, params = scope_counts_query(
            SQLITE,
            _table,
            scope_sql,
            scope_params,
            utc_now(),
            day="substr(m.created_at, 1, 10)",
            days=(_USER_DAYS, [user] * 3) if user is not None else None,
        )
        with self._read() as con:
            return scope_counts(con.execute(sql, params).fetchall())

    def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` a live memory that ``visible`` sees already has."""
        found: set[str] = set()
        clause, params = _sees_clause(visible)
        with self._read() as con:
            for chunk in _chunks(list(hashes), 400):
                found.update(
                    r[0]
                    for r in con.execute(
                        "SELECT DISTINCT m.hash FROM memories m WHERE m.deleted_at IS NULL "
                        f"AND m.hash IN ({','.join('?' * len(chunk))}) AND {clause}",
                        [*chunk, *params],
                    )
                )
        return found

    def list_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> list[MemoryRow]:
        """Live memories of a scope, newest first (ties by insertion order)."""
        sql, params = self._where(scope, where, include_expired)
        with self._read() as con:
            rows = con.execute(
                f"SELECT {_COLS} FROM memories m WHERE {sql} "
                "ORDER BY m.created_at DESC, m.rowid DESC LIMIT ? OFFSET ?",
                [*params, limit, offset],
            ).fetchall()
            return self._hydrate(con, rows)

    def count_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int | None = None,
        include_expired: bool = False,
    ) -> int:
        """How many memories :meth:`list_memories` would list, counted up to ``limit``."""
        sql, params = self._where(scope, where, include_expired)
        with self._read() as con:
            row = con.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {sql} LIMIT ?)",
                [*params, -1 if limit is None else max(0, limit)],
            ).fetchone()
        return int(row[0])

    def visible_ids(self, scope: Scope, memory_ids: Sequence[str]) -> set[str]:
        """Which of ``memory_ids`` are memories ``scope`` sees (deleted ones included)."""
        found: set[str] = set()
        clause, params = _sees_clause(scope)
        with self._read() as con:
            for chunk in _chunks(list(dict.fromkeys(memory_ids)), 400):
                found.update(
                    r[0]
                    for r in con.execute(
                        f"SELECT m.id FROM memories m WHERE m.id IN "
                        f"({','.join('?' * len(chunk))}) AND {clause}",
                        [*chunk, *params],
                    )
                )
        return found

    def ping(self, timeout: float | None = None) -> None:
        """Check that the file is there and reads (its ``meta`` table); StoreError if not."""
        if not self.path.exists():
            raise StoreError(f"the SQLite file {self.path} no longer exists")
        with self._read() as con:
            con.execute("SELECT count(*) FROM meta").fetchone()

    def count(self) -> int:
        """Number of memory rows (deleted ones included)."""
        with self._read() as con:
            return int(con.execute("SELECT count(*) FROM memories").fetchone()[0])

    def export_rows(self) -> Iterator[dict[str, Any]]:
        """Every memory (deleted ones too) with its vector, sessions, links, history."""
        with self._read() as con:
            raw = con.execute(f"SELECT {_COLS} FROM memories m ORDER BY m.rowid").fetchall()
            for chunk in _chunks(raw, 500):
                rows = self._hydrate(con, chunk)
                vecs = dict(
                    con.execute(
                        "SELECT m.id, v.embedding FROM memory_vectors v JOIN memories m ON "
                        f"m.rowid = v.memory_rowid WHERE v.memory_rowid IN "
                        f"({','.join('?' * len(chunk))})",
                        [r[0] for r in chunk],
                    ).fetchall()
                )
                terms = dict(
                    con.execute(
                        f"SELECT rowid, terms FROM memory_fts WHERE rowid IN "
                        f"({','.join('?' * len(chunk))})",
                        [r[0] for r in chunk],
                    ).fetchall()
                )
                for raw_row, row in zip(chunk, rows, strict=True):
                    yield {
                        "row": row,
                        "embedding": np.frombuffer(vecs[row.id], dtype=F32),
                        "terms": terms.get(raw_row[0], ""),
                        "history": self._history(con, row.id),
                    }
