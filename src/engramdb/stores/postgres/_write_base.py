"""What the PostgreSQL write flows share: messages, entities, history, locked rows, the epoch.

Each statement here is a step of a write flow (``_adds``, ``_changes``, ``_purge``,
``_bulk``), never a transaction of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engramdb.errors import MemoryNotFoundError
from engramdb.stores.base import EntityRef, HistoryEvent, MemoryRow, NewMessage, Scope
from engramdb.stores.postgres._sql import _Q, Tx, _dt, _FlowBase, _json


class _WriteBase(_FlowBase):
    """The steps every write flow is made of (one transaction is one flow)."""

    def insert_messages(
        self, messages: Sequence[NewMessage], scope: Scope, now: datetime
    ) -> Tx[list[int]]:
        if not messages:
            return []
        rows = yield _Q(
            f"INSERT INTO {self.t('messages')} (user_id, agent_id, run_id, role, name, content, "
            "observed_at, created_at) SELECT %s, %s, %s, u.role, u.name, u.content, u.observed, %s "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::timestamptz[]) "
            "WITH ORDINALITY AS u(role, name, content, observed, n) ORDER BY u.n RETURNING rowid",
            (
                scope.user_id,
                scope.agent_id,
                scope.run_id,
                now,
                [m.role for m in messages],
                [m.name for m in messages],
                [m.content for m in messages],
                [_dt(m.observed_at) for m in messages],
            ),
        )
        # Identity values are drawn in insertion order within one statement.
        return sorted(int(r[0]) for r in rows)

    def upsert_entities(self, owner: str, entities: Sequence[EntityRef], now: datetime) -> Tx[None]:
        first: dict[str, tuple[str, str]] = {}
        for name, normalized, kind in entities:
            first.setdefault(normalized, (name, kind))
        if not first:
            return
        keys = sorted(first)
        # Inserted in key order: two writers never wait on each other's entities in a cycle.
        yield _Q(
            f"INSERT INTO {self.t('entities')} (owner, name, normalized, type, created_at) "
            "SELECT %s, u.name, u.normalized, u.type, %s FROM unnest(%s::text[], %s::text[], "
            "%s::text[]) WITH ORDINALITY AS u(normalized, name, type, n) ORDER BY u.n "
            "ON CONFLICT (owner, normalized) DO NOTHING",
            (
                owner,
                now,
                keys,
                [first[k][0] for k in keys],
                [first[k][1] for k in keys],
            ),
            fetch="none",
        )

    def link_entities(
        self, rowid: int, owner: str, entities: Sequence[EntityRef], *, replace: bool
    ) -> Tx[None]:
        if replace:
            yield _Q(
                f"DELETE FROM {self.t('memory_entities')} WHERE memory_rowid = %s",
                (rowid,),
                fetch="none",
            )
        names = sorted({e[1] for e in entities})
        if names:
            yield _Q(
                f"INSERT INTO {self.t('memory_entities')} (memory_rowid, entity_rowid) "
                f"SELECT %s, rowid FROM {self.t('entities')} WHERE owner = %s AND "
                "normalized = ANY(%s) ORDER BY rowid ON CONFLICT DO NOTHING",
                (rowid, owner, names),
                fetch="none",
            )

    def insert_history(self, event: HistoryEvent) -> Tx[None]:
        """Append one event (its ``id`` is set)."""
        yield from self.insert_history_many([event])

    def insert_history_many(self, events: Sequence[HistoryEvent]) -> Tx[None]:
        """Append events in one statement (their ``id`` is set, in order)."""
        got = yield _Q(
            f"INSERT INTO {self.t('history')} (memory_id, event, version, old_memory, "
            "new_memory, old_metadata, new_metadata, actor, reason, created_at, old_expires_at, "
            "new_expires_at) "
            "SELECT u.memory_id, u.event, u.version, u.old_memory, u.new_memory, "
            "u.old_metadata::jsonb, u.new_metadata::jsonb, u.actor, u.reason, u.created_at, "
            "u.old_expires_at, u.new_expires_at "
            "FROM unnest(%s::text[], %s::text[], %s::int[], %s::text[], %s::text[], %s::text[], "
            "%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[], "
            "%s::timestamptz[]) WITH ORDINALITY AS "
            "u(memory_id, event, version, old_memory, new_memory, old_metadata, new_metadata, "
            "actor, reason, created_at, old_expires_at, new_expires_at, n) ORDER BY u.n "
            "RETURNING rowid",
            (
                [e.memory_id for e in events],
                [e.event for e in events],
                [e.version for e in events],
                [e.old_memory for e in events],
                [e.new_memory for e in events],
                [_json(e.old_metadata) for e in events],
                [_json(e.new_metadata) for e in events],
                [e.actor for e in events],
                [e.reason for e in events],
                [_dt(e.created_at) for e in events],
                [_dt(e.old_expires_at) for e in events],
                [_dt(e.new_expires_at) for e in events],
            ),
        )
        for event, rowid in zip(events, sorted(int(r[0]) for r in got), strict=True):
            event.id = rowid

    def owner_of(self, memory_id: str) -> Tx[str]:
        # A memory's owner never changes, so reading it before any lock is safe.
        row = yield _Q(
            f"SELECT owner FROM {self.t('memories')} WHERE id = %s", (memory_id,), fetch="one"
        )
        if row is None:
            raise MemoryNotFoundError(memory_id)
        return str(row[0])

    def locked_row(self, memory_id: str, *, live: bool) -> Tx[MemoryRow]:
        extra = " AND m.deleted_at IS NULL" if live else ""
        row = yield _Q(
            f"SELECT {self.cols} FROM {self.t('memories')} m WHERE m.id = %s{extra} FOR UPDATE",
            (memory_id,),
            fetch="one",
        )
        if row is None:
            raise MemoryNotFoundError(memory_id)
        return self.rows([row])[0]

    def bump_epoch(self) -> _Q:
        return _Q(
            f"UPDATE {self.t('meta')} SET value = (value::bigint + 1)::text WHERE key = 'epoch'",
            fetch="none",
        )
