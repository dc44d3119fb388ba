"""The PostgreSQL store: the same data model and semantics as SQLite, for many processes.

Every store operation is written once, as a generator (a *transaction
flow*) that yields SQL statements (:class:`_Q`) and receives their rows;
:class:`PostgresStore` drives the flows on a psycopg connection pool with
blocking calls, :class:`AsyncPostgresStore` on an async pool without
blocking the event loop. One flow is one transaction: a write runs in READ
COMMITTED and is retried whole when PostgreSQL breaks a deadlock or a
serialisation conflict; a read runs in REPEATABLE READ READ ONLY, so its
statements see one snapshot.

Concurrency comes from the database, not from read-modify-write in Python:

- exact repeats: a partial unique index on ``(partition, hash) WHERE
  deleted_at IS NULL`` (the caller's visible scope, see
  :func:`~engramdb.stores.base.visible_scope`) and ``INSERT … ON CONFLICT
  DO NOTHING``; a writer that loses the race attaches its session to the
  winner's row;
- entities: ``INSERT … ON CONFLICT DO NOTHING`` on ``(owner, normalized)``;
- lock order: a write takes the owner's advisory lock (shared; purge takes it
  exclusive, because it deletes the owner's orphaned entities), then inserts
  entities in key order, then touches memories in ``(owner, hash)`` order,
  so two writers cannot wait on each other in a cycle;
- updates lock the memory row (``FOR UPDATE``) so versions never fork.

Vectors are a ``vector(dim)`` column searched through an HNSW index
(``vector_cosine_ops``) with pgvector's iterative scans, so scope and filter
conditions cut the candidates without starving the result; an exact query
takes over when the index returns fewer rows than asked.

Keyword search keeps the SQLite backend's ranking exactly: the same
in-memory :class:`~engramdb.core.bm25.BM25Index` per primary scope id, over
the same stored terms. A cache catches up by reading rows whose ``txid``
(the ``xid8`` of the transaction that last changed them) belongs to a
transaction that had not ended at the snapshot it last read at (``txid >=
xmax`` or in ``xip``), so nothing committed late can be missed (a plain
sequence would be: numbers are taken in one order and committed in
another) and a long transaction elsewhere does not make every search read
again what it holds back. Purge and reset bump ``meta.epoch``, which drops
every cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import numpy as np

from engramdb._time import utc_now
from engramdb.core.filters import Node
from engramdb.core.filters_pg import compile_postgres
from engramdb.errors import (
    ConflictError,
    DuplicateMemoryError,
    EmbedderMismatchError,
    MemoryNotFoundError,
    SchemaVersionError,
    StoreError,
    ValidationError,
)
from engramdb.stores._erasure import (
    PLAN_ATTEMPTS,
    ErasureFacts,
    ErasurePlan,
    NeighbourFacts,
    check_terms,
    plan_erasure,
    purge_with,
    reindexed_terms,
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
from engramdb.stores.kernel.candidates import Pool, narrowed
from engramdb.stores.kernel.dedup import (
    first_occurrences,
    in_input_order,
    repeated,
    sessions_to_attach,
    stored,
)
from engramdb.stores.kernel.imports import ImportedMemory, clash_error, imported, repeat_error
from engramdb.stores.postgres_schema import BOOTSTRAP, LATEST, MIGRATION_LOCK, MIGRATIONS

try:  # the optional dependency: pip install 'engramdb[postgres]'
    import psycopg
    import psycopg.errors as pg_errors
    from psycopg.adapt import Dumper, Loader
    from psycopg.types import TypeInfo
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'engramdb[postgres]'"
    ) from exc

__all__ = ["DEFAULT_SCHEMA", "AsyncPostgresStore", "PostgresStore"]

log = logging.getLogger("engramdb.store")

DEFAULT_SCHEMA = "engramdb"
"""The PostgreSQL schema holding the tables when no ``collection_name`` is given."""

T = TypeVar("T")

_COLS = (
    "m.rowid, m.id, m.text, m.hash, m.user_id, m.agent_id, m.run_id, m.actor_id, m.role, "
    "m.attributed_to, m.memory_type, m.metadata, m.created_at, m.updated_at, m.observed_at, "
    "m.expires_at, m.deleted_at, m.version"
)
_NCOLS = 21
"""Columns of ``_Flows.cols``: extra columns of a query come after these."""
_WRITE_RETRIES = 8
_VACUUM_FAILED = (
    "the purge is committed, but VACUUM failed (%s): dead row versions may keep the "
    "erased text until the next VACUUM of the store's tables"
)
_EMBEDDER_KEYS = ("embedder_model", "embedder_dim")


@dataclass(frozen=True)
class _Q:
    """One statement of a flow; the flow receives what ``fetch`` asks for."""

    sql: str
    params: Sequence[Any] | dict[str, Any] | None = None
    fetch: Literal["all", "one", "none", "rowcount"] = "all"


Tx = Generator[_Q, Any, T]
"""A transaction flow: yields statements, returns the operation's result."""


# -- values -------------------------------------------------------------------------------


def _dt(stamp: str | None) -> datetime | None:
    return None if stamp is None else datetime.fromisoformat(stamp)


def _iso(moment: datetime | None) -> str | None:
    # The same text every backend returns: UTC, microseconds, "+00:00".
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


class _VectorDumper(Dumper):
    """numpy arrays as pgvector's binary ``vector``: int16 dim, int16 0, big-endian floats."""

    format = psycopg.pq.Format.BINARY

    def dump(self, obj: Any) -> bytes:
        arr = np.ascontiguousarray(obj, dtype=">f4").reshape(-1)
        return struct.pack(">HH", arr.size, 0) + arr.tobytes()


class _VectorLoader(Loader):
    """pgvector's text form ``[1,2,3]`` as a float32 array."""

    def load(self, data: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
        text = bytes(data).decode("ascii").strip("[]")
        return np.array(text.split(","), dtype=np.float32) if text else np.empty(0, np.float32)


def _vector_text(vec: np.ndarray[Any, Any]) -> str:
    # In arrays (unnest) vectors travel as text; repr of float32 round-trips exactly.
    return "[" + ",".join(map(repr, np.asarray(vec, dtype=np.float32).tolist())) + "]"


def _register_vector(con: Any, info: TypeInfo) -> None:
    dumper = type("VectorDumper", (_VectorDumper,), {"oid": info.oid})
    con.adapters.register_dumper(np.ndarray, dumper)
    con.adapters.register_loader(info.oid, _VectorLoader)


# -- scope and liveness ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Snapshot:
    """What a catch-up has read: every transaction below ``xmax`` not in ``xip`` had ended.

    The next catch-up reads only rows stamped by a transaction that had not
    ended then: ``txid >= xmax`` or ``txid`` in ``xip``. A long transaction
    stays in ``xip`` (an index probe), and what it holds back is not read
    again and again (reading every ``txid >= xmin`` was: all the changes
    since it began, on every search).
    """

    xmax: int
    xip: frozenset[int]

    @staticmethod
    def parse(text: str) -> _Snapshot:
        """From ``pg_snapshot``'s text form ``xmin:xmax:xip,...``."""
        _, xmax, xip = text.split(":")
        return _Snapshot(int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def covers(self, other: _Snapshot) -> bool:
        """Whether every transaction that had ended in ``other`` had ended in this one."""
        return other.xmax <= self.xmax and all(x in other.xip or x >= other.xmax for x in self.xip)


class _Cache(ScopeCache):
    """The keyword index of one primary scope id, and the snapshot it has read up to."""

    __slots__ = ("snapshot",)

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: _Snapshot | None = None


_REBIND = "engramdb: the embedder binding changed"
"""Text of the error a binding guard raises in SQL (see ``_Flows.guard_binding``)."""


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _Flows:
    """Every store operation as a transaction flow, plus the state the flows share.

    Holds no connection: :class:`PostgresStore` and :class:`AsyncPostgresStore`
    drive these flows, and share one instance (and so one set of caches).
    """

    def __init__(self, schema: str, max_cached_docs: int, ef_search: int) -> None:
        self.schema = schema
        self.s = '"' + schema.replace('"', '""') + '"'
        self.ef_search = ef_search
        self.iterative_scan = True
        # The embedder this process bound; every vector write and search checks
        # the store's binding against it (another process may reset and re-bind).
        self.binding: tuple[str, int] | None = None
        # Its lock guards the table of caches and the epoch; never held across I/O.
        self.caches: ScopeCaches[_Cache] = ScopeCaches(
            max_cached_docs, epoch="-1", lock=threading.RLock()
        )
        self.caught_up_rows = 0
        """Rows read by keyword-cache catch-ups so far (a figure for tests and benchmarks)."""

    def t(self, name: str) -> str:
        """A table of this store, schema-qualified."""
        return f"{self.s}.{name}"

    def owner_lock(self, owner: str, *, exclusive: bool = False) -> _Q:
        # Writers of an owner share the lock; purge takes it alone, because it
        # deletes the owner's entities that no memory links any more.
        fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        return _Q(
            f"SELECT {fn}(hashtextextended(%s, 0))", (f"{self.schema}\x1f{owner}",), fetch="none"
        )

    def scope_clause(self, scope: Scope) -> tuple[str, list[Any]]:
        """SQL over alias ``m`` matching every id of ``scope`` (attached sessions count)."""
        parts: list[str] = []
        params: list[Any] = []
        for kind, value in scope.items():
            if kind == "user_id":
                parts.append("m.user_id = %s")
                params.append(value)
            else:
                parts.append(
                    f"(m.{kind} = %s OR EXISTS (SELECT 1 FROM {self.t('memory_scope')} s WHERE "
                    "s.memory_rowid = m.rowid AND s.kind = %s AND s.value = %s))"
                )
                params.extend([value, kind, value])
        return " AND ".join(parts) or "TRUE", params

    def where(self, scope: Scope, where: Node | None) -> tuple[str, list[Any]]:
        clause, params = self.scope_clause(scope)
        sql = f"m.deleted_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > %s) AND {clause}"
        params = [datetime.now(UTC), *params]
        if where is not None:
            fsql, fparams = compile_postgres(where, scope_table=self.t("memory_scope"))
            sql += f" AND ({fsql})"
            params += fparams
        return sql, params

    # -- schema ----------------------------------------------------------------------------

    def migrate(self) -> Tx[None]:
        yield _Q("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,), fetch="none")
        ext = yield _Q("SELECT extversion FROM pg_extension WHERE extname = 'vector'", fetch="one")
        if ext is None:
            try:
                yield _Q("CREATE EXTENSION IF NOT EXISTS vector", fetch="none")
            except psycopg.Error as exc:
                raise StoreError(
                    "the PostgreSQL database lacks the pgvector extension and this role may "
                    "not create it; run CREATE EXTENSION vector; as a superuser (or the "
                    f"database owner) once, then open the store again ({exc})"
                ) from exc
            ext = yield _Q(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'", fetch="one"
            )
        self.iterative_scan = _version(ext[0]) >= (0, 8)
        yield _Q(BOOTSTRAP.format(s=self.s), fetch="none")
        row = yield _Q(
            f"SELECT value FROM {self.t('meta')} WHERE key = 'schema_version'", fetch="one"
        )
        version = int(row[0]) if row else 0
        if version > LATEST:
            raise SchemaVersionError(
                f"PostgreSQL schema {self.schema!r} has engramdb schema version {version}, "
                f"newer than this engramdb understands ({LATEST}); upgrade engramdb to open it"
            )
        for step in range(version, LATEST):
            log.info("migrating PostgreSQL schema %s to version %d", self.schema, step + 1)
            yield _Q(MIGRATIONS[step].format(s=self.s), fetch="none")
            yield _Q(
                f"INSERT INTO {self.t('meta')} (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (str(step + 1),),
                fetch="none",
            )

    def read_binding(self) -> Tx[tuple[str, int] | None]:
        rows = yield _Q(
            f"SELECT key, value FROM {self.t('meta')} WHERE key = ANY(%s)", (list(_EMBEDDER_KEYS),)
        )
        found = dict(rows)
        if "embedder_model" not in found:
            return None
        return found["embedder_model"], int(found["embedder_dim"])

    def bind_embedder(self, model: str, dim: int) -> Tx[None]:
        bound = yield from self.read_binding()
        if bound is None:
            # First binding: serialise with other binders and type the column.
            yield _Q("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,), fetch="none")
            bound = yield from self.read_binding()
        if bound is None:
            yield _Q(
                f"INSERT INTO {self.t('meta')} (key, value) VALUES ('embedder_model', %s), "
                "('embedder_dim', %s)",
                (model, str(dim)),
                fetch="none",
            )
            typed = yield _Q(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = %s::regclass AND attname = 'embedding'",
                (self.t("memories"),),
                fetch="one",
            )
            if typed[0] != f"vector({dim})":
                yield _Q(
                    f"ALTER TABLE {self.t('memories')} ALTER COLUMN embedding "
                    f"TYPE vector({int(dim)})",
                    fetch="none",
                )
            yield _Q(
                "CREATE INDEX IF NOT EXISTS memories_embedding_hnsw ON "
                f"{self.t('memories')} USING hnsw (embedding vector_cosine_ops)",
                fetch="none",
            )
        elif bound != (model, dim):
            raise EmbedderMismatchError(
                f"PostgreSQL schema {self.schema!r} holds vectors from {bound[0]!r} "
                f"(dim {bound[1]}), but the configured embedder is {model!r} (dim {dim}); "
                "configure the same embedder, or export and re-import into a new store to "
                "re-embed (another process may have reset the store and bound another model)"
            )
        self.binding = (model, dim)

    def binding_lock(self, *, exclusive: bool = False) -> _Q:
        """Vector writes share it; reset takes it alone, so none straddles a reset."""
        fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        return _Q(
            f"SELECT {fn}(hashtextextended(%s, 0))", (f"{self.schema}\x1fbinding",), fetch="none"
        )

    def guard_binding(self, *, write: bool = True) -> Tx[None]:
        """The store is still bound to this process's embedder, at no round trip.

        A write (under the shared binding lock, taken before any row lock)
        fails when the binding is not ours -- absent after a reset, or another
        model's -- and the driver binds again (or raises
        EmbedderMismatchError) and reruns it; a read fails only on another
        model. The failure is a cast error raised in SQL, so the statement can
        be pipelined; the cast is of a column, which the planner cannot fold.
        """
        if self.binding is None:
            return
        if write:
            yield self.binding_lock()
        meta = self.t("meta")
        absent = "" if write else f"EXISTS (SELECT 1 FROM {meta} WHERE key = 'embedder_model') AND "
        yield _Q(
            f"SELECT (CASE WHEN {absent}(NOT EXISTS (SELECT 1 FROM {meta} WHERE key = "
            f"'embedder_model' AND value = %s) OR NOT EXISTS (SELECT 1 FROM {meta} WHERE key = "
            "'embedder_dim' AND value = %s)) THEN %s || key END)::int FROM "
            f"{meta} WHERE key = 'epoch'",
            (self.binding[0], str(self.binding[1]), _REBIND + ": "),
            fetch="none",
        )

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
        row = yield _Q(
            f"INSERT INTO {self.t('history')} (memory_id, event, version, old_memory, "
            "new_memory, old_metadata, new_metadata, actor, reason, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s) RETURNING rowid",
            (
                event.memory_id,
                event.event,
                event.version,
                event.old_memory,
                event.new_memory,
                _json(event.old_metadata),
                _json(event.new_metadata),
                event.actor,
                event.reason,
                _dt(event.created_at),
            ),
            fetch="one",
        )
        event.id = int(row[0])

    def add(
        self,
        memories: Sequence[NewMemory],
        messages: Sequence[NewMessage],
        scope: Scope,
        actor: str,
        source_rowids: Sequence[int],
        resolve_failure: int | None,
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
        for _ in range(_WRITE_RETRIES):
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
        links = [(rowids[m.hash], link) for m in added for link in m.links]
        if links:
            yield _Q(
                f"INSERT INTO {self.t('memory_links')} (from_rowid, to_rowid, kind, created_at) "
                f"SELECT u.f, m.rowid, 'related', %s FROM unnest(%s::bigint[], %s::text[]) "
                f"AS u(f, i) JOIN {self.t('memories')} m ON m.id = u.i AND m.owner = %s "
                "ORDER BY 1, 2 ON CONFLICT DO NOTHING",
                (ts, [p[0] for p in links], [p[1] for p in links], owner),
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
        got = yield _Q(
            f"INSERT INTO {self.t('history')} (memory_id, event, version, old_memory, "
            "new_memory, old_metadata, new_metadata, actor, reason, created_at) "
            "SELECT u.memory_id, u.event, u.version, u.old_memory, u.new_memory, "
            "u.old_metadata::jsonb, u.new_metadata::jsonb, u.actor, u.reason, u.created_at "
            "FROM unnest(%s::text[], %s::text[], %s::int[], %s::text[], %s::text[], %s::text[], "
            "%s::text[], %s::text[], %s::text[], %s::timestamptz[]) WITH ORDINALITY AS "
            "u(memory_id, event, version, old_memory, new_memory, old_metadata, new_metadata, "
            "actor, reason, created_at, n) ORDER BY u.n RETURNING rowid",
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
        params: list[Any] = [text, hash, _json(metadata), ts, version]
        if embedding is not None:
            params += [terms, np.asarray(embedding, dtype=np.float32)]
        try:
            done = yield _Q(
                f"UPDATE {self.t('memories')} SET text = %s, hash = %s, metadata = %s::jsonb, "
                f"updated_at = %s, version = %s, deleted_at = NULL, txid = pg_current_xact_id()"
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
        text: str,
        hash: str,
        embedding: np.ndarray[Any, Any] | None,
        terms: str,
        entities: Sequence[EntityRef],
        metadata: dict[str, Any],
        actor: str,
        reason: str | None,
    ) -> Tx[tuple[MemoryRow, HistoryEvent]]:
        ts = datetime.fromisoformat(utc_now())
        owner = yield from self.owner_of(memory_id)
        yield self.owner_lock(owner)
        if embedding is not None:
            yield from self.guard_binding()
            yield from self.upsert_entities(owner, entities, ts)
        old = yield from self.locked_row(memory_id, live=True)
        yield from self.set_content(
            old,
            owner,
            text=text,
            hash=hash,
            embedding=embedding,
            terms=terms,
            entities=entities,
            metadata=metadata,
            version=old.version + 1,
            ts=ts,
        )
        event = update_event(old, text, metadata, actor, reason, _iso(ts) or "")
        yield from self.insert_history(event)
        new = yield from self.get(memory_id, include_deleted=False)
        assert new is not None
        return new, event

    def delete(
        self, memory_id: str, actor: str, reason: str | None
    ) -> Tx[tuple[MemoryRow, HistoryEvent]]:
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

    def delete_scope(self, scope: Scope, actor: str) -> Tx[list[HistoryEvent]]:
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
        hash: str,
        embedding: np.ndarray[Any, Any] | None,
        terms: str,
        entities: Sequence[EntityRef],
        actor: str,
    ) -> Tx[tuple[MemoryRow, HistoryEvent]]:
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

    def plan_purge(self, memory_id: str | None, scope: Scope | None) -> Tx[ErasurePlan]:
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
            if values:
                yield _Q(
                    f"DELETE FROM {self.t(table)} WHERE {column} = ANY(%s)",
                    (list(values),),
                    fetch="none",
                )

        yield from delete("history", "memory_id", plan.memory_ids)
        for table, column in (
            ("memory_entities", "memory_rowid"),
            ("memory_sources", "memory_rowid"),
            ("memory_context", "memory_rowid"),
            ("memory_scope", "memory_rowid"),
            ("memory_links", "from_rowid"),
            ("memory_links", "to_rowid"),
            ("memories", "rowid"),
        ):
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
                    f"created_at) SELECT %s, rowid, 'related', %s FROM {self.t('memories')} "
                    "WHERE id = ANY(%s) ON CONFLICT DO NOTHING",
                    (rowids[m.id], _dt(m.updated_at), m.links),
                    fetch="none",
                )
        return len(rows)

    def reset(self) -> Tx[None]:
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

    # -- reads --------------------------------------------------------------------------------

    @property
    def cols(self) -> str:
        """The columns of a MemoryRow over alias ``m``: sessions and links as arrays.

        One query per read: the extra sessions and the links come as array
        columns, not as two more round trips.
        """
        scope, links, mems = self.t("memory_scope"), self.t("memory_links"), self.t("memories")
        sessions = (
            "ARRAY(SELECT s.value FROM {t} s WHERE s.memory_rowid = m.rowid AND s.kind = '{k}' "
            'ORDER BY s.created_at, s.value COLLATE "C")'
        )
        return (
            f"{_COLS}, {sessions.format(t=scope, k='run_id')}, "
            f"{sessions.format(t=scope, k='agent_id')}, "
            f"ARRAY(SELECT i FROM (SELECT x.id FROM {links} l JOIN {mems} x ON x.rowid = "
            f"l.to_rowid WHERE l.from_rowid = m.rowid UNION SELECT x.id FROM {links} l JOIN "
            f"{mems} x ON x.rowid = l.from_rowid WHERE l.to_rowid = m.rowid) AS u(i) "
            'ORDER BY i COLLATE "C")'
        )

    @staticmethod
    def rows(raw: Sequence[Sequence[Any]]) -> list[MemoryRow]:
        """Turn raw :attr:`cols` rows into MemoryRows."""
        return [
            MemoryRow(
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
                metadata=r[11],
                created_at=_iso(r[12]) or "",
                updated_at=_iso(r[13]) or "",
                observed_at=_iso(r[14]),
                expires_at=_iso(r[15]),
                deleted_at=_iso(r[16]),
                version=r[17],
                run_ids=list(r[18]),
                agent_ids=list(r[19]),
                linked_ids=list(r[20]),
            )
            for r in raw
        ]

    def get(self, memory_id: str, *, include_deleted: bool) -> Tx[MemoryRow | None]:
        extra = "" if include_deleted else " AND m.deleted_at IS NULL"
        row = yield _Q(
            f"SELECT {self.cols} FROM {self.t('memories')} m WHERE m.id = %s{extra}",
            (memory_id,),
            fetch="one",
        )
        if row is None:
            return None
        return self.rows([row])[0]

    def failure(
        self, failure_id: int
    ) -> Tx[tuple[Scope, list[tuple[int, NewMessage]], bool] | None]:
        row = yield _Q(
            f"SELECT user_id, agent_id, run_id, resolved_at FROM {self.t('extraction_failures')} "
            "WHERE rowid = %s",
            (failure_id,),
            fetch="one",
        )
        if row is None:
            return None
        msgs = yield _Q(
            f"SELECT m.rowid, m.role, m.content, m.name, m.observed_at FROM {self.t('messages')} m "
            f"JOIN {self.t('failure_messages')} f ON f.message_rowid = m.rowid "
            "WHERE f.failure_rowid = %s ORDER BY m.rowid",
            (failure_id,),
        )
        return (
            Scope(row[0], row[1], row[2]),
            [(int(r[0]), NewMessage(r[1], r[2], r[3], _iso(r[4]))) for r in msgs],
            row[3] is not None,
        )

    def failures(self, scope: Scope, include_resolved: bool) -> Tx[list[dict[str, Any]]]:
        clause = " AND ".join(f"{k} = %s" for k, _ in scope.items())
        resolved = "" if include_resolved else " AND resolved_at IS NULL"
        rows = yield _Q(
            f"SELECT rowid, error, created_at, resolved_at, (SELECT count(*) FROM "
            f"{self.t('failure_messages')} f WHERE f.failure_rowid = e.rowid) FROM "
            f"{self.t('extraction_failures')} e WHERE {clause}{resolved} ORDER BY rowid DESC",
            [v for _, v in scope.items()],
        )
        return [
            {
                "id": int(r[0]),
                "error": r[1],
                "created_at": _iso(r[2]),
                "resolved_at": _iso(r[3]),
                "messages": int(r[4]),
            }
            for r in rows
        ]

    def recent_messages(self, scope: Scope, limit: int) -> Tx[list[NewMessage]]:
        clause = " AND ".join(f"{k} = %s" for k, _ in scope.items())
        rows = yield _Q(
            f"SELECT role, content, name, observed_at, rowid FROM {self.t('messages')} "
            f"WHERE {clause} ORDER BY rowid DESC LIMIT %s",
            [*(v for _, v in scope.items()), limit],
        )
        return [NewMessage(r[0], r[1], r[2], _iso(r[3]), rowid=int(r[4])) for r in reversed(rows)]

    def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> Tx[set[str]]:
        if not hashes:
            return set()
        clause, params = self.scope_clause(visible)
        rows = yield _Q(
            f"SELECT DISTINCT m.hash FROM {self.t('memories')} m WHERE m.deleted_at IS NULL "
            f"AND m.hash = ANY(%s) AND {clause}",
            (list(hashes), *params),
        )
        return {r[0] for r in rows}

    def list_memories(
        self, scope: Scope, where: Node | None, limit: int, offset: int
    ) -> Tx[list[MemoryRow]]:
        sql, params = self.where(scope, where)
        rows = yield _Q(
            f"SELECT {self.cols} FROM {self.t('memories')} m WHERE {sql} "
            "ORDER BY m.created_at DESC, m.rowid DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return self.rows(rows)

    def history(self, memory_id: str) -> Tx[list[HistoryEvent]]:
        rows = yield _Q(
            "SELECT rowid, memory_id, event, version, old_memory, new_memory, old_metadata, "
            f"new_metadata, actor, reason, created_at FROM {self.t('history')} "
            "WHERE memory_id = %s ORDER BY rowid",
            (memory_id,),
        )
        return [
            HistoryEvent(
                id=int(r[0]),
                memory_id=r[1],
                event=r[2],
                version=r[3],
                old_memory=r[4],
                new_memory=r[5],
                old_metadata=r[6],
                new_metadata=r[7],
                actor=r[8],
                reason=r[9],
                created_at=_iso(r[10]) or "",
            )
            for r in rows
        ]

    def count(self) -> Tx[int]:
        row = yield _Q(f"SELECT count(*) FROM {self.t('memories')}", fetch="one")
        return int(row[0])

    def visible_ids(self, scope: Scope, memory_ids: Sequence[str]) -> Tx[set[str]]:
        if not memory_ids:
            return set()
        clause, params = self.scope_clause(scope)
        rows = yield _Q(
            f"SELECT m.id FROM {self.t('memories')} m WHERE m.id = ANY(%s) AND {clause}",
            (list(dict.fromkeys(memory_ids)), *params),
        )
        return {r[0] for r in rows}

    def export_chunk(self, after: int, size: int) -> Tx[tuple[int, list[dict[str, Any]]]]:
        raw = yield _Q(
            f"SELECT {self.cols}, m.embedding, m.terms FROM {self.t('memories')} m "
            "WHERE m.rowid > %s ORDER BY m.rowid LIMIT %s",
            (after, size),
        )
        if not raw:
            return after, []
        rows = self.rows(raw)
        out = []
        for r, row in zip(raw, rows, strict=True):
            out.append(
                {
                    "row": row,
                    "embedding": np.asarray(r[_NCOLS], dtype=np.float32),
                    "terms": r[_NCOLS + 1],
                    "history": (yield from self.history(row.id)),
                }
            )
        return int(raw[-1][0]), out

    # -- search ------------------------------------------------------------------------------

    def search_settings(self, k: int) -> _Q:
        ef = max(self.ef_search, min(1000, 2 * k))
        scan = ", set_config('hnsw.iterative_scan', 'relaxed_order', true)"
        return _Q(
            f"SELECT set_config('hnsw.ef_search', %s, true){scan if self.iterative_scan else ''}",
            (str(ef),),
            fetch="none",
        )

    def nearest(
        self,
        sql: str,
        params: list[Any],
        query: np.ndarray[Any, Any],
        k: int,
        *,
        full: bool = False,
    ) -> Tx[list[Any]]:
        """The ``k`` rows matching ``sql`` nearest to ``query``, nearest first.

        Rows are ``(rowid, distance)``, or with ``full`` the :attr:`cols` columns
        followed by the distance.
        """
        if k <= 0:
            return []
        vec = np.asarray(query, dtype=np.float32)
        out = (
            f"SELECT {self.cols}, h.d FROM hits h JOIN {self.t('memories')} m ON m.rowid = h.rowid"
            if full
            else "SELECT h.rowid, h.d FROM hits h"
        )
        yield self.search_settings(k)
        # The HNSW index with iterative scans; relaxed order is put right by the
        # outer sort.
        rows = yield _Q(
            "WITH hits AS MATERIALIZED (SELECT m.rowid, m.embedding <=> %s AS d FROM "
            f"{self.t('memories')} m WHERE {sql} AND m.embedding IS NOT NULL ORDER BY d LIMIT %s) "
            f"{out} ORDER BY h.d, h.rowid",
            [vec, *params, k],
        )
        if len(rows) < k:
            # Fewer than asked: either the scope has fewer, or the index scan gave up
            # early (a very selective filter). The exact query settles it; OFFSET 0
            # keeps the planner from using the index for the ORDER BY.
            rows = yield _Q(
                "WITH hits AS MATERIALIZED (SELECT rowid, d FROM (SELECT m.rowid, m.embedding "
                f"<=> %s AS d FROM {self.t('memories')} m WHERE {sql} AND m.embedding IS NOT NULL "
                f"OFFSET 0) x ORDER BY d, rowid LIMIT %s) {out} ORDER BY h.d, h.rowid",
                [vec, *params, k],
            )
        return list(rows)

    def rows_by_rowid(
        self, keys: Sequence[int], sql: str, params: list[Any], query: np.ndarray[Any, Any]
    ) -> Tx[dict[int, tuple[MemoryRow, float]]]:
        """Rows among ``keys`` that match ``sql``, with their cosine similarity to ``query``."""
        if not keys:
            return {}
        raw = yield _Q(
            f"SELECT {self.cols}, 1 - (m.embedding <=> %s) FROM {self.t('memories')} m "
            f"WHERE m.rowid = ANY(%s) AND {sql}",
            [np.asarray(query, dtype=np.float32), list(keys), *params],
        )
        rows = self.rows(raw)
        return {
            int(r[0]): (row, float(r[_NCOLS]) if r[_NCOLS] is not None else 0.0)
            for r, row in zip(raw, rows, strict=True)
        }

    def vector_search(
        self, scope: Scope, where: Node | None, query: np.ndarray[Any, Any], k: int
    ) -> Tx[list[tuple[MemoryRow, float]]]:
        yield from self.guard_binding(write=False)
        sql, params = self.where(scope, where)
        raw = yield from self.nearest(sql, params, query, k, full=True)
        return [(row, 1.0 - float(r[_NCOLS])) for r, row in zip(raw, self.rows(raw), strict=True)]

    def allowed(
        self, scope: Scope, where: Node | None, sql: str, params: list[Any]
    ) -> Tx[np.ndarray[Any, np.dtype[np.int64]] | None]:
        """Rowids a narrowed keyword search may return; None when the cache's scope is the scope."""
        if not narrowed(scope, where):
            return None
        rows = yield _Q(f"SELECT m.rowid FROM {self.t('memories')} m WHERE {sql}", params)
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, Any],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
    ) -> Tx[list[Candidate]]:
        kind, value = scope.items()[0]
        cache = yield from self.catch_up(kind, value)
        if cache is None:
            return []  # nothing bound since the last reset: no vectors anywhere
        sql, params = self.where(scope, where)
        allowed = yield from self.allowed(scope, where, sql, params)
        if allowed is not None and allowed.size == 0:
            return []
        sem = yield from self.nearest(sql, params, query, n)
        pool = Pool(n, allowed, [int(r[0]) for r in sem], cache.bm25, terms)
        if entities:
            # Every link of a memory that can end up in the pool: memories of
            # entities with at most n memories (the pool takes them), and the
            # vector and keyword hits. An entity linked to thousands of memories
            # is counted once, not listed whole.
            owner = "" if scope.user_id is None else " AND e.owner = %s"
            me = self.t("memory_entities")
            ents = yield _Q(
                f"WITH q AS (SELECT e.rowid, e.normalized FROM {self.t('entities')} e "
                f"WHERE e.normalized = ANY(%s){owner}), "
                f"d AS (SELECT q.rowid, q.normalized, (SELECT count(*) FROM {me} x "
                f"JOIN {self.t('memories')} m ON m.rowid = x.memory_rowid "
                f"WHERE x.entity_rowid = q.rowid AND {sql}) AS degree FROM q), "
                f"small AS (SELECT l.memory_rowid FROM {me} l JOIN d ON d.rowid = l.entity_rowid "
                "WHERE d.degree <= %s) "
                f"SELECT l.memory_rowid, d.normalized, d.degree FROM d JOIN {me} l ON "
                "l.entity_rowid = d.rowid WHERE d.degree <= %s OR l.memory_rowid = "
                "ANY(%s) OR l.memory_rowid IN (SELECT memory_rowid FROM small) "
                'ORDER BY d.normalized COLLATE "C", d.rowid, l.memory_rowid',
                (
                    list(entities),
                    *([scope.owner] if scope.user_id is not None else []),
                    *params,
                    n,
                    n,
                    pool.found_otherwise,
                ),
            )
            pool.link((int(m), name, int(degree)) for m, name, degree in ents)
        keys = pool.keys()
        if keys is None:
            return []
        found = yield from self.rows_by_rowid([int(x) for x in keys], sql, params, query)
        return pool.build(keys, ((key, row, cosine) for key, (row, cosine) in found.items()))

    def check_binding(self, model: str | None, dim: str | None) -> bool:
        """Whether the store is bound; raises if it is bound to another embedder than ours."""
        if model is None:
            return False
        if self.binding is not None and (model, str(self.binding[1])) != (self.binding[0], dim):
            raise EmbedderMismatchError(
                f"PostgreSQL schema {self.schema!r} holds vectors from {model!r} (dim {dim}), "
                f"but the configured embedder is {self.binding[0]!r} (dim {self.binding[1]}); "
                "another process reset the store and bound another model"
            )
        return True

    def catch_up(self, kind: str, value: str) -> Tx[_Cache | None]:
        """The keyword cache of one primary scope id, caught up with this snapshot.

        One query: its first row (rowid -1) carries the epoch, the snapshot
        and the binding; the others are the scope's rows stamped by
        transactions that had not ended at the cache's last snapshot. None
        when no embedder is bound (nothing to search).
        """
        key = (kind, value)
        if kind == "user_id":
            member, params = "m.user_id = %s", [value]
        else:
            member = (
                f"(m.{kind} = %s OR m.rowid IN (SELECT memory_rowid FROM "
                f"{self.t('memory_scope')} WHERE kind = %s AND value = %s))"
            )
            params = [value, kind, value]
        meta = self.t("meta")
        head = (
            f"SELECT -1, NULL, (SELECT value FROM {meta} WHERE key = 'epoch'), "
            "pg_current_snapshot()::text, "
            f"(SELECT value FROM {meta} WHERE key = 'embedder_model'), "
            f"(SELECT value FROM {meta} WHERE key = 'embedder_dim') UNION ALL "
        )
        full = False
        for _ in range(3):
            with self.caches.lock:
                known = self.caches.get(key)
                since = known.snapshot if known is not None and not full else None
            if since is None:
                changed_sql, changed = "TRUE", []
            elif since.xip:
                changed_sql = "(m.txid >= %s::xid8 OR m.txid = ANY(%s::xid8[]))"
                changed = [str(since.xmax), [str(x) for x in sorted(since.xip)]]
            else:
                changed_sql, changed = "m.txid >= %s::xid8", [str(since.xmax)]
            rows = yield _Q(
                f"{head}SELECT m.rowid, m.deleted_at IS NULL, m.terms, NULL, NULL, NULL "
                f"FROM {self.t('memories')} m WHERE {changed_sql} AND {member} "
                # Row order is the index's tie order (BM25Index breaks equal scores by
                # insertion): rowid order, as SQLite's catch-up reads them.
                "ORDER BY 1",
                [*changed, *params],
            )
            top = next(r for r in rows if r[0] == -1)
            if not self.check_binding(top[4], top[5]):
                return None
            epoch, snap = str(top[2]), _Snapshot.parse(top[3])
            found = [r for r in rows if r[0] != -1]
            with self.caches.lock:
                self.caught_up_rows += len(found)
                # A newer epoch (purge, reset) drops every cache: what it erased
                # cannot be read as a change.
                if epoch != self.caches.see(epoch):
                    # This snapshot predates a purge another thread has seen: serve
                    # it from a private cache, filled whole, and keep the shared ones.
                    if since is None:
                        return self._apply(_Cache(), found, snap)
                    full = True
                    continue
                cache = self.caches.get(key)
                if cache is None:
                    if since is not None:
                        continue  # dropped meanwhile: read it whole
                    cache = self.caches.put(key, _Cache())
                if cache.snapshot is since:
                    self._apply(cache, found, snap)
                elif cache.snapshot is None or not cache.snapshot.covers(snap):
                    continue  # moved meanwhile, not past our snapshot: read from there
                # (else: another thread caught up from a newer snapshot; it wins)
                self.caches.touch(key)
                self.caches.evict()
                return cache
        raise ConflictError("the keyword index kept being reset while it was read; search again")

    @staticmethod
    def _apply(cache: _Cache, rows: Sequence[Sequence[Any]], snap: _Snapshot) -> _Cache:
        live = [r for r in rows if r[1]]
        cache.apply(
            [int(r[0]) for r in rows if not r[1]],
            [int(r[0]) for r in live],
            [r[2].split() for r in live],
        )
        cache.snapshot = snap
        return cache


def _now() -> datetime:
    return datetime.now(UTC)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


# -- drivers -------------------------------------------------------------------------------

_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
# psycopg prepares statements it sees repeatedly; a generic plan would pick the
# HNSW index or a scope's B-tree without knowing the scope's size, so every
# execution is planned for its own values.
_SESSION = "SET TIME ZONE 'UTC'; SET plan_cache_mode = force_custom_plan"
_WRITE = "BEGIN ISOLATION LEVEL READ COMMITTED"
# Sent right after a write's BEGIN (pipelined: no round trip of its own): if
# the connection breaks after COMMIT was sent, pg_xact_status(xid) on a new
# connection tells whether it committed.
_XID = "SELECT pg_current_xact_id()::text"
_STATUS = "SELECT pg_xact_status(%s::xid8)"
_STATUS_WAIT_S = 10.0
"""How long to wait for a cut-off transaction to stop being 'in progress'."""


class _LostAtCommit(Exception):
    """The connection broke after COMMIT was sent: the write may or may not have committed.

    Carries the transaction id (None if its reply never arrived) and the
    flow's result, which is the write's result if it did commit.
    """

    def __init__(self, xid: int | None, result: Any, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.xid = xid
        self.result = result
        self.cause = cause


class _Tracker:
    """What a write transaction's driver knows when its connection breaks."""

    __slots__ = ("committing", "cursor", "result", "xid")

    def __init__(self) -> None:
        self.committing = False
        self.cursor: Any = None  # the cursor of _XID, until its row is read
        self.xid: int | None = None
        self.result: Any = None

    def commit(self, result: Any) -> None:
        """COMMIT is about to be sent; ``result`` is the write's if it commits."""
        self.committing = True
        self.result = result

    def synced(self) -> None:
        """After a pipeline sync: the xid's row has arrived; keep it."""
        if self.cursor is not None and self.xid is None:
            row = self.cursor.fetchone()
            self.xid = int(row[0]) if row else None


def _unknown_outcome(lost: _LostAtCommit, status: str | None) -> StoreError:
    where = f"transaction {lost.xid} is {status!r}" if lost.xid is not None else "no xid"
    return StoreError(
        "the connection to PostgreSQL broke during COMMIT and the outcome of this write is "
        f"unknown ({where}); it was not retried, since it may have been applied: check (e.g. "
        f"get() or history()) before repeating it. Cause: {lost.cause}"
    )


def _is_rebind(exc: Exception) -> bool:
    """Whether ``exc`` is the error of a binding guard (``_Flows.guard_binding``)."""
    return isinstance(exc, psycopg.DataError) and _REBIND in str(exc)


def _translate(exc: Exception) -> Exception:
    """A psycopg error as the EngramError an API caller should see."""
    if _is_rebind(exc):
        return EmbedderMismatchError(
            "the store is now bound to another embedder than this process's (another "
            "process reset it and bound another model); configure the same embedder"
        )
    if isinstance(exc, psycopg.DataError) and "NUL" in str(exc):
        return ValidationError(
            "PostgreSQL cannot store the NUL character (\\x00) in text; remove it from the "
            "text, metadata or ids"
        )
    if isinstance(exc, pg_errors.UntranslatableCharacter):
        return ValidationError(
            "PostgreSQL cannot store the NUL character (\\u0000) in JSON metadata; remove it"
        )
    return StoreError(f"PostgreSQL error: {exc}")


def _result(cur: Any, q: _Q) -> Any:
    if q.fetch == "all":
        return cur.fetchall() if cur.description is not None else []
    if q.fetch == "one":
        return cur.fetchone() if cur.description is not None else None
    if q.fetch == "rowcount":
        return cur.rowcount
    return None


def _drive(flow: Tx[T], perform: Callable[[_Q], Any]) -> T:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            q = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = perform(q), None
        except psycopg.Error as exc:
            value, error = None, exc


async def _adrive(flow: Tx[T], perform: Callable[[_Q], Any]) -> T:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            q = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = await perform(q), None
        except psycopg.Error as exc:
            value, error = None, exc


@dataclass(frozen=True)
class _PoolSettings:
    url: str
    min_size: int
    max_size: int
    timeout: float


class PostgresStore:
    """A :class:`~engramdb.stores.base.Store` on PostgreSQL with pgvector (blocking).

    Args:
        url: a libpq connection string or ``postgresql://`` URL.
        schema: the PostgreSQL schema holding this store's tables (created on
            first open, with the migrations, under an advisory lock).
        min_size, max_size: connection pool bounds (per process).
        timeout: seconds to wait for a pooled connection.
        max_cached_docs: bound on the documents of the per-scope keyword caches.
        ef_search: HNSW ``ef_search`` floor (raised to ``2 * k`` for larger k).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        max_cached_docs: int = 2_000_000,
        ef_search: int = 200,
    ) -> None:
        """Open the store, creating and migrating its schema if needed."""
        if not schema or len(schema) > 63:
            raise StoreError(f"PostgreSQL schema name {schema!r} must be 1 to 63 characters")
        self.flows = _Flows(schema, max_cached_docs, ef_search)
        self.settings = _PoolSettings(url, min_size, max_size, timeout)
        self.schema = schema
        self._pool: ConnectionPool | None = None
        self._pool_lock = threading.Lock()
        self._closed = False
        self._async: AsyncPostgresStore | None = None
        self._vector_info: TypeInfo | None = None
        try:
            with psycopg.connect(url, autocommit=True) as con:
                self._transaction(con, self.flows.migrate(), _WRITE, pipeline=False)
                self._vector_info = TypeInfo.fetch(con, "vector")
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store ({exc})") from exc
        if self._vector_info is None:
            raise StoreError("the pgvector type 'vector' is not visible on the search_path")

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"

    # -- connections and transactions -------------------------------------------------------

    def _configure(self, con: psycopg.Connection[Any]) -> None:
        assert self._vector_info is not None
        _register_vector(con, self._vector_info)
        con.execute(_SESSION)

    def pool(self) -> ConnectionPool:
        """The connection pool (opened on first use)."""
        if self._closed:
            raise StoreError("this store is closed; open a new Memory")
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ConnectionPool(
                        self.settings.url,
                        min_size=self.settings.min_size,
                        max_size=self.settings.max_size,
                        timeout=self.settings.timeout,
                        kwargs={"autocommit": True},
                        configure=self._configure,
                        name=f"engramdb-{self.schema}",
                        open=True,
                    )
        return self._pool

    @staticmethod
    def _transaction(
        con: psycopg.Connection[Any], flow: Tx[T], begin: str | None, *, pipeline: bool = True
    ) -> T:
        """Run one flow on ``con``: in a transaction, or (``begin=None``) as one statement.

        In pipeline mode, statements whose result the flow does not read are
        sent without waiting; the next statement that returns rows waits for
        all of them, so a flow costs a round trip per result, not per statement.
        """
        if begin is None:
            return _drive(flow, lambda q: _result(con.execute(q.sql, q.params), q))
        tracker = _Tracker()
        try:
            if not pipeline:
                con.execute(begin)
                result = _drive(flow, lambda q: _result(con.execute(q.sql, q.params), q))
                con.execute("COMMIT")
                return result
            with con.pipeline() as pipe:
                con.execute(begin)
                if begin == _WRITE:
                    tracker.cursor = con.execute(_XID)

                def perform(q: _Q) -> Any:
                    cur = con.execute(q.sql, q.params)
                    if q.fetch == "none":
                        return None
                    pipe.sync()
                    tracker.synced()
                    return _result(cur, q)

                result = _drive(flow, perform)
                tracker.commit(result)
                con.execute("COMMIT")
            return result
        except psycopg.OperationalError as exc:
            if tracker.committing and con.broken:
                raise _LostAtCommit(tracker.xid, tracker.result, exc) from exc
            with contextlib.suppress(psycopg.Error):
                con.execute("ROLLBACK")
            raise
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                con.execute("ROLLBACK")
            raise

    def _commit_status(self, xid: int | None) -> str | None:
        """'committed', 'aborted', or None (unknown) for a write cut off at COMMIT."""
        if xid is None:
            return None
        deadline = time.monotonic() + _STATUS_WAIT_S
        try:
            # A new connection, not the pool: its other connections may be dead too.
            with psycopg.connect(self.settings.url, autocommit=True, connect_timeout=10) as con:
                while True:
                    row = con.execute(_STATUS, (str(xid),)).fetchone()
                    status = row[0] if row else None
                    # 'in progress': the server has not yet noticed the dead connection.
                    if status != "in progress" or time.monotonic() > deadline:
                        return status if status in ("committed", "aborted") else None
                    time.sleep(0.05)
        except psycopg.Error:
            return None

    def _rebind(self) -> None:
        """After a binding guard failed: bind this process's embedder again, or refuse."""
        binding = self.flows.binding
        assert binding is not None
        self._run(lambda: self.flows.bind_embedder(*binding), write=True)

    def _run(self, make: Callable[[], Tx[T]], *, write: bool, single: bool = False) -> T:
        """Run a flow in a pooled connection: retry writes PostgreSQL aborted, and stale links."""
        attempts = _WRITE_RETRIES if write else 2
        begin = _WRITE if write else (None if single else _READ)
        rebound = False
        for attempt in range(attempts):
            con: psycopg.Connection[Any] | None = None
            try:
                with self.pool().connection() as con:
                    return self._transaction(con, make(), begin)
            except _LostAtCommit as lost:
                # Never rerun a write that may have committed: ask the server.
                status = self._commit_status(lost.xid)
                if status == "committed":
                    return lost.result  # type: ignore[no-any-return]
                if status != "aborted" or attempt == attempts - 1:
                    raise _unknown_outcome(lost, status) from lost.cause
                log.warning("retrying a write cut off at COMMIT (it was rolled back)")
            except _RETRYABLE as exc:
                if attempt == attempts - 1:
                    raise StoreError(f"PostgreSQL kept aborting the write: {exc}") from exc
                log.warning("retrying a write PostgreSQL aborted (%s)", type(exc).__name__)
            except psycopg.OperationalError as exc:
                # A pooled connection the server dropped (restart, failover, idle
                # timeout) before COMMIT was sent (_LostAtCommit otherwise): nothing
                # was committed on it; try once on a fresh one.
                if con is None or not con.broken or attempt > 0:
                    raise _translate(exc) from exc
                log.warning("retrying on a fresh connection (%s)", exc)
            except psycopg.Error as exc:
                if write and not rebound and _is_rebind(exc):
                    # The binding changed under us (a reset elsewhere): bind ours
                    # again, which refuses another model, and rerun the write.
                    rebound = True
                    self._rebind()
                    continue
                raise _translate(exc) from exc
        raise AssertionError("unreachable")

    def async_store(self) -> AsyncPostgresStore:
        """The same store with coroutine methods on an asyncio pool (shares the caches)."""
        if self._async is None:
            self._async = AsyncPostgresStore(self)
        return self._async

    # -- the Store protocol ---------------------------------------------------------------------

    def bind_embedder(self, model: str, dim: int) -> None:
        """Record the embedder on first use (and type the vector column); refuse another."""
        self._run(lambda: self.flows.bind_embedder(model, dim), write=True)

    def bound_embedder(self) -> tuple[str, int] | None:
        """The ``(model, dim)`` recorded in the store, if any."""
        return self._run(self.flows.read_binding, write=False, single=True)

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
        """Store messages and memories in one transaction; repeats become NONE."""
        return self._run(
            lambda: self.flows.add(
                memories, messages, scope, actor, source_rowids, resolve_failure, visible
            ),
            write=True,
        )

    def attach_session(self, memory_id: str, scope: Scope, actor: str) -> HistoryEvent | None:
        """Attach the scope's run/agent to a live memory; None if nothing was new."""
        return self._run(lambda: self.flows.attach_session(memory_id, scope, actor), write=True)

    def keep_failed(
        self, scope: Scope, messages: Sequence[NewMessage], error: str, reply: str | None
    ) -> int:
        """Store the messages of a failed extraction and the failure; returns its id."""
        return self._run(lambda: self.flows.keep_failed(scope, messages, error, reply), write=True)

    def failure(self, failure_id: int) -> tuple[Scope, list[tuple[int, NewMessage]], bool] | None:
        """A recorded failure: scope, ``(message id, message)`` pairs, resolved or not."""
        return self._run(lambda: self.flows.failure(failure_id), write=False)

    def failures(self, scope: Scope, *, include_resolved: bool = False) -> list[dict[str, Any]]:
        """Recorded extraction failures of a scope, newest first."""
        return self._run(
            lambda: self.flows.failures(scope, include_resolved), write=False, single=True
        )

    def recent_messages(self, scope: Scope, limit: int) -> list[NewMessage]:
        """The last ``limit`` raw messages of a scope, oldest first."""
        return self._run(lambda: self.flows.recent_messages(scope, limit), write=False, single=True)

    def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` a live memory of ``owner`` already has."""
        return self._run(
            lambda: self.flows.existing_hashes(visible, hashes), write=False, single=True
        )

    def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """One memory by public id, or ``None``."""
        return self._run(
            lambda: self.flows.get(memory_id, include_deleted=include_deleted),
            write=False,
            single=True,
        )

    def list_memories(
        self, scope: Scope, where: Node | None, *, limit: int, offset: int = 0
    ) -> list[MemoryRow]:
        """Live memories of a scope, newest first (ties by insertion order)."""
        return self._run(
            lambda: self.flows.list_memories(scope, where, limit, offset), write=False, single=True
        )

    def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[tuple[MemoryRow, float]]:
        """The ``k`` live memories of the scope most similar to ``query`` (cosine)."""
        return self._run(lambda: self.flows.vector_search(scope, where, query, k), write=False)

    def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
    ) -> list[Candidate]:
        """Candidates for a query: the vector top ``n``, the BM25 top ``n``, entity links."""
        return self._run(
            lambda: self.flows.candidates(scope, where, query, terms, entities, n), write=False
        )

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
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Change text and/or metadata of a live memory, writing an UPDATE event."""
        return self._run(
            lambda: self.flows.update(
                memory_id, text, hash, embedding, terms, entities, metadata, actor, reason
            ),
            write=True,
        )

    def delete(
        self, memory_id: str, *, actor: str, reason: str | None = None
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Soft-delete one memory (hidden, restorable)."""
        return self._run(lambda: self.flows.delete(memory_id, actor, reason), write=True)

    def delete_scope(self, scope: Scope, *, actor: str) -> list[HistoryEvent]:
        """Soft-delete every live memory matching all ids of ``scope``."""
        return self._run(lambda: self.flows.delete_scope(scope, actor), write=True)

    def plan_restore(self, memory_id: str, version: int | None) -> RestorePlan:
        """Work out what a restore would bring back (reads only)."""
        return self._run(lambda: self.flows.plan_restore(memory_id, version), write=False)

    def apply_restore(
        self,
        plan: RestorePlan,
        *,
        hash: str,
        embedding: np.ndarray[Any, np.dtype[np.float32]] | None,
        terms: str,
        entities: Sequence[EntityRef] = (),
        actor: str,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Write a planned restore, if the memory has not changed since planning."""
        return self._run(
            lambda: self.flows.apply_restore(plan, hash, embedding, terms, entities, actor),
            write=True,
        )

    def purge(self, *, memory_id: str | None = None, scope: Scope | None = None) -> int:
        """Erase memories for good, with everything derived from them; returns how many.

        :meth:`plan_purge`, then the re-index terms, then :meth:`apply_purge`
        (planned again if a write came between).
        """
        return purge_with(self, memory_id=memory_id, scope=scope)

    def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> ErasurePlan:
        """What a purge of one memory or of a scope erases (stores/_erasure.py)."""
        return self._run(lambda: self.flows.plan_purge(memory_id, scope), write=False)

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """Execute a purge plan in one transaction, then VACUUM what held the text.

        The dead row versions the deletes and re-indexes leave are removed by
        VACUUM after the commit (it cannot run inside a transaction), unless an
        older snapshot still open elsewhere in the cluster can see them; the WAL
        and any backup or replica hold what was written (docs/postgres.md).
        """
        check_terms(plan, terms)
        count = self._run(lambda: self.flows.apply_purge(plan, terms), write=True)
        if plan.touched:
            try:
                with self.pool().connection() as con:
                    for statement in self.flows.vacuum_statements():
                        con.execute(statement)
            except psycopg.Error as exc:
                log.warning(_VACUUM_FAILED, exc)
        return count

    def history(self, memory_id: str) -> list[HistoryEvent]:
        """Every event of a memory, oldest first."""
        return self._run(lambda: self.flows.history(memory_id), write=False, single=True)

    def export_rows(self) -> Iterator[dict[str, Any]]:
        """Every memory (deleted ones too) with its vector, sessions, links, history.

        Read in chunks inside one REPEATABLE READ transaction: one snapshot.
        """
        with self.pool().connection() as con:
            con.execute(_READ)
            try:
                after = 0
                while True:
                    after, chunk = _drive(
                        self.flows.export_chunk(after, 500),
                        lambda q: _result(con.execute(q.sql, q.params), q),
                    )
                    if not chunk:
                        break
                    yield from chunk
            except psycopg.Error as exc:
                raise _translate(exc) from exc
            finally:
                with contextlib.suppress(psycopg.Error):
                    con.execute("COMMIT")

    def import_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """Write exported rows back in one transaction; returns the count."""
        return self._run(lambda: self.flows.import_rows(rows), write=True)

    def visible_ids(self, scope: Scope, memory_ids: Sequence[str]) -> set[str]:
        """Which of ``memory_ids`` are memories ``scope`` sees (deleted ones included)."""
        return self._run(
            lambda: self.flows.visible_ids(scope, memory_ids), write=False, single=True
        )

    def count(self) -> int:
        """Number of memory rows (deleted ones included)."""
        return self._run(self.flows.count, write=False, single=True)

    def reset(self) -> None:
        """Erase everything the store holds (the embedder binding too)."""
        self._run(self.flows.reset, write=True)

    def close(self) -> None:
        """Close the pool (the async one is closed by :meth:`AsyncPostgresStore.close`)."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        with self.flows.caches.lock:
            self.flows.caches.clear()


class AsyncPostgresStore:
    """The same store with coroutine methods, on an asyncio connection pool.

    Made by :meth:`PostgresStore.async_store`; runs the same transaction flows
    as the blocking store and shares its keyword caches. The pool opens on the
    first call, in the running event loop.
    """

    def __init__(self, sync: PostgresStore) -> None:
        """Wrap ``sync``'s flows and settings."""
        self.sync = sync
        self.flows = sync.flows
        self._pool: AsyncConnectionPool | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _configure(self, con: psycopg.AsyncConnection[Any]) -> None:
        assert self.sync._vector_info is not None
        _register_vector(con, self.sync._vector_info)
        await con.execute(_SESSION)

    async def pool(self) -> AsyncConnectionPool:
        """The asyncio connection pool (opened on first use)."""
        if self.sync._closed:
            raise StoreError("this store is closed; open a new AsyncMemory")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            # Its connections and tasks live in the loop that opened the pool.
            raise StoreError(
                "this AsyncMemory's PostgreSQL pool belongs to another event loop; create "
                "the AsyncMemory inside the loop that uses it (not across asyncio.run calls)"
            )
        if self._pool is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._pool is None:
                    settings = self.sync.settings
                    pool = AsyncConnectionPool(
                        settings.url,
                        min_size=settings.min_size,
                        max_size=settings.max_size,
                        timeout=settings.timeout,
                        kwargs={"autocommit": True},
                        configure=self._configure,
                        name=f"engramdb-async-{self.sync.schema}",
                        open=False,
                    )
                    await pool.open()
                    self._pool = pool
        return self._pool

    @staticmethod
    async def _transaction(con: psycopg.AsyncConnection[Any], flow: Tx[T], begin: str | None) -> T:
        """See :meth:`PostgresStore._transaction`."""

        async def fetch(cur: psycopg.AsyncCursor[Any], q: _Q) -> Any:
            if q.fetch == "all":
                return await cur.fetchall() if cur.description is not None else []
            if q.fetch == "one":
                return await cur.fetchone() if cur.description is not None else None
            if q.fetch == "rowcount":
                return cur.rowcount
            return None

        if begin is None:

            async def direct(q: _Q) -> Any:
                return await fetch(await con.execute(q.sql, q.params), q)

            return await _adrive(flow, direct)
        tracker = _Tracker()
        try:
            async with con.pipeline() as pipe:
                await con.execute(begin)
                xid_cur = await con.execute(_XID) if begin == _WRITE else None

                async def perform(q: _Q) -> Any:
                    cur = await con.execute(q.sql, q.params)
                    if q.fetch == "none":
                        return None
                    await pipe.sync()
                    if xid_cur is not None and tracker.xid is None:
                        row = await xid_cur.fetchone()
                        tracker.xid = int(row[0]) if row else None
                    return await fetch(cur, q)

                result = await _adrive(flow, perform)
                tracker.commit(result)
                await con.execute("COMMIT")
            return result
        except psycopg.OperationalError as exc:
            if tracker.committing and con.broken:
                raise _LostAtCommit(tracker.xid, tracker.result, exc) from exc
            with contextlib.suppress(psycopg.Error):
                await con.execute("ROLLBACK")
            raise
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                await con.execute("ROLLBACK")
            raise

    async def _rebind(self) -> None:
        """See :meth:`PostgresStore._rebind`."""
        binding = self.flows.binding
        assert binding is not None
        await self._run(lambda: self.flows.bind_embedder(*binding), write=True)

    async def _commit_status(self, xid: int | None) -> str | None:
        """See :meth:`PostgresStore._commit_status`."""
        if xid is None:
            return None
        deadline = time.monotonic() + _STATUS_WAIT_S
        try:
            async with await psycopg.AsyncConnection.connect(
                self.sync.settings.url, autocommit=True, connect_timeout=10
            ) as con:
                while True:
                    cur = await con.execute(_STATUS, (str(xid),))
                    row = await cur.fetchone()
                    status = row[0] if row else None
                    if status != "in progress" or time.monotonic() > deadline:
                        return status if status in ("committed", "aborted") else None
                    await asyncio.sleep(0.05)
        except psycopg.Error:
            return None

    async def _run(self, make: Callable[[], Tx[T]], *, write: bool, single: bool = False) -> T:
        attempts = _WRITE_RETRIES if write else 2
        begin = _WRITE if write else (None if single else _READ)
        rebound = False
        for attempt in range(attempts):
            con: psycopg.AsyncConnection[Any] | None = None
            try:
                async with (await self.pool()).connection() as con:
                    return await self._transaction(con, make(), begin)
            except _LostAtCommit as lost:
                status = await self._commit_status(lost.xid)
                if status == "committed":
                    return lost.result  # type: ignore[no-any-return]
                if status != "aborted" or attempt == attempts - 1:
                    raise _unknown_outcome(lost, status) from lost.cause
                log.warning("retrying a write cut off at COMMIT (it was rolled back)")
            except _RETRYABLE as exc:
                if attempt == attempts - 1:
                    raise StoreError(f"PostgreSQL kept aborting the write: {exc}") from exc
                log.warning("retrying a write PostgreSQL aborted (%s)", type(exc).__name__)
            except psycopg.OperationalError as exc:
                if con is None or not con.broken or attempt > 0:
                    raise _translate(exc) from exc
                log.warning("retrying on a fresh connection (%s)", exc)
            except psycopg.Error as exc:
                if write and not rebound and _is_rebind(exc):
                    rebound = True
                    await self._rebind()
                    continue
                raise _translate(exc) from exc
        raise AssertionError("unreachable")

    async def bind_embedder(self, model: str, dim: int) -> None:
        """See :meth:`PostgresStore.bind_embedder`."""
        await self._run(lambda: self.flows.bind_embedder(model, dim), write=True)

    async def bound_embedder(self) -> tuple[str, int] | None:
        """See :meth:`PostgresStore.bound_embedder`."""
        return await self._run(self.flows.read_binding, write=False, single=True)

    async def add(
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
        """See :meth:`PostgresStore.add`."""
        return await self._run(
            lambda: self.flows.add(
                memories, messages, scope, actor, source_rowids, resolve_failure, visible
            ),
            write=True,
        )

    async def attach_session(self, memory_id: str, scope: Scope, actor: str) -> HistoryEvent | None:
        """See :meth:`PostgresStore.attach_session`."""
        return await self._run(
            lambda: self.flows.attach_session(memory_id, scope, actor), write=True
        )

    async def keep_failed(
        self, scope: Scope, messages: Sequence[NewMessage], error: str, reply: str | None
    ) -> int:
        """See :meth:`PostgresStore.keep_failed`."""
        return await self._run(
            lambda: self.flows.keep_failed(scope, messages, error, reply), write=True
        )

    async def failure(
        self, failure_id: int
    ) -> tuple[Scope, list[tuple[int, NewMessage]], bool] | None:
        """See :meth:`PostgresStore.failure`."""
        return await self._run(lambda: self.flows.failure(failure_id), write=False)

    async def failures(
        self, scope: Scope, *, include_resolved: bool = False
    ) -> list[dict[str, Any]]:
        """See :meth:`PostgresStore.failures`."""
        return await self._run(
            lambda: self.flows.failures(scope, include_resolved), write=False, single=True
        )

    async def recent_messages(self, scope: Scope, limit: int) -> list[NewMessage]:
        """See :meth:`PostgresStore.recent_messages`."""
        return await self._run(
            lambda: self.flows.recent_messages(scope, limit), write=False, single=True
        )

    async def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> set[str]:
        """See :meth:`PostgresStore.existing_hashes`."""
        return await self._run(
            lambda: self.flows.existing_hashes(visible, hashes), write=False, single=True
        )

    async def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """See :meth:`PostgresStore.get`."""
        return await self._run(
            lambda: self.flows.get(memory_id, include_deleted=include_deleted),
            write=False,
            single=True,
        )

    async def list_memories(
        self, scope: Scope, where: Node | None, *, limit: int, offset: int = 0
    ) -> list[MemoryRow]:
        """See :meth:`PostgresStore.list_memories`."""
        return await self._run(
            lambda: self.flows.list_memories(scope, where, limit, offset), write=False, single=True
        )

    async def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[tuple[MemoryRow, float]]:
        """See :meth:`PostgresStore.vector_search`."""
        return await self._run(
            lambda: self.flows.vector_search(scope, where, query, k), write=False
        )

    async def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
    ) -> list[Candidate]:
        """See :meth:`PostgresStore.candidates`."""
        return await self._run(
            lambda: self.flows.candidates(scope, where, query, terms, entities, n), write=False
        )

    async def update(
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
    ) -> tuple[MemoryRow, HistoryEvent]:
        """See :meth:`PostgresStore.update`."""
        return await self._run(
            lambda: self.flows.update(
                memory_id, text, hash, embedding, terms, entities, metadata, actor, reason
            ),
            write=True,
        )

    async def delete(
        self, memory_id: str, *, actor: str, reason: str | None = None
    ) -> tuple[MemoryRow, HistoryEvent]:
        """See :meth:`PostgresStore.delete`."""
        return await self._run(lambda: self.flows.delete(memory_id, actor, reason), write=True)

    async def delete_scope(self, scope: Scope, *, actor: str) -> list[HistoryEvent]:
        """See :meth:`PostgresStore.delete_scope`."""
        return await self._run(lambda: self.flows.delete_scope(scope, actor), write=True)

    async def plan_restore(self, memory_id: str, version: int | None) -> RestorePlan:
        """See :meth:`PostgresStore.plan_restore`."""
        return await self._run(lambda: self.flows.plan_restore(memory_id, version), write=False)

    async def apply_restore(
        self,
        plan: RestorePlan,
        *,
        hash: str,
        embedding: np.ndarray[Any, np.dtype[np.float32]] | None,
        terms: str,
        entities: Sequence[EntityRef] = (),
        actor: str,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """See :meth:`PostgresStore.apply_restore`."""
        return await self._run(
            lambda: self.flows.apply_restore(plan, hash, embedding, terms, entities, actor),
            write=True,
        )

    async def purge(self, *, memory_id: str | None = None, scope: Scope | None = None) -> int:
        """See :meth:`PostgresStore.purge`."""
        for attempt in range(PLAN_ATTEMPTS):
            plan = await self.plan_purge(memory_id=memory_id, scope=scope)
            try:
                return await self.apply_purge(plan, reindexed_terms(plan))
            except ConflictError:
                if attempt == PLAN_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> ErasurePlan:
        """See :meth:`PostgresStore.plan_purge`."""
        return await self._run(lambda: self.flows.plan_purge(memory_id, scope), write=False)

    async def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """See :meth:`PostgresStore.apply_purge`."""
        check_terms(plan, terms)
        count = await self._run(lambda: self.flows.apply_purge(plan, terms), write=True)
        if plan.touched:
            try:
                async with (await self.pool()).connection() as con:
                    for statement in self.flows.vacuum_statements():
                        await con.execute(statement)
            except psycopg.Error as exc:
                log.warning(_VACUUM_FAILED, exc)
        return count

    async def history(self, memory_id: str) -> list[HistoryEvent]:
        """See :meth:`PostgresStore.history`."""
        return await self._run(lambda: self.flows.history(memory_id), write=False, single=True)

    async def export_rows(self) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`PostgresStore.export_rows`."""
        async with (await self.pool()).connection() as con:
            await con.execute(_READ)
            try:
                after = 0
                while True:

                    async def perform(q: _Q) -> Any:
                        cur = await con.execute(q.sql, q.params)
                        if q.fetch == "one":
                            return await cur.fetchone()
                        return await cur.fetchall() if q.fetch == "all" else None

                    after, chunk = await _adrive(self.flows.export_chunk(after, 500), perform)
                    if not chunk:
                        break
                    for item in chunk:
                        yield item
            except psycopg.Error as exc:
                raise _translate(exc) from exc
            finally:
                with contextlib.suppress(psycopg.Error):
                    await con.execute("COMMIT")

    async def import_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """See :meth:`PostgresStore.import_rows`."""
        return await self._run(lambda: self.flows.import_rows(rows), write=True)

    async def visible_ids(self, scope: Scope, memory_ids: Sequence[str]) -> set[str]:
        """See :meth:`PostgresStore.visible_ids`."""
        return await self._run(
            lambda: self.flows.visible_ids(scope, memory_ids), write=False, single=True
        )

    async def count(self) -> int:
        """See :meth:`PostgresStore.count`."""
        return await self._run(self.flows.count, write=False, single=True)

    async def reset(self) -> None:
        """See :meth:`PostgresStore.reset`."""
        await self._run(self.flows.reset, write=True)

    async def close(self) -> None:
        """Close the asyncio pool and the blocking store."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        self.sync.close()
