"""The write flows of the PostgreSQL store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import psycopg.errors as pg_errors

from engramdb._time import utc_now
from engramdb.errors import (
    ConflictError,
    DuplicateMemoryError,
    MemoryNotFoundError,
)
from engramdb.stores.base import (
    KEEP,
    AddOutcome,
    EmbeddingSource,
    EntityRef,
    HistoryEvent,
    Keep,
    MemoryRow,
    NewMemory,
    NewMessage,
    Rebinding,
    RestorePlan,
    Scope,
    visible_scope,
)
from engramdb.stores.kernel.dedup import (
    first_occurrences,
    in_input_order,
    repeated,
    sessions_to_attach,
    stored,
)
from engramdb.stores.kernel.erasure import (
    DERIVED_ROWS,
    ErasureFacts,
    ErasurePlan,
    NeighbourFacts,
    plan_erasure,
)
from engramdb.stores.kernel.history import (
    add_event,
    attach_event,
    delete_event,
    plan_from_history,
    restore_event,
    restore_target,
    update_event,
)
from engramdb.stores.kernel.imports import ImportedMemory, clash_error, imported, repeat_error
from engramdb.stores.kernel.rebind import checked_vectors, moved_error, stale_keys
from engramdb.stores.postgres._sql import (
    _EMBEDDER_KEYS,
    _Q,
    WRITE_RETRIES,
    Tx,
    _chunks,
    _dt,
    _FlowBase,
    _iso,
    _json,
    _now,
    _Snapshot,
    _vector_text,
)

T = TypeVar("T")

_REBIND_BATCH = 1000
"""Vectors per UPDATE statement of a rebinding (all in its one transaction)."""


class _WriteFlows(_FlowBase):
    """The write transactions: one flow, one transaction."""

    # -- writes ------------------------------------------------------------------------------

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

    def add(
        self,
        memories: Sequence[NewMemory],
        messages: Sequence[NewMessage],
        scope: Scope,
        actor: str,
        *,
        source_rowids: Sequence[int] = (),
        resolve_failure: int | None = None,
        visible: Scope | None = None,
    ) -> Tx[list[AddOutcome]]:
        """One add in a fixed number of statements, whatever the batch size.

        Locks are taken in one order by every writer: the owner's advisory lock
        (shared), entities by key, new memories by hash (one INSERT … ON
        CONFLICT), then existing memories by hash (``FOR NO KEY UPDATE``) to
        attach sessions. Row ids are drawn in input order, so ties (same
        ``created_at``, same BM25 score) break exactly as on SQLite.
        """
        now = utc_now()
        ts = datetime.fromisoformat(now)
        owner = scope.owner
        sees = visible or visible_scope(scope)
        partition = sees.partition
        sees_sql, sees_params = self.scope_clause(sees)
        yield self.owner_lock(owner)
        if memories:
            yield from self.guard_binding()  # coherence: no vectors of another model
        msg_rowids = (yield from self.insert_messages(messages, scope, ts)) + list(source_rowids)
        if resolve_failure is not None:
            yield _Q(
                f"UPDATE {self.t('extraction_failures')} SET resolved_at = %s WHERE rowid = %s",
                (ts, resolve_failure),
                fetch="none",
            )
        if not memories:
            return []
        first = first_occurrences(memories)
        rows = yield _Q(
            f"SELECT DISTINCT m.hash FROM {self.t('memories')} m WHERE m.hash = ANY(%s) "
            f"AND m.deleted_at IS NULL AND {sees_sql}",
            (sorted(first), *sees_params),
        )
        known = {r[0] for r in rows}
        fresh = [i for i in first.values() if memories[i].hash not in known]
        for i in fresh:
            if memories[i].embedding.size == 0:
                # The caller skipped embedding a text it saw stored a moment ago; it
                # was deleted since. Roll back; the caller retries with vectors.
                raise ConflictError(f"memory text {memories[i].text[:40]!r} changed concurrently")
        yield from self.upsert_entities(owner, [e for i in fresh for e in memories[i].entities], ts)
        inserted: dict[str, int] = {}
        if fresh:
            inserted = yield from self.insert_memories(
                [memories[i] for i in sorted(fresh)], scope, partition, ts
            )
        outcomes: dict[str, AddOutcome] = {}
        added = [memories[i] for i in sorted(fresh) if memories[i].hash in inserted]
        for mem in added:
            outcomes[mem.hash] = stored(mem)
        # Texts already stored (or stored by another writer a moment ago): attach.
        for _ in range(WRITE_RETRIES):
            pending = sorted(h for h in first if h not in outcomes)
            if not pending:
                break
            # Every live memory of these texts the caller sees, locked in hash order;
            # per text the caller's own partition wins, then the oldest.
            existing = yield _Q(
                f"SELECT m.rowid, m.id, m.text, m.agent_id, m.run_id, m.version, m.hash, "
                f"m.partition = %s FROM {self.t('memories')} m WHERE m.hash = ANY(%s) "
                f"AND m.deleted_at IS NULL AND {sees_sql} ORDER BY m.hash, m.rowid "
                "FOR NO KEY UPDATE OF m",
                (partition, pending, *sees_params),
            )
            chosen: dict[str, tuple[Any, ...]] = {}
            for row in existing:
                if row[6] not in chosen or (row[7] and not chosen[row[6]][7]):
                    chosen[row[6]] = row
            for hash_, row in sorted(chosen.items()):
                outcomes[hash_] = yield from self.attach(row[:6], scope, actor, ts)
            missing = [memories[first[h]] for h in pending if h not in outcomes]
            if not missing:
                break
            # Deleted between our look and our lock: store them after all.
            for mem in missing:
                if mem.embedding.size == 0:
                    raise ConflictError(f"memory text {mem.text[:40]!r} changed concurrently")
            yield from self.upsert_entities(owner, [e for m in missing for e in m.entities], ts)
            more = yield from self.insert_memories(missing, scope, partition, ts)
            inserted.update(more)
            for mem in missing:
                if mem.hash in more:
                    outcomes[mem.hash] = stored(mem)
                    added.append(mem)
        else:
            raise ConflictError("the memories kept changing concurrently; nothing was written")
        if added:
            yield from self.link_new(added, inserted, owner, ts, msg_rowids, actor, outcomes)
        yield from self.link_repeats(memories, first, outcomes, msg_rowids)
        return in_input_order(memories, first, outcomes)

    def insert_memories(
        self, memories: Sequence[NewMemory], scope: Scope, partition: str, ts: datetime
    ) -> Tx[dict[str, int]]:
        """Insert new memories (in input order of row ids, hash order of locks): hash -> rowid."""
        ids = yield _Q(
            "SELECT nextval(pg_get_serial_sequence(%s, 'rowid')) FROM generate_series(1, %s)",
            (self.t("memories"), len(memories)),
        )
        rowids = sorted(int(r[0]) for r in ids)
        order = sorted(range(len(memories)), key=lambda i: memories[i].hash)
        cols = (
            "rowid, id, text, hash, actor_id, role, attributed_to, memory_type, metadata, "
            "observed_at, expires_at, terms, embedding"
        )
        arrays: list[list[Any]] = [
            [rowids[i] for i in order],
            [memories[i].id for i in order],
            [memories[i].text for i in order],
            [memories[i].hash for i in order],
            [memories[i].actor_id for i in order],
            [memories[i].role for i in order],
            [memories[i].attributed_to for i in order],
            [memories[i].memory_type for i in order],
            [_json(memories[i].metadata) for i in order],
            [_dt(memories[i].observed_at) for i in order],
            [_dt(memories[i].expires_at) for i in order],
            [memories[i].terms for i in order],
            [_vector_text(memories[i].embedding) for i in order],
        ]
        types = (
            "bigint[], text[], text[], text[], text[], text[], text[], text[], text[], "
            "timestamptz[], timestamptz[], text[], text[]"
        )
        placeholders = ", ".join(f"%s::{t.strip()}" for t in types.split(","))
        got = yield _Q(
            f"INSERT INTO {self.t('memories')} (rowid, id, text, hash, owner, partition, user_id, "
            "agent_id, run_id, actor_id, role, attributed_to, memory_type, metadata, created_at, "
            "updated_at, observed_at, expires_at, version, terms, embedding) "
            "SELECT u.rowid, u.id, u.text, u.hash, %s, %s, %s, %s, %s, u.actor_id, u.role, "
            "u.attributed_to, u.memory_type, u.metadata::jsonb, %s, %s, u.observed_at, "
            "u.expires_at, 1, u.terms, u.embedding::vector "
            f"FROM unnest({placeholders}) WITH ORDINALITY AS u({cols}, n) ORDER BY u.n "
            "ON CONFLICT (partition, hash) WHERE deleted_at IS NULL DO NOTHING "
            "RETURNING hash, rowid",
            [scope.owner, partition, scope.user_id, scope.agent_id, scope.run_id, ts, ts, *arrays],
        )
        return {r[0]: int(r[1]) for r in got}

    def link_new(
        self,
        added: Sequence[NewMemory],
        rowids: dict[str, int],
        owner: str,
        ts: datetime,
        msg_rowids: list[int],
        actor: str,
        outcomes: dict[str, AddOutcome],
    ) -> Tx[None]:
        """Entities, sources, links and ADD events of newly inserted memories, in bulk."""
        pairs = sorted({(rowids[m.hash], e[1]) for m in added for e in m.entities})
        if pairs:
            yield _Q(
                f"INSERT INTO {self.t('memory_entities')} (memory_rowid, entity_rowid) "
                f"SELECT u.m, e.rowid FROM unnest(%s::bigint[], %s::text[]) AS u(m, n) "
                f"JOIN {self.t('entities')} e ON e.owner = %s AND e.normalized = u.n "
                "ORDER BY 1, 2 ON CONFLICT DO NOTHING",
                ([p[0] for p in pairs], [p[1] for p in pairs], owner),
                fetch="none",
            )
        sources = sorted(
            {
                (rowids[m.hash], msg_rowids[i])
                for m in added
                for i in m.source_messages
                if i < len(msg_rowids)
            }
        )
        if sources:
            yield _Q(
                f"INSERT INTO {self.t('memory_sources')} (memory_rowid, message_rowid) "
                "SELECT * FROM unnest(%s::bigint[], %s::bigint[]) ON CONFLICT DO NOTHING",
                ([p[0] for p in sources], [p[1] for p in sources]),
                fetch="none",
            )
        yield from self.insert_context(added, rowids, msg_rowids)
        links = [
            (rowids[m.hash], link, m.link_kinds.get(link, "related"))
            for m in added
            for link in m.links
        ]
        if links:
            yield _Q(
                f"INSERT INTO {self.t('memory_links')} (from_rowid, to_rowid, kind, created_at) "
                f"SELECT u.f, m.rowid, u.k, %s FROM unnest(%s::bigint[], %s::text[], "
                f"%s::text[]) AS u(f, i, k) JOIN {self.t('memories')} m ON m.id = u.i "
                "AND m.owner = %s ORDER BY 1, 2 ON CONFLICT DO NOTHING",
                (ts, [p[0] for p in links], [p[1] for p in links], [p[2] for p in links], owner),
                fetch="none",
            )
        now = _iso(ts) or ""
        events = [add_event(m, actor, now) for m in sorted(added, key=lambda m: rowids[m.hash])]
        yield from self.insert_history_many(events)
        for m, event in zip(sorted(added, key=lambda m: rowids[m.hash]), events, strict=True):
            outcomes[m.hash] = stored(m, event)

    def link_repeats(
        self,
        memories: Sequence[NewMemory],
        first: dict[str, int],
        outcomes: dict[str, AddOutcome],
        msg_rowids: list[int],
    ) -> Tx[None]:
        """A repeat's messages are sources of the memory it repeats.

        They said the same thing: purging that memory must erase them too.
        """
        pairs = sorted(
            {
                (outcomes[m.hash].id, msg_rowids[j])
                for i, m in enumerate(memories)
                if outcomes[m.hash].event == "NONE" or i != first[m.hash]
                for j in m.source_messages
                if j < len(msg_rowids)
            }
        )
        if pairs:
            yield _Q(
                f"INSERT INTO {self.t('memory_sources')} (memory_rowid, message_rowid) "
                f"SELECT m.rowid, u.msg FROM unnest(%s::text[], %s::bigint[]) AS u(id, msg) "
                f"JOIN {self.t('memories')} m ON m.id = u.id ORDER BY 1, 2 ON CONFLICT DO NOTHING",
                ([p[0] for p in pairs], [p[1] for p in pairs]),
                fetch="none",
            )

    def insert_context(
        self, added: Sequence[NewMemory], rowids: dict[str, int], msg_rowids: list[int]
    ) -> Tx[None]:
        """Record the messages whose words new memories' terms borrow (erasure provenance)."""
        borrowed = sorted({r for m in added for r in m.context_rowids})
        if borrowed:
            # KEY SHARE: a purge cannot delete them until this add commits, and
            # one purged since the caller read it means its terms hold erased words.
            found = yield _Q(
                f"SELECT rowid FROM {self.t('messages')} WHERE rowid = ANY(%s) "
                "ORDER BY rowid FOR KEY SHARE",
                (borrowed,),
            )
            if len(found) != len(borrowed):
                raise ConflictError("a context message was purged meanwhile; read it again")
        pairs = {
            (rowids[m.hash], msg_rowids[i])
            for m in added
            for i in m.context_messages
            if i < len(msg_rowids)
        }
        pairs.update((rowids[m.hash], r) for m in added for r in m.context_rowids)
        if pairs:
            ordered = sorted(pairs)
            yield _Q(
                f"INSERT INTO {self.t('memory_context')} (memory_rowid, message_rowid) "
                "SELECT * FROM unnest(%s::bigint[], %s::bigint[]) ON CONFLICT DO NOTHING",
                ([p[0] for p in ordered], [p[1] for p in ordered]),
                fetch="none",
            )

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

    def attach(
        self, existing: tuple[Any, ...], scope: Scope, actor: str, ts: datetime
    ) -> Tx[AddOutcome]:
        """A repeat of a live memory (locked by the caller): attach the new session ids."""
        rowid, memory_id, text, agent_id, run_id, version = existing
        attached: list[tuple[str, str]] = []
        for kind, value in sessions_to_attach(scope, agent_id, run_id):
            new = yield _Q(
                f"INSERT INTO {self.t('memory_scope')} (memory_rowid, kind, value, created_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (rowid, kind, value, ts),
                fetch="one",
            )
            if new is not None:
                attached.append((kind, value))
        if not attached:
            return repeated(memory_id, text)
        yield _Q(
            f"UPDATE {self.t('memories')} SET txid = pg_current_xact_id() WHERE rowid = %s",
            (rowid,),
            fetch="none",
        )
        event = attach_event(memory_id, text, int(version), attached, actor, _iso(ts) or "")
        yield from self.insert_history(event)
        return repeated(memory_id, text, event)

    def attach_session(self, memory_id: str, scope: Scope, actor: str) -> Tx[HistoryEvent | None]:
        """Attach the scope's run/agent to a live memory; None if nothing was new."""
        ts = datetime.fromisoformat(utc_now())
        row = yield _Q(
            f"SELECT rowid, id, text, agent_id, run_id, version FROM {self.t('memories')} "
            "WHERE id = %s AND deleted_at IS NULL FOR NO KEY UPDATE",
            (memory_id,),
            fetch="one",
        )
        if row is None:
            raise MemoryNotFoundError(memory_id)
        outcome = yield from self.attach(row, scope, actor, ts)
        return outcome.history

    def keep_failed(
        self, scope: Scope, messages: Sequence[NewMessage], error: str, reply: str | None
    ) -> Tx[int]:
        """Store the messages of a failed extraction and the failure; returns its id."""
        ts = datetime.fromisoformat(utc_now())
        rowids = yield from self.insert_messages(messages, scope, ts)
        row = yield _Q(
            f"INSERT INTO {self.t('extraction_failures')} (user_id, agent_id, run_id, error, "
            "reply, created_at) VALUES (%s, %s, %s, %s, %s, %s) RETURNING rowid",
            (scope.user_id, scope.agent_id, scope.run_id, error, reply, ts),
            fetch="one",
        )
        failure = int(row[0])
        if rowids:
            yield _Q(
                f"INSERT INTO {self.t('failure_messages')} (failure_rowid, message_rowid) "
                "SELECT %s, unnest(%s::bigint[])",
                (failure, rowids),
                fetch="none",
            )
        return failure

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

    def erasure_facts(self, memory_id: str | None, scope: Scope | None) -> Tx[ErasureFacts]:
        """The provenance rows around what a purge names (see ErasureFacts)."""
        scope_messages: list[int] = []
        scope_failures: list[int] = []
        if memory_id is not None:
            memories = yield _Q(
                f"SELECT rowid, id, owner FROM {self.t('memories')} WHERE id = %s", (memory_id,)
            )
            if not memories:
                raise MemoryNotFoundError(memory_id)
        else:
            assert scope is not None
            clause, params = self.scope_clause(scope)
            memories = yield _Q(
                f"SELECT m.rowid, m.id, m.owner FROM {self.t('memories')} m WHERE {clause}",
                params,
            )
            exact = " AND ".join(f"{k} = %s" for k, _ in scope.items())
            values = [v for _, v in scope.items()]
            found = yield _Q(f"SELECT rowid FROM {self.t('messages')} WHERE {exact}", values)
            scope_messages = [int(r[0]) for r in found]
            found = yield _Q(
                f"SELECT rowid FROM {self.t('extraction_failures')} WHERE {exact}", values
            )
            scope_failures = [int(r[0]) for r in found]
        targets = sorted({int(r[0]) for r in memories})
        sources = [
            (int(a), int(b))
            for a, b in (
                yield _Q(
                    f"SELECT memory_rowid, message_rowid FROM {self.t('memory_sources')} "
                    "WHERE memory_rowid = ANY(%s)",
                    (targets,),
                )
            )
        ]
        direct = sorted({m for _, m in sources} | set(scope_messages))
        fm = self.t("failure_messages")
        kept = [
            (int(a), int(b))
            for a, b in (
                yield _Q(
                    f"SELECT failure_rowid, message_rowid FROM {fm} WHERE failure_rowid IN "
                    f"(SELECT failure_rowid FROM {fm} WHERE message_rowid = ANY(%s)) "
                    "OR failure_rowid = ANY(%s)",
                    (direct, scope_failures),
                )
            )
        ]
        kept_messages = sorted({m for _, m in kept})
        if kept_messages:
            sources += [
                (int(a), int(b))
                for a, b in (
                    yield _Q(
                        f"SELECT memory_rowid, message_rowid FROM {self.t('memory_sources')} "
                        "WHERE message_rowid = ANY(%s)",
                        (kept_messages,),
                    )
                )
            ]
        candidates = sorted(set(direct) | set(kept_messages))
        mc = self.t("memory_context")
        context = yield _Q(
            f"SELECT c.memory_rowid, c.message_rowid, g.content FROM {mc} c "
            f"JOIN {self.t('messages')} g ON g.rowid = c.message_rowid WHERE c.memory_rowid IN "
            f"(SELECT memory_rowid FROM {mc} WHERE message_rowid = ANY(%s)) "
            "ORDER BY c.memory_rowid, c.message_rowid",
            (candidates,),
        )
        neighbours: list[NeighbourFacts] = []
        borrowers = sorted({int(r[0]) for r in context})
        if borrowers:
            found = yield _Q(
                f"SELECT rowid, text, terms FROM {self.t('memories')} WHERE rowid = ANY(%s) "
                "ORDER BY rowid",
                (borrowers,),
            )
            neighbours = [
                NeighbourFacts(
                    int(r[0]),
                    r[1],
                    r[2] or "",
                    [(int(m), c) for n, m, c in context if int(n) == int(r[0])],
                )
                for r in found
            ]
        me = self.t("memory_entities")
        links = yield _Q(
            f"SELECT entity_rowid, memory_rowid FROM {me} WHERE entity_rowid IN "
            f"(SELECT entity_rowid FROM {me} WHERE memory_rowid = ANY(%s))",
            (targets,),
        )
        orphans = yield _Q(
            f"SELECT e.rowid FROM {self.t('entities')} e WHERE e.owner = ANY(%s) AND NOT EXISTS "
            f"(SELECT 1 FROM {me} x WHERE x.entity_rowid = e.rowid)",
            (sorted({str(r[2]) for r in memories}),),
        )
        return ErasureFacts(
            memories=[(int(r[0]), str(r[1]), str(r[2])) for r in memories],
            scope_messages=scope_messages,
            scope_failures=scope_failures,
            sources=sources,
            failure_messages=kept,
            neighbours=neighbours,
            entity_links=[(int(a), int(b)) for a, b in links],
            orphan_entities=[int(r[0]) for r in orphans],
        )

    def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> Tx[ErasurePlan]:
        """What a purge of one memory or of a scope erases (stores/_erasure.py)."""
        facts = yield from self.erasure_facts(memory_id, scope)
        return plan_erasure(facts, memory_id=memory_id, scope=scope)

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> Tx[int]:
        """Execute a plan: owners locked (exclusive), facts read again, rows erased."""
        for owner in plan.owners:
            yield self.owner_lock(owner, exclusive=True)
        facts = yield from self.erasure_facts(plan.memory_id, plan.scope)
        if plan_erasure(facts, memory_id=plan.memory_id, scope=plan.scope) != plan:
            raise ConflictError("what the purge covers changed since it was planned")
        if not plan.touched:
            return 0

        def delete(table: str, column: str, values: Sequence[Any]) -> Iterator[_Q]:
            """Soft-delete one memory (hidden, restorable)."""
            if values:
                yield _Q(
                    f"DELETE FROM {self.t(table)} WHERE {column} = ANY(%s)",
                    (list(values),),
                    fetch="none",
                )

        yield from delete("history", "memory_id", plan.memory_ids)
        for table, column in (*DERIVED_ROWS, ("memories", "rowid")):
            yield from delete(table, column, plan.memory_rowids)
        for table in ("memory_sources", "memory_context", "failure_messages"):
            yield from delete(table, "message_rowid", plan.messages)
        yield from delete("failure_messages", "failure_rowid", plan.failures)
        yield from delete("extraction_failures", "rowid", plan.failures)
        yield from delete("messages", "rowid", plan.messages)
        if terms:
            planned = {r.rowid: r.terms for r in plan.reindex}
            ordered = sorted(terms)
            # Only where the terms are still the planned ones: a memory updated
            # meanwhile got terms of its new text alone, which hold no erased words.
            # The txid stamp makes every keyword cache re-read the row.
            yield _Q(
                f"UPDATE {self.t('memories')} m SET terms = u.terms, txid = pg_current_xact_id() "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(rowid, terms, old) "
                "WHERE m.rowid = u.rowid AND m.terms = u.old",
                (ordered, [terms[r] for r in ordered], [planned[r] for r in ordered]),
                fetch="none",
            )
        yield from delete("memory_entities", "entity_rowid", plan.entities)
        yield from delete("entities", "rowid", plan.entities)
        # Rows that vanish cannot be seen by a catch-up by txid: every process
        # drops its caches when the epoch moves.
        yield self.bump_epoch()
        return len(plan.memory_rowids)

    def vacuum_statements(self) -> list[str]:
        """VACUUMs that remove the dead row versions of the tables a purge erases text from.

        Only these tables hold text (the link tables hold row ids). Entities
        need their index cleaned too (an index on the entity's name); the other
        tables' indexes hold ids only, and index cleanup of the HNSW index would
        cost a scan of the whole index for every purge.
        """
        text_tables = ", ".join(
            self.t(n) for n in ("memories", "messages", "history", "extraction_failures")
        )
        return [f"VACUUM {text_tables}", f"VACUUM (INDEX_CLEANUP ON) {self.t('entities')}"]

    def bump_epoch(self) -> _Q:
        return _Q(
            f"UPDATE {self.t('meta')} SET value = (value::bigint + 1)::text WHERE key = 'epoch'",
            fetch="none",
        )

    def import_rows(self, rows: Sequence[dict[str, Any]]) -> Tx[int]:
        """Write exported rows back in one transaction; returns the count."""
        yield from self.guard_binding()
        ids = [r["id"] for r in rows]
        clash = yield _Q(f"SELECT id FROM {self.t('memories')} WHERE id = ANY(%s)", (ids,))
        if clash:
            raise clash_error([r[0] for r in clash])
        rowids: dict[str, int] = {}
        written: list[ImportedMemory] = []
        for r in rows:
            m = imported(r)
            stamp = _dt(m.updated_at)
            yield from self.upsert_entities(m.owner, m.entities, stamp or _now())
            try:
                row = yield _Q(
                    f"INSERT INTO {self.t('memories')} (id, text, hash, owner, partition, "
                    "user_id, agent_id, run_id, actor_id, role, attributed_to, memory_type, "
                    "metadata, created_at, updated_at, observed_at, expires_at, deleted_at, "
                    "version, terms, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                    "%s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING rowid",
                    (
                        m.id,
                        m.text,
                        m.hash,
                        m.owner,
                        m.partition,
                        m.scope.user_id,
                        m.scope.agent_id,
                        m.scope.run_id,
                        m.actor_id,
                        m.role,
                        m.attributed_to,
                        m.memory_type,
                        _json(m.metadata),
                        _dt(m.created_at),
                        stamp,
                        _dt(m.observed_at),
                        _dt(m.expires_at),
                        _dt(m.deleted_at),
                        m.version,
                        m.terms,
                        np.asarray(m.embedding, dtype=np.float32),
                    ),
                    fetch="one",
                )
            except pg_errors.UniqueViolation as exc:
                raise repeat_error(m) from exc
            rowid = int(row[0])
            rowids[m.id] = rowid
            written.append(m)
            yield from self.link_entities(rowid, m.owner, m.entities, replace=False)
            for kind, values in m.sessions:
                if values:
                    yield _Q(
                        f"INSERT INTO {self.t('memory_scope')} (memory_rowid, kind, value, "
                        "created_at) SELECT %s, %s, unnest(%s::text[]), %s ON CONFLICT DO NOTHING",
                        (rowid, kind, values, stamp),
                        fetch="none",
                    )
            for event in m.history:
                yield from self.insert_history(event)
        for m in written:
            if m.links:
                yield _Q(
                    f"INSERT INTO {self.t('memory_links')} (from_rowid, to_rowid, kind, "
                    f"created_at) SELECT %s, x.rowid, u.k, %s FROM unnest(%s::text[], "
                    f"%s::text[]) AS u(i, k) JOIN {self.t('memories')} x ON x.id = u.i "
                    "ON CONFLICT DO NOTHING",
                    (
                        rowids[m.id],
                        _dt(m.updated_at),
                        m.links,
                        [m.link_kinds.get(i, "related") for i in m.links],
                    ),
                    fetch="none",
                )
        return len(rows)

    def rebind_embedder(
        self,
        old: tuple[str, int],
        new: tuple[str, int],
        vectors: Mapping[int, np.ndarray[Any, np.dtype[np.float32]]],
        since: str,
    ) -> Tx[Rebinding]:
        """Replace every vector by ``vectors`` and bind ``new``, in one transaction.

        It takes the binding lock exclusively first, as reset does: vector
        writes in flight finish, and new ones wait until the commit (and then
        find the binding changed: the driver's guard refuses the old model).
        The store must still be bound to ``old``; a memory stamped by a
        transaction that had not ended in the snapshot ``since`` (written since
        the caller read it) or that ``vectors`` lacks makes the flow write
        nothing and return it as stale, with the current snapshot as the next
        mark. Otherwise the HNSW index is dropped, the column retyped to
        ``vector(new dim)`` when the dimension changes (``USING NULL``: a table
        rewrite), every row's vector written in batches, the binding changed
        and the index built again, all before the one COMMIT; readers wait
        for it (the index and the column are locked). The keyword caches hold
        no vectors and stay valid. Dead row versions of the old vectors
        remain until (auto)VACUUM.
        """
        memories = self.t("memories")
        yield self.binding_lock(exclusive=True)
        bound = yield from self.read_binding()
        if bound != old:
            raise moved_error(f"PostgreSQL schema {self.schema!r}", bound, old)
        mark = yield _Q("SELECT pg_current_snapshot()::text", fetch="one")
        snap = _Snapshot.parse(since)
        rows = yield _Q(
            f"SELECT m.rowid, (m.txid >= %s::xid8 OR m.txid = ANY(%s::xid8[])) FROM {memories} m "
            "ORDER BY m.rowid",
            (str(snap.xmax), [str(x) for x in sorted(snap.xip)]),
        )
        stale, current = stale_keys(((int(r[0]), bool(r[1])) for r in rows), vectors)
        if stale:
            found = yield _Q(
                f"SELECT rowid, text, actor_id FROM {memories} WHERE rowid = ANY(%s) "
                "ORDER BY rowid",
                (stale,),
            )
            return Rebinding(
                done=False,
                stale=[EmbeddingSource(int(r[0]), r[1], r[2]) for r in found],
                mark=str(mark[0]),
            )
        fresh = checked_vectors(vectors, current, new[1])
        yield _Q(f"DROP INDEX IF EXISTS {self.t('memories_embedding_hnsw')}", fetch="none")
        typed = yield _Q(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding'",
            (memories,),
            fetch="one",
        )
        if typed[0] != f"vector({int(new[1])})":
            yield _Q(
                f"ALTER TABLE {memories} ALTER COLUMN embedding TYPE vector({int(new[1])}) "
                "USING NULL",
                fetch="none",
            )
        for chunk in _chunks(fresh, _REBIND_BATCH):
            yield _Q(
                f"UPDATE {memories} m SET embedding = u.e::vector "
                "FROM unnest(%s::bigint[], %s::text[]) AS u(k, e) WHERE m.rowid = u.k",
                ([k for k, _ in chunk], [_vector_text(v) for _, v in chunk]),
                fetch="none",
            )
        meta = self.t("meta")
        yield _Q(
            f"UPDATE {meta} SET value = %s WHERE key = 'embedder_model'", (new[0],), fetch="none"
        )
        yield _Q(
            f"UPDATE {meta} SET value = %s WHERE key = 'embedder_dim'", (str(new[1]),), fetch="none"
        )
        yield _Q(
            f"CREATE INDEX memories_embedding_hnsw ON {memories} "
            "USING hnsw (embedding vector_cosine_ops)",
            fetch="none",
        )
        # This process is on the new model from now on (its Memory's embedder is).
        self.binding = (new[0], new[1])
        return Rebinding(done=True, written=len(fresh), mark=str(mark[0]))

    def reset(self) -> Tx[None]:
        """Erase everything the store holds (the embedder binding too)."""
        tables = ", ".join(
            self.t(name)
            for name in (
                "memory_links",
                "memory_entities",
                "memory_sources",
                "memory_context",
                "memory_scope",
                "failure_messages",
                "extraction_failures",
                "entities",
                "history",
                "messages",
                "memories",
            )
        )
        # First: wait out vector writes in flight, so none commits after the reset.
        yield self.binding_lock(exclusive=True)
        yield _Q(f"TRUNCATE {tables}", fetch="none")
        yield _Q(
            f"DELETE FROM {self.t('meta')} WHERE key = ANY(%s)",
            (list(_EMBEDDER_KEYS),),
            fetch="none",
        )
        yield self.bump_epoch()
