"""Connections, transactions, the schema, the binding and row hydration of the SQLite store."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from engramdb._time import utc_now
from engramdb.core.filters import Node, compile_sqlite
from engramdb.core.vectors import CompactVectorIndex, VectorIndex
from engramdb.errors import (
    MemoryNotFoundError,
    SchemaVersionError,
    StoreError,
)
from engramdb.stores.base import (
    EmbeddingSource,
    HistoryEvent,
    MemoryRow,
    Rebinding,
    Scope,
    TermChange,
    TermSource,
)
from engramdb.stores.kernel.caches import DEFAULT_CACHE_BYTES, ScopeCache, ScopeCaches
from engramdb.stores.kernel.rebind import (
    checked_vectors,
    mismatch_error,
    moved_error,
    stale_keys,
)
from engramdb.stores.kernel.rows import (
    HISTORY_COLUMNS,
    ISO_TEXT,
    chunks,
    fold_links,
    history_event,
    link_label,
    memory_columns,
    memory_row,
)
from engramdb.stores.kernel.sql import SQLITE, live_clause, row_scope_clause
from engramdb.stores.sqlite import _keywords, _vectors
from engramdb.stores.sqlite.schema import (
    KEYWORD_BACKFILL_VERSION,
    LATEST,
    MIGRATIONS,
    VECTOR_BACKFILL_VERSION,
)

log = logging.getLogger("engramdb.store")

F32 = np.dtype("<f4")

_COLS = memory_columns("m")


def _vec_blob(vec: np.ndarray[Any, Any]) -> bytes:
    return np.ascontiguousarray(vec, dtype=F32).tobytes()


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
    return row_scope_clause(scope, SQLITE, "memory_scope")


K = TypeVar("K")
V = TypeVar("V")


class _Cache(ScopeCache):
    """The vector and keyword indexes of one primary scope id, and how current they are.

    ``seq`` is the ``meta.seq`` it has caught up to within ``epoch``; ``lock``
    serialises its catch-ups (the indexes have their own locks for searches).
    """

    __slots__ = ("degrees", "epoch", "index", "lock", "rows", "seq")

    def __init__(self, dim: int, epoch: str) -> None:
        super().__init__()
        self.index: VectorIndex | CompactVectorIndex = VectorIndex(dim)
        self.seq = 0
        self.epoch = epoch
        self.lock = threading.Lock()
        self.rows = RowMemo()
        self.degrees = DegreeMemo()

    OVERHEAD = 6_144
    """Bytes of an empty cache: its record, two indexes, two memos and their locks."""

    def size(self) -> int:
        """Vectors held: what counts against ``max_cached_vectors``."""
        return len(self.index)

    def nbytes(self) -> int:
        """Bytes held (an estimate): both indexes and both memos."""
        return (
            self.OVERHEAD
            + self.index.held_bytes
            + self.bm25.nbytes
            + self.rows.nbytes
            + self.degrees.nbytes
        )

    def apply(
        self,
        dead: Sequence[int],
        live: Sequence[int],
        terms: Sequence[list[str]] | None,
        vectors: np.ndarray[Any, Any] | None = None,
        *,
        refit: bool = True,
    ) -> None:
        """Apply a catch-up to both indexes; ``vectors`` holds the ``live`` rows' vectors.

        ``terms`` None: the keywords rank in the file (``keyword_index =
        "database"``), the keyword index stays empty. ``refit=False``: one
        chunk of a longer catch-up, which refits the vector prefilter once
        at its end (:meth:`VectorIndex.refit`).
        """
        if live and vectors is None:
            raise ValueError("the vector cache needs the vectors of the live rows")
        if dead:
            self.index.remove(np.array(dead, dtype=np.int64))
        if terms is not None:
            super().apply(dead, live, terms)
        if live and vectors is not None:
            self.index.add(np.array(live, dtype=np.int64), vectors, refit=refit)

    def apply_encoded(
        self,
        dead: Sequence[int],
        live: Sequence[int],
        terms: Sequence[list[str]] | None,
        encoded: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]],
    ) -> None:
        """:meth:`apply` for a compact index.

        ``encoded`` is the live rows' codes, scales and projections, as the
        file keeps them (``_vectors.decode``).
        """
        index = self.index
        assert isinstance(index, CompactVectorIndex)
        if dead:
            index.remove(np.array(dead, dtype=np.int64))
        if terms is not None:
            super().apply(dead, live, terms)
        if live:
            index.add_encoded(np.array(live, dtype=np.int64), *encoded)


class SeqMemo(Generic[K, V]):
    """What searches read, kept for one ``meta.seq`` (:class:`RowMemo`, :class:`DegreeMemo`).

    :attr:`seq` is the ``meta.seq`` the memo's cache has caught up to. Any
    committed write moves ``meta.seq`` (in this process or another), the
    cache's catch-up calls :meth:`reset`, and the memo starts empty, so it
    never answers for a state older than the cache's. A search puts back
    what it read with the ``seq`` it started from, which :meth:`put` drops if
    the memo has moved on meanwhile. A full memo starts again empty.
    """

    __slots__ = ("_entries", "_lock", "nbytes", "seq")

    MAX_ENTRIES = 4096
    """Entries kept at most."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[K, V] = {}
        self.seq = 0
        self.nbytes = 0
        """Bytes of the entries kept (an estimate, :meth:`entry_bytes` each)."""

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def entry_bytes(key: K, value: V) -> int:
        """Bytes one entry holds (an estimate); subclasses say for theirs."""
        return 200

    def reset(self, seq: int) -> None:
        """The cache caught up to ``seq``: forget everything read before."""
        with self._lock:
            if seq != self.seq:
                self._entries = {}
                self.nbytes = 0
                self.seq = seq

    def put(self, seq: int, entries: Sequence[tuple[K, V]]) -> None:
        """Keep ``(key, value)`` pairs read at ``seq``; dropped if the memo moved on."""
        with self._lock:
            if seq != self.seq:
                return
            if len(self._entries) + len(entries) > self.MAX_ENTRIES:
                self._entries = {}
                self.nbytes = 0
            for key, value in entries:
                if key not in self._entries:
                    self.nbytes += self.entry_bytes(key, value)
                self._entries[key] = value


class RowMemo(SeqMemo[int, MemoryRow]):
    """The rows searches of one scope read, by row id: their records, shared.

    A search reads about ninety candidate rows, most of them again and again
    for the scope's next queries; turning them into records (their JSON,
    sessions and links: three queries) was a third of a search's time
    without the query embedding, and building a new record of each kept row
    on every read was another tenth (0.27 ms of 2.6). Only searches that see
    the whole cache's scope, without a filter, read it (what they find in it
    is in their scope by construction; deletion and expiry are checked on
    the kept records).

    The records are shared, not copied: a search reads them and changes none
    (nothing in a search assigns to a record), and what leaves the library is
    copied at the door (:func:`engramdb.flows.shared.item` copies the
    metadata; its lists and dicts are new), so a caller that changes a
    result's metadata changes nothing here.
    """

    __slots__ = ()

    @staticmethod
    def entry_bytes(key: int, value: MemoryRow) -> int:
        """A record: ~1,100 bytes of objects, its text, and its metadata as JSON would be."""
        return 1_100 + len(value.text) + (32 * len(value.metadata))

    def get(self, rowid: int) -> MemoryRow | None:
        """The kept record of row ``rowid`` (shared: read it, never change it), or None."""
        return self._entries.get(rowid)

    def keep(self, seq: int, rows: Sequence[tuple[int, MemoryRow]]) -> None:
        """Keep ``(row id, record)`` pairs read at ``seq`` (records nobody changes after)."""
        self.put(seq, rows)


class DegreeMemo(SeqMemo[Any, int]):
    """Entity degrees searches counted, by the search's conditions and the entity."""

    __slots__ = ()

    MAX_ENTRIES = 8192

    def get(self, key: Any) -> int | None:
        """The count kept under ``key``, or None."""
        return self._entries.get(key)


# What a search reads first: the change counter, the epoch and the binding.
_META = (
    "SELECT key, value FROM meta WHERE key IN ('seq', 'epoch', 'embedder_model', 'embedder_dim', "
    "'vector_basis')"
)


class _Store:
    """Connections, transactions, the schema and the embedder binding; what every part uses."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        max_cached_vectors: int = 2_000_000,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        keyword_index: str = "database",
    ) -> None:
        """Open (creating and migrating if needed) the database at ``path``."""
        if keyword_index not in ("database", "process"):
            raise ValueError(
                f"keyword_index must be 'database' or 'process'; got {keyword_index!r}"
            )
        self.keyword_index = keyword_index
        """Where BM25 ranks: over the postings in the file (``database``, schema version
        5), or in a per-process index of each scope's terms (``process``, the ranking
        before; kept to compare). Set it before the first search."""
        # Whether the schema is current, so write transactions keep the postings.
        self._keywords_kept = False
        # The file's vector basis as last read by a write (``_vectors.flush``).
        self._basis_cache = _vectors.BasisCache()
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
            max_cached_vectors, epoch="0", lock=threading.Lock(), max_bytes=cache_bytes
        )
        self._caches = self._table.entries  # read by bench/perf.py
        self._migrate()
        self._keywords_kept = True

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
        """One write transaction: everything inside commits together or not at all.

        The keyword postings of every memory row it touched move, and the
        vectors it wrote are encoded, before the COMMIT, in the same
        transaction (``_keywords.flush``, ``_vectors.flush``).
        """
        con = self._conn()
        kept = self._keywords_kept
        if kept and not getattr(self._local, "keywords", False):
            with self._translate():
                for statement in (*_keywords.TRIGGERS, *_vectors.TRIGGERS):
                    con.execute(statement)
            self._local.keywords = True
        with self._translate():
            con.execute("BEGIN IMMEDIATE")
        try:
            yield con
            with self._translate():
                if kept:
                    _vectors.flush(con, self._basis_cache)
                    _keywords.flush(con)
                con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction, so multi-statement reads see one snapshot."""
        con = self._conn()
        # Numbers this thread's read transactions: what a memo of one snapshot keys on.
        self._local.reads = getattr(self._local, "reads", 0) + 1
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
                if step + 1 == KEYWORD_BACKFILL_VERSION:
                    posted = _keywords.rebuild(con)
                    log.info("posted the keyword terms of %d memories", posted)
                if step + 1 == VECTOR_BACKFILL_VERSION:
                    encoded = _vectors.backfill(con)
                    log.info("encoded the vectors of %d memories", encoded)
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
            raise mismatch_error(str(self.path), bound, mine)

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

    # -- moving to another embedder (Memory.reembed) -------------------------------------

    def change_mark(self) -> str:
        """The file's change counter (``meta.seq``), which every write stamps on its rows.

        A memory whose ``seq`` is above the mark was written after it (see
        :meth:`rebind_embedder`).
        """
        with self._read() as con:
            return str(con.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0])

    def embedding_sources(self, after: int, limit: int) -> list[EmbeddingSource]:
        """Up to ``limit`` memories with ``rowid > after``, in rowid order, deleted ones too.

        Each is what its vector is made of (text, speaker); one read per page.
        """
        with self._read() as con:
            rows = con.execute(
                "SELECT rowid, text, actor_id FROM memories WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (after, limit),
            ).fetchall()
        return [EmbeddingSource(int(r[0]), r[1], r[2]) for r in rows]

    def term_sources(self, after: int, limit: int) -> list[TermSource]:
        """Up to ``limit`` memories with ``rowid > after``: their terms and vector (one read)."""
        with self._read() as con:
            rows = con.execute(
                "SELECT m.rowid, coalesce(f.terms, ''), v.embedding FROM memories m "
                "LEFT JOIN memory_fts f ON f.rowid = m.rowid "
                "LEFT JOIN memory_vectors v ON v.memory_rowid = m.rowid "
                "WHERE m.rowid > ? ORDER BY m.rowid LIMIT ?",
                (after, limit),
            ).fetchall()
        return [
            TermSource(int(r[0]), r[1], None if r[2] is None else np.frombuffer(r[2], dtype=F32))
            for r in rows
        ]

    def attribute_terms_version(self) -> str | None:
        """The classifier whose reading the stored attribute terms hold (``meta``)."""
        with self._read() as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'attribute_terms'").fetchone()
        return None if row is None else str(row[0])

    def record_attribute_terms_version(self, version: str | None) -> None:
        """Record (None: forget) which classifier's reading the attribute terms hold."""
        with self._write() as con, self._translate():
            if version is None:
                con.execute("DELETE FROM meta WHERE key = 'attribute_terms'")
            else:
                con.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('attribute_terms', ?)",
                    (version,),
                )

    def retag(self, changes: Sequence[TermChange]) -> int:
        """New terms where they are still the old ones, in one write transaction.

        The memory's ``seq`` moves with them, which notes it for the keyword
        postings (``_keywords.sync`` before the COMMIT) and makes every
        process's cache re-read it.
        """
        if not changes:
            return 0
        with self._write() as con, self._translate():
            seq = self._bump(con)
            changed = 0
            for change in changes:
                cur = con.execute(
                    "UPDATE memory_fts SET terms = ? WHERE rowid = ? AND terms = ?",
                    (change.new, change.key, change.old),
                )
                if cur.rowcount:
                    con.execute("UPDATE memories SET seq = ? WHERE rowid = ?", (seq, change.key))
                    changed += 1
            return changed

    def rebind_embedder(
        self,
        old: tuple[str, int],
        new: tuple[str, int],
        vectors: Mapping[int, np.ndarray[Any, np.dtype[np.float32]]],
        since: str,
    ) -> Rebinding:
        """Replace every vector by ``vectors`` and bind ``new``, in one transaction.

        One ``BEGIN IMMEDIATE`` transaction: it holds the file's write lock, so
        no writer of any process can store a vector between the check and the
        commit. The file must still be bound to ``old``; a memory whose
        ``seq`` is above ``since`` (written since the caller read it) or that
        ``vectors`` lacks makes the call write nothing and return it as stale,
        with the current ``seq`` as the next mark. Otherwise every row of
        ``memory_vectors`` is rewritten, ``meta`` names ``new``, and the epoch
        moves, which makes every process drop its caches (vector indexes with
        their projected prefilters, BM25, the kept rowid sets) and read the
        new vectors afresh. A crash or an error before the commit leaves the
        file as it was: old binding, old vectors.
        """
        with self._write() as con, self._translate():
            meta = dict(
                con.execute(
                    "SELECT key, value FROM meta WHERE key IN ('seq', 'embedder_model', "
                    "'embedder_dim')"
                ).fetchall()
            )
            bound = (
                (meta["embedder_model"], meta["embedder_dim"]) if "embedder_model" in meta else None
            )
            if bound != (old[0], str(old[1])):
                raise moved_error(str(self.path), bound, old)
            stale, current = stale_keys(
                (
                    (int(r[0]), bool(r[1]))
                    for r in con.execute(
                        "SELECT rowid, seq > ? FROM memories ORDER BY rowid", (int(since),)
                    )
                ),
                vectors,
            )
            if stale:
                found: list[EmbeddingSource] = []
                for chunk in _chunks(stale, 500):
                    found += [
                        EmbeddingSource(int(r[0]), r[1], r[2])
                        for r in con.execute(
                            "SELECT rowid, text, actor_id FROM memories WHERE rowid IN "
                            f"({','.join('?' * len(chunk))}) ORDER BY rowid",
                            chunk,
                        )
                    ]
                return Rebinding(done=False, stale=found, mark=str(meta["seq"]))
            fresh = checked_vectors(vectors, current, new[1])
            # The basis was the old model's: the flush at commit fits one for the new.
            con.execute("DELETE FROM vector_basis")
            con.execute("DELETE FROM meta WHERE key = 'vector_basis'")
            con.execute("DELETE FROM memory_vectors")
            con.executemany(
                "INSERT INTO memory_vectors(memory_rowid, embedding) VALUES (?, ?)",
                ((key, _vec_blob(vec)) for key, vec in fresh),
            )
            con.execute("UPDATE meta SET value = ? WHERE key = 'embedder_model'", (new[0],))
            con.execute("UPDATE meta SET value = ? WHERE key = 'embedder_dim'", (str(new[1]),))
            con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
        self._binding = (new[0], new[1])
        with self._table.lock:
            self._table.clear()
        return Rebinding(done=True, written=len(fresh), mark=str(meta["seq"]))

    # -- writes ------------------------------------------------------------------------

    @staticmethod
    def _insert_history(con: sqlite3.Connection, event: HistoryEvent) -> None:
        cur = con.execute(
            "INSERT INTO history(memory_id, event, version, old_memory, new_memory, "
            "old_metadata, new_metadata, actor, reason, created_at, old_expires_at, "
            "new_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                event.old_expires_at,
                event.new_expires_at,
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

    # -- reads -------------------------------------------------------------------------

    def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """One memory by public id, or ``None``."""
        extra = "" if include_deleted else " AND m.deleted_at IS NULL"
        with self._read() as con:
            row = con.execute(
                f"SELECT {_COLS} FROM memories m WHERE m.id = ?{extra}", (memory_id,)
            ).fetchone()
            return None if row is None else self._hydrate(con, [row])[0]

    def history(self, memory_id: str) -> list[HistoryEvent]:
        """Every event of a memory, oldest first."""
        with self._read() as con:
            return self._history(con, memory_id)

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

    def _hydrate(self, con: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> list[MemoryRow]:
        """Turn raw ``_COLS`` rows into MemoryRows with sessions and links filled in."""
        out: list[MemoryRow] = []
        by_rowid: dict[int, MemoryRow] = {}
        for r in rows:
            row = memory_row(r, ISO_TEXT)
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
            labelled: dict[int, list[tuple[str, str]]] = {}
            for rowid, linked, kind, outgoing in con.execute(
                f"SELECT l.from_rowid, m.id, l.kind, 1 FROM memory_links l JOIN memories m "
                f"ON m.rowid = l.to_rowid WHERE l.from_rowid IN ({marks}) "
                "UNION ALL SELECT l.to_rowid, m.id, l.kind, 0 FROM memory_links l JOIN memories m "
                f"ON m.rowid = l.from_rowid WHERE l.to_rowid IN ({marks})",
                [*chunk, *chunk],
            ):
                labelled.setdefault(rowid, []).append((linked, link_label(bool(outgoing), kind)))
            for rowid, pairs in labelled.items():
                by_rowid[rowid].linked_ids, by_rowid[rowid].link_kinds = fold_links(pairs)
        return out

    def _where(
        self, scope: Scope, where: Node | None, include_expired: bool = False
    ) -> tuple[str, list[Any]]:
        live = live_clause(SQLITE, include_expired=include_expired)
        params: list[Any] = [] if include_expired else [utc_now()]
        clause, scope_params = _scope_clause(scope)
        sql = f"{live} AND {clause}"
        params += scope_params
        if where is not None:
            fsql, fparams = compile_sqlite(where)
            sql += f" AND ({fsql})"
            params += fparams
        return sql, params

    @staticmethod
    def _history(con: sqlite3.Connection, memory_id: str) -> list[HistoryEvent]:
        rows = con.execute(
            f"SELECT {HISTORY_COLUMNS} FROM history WHERE memory_id = ? ORDER BY rowid",
            (memory_id,),
        ).fetchall()
        return [history_event(r, ISO_TEXT) for r in rows]

    # -- vector search -------------------------------------------------------------------

    def _bound_in(self, meta: dict[str, str]) -> tuple[str, int] | None:
        """The binding in a ``meta`` read; refuses one other than this process's."""
        if "embedder_model" not in meta:
            return None
        if self._binding is not None:
            self._refuse_other((meta["embedder_model"], meta.get("embedder_dim")), self._binding)
        return meta["embedder_model"], int(meta["embedder_dim"])

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


_chunks = chunks


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
