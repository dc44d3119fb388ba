"""Transactions on psycopg connections: pipelines, retries and commit outcomes.

The flows (``_sql.py``, ``_writes.py``, ``_reads.py``) yield statements and
hold no connection. This module runs one flow as one transaction, with the
same :func:`~engramdb._engine.run_sync` / :func:`~engramdb._engine.run_async`
drivers that run the API's flows. What happens after a failed attempt
(retry, rebind, ask the server whether a cut-off COMMIT landed, give up) is
decided once, without I/O, by :class:`Attempts`; the blocking and the
asyncio store only move data between it and their connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Literal, TypeVar

import psycopg
import psycopg.errors as pg_errors

from engramdb.core.drive import run_async, run_sync
from engramdb.errors import EmbedderMismatchError, StoreError, ValidationError
from engramdb.stores.kernel.rebind import REEMBED_HINT
from engramdb.stores.postgres._sql import _Q, REBIND, WRITE_RETRIES, Tx

__all__ = [
    "READ",
    "Attempts",
    "LostAtCommit",
    "Mode",
    "acommit_status",
    "atransaction",
    "commit_status",
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


class Attempts:
    """The retry policy of one store call, with no I/O: both stores ask it what to do.

    Iterate for the attempts; after a failure call :meth:`lost` (the
    connection broke during COMMIT, with what the server says of the
    transaction) or :meth:`failed` (any other psycopg error). Each returns
    what the caller does next or raises what the API caller should see.
    """

    def __init__(self, mode: Mode) -> None:
        self.write = mode == "write"
        self.begin = _BEGIN[mode]
        self.count = WRITE_RETRIES if self.write else 2
        self.rebound = False

    def __iter__(self) -> Any:
        return iter(range(self.count))

    def lost(self, lost: LostAtCommit, status: str | None, attempt: int) -> bool:
        """True if the write committed (its result is ``lost.result``); False to retry.

        A write that may have committed is never run again: only an
        'aborted' answer from the server allows a retry.
        """
        if status == "committed":
            return True
        if status != "aborted" or attempt == self.count - 1:
            where = f"transaction {lost.xid} is {status!r}" if lost.xid is not None else "no xid"
            raise StoreError(
                "the connection to PostgreSQL broke during COMMIT and the outcome of this "
                f"write is unknown ({where}); it was not retried, since it may have been "
                "applied: check (e.g. get() or history()) before repeating it. Cause: "
                f"{lost.cause}"
            ) from lost.cause
        log.warning("retrying a write cut off at COMMIT (it was rolled back)")
        return False

    def failed(
        self, exc: psycopg.Error, broken: bool | None, attempt: int
    ) -> Literal["retry", "rebind"]:
        """After ``exc`` (``broken``: the connection's state, None if none was had)."""
        if isinstance(exc, _RETRYABLE):
            if attempt == self.count - 1:
                raise StoreError(f"PostgreSQL kept aborting the write: {exc}") from exc
            log.warning("retrying a write PostgreSQL aborted (%s)", type(exc).__name__)
            return "retry"
        if isinstance(exc, psycopg.OperationalError):
            # A pooled connection the server dropped (restart, failover, idle
            # timeout) before COMMIT was sent (LostAtCommit otherwise): nothing
            # was committed on it; try once on a fresh one.
            if not broken or attempt > 0:
                raise translate(exc) from exc
            log.warning("retrying on a fresh connection (%s)", exc)
            return "retry"
        if self.write and not self.rebound and _is_rebind(exc):
            # The binding changed under us (a reset elsewhere): bind ours again,
            # which refuses another model, and rerun the write.
            self.rebound = True
            return "rebind"
        raise translate(exc) from exc


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
        if tracker.committing and con.broken:
            raise LostAtCommit(tracker.xid, tracker.result, exc) from exc
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
        if tracker.committing and con.broken:
            raise LostAtCommit(tracker.xid, tracker.result, exc) from exc
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


def commit_status(url: str, xid: int | None) -> str | None:
    """'committed', 'aborted', or None (unknown) for a write cut off at COMMIT."""
    if xid is None:
        return None
    deadline = time.monotonic() + _STATUS_WAIT_S
    try:
        # A new connection, not the pool: its other connections may be dead too.
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as con:
            while True:
                row = con.execute(_STATUS, (str(xid),)).fetchone()
                answer = _settled(row[0] if row else None, deadline)
                if answer is not False:
                    return answer
                time.sleep(0.05)
    except psycopg.Error:
        return None


async def acommit_status(url: str, xid: int | None) -> str | None:
    """:func:`commit_status` without blocking the event loop."""
    if xid is None:
        return None
    deadline = time.monotonic() + _STATUS_WAIT_S
    try:
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=10
        ) as con:
            while True:
                row = await (await con.execute(_STATUS, (str(xid),))).fetchone()
                answer = _settled(row[0] if row else None, deadline)
                if answer is not False:
                    return answer
                await asyncio.sleep(0.05)
    except psycopg.Error:
        return None
