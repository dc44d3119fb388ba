"""A PostgreSQL store's read replica (``read_url``): what it may serve, and when not.

The store sends the reads of calls that only read (see
:mod:`engramdb.stores.routing`) to a hot standby, and everything else to
the primary. :class:`Replica` holds what both faces share and decides,
without I/O, whether a read may try the replica; the faces (``_store.py``)
move the data.

- **Read-your-writes.** After each write the store notes the primary's WAL
  position (:data:`WRITTEN`: the flush position, which a synchronous commit
  has passed; the insert position when ``synchronous_commit`` is off). A
  read goes to the replica only once the replica connection has replayed up
  to there (:data:`REPLAYED`, asked before the read's snapshot is taken, so
  the snapshot holds the write), waiting up to ``read_wait`` seconds for it;
  past that it reads from the primary. A replica found lagging that much is
  not waited for again until it has caught up (its reads go straight to the
  primary after one position check). What a replica connection was seen to
  have replayed is remembered per connection (a replica's replay position
  only grows), so only the first read after a write asks.
- **Fallback.** A replica that cannot be reached (no connection within
  :data:`CHECKOUT_S`, a broken connection) or that fails a read sends that
  read to the primary; a warning is logged once per outage, and the replica
  is left alone for ``read_retry`` seconds, after which one read tries it
  again. Reads never fail because of the replica.
- **Keyword caches.** A standby's snapshot lists no running transaction, so
  a catch-up there trusts only its ``xmin``, and a replica behind a cache
  leaves it as it is (``_reads.py``: ``catch_up``).
- **Commit outcomes.** ``pg_xact_status`` is only ever asked of the primary:
  a lagging replica would call a committed write "in progress".
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import psycopg

from engramdb.stores.postgres._sql import _Q, Tx, lsn

__all__ = [
    "CHECKOUT_S",
    "FRESH",
    "IDENTITY",
    "REPLAYED",
    "WRITTEN",
    "Replica",
    "ReplicaStats",
    "aidentity",
    "await_replay",
    "identity",
    "wait_for_replay",
    "written",
]

log = logging.getLogger("engramdb.store")

REPLAYED = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_replay_lsn(), '0/0')::text END"
)
"""The WAL position a standby has replayed (NULL on a server that is not in recovery)."""
WRITTEN = (
    "SELECT (CASE WHEN current_setting('synchronous_commit') = 'off' "
    "THEN pg_current_wal_insert_lsn() ELSE pg_current_wal_flush_lsn() END)::text"
)
"""Asked right after a write's COMMIT: a WAL position at or past its commit record."""
IDENTITY = "SELECT system_identifier::text, current_database() FROM pg_control_system()"
"""Which cluster and database a connection reached: a replica's must be its primary's."""
FRESH = 1 << 64
"""The replay position of a server that is not in recovery: it has everything it has."""
CHECKOUT_S = 1.0
"""Longest wait for a replica connection before the read goes to the primary."""
_POLL_S = (0.002, 0.02)
"""First and longest pause between two looks at the replica's replay position."""


@dataclass
class ReplicaStats:
    """What the replica did, counted since the store opened (for tests and operators)."""

    replica: int = 0
    """Reads the replica served."""
    primary: int = 0
    """Reads that could have gone to the replica and were served by the primary."""
    waited: int = 0
    """Replica reads that first waited for the replica to replay this store's writes."""
    lagging: int = 0
    """Reads sent to the primary because the replica had not replayed them within read_wait."""
    failed: int = 0
    """Reads sent to the primary because the replica could not be reached or failed."""
    max_wait_s: float = 0.0
    """The longest wait for replay, in seconds."""


class Replica:
    """The read replica's settings and state, shared by a store's two faces."""

    def __init__(self, url: str, wait: float, retry: float) -> None:
        self.url = url
        self.wait = wait
        self.retry = retry
        self.lock = threading.Lock()
        self.target = 0
        """The primary's WAL position after this store's last write."""
        self.unknown = False
        """A write committed whose position could not be read: ask the primary first."""
        self.down_until = 0.0
        self.down: str | None = None
        """Why the replica is left alone (None while it serves)."""
        self.lagging = False
        self.identity: tuple[str, str] | None = None
        """The primary's ``(system_identifier, database)`` (None if it could not be read)."""
        self.wrong: str | None = None
        """Why ``read_url`` is not a replica of the store's database (never used then)."""
        self._seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.stats = ReplicaStats()

    # -- routing -------------------------------------------------------------------------

    def usable(self) -> bool:
        """Whether this read may try the replica (else it goes to the primary)."""
        if self.wrong is not None:
            self.count(primary=1)
            return False
        with self.lock:
            now = time.monotonic()
            if now < self.down_until:
                self.stats.primary += 1
                return False
            if self.down is not None:
                # This read tries it again; the others keep going to the primary meanwhile.
                self.down_until = now + self.retry
            return True

    def needed(self, con: Any) -> int:
        """The position ``con`` must have replayed before it is read (0: none)."""
        with self.lock:
            return self.target if self._seen.get(con, 0) < self.target else 0

    def at(self, con: Any) -> int:
        """What ``con``'s server was last seen to have replayed (a lower bound of now)."""
        with self.lock:
            return self._seen.get(con, 0)

    def budget(self) -> float:
        """Seconds a read may wait for replay: none while the replica is known to lag."""
        return 0.0 if self.lagging else self.wait

    # -- what happened -------------------------------------------------------------------

    def wrote(self, position: str | None) -> None:
        """A write committed on the primary; ``position`` as :data:`WRITTEN` read it."""
        with self.lock:
            self.target = max(self.target, lsn(position))
            self.unknown = False

    def lost(self) -> None:
        """A write committed whose position could not be read."""
        self.unknown = True

    def replayed(self, con: Any, position: int, waited: float = 0.0) -> None:
        """``con``'s server had replayed ``position`` (seen after ``waited`` seconds)."""
        with self.lock:
            if position > self._seen.get(con, 0):
                self._seen[con] = position
            self.stats.max_wait_s = max(self.stats.max_wait_s, waited)
            if position >= self.target:
                self.lagging = False

    def served(self, waited: float | None) -> None:
        """The replica served a read (after waiting ``waited`` seconds for replay, if it did)."""
        with self.lock:
            self.stats.replica += 1
            self.stats.waited += bool(waited)
            back, self.down, self.down_until = self.down, None, 0.0
        if back is not None:
            log.info("the read replica answers again: reads go to it again")

    def behind(self) -> None:
        """The replica had not replayed this store's writes within read_wait."""
        with self.lock:
            self.lagging = True
            self.stats.lagging += 1
            self.stats.primary += 1

    def failed(self, cause: object, *, down: bool) -> None:
        """A replica read failed; ``down``: the replica could not be reached (left alone)."""
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        with self.lock:
            self.stats.failed += 1
            self.stats.primary += 1
            first = down and self.down is None
            if down:
                self.down = text
                self.down_until = time.monotonic() + self.retry
        if first:
            log.warning(
                "the read replica cannot be reached (%s): reads go to the primary; it is tried "
                "again every %g s",
                text,
                self.retry,
            )
        elif not down:
            log.debug("a read failed on the replica (%s); the primary answers it", text)

    def count(self, primary: int) -> None:
        with self.lock:
            self.stats.primary += primary

    def check(self, identity: tuple[str, str] | None) -> None:
        """A replica connection reached ``identity``: refuse one that is not the primary's."""
        if identity is None or self.identity is None or identity == self.identity:
            return
        if self.wrong is None:
            self.wrong = (
                f"read_url reaches database {identity[1]!r} of cluster {identity[0]}, not a "
                f"replica of the store's ({self.identity[1]!r} of cluster {self.identity[0]})"
            )
            log.error("%s: every read goes to the primary", self.wrong)


def written() -> Tx[str | None]:
    """The flow that reads the primary's position after a write (:data:`WRITTEN`)."""
    row = yield _Q(WRITTEN, fetch="one")
    return str(row[0]) if row and row[0] is not None else None


def identity(con: psycopg.Connection[Any]) -> tuple[str, str] | None:
    """The ``(system_identifier, database)`` of ``con`` (None if the role may not read it)."""
    try:
        row = con.execute(IDENTITY).fetchone()
    except psycopg.Error:
        return None
    return (str(row[0]), str(row[1])) if row else None


async def aidentity(con: psycopg.AsyncConnection[Any]) -> tuple[str, str] | None:
    """:func:`identity` on an asyncio connection."""
    try:
        row = await (await con.execute(IDENTITY)).fetchone()
    except psycopg.Error:
        return None
    return (str(row[0]), str(row[1])) if row else None


def _replay_position(row: Any) -> int:
    return FRESH if row is None or row[0] is None else lsn(row[0])


def wait_for_replay(replica: Replica, con: psycopg.Connection[Any], target: int) -> float | None:
    """Wait (up to the replica's budget) until ``con``'s server has replayed ``target``.

    Returns the seconds it waited (0.0 if it was there at once), or None if
    the replica had not got there in time.
    """
    started = time.monotonic()
    end, pause, slept = started + replica.budget(), _POLL_S[0], False
    while True:
        position = _replay_position(con.execute(REPLAYED).fetchone())
        now = time.monotonic()
        waited = now - started if slept else 0.0
        replica.replayed(con, position, waited)
        if position >= target:
            return waited
        if now >= end:
            return None
        time.sleep(min(pause, end - now))
        pause, slept = min(pause * 2, _POLL_S[1]), True


async def await_replay(
    replica: Replica, con: psycopg.AsyncConnection[Any], target: int
) -> float | None:
    """:func:`wait_for_replay` on an asyncio connection."""
    started = time.monotonic()
    end, pause, slept = started + replica.budget(), _POLL_S[0], False
    while True:
        position = _replay_position(await (await con.execute(REPLAYED)).fetchone())
        now = time.monotonic()
        waited = now - started if slept else 0.0
        replica.replayed(con, position, waited)
        if position >= target:
            return waited
        if now >= end:
            return None
        await asyncio.sleep(min(pause, end - now))
        pause, slept = min(pause * 2, _POLL_S[1]), True
