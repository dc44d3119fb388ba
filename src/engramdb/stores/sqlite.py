"""The embedded store: one SQLite file in WAL mode.

Concurrency model: every thread gets its own connection; every write opens
with ``BEGIN IMMEDIATE`` so the write lock is taken up front and waits out
other writers through ``busy_timeout`` (a deferred transaction that later
upgrades its lock fails with "database is locked" instead of waiting).
Several processes may share the file the same way.

Vectors live in the file (float32 BLOBs) and are searched through in-memory
:class:`~engramdb.core.vectors.VectorIndex` caches, one per primary scope id.
A store-wide change counter (``meta.seq``, bumped by every write and copied
into each changed row) lets a cache catch up with writes from any process by
reading only the rows changed since it last looked; a purge or reset bumps
``meta.epoch`` and drops every cache.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engramdb._time import utc_now
from engramdb.core.filters import Node, compile_sqlite
from engramdb.core.vectors import VectorIndex
from engramdb.errors import (
    ConflictError,
    DuplicateMemoryError,
    EmbedderMismatchError,
    MemoryNotFoundError,
    SchemaVersionError,
    StoreError,
)
from engramdb.stores._erasure import (
    ErasureFacts,
    ErasurePlan,
    NeighbourFacts,
    check_terms,
    plan_erasure,
    purge_with,
)
from engramdb.stores._history import (
    add_event,
    attach_event,
    delete_event,
    plan_from_history,
    restore_event,
    restore_target,
    update_event,
)
from engramdb.stores.base import (
    AddOutcome,
    Candidate,
    EntityRef,
    HistoryEvent,
    MemoryRow,
    NewMemory,
    NewMessage,
    RestorePlan,
    Scope,
    visible_scope,
)
from engramdb.stores.kernel.caches import ScopeCache, ScopeCaches
from engramdb.stores.kernel.candidates import Pool, adds_candidates, narrowed
from engramdb.stores.kernel.dedup import repeated, sessions_to_attach, stored
from engramdb.stores.kernel.imports import ImportedMemory, clash_error, imported, repeat_error
from engramdb.stores.sqlite_schema import LATEST, MIGRATIONS

__all__ = ["SQLiteStore"]

log = logging.getLogger("engramdb.store")

F32 = np.dtype("<f4")

_COLS = (
    "m.rowid, m.id, m.text, m.hash, m.user_id, m.agent_id, m.run_id, m.actor_id, m.role, "
    "m.attributed_to, m.memory_type, m.metadata, m.created_at, m.updated_at, m.observed_at, "
    "m.expires_at, m.deleted_at, m.version"
)


def _vec_blob(vec: np.ndarray[Any, Any]) -> bytes:
    return np.ascontiguousarray(vec, dtype=F32).tobytes()


def _live_clause(now: str) -> tuple[str, list[Any]]:
    return "m.deleted_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > ?)", [now]


def _scope_clause(scope: Scope) -> tuple[str, list[Any]]:
    """SQL over alias ``m`` matching every id of ``scope`` (attached sessions count).

    Written so SQLite's planner drives from the narrowest id: a run or agent
    id becomes a rowid set (its own rows plus attached sessions), and with
    more than one id the user condition is kept off its index (unary ``+``),
    which would otherwise make SQLite read every memory of the user.
    """
    parts: list[str] = []
    params: list[Any] = []
    several = len(scope.items()) > 1
    for kind, value in scope.items():
        if kind == "user_id":
            parts.append("+m.user_id = ?" if several else "m.user_id = ?")
            params.append(value)
        else:
            parts.append(
                f"m.rowid IN (SELECT rowid FROM memories WHERE {kind} = ? UNION ALL "
                "SELECT memory_rowid FROM memory_scope WHERE kind = ? AND value = ?)"
            )
            params.extend([value, kind, value])
    return " AND ".join(parts) or "1", params


def _sees_clause(scope: Scope) -> tuple[str, list[Any]]:
    """SQL over alias ``m``: whether ``scope`` sees the row, checked row by row.

    For the few rows another index found (dedup looks rows up by hash):
    correlated lookups instead of :func:`_scope_clause`'s rowid sets, which
    would list every memory of an agent or run on each call. The index
    ``(hash, user_id)`` finds the rows; unary ``+`` keeps the planner off the
    agent and run indexes.
    """
    parts: list[str] = []
    params: list[Any] = []
    for kind, value in scope.items():
        if kind == "user_id":
            parts.append("m.user_id = ?")
            params.append(value)
        else:
            parts.append(
                f"(+m.{kind} = ? OR EXISTS (SELECT 1 FROM memory_scope s WHERE "
                "s.memory_rowid = m.rowid AND s.kind = ? AND s.value = ?))"
            )
            params.extend([value, kind, value])
    return " AND ".join(parts) or "1", params


class _Cache(ScopeCache):
    """The vector and keyword indexes of one primary scope id, and how current they are.

    ``seq`` is the ``meta.seq`` it has caught up to within ``epoch``; ``lock``
    serialises its catch-ups (the indexes have their own locks for searches).
    """

    __slots__ = ("epoch", "index", "lock", "seq")

    def __init__(self, dim: int, epoch: str) -> None:
        super().__init__()
        self.index = VectorIndex(dim)
        self.seq = 0
        self.epoch = epoch
        self.lock = threading.Lock()

    def size(self) -> int:
        return len(self.index)

    def apply(
        self,
        dead: Sequence[int],
        live: Sequence[int],
        terms: Sequence[list[str]],
        vectors: np.ndarray[Any, Any] | None = None,
    ) -> None:
        """Apply a catch-up to both indexes; ``vectors`` holds the ``live`` rows' vectors."""
        if live and vectors is None:
            raise ValueError("the vector cache needs the vectors of the live rows")
        if dead:
            self.index.remove(np.array(dead, dtype=np.int64))
        super().apply(dead, live, terms)
        if live and vectors is not None:
            self.index.add(np.array(live, dtype=np.int64), vectors)


# What a search reads first: the change counter, the epoch and the binding.
_META = (
    "SELECT key, value FROM meta WHERE key IN ('seq', 'epoch', 'embedder_model', 'embedder_dim')"
)


class SQLiteStore:
    """A :class:`~engramdb.stores.base.Store` on one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        max_cached_vectors: int = 2_000_000,
    ) -> None:
        """Open (creating and migrating if needed) the database at ``path``."""
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for {self.path}: {exc}") from exc
        self._busy_ms = int(busy_timeout_s * 1000)
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        # The embedder this process bound (bind_embedder), checked again by every
        # vector write and search; None until then.
        self._binding: tuple[str, int] | None = None
        # Its lock guards the table of caches and the epoch only, never I/O: a
        # scope's catch-up reads under that scope's own lock (_Cache.lock).
        self._table: ScopeCaches[_Cache] = ScopeCaches(
            max_cached_vectors, epoch="0", lock=threading.Lock()
        )
        self._caches = self._table.entries  # read by bench/perf.py
        self._migrate()

    # -- connections and transactions -------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError("this store is closed; open a new Memory")
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0
            )
            con.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            # WAL: readers never block the writer; NORMAL sync is still atomic and
            # consistent after a process crash (only an OS crash can lose the tail).
            with self._translate():
                self._retry_locked(lambda: con.execute("PRAGMA journal_mode = WAL"))
            con.execute("PRAGMA synchronous = NORMAL")
            con.execute("PRAGMA foreign_keys = ON")
            # Overwrite deleted content with zeros, so purged text leaves no trace in
            # free pages.
            con.execute("PRAGMA secure_delete = ON")
            self._local.con = con
            with self._conns_lock:
                self._conns.append(con)
        return con

    @staticmethod
    def _retry_locked(fn: Any) -> Any:
        # Switching to WAL needs an exclusive lock that busy_timeout does not cover
        # when several processes open a new file at once.
        for attempt in range(200):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 199:
                    raise
                time.sleep(0.05)
        return None

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything inside commits together or not at all."""
        con = self._conn()
        with self._translate():
            con.execute("BEGIN IMMEDIATE")
        try:
            yield con
            with self._translate():
                con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction, so multi-statement reads see one snapshot."""
        con = self._conn()
        with self._translate():
            con.execute("BEGIN")
        try:
            with self._translate():
                yield con
        finally:
            with contextlib.suppress(sqlite3.Error):
                con.execute("COMMIT")

    @staticmethod
    def _bump(con: sqlite3.Connection) -> int:
        row = con.execute(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'seq' RETURNING value"
        ).fetchone()
        return int(row[0])

    def _migrate(self) -> None:
        with self._write() as con, self._translate():
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > LATEST:
                raise SchemaVersionError(
                    f"{self.path} has schema version {version}, newer than this engramdb "
                    f"understands ({LATEST}); upgrade engramdb to open it"
                )
            for step in range(version, LATEST):
                log.info("migrating %s to schema version %d", self.path, step + 1)
                for statement in _split_sql(MIGRATIONS[step]):
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {step + 1}")

    # -- embedder binding ----------------------------------------------------------------

    def bind_embedder(self, model: str, dim: int) -> None:
        """Record the embedder on first use; refuse a different one afterwards.

        The binding is remembered for the life of this store object: every
        later write of vectors and every search checks the file's binding
        again (another process may have reset the file and bound another
        model since), so vectors of two models never meet.
        """
        with self._write() as con, self._translate():
            self._ensure_binding(con, (model, dim))
        self._binding = (model, dim)

    def _ensure_binding(self, con: sqlite3.Connection, mine: tuple[str, int]) -> None:
        """Inside a write transaction: bind ``mine`` if nothing is bound, else it must match."""
        rows = dict(
            con.execute(
                "SELECT key, value FROM meta WHERE key IN ('embedder_model', 'embedder_dim')"
            ).fetchall()
        )
        if not rows:
            con.execute(
                "INSERT INTO meta(key, value) VALUES ('embedder_model', ?), ('embedder_dim', ?)",
                (mine[0], str(mine[1])),
            )
        else:
            self._refuse_other((rows.get("embedder_model"), rows.get("embedder_dim")), mine)

    def _refuse_other(self, bound: tuple[str | None, str | None], mine: tuple[str, int]) -> None:
        if bound != (mine[0], str(mine[1])):
            raise EmbedderMismatchError(
                f"{self.path} holds vectors from {bound[0]!r} (dim {bound[1]}), but the "
                f"configured embedder is {mine[0]!r} (dim {mine[1]}); configure the same "
                "embedder, or export and re-import into a new file to re-embed (another "
                "process may have reset the store and bound another model)"
            )

    def _guard_binding(self, con: sqlite3.Connection) -> None:
        """Inside a write that stores vectors: the file is still bound to our embedder.

        Checked under the write lock, so no reset and re-bind by another
        process can slip in between the check and the vectors (microseconds:
        two rows of ``meta`` by primary key). After a reset elsewhere the first
        writer binds its model again.
        """
        if self._binding is not None:
            self._ensure_binding(con, self._binding)

    def bound_embedder(self) -> tuple[str, int] | None:
        """The ``(model, dim)`` recorded in the file, if any."""
        with self._read() as con:
            rows = dict(
                con.execute(
                    "SELECT key, value FROM meta WHERE key IN ('embedder_model', 'embedder_dim')"
                ).fetchall()
            )
        if "embedder_model" not in rows:
            return None
        return rows["embedder_model"], int(rows["embedder_dim"])

    # -- writes ------------------------------------------------------------------------

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
                        "created_at) SELECT ?, rowid, 'related', ? FROM memories "
                        "WHERE id = ? AND owner = ?",
                        (rowid, now, link, owner),
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
                "failure_messages f WHERE f.failure_rowid = e.rowid) FROM extraction_failures e "
                f"WHERE {clause}{resolved} ORDER BY rowid DESC",
                [v for _, v in scope.items()],
            ).fetchall()
        return [
            {"id": r[0], "error": r[1], "created_at": r[2], "resolved_at": r[3], "messages": r[4]}
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

    @staticmethod
    def _insert_history(con: sqlite3.Connection, event: HistoryEvent) -> None:
        cur = con.execute(
            "INSERT INTO history(memory_id, event, version, old_memory, new_memory, "
            "old_metadata, new_metadata, actor, reason, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                event.memory_id,
                event.event,
                event.version,
                event.old_memory,
                event.new_memory,
                None if event.old_metadata is None else json.dumps(event.old_metadata),
                None if event.new_metadata is None else json.dumps(event.new_metadata),
                event.actor,
                event.reason,
                event.created_at,
            ),
        )
        event.id = cur.lastrowid

    def _live_row(self, con: sqlite3.Connection, memory_id: str) -> MemoryRow:
        row = con.execute(
            f"SELECT {_COLS} FROM memories m WHERE m.id = ? AND m.deleted_at IS NULL",
            (memory_id,),
        ).fetchone()
        if row is None:
            raise MemoryNotFoundError(memory_id)
        return self._hydrate(con, [row])[0]

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
        version: int,
        seq: int,
        now: str,
    ) -> None:
        try:
            con.execute(
                "UPDATE memories SET text = ?, hash = ?, metadata = ?, updated_at = ?, "
                "version = ?, deleted_at = NULL, seq = ? WHERE id = ?",
                (
                    text,
                    hash,
                    json.dumps(metadata, ensure_ascii=False),
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
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Change text and/or metadata of a live memory, writing an UPDATE event."""
        now = utc_now()
        with self._write() as con:
            with self._translate():
                old = self._live_row(con, memory_id)
                seq = self._bump(con)
            self._set_content(
                con,
                memory_id,
                text=text,
                hash=hash,
                embedding=embedding,
                terms=terms,
                entities=entities,
                metadata=metadata,
                version=old.version + 1,
                seq=seq,
                now=now,
            )
            event = update_event(old, text, metadata, actor, reason, now)
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
                version=new_version,
                seq=seq,
                now=now,
            )
            event = restore_event(plan, old, new_version, actor, now)
            with self._translate():
                self._insert_history(con, event)
                new = self._live_row(con, plan.memory_id)
        return new, event

    def purge(self, *, memory_id: str | None = None, scope: Scope | None = None) -> int:
        """Erase memories for good, with everything derived from them; returns how many.

        :meth:`plan_purge`, then the re-index terms, then :meth:`apply_purge`
        (planned again if a write came between). ``Memory.purge`` runs the same
        steps as a flow.
        """
        return purge_with(self, memory_id=memory_id, scope=scope)

    def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> ErasurePlan:
        """What a purge of one memory or of a scope erases (stores/_erasure.py)."""
        with self._read() as con:
            facts = self._erasure_facts(con, memory_id, scope)
        return plan_erasure(facts, memory_id=memory_id, scope=scope)

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """Execute a purge plan in one transaction, then scrub the file.

        The facts are read again under the write lock; a plan they no longer
        give raises ConflictError. Afterwards the keyword index is rewritten
        and the WAL truncated, and ``secure_delete`` has zeroed the freed
        content, so the erased text is in no page, free page or log.
        """
        check_terms(plan, terms)
        with self._write() as con, self._translate():
            now = plan_erasure(
                self._erasure_facts(con, plan.memory_id, plan.scope),
                memory_id=plan.memory_id,
                scope=plan.scope,
            )
            if now != plan:
                raise ConflictError("what the purge covers changed since it was planned")
            if not plan.touched:
                return 0
            seq = self._bump(con)

            def each(sql: str, values: Sequence[Any]) -> None:
                if values:
                    con.execute(
                        sql.format(ids="(SELECT value FROM json_each(?))"),
                        (json.dumps(list(values)),),
                    )

            each("DELETE FROM history WHERE memory_id IN {ids}", plan.memory_ids)
            for table, column in (
                ("memory_vectors", "memory_rowid"),
                ("memory_entities", "memory_rowid"),
                ("memory_sources", "memory_rowid"),
                ("memory_context", "memory_rowid"),
                ("memory_scope", "memory_rowid"),
                ("memory_links", "from_rowid"),
                ("memory_links", "to_rowid"),
                ("memory_fts", "rowid"),
                ("memories", "rowid"),
            ):
                each(f"DELETE FROM {table} WHERE {column} IN {{ids}}", plan.memory_rowids)
            for table in ("memory_sources", "memory_context", "failure_messages"):
                each(f"DELETE FROM {table} WHERE message_rowid IN {{ids}}", plan.messages)
            each("DELETE FROM failure_messages WHERE failure_rowid IN {ids}", plan.failures)
            each("DELETE FROM extraction_failures WHERE rowid IN {ids}", plan.failures)
            each("DELETE FROM messages WHERE rowid IN {ids}", plan.messages)
            # Stamped with the new seq as well as covered by the epoch bump below,
            # so a cache that somehow kept its epoch still re-reads them.
            con.executemany(
                "UPDATE memory_fts SET terms = ? WHERE rowid = ?",
                [(t, rowid) for rowid, t in sorted(terms.items())],
            )
            con.executemany(
                "UPDATE memories SET seq = ? WHERE rowid = ?", [(seq, r) for r in sorted(terms)]
            )
            each("DELETE FROM memory_entities WHERE entity_rowid IN {ids}", plan.entities)
            each("DELETE FROM entities WHERE rowid IN {ids}", plan.entities)
            # Rows that vanish cannot be seen by a catch-up by seq: every process
            # drops its caches when the epoch moves.
            con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
        self._scrub()
        return len(plan.memory_rowids)

    def _erasure_facts(
        self, con: sqlite3.Connection, memory_id: str | None, scope: Scope | None
    ) -> ErasureFacts:
        """The provenance rows around what a purge names (see ErasureFacts)."""

        def rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in con.execute(sql, params).fetchall()]

        def ids(values: Any) -> str:
            return json.dumps(sorted(set(values)))

        inside = "(SELECT value FROM json_each(?))"
        scope_messages: list[int] = []
        scope_failures: list[int] = []
        if memory_id is not None:
            memories = rows("SELECT rowid, id, owner FROM memories WHERE id = ?", memory_id)
            if not memories:
                raise MemoryNotFoundError(memory_id)
        else:
            assert scope is not None
            clause, params = _scope_clause(scope)
            memories = rows(
                f"SELECT m.rowid, m.id, m.owner FROM memories m WHERE {clause}", *params
            )
            exact = " AND ".join(f"{k} = ?" for k, _ in scope.items())
            values = [v for _, v in scope.items()]
            scope_messages = [
                r[0] for r in rows(f"SELECT rowid FROM messages WHERE {exact}", *values)
            ]
            scope_failures = [
                r[0] for r in rows(f"SELECT rowid FROM extraction_failures WHERE {exact}", *values)
            ]
        targets = ids(r[0] for r in memories)
        sources = rows(
            "SELECT memory_rowid, message_rowid FROM memory_sources WHERE memory_rowid IN "
            f"{inside}",
            targets,
        )
        direct = ids([m for _, m in sources] + scope_messages)
        kept = rows(
            "SELECT failure_rowid, message_rowid FROM failure_messages WHERE failure_rowid IN "
            f"(SELECT failure_rowid FROM failure_messages WHERE message_rowid IN {inside}) "
            f"OR failure_rowid IN {inside}",
            direct,
            ids(scope_failures),
        )
        sources += rows(
            "SELECT memory_rowid, message_rowid FROM memory_sources WHERE message_rowid IN "
            f"{inside}",
            ids(m for _, m in kept),
        )
        candidates = ids([m for _, m in sources] + scope_messages + [m for _, m in kept])
        context = rows(
            "SELECT c.memory_rowid, c.message_rowid, g.content FROM memory_context c "
            "JOIN messages g ON g.rowid = c.message_rowid WHERE c.memory_rowid IN "
            f"(SELECT memory_rowid FROM memory_context WHERE message_rowid IN {inside}) "
            "ORDER BY c.memory_rowid, c.message_rowid",
            candidates,
        )
        neighbours = [
            NeighbourFacts(rowid, text, terms or "", [(m, c) for r, m, c in context if r == rowid])
            for rowid, text, terms in rows(
                "SELECT m.rowid, m.text, f.terms FROM memories m LEFT JOIN memory_fts f "
                f"ON f.rowid = m.rowid WHERE m.rowid IN {inside} ORDER BY m.rowid",
                ids(r for r, _, _ in context),
            )
        ]
        entity_links = rows(
            "SELECT entity_rowid, memory_rowid FROM memory_entities WHERE entity_rowid IN "
            f"(SELECT entity_rowid FROM memory_entities WHERE memory_rowid IN {inside})",
            targets,
        )
        orphans = rows(
            f"SELECT e.rowid FROM entities e WHERE e.owner IN {inside} AND NOT EXISTS "
            "(SELECT 1 FROM memory_entities x WHERE x.entity_rowid = e.rowid)",
            ids(r[2] for r in memories),
        )
        return ErasureFacts(
            memories=[(int(r[0]), str(r[1]), str(r[2])) for r in memories],
            scope_messages=scope_messages,
            scope_failures=scope_failures,
            sources=[(int(a), int(b)) for a, b in sources],
            failure_messages=[(int(a), int(b)) for a, b in kept],
            neighbours=neighbours,
            entity_links=[(int(a), int(b)) for a, b in entity_links],
            orphan_entities=[int(r[0]) for r in orphans],
        )

    def _scrub(self) -> None:
        """Leave no copy of erased text in FTS segments or the write-ahead log."""
        con = self._conn()
        with self._write() as wcon, self._translate():
            wcon.execute("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
        with self._translate():
            for _ in range(100):
                busy, _log, _done = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    return
                time.sleep(0.05)
        log.warning(
            "could not truncate the WAL of %s (other connections kept reading); the erased "
            "text may stay in it until the next checkpoint",
            self.path,
        )

    def import_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """Write exported rows back in one transaction; returns the count."""
        with self._write() as con, self._translate():
            seq = self._bump(con)
            self._guard_binding(con)
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
                        "created_at) SELECT ?, rowid, 'related', ? FROM memories WHERE id = ?",
                        (rowids[m.id], m.updated_at, link),
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
            con.execute("DELETE FROM meta WHERE key IN ('embedder_model', 'embedder_dim')")
            con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
        self._scrub()

    # -- reads -------------------------------------------------------------------------

    def _hydrate(self, con: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> list[MemoryRow]:
        """Turn raw ``_COLS`` rows into MemoryRows with sessions and links filled in."""
        out: list[MemoryRow] = []
        by_rowid: dict[int, MemoryRow] = {}
        for r in rows:
            row = MemoryRow(
                id=r[1],
                text=r[2],
                hash=r[3],
                user_id=r[4],
                agent_id=r[5],
                run_id=r[6],
                actor_id=r[7],
                role=r[8],
                attributed_to=r[9],
                memory_type=r[10],
                metadata=json.loads(r[11]),
                created_at=r[12],
                updated_at=r[13],
                observed_at=r[14],
                expires_at=r[15],
                deleted_at=r[16],
                version=r[17],
            )
            out.append(row)
            by_rowid[r[0]] = row
        for chunk in _chunks(list(by_rowid), 500):
            marks = ",".join("?" * len(chunk))
            for rowid, kind, value in con.execute(
                f"SELECT memory_rowid, kind, value FROM memory_scope WHERE memory_rowid IN "
                f"({marks}) ORDER BY created_at, value",
                chunk,
            ):
                target = by_rowid[rowid]
                (target.run_ids if kind == "run_id" else target.agent_ids).append(value)
            for rowid, linked in con.execute(
                f"SELECT l.from_rowid, m.id FROM memory_links l JOIN memories m "
                f"ON m.rowid = l.to_rowid WHERE l.from_rowid IN ({marks}) "
                "UNION SELECT l.to_rowid, m.id FROM memory_links l JOIN memories m "
                f"ON m.rowid = l.from_rowid WHERE l.to_rowid IN ({marks}) ORDER BY 2",
                [*chunk, *chunk],
            ):
                by_rowid[rowid].linked_ids.append(linked)
        return out

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

    def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """One memory by public id, or ``None``."""
        extra = "" if include_deleted else " AND m.deleted_at IS NULL"
        with self._read() as con:
            row = con.execute(
                f"SELECT {_COLS} FROM memories m WHERE m.id = ?{extra}", (memory_id,)
            ).fetchone()
            return None if row is None else self._hydrate(con, [row])[0]

    def _where(self, scope: Scope, where: Node | None) -> tuple[str, list[Any]]:
        live, params = _live_clause(utc_now())
        clause, scope_params = _scope_clause(scope)
        sql = f"{live} AND {clause}"
        params += scope_params
        if where is not None:
            fsql, fparams = compile_sqlite(where)
            sql += f" AND ({fsql})"
            params += fparams
        return sql, params

    def list_memories(
        self, scope: Scope, where: Node | None, *, limit: int, offset: int = 0
    ) -> list[MemoryRow]:
        """Live memories of a scope, newest first (ties by insertion order)."""
        sql, params = self._where(scope, where)
        with self._read() as con:
            rows = con.execute(
                f"SELECT {_COLS} FROM memories m WHERE {sql} "
                "ORDER BY m.created_at DESC, m.rowid DESC LIMIT ? OFFSET ?",
                [*params, limit, offset],
            ).fetchall()
            return self._hydrate(con, rows)

    def history(self, memory_id: str) -> list[HistoryEvent]:
        """Every event of a memory, oldest first."""
        with self._read() as con:
            return self._history(con, memory_id)

    @staticmethod
    def _history(con: sqlite3.Connection, memory_id: str) -> list[HistoryEvent]:
        rows = con.execute(
            "SELECT rowid, memory_id, event, version, old_memory, new_memory, old_metadata, "
            "new_metadata, actor, reason, created_at FROM history WHERE memory_id = ? "
            "ORDER BY rowid",
            (memory_id,),
        ).fetchall()
        return [
            HistoryEvent(
                id=r[0],
                memory_id=r[1],
                event=r[2],
                version=r[3],
                old_memory=r[4],
                new_memory=r[5],
                old_metadata=None if r[6] is None else json.loads(r[6]),
                new_metadata=None if r[7] is None else json.loads(r[7]),
                actor=r[8],
                reason=r[9],
                created_at=r[10],
            )
            for r in rows
        ]

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

    # -- vector search -------------------------------------------------------------------

    def _scope_cache(self, scope: Scope) -> _Cache | None:
        """The caught-up cache for the scope's primary id; None before any vector exists."""
        kind, value = scope.items()[0]
        return self._refresh(kind, value)

    def _allowed(
        self, con: sqlite3.Connection, scope: Scope, where: Node | None, sql: str, params: list[Any]
    ) -> np.ndarray[Any, np.dtype[np.int64]] | None:
        """Rowids a narrowed search may return; None when the cache's scope is the scope."""
        if not narrowed(scope, where):
            return None
        return np.fromiter(
            (r[0] for r in con.execute(f"SELECT m.rowid FROM memories m WHERE {sql}", params)),
            dtype=np.int64,
        )

    def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[tuple[MemoryRow, float]]:
        """The ``k`` live memories of the scope most similar to ``query`` (cosine)."""
        cache = self._scope_cache(scope)
        if cache is None:
            return []
        sql, params = self._where(scope, where)
        with self._read() as con:
            allowed = self._allowed(con, scope, where, sql, params)
            if allowed is not None and allowed.size == 0:
                return []
            want = k
            while True:
                keys, scores = cache.index.search(query, want, allowed=allowed)
                if keys.size == 0:
                    return []
                found = self._rows_by_rowid(con, keys, sql, params)
                hits = [
                    (found[int(key)], float(score))
                    for key, score in zip(keys, scores, strict=True)
                    if int(key) in found
                ]
                # Rows expired or deleted since the cache last caught up are dropped by
                # the SQL above; ask for more until k survive or the scope runs out.
                if len(hits) >= k or keys.size < want:
                    return hits[:k]
                want *= 2

    def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
    ) -> list[Candidate]:
        """Candidates for a query: the vector top ``n``, the BM25 top ``n``, entity links.

        Only live memories in scope; the memories linked to the query's
        (normalised) entities are included.

        Memories of an entity linked to more than ``n`` memories are not added
        as candidates (such an entity says little about any one of them); they
        still count for candidates found otherwise.
        """
        cache = self._scope_cache(scope)
        if cache is None:
            return []
        sql, params = self._where(scope, where)
        with self._read() as con:
            allowed = self._allowed(con, scope, where, sql, params)
            if allowed is not None and allowed.size == 0:
                return []
            sem_keys, _ = cache.index.search(query, n, allowed=allowed)
            pool = Pool(n, allowed, sem_keys.tolist(), cache.bm25, terms)
            if entities:
                marks = ",".join("?" * len(entities))
                # A user's memories only link to that user's entities (the owner key).
                owner_sql, owner_params = (
                    (" AND e.owner = ?", [scope.owner]) if scope.user_id is not None else ("", [])
                )
                ents = con.execute(
                    "SELECT e.rowid, e.normalized, (SELECT count(*) FROM memory_entities x "
                    "JOIN memories m ON m.rowid = x.memory_rowid "
                    f"WHERE x.entity_rowid = e.rowid AND {sql}) FROM entities e "
                    f"WHERE e.normalized IN ({marks}){owner_sql}",
                    [*params, *entities, *owner_params],
                ).fetchall()
                links: list[tuple[int, str, int]] = []
                for erow, name, degree in ents:
                    if adds_candidates(degree, n):
                        found_links = con.execute(
                            "SELECT memory_rowid FROM memory_entities WHERE entity_rowid = ?",
                            (erow,),
                        ).fetchall()
                    else:
                        # Too common to add candidates: only mark those found otherwise.
                        found_links = []
                        for chunk in _chunks(pool.found_otherwise, 500):
                            found_links += con.execute(
                                "SELECT memory_rowid FROM memory_entities WHERE entity_rowid = ? "
                                f"AND memory_rowid IN ({','.join('?' * len(chunk))})",
                                (erow, *chunk),
                            ).fetchall()
                    links += [(mrow, name, degree) for (mrow,) in found_links]
                pool.link(links)
            keys = pool.keys()
            if keys is None:
                return []
            # Entity links may point outside the scope: the SQL of _rows_by_rowid
            # (scope, filters, liveness) decides what survives. Vectors are in this
            # process: the cosine of every candidate comes from the index.
            cos_keys, cos = cache.index.search(query, keys.size, allowed=keys)
            found = self._rows_by_rowid(con, keys, sql, params)
        cosine = dict(zip(cos_keys.tolist(), cos.tolist(), strict=True))
        return pool.build(keys, ((key, row, cosine.get(key, 0.0)) for key, row in found.items()))

    def _rows_by_rowid(
        self,
        con: sqlite3.Connection,
        keys: np.ndarray[Any, np.dtype[np.int64]],
        sql: str,
        params: list[Any],
    ) -> dict[int, MemoryRow]:
        found: dict[int, MemoryRow] = {}
        for chunk in _chunks([int(x) for x in keys], 500):
            # NOT INDEXED: look the rows up by rowid; without statistics SQLite
            # would otherwise scan the scope's index for the other conditions.
            raw = con.execute(
                f"SELECT {_COLS} FROM memories m NOT INDEXED WHERE m.rowid IN "
                f"({','.join('?' * len(chunk))}) AND {sql}",
                [*chunk, *params],
            ).fetchall()
            for r, row in zip(raw, self._hydrate(con, raw), strict=True):
                found[int(r[0])] = row
        return found

    def _refresh(self, kind: str, value: str) -> _Cache | None:
        """The cache for one primary scope id, caught up with every committed write.

        The common case costs one read of ``meta`` and no lock held across
        I/O: the cache is current. Otherwise the scope's own lock serialises
        its catch-up, so a cold or slow scope never holds up searches of
        other scopes (the store-wide lock only guards the dict).
        """
        con = self._conn()
        with self._translate():
            meta = dict(con.execute(_META).fetchall())
        bound = self._bound_in(meta)
        if bound is None:
            return None  # nothing bound since the last reset: no vectors anywhere
        epoch, seq = meta["epoch"], int(meta["seq"])
        key = (kind, value)
        table = self._table
        with table.lock:
            newest = table.see(epoch)
            cache = table.get(key)
            if cache is None or cache.epoch != epoch or cache.index.dim != bound[1]:
                cache = _Cache(bound[1], epoch)
                if epoch == newest:
                    table.put(key, cache)
            else:
                table.touch(key)
            if cache.seq >= seq:
                return cache
        with cache.lock:
            current = self._catch_up(cache, kind, value)
        with table.lock:
            if current is not cache and current.epoch == table.see(current.epoch):
                table.put(key, current)
            table.evict()
        return current

    def _bound_in(self, meta: dict[str, str]) -> tuple[str, int] | None:
        """The binding in a ``meta`` read; refuses one other than this process's."""
        if "embedder_model" not in meta:
            return None
        if self._binding is not None:
            self._refuse_other((meta["embedder_model"], meta.get("embedder_dim")), self._binding)
        return meta["embedder_model"], int(meta["embedder_dim"])

    def _catch_up(self, cache: _Cache, kind: str, value: str) -> _Cache:
        """Under ``cache.lock``: apply the rows changed since ``cache.seq``; returns the cache.

        ``meta`` and the rows are read in one snapshot, so the cache ends
        exactly at a committed state. If that snapshot is of another epoch (a
        purge or reset since the caller looked) or another binding, a new
        cache is filled from scratch instead and returned.
        """
        if kind == "user_id":
            member = "m.user_id = ?"
            params: list[Any] = [value]
        else:
            member = (
                f"(m.{kind} = ? OR m.rowid IN (SELECT memory_rowid FROM memory_scope "
                "WHERE kind = ? AND value = ?))"
            )
            params = [value, kind, value]
        rows: list[Any] = []
        with self._read() as con:
            meta = dict(con.execute(_META).fetchall())
            bound = self._bound_in(meta)
            # Unbound (reset, nothing written since): no vectors to read either.
            dim = cache.index.dim if bound is None else bound[1]
            if meta["epoch"] != cache.epoch or dim != cache.index.dim:
                cache = _Cache(dim, meta["epoch"])
            seq = int(meta["seq"])
            if cache.seq < seq:
                rows = con.execute(
                    "SELECT m.rowid, m.deleted_at IS NULL, v.embedding, f.terms FROM memories m "
                    "JOIN memory_vectors v ON v.memory_rowid = m.rowid "
                    "LEFT JOIN memory_fts f ON f.rowid = m.rowid "
                    f"WHERE m.seq > ? AND m.seq <= ? AND {member}",
                    [cache.seq, seq, *params],
                ).fetchall()
        live = [r for r in rows if r[1]]
        cache.apply(
            [r[0] for r in rows if not r[1]],
            [r[0] for r in live],
            [(r[3] or "").split() for r in live],
            np.frombuffer(b"".join(r[2] for r in live), dtype=F32).reshape(len(live), -1)
            if live
            else None,
        )
        cache.seq = max(cache.seq, seq)
        return cache

    def close(self) -> None:
        """Close every connection this store opened (from any thread)."""
        self._closed = True
        with self._conns_lock:
            for con in self._conns:
                with contextlib.suppress(sqlite3.Error):
                    con.close()
            self._conns.clear()
        with self._table.lock:
            self._table.clear()


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _split_sql(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside literals)."""
    statements: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        stripped = line.split("--", 1)[0]
        buf.append(stripped)
        if stripped.rstrip().endswith(";"):
            statement = "\n".join(buf).strip()
            if statement.strip(";").strip():
                statements.append(statement)
            buf = []
    return statements
