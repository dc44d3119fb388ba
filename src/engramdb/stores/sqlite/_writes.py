"""The write transactions of the SQLite store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from engramdb._time import utc_now
from engramdb.errors import (
    ConflictError,
    DuplicateMemoryError,
    MemoryNotFoundError,
    ValidationError,
)
from engramdb.stores.base import (
    KEEP,
    AddOutcome,
    EntityRef,
    HistoryEvent,
    Keep,
    LinkChange,
    MemoryRow,
    NewMemory,
    NewMessage,
    RestorePlan,
    Scope,
    visible_scope,
)
from engramdb.stores.kernel.dedup import repeated, sessions_to_attach, stored
from engramdb.stores.kernel.history import (
    add_event,
    attach_event,
    delete_event,
    detach_event,
    link_events,
    plan_from_history,
    restore_event,
    restore_target,
    update_event,
)
from engramdb.stores.kernel.imports import ImportedMemory, clash_error, imported, repeat_error
from engramdb.stores.sqlite._base import (
    _COLS,
    _chunks,
    _scope_clause,
    _sees_clause,
    _Store,
    _vec_blob,
)


class _Writes(_Store):
    """Writes: one call, one ``BEGIN IMMEDIATE`` transaction."""

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
    ) -> list[AddOutcome]:
        """Store messages and memories in one transaction; repeats become NONE.

        A repeat is a live memory with the same hash that ``visible`` (the
        caller's visible scope; :func:`visible_scope` of ``scope`` when not
        given) sees, preferably one of its own partition; anything else is
        stored anew in that partition (see :attr:`Scope.partition`).
        ``source_messages`` of a memory index the new ``messages`` followed by
        ``source_rowids`` (messages stored earlier, e.g. by a failed
        extraction that ``resolve_failure`` now marks resolved).
        """
        now = utc_now()
        owner = scope.owner
        sees = visible or visible_scope(scope)
        partition = sees.partition
        sees_sql, sees_params = _sees_clause(sees)
        outcomes: list[AddOutcome] = []
        with self._write() as con, self._translate():
            seq = self._bump(con)
            if memories:
                self._guard_binding(con)  # coherence: no vectors of another model
            msg_rowids = self._insert_messages(con, messages, scope, now) + list(source_rowids)
            if resolve_failure is not None:
                con.execute(
                    "UPDATE extraction_failures SET resolved_at = ? WHERE rowid = ?",
                    (now, resolve_failure),
                )
            for mem in memories:
                existing = con.execute(
                    "SELECT m.rowid, m.id, m.text, m.agent_id, m.run_id FROM memories m "
                    f"WHERE m.hash = ? AND m.deleted_at IS NULL AND {sees_sql} "
                    "ORDER BY m.partition <> ?, m.rowid LIMIT 1",
                    (mem.hash, *sees_params, partition),
                ).fetchone()
                if existing is not None:
                    outcomes.append(self._attach_session(con, existing, scope, seq, actor, now))
                    # The repeat's messages said the same: sources of that memory too,
                    # so purging it erases them.
                    con.executemany(
                        "INSERT OR IGNORE INTO memory_sources(memory_rowid, message_rowid) "
                        "VALUES (?, ?)",
                        [
                            (existing[0], msg_rowids[i])
                            for i in mem.source_messages
                            if i < len(msg_rowids)
                        ],
                    )
                    continue
                if mem.embedding.size == 0:
                    # The caller skipped embedding a text it saw stored a moment ago;
                    # it was deleted since. Roll back; the caller retries with vectors.
                    raise ConflictError(f"memory text {mem.text[:40]!r} changed concurrently")
                cur = con.execute(
                    "INSERT INTO memories(id, text, hash, owner, partition, user_id, agent_id, "
                    "run_id, actor_id, role, attributed_to, memory_type, metadata, created_at, "
                    "updated_at, observed_at, expires_at, version, seq) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
                    (
                        mem.id,
                        mem.text,
                        mem.hash,
                        owner,
                        partition,
                        scope.user_id,
                        scope.agent_id,
                        scope.run_id,
                        mem.actor_id,
                        mem.role,
                        mem.attributed_to,
                        mem.memory_type,
                        json.dumps(mem.metadata, ensure_ascii=False),
                        now,
                        now,
                        mem.observed_at,
                        mem.expires_at,
                        seq,
                    ),
                )
                rowid = int(cur.lastrowid or 0)
                con.execute(
                    "INSERT INTO memory_vectors(memory_rowid, embedding) VALUES (?, ?)",
                    (rowid, _vec_blob(mem.embedding)),
                )
                con.execute(
                    "INSERT INTO memory_fts(rowid, terms) VALUES (?, ?)", (rowid, mem.terms)
                )
                self._link_entities(con, rowid, owner, mem.entities, now, replace=False)
                con.executemany(
                    "INSERT OR IGNORE INTO memory_sources(memory_rowid, message_rowid) "
                    "VALUES (?, ?)",
                    [(rowid, msg_rowids[i]) for i in mem.source_messages if i < len(msg_rowids)],
                )
                self._insert_context(con, rowid, mem, msg_rowids)
                for link in mem.links:
                    con.execute(
                        "INSERT OR IGNORE INTO memory_links(from_rowid, to_rowid, kind, "
                        "created_at) SELECT ?, rowid, ?, ? FROM memories "
                        "WHERE id = ? AND owner = ?",
                        (rowid, mem.link_kinds.get(link, "related"), now, link, owner),
                    )
                event = add_event(mem, actor, now)
                self._insert_history(con, event)
                outcomes.append(stored(mem, event))
        return outcomes

    @staticmethod
    def _insert_context(
        con: sqlite3.Connection, rowid: int, mem: NewMemory, msg_rowids: Sequence[int]
    ) -> None:
        """Record the messages whose words the memory's terms borrow (erasure provenance)."""
        borrowed = sorted(set(mem.context_rowids))
        if borrowed:
            found = con.execute(
                "SELECT count(*) FROM messages WHERE rowid IN (SELECT value FROM json_each(?))",
                (json.dumps(borrowed),),
            ).fetchone()[0]
            if found != len(borrowed):
                # Purged since the caller read them: its terms hold erased words.
                raise ConflictError("a context message was purged meanwhile; read it again")
        pairs = {(rowid, msg_rowids[i]) for i in mem.context_messages if i < len(msg_rowids)}
        pairs.update((rowid, r) for r in borrowed)
        con.executemany(
            "INSERT OR IGNORE INTO memory_context(memory_rowid, message_rowid) VALUES (?, ?)",
            sorted(pairs),
        )

    @staticmethod
    def _insert_messages(
        con: sqlite3.Connection, messages: Sequence[NewMessage], scope: Scope, now: str
    ) -> list[int]:
        rowids = []
        for msg in messages:
            cur = con.execute(
                "INSERT INTO messages(user_id, agent_id, run_id, role, name, content, "
                "observed_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    scope.user_id,
                    scope.agent_id,
                    scope.run_id,
                    msg.role,
                    msg.name,
                    msg.content,
                    msg.observed_at,
                    now,
                ),
            )
            rowids.append(int(cur.lastrowid or 0))
        return rowids

    def keep_failed(
        self, scope: Scope, messages: Sequence[NewMessage], error: str, reply: str | None
    ) -> int:
        """Store the messages of a failed extraction and the failure; returns its id."""
        now = utc_now()
        with self._write() as con, self._translate():
            rowids = self._insert_messages(con, messages, scope, now)
            cur = con.execute(
                "INSERT INTO extraction_failures(user_id, agent_id, run_id, error, reply, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (scope.user_id, scope.agent_id, scope.run_id, error, reply, now),
            )
            failure = int(cur.lastrowid or 0)
            con.executemany(
                "INSERT INTO failure_messages(failure_rowid, message_rowid) VALUES (?, ?)",
                [(failure, r) for r in rowids],
            )
        return failure

    def _attach_session(
        self,
        con: sqlite3.Connection,
        existing: tuple[Any, ...],
        scope: Scope,
        seq: int,
        actor: str,
        now: str,
    ) -> AddOutcome:
        """A repeat of a live memory: attach the new session ids, store nothing twice."""
        rowid, memory_id, text, agent_id, run_id = existing
        attached = [
            (kind, value)
            for kind, value in sessions_to_attach(scope, agent_id, run_id)
            if con.execute(
                "INSERT OR IGNORE INTO memory_scope(memory_rowid, kind, value, created_at) "
                "VALUES (?, ?, ?, ?)",
                (rowid, kind, value, now),
            ).rowcount
        ]
        if not attached:
            return repeated(memory_id, text)
        con.execute("UPDATE memories SET seq = ? WHERE rowid = ?", (seq, rowid))
        version = con.execute("SELECT version FROM memories WHERE rowid = ?", (rowid,)).fetchone()
        event = attach_event(memory_id, text, int(version[0]), attached, actor, now)
        self._insert_history(con, event)
        return repeated(memory_id, text, event)

    @staticmethod
    def _link_entities(
        con: sqlite3.Connection,
        rowid: int,
        owner: str,
        entities: Sequence[EntityRef],
        now: str,
        *,
        replace: bool,
    ) -> None:
        if replace:
            con.execute("DELETE FROM memory_entities WHERE memory_rowid = ?", (rowid,))
        for name, normalized, kind in entities:
            con.execute(
                "INSERT INTO entities(owner, name, normalized, type, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(owner, normalized) DO NOTHING",
                (owner, name, normalized, kind, now),
            )
            con.execute(
                "INSERT OR IGNORE INTO memory_entities(memory_rowid, entity_rowid) "
                "SELECT ?, rowid FROM entities WHERE owner = ? AND normalized = ?",
                (rowid, owner, normalized),
            )

    def attach_session(self, memory_id: str, scope: Scope, actor: str) -> HistoryEvent | None:
        """Attach the scope's run/agent to a live memory (the NONE of consolidation)."""
        now = utc_now()
        with self._write() as con, self._translate():
            row = con.execute(
                "SELECT rowid, id, text, agent_id, run_id FROM memories "
                "WHERE id = ? AND deleted_at IS NULL",
                (memory_id,),
            ).fetchone()
            if row is None:
                raise MemoryNotFoundError(memory_id)
            seq = self._bump(con)
            return self._attach_session(con, row, scope, seq, actor, now).history

    def detach_session(
        self,
        memory_id: str,
        sessions: Sequence[tuple[str, str]],
        actor: str,
        reason: str | None = None,
    ) -> HistoryEvent | None:
        """Take attached sessions off a memory (see :meth:`Store.detach_session`)."""
        now = utc_now()
        with self._write() as con, self._translate():
            row = con.execute(
                "SELECT rowid, text, version FROM memories WHERE id = ?", (memory_id,)
            ).fetchone()
            if row is None:
                raise MemoryNotFoundError(memory_id)
            rowid, text, version = row
            detached = [
                (kind, value)
                for kind, value in sessions
                if con.execute(
                    "DELETE FROM memory_scope WHERE memory_rowid = ? AND kind = ? AND value = ?",
                    (rowid, kind, value),
                ).rowcount
            ]
            if not detached:
                return None
            seq = self._bump(con)
            con.execute("UPDATE memories SET seq = ? WHERE rowid = ?", (seq, rowid))
            event = detach_event(memory_id, text, int(version), detached, actor, now, reason)
            self._insert_history(con, event)
            return event

    def link(self, links: Sequence[LinkChange], actor: str) -> list[HistoryEvent]:
        """Link existing memories in one transaction (see :meth:`Store.link`)."""
        return self._relink(links, actor, add=True)

    def unlink(self, links: Sequence[LinkChange], actor: str) -> list[HistoryEvent]:
        """Remove links in one transaction (see :meth:`Store.unlink`)."""
        return self._relink(links, actor, add=False)

    def _relink(self, links: Sequence[LinkChange], actor: str, *, add: bool) -> list[HistoryEvent]:
        now = utc_now()
        events: list[HistoryEvent] = []
        with self._write() as con, self._translate():
            seq: int | None = None
            for change in links:
                ends = []
                for memory_id in (change.from_id, change.to_id):
                    row = con.execute(
                        "SELECT rowid, owner, text, version, deleted_at FROM memories WHERE id = ?",
                        (memory_id,),
                    ).fetchone()
                    if row is None or (add and row[4] is not None):
                        raise MemoryNotFoundError(memory_id)
                    ends.append(row)
                (a, owner_a, text_a, ver_a, _), (b, owner_b, text_b, ver_b, _) = ends
                if add and (owner_a != owner_b or a == b):
                    raise ValidationError(
                        f"a link joins two memories of one owner: {change.from_id!r} "
                        f"and {change.to_id!r} are not"
                    )
                if add:
                    written = con.execute(
                        "INSERT OR IGNORE INTO memory_links(from_rowid, to_rowid, kind, "
                        "created_at) VALUES (?, ?, ?, ?)",
                        (a, b, change.kind, now),
                    ).rowcount
                else:
                    written = con.execute(
                        "DELETE FROM memory_links WHERE from_rowid = ? AND to_rowid = ? "
                        "AND kind = ?",
                        (a, b, change.kind),
                    ).rowcount
                if not written:
                    continue
                if seq is None:
                    seq = self._bump(con)
                con.execute("UPDATE memories SET seq = ? WHERE rowid IN (?, ?)", (seq, a, b))
                for event in link_events(
                    change,
                    ((text_a, int(ver_a)), (text_b, int(ver_b))),
                    "LINK" if add else "UNLINK",
                    actor,
                    now,
                ):
                    self._insert_history(con, event)
                    events.append(event)
        return events

    def _set_content(
        self,
        con: sqlite3.Connection,
        memory_id: str,
        *,
        text: str,
        hash: str,
        embedding: np.ndarray[Any, Any] | None,
        terms: str,
        entities: Sequence[EntityRef],
        metadata: dict[str, Any],
        expires_at: str | None,
        version: int,
        seq: int,
        now: str,
    ) -> None:
        try:
            con.execute(
                "UPDATE memories SET text = ?, hash = ?, metadata = ?, expires_at = ?, "
                "updated_at = ?, version = ?, deleted_at = NULL, seq = ? WHERE id = ?",
                (
                    text,
                    hash,
                    json.dumps(metadata, ensure_ascii=False),
                    expires_at,
                    now,
                    version,
                    seq,
                    memory_id,
                ),
            )
        except sqlite3.IntegrityError as exc:
            other = con.execute(
                "SELECT id FROM memories WHERE hash = ? AND deleted_at IS NULL AND partition = "
                "(SELECT partition FROM memories WHERE id = ?)",
                (hash, memory_id),
            ).fetchone()
            raise DuplicateMemoryError(memory_id, other[0] if other else None) from exc
        rowid, owner = con.execute(
            "SELECT rowid, owner FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        if embedding is not None:
            self._guard_binding(con)
            con.execute(
                "UPDATE memory_vectors SET embedding = ? WHERE memory_rowid = ?",
                (_vec_blob(embedding), rowid),
            )
            con.execute("DELETE FROM memory_fts WHERE rowid = ?", (rowid,))
            con.execute("INSERT INTO memory_fts(rowid, terms) VALUES (?, ?)", (rowid, terms))
            self._link_entities(con, rowid, owner, entities, now, replace=True)

    def update(
        self,
        memory_id: str,
        *,
        text: str,
        hash: str,
        embedding: np.ndarray[Any, Any] | None,
        terms: str,
        entities: Sequence[EntityRef] = (),
        metadata: dict[str, Any],
        actor: str,
        reason: str | None = None,
        expires_at: str | Keep | None = KEEP,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Change text, metadata and/or expiry of a live memory, writing an UPDATE event."""
        now = utc_now()
        with self._write() as con:
            with self._translate():
                old = self._live_row(con, memory_id)
                seq = self._bump(con)
            expiry = old.expires_at if expires_at is KEEP else expires_at
            self._set_content(
                con,
                memory_id,
                text=text,
                hash=hash,
                embedding=embedding,
                terms=terms,
                entities=entities,
                metadata=metadata,
                expires_at=expiry,
                version=old.version + 1,
                seq=seq,
                now=now,
            )
            event = update_event(old, text, metadata, actor, reason, now, expiry)
            with self._translate():
                self._insert_history(con, event)
                new = self._live_row(con, memory_id)
        return new, event

    def delete(
        self, memory_id: str, *, actor: str, reason: str | None = None
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Soft-delete one memory (hidden, restorable)."""
        now = utc_now()
        with self._write() as con, self._translate():
            row = self._live_row(con, memory_id)
            seq = self._bump(con)
            con.execute(
                "UPDATE memories SET deleted_at = ?, seq = ? WHERE id = ?", (now, seq, memory_id)
            )
            event = delete_event(row, actor, reason, now)
            self._insert_history(con, event)
        row.deleted_at = now
        return row, event

    def delete_scope(self, scope: Scope, *, actor: str) -> list[HistoryEvent]:
        """Soft-delete every live memory matching all ids of ``scope``."""
        now = utc_now()
        clause, params = _scope_clause(scope)
        events: list[HistoryEvent] = []
        with self._write() as con, self._translate():
            rows = con.execute(
                f"SELECT {_COLS} FROM memories m WHERE m.deleted_at IS NULL AND {clause}",
                params,
            ).fetchall()
            if not rows:
                return []
            seq = self._bump(con)
            for row in self._hydrate(con, rows):
                con.execute(
                    "UPDATE memories SET deleted_at = ?, seq = ? WHERE id = ?", (now, seq, row.id)
                )
                event = delete_event(row, actor, "delete_all", now)
                self._insert_history(con, event)
                events.append(event)
        return events

    def plan_restore(self, memory_id: str, version: int | None) -> RestorePlan:
        """Work out what a restore would bring back (reads only)."""
        row = self.get(memory_id, include_deleted=True)
        if row is None:
            raise MemoryNotFoundError(memory_id)
        target = restore_target(row, version)
        if isinstance(target, RestorePlan):
            return target
        return plan_from_history(row, target, self.history(memory_id))

    def apply_restore(
        self,
        plan: RestorePlan,
        *,
        hash: str,
        embedding: np.ndarray[Any, Any] | None,
        terms: str,
        entities: Sequence[EntityRef] = (),
        actor: str,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Write a planned restore, if the memory has not changed since planning."""
        now = utc_now()
        with self._write() as con:
            with self._translate():
                cur = con.execute(
                    f"SELECT {_COLS} FROM memories m WHERE m.id = ?", (plan.memory_id,)
                ).fetchone()
                if cur is None:
                    raise MemoryNotFoundError(plan.memory_id)
                old = self._hydrate(con, [cur])[0]
                if old.version != plan.expected_version or (old.deleted_at is not None) != (
                    plan.undelete
                ):
                    raise ConflictError(
                        f"memory {plan.memory_id!r} changed while the restore was prepared; "
                        "nothing was written, call restore() again"
                    )
                seq = self._bump(con)
            new_version = old.version if plan.to_version is None else old.version + 1
            self._set_content(
                con,
                plan.memory_id,
                text=plan.text,
                hash=hash,
                embedding=embedding,
                terms=terms,
                entities=entities,
                metadata=plan.metadata,
                expires_at=plan.expires_at,
                version=new_version,
                seq=seq,
                now=now,
            )
            event = restore_event(plan, old, new_version, actor, now)
            with self._translate():
                self._insert_history(con, event)
                new = self._live_row(con, plan.memory_id)
        return new, event

    def import_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """Write exported rows back in one transaction; returns the count."""
        with self._write() as con, self._translate():
            seq = self._bump(con)
            self._guard_binding(con)
            # The rows' attribute terms are the exporting store's classifier's reading.
            con.execute("DELETE FROM meta WHERE key = 'attribute_terms'")
            ids = [r["id"] for r in rows]
            clash = [
                r[0]
                for chunk in _chunks(ids, 500)
                for r in con.execute(
                    f"SELECT id FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk
                )
            ]
            if clash:
                raise clash_error(clash)
            rowids: dict[str, int] = {}
            written: list[ImportedMemory] = []
            for r in rows:
                m = imported(r)
                try:
                    cur = con.execute(
                        "INSERT INTO memories(id, text, hash, owner, partition, user_id, "
                        "agent_id, run_id, actor_id, role, attributed_to, memory_type, metadata, "
                        "created_at, updated_at, observed_at, expires_at, deleted_at, version, "
                        "seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                            json.dumps(m.metadata, ensure_ascii=False),
                            m.created_at,
                            m.updated_at,
                            m.observed_at,
                            m.expires_at,
                            m.deleted_at,
                            m.version,
                            seq,
                        ),
                    )
                except sqlite3.IntegrityError as exc:
                    raise repeat_error(m) from exc
                rowid = int(cur.lastrowid or 0)
                rowids[m.id] = rowid
                written.append(m)
                con.execute(
                    "INSERT INTO memory_vectors(memory_rowid, embedding) VALUES (?, ?)",
                    (rowid, _vec_blob(m.embedding)),
                )
                con.execute("INSERT INTO memory_fts(rowid, terms) VALUES (?, ?)", (rowid, m.terms))
                self._link_entities(con, rowid, m.owner, m.entities, m.updated_at, replace=False)
                for kind, values in m.sessions:
                    for value in values:
                        con.execute(
                            "INSERT OR IGNORE INTO memory_scope VALUES (?, ?, ?, ?)",
                            (rowid, kind, value, m.updated_at),
                        )
                for event in m.history:
                    self._insert_history(con, event)
            for m in written:
                for link in m.links:
                    con.execute(
                        "INSERT OR IGNORE INTO memory_links(from_rowid, to_rowid, kind, "
                        "created_at) SELECT ?, rowid, ?, ? FROM memories WHERE id = ?",
                        (rowids[m.id], m.link_kinds.get(link, "related"), m.updated_at, link),
                    )
        return len(rows)

    def reset(self) -> None:
        """Erase everything the store holds (the embedder binding too)."""
        with self._write() as con, self._translate():
            for table in (
                "memory_links",
                "memory_entities",
                "memory_sources",
                "memory_context",
                "memory_scope",
                "memory_vectors",
                "failure_messages",
                "extraction_failures",
                "entities",
                "history",
                "messages",
                "memories",
            ):
                con.execute(f"DELETE FROM {table}")
            con.execute("DELETE FROM memory_fts")
            for table in ("keyword_postings", "keyword_docs", "keyword_stats", "vector_basis"):
                con.execute(f"DELETE FROM {table}")
            con.execute("DELETE FROM meta WHERE key = 'vector_basis'")
            # Nothing left to post: the rows the DELETE noted need no comparing.
            con.execute("DELETE FROM temp.keyword_dirty")
            con.execute("DELETE FROM meta WHERE key IN ('embedder_model', 'embedder_dim')")
            con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
        self._scrub()
