"""The PostgreSQL change flows: update, delete (one or a scope), restore."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg.errors as pg_errors

from engramdb._time import utc_now
from engramdb.errors import ConflictError, DuplicateMemoryError, MemoryNotFoundError
from engramdb.stores.base import KEEP, EntityRef, HistoryEvent, Keep, MemoryRow, RestorePlan, Scope
from engramdb.stores.kernel.history import (
    delete_event,
    plan_from_history,
    restore_event,
    restore_target,
    update_event,
)
from engramdb.stores.postgres._sql import _Q, Tx, _dt, _iso, _json
from engramdb.stores.postgres._write_base import _WriteBase


class _ChangeFlows(_WriteBase):
    """Changing live memories: new content, soft deletion, a planned restore."""

    def set_content(
        self,
        row: MemoryRow,
        owner: str,
        *,
        text: str,
        hash: str,
        embedding: np.ndarray[Any, Any] | None,
        terms: str,
        entities: Sequence[EntityRef],
        metadata: dict[str, Any],
        expires_at: str | None,
        version: int,
        ts: datetime,
    ) -> Tx[None]:
        other = yield _Q(
            f"SELECT id FROM {self.t('memories')} WHERE hash = %s AND deleted_at IS NULL "
            f"AND id <> %s AND partition = (SELECT partition FROM {self.t('memories')} "
            "WHERE id = %s)",
            (hash, row.id, row.id),
            fetch="one",
        )
        if other is not None:
            raise DuplicateMemoryError(row.id, other[0])
        content = ", terms = %s, embedding = %s" if embedding is not None else ""
        params: list[Any] = [text, hash, _json(metadata), _dt(expires_at), ts, version]
        if embedding is not None:
            params += [terms, np.asarray(embedding, dtype=np.float32)]
        try:
            done = yield _Q(
                f"UPDATE {self.t('memories')} SET text = %s, hash = %s, metadata = %s::jsonb, "
                "expires_at = %s, updated_at = %s, version = %s, deleted_at = NULL, "
                "txid = pg_current_xact_id()"
                f"{content} WHERE id = %s RETURNING rowid",
                [*params, row.id],
                fetch="one",
            )
        except pg_errors.UniqueViolation as exc:
            # A concurrent writer stored the same text between the check and here.
            raise DuplicateMemoryError(row.id, None) from exc
        if embedding is not None:
            yield from self.link_entities(int(done[0]), owner, entities, replace=True)

    def update(
        self,
        memory_id: str,
        *,
        text: str,
        hash: str,
        embedding: np.ndarray[Any, np.dtype[np.float32]] | None,
        terms: str,
        entities: Sequence[EntityRef] = (),
        metadata: dict[str, Any],
        actor: str,
        reason: str | None = None,
        expires_at: str | Keep | None = KEEP,
    ) -> Tx[tuple[MemoryRow, HistoryEvent]]:
        """Change text, metadata and/or expiry of a live memory, writing an UPDATE event."""
        ts = datetime.fromisoformat(utc_now())
        owner = yield from self.owner_of(memory_id)
        yield self.owner_lock(owner)
        if embedding is not None:
            yield from self.guard_binding()
            yield from self.upsert_entities(owner, entities, ts)
        old = yield from self.locked_row(memory_id, live=True)
        expiry = old.expires_at if expires_at is KEEP else expires_at
        yield from self.set_content(
            old,
            owner,
            text=text,
            hash=hash,
            embedding=embedding,
            terms=terms,
            entities=entities,
            metadata=metadata,
            expires_at=expiry,
            version=old.version + 1,
            ts=ts,
        )
        event = update_event(old, text, metadata, actor, reason, _iso(ts) or "", expiry)
        yield from self.insert_history(event)
        new = yield from self.get(memory_id, include_deleted=False)
        assert new is not None
        return new, event

    def delete(
        self, memory_id: str, *, actor: str, reason: str | None = None
    ) -> Tx[tuple[MemoryRow, HistoryEvent]]:
        """Soft-delete one memory (hidden, restorable)."""
        ts = datetime.fromisoformat(utc_now())
        now = _iso(ts) or ""
        row = yield from self.locked_row(memory_id, live=True)
        yield _Q(
            f"UPDATE {self.t('memories')} SET deleted_at = %s, txid = pg_current_xact_id() "
            "WHERE id = %s",
            (ts, memory_id),
            fetch="none",
        )
        event = delete_event(row, actor, reason, now)
        yield from self.insert_history(event)
        row.deleted_at = now
        return row, event

    def delete_scope(self, scope: Scope, *, actor: str) -> Tx[list[HistoryEvent]]:
        """Soft-delete every live memory matching all ids of ``scope``."""
        ts = datetime.fromisoformat(utc_now())
        now = _iso(ts) or ""
        clause, params = self.scope_clause(scope)
        # Rows locked in (owner, hash) order, the order add() touches them in.
        rows = yield _Q(
            f"SELECT {self.cols} FROM {self.t('memories')} m WHERE m.deleted_at IS NULL AND "
            f"{clause} ORDER BY m.owner, m.hash FOR UPDATE",
            params,
        )
        if not rows:
            return []
        hydrated = self.rows(rows)
        yield _Q(
            f"UPDATE {self.t('memories')} SET deleted_at = %s, txid = pg_current_xact_id() "
            "WHERE rowid = ANY(%s)",
            (ts, [int(r[0]) for r in rows]),
            fetch="none",
        )
        events: list[HistoryEvent] = []
        for row in hydrated:
            event = delete_event(row, actor, "delete_all", now)
            yield from self.insert_history(event)
            events.append(event)
        return events

    def plan_restore(self, memory_id: str, version: int | None) -> Tx[RestorePlan]:
        """Work out what a restore would bring back (reads only)."""
        row = yield from self.get(memory_id, include_deleted=True)
        if row is None:
            raise MemoryNotFoundError(memory_id)
        target = restore_target(row, version)
        if isinstance(target, RestorePlan):
            return target
        return plan_from_history(row, target, (yield from self.history(memory_id)))

    def apply_restore(
        self,
        plan: RestorePlan,
        *,
        hash: str,
        embedding: np.ndarray[Any, np.dtype[np.float32]] | None,
        terms: str,
        entities: Sequence[EntityRef] = (),
        actor: str,
    ) -> Tx[tuple[MemoryRow, HistoryEvent]]:
        """Write a planned restore, if the memory has not changed since planning."""
        ts = datetime.fromisoformat(utc_now())
        owner = yield from self.owner_of(plan.memory_id)
        yield self.owner_lock(owner)
        if embedding is not None:
            yield from self.guard_binding()
            yield from self.upsert_entities(owner, entities, ts)
        old = yield from self.locked_row(plan.memory_id, live=False)
        if old.version != plan.expected_version or (old.deleted_at is not None) != plan.undelete:
            raise ConflictError(
                f"memory {plan.memory_id!r} changed while the restore was prepared; "
                "nothing was written, call restore() again"
            )
        new_version = old.version if plan.to_version is None else old.version + 1
        yield from self.set_content(
            old,
            owner,
            text=plan.text,
            hash=hash,
            embedding=embedding,
            terms=terms,
            entities=entities,
            metadata=plan.metadata,
            expires_at=plan.expires_at,
            version=new_version,
            ts=ts,
        )
        event = restore_event(plan, old, new_version, actor, _iso(ts) or "")
        yield from self.insert_history(event)
        new = yield from self.get(plan.memory_id, include_deleted=False)
        assert new is not None
        return new, event
