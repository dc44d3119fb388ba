"""Statements, values and the state every PostgreSQL flow shares."""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections.abc import Generator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import numpy as np
import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.types import TypeInfo

from engramdb.core.filters import Node
from engramdb.core.filters_pg import compile_postgres
from engramdb.errors import (
    SchemaVersionError,
    StoreError,
)
from engramdb.stores.base import (
    HistoryEvent,
    MemoryRow,
    Scope,
)
from engramdb.stores.kernel.caches import DEFAULT_CACHE_BYTES, ScopeCache, ScopeCaches
from engramdb.stores.kernel.rebind import mismatch_error
from engramdb.stores.kernel.rows import (
    HISTORY_COLUMNS,
    MEMORY_COLUMNS,
    ValueConverters,
    chunks,
    fold_links,
    history_event,
    iso_stamp,
    link_label,
    memory_columns,
    memory_row,
)
from engramdb.stores.kernel.sql import POSTGRES, live_clause, row_scope_clause
from engramdb.stores.postgres.schema import BOOTSTRAP, LATEST, MIGRATION_LOCK, MIGRATIONS

log = logging.getLogger("engramdb.store")

DEFAULT_SCHEMA = "engramdb"
"""The PostgreSQL schema holding the tables when no ``collection_name`` is given."""

T = TypeVar("T")

WRITE_RETRIES = 8
"""Attempts of a write PostgreSQL aborts, and rounds of an add's attach loop."""
_NCOLS = MEMORY_COLUMNS + 3
"""Columns of ``_FlowBase.cols``: extra columns of a query come after these."""
_VALUES = ValueConverters(stamp=iso_stamp, document=lambda value: value)
"""psycopg returns ``timestamptz`` as datetime and ``jsonb`` decoded."""
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


_iso = iso_stamp


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

    @staticmethod
    def horizon(text: str) -> _Snapshot:
        """What a hot standby's snapshot (text form) proves: only what ended before its ``xmin``.

        A standby's ``pg_current_snapshot()`` lists no running transaction
        (``xip`` is empty: it keeps them as sub-transaction ids, which the
        function leaves out), so its ``xmax`` would count a transaction still
        running on the primary as ended, and a catch-up would never read its
        rows. Its ``xmin`` is right: every transaction below it had ended.
        """
        xmin, _, _ = text.split(":")
        return _Snapshot(int(xmin), frozenset())

    def covers(self, other: _Snapshot) -> bool:
        """Whether every transaction that had ended in ``other`` had ended in this one."""
        return other.xmax <= self.xmax and all(x in other.xip or x >= other.xmax for x in self.xip)

    def union(self, other: _Snapshot) -> _Snapshot:
        """The transactions that had ended in either snapshot, as one snapshot.

        A cache that had read everything up to ``self`` and then the changes
        since ``self`` as of ``other`` has read everything up to both. For a
        later snapshot of the same server this is ``other``; for an older one
        (a replica behind the primary) it keeps what ``self`` proves, so a
        cache never moves backwards.
        """
        low, high = (self, other) if self.xmax <= other.xmax else (other, self)
        return _Snapshot(high.xmax, frozenset(x for x in high.xip if x in low.xip or x >= low.xmax))


def lsn(text: str | None) -> int:
    """A ``pg_lsn`` text (``16/B374D848``) as a number (0 for None)."""
    if not text:
        return 0
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


class ReplicaRead:
    """A read running on a read replica connection (:data:`REPLICA_READ`).

    ``at`` is a WAL position the replica had replayed before the read's
    snapshot was taken (a lower bound of what the read sees); a flow that
    learns a newer replay position raises ``replayed``.
    """

    __slots__ = ("at", "replayed")

    def __init__(self, at: int) -> None:
        self.at = at
        self.replayed = at


REPLICA_READ: ContextVar[ReplicaRead | None] = ContextVar("engramdb_replica_read", default=None)
"""Set by the store while a flow runs on its read replica (None on the primary)."""


class _Cache(ScopeCache):
    """The keyword index of one primary scope id, and the snapshot it has read up to.

    ``lsn`` is an upper bound of the WAL position of what it holds (where
    the server it last read from had got to): a replica that has not
    replayed that far must not catch it up (it would move it backwards).
    """

    __slots__ = ("lsn", "snapshot")

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: _Snapshot | None = None
        self.lsn = 0


REBIND = "engramdb: the embedder binding changed"
"""Text of the error a binding guard raises in SQL (see ``_Flows.guard_binding``)."""


_chunks = chunks


def _now() -> datetime:
    return datetime.now(UTC)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


class _FlowBase:
    """Every store operation as a transaction flow, plus the state the flows share.

    Holds no connection: :class:`PostgresStore` and :class:`AsyncPostgresStore`
    drive these flows, and share one instance (and so one set of caches).
    """

    def __init__(
        self,
        schema: str,
        max_cached_docs: int,
        ef_search: int,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.schema = schema
        self.s = '"' + schema.replace('"', '""') + '"'
        self.ef_search = ef_search
        self.iterative_scan = True
        # The embedder this process bound; every vector write and search checks
        # the store's binding against it (another process may reset and re-bind).
        self.binding: tuple[str, int] | None = None
        # Its lock guards the table of caches and the epoch; never held across I/O.
        self.caches: ScopeCaches[_Cache] = ScopeCaches(
            max_cached_docs, epoch="-1", lock=threading.RLock(), max_bytes=cache_bytes
        )
        self.caught_up_rows = 0
        """Rows read by keyword-cache catch-ups so far (a figure for tests and benchmarks)."""
        self.keyword_index: Literal["database", "process"] = "database"
        """Where BM25 ranks: in SQL over the postings (``database``), or in a per-process
        cache of each scope's terms (``process``: the ranking before schema version 5,
        kept to compare against)."""

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
        return row_scope_clause(scope, POSTGRES, self.t("memory_scope"))

    def where(
        self, scope: Scope, where: Node | None, include_expired: bool = False
    ) -> tuple[str, list[Any]]:
        """SQL over alias ``m``: live, in ``scope``, matching ``where``."""
        clause, params = self.scope_clause(scope)
        sql = f"{live_clause(POSTGRES, include_expired=include_expired)} AND {clause}"
        params = [*([] if include_expired else [datetime.now(UTC)]), *params]
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
        """The ``(model, dim)`` recorded in the store, if any."""
        rows = yield _Q(
            f"SELECT key, value FROM {self.t('meta')} WHERE key = ANY(%s)", (list(_EMBEDDER_KEYS),)
        )
        found = dict(rows)
        if "embedder_model" not in found:
            return None
        return found["embedder_model"], int(found["embedder_dim"])

    def bind_embedder(self, model: str, dim: int) -> Tx[None]:
        """Record the embedder on first use (and type the vector column); refuse another."""
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
            raise mismatch_error(f"PostgreSQL schema {self.schema!r}", bound, (model, dim))
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
            (self.binding[0], str(self.binding[1]), REBIND + ": "),
            fetch="none",
        )

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
            f"{memory_columns('m')}, {sessions.format(t=scope, k='run_id')}, "
            f"{sessions.format(t=scope, k='agent_id')}, "
            f"ARRAY(SELECT '>' || l.kind || ' ' || x.id FROM {links} l JOIN {mems} x ON "
            f"x.rowid = l.to_rowid WHERE l.from_rowid = m.rowid UNION ALL SELECT '<' || "
            f"l.kind || ' ' || x.id FROM {links} l JOIN {mems} x ON x.rowid = l.from_rowid "
            "WHERE l.to_rowid = m.rowid)"
        )

    @staticmethod
    def rows(raw: Sequence[Sequence[Any]]) -> list[MemoryRow]:
        """Turn raw :attr:`cols` rows into MemoryRows."""
        out = []
        for r in raw:
            # Each link as "<direction><kind> <id>": ">" from this memory, "<" to it.
            ids, kinds = fold_links(
                (x.split(" ", 1)[1], link_label(x[0] == ">", x[1:].split(" ", 1)[0])) for x in r[20]
            )
            out.append(
                memory_row(
                    r, _VALUES, run_ids=r[18], agent_ids=r[19], linked_ids=ids, link_kinds=kinds
                )
            )
        return out

    def get(self, memory_id: str, *, include_deleted: bool = False) -> Tx[MemoryRow | None]:
        """One memory by public id, or ``None``."""
        extra = "" if include_deleted else " AND m.deleted_at IS NULL"
        row = yield _Q(
            f"SELECT {self.cols} FROM {self.t('memories')} m WHERE m.id = %s{extra}",
            (memory_id,),
            fetch="one",
        )
        if row is None:
            return None
        return self.rows([row])[0]

    def history(self, memory_id: str) -> Tx[list[HistoryEvent]]:
        """Every event of a memory, oldest first."""
        rows = yield _Q(
            f"SELECT {HISTORY_COLUMNS} FROM {self.t('history')} WHERE memory_id = %s "
            "ORDER BY rowid",
            (memory_id,),
        )
        return [history_event(r, _VALUES) for r in rows]
