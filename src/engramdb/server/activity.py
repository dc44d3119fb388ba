"""The activity log: who did what through the servers, never what was said.

Each request a server answers for a caller — a REST route (engramdb's own or
mem0's), an MCP tool call, a change made in the web UI — leaves one row: when,
the API key's public id (never the key), the face (``rest``, ``mem0``,
``mcp``, ``ui``), the operation (``add``, ``search``, ``update`` ...), the
scope ids it ran in, the memory or failure id it named, the status code and
how long it took. Rows never hold memory text, messages, queries, filters,
metadata or any part of a key's secret: only those fields are ever written,
each an id or a word from a fixed list, and an id that does not look like an
id (a path segment made of free text) is left out.

Where: a small SQLite file beside the key file (``activity.db`` next to
``keys.db``), not inside it. The key file holds the digests the servers check
on every request and is changed by ``engram keys``; a log is written all the
time and may be deleted whenever, so it gets its own file (mode 0600, WAL), and
losing or removing it never touches a key. An MCP server over the same key
file writes to the same log.

Bounded: the newest :data:`DEFAULT_ROWS` rows are kept (``ENGRAM_ACTIVITY_ROWS``
or ``max_rows`` changes it; 0 turns the log off); older ones are deleted as
new ones arrive.

Cheap: :meth:`ActivityLog.record` appends the row to a list in memory (about
a microsecond); a short-lived thread writes what is pending in one
transaction a moment later (or at once when :data:`BATCH` rows wait), so a
request never waits for the disk. A reader (:meth:`ActivityLog.query`) first
writes what is pending, so the log it shows is complete. What was pending
when a process died is lost (at most a second of rows).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "BATCH",
    "DEFAULT_ROWS",
    "FACES",
    "OPERATIONS",
    "ActivityLog",
    "ActivityMiddleware",
    "Entry",
    "begin",
    "current",
    "end",
    "note",
    "note_caller",
    "note_status",
    "want",
]

DEFAULT_ROWS = 100_000
"""Rows kept: the newest ones (about 10 MB)."""
BATCH = 64
"""Pending rows that make the writer start at once rather than after :data:`DELAY_S`."""
DELAY_S = 0.5
"""How long a row waits in memory at most before it is written (under light traffic)."""
FACES = ("rest", "mem0", "mcp", "ui")
"""Where a request came in: engramdb's REST API, mem0's REST routes, MCP tools, the web UI."""
OPERATIONS = (
    "add",
    "search",
    "list",
    "get",
    "update",
    "delete",
    "delete_all",
    "restore",
    "purge",
    "history",
    "timeline",
    "source_messages",
    "failures",
    "retry_extraction",
    "export",
    "reset",
    "counts",
    "sign_in",
    "sign_out",
    "create_key",
    "revoke_key",
)
"""The operations a row may name (a request refused before it reached one names its route)."""
SCOPE_KINDS = ("user_id", "agent_id", "run_id")

log = logging.getLogger("engramdb.server")

_ID_RE = re.compile(r"^[A-Za-z0-9._:@+-]{1,64}$")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS activity (
    id        INTEGER PRIMARY KEY,
    at        TEXT NOT NULL,
    key_id    TEXT,
    face      TEXT NOT NULL,
    operation TEXT NOT NULL,
    user_id   TEXT,
    agent_id  TEXT,
    run_id    TEXT,
    target    TEXT,
    status    INTEGER NOT NULL,
    ms        REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS activity_key ON activity(key_id, id);
"""
_COLUMNS: tuple[str, ...] = (
    "id", "at", "key_id", "face", "operation", "user_id", "agent_id", "run_id", "target",
    "status", "ms",
)  # fmt: skip


def _an_id(value: object, limit: int = 128) -> str | None:
    """``value`` when it reads as an id (no spaces, no control characters), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value or len(value) > limit:
        return None
    if any(c.isspace() or not c.isprintable() for c in value):
        return None
    return value


# -- what the request in progress did -------------------------------------------------------


@dataclass
class Entry:
    """The row a request in progress will leave (filled in as it runs)."""

    face: str
    started: float = field(default_factory=time.perf_counter)
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    key_id: str | None = None
    operation: str | None = None
    fixed: bool = False
    """The operation was named by the face (a UI action): the service does not rename it."""
    scope: dict[str, str] = field(default_factory=dict)
    target: str | None = None
    status: int | None = None
    """A status the face decided (a UI action whose redirect reports a failure)."""
    wanted: bool = False
    """The request reached a caller check: it is recorded (health checks, pages and
    static files are not)."""


_current: ContextVar[Entry | None] = ContextVar("engram_activity", default=None)


def current() -> Entry | None:
    """The entry of the request in progress, if it is being recorded."""
    return _current.get()


def begin(face: str) -> tuple[Entry, Any]:
    """Start an entry for the request in progress; pass the token to :func:`end`."""
    entry = Entry(face=face)
    return entry, _current.set(entry)


def end(token: Any) -> None:
    """Forget the entry :func:`begin` started."""
    _current.reset(token)


def want() -> None:
    """Record the request in progress (it names a caller: a key, or none)."""
    entry = _current.get()
    if entry is not None:
        entry.wanted = True


def note_caller(key_id: str | None) -> None:
    """The API key (its public id) the request in progress runs as."""
    entry = _current.get()
    if entry is not None:
        entry.key_id = _an_id(key_id, 16)


def note(
    operation: str,
    *,
    scope: Mapping[str, object] | None = None,
    target: object = None,
    fixed: bool = False,
) -> None:
    """What the request in progress does: an operation, its scope ids, the id it names.

    The last operation noted wins (mem0's update reads, then updates), unless
    a face fixed it (``fixed``); a scope or a target, once known, is kept.
    """
    entry = _current.get()
    if entry is None:
        return
    if fixed or not entry.fixed:
        entry.operation = operation
        entry.fixed = entry.fixed or fixed
    if scope:
        ids = {k: _an_id(scope.get(k)) for k in SCOPE_KINDS}
        found = {k: v for k, v in ids.items() if v}
        if found:
            entry.scope = found
    if target is not None:
        text = str(target) if isinstance(target, int) else target
        if isinstance(text, str) and _ID_RE.match(text):
            entry.target = text


def note_status(status: int) -> None:
    """The outcome of the request in progress, when its HTTP status does not tell it."""
    entry = _current.get()
    if entry is not None:
        entry.status = status


# -- the log ----------------------------------------------------------------------------------


def _rows_from_env() -> int:
    raw = os.environ.get("ENGRAM_ACTIVITY_ROWS", "").strip()
    if not raw:
        return DEFAULT_ROWS
    try:
        return max(0, int(raw))
    except ValueError:
        return DEFAULT_ROWS


class ActivityLog:
    """The newest ``max_rows`` requests, in a SQLite file (``None``: in memory).

    Safe to share between threads; several processes may write one file.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        max_rows: int | None = None,
        batch: int = BATCH,
        delay_s: float = DELAY_S,
    ) -> None:
        """A log at ``path`` (created on the first write), keeping ``max_rows`` rows."""
        self.path = Path(path) if path is not None else None
        self.max_rows = _rows_from_env() if max_rows is None else max(0, max_rows)
        self.batch = max(1, batch)
        self.delay_s = delay_s
        self._pending: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._db_lock = threading.Lock()
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self.written = 0
        """Rows this process wrote (a figure for the benchmark and the tests)."""

    @classmethod
    def beside(cls, keys_path: str | Path, **options: Any) -> ActivityLog:
        """The log of the servers using the key file at ``keys_path``: ``activity.db`` beside it."""
        return cls(Path(keys_path).with_name("activity.db"), **options)

    @property
    def enabled(self) -> bool:
        """Whether rows are kept at all (``max_rows`` > 0)."""
        return self.max_rows > 0

    # -- writing --

    def record(self, entry: Entry, status: int) -> None:
        """Keep the row of a finished request (written to the file shortly, off this thread)."""
        if not self.enabled or self._closed:
            return
        ms = (time.perf_counter() - entry.started) * 1000
        operation = entry.operation or "unknown"
        row = (
            entry.at,
            entry.key_id,
            entry.face,
            operation[:80],
            entry.scope.get("user_id"),
            entry.scope.get("agent_id"),
            entry.scope.get("run_id"),
            entry.target,
            int(entry.status if entry.status is not None else status),
            round(ms, 2),
        )
        with self._lock:
            self._pending.append(row)
            due = len(self._pending) >= self.batch
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_soon, name="engram-activity", daemon=True
                )
                self._writer.start()
        if due:
            self._wake.set()

    def _write_soon(self) -> None:
        self._wake.wait(self.delay_s)
        self._wake.clear()
        with self._lock:
            self._writer = None
        try:
            self.flush()
        except (sqlite3.Error, OSError) as exc:  # the log never fails a request
            log.warning("the activity log %s could not be written: %s", self.path, exc)

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if self.path is None:
            conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        self._conn = conn
        return conn

    def flush(self) -> int:
        """Write the pending rows now (one transaction) and drop the oldest beyond the bound."""
        # The file's lock first: a reader's flush waits for rows another thread took.
        with self._db_lock:
            with self._lock:
                rows, self._pending = self._pending, []
            if not rows:
                return 0
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO activity (at, key_id, face, operation, user_id, agent_id, "
                    "run_id, target, status, ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                top = conn.execute("SELECT max(id) FROM activity").fetchone()[0] or 0
                conn.execute("DELETE FROM activity WHERE id <= ?", (top - self.max_rows,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self.written += len(rows)
        return len(rows)

    # -- reading --

    def query(
        self,
        *,
        key_id: str | None = None,
        no_key: bool = False,
        face: str | None = None,
        operation: str | None = None,
        status: str | None = None,
        scope: Mapping[str, str | None] | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """The newest rows (before row ``before``) matching every filter given.

        ``key_id``: one key's rows (``no_key``: the rows of callers without a
        key); ``status``: a code (``404``), a class (``4xx``) or ``errors``
        (400 and up); ``scope``: rows with these scope ids.
        """
        self.flush()
        where: list[str] = []
        params: list[Any] = []
        if no_key:
            where.append("key_id IS NULL")
        elif key_id is not None:
            where.append("key_id = ?")
            params.append(key_id)
        if face:
            where.append("face = ?")
            params.append(face)
        if operation:
            where.append("operation = ?")
            params.append(operation)
        if status:
            low, high = status_range(status)
            where.append("status BETWEEN ? AND ?")
            params.extend((low, high))
        for kind in SCOPE_KINDS:
            value = (scope or {}).get(kind)
            if value:
                where.append(f"{kind} = ?")
                params.append(value)
        if before is not None:
            where.append("id < ?")
            params.append(before)
        sql = f"SELECT {', '.join(_COLUMNS)} FROM activity"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(max(1, min(limit, 1000)))
        with self._db_lock:
            if self._conn is None and (self.path is None or not self.path.exists()):
                return []
            rows = self._connect().execute(sql, params).fetchall()
        return [dict(zip(_COLUMNS, r, strict=True)) for r in rows]

    def size(self) -> int:
        """How many rows are kept now."""
        self.flush()
        with self._db_lock:
            if self._conn is None and (self.path is None or not self.path.exists()):
                return 0
            found = self._connect().execute("SELECT count(*) FROM activity").fetchone()
        return int(found[0])

    def close(self) -> None:
        """Write what is pending and close the file."""
        self._wake.set()
        with contextlib.suppress(sqlite3.Error, OSError):
            self.flush()
        self._closed = True
        with self._db_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def status_range(status: str) -> tuple[int, int]:
    """The codes a status filter means: ``404``, ``4xx``, ``errors`` (400-599).

    Raises:
        ValueError: anything else.
    """
    text = status.strip().lower()
    if text == "errors":
        return 400, 599
    if re.fullmatch(r"[1-5]xx", text):
        low = int(text[0]) * 100
        return low, low + 99
    if re.fullmatch(r"[1-5]\d\d", text):
        return int(text), int(text)
    raise ValueError(f"unknown status filter {status!r}")


# -- the HTTP side ----------------------------------------------------------------------------


class ActivityMiddleware:
    """Record the requests of an app that reach a caller check (see :func:`want`).

    ``face`` is the app's (``rest`` or ``mem0``); requests under ``/ui`` are
    the web UI's, which records its actions only (not every page view).
    """

    def __init__(self, app: ASGIApp, log: ActivityLog, face: str) -> None:
        """Wrap ``app``; rows go to ``log``."""
        self.app = app
        self.log = log
        self.face = face

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request; then, if it was a caller's, keep its row."""
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not self.log.enabled or path.startswith("/ui/static/"):
            await self.app(scope, receive, send)
            return
        face = "ui" if path == "/ui" or path.startswith("/ui/") else self.face
        entry, token = begin(face)
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            end(token)
            if entry.wanted:
                if entry.operation is None:
                    # The route's template (never the raw path: it may carry free text).
                    template = getattr(scope.get("route"), "path", None) or "unmatched"
                    entry.operation = f"{scope.get('method', '')} {template}"
                self.log.record(entry, status)
