"""The PostgreSQL add flows: new memories in bulk, repeats and session attach, failures."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engramdb._time import utc_now
from engramdb.errors import ConflictError, MemoryNotFoundError
from engramdb.stores.base import (
    AddOutcome,
    HistoryEvent,
    NewMemory,
    NewMessage,
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
from engramdb.stores.kernel.history import add_event, attach_event, detach_event
from engramdb.stores.postgres._sql import _Q, WRITE_RETRIES, Tx, _dt, _iso, _json, _vector_text
from engramdb.stores.postgres._write_base import _WriteBase


class _AddFlows(_WriteBase):
    """Writing what an add brings: memories, repeats' sessions, a failed extraction."""

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

    def detach_session(
        self,
        memory_id: str,
        sessions: Sequence[tuple[str, str]],
        actor: str,
        reason: str | None = None,
    ) -> Tx[HistoryEvent | None]:
        """Take attached sessions off a memory (see ``Store.detach_session``)."""
        ts = datetime.fromisoformat(utc_now())
        row = yield _Q(
            f"SELECT rowid, text, version FROM {self.t('memories')} "
            "WHERE id = %s FOR NO KEY UPDATE",
            (memory_id,),
            fetch="one",
        )
        if row is None:
            raise MemoryNotFoundError(memory_id)
        rowid, text, version = row
        detached: list[tuple[str, str]] = []
        for kind, value in sessions:
            gone = yield _Q(
                f"DELETE FROM {self.t('memory_scope')} WHERE memory_rowid = %s AND kind = %s "
                "AND value = %s RETURNING 1",
                (rowid, kind, value),
                fetch="one",
            )
            if gone is not None:
                detached.append((kind, value))
        if not detached:
            return None
        yield _Q(
            f"UPDATE {self.t('memories')} SET txid = pg_current_xact_id() WHERE rowid = %s",
            (rowid,),
            fetch="none",
        )
        event = detach_event(memory_id, text, int(version), detached, actor, _iso(ts) or "", reason)
        yield from self.insert_history(event)
        return event

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
