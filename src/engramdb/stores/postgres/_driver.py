"""Transactions on psycopg connections: pipelines, retries and commit outcomes.

The flows (``_sql.py``, ``_writes.py``, ``_reads.py``) yield statements and
hold no connection. This module runs one flow as one transaction, with the
same :func:`~engramdb._engine.run_sync` / :func:`~engramdb._engine.run_async`
drivers that run the API's flows. What happens after a failed attempt
(retry, rebind, ask the server whether a cut-off COMMIT landed, give up) is
decided once, without I/O, by :class:`Attempts`; the blocking and the
asyncio store only move data between it and their connections.

A server that restarts or goes away is met here too. A pooled connection
whose server closed it is never used (:func:`is_stale` looks at its socket
before each call, without a round trip), and a call whose connection breaks
before a write's COMMIT is sent (any read, a write not yet committing) is run
again on a fresh connection, as often as the store's deadline
(``unavailable_timeout``) allows; past it the call fails with
:class:`~engramdb.errors.StoreUnavailableError`. Only a write cut off *at*
COMMIT asks the server what became of it (``pg_xact_status``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import select
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

import psycopg
import psycopg.errors as pg_errors

from engramdb.core.drive import run_async, run_sync
from engramdb.errors import (
    EmbedderMismatchError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from engramdb.stores.kernel.rebind import REEMBED_HINT
from engramdb.stores.postgres._sql import _Q, REBIND, WRITE_RETRIES, Tx

__all__ = [
    "READ",
    "Attempts",
    "Health",
    "LostAtCommit",
    "Mode",
    "acommit_status",
    "ais_stale",
    "atransaction",
    "commit_status",
    "is_stale",
    "transaction",
    "translate",
]

log = logging.getLogger("engramdb.store")

T = TypeVar("T")

Mode = Literal["write", "read", "single"]
"""How a flow runs: a READ COMMITTED write (retried whole), a REPEATABLE READ
read (one snapshot), or a single statement outside a transaction."""

READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
WRITE = "BEGIN ISOLATION LEVEL READ COMMITTED"
_BEGIN: dict[Mode, str | None] = {"write": WRITE, "read": READ, "single": None}
_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
# Sent right after a write's BEGIN (pipelined: no round trip of its own): if
# the connection breaks after COMMIT was sent, pg_xact_status(xid) on a new
# connection tells whether it committed.
_XID = "SELECT pg_current_xact_id()::text"
_STATUS = "SELECT pg_xact_status(%s::xid8)"
_STATUS_WAIT_S = 10.0
"""How long to wait for a cut-off transaction to stop being 'in progress'."""
SLICE_S = 0.5
"""Longest single wait for a pooled connection. Between waits a call looks again
at whether the server is failing (its deadline then applies), and each new wait
lets the pool try to connect again."""
_ASK_EVERY_S = 0.2
"""Pause between attempts to reach the server to ask for a commit's outcome."""


class LostAtCommit(Exception):
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

    __slots__ = ("committing", "result", "xid")

    def __init__(self) -> None:
        self.committing = False
        self.xid: int | None = None
        self.result: Any = None

    def commit(self, result: Any) -> None:
        """COMMIT is about to be sent; ``result`` is the write's if it commits."""
        self.committing = True
        self.result = result

    def xid_row(self, row: Any) -> None:
        """The row of ``_XID``, read after the first pipeline sync."""
        self.xid = int(row[0]) if row else None


def _is_rebind(exc: BaseException) -> bool:
    """Whether ``exc`` is the error of a binding guard (``_FlowBase.guard_binding``)."""
    return isinstance(exc, psycopg.DataError) and REBIND in str(exc)


def translate(exc: Exception) -> Exception:
    """A psycopg error as the EngramError an API caller should see."""
    if _is_rebind(exc):
        return EmbedderMismatchError(
            "the store is now bound to another embedder than this process's (another "
            "process reset or re-embedded it); configure the embedder it is bound to, or "
            f"{REEMBED_HINT}"
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


def _first_line(cause: object) -> str:
    """The first line of an error: libpq's messages run over several lines."""
    text = str(cause).strip()
    return text.splitlines()[0] if text else text


class Health:
    """Whether a store's server is failing: what its calls and its pool saw last.

    Set by a connection that broke or was found closed by the server and by
    the pool failing to connect; cleared by the next call that succeeds or
    connection that opens. While it is set, a call waits for a connection at
    most until its deadline instead of the pool's whole ``pool_timeout``.
    """

    __slots__ = ("cause", "since")

    def __init__(self) -> None:
        self.since: float | None = None
        self.cause = ""

    @property
    def failing(self) -> bool:
        """Whether the last thing seen of the server was a failure."""
        return self.since is not None

    def failed(self, cause: object = "") -> None:
        """A connection broke, was found closed, or could not be made."""
        if cause:
            self.cause = _first_line(cause)
        if self.since is None:
            self.since = time.monotonic()

    def recovered(self) -> None:
        """A call succeeded or a connection opened: the server answers."""
        self.since = None


class Attempts:
    """The retry policy of one store call, with no I/O: both stores ask it what to do.

    Iterate for the attempts; before each, :meth:`wait` says how long the
    wait for a pooled connection may take (and raises once the call's time is
    spent). After a failure call :meth:`lost` (the connection broke during a
    write's COMMIT, with what the server says of the transaction) or
    :meth:`failed` (any other psycopg error). Each returns what the caller
    does next or raises what the API caller should see; :attr:`delay` is how
    long to pause before the next attempt.

    Two clocks bound a call: ``pool_timeout`` (a busy pool: every connection
    in use) and ``patience``, the store's ``unavailable_timeout``, which
    applies once the server is failing (a connection broke, or none could be
    made): past it the call raises :class:`StoreUnavailableError`.
    """

    def __init__(
        self,
        mode: Mode,
        *,
        health: Health | None = None,
        patience: float = 5.0,
        pool_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = mode == "write"
        self.begin = _BEGIN[mode]
        self.limit = WRITE_RETRIES if self.write else 2
        self.health = health if health is not None else Health()
        self.patience = patience
        self.pool_timeout = pool_timeout
        self.clock = clock
        started = clock()
        self.deadline = started + patience
        self.pool_deadline = started + pool_timeout
        self.aborts = 0
        self.breaks = 0
        self.rebound = False
        self.delay = 0.0

    def __iter__(self) -> Iterator[int]:
        return itertools.count()

    def unavailable(self, cause: BaseException | str | None = None) -> StoreUnavailableError:
        """The error of a call that found the server unreachable until its deadline."""
        why = _first_line(cause) if cause else self.health.cause or "no connection could be made"
        return StoreUnavailableError(
            f"PostgreSQL cannot be reached ({why}); the call gave up after "
            f"{self.patience:g} s (the store's unavailable_timeout) and did nothing: "
            "try again later",
            retry_after=self.patience,
        )

    def wait(self) -> float:
        """Seconds the next wait for a pooled connection may last; raises once none are left."""
        now = self.clock()
        if self.health.failing and now >= self.deadline:
            raise self.unavailable()
        if now >= self.pool_deadline:
            raise StoreError(
                f"no PostgreSQL connection came free within pool_timeout ({self.pool_timeout:g} "
                "s): every pooled connection stayed in use; raise max_size (within the "
                "server's max_connections) or pool_timeout"
            )
        end = min(self.deadline, self.pool_deadline) if self.health.failing else self.pool_deadline
        return min(SLICE_S, end - now)

    def stale(self) -> None:
        """A pooled connection was found closed by the server (it restarted or went away)."""
        self.health.failed("the server closed the pooled connections")

    def lost(self, lost: LostAtCommit, status: str | None) -> bool:
        """True if the write committed (its result is ``lost.result``); False to retry.

        A write that may have committed is never run again: only an
        'aborted' answer from the server allows a retry.
        """
        self.delay = 0.0
        if status == "committed":
            return True
        self.aborts += 1
        if status != "aborted" or self.aborts >= self.limit:
            where = f"transaction {lost.xid} is {status!r}" if lost.xid is not None else "no xid"
            raise StoreError(
                "the connection to PostgreSQL broke during COMMIT and the outcome of this "
                f"write is unknown ({where}); it was not retried, since it may have been "
                "applied: check (e.g. get() or history()) before repeating it. Cause: "
                f"{lost.cause}"
            ) from lost.cause
        log.warning("retrying a write cut off at COMMIT (it was rolled back)")
        return False

    def failed(self, exc: psycopg.Error, broken: bool | None) -> Literal["retry", "rebind"]:
        """After ``exc`` (``broken``: the connection's state, None if none was had)."""
        self.delay = 0.0
        if isinstance(exc, _RETRYABLE):
            self.aborts += 1
            if self.aborts >= self.limit:
                raise StoreError(f"PostgreSQL kept aborting the write: {exc}") from exc
            log.warning("retrying a write PostgreSQL aborted (%s)", type(exc).__name__)
            return "retry"
        if isinstance(exc, psycopg.OperationalError) and broken is not False:
            # The connection broke (a restart, failover, a terminated backend)
            # before a write's COMMIT was sent (LostAtCommit otherwise), or
            # none could be had: nothing was committed; run it again on a
            # fresh connection until the deadline.
            self.health.failed(exc)
            now = self.clock()
            if now >= self.deadline:
                raise self.unavailable(exc) from exc
            self.breaks += 1
            if self.breaks > 1:
                self.delay = min(0.05 * 2 ** (self.breaks - 2), 0.5, self.deadline - now)
            log.log(
                logging.WARNING if self.breaks == 1 else logging.DEBUG,
                "retrying on a fresh connection (%s)",
                _first_line(exc),
            )
            return "retry"
        if self.write and not self.rebound and _is_rebind(exc):
            # The binding changed under us (a reset elsewhere): bind ours again,
            # which refuses another model, and rerun the write.
            self.rebound = True
            return "rebind"
        raise translate(exc) from exc


def _readable(fd: int) -> bool:
    """Whether ``fd`` has input (or a hang-up) waiting, without blocking."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


def _idle_input(con: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool | None:
    """None if ``con`` is unusable; else whether its idle socket holds something unread."""
    if con.closed or con.broken:
        return None
    try:
        return _readable(con.pgconn.socket)
    except (OSError, ValueError, psycopg.Error):
        return None


def is_stale(con: psycopg.Connection[Any]) -> bool:
    """Whether a pooled (idle) connection is unusable: closed, or closed by the server.

    An idle connection receives nothing, so input waiting on its socket is
    the server's goodbye (a shutdown or a terminated backend sends an error,
    then closes it); only then is a round trip made to be sure. Costs one
    ``poll`` when the connection is fine.
    """
    pending = _idle_input(con)
    if pending is None:
        return True
    if not pending:
        return False
    try:
        con.execute("")
    except psycopg.Error:
        return True
    return False


async def ais_stale(con: psycopg.AsyncConnection[Any]) -> bool:
    """:func:`is_stale` for an asyncio connection."""
    pending = _idle_input(con)
    if pending is None:
        return True
    if not pending:
        return False
    try:
        await con.execute("")
    except psycopg.Error:
        return True
    return False


def _desynced(con: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a failed pipeline left ``con`` in an unknown state; if so, close it.

    When the server goes away mid-exchange, libpq can raise "cannot exit
    pipeline mode while busy" before it has noticed the closed socket: the
    connection is not marked broken, but it is still in pipeline mode with
    results owed. It must never serve another call: dropping its socket marks
    it broken, so the caller runs the call again on a fresh connection (or,
    for a write cut off at COMMIT, asks the server) and the pool replaces it.
    """
    if con.closed or con.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF:
        return False
    con.pgconn.finish()  # no sync, no goodbye: libpq just closes the socket
    return True


def _rows(cur: Any, q: _Q) -> Any:
    if q.fetch == "all":
        return cur.fetchall() if cur.description is not None else []
    if q.fetch == "one":
        return cur.fetchone() if cur.description is not None else None
    if q.fetch == "rowcount":
        return cur.rowcount
    return None


async def _arows(cur: psycopg.AsyncCursor[Any], q: _Q) -> Any:
    if q.fetch == "all":
        return await cur.fetchall() if cur.description is not None else []
    if q.fetch == "one":
        return await cur.fetchone() if cur.description is not None else None
    if q.fetch == "rowcount":
        return cur.rowcount
    return None


def transaction(
    con: psycopg.Connection[Any], flow: Tx[T], begin: str | None, *, pipeline: bool = True
) -> T:
    """Run one flow on ``con``: in a transaction, or (``begin=None``) as one statement.

    In pipeline mode, statements whose result the flow does not read are
    sent without waiting; the next statement that returns rows waits for
    all of them, so a flow costs a round trip per result, not per statement.
    """
    catch = psycopg.Error
    if begin is None:
        return run_sync(flow, lambda q: _rows(con.execute(q.sql, q.params), q), catch=catch)
    tracker = _Tracker()
    try:
        if not pipeline:
            con.execute(begin)
            result = run_sync(flow, lambda q: _rows(con.execute(q.sql, q.params), q), catch=catch)
            con.execute("COMMIT")
            return result
        with con.pipeline() as pipe:
            con.execute(begin)
            xid = con.execute(_XID) if begin == WRITE else None

            def perform(q: _Q) -> Any:
                cur = con.execute(q.sql, q.params)
                if q.fetch == "none":
                    return None
                pipe.sync()
                if xid is not None and tracker.xid is None:
                    tracker.xid_row(xid.fetchone())
                return _rows(cur, q)

            result = run_sync(flow, perform, catch=catch)
            tracker.commit(result)
            con.execute("COMMIT")
        return result
    except psycopg.OperationalError as exc:
        cut = _desynced(con) or con.broken
        if tracker.committing and cut and begin == WRITE:
            raise LostAtCommit(tracker.xid, tracker.result, exc) from exc
        if not cut:
            with contextlib.suppress(psycopg.Error):
                con.execute("ROLLBACK")
        raise
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            con.execute("ROLLBACK")
        raise


async def atransaction(con: psycopg.AsyncConnection[Any], flow: Tx[T], begin: str | None) -> T:
    """:func:`transaction` on an asyncio connection (always pipelined)."""
    catch = psycopg.Error
    if begin is None:

        async def direct(q: _Q) -> Any:
            return await _arows(await con.execute(q.sql, q.params), q)

        return await run_async(flow, direct, catch=catch)
    tracker = _Tracker()
    try:
        async with con.pipeline() as pipe:
            await con.execute(begin)
            xid = await con.execute(_XID) if begin == WRITE else None

            async def perform(q: _Q) -> Any:
                cur = await con.execute(q.sql, q.params)
                if q.fetch == "none":
                    return None
                await pipe.sync()
                if xid is not None and tracker.xid is None:
                    tracker.xid_row(await xid.fetchone())
                return await _arows(cur, q)

            result = await run_async(flow, perform, catch=catch)
            tracker.commit(result)
            await con.execute("COMMIT")
        return result
    except psycopg.OperationalError as exc:
        # A read cut off at its COMMIT lost nothing: it is simply run again.
        cut = _desynced(con) or con.broken
        if tracker.committing and cut and begin == WRITE:
            raise LostAtCommit(tracker.xid, tracker.result, exc) from exc
        if not cut:
            with contextlib.suppress(psycopg.Error):
                await con.execute("ROLLBACK")
        raise
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            await con.execute("ROLLBACK")
        raise


def _settled(status: str | None, deadline: float) -> str | Literal[False] | None:
    """A commit status to return, or False to ask again.

    'in progress' means the server has not yet noticed the dead connection.
    """
    if status != "in progress" or time.monotonic() > deadline:
        return status if status in ("committed", "aborted") else None
    return False


def commit_status(url: str, xid: int | None, deadline: float | None = None) -> str | None:
    """'committed', 'aborted', or None (unknown) for a write cut off at COMMIT.

    Asks on a new connection (the pool's other connections may be dead too),
    trying to make one until ``deadline`` (``time.monotonic()``; one try
    without it): after a restart the server knows the outcome.
    """
    if xid is None:
        return None
    until = deadline if deadline is not None else 0.0
    while True:
        wait = max(1, round(until - time.monotonic())) if deadline is not None else 10
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=wait) as con:
                settle = time.monotonic() + _STATUS_WAIT_S
                while True:
                    row = con.execute(_STATUS, (str(xid),)).fetchone()
                    answer = _settled(row[0] if row else None, settle)
                    if answer is not False:
                        return answer
                    time.sleep(0.05)
        except psycopg.Error:
            if time.monotonic() + _ASK_EVERY_S >= until:
                return None
            time.sleep(_ASK_EVERY_S)


async def acommit_status(url: str, xid: int | None, deadline: float | None = None) -> str | None:
    """:func:`commit_status` without blocking the event loop."""
    if xid is None:
        return None
    until = deadline if deadline is not None else 0.0
    while True:
        wait = max(1, round(until - time.monotonic())) if deadline is not None else 10
        try:
            async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, connect_timeout=wait
            ) as con:
                settle = time.monotonic() + _STATUS_WAIT_S
                while True:
                    row = await (await con.execute(_STATUS, (str(xid),))).fetchone()
                    answer = _settled(row[0] if row else None, settle)
                    if answer is not False:
                        return answer
                    await asyncio.sleep(0.05)
        except psycopg.Error:
            if time.monotonic() + _ASK_EVERY_S >= until:
                return None
            await asyncio.sleep(_ASK_EVERY_S)
