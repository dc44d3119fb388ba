"""API keys for the REST and MCP servers: created, listed and revoked, stored hashed.

A key reads ``ek_<id>_<secret>``: ``id`` is 8 hex characters, public (it
names the key in listings, logs and ``engram keys revoke``); ``secret`` is
32 random bytes, URL-safe base64. Only the SHA-256 of the whole key is
kept, in a small SQLite file (``keys.db`` in the engram home by default):
keys are server configuration, not memory data, so they live apart from
every memory store and survive a ``reset``.

Why SHA-256 and not scrypt/argon2: those slow hashes exist to make guessing
*low-entropy passwords* expensive. A key here carries 256 random bits, so
no amount of guessing finds one from its hash, and a slow hash would only
add its cost to every request. The row is found by the public id (never by
the secret), and the digests are compared in constant time.

Revocation marks a row; rows are never deleted, so "some key exists" stays
true once it became true and revoking the last key cannot silently turn a
server back into one without authentication.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engramdb._time import utc_now
from engramdb.config import default_home
from engramdb.core.access import (
    ANY_USER,
    CAPABILITIES,
    Access,
    default_capabilities,
    parse_capabilities,
)
from engramdb.core.validate import check_id
from engramdb.errors import ConfigError, ValidationError

__all__ = [
    "KEY_PREFIX",
    "ApiKey",
    "KeyStore",
    "NewKey",
    "default_keys_path",
]

KEY_PREFIX = "ek"
"""Every key starts with ``ek_`` so a leaked one is easy to recognise (and to scan for)."""

_KEY_RE = re.compile(r"^ek_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
_ID_RE = re.compile(r"^(?:ek_)?([0-9a-f]{8})$")
_MIGRATIONS = (
    """
CREATE TABLE IF NOT EXISTS api_keys (
    id            TEXT PRIMARY KEY,
    secret_sha256 TEXT NOT NULL,
    name          TEXT,
    user_id       TEXT,
    agent_id      TEXT,
    admin         INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL,
    revoked_at    TEXT
);
""",
    # Version 2: a key may be bound to one run (a conversation) as well.
    "ALTER TABLE api_keys ADD COLUMN run_id TEXT;",
    # Versions 3-5: capabilities and granted users (engramdb.core.access).
    # ``can`` lists capabilities, comma-separated; ``users`` is NULL (a key bound
    # to a user, or one granted no user), '*' (any user) or a JSON list.
    "ALTER TABLE api_keys ADD COLUMN can TEXT;",
    "ALTER TABLE api_keys ADD COLUMN users TEXT;",
    # Keys made before capabilities: admin keys keep everything and user-bound
    # keys keep what they always could; keys bound only to an agent or a run
    # get the safe default (no purge, no user they were not granted).
    """
UPDATE api_keys SET can = CASE
    WHEN admin = 1 THEN 'read,write,delete,purge,admin'
    WHEN user_id IS NOT NULL THEN 'read,write,delete,purge'
    ELSE 'read,write,delete' END
WHERE can IS NULL;
""",
)
_SCHEMA_VERSION = len(_MIGRATIONS)


def default_keys_path() -> Path:
    """``$ENGRAM_HOME/keys.db`` (default ``~/.engramdb/keys.db``)."""
    return default_home() / "keys.db"


@dataclass(frozen=True)
class ApiKey:
    """A stored key, without its secret."""

    id: str
    name: str | None
    user_id: str | None
    agent_id: str | None
    admin: bool
    created_at: str
    revoked_at: str | None
    run_id: str | None = None
    can: frozenset[str] = frozenset()
    """Its capabilities (:data:`engramdb.core.access.CAPABILITIES`)."""
    users: tuple[str, ...] = ()
    """Users a key not bound to a user may name (sorted); see :attr:`any_user`."""
    any_user: bool = False
    """A key not bound to a user that may name any user (a service agent)."""

    @property
    def access(self) -> Access:
        """What the key may do, as the flows check it."""
        return Access(can=self.can, users=None if self.any_user else frozenset(self.users))

    @property
    def capabilities(self) -> list[str]:
        """Its capabilities in the canonical order."""
        return [c for c in CAPABILITIES if c in self.can]

    @property
    def scope(self) -> dict[str, str]:
        """The scope ids the key is bound to (empty for an admin key)."""
        if self.admin:
            return {}
        out = {}
        if self.user_id is not None:
            out["user_id"] = self.user_id
        if self.agent_id is not None:
            out["agent_id"] = self.agent_id
        if self.run_id is not None:
            out["run_id"] = self.run_id
        return out

    def as_dict(self) -> dict[str, Any]:
        """The key's public fields as a JSON-able dict."""
        return {
            "id": self.id,
            "name": self.name,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "admin": self.admin,
            "can": self.capabilities,
            "users": "*" if self.any_user else list(self.users),
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True)
class NewKey:
    """A key just created: the only moment its secret is known."""

    key: str
    info: ApiKey


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _users_column(users: tuple[str, ...], any_user: bool) -> str | None:
    if any_user:
        return ANY_USER
    return json.dumps(list(users)) if users else None


def _row(row: tuple[Any, ...]) -> ApiKey:
    users_text = row[9]
    any_user = users_text == ANY_USER
    users = () if users_text is None or any_user else tuple(sorted(json.loads(users_text)))
    return ApiKey(
        id=row[0],
        name=row[1],
        user_id=row[2],
        agent_id=row[3],
        admin=bool(row[4]),
        created_at=row[5],
        revoked_at=row[6],
        run_id=row[7],
        can=frozenset(c for c in (row[8] or "").split(",") if c),
        users=users,
        any_user=any_user,
    )


_COLUMNS = "id, name, user_id, agent_id, admin, created_at, revoked_at, run_id, can, users"
_SECRET = len(_COLUMNS.split(", "))
"""Where ``secret_sha256`` is in a row of ``SELECT {_COLUMNS}, secret_sha256``."""


class KeyStore:
    """The API keys of a server, in one SQLite file (created on first write).

    Safe to share between threads; another process (``engram keys revoke``)
    may change the file while a server runs, and every lookup sees it.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        """Open the key file at ``path`` (default :func:`default_keys_path`)."""
        self.path = Path(path) if path is not None else default_keys_path()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._any = False

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not self.path.exists():
            if not create:
                return None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # The file holds only digests, but there is no reason for others to read it.
            fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 5000")
            # Read the version under the write lock: two processes opening an old
            # file at once must not both migrate it.
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > _SCHEMA_VERSION:
                    raise ConfigError(
                        f"{self.path} was written by a newer engramdb (key schema {version}); "
                        "upgrade engramdb"
                    )
                for step in range(version, _SCHEMA_VERSION):
                    conn.execute(_MIGRATIONS[step])
                    conn.execute(f"PRAGMA user_version = {step + 1}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                conn.close()
                raise
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"cannot open the key file {self.path}: {exc}") from None
        self._conn = conn
        return conn

    def create(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        admin: bool = False,
        name: str | None = None,
        can: str | Iterable[str] | None = None,
        users: Iterable[str] = (),
        any_user: bool = False,
    ) -> NewKey:
        """Create a key bound to a scope (or an admin key) and return it with its secret.

        A non-admin key needs a ``user_id``, an ``agent_id`` and/or a
        ``run_id``: it can only read and change memories of that scope (a
        run-bound key sees that run's memories only). An admin key may act on
        any scope and takes no scope ids.

        ``can`` chooses its capabilities (``read``, ``write``, ``delete``,
        ``purge``; ``admin`` only with ``admin=True``); left out, the safe
        default of its shape (:func:`engramdb.core.access.default_capabilities`).
        A key not bound to a user names only the ``users`` it is granted, or
        any user with ``any_user`` (a service agent serving many users).
        """
        user = check_id("user_id", user_id)
        agent = check_id("agent_id", agent_id)
        run = check_id("run_id", run_id)
        if admin and (user or agent or run):
            raise ValidationError(
                "an admin key acts on every scope; give --admin or scope ids, not both"
            )
        if not admin and user is None and agent is None and run is None:
            raise ValidationError(
                "a key needs the scope it may use (--user-id, --agent-id and/or --run-id), "
                "or --admin"
            )
        granted = tuple(sorted({u for u in (check_id("users", u) for u in users) if u}))
        if (granted or any_user) and (admin or user is not None):
            raise ValidationError(
                "--user and --any-user grant users to a key bound only to an agent or a run; "
                "an admin key or a key bound to a user takes neither"
            )
        if granted and any_user:
            raise ValidationError("give --user IDs or --any-user, not both")
        caps = (
            default_capabilities(admin=admin, user_bound=user is not None)
            if can is None
            else parse_capabilities(can)
        )
        if "admin" in caps and not admin:
            raise ValidationError(
                "the admin capability belongs to admin keys (--admin), which are bound to no scope"
            )
        if admin:
            caps = caps | {"admin"}
        can_text = ",".join(c for c in CAPABILITIES if c in caps)
        users_text = _users_column(granted, any_user)
        if name is not None and (not name.strip() or len(name) > 200):
            raise ValidationError("a key's name must be 1 to 200 characters")
        with self._lock:
            conn = self._connect(create=True)
            assert conn is not None
            while True:
                key_id = secrets.token_hex(4)
                secret = secrets.token_urlsafe(32)
                key = f"{KEY_PREFIX}_{key_id}_{secret}"
                if not _KEY_RE.match(key):  # pragma: no cover - token_urlsafe(32) is 43 chars
                    continue
                created = utc_now()
                try:
                    conn.execute(
                        f"INSERT INTO api_keys ({_COLUMNS}, secret_sha256) "
                        "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                        (
                            key_id,
                            name,
                            user,
                            agent,
                            int(admin),
                            created,
                            run,
                            can_text,
                            users_text,
                            _digest(key),
                        ),
                    )
                except sqlite3.IntegrityError:  # pragma: no cover - a 1 in 4 billion clash
                    continue
                self._any = True
                info = ApiKey(
                    key_id,
                    name,
                    user,
                    agent,
                    admin,
                    created,
                    None,
                    run,
                    can=frozenset(caps),
                    users=granted,
                    any_user=any_user,
                )
                return NewKey(key=key, info=info)

    def list_keys(self) -> list[ApiKey]:
        """Every key ever created, revoked ones included, oldest first."""
        with self._lock:
            conn = self._connect(create=False)
            if conn is None:
                return []
            rows = conn.execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, id")
            return [_row(r) for r in rows.fetchall()]

    def revoke(self, key_or_id: str) -> ApiKey:
        """Revoke a key, named by the key itself or by its public id; returns it.

        Revoking an already revoked key is not an error (it stays revoked at
        its first revocation time).
        """
        text = key_or_id.strip()
        match = _KEY_RE.match(text)
        id_match = _ID_RE.match(text)
        if match:
            key_id = match.group(1)
        elif id_match:
            key_id = id_match.group(1)
        else:
            raise ValidationError(
                f"{key_or_id!r} is neither a key (ek_xxxxxxxx_...) nor a key id (8 hex digits)"
            )
        with self._lock:
            conn = self._connect(create=False)
            row = (
                None
                if conn is None
                else conn.execute(
                    f"SELECT {_COLUMNS}, secret_sha256 FROM api_keys WHERE id = ?", (key_id,)
                ).fetchone()
            )
            if row is None or conn is None:
                raise ValidationError(f"no key with id {key_id!r} (see `engram keys list`)")
            if match and not hmac.compare_digest(row[_SECRET], _digest(text)):
                raise ValidationError(f"no key with id {key_id!r} matches the key given")
            conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (utc_now(), key_id),
            )
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)
            ).fetchone()
            return _row(found)

    def any_keys(self) -> bool:
        """Whether any key was ever created (revoked ones count: see the module doc)."""
        if self._any:
            return True
        with self._lock:
            conn = self._connect(create=False)
            if conn is None:
                return False
            self._any = conn.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone() is not None
            return self._any

    def verify(self, key: str) -> ApiKey | None:
        """The live key ``key`` is, or ``None`` (malformed, unknown or revoked)."""
        match = _KEY_RE.match(key)
        if match is None:
            return None
        with self._lock:
            conn = self._connect(create=False)
            if conn is None:
                return None
            row = conn.execute(
                f"SELECT {_COLUMNS}, secret_sha256 FROM api_keys WHERE id = ?", (match.group(1),)
            ).fetchone()
        if row is None or not hmac.compare_digest(row[_SECRET], _digest(key)):
            return None
        info = _row(row)
        return None if info.revoked_at is not None else info

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
