"""Import a mem0 store: its vector store (local Qdrant, FAISS or pgvector) and its SQLite history.

mem0 (the open-source ``mem0ai`` package) keeps each memory as one point of
its vector store: the point's id is the memory id, its payload holds the
text (``data``), mem0's md5 ``hash``, the scope (``user_id`` / ``agent_id`` /
``run_id``), ``actor_id``, ``role``, ``created_at`` / ``updated_at`` (ISO text,
some with a UTC offset), ``expiration_date``, ``attributed_to``,
``memory_type``, its keyword field ``text_lemmatized``, and every metadata
key the caller gave, flattened beside them. Its history is a separate SQLite
file (``history_db_path``, by default ``~/.mem0/history.db``) with one row per
ADD / UPDATE / DELETE.

:func:`import_mem0` reads both, turns every live memory into a record of
engramdb's export format (ids, scopes, metadata, times and history kept) and
hands them to :meth:`~engramdb.Memory.import_jsonl`, so the import is
validated and written like an engramdb export: one transaction, nothing
written when any part fails. What is read where:

- local Qdrant (``QdrantClient(path=...)``, mem0's default): through
  qdrant-client itself (the ``mem0-import`` extra), which loads the points;
  Qdrant's local mode keeps them as Python pickles, so the folder must come
  from a trusted source;
- FAISS: ``<path>/<collection>.json`` (mem0 ≥ 2.2) or the older
  ``<collection>.pkl`` (read with an unpickler that refuses every class, so
  it cannot run code) hold the payloads; the vectors, needed only to keep
  them, are read from ``<collection>.faiss`` (a flat index) without faiss;
- pgvector: the table ``<collection>`` (``id``, ``vector``, ``payload``), read
  with psycopg in a read-only transaction.

mem0 never records which embedding model made its vectors, so they are kept
only when asked (``keep_vectors``: the caller says the model is engramdb's)
and their dimension is the embedder's; otherwise every memory is embedded
again with engramdb's embedder. Memories deleted in mem0 are gone from its
vector store; their history names no scope, so it is not imported (it is
counted in the report).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import pickle
import re
import sqlite3
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from engramdb._face import EXPORT_FORMAT
from engramdb.core.text import content_hash
from engramdb.core.validate import check_metadata, check_scope, check_text, parse_timestamp
from engramdb.errors import ImportFormatError, ValidationError
from engramdb.flows.shared import expires_at_of
from engramdb.memory import Memory
from engramdb.search import document_text
from engramdb.stores.base import visible_scope

__all__ = [
    "DEFAULT_COLLECTION",
    "Mem0Event",
    "Mem0ImportError",
    "Mem0ImportReport",
    "Mem0Point",
    "Mem0Store",
    "Progress",
    "Skipped",
    "default_history_db",
    "import_mem0",
    "read_faiss",
    "read_flat_index",
    "read_history",
    "read_pgvector",
    "read_qdrant",
]

DEFAULT_COLLECTION = "mem0"
"""mem0's default ``collection_name`` (the Qdrant collection, FAISS file stem, pgvector table)."""

EMBED_BATCH = 64
"""Memories embedded per call when re-embedding (the progress bar moves per batch)."""

Progress = Callable[[str, int, int], None]
"""Told ``(stage, done, total)`` as an import goes: ``"embedding"``, then ``"writing"``."""

# Payload keys that are fields of a mem0 memory, not metadata.
_DROPPED = frozenset({"data", "hash", "text_lemmatized", "created_at", "updated_at", "id"})
_FIELDS = ("actor_id", "role", "attributed_to", "memory_type")
_SCOPE = ("user_id", "agent_id", "run_id")
_PAYLOAD_KEYS = _DROPPED | set(_FIELDS) | set(_SCOPE) | {"expiration_date"}

_FROM_HISTORY = "from mem0's history"
_NOT_IN_HISTORY = "from mem0; its history has no record of this change"


class Mem0ImportError(ImportFormatError):
    """A mem0 store cannot be read or imported as it is; nothing was imported."""


@dataclass(frozen=True)
class Mem0Point:
    """One point of a mem0 vector store: a memory id, its payload and (when read) its vector."""

    id: str
    payload: dict[str, Any]
    vector: np.ndarray[Any, np.dtype[np.float32]] | None = None


@dataclass(frozen=True)
class Mem0Event:
    """One row of mem0's ``history`` table, in the order mem0 wrote them."""

    memory_id: str
    event: str
    old_memory: str | None
    new_memory: str | None
    created_at: str | None
    updated_at: str | None


@dataclass(frozen=True)
class Skipped:
    """A mem0 memory that was not imported, and why."""

    id: str
    reason: str


@dataclass
class Mem0ImportReport:
    """What an import did (or, with ``dry_run``, would do)."""

    source: str
    """The mem0 store read, in words."""
    memories: int
    """Memories imported (or that would be)."""
    history_events: int
    """History events written with them (or that would be)."""
    skipped: list[Skipped]
    history_db: str | None
    """The history file read; ``None`` when none was."""
    history_not_imported: int
    """Memories in the history file but not in the store (deleted in mem0, or another store's)."""
    vectors: Literal["kept", "re-embedded", "not computed"]
    """``not computed`` on a dry run without ``keep_vectors``."""
    embedder: str
    """engramdb's embedder model (the vectors' model after the import)."""
    dry_run: bool
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``engram import mem0 --json`` prints it)."""
        return asdict(self)


# -- the stores ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mem0Store:
    """Where a mem0 vector store is: ``kind`` and a folder (qdrant, faiss) or a DSN (pgvector)."""

    kind: Literal["qdrant", "faiss", "pgvector"]
    location: str
    collection: str = DEFAULT_COLLECTION

    def describe(self) -> str:
        """The store in words, for messages (a DSN's password is not shown)."""
        where = _redact(self.location) if self.kind == "pgvector" else self.location
        what = "table" if self.kind == "pgvector" else "collection"
        return f"mem0 {self.kind} store {where} ({what} {self.collection!r})"

    def read(self, *, vectors: bool) -> list[Mem0Point]:
        """Every point of the collection, with its vector when ``vectors``."""
        if self.kind == "qdrant":
            return read_qdrant(Path(self.location), self.collection, vectors=vectors)
        if self.kind == "faiss":
            return read_faiss(Path(self.location), self.collection, vectors=vectors)
        return read_pgvector(self.location, self.collection, vectors=vectors)


def read_qdrant(path: Path, collection: str, *, vectors: bool) -> list[Mem0Point]:
    """The points of a local Qdrant folder (mem0's ``qdrant`` vector store with ``path``).

    Needs qdrant-client (``pip install 'engramdb[mem0-import]'``), which loads
    the points itself: local Qdrant stores them as pickles, so read only a
    folder you trust. The folder must not be open in another process (a
    running mem0): Qdrant's local mode locks it.
    """
    if not path.is_dir():
        raise Mem0ImportError(f"local Qdrant folder {path} does not exist")
    if not (path / "meta.json").is_file():
        raise Mem0ImportError(
            f"{path} is not a local Qdrant folder (it has no meta.json); give the `path` "
            "of mem0's qdrant vector_store config (mem0's default is /tmp/qdrant)"
        )
    try:
        from qdrant_client import QdrantClient
    except ImportError:
        raise Mem0ImportError(
            "reading a local Qdrant store needs the qdrant-client package: "
            "pip install 'engramdb[mem0-import]'"
        ) from None
    in_use = (
        f"local Qdrant folder {path} is open in another process (a running mem0?); "
        "stop it and import again"
    )
    if _locked(path / ".lock"):
        raise Mem0ImportError(in_use)
    try:
        client = QdrantClient(path=str(path))
    except RuntimeError as exc:  # locked since the check above
        raise Mem0ImportError(f"{in_use} ({exc})") from None
    except Exception as exc:
        raise Mem0ImportError(f"cannot open local Qdrant folder {path}: {exc}") from None
    try:
        names = sorted(c.name for c in client.get_collections().collections)
        if collection not in names:
            raise Mem0ImportError(
                f"local Qdrant folder {path} has no collection {collection!r} "
                f"(it has: {', '.join(names) or 'none'}); give mem0's collection_name"
            )
        points: list[Mem0Point] = []
        offset: Any = None
        while True:
            batch, offset = client.scroll(
                collection, limit=256, offset=offset, with_payload=True, with_vectors=vectors
            )
            for p in batch:
                vector = _dense_vector(p.vector) if vectors else None
                points.append(Mem0Point(str(p.id), dict(p.payload or {}), vector))
            if offset is None:
                return points
    finally:
        client.close()


def _locked(lock: Path) -> bool:
    """Whether a Qdrant client holds the folder's lock file (POSIX ``flock``, as Qdrant takes it).

    Checked before opening: a client that finds the folder locked raises from
    its constructor and leaves its lock file open.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: the client's own check is the only one
        return False
    try:
        with lock.open("rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:  # no lock file yet (or unreadable): the client decides
        return False
    return False


def _dense_vector(value: object) -> np.ndarray[Any, np.dtype[np.float32]] | None:
    """A Qdrant point's dense vector: unnamed, or named ``""`` beside mem0's sparse ``bm25``."""
    if isinstance(value, dict):
        value = value.get("")
    if isinstance(value, list) and all(isinstance(x, int | float) for x in value):
        return np.asarray(value, dtype=np.float32)
    return None


def read_faiss(path: Path, collection: str, *, vectors: bool) -> list[Mem0Point]:
    """The points of mem0's FAISS store in ``path`` (``<collection>.json`` or ``.pkl``, ``.faiss``).

    The payloads are in the docstore file; the vectors (only with ``vectors``)
    in the flat index, read by :func:`read_flat_index`.
    """
    if not path.is_dir():
        raise Mem0ImportError(f"FAISS folder {path} does not exist")
    json_file, pkl_file = path / f"{collection}.json", path / f"{collection}.pkl"
    if json_file.is_file():
        try:
            data = json.loads(json_file.read_text(encoding="utf-8"))
            docstore = data["docstore"]
            index_to_id = {int(k): v for k, v in data["index_to_id"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Mem0ImportError(f"{json_file} is not a mem0 FAISS docstore: {exc}") from None
        source = json_file
    elif pkl_file.is_file():
        docstore, index_to_id = _read_pickled_docstore(pkl_file)
        source = pkl_file
    else:
        found = sorted({p.stem for p in path.glob("*.faiss")})
        raise Mem0ImportError(
            f"FAISS folder {path} has no docstore {collection}.json or {collection}.pkl "
            f"(collections there: {', '.join(found) or 'none'}); give mem0's collection_name"
        )
    if not isinstance(docstore, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in docstore.items()
    ):
        raise Mem0ImportError(f"{source}: the docstore must map memory ids to payload objects")
    if not all(isinstance(v, str) for v in index_to_id.values()):
        raise Mem0ImportError(f"{source}: index_to_id must map positions to memory ids")
    matrix = None
    if vectors:
        matrix = read_flat_index(path / f"{collection}.faiss")
        if matrix.shape[0] != len(index_to_id) or any(
            not 0 <= i < matrix.shape[0] for i in index_to_id
        ):
            raise Mem0ImportError(
                f"{path / f'{collection}.faiss'} holds {matrix.shape[0]} vectors but the "
                f"docstore places {len(index_to_id)}: the two files do not belong together"
            )
    position = {memory_id: i for i, memory_id in index_to_id.items()}
    points = []
    for memory_id, payload in docstore.items():
        vector = None
        if matrix is not None and memory_id in position:
            vector = matrix[position[memory_id]]
        points.append(Mem0Point(memory_id, dict(payload), vector))
    return points


class _NoClasses(pickle.Unpickler):
    """Loads plain data only (dicts, lists, strings, numbers): every class is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: plain data only")


def _read_pickled_docstore(path: Path) -> tuple[dict[str, Any], dict[int, str]]:
    """mem0's legacy FAISS docstore: a pickled ``(docstore, index_to_id)`` pair."""
    try:
        with path.open("rb") as f:
            data = _NoClasses(f).load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
        raise Mem0ImportError(f"{path} is not a mem0 FAISS docstore: {exc}") from None
    if not (
        isinstance(data, tuple)
        and len(data) == 2
        and isinstance(data[0], dict)
        and isinstance(data[1], dict)
        and all(isinstance(k, int) for k in data[1])
    ):
        raise Mem0ImportError(
            f"{path} is not a mem0 FAISS docstore: expected (docstore, index_to_id)"
        )
    return data[0], data[1]


_FLAT_MAGIC = {b"IxFI": "inner product", b"IxF2": "L2"}


def read_flat_index(path: Path) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The vectors of a FAISS flat index file (``IndexFlatIP`` / ``IndexFlatL2``), one per row.

    mem0 builds only these two; their file is a small header (dimension,
    count, metric) and the float32 vectors, read here without faiss. Any
    other index type is read with faiss when it is installed.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise Mem0ImportError(
            f"cannot read the FAISS index {path} ({exc.strerror}); it holds the vectors "
            "--keep-vectors keeps: import without it to embed the memories again"
        ) from None
    if data[:4] not in _FLAT_MAGIC:
        return _faiss_fallback(path, data[:4])
    try:
        dim, count = struct.unpack_from("<iq", data, 4)
        # Two unused int64 fields, then is_trained (1 byte) and the metric (int32).
        (metric,) = struct.unpack_from("<i", data, 33)
        offset = 37 + (4 if metric > 1 else 0)  # other metrics carry a float argument
        (n_floats,) = struct.unpack_from("<Q", data, offset)
        offset += 8
    except struct.error:
        raise Mem0ImportError(f"FAISS index {path} is truncated") from None
    if dim <= 0 or count < 0 or n_floats != dim * count or len(data) != offset + 4 * n_floats:
        raise Mem0ImportError(
            f"FAISS index {path} is damaged: {count} vectors of {dim} dimensions do not "
            f"fit its {len(data)} bytes"
        )
    flat = np.frombuffer(data, dtype="<f4", count=n_floats, offset=offset)
    return flat.reshape(count, dim).astype(np.float32)


def _faiss_fallback(path: Path, magic: bytes) -> np.ndarray[Any, np.dtype[np.float32]]:
    try:
        import faiss  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise Mem0ImportError(
            f"FAISS index {path} is not a flat index (it starts with {magic!r}); reading it "
            "needs faiss (pip install faiss-cpu), or import without --keep-vectors"
        ) from None
    index = faiss.read_index(str(path))
    return np.asarray(index.reconstruct_n(0, index.ntotal), dtype=np.float32)


def read_pgvector(dsn: str, table: str, *, vectors: bool) -> list[Mem0Point]:
    """The rows of mem0's pgvector table (``id``, ``vector``, ``payload``), read-only.

    ``table`` may name a schema too (``schema.table``); otherwise the search
    path finds it, as it did for mem0.
    """
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        raise Mem0ImportError(
            "reading a pgvector store needs psycopg: pip install 'engramdb[postgres]'"
        ) from None
    name = sql.Identifier(*table.split("."))
    try:
        con = psycopg.connect(dsn, connect_timeout=10)
    except psycopg.Error as exc:
        raise Mem0ImportError(f"cannot connect to PostgreSQL at {_redact(dsn)}: {exc}") from None
    try:
        con.read_only = True
        found = con.execute("SELECT to_regclass(%s)::text", (name.as_string(con),)).fetchone()
        if found is None or found[0] is None:
            raise Mem0ImportError(
                f"PostgreSQL at {_redact(dsn)} has no table {table!r}; give mem0's "
                "collection_name (its default is 'mem0')"
            )
        columns = {
            r[0]
            for r in con.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attnum > 0 AND NOT attisdropped",
                (name.as_string(con),),
            )
        }
        missing = {"id", "payload", "vector"} - columns
        if missing:
            raise Mem0ImportError(
                f"table {table!r} is not a mem0 pgvector collection: it has no "
                f"{', '.join(sorted(missing))} column"
            )
        vector_sql = sql.SQL(", vector::real[]") if vectors else sql.SQL("")
        rows = con.execute(
            sql.SQL("SELECT id::text, payload{} FROM {} ORDER BY id").format(vector_sql, name)
        ).fetchall()
    except psycopg.Error as exc:
        raise Mem0ImportError(f"cannot read table {table!r}: {exc}") from None
    finally:
        con.close()
    points = []
    for row in rows:
        payload = row[1]
        if isinstance(payload, str):
            with contextlib.suppress(ValueError):
                payload = json.loads(payload)
        vector = np.asarray(row[2], dtype=np.float32) if vectors and row[2] is not None else None
        points.append(Mem0Point(row[0], payload if isinstance(payload, dict) else {}, vector))
    return points


def _redact(dsn: str) -> str:
    """A DSN without its password (URL or ``key=value`` form), for messages."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        if parts.password is None:
            return dsn
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn)


# -- the history -----------------------------------------------------------------------------


def default_history_db() -> Path:
    """Where mem0 keeps its history by default: ``$MEM0_DIR/history.db``, else ``~/.mem0/``."""
    home = os.environ.get("MEM0_DIR") or str(Path.home() / ".mem0")
    return Path(home) / "history.db"


# Columns of mem0's history table, and the names older releases gave some of them.
_HISTORY_COLUMNS = {
    "memory_id": ("memory_id",),
    "event": ("event",),
    "old_memory": ("old_memory", "prev_value"),
    "new_memory": ("new_memory", "new_value"),
    "created_at": ("created_at", "timestamp"),
    "updated_at": ("updated_at",),
}


def read_history(path: Path) -> dict[str, list[Mem0Event]]:
    """mem0's history file: every memory's events, oldest first (the order mem0 wrote them).

    Opened read-only: the file is never created or changed.
    """
    if not path.is_file():
        raise Mem0ImportError(f"mem0 history file {path} does not exist")
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise Mem0ImportError(f"cannot open mem0 history file {path}: {exc}") from None
    try:
        columns = {r[1] for r in con.execute("PRAGMA table_info(history)")}
        if not columns:
            raise Mem0ImportError(
                f"{path} has no history table: is it mem0's history.db (its history_db_path)?"
            )
        chosen: dict[str, str | None] = {}
        for key, names in _HISTORY_COLUMNS.items():
            chosen[key] = next((n for n in names if n in columns), None)
        lacking = [k for k in ("memory_id", "event") if chosen[k] is None]
        if lacking or (chosen["old_memory"] is None and chosen["new_memory"] is None):
            raise Mem0ImportError(
                f"{path}: the history table has columns {', '.join(sorted(columns))}, "
                "not mem0's (memory_id, event, old_memory, new_memory, created_at, ...)"
            )
        select = ", ".join(f'"{c}"' if c else "NULL" for c in chosen.values())
        # rowid order is the order mem0 wrote the events (its created_at is the
        # memory's creation time on UPDATE events, so it cannot order them).
        rows = con.execute(f"SELECT {select} FROM history ORDER BY rowid").fetchall()
    except sqlite3.DatabaseError as exc:
        raise Mem0ImportError(f"cannot read mem0 history file {path}: {exc}") from None
    finally:
        con.close()
    events: dict[str, list[Mem0Event]] = {}
    for memory_id, event, old, new, created, updated in rows:
        if memory_id is None or event is None:
            continue
        events.setdefault(str(memory_id), []).append(
            Mem0Event(
                str(memory_id),
                str(event).upper(),
                _str_or_none(old),
                _str_or_none(new),
                _str_or_none(created),
                _str_or_none(updated),
            )
        )
    return events


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


# -- mem0 records to engramdb records --------------------------------------------------------


@dataclass
class _Planned:
    record: dict[str, Any]
    vector: np.ndarray[Any, np.dtype[np.float32]] | None
    key: tuple[str, str]
    """(partition, content hash): engramdb keeps one live copy of a text per partition."""


def _time(value: object, what: str) -> str | None:
    """``value`` as engramdb's ISO UTC text; ``None`` when absent."""
    if value is None or value == "":
        return None
    return parse_timestamp(value, what)


def _event_time(*values: str | None, default: str) -> str:
    for value in values:
        with contextlib.suppress(ValidationError):
            moment = _time(value, "history time")
            if moment is not None:
                return moment
    return default


def _history(
    text: str,
    created_at: str,
    updated_at: str,
    metadata: dict[str, Any],
    expires_at: str | None,
    events: Sequence[Mem0Event],
) -> list[dict[str, Any]]:
    """The engramdb history events (ADD = version 1, each UPDATE one more) from mem0's rows.

    mem0's history records text only: each event carries the memory's
    metadata and expiry as they are now, so restoring a version brings back
    its text and keeps them. A history that does not start with an ADD, or
    does not end at the stored text, gets the missing event (reason says so).
    """

    def event(kind: str, version: int, old: str | None, new: str, at: str, reason: str) -> Any:
        return {
            "event": kind,
            "version": version,
            "old_memory": old,
            "new_memory": new,
            "old_metadata": metadata if kind != "ADD" else None,
            "new_metadata": metadata,
            "actor": "import",
            "reason": reason,
            "created_at": at,
            "old_expires_at": expires_at if kind != "ADD" else None,
            "new_expires_at": expires_at,
        }

    out: list[dict[str, Any]] = []
    current: str | None = None
    for e in events:
        if e.event == "ADD" and not out:
            current = e.new_memory if e.new_memory is not None else text
            at = _event_time(e.created_at, default=created_at)
            out.append(event("ADD", 1, None, current, at, _FROM_HISTORY))
        elif e.event == "UPDATE" and e.new_memory is not None:
            if not out:
                first = e.old_memory if e.old_memory is not None else e.new_memory
                out.append(event("ADD", 1, None, first, created_at, _NOT_IN_HISTORY))
                current = first
            at = _event_time(e.updated_at, e.created_at, default=updated_at)
            out.append(event("UPDATE", len(out) + 1, current, e.new_memory, at, _FROM_HISTORY))
            current = e.new_memory
        # A second ADD, or a DELETE of a memory that is still in the store, cannot be
        # replayed onto it: mem0 writes neither for one id.
    if not out:
        out.append(event("ADD", 1, None, text, created_at, _NOT_IN_HISTORY))
    elif current != text:
        out.append(event("UPDATE", len(out) + 1, current, text, updated_at, _NOT_IN_HISTORY))
    return out


def _plan_point(
    point: Mem0Point, events: Sequence[Mem0Event], limit: int
) -> tuple[_Planned | None, str | None]:
    """One mem0 point as an engramdb export record; or why it cannot be one."""
    p = point.payload
    if "data" not in p:
        return None, "its payload has no 'data' (mem0's text of the memory)"
    try:
        text = check_text(p["data"], limit)
        ids = {k: p.get(k) or None for k in _SCOPE}
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="a memory")
        fields: dict[str, str] = {}
        for key in _FIELDS:
            value = p.get(key)
            if value is None or value == "":
                continue
            if not isinstance(value, str):
                raise ValidationError(f"{key} must be text, got {type(value).__name__}")
            fields[key] = value
        added = next((e for e in events if e.event == "ADD"), None)
        created_at = _time(p.get("created_at"), "created_at") or (
            _time(added.created_at, "created_at of its ADD in the history") if added else None
        )
        if created_at is None:
            raise ValidationError("it has no created_at, in its payload or its history")
        updated_at = _time(p.get("updated_at"), "updated_at") or created_at
        expiry = p.get("expiration_date")
        expires_at = expires_at_of(expiry) if expiry not in (None, "") else None
        metadata = check_metadata({k: v for k, v in p.items() if k not in _PAYLOAD_KEYS})
    except ValidationError as exc:
        return None, str(exc)
    history = _history(text, created_at, updated_at, metadata, expires_at, events)
    record: dict[str, Any] = {
        "id": point.id,
        "memory": text,
        "metadata": metadata,
        "created_at": created_at,
        "updated_at": updated_at,
        **{k: v for k, v in ids.items() if v is not None},
        **fields,
        "expires_at": expires_at,
        "deleted_at": None,
        "version": history[-1]["version"],
        "run_ids": [],
        "agent_ids": [],
        "linked_memory_ids": [],
        "history": history,
    }
    dedup = (visible_scope(scope).partition, content_hash(text))
    return _Planned(record, point.vector, dedup), None


def _memories(n: int) -> str:
    return f"{n} memory" if n == 1 else f"{n} memories"


def _scope_words(record: dict[str, Any]) -> str:
    return ", ".join(f"{k}={record[k]!r}" for k in _SCOPE if record.get(k) is not None)


def _plan(
    points: Iterable[Mem0Point], history: dict[str, list[Mem0Event]], limit: int
) -> tuple[list[_Planned], list[Skipped], list[Skipped]]:
    """(records to import, repeats left out, invalid points)."""
    planned: list[_Planned] = []
    invalid: list[Skipped] = []
    for point in points:
        done, why = _plan_point(point, history.get(point.id, ()), limit)
        if done is None:
            invalid.append(Skipped(point.id, why or "invalid"))
        else:
            planned.append(done)
    # mem0 stores an exact repeat again; engramdb keeps one live copy of a text per
    # scope (the partition): the oldest is imported, the later copies are reported.
    planned.sort(key=lambda r: (r.record["created_at"], r.record["id"]))
    first: dict[tuple[str, str], str] = {}
    kept: list[_Planned] = []
    repeats: list[Skipped] = []
    for r in planned:
        original = first.setdefault(r.key, r.record["id"])
        if original == r.record["id"]:
            kept.append(r)
        else:
            repeats.append(
                Skipped(
                    r.record["id"],
                    f"repeats the text of memory {original} ({_scope_words(r.record)}); "
                    "engramdb keeps one copy of a text per scope",
                )
            )
    return kept, repeats, invalid


# -- the import ------------------------------------------------------------------------------


def _unit(vector: np.ndarray[Any, np.dtype[np.float32]]) -> np.ndarray[Any, np.dtype[np.float32]]:
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("zero or not finite")
    return (vector / norm).astype(np.float32)


def _vectors(
    memory: Memory,
    planned: list[_Planned],
    keep: bool,
    on_progress: Progress | None,
) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
    dim = memory.embedder.dim
    if keep:
        out = []
        for r in planned:
            v = r.vector
            if v is None:
                raise Mem0ImportError(
                    f"memory {r.record['id']} has no dense vector in the mem0 store; "
                    "import without --keep-vectors to embed the memories again"
                )
            if v.shape != (dim,):
                raise Mem0ImportError(
                    f"mem0's vectors have {v.size} dimensions and engramdb's embedder "
                    f"({memory.embedder.model}) makes {dim}: they are not the same model; "
                    "import without --keep-vectors to embed the memories again"
                )
            try:
                out.append(_unit(v))
            except ValueError:
                raise Mem0ImportError(
                    f"memory {r.record['id']} has a zero or non-finite vector in the mem0 "
                    "store; import without --keep-vectors to embed the memories again"
                ) from None
        return out
    fusion = memory.config.retrieval
    texts = [document_text(r.record["memory"], r.record.get("actor_id"), fusion) for r in planned]
    vectors: list[np.ndarray[Any, np.dtype[np.float32]]] = []
    for start in range(0, len(texts), EMBED_BATCH):
        if on_progress is not None:
            on_progress("embedding", start, len(texts))
        vectors.extend(memory.embedder.embed_documents(texts[start : start + EMBED_BATCH]))
    if on_progress is not None:
        on_progress("embedding", len(texts), len(texts))
    return vectors


def _jsonl(records: Iterable[dict[str, Any]], embedder: str | None, dim: int) -> Iterator[str]:
    yield json.dumps({"engramdb_export": EXPORT_FORMAT, "embedder": embedder, "dim": dim}) + "\n"
    for record in records:
        yield json.dumps(record, ensure_ascii=False) + "\n"


def _check_target(memory: Memory, planned: list[_Planned]) -> None:
    """Refuse early what the write would refuse, before any embedding is spent."""
    memory.check_embedder("import into a store of this embedder, or a new one")
    # One lookup per id; the import checks again inside its transaction.
    clash = [
        r.record["id"]
        for r in planned
        if memory.store.get(r.record["id"], include_deleted=True) is not None
    ]
    if clash:
        raise Mem0ImportError(
            f"{_memories(len(clash))} of the mem0 store are already in this engramdb store "
            f"(first: {clash[0]!r}); import into an empty store, or purge them first; "
            "nothing was imported"
        )


def import_mem0(
    memory: Memory,
    store: Mem0Store,
    *,
    history_db: Path | None = None,
    keep_vectors: bool = False,
    skip_invalid: bool = False,
    dry_run: bool = False,
    on_progress: Progress | None = None,
) -> Mem0ImportReport:
    """Bring the memories of a mem0 store, with their history, into ``memory``'s store.

    Ids, scopes, speakers and roles, metadata, expiry and times are kept;
    ``history_db`` (mem0's ``history.db``) supplies each memory's ADD and
    UPDATE events, otherwise each gets one ADD. Vectors are embedded again
    with engramdb's embedder unless ``keep_vectors`` (mem0 used the same
    model; its dimension must match). A later exact repeat of a text in the
    same scope is left out (engramdb keeps one copy; mem0 stored it twice).
    A memory that cannot be imported (no ``data``, no scope, a reserved
    metadata key, ...) fails the whole import, or with ``skip_invalid`` is
    left out; both kinds are listed in the report.

    The write is :meth:`~engramdb.Memory.import_jsonl`'s: one transaction,
    nothing written if anything fails. ``dry_run`` reads, checks and
    reports, and writes nothing. ``on_progress`` is told how it goes.
    """
    memory._whole_store("import_mem0()")
    points = store.read(vectors=keep_vectors)
    events = read_history(history_db) if history_db is not None else {}
    planned, repeats, invalid = _plan(points, events, memory.config.limits.max_text_chars)
    if invalid and not skip_invalid:
        first = invalid[0]
        raise Mem0ImportError(
            f"{_memories(len(invalid))} of the {store.describe()} cannot be imported "
            f"(first: {first.id}: {first.reason}); nothing was imported; "
            "--skip-invalid imports the others"
        )
    live = {p.id for p in points}
    notes = []
    if history_db is None:
        notes.append("no mem0 history was read: each memory has one ADD event")
    gone = [rows for memory_id, rows in events.items() if memory_id not in live]
    deleted = sum(1 for rows in gone if rows[-1].event == "DELETE")
    if deleted:
        notes.append(
            f"the history of {_memories(deleted)} deleted in mem0 was not imported: "
            "they are gone from its vector store and their history names no scope"
        )
    if len(gone) > deleted:
        notes.append(
            f"the history file also holds {_memories(len(gone) - deleted)} that are not in "
            "this store (another collection's?); their history was not imported"
        )
    records = [r.record for r in planned]
    _check_target(memory, planned)
    vectors_done: Literal["kept", "re-embedded", "not computed"]
    if dry_run and not keep_vectors:
        vectors_done = "not computed"
        header_model: str | None = None
    else:
        vectors = _vectors(memory, planned, keep_vectors, on_progress)
        for record, vector in zip(records, vectors, strict=True):
            record["embedding"] = base64.b64encode(
                np.asarray(vector, dtype="<f4").tobytes()
            ).decode("ascii")
        vectors_done = "kept" if keep_vectors else "re-embedded"
        header_model = memory.embedder.model
    buf = io.StringIO("".join(_jsonl(records, header_model, memory.embedder.dim)))
    if on_progress is not None:
        on_progress("writing", 0, len(records))
    if dry_run:
        # The import's own reading and validation, without its write.
        memory._read_import(buf)
        count = len(records)
    else:
        count = memory.import_jsonl(buf)
    if on_progress is not None:
        on_progress("writing", count, len(records))
    return Mem0ImportReport(
        source=store.describe(),
        memories=count,
        history_events=sum(len(r["history"]) for r in records),
        skipped=[*repeats, *invalid],
        history_db=str(history_db) if history_db is not None else None,
        history_not_imported=len(gone),
        vectors=vectors_done,
        embedder=memory.embedder.model,
        dry_run=dry_run,
        notes=notes,
    )
