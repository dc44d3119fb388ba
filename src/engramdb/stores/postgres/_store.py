"""The PostgreSQL store's two faces: blocking and asyncio, over the same flows.

:class:`PostgresStore` and :class:`AsyncPostgresStore` hold connections and
nothing else. Every :class:`~engramdb.stores.base.Store` method that is one
transaction flow is declared once, in :class:`_Operations`, as an
:class:`_Op` (the flow and how it runs); both faces inherit the
declarations, and each runs them with its own ``_run``: blocking calls on a
psycopg pool, or coroutines on an asyncio pool. mypy checks both faces
against the ``Store`` and ``AsyncStore`` protocols through ``_Op.__get__``.
Only the methods that are more than one flow (purge, export's chunked
snapshot, close) are written per face.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, replace
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from engramdb.errors import ConflictError, StoreError
from engramdb.stores.base import Scope
from engramdb.stores.kernel.erasure import (
    PLAN_ATTEMPTS,
    ErasurePlan,
    check_terms,
    purge_with,
    reindexed_terms,
)
from engramdb.stores.postgres._driver import (
    READ,
    WRITE,
    Attempts,
    Health,
    LostAtCommit,
    Mode,
    acommit_status,
    ais_stale,
    atransaction,
    commit_status,
    is_stale,
    transaction,
    translate,
)
from engramdb.stores.postgres._entities import _EntityFlows
from engramdb.stores.postgres._entity_hop import _EntityHopFlows
from engramdb.stores.postgres._neighbours import _NeighbourFlows
from engramdb.stores.postgres._reads import _ReadFlows
from engramdb.stores.postgres._replica import (
    CHECKOUT_S,
    WRITTEN,
    Replica,
    aidentity,
    await_replay,
    identity,
    wait_for_replay,
    written,
)
from engramdb.stores.postgres._sql import (
    _VACUUM_FAILED,
    DEFAULT_SCHEMA,
    REPLICA_READ,
    ReplicaRead,
    Tx,
    _register_vector,
    log,
)
from engramdb.stores.postgres._writes import _WriteFlows
from engramdb.stores.routing import replica_ok

__all__ = ["DEFAULT_SCHEMA", "AsyncPostgresStore", "PostgresStore"]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

# psycopg prepares statements it sees repeatedly; a generic plan would pick the
# HNSW index or a scope's B-tree without knowing the scope's size, so every
# execution is planned for its own values.
_SESSION = "SET TIME ZONE 'UTC'; SET plan_cache_mode = force_custom_plan"
_EXPORT_CHUNK = 500
_RECONNECT_S = 0.5
"""How long the pool keeps retrying a connection in the background before it
gives up on it (psycopg-pool's ``reconnect_timeout``, 5 minutes by default, with
a backoff that doubles up to minutes: a server back after an outage would wait
for the next try). A call that waits for a connection asks for a new one each
:data:`~engramdb.stores.postgres._driver.SLICE_S`, so the pool reconnects as
soon as the server accepts connections."""
_CANNOT_CONNECT = "no new connection could be made: the server refuses or does not answer"


class _Flows(_WriteFlows, _NeighbourFlows, _EntityHopFlows, _EntityFlows, _ReadFlows):
    """Every store operation as a transaction flow, plus the state the flows share.

    Holds no connection: both faces drive these flows and share one instance
    (and so one set of caches).
    """


class _Op(Generic[P, R]):
    """A Store method that is one flow: the flow, and whether it writes or reads.

    Read through a :class:`PostgresStore` it is a blocking method, through an
    :class:`AsyncPostgresStore` a coroutine method, with the flow's
    parameters (minus ``self``) either way.
    """

    def __init__(self, flow: Callable[Concatenate[_Flows, P], Tx[R]], mode: Mode) -> None:
        self.flow = flow
        self.mode = mode
        self.__doc__ = flow.__doc__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Op[P, R]: ...

    @overload
    def __get__(self, obj: PostgresStore, owner: type[Any]) -> Callable[P, R]: ...

    @overload
    def __get__(
        self, obj: AsyncPostgresStore, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        if obj is None:
            return self
        flow, mode, flows = self.flow, self.mode, obj.flows

        def call(*args: Any, **kwargs: Any) -> Any:
            return obj._run(lambda: flow(flows, *args, **kwargs), mode)

        call.__name__ = call.__qualname__ = self.name
        call.__doc__ = self.__doc__
        return call


class _Operations:
    """The one-flow Store methods, declared once for both faces."""

    flows: _Flows

    bind_embedder = _Op(_Flows.bind_embedder, "write")
    bound_embedder = _Op(_Flows.read_binding, "single")
    change_mark = _Op(_Flows.change_mark, "single")
    embedding_sources = _Op(_Flows.embedding_sources, "single")
    term_sources = _Op(_Flows.term_sources, "single")
    retag = _Op(_Flows.retag, "write")
    attribute_terms_version = _Op(_Flows.attribute_terms_version, "single")
    record_attribute_terms_version = _Op(_Flows.record_attribute_terms_version, "write")
    rebind_embedder = _Op(_Flows.rebind_embedder, "write")
    add = _Op(_Flows.add, "write")
    attach_session = _Op(_Flows.attach_session, "write")
    detach_session = _Op(_Flows.detach_session, "write")
    link = _Op(_Flows.link, "write")
    unlink = _Op(_Flows.unlink, "write")
    keep_failed = _Op(_Flows.keep_failed, "write")
    failure = _Op(_Flows.failure, "read")
    failures = _Op(_Flows.failures, "single")
    recent_messages = _Op(_Flows.recent_messages, "single")
    source_messages = _Op(_Flows.source_messages, "single")
    scope_counts = _Op(_Flows.scope_counts, "single")
    existing_hashes = _Op(_Flows.existing_hashes, "single")
    get = _Op(_Flows.get, "single")
    list_memories = _Op(_Flows.list_memories, "single")
    count_memories = _Op(_Flows.count_memories, "single")
    entities = _Op(_Flows.entities, "read")
    entity_memories = _Op(_Flows.entity_memories, "read")
    vector_search = _Op(_Flows.vector_search, "read")
    candidates = _Op(_Flows.candidates, "read")
    neighbours = _Op(_Flows.neighbours, "read")
    entity_hop = _Op(_Flows.entity_hop, "read")
    update = _Op(_Flows.update, "write")
    delete = _Op(_Flows.delete, "write")
    delete_scope = _Op(_Flows.delete_scope, "write")
    plan_restore = _Op(_Flows.plan_restore, "read")
    apply_restore = _Op(_Flows.apply_restore, "write")
    plan_purge = _Op(_Flows.plan_purge, "read")
    history = _Op(_Flows.history, "single")
    import_rows = _Op(_Flows.import_rows, "write")
    visible_ids = _Op(_Flows.visible_ids, "single")
    count = _Op(_Flows.count, "single")
    reset = _Op(_Flows.reset, "write")


@dataclass(frozen=True)
class _PoolSettings:
    url: str
    min_size: int
    max_size: int
    timeout: float
    unavailable_timeout: float

    def attempts(self, mode: Mode, health: Health) -> Attempts:
        """The retry policy of one call with these settings."""
        return Attempts(
            mode, health=health, patience=self.unavailable_timeout, pool_timeout=self.timeout
        )

    def connect_kwargs(self, url: str | None = None) -> dict[str, Any]:
        """The pool's connection options: autocommit, and a connect timeout unless the URL has one.

        Without one, a connection attempt to a host that does not answer
        would hold a pool worker for the system's TCP timeout (minutes).
        ``url`` is the read replica's (its connect timeout is libpq's
        shortest, 2 s: a read falls back to the primary rather than wait).
        """
        kwargs: dict[str, Any] = {"autocommit": True}
        try:
            given = "connect_timeout" in conninfo_to_dict(url or self.url)
        except psycopg.Error:
            given = False
        if not given:
            kwargs["connect_timeout"] = 2 if url else max(2, round(self.unavailable_timeout))
        return kwargs


class PostgresStore(_Operations):
    """A :class:`~engramdb.stores.base.Store` on PostgreSQL with pgvector (blocking).

    Args:
        url: a libpq connection string or ``postgresql://`` URL.
        schema: the PostgreSQL schema holding this store's tables (created on
            first open, with the migrations, under an advisory lock).
        min_size, max_size: connection pool bounds (per process).
        timeout: seconds to wait for a pooled connection while every one is in use.
        max_cached_docs: bound on the documents of the per-scope keyword caches.
        ef_search: HNSW ``ef_search`` floor (raised to ``2 * k`` for larger k).
        unavailable_timeout: seconds a call keeps trying while the server
            cannot be reached (stopped, restarting, network down) before it
            raises :class:`~engramdb.errors.StoreUnavailableError`.
        read_url: a hot standby of ``url``'s database: the reads of calls that
            only read go there (see :mod:`~engramdb.stores.postgres._replica`).
        read_wait: seconds such a read waits for the replica to replay this
            store's last write before it reads from the primary instead.
        read_retry: seconds a replica that could not be reached is left
            alone (its reads go to the primary) before one read tries it again.
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
        unavailable_timeout: float = 5.0,
        read_url: str | None = None,
        read_wait: float = 0.2,
        read_retry: float = 5.0,
    ) -> None:
        """Open the store, creating and migrating its schema if needed."""
        if not schema or len(schema) > 63:
            raise StoreError(f"PostgreSQL schema name {schema!r} must be 1 to 63 characters")
        self.flows = _Flows(schema, max_cached_docs, ef_search)
        self.settings = _PoolSettings(url, min_size, max_size, timeout, unavailable_timeout)
        self.health = Health()
        self.schema = schema
        self.replica = Replica(read_url, read_wait, read_retry) if read_url else None
        """The read replica (``read_url``): its state and :attr:`Replica.stats`; None without."""
        self._pool: ConnectionPool | None = None
        self._replica_pool: ConnectionPool | None = None
        self._pool_lock = threading.Lock()
        self._closed = False
        self._async: AsyncPostgresStore | None = None
        self._vector_info: TypeInfo | None = None
        try:
            with psycopg.connect(url, autocommit=True) as con:
                transaction(con, self.flows.migrate(), WRITE, pipeline=False)
                self._vector_info = TypeInfo.fetch(con, "vector")
                if self.replica is not None:
                    # The schema may be new: the replica's reads wait for it too.
                    self.replica.identity = identity(con)
                    self._note_write(con)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store ({exc})") from exc
        if self._vector_info is None:
            raise StoreError("the pgvector type 'vector' is not visible on the search_path")

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"

    def configure(self, con: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        """Register the vector type on a new connection (both pools call it)."""
        assert self._vector_info is not None
        _register_vector(con, self._vector_info)

    def _configure(self, con: psycopg.Connection[Any]) -> None:
        self.configure(con)
        con.execute(_SESSION)
        self.health.recovered()

    def _reconnect_failed(self, pool: object) -> None:
        self.health.failed(_CANNOT_CONNECT)

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
                        kwargs=self.settings.connect_kwargs(),
                        configure=self._configure,
                        reconnect_timeout=_RECONNECT_S,
                        reconnect_failed=self._reconnect_failed,
                        name=f"engramdb-{self.schema}",
                        open=True,
                    )
        return self._pool

    def replica_pool(self) -> ConnectionPool:
        """The read replica's connection pool (opened on first use; ``read_url`` only)."""
        if self._closed:
            raise StoreError("this store is closed; open a new Memory")
        assert self.replica is not None
        if self._replica_pool is None:
            with self._pool_lock:
                if self._replica_pool is None:
                    url = self.replica.url
                    self._replica_pool = ConnectionPool(
                        url,
                        min_size=self.settings.min_size,
                        max_size=self.settings.max_size,
                        timeout=CHECKOUT_S,
                        kwargs=self.settings.connect_kwargs(url),
                        configure=self._configure_replica,
                        reconnect_timeout=_RECONNECT_S,
                        name=f"engramdb-replica-{self.schema}",
                        open=True,
                    )
        return self._replica_pool

    def _configure_replica(self, con: psycopg.Connection[Any]) -> None:
        self.configure(con)
        con.execute(_SESSION)
        assert self.replica is not None
        self.replica.check(identity(con))

    def _note_write(self, con: psycopg.Connection[Any]) -> None:
        """After a commit on ``con``: where the replica must get before this store reads it."""
        assert self.replica is not None
        try:
            row = con.execute(WRITTEN).fetchone()
        except psycopg.Error:
            self.replica.lost()  # committed all the same: the next read asks the primary
            return
        self.replica.wrote(row[0] if row else None)

    def _probe(self) -> None:
        """Connect to the replica once, outside the pool (raises if it cannot be reached)."""
        assert self.replica is not None
        url = self.replica.url
        psycopg.connect(url, **self.settings.connect_kwargs(url)).close()

    def _replica_checkout(self, pool: ConnectionPool) -> psycopg.Connection[Any]:
        """A live replica connection, or PoolTimeout / OperationalError (read the primary)."""
        assert self.replica is not None
        probed = self.replica.down is not None
        if probed:
            self._probe()  # left alone a while: see whether it answers before waiting
        while True:
            con = pool.getconn()
            if not is_stale(con):
                return con
            con.close()
            pool.putconn(con)
            if not probed:
                # It closed our connections (a restart, a shutdown): is it there at all?
                self._probe()
                probed = True

    def _read_replica(self, make: Callable[[], Tx[T]]) -> tuple[bool, Any]:
        """Run a read flow on the replica: ``(True, result)``, or ``(False, None)`` (the primary).

        Waits for the replica to replay this store's last write (up to
        ``read_wait``); a replica that cannot be reached, lags beyond that or
        fails the read leaves the read to the primary.
        """
        replica = self.replica
        assert replica is not None
        if not replica.usable():
            return False, None
        if replica.unknown:
            replica.wrote(self._run_primary(written, "single"))
        con: psycopg.Connection[Any] | None = None
        pool: ConnectionPool | None = None
        try:
            pool = self.replica_pool()
            con = self._replica_checkout(pool)
            if replica.wrong is not None:  # found out on connecting
                replica.count(primary=1)
                return False, None
            target = replica.needed(con)
            waited = wait_for_replay(replica, con, target) if target else 0.0
            if waited is None:
                replica.behind()
                return False, None
            reading = ReplicaRead(replica.at(con))
            token = REPLICA_READ.set(reading)
            try:
                result = transaction(con, make(), READ)
            finally:
                REPLICA_READ.reset(token)
            replica.replayed(con, reading.replayed)
            replica.served(waited)
            return True, result
        except PoolTimeout:
            replica.failed(f"no connection within {CHECKOUT_S:g} s", down=True)
        except psycopg.Error as exc:
            replica.failed(exc, down=con is None or con.broken)
        finally:
            if con is not None and pool is not None:
                pool.putconn(con)
        return False, None

    def _checkout(self, pool: ConnectionPool, attempts: Attempts) -> psycopg.Connection[Any]:
        """A live pooled connection: the ones the server closed are dropped, not handed out."""
        while True:
            try:
                con = pool.getconn(timeout=attempts.wait())
            except PoolTimeout:
                continue  # wait() raises once the call's time is spent
            if not is_stale(con):
                return con
            attempts.stale()
            con.close()  # the pool replaces a closed connection
            pool.putconn(con)

    def _run(self, make: Callable[[], Tx[T]], mode: Mode) -> T:
        """Run a flow: a read of a call that only reads on the replica if there is one."""
        if mode != "write" and self.replica is not None and replica_ok():
            served, result = self._read_replica(make)
            if served:
                return result  # type: ignore[no-any-return]
        return self._run_primary(make, mode)

    def _run_primary(self, make: Callable[[], Tx[T]], mode: Mode) -> T:
        """Run a flow in a pooled connection, as often as :class:`Attempts` allows."""
        attempts = self.settings.attempts(mode, self.health)
        for _ in attempts:
            con: psycopg.Connection[Any] | None = None
            try:
                pool = self.pool()
                con = self._checkout(pool, attempts)
                try:
                    result = transaction(con, make(), attempts.begin)
                    if attempts.write and self.replica is not None:
                        self._note_write(con)
                finally:
                    pool.putconn(con)
                self.health.recovered()
                return result
            except LostAtCommit as lost:
                # Never rerun a write that may have committed: ask the server.
                status = commit_status(self.settings.url, lost.xid, attempts.deadline)
                if attempts.lost(lost, status):
                    self.health.recovered()
                    if self.replica is not None:
                        self.replica.lost()
                    return lost.result  # type: ignore[no-any-return]
            except psycopg.Error as exc:
                if attempts.failed(exc, con.broken if con else None) == "rebind":
                    self._rebind()
                elif attempts.delay:
                    time.sleep(attempts.delay)
        raise AssertionError("unreachable")

    def ping(self, timeout: float | None = None) -> None:
        """Check that the server answers (``SELECT 1`` on a pooled connection).

        Waits at most ``timeout`` seconds (the store's ``unavailable_timeout``
        when None) while the server cannot be reached, then raises
        :class:`~engramdb.errors.StoreUnavailableError`.
        """
        settings = self.settings
        if timeout is not None:
            settings = replace(settings, unavailable_timeout=min(timeout, settings.timeout))
        attempts = settings.attempts("single", self.health)
        if timeout is not None:
            # A readiness probe answers within its timeout even when the pool is busy.
            attempts.pool_deadline = attempts.deadline
        for _ in attempts:
            con: psycopg.Connection[Any] | None = None
            try:
                pool = self.pool()
                con = self._checkout(pool, attempts)
                try:
                    con.execute("SELECT 1")
                finally:
                    pool.putconn(con)
                self.health.recovered()
                return
            except psycopg.Error as exc:
                attempts.failed(exc, con.broken if con else None)
                if attempts.delay:
                    time.sleep(attempts.delay)

    def _rebind(self) -> None:
        """After a binding guard failed: bind this process's embedder again, or refuse."""
        binding = self.flows.binding
        assert binding is not None
        self.bind_embedder(*binding)

    def async_store(self) -> AsyncPostgresStore:
        """The same store with coroutine methods on an asyncio pool (shares the caches)."""
        if self._async is None:
            self._async = AsyncPostgresStore(self)
        return self._async

    def purge(self, *, memory_id: str | None = None, scope: Scope | None = None) -> int:
        """Erase memories for good, with everything derived from them; returns how many.

        :meth:`plan_purge`, then the re-index terms, then :meth:`apply_purge`
        (planned again if a write came between).
        """
        return purge_with(self, memory_id=memory_id, scope=scope)

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """Execute a purge plan in one transaction, then VACUUM what held the text.

        The dead row versions the deletes and re-indexes leave are removed by
        VACUUM after the commit (it cannot run inside a transaction), unless an
        older snapshot still open elsewhere in the cluster can see them; the WAL
        and any backup or replica hold what was written (docs/postgres.md).
        """
        check_terms(plan, terms)
        count = self._run(lambda: self.flows.apply_purge(plan, terms), "write")
        if plan.touched:
            try:
                with self.pool().connection() as con:
                    for statement in self.flows.vacuum_statements():
                        con.execute(statement)
            except psycopg.Error as exc:
                log.warning(_VACUUM_FAILED, exc)
        return count

    def export_rows(self) -> Iterator[dict[str, Any]]:
        """Every memory (deleted ones too) with its vector, sessions, links, history.

        Read in chunks inside one REPEATABLE READ transaction: one snapshot.
        """
        with self.pool().connection() as con:
            con.execute(READ)
            try:
                after = 0
                while True:
                    after, chunk = transaction(
                        con, self.flows.export_chunk(after, _EXPORT_CHUNK), None
                    )
                    if not chunk:
                        break
                    yield from chunk
            except psycopg.Error as exc:
                raise translate(exc) from exc
            finally:
                with contextlib.suppress(psycopg.Error):
                    con.execute("COMMIT")

    def close(self) -> None:
        """Close the pools (the async ones are closed by :meth:`AsyncPostgresStore.close`)."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        replica, self._replica_pool = self._replica_pool, None
        if replica is not None:
            replica.close()
        with self.flows.caches.lock:
            self.flows.caches.clear()


class AsyncPostgresStore(_Operations):
    """The same store with coroutine methods, on an asyncio connection pool.

    Made by :meth:`PostgresStore.async_store`; runs the same transaction flows
    as the blocking store and shares its keyword caches. The pool opens on the
    first call, in the running event loop.
    """

    def __init__(self, sync: PostgresStore) -> None:
        """Wrap ``sync`` (its flows, caches and settings)."""
        self.sync = sync
        self.flows = sync.flows
        self.replica = sync.replica
        self._pool: AsyncConnectionPool | None = None
        self._replica_pool: AsyncConnectionPool | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _configure(self, con: psycopg.AsyncConnection[Any]) -> None:
        self.sync.configure(con)
        await con.execute(_SESSION)
        self.sync.health.recovered()

    def _reconnect_failed(self, pool: object) -> None:
        self.sync.health.failed(_CANNOT_CONNECT)

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
                        kwargs=settings.connect_kwargs(),
                        configure=self._configure,
                        reconnect_timeout=_RECONNECT_S,
                        reconnect_failed=self._reconnect_failed,
                        name=f"engramdb-async-{self.sync.schema}",
                        open=False,
                    )
                    await pool.open()
                    self._pool = pool
        return self._pool

    async def replica_pool(self) -> AsyncConnectionPool:
        """The read replica's asyncio pool (opened on first use; ``read_url`` only)."""
        await self.pool()  # the same checks: open, and this event loop
        assert self.replica is not None and self._lock is not None
        if self._replica_pool is None:
            async with self._lock:
                if self._replica_pool is None:
                    url = self.replica.url
                    pool = AsyncConnectionPool(
                        url,
                        min_size=self.sync.settings.min_size,
                        max_size=self.sync.settings.max_size,
                        timeout=CHECKOUT_S,
                        kwargs=self.sync.settings.connect_kwargs(url),
                        configure=self._configure_replica,
                        reconnect_timeout=_RECONNECT_S,
                        name=f"engramdb-async-replica-{self.sync.schema}",
                        open=False,
                    )
                    await pool.open()
                    self._replica_pool = pool
        return self._replica_pool

    async def _configure_replica(self, con: psycopg.AsyncConnection[Any]) -> None:
        self.sync.configure(con)
        await con.execute(_SESSION)
        assert self.replica is not None
        self.replica.check(await aidentity(con))

    async def _note_write(self, con: psycopg.AsyncConnection[Any]) -> None:
        """See :meth:`PostgresStore._note_write`."""
        assert self.replica is not None
        try:
            row = await (await con.execute(WRITTEN)).fetchone()
        except psycopg.Error:
            self.replica.lost()
            return
        self.replica.wrote(row[0] if row else None)

    async def _probe(self) -> None:
        """See :meth:`PostgresStore._probe`."""
        assert self.replica is not None
        url = self.replica.url
        kwargs = self.sync.settings.connect_kwargs(url)
        await (await psycopg.AsyncConnection.connect(url, **kwargs)).close()

    async def _replica_checkout(self, pool: AsyncConnectionPool) -> psycopg.AsyncConnection[Any]:
        """See :meth:`PostgresStore._replica_checkout`."""
        assert self.replica is not None
        probed = self.replica.down is not None
        if probed:
            await self._probe()
        while True:
            con = await pool.getconn()
            if not await ais_stale(con):
                return con
            await con.close()
            await pool.putconn(con)
            if not probed:
                await self._probe()
                probed = True

    async def _read_replica(self, make: Callable[[], Tx[T]]) -> tuple[bool, Any]:
        """See :meth:`PostgresStore._read_replica`."""
        replica = self.replica
        assert replica is not None
        if not replica.usable():
            return False, None
        if replica.unknown:
            replica.wrote(await self._run_primary(written, "single"))
        con: psycopg.AsyncConnection[Any] | None = None
        pool: AsyncConnectionPool | None = None
        try:
            pool = await self.replica_pool()
            con = await self._replica_checkout(pool)
            if replica.wrong is not None:
                replica.count(primary=1)
                return False, None
            target = replica.needed(con)
            waited = await await_replay(replica, con, target) if target else 0.0
            if waited is None:
                replica.behind()
                return False, None
            reading = ReplicaRead(replica.at(con))
            token = REPLICA_READ.set(reading)
            try:
                result = await atransaction(con, make(), READ)
            finally:
                REPLICA_READ.reset(token)
            replica.replayed(con, reading.replayed)
            replica.served(waited)
            return True, result
        except PoolTimeout:
            replica.failed(f"no connection within {CHECKOUT_S:g} s", down=True)
        except psycopg.Error as exc:
            replica.failed(exc, down=con is None or con.broken)
        finally:
            if con is not None and pool is not None:
                await pool.putconn(con)
        return False, None

    async def _checkout(
        self, pool: AsyncConnectionPool, attempts: Attempts
    ) -> psycopg.AsyncConnection[Any]:
        """See :meth:`PostgresStore._checkout`."""
        while True:
            try:
                con = await pool.getconn(timeout=attempts.wait())
            except PoolTimeout:
                continue
            if not await ais_stale(con):
                return con
            attempts.stale()
            await con.close()
            await pool.putconn(con)

    async def _run(self, make: Callable[[], Tx[T]], mode: Mode) -> T:
        """See :meth:`PostgresStore._run`."""
        if mode != "write" and self.replica is not None and replica_ok():
            served, result = await self._read_replica(make)
            if served:
                return result  # type: ignore[no-any-return]
        return await self._run_primary(make, mode)

    async def _run_primary(self, make: Callable[[], Tx[T]], mode: Mode) -> T:
        """See :meth:`PostgresStore._run_primary`."""
        health = self.sync.health
        attempts = self.sync.settings.attempts(mode, health)
        for _ in attempts:
            con: psycopg.AsyncConnection[Any] | None = None
            try:
                pool = await self.pool()
                con = await self._checkout(pool, attempts)
                try:
                    result = await atransaction(con, make(), attempts.begin)
                    if attempts.write and self.replica is not None:
                        await self._note_write(con)
                finally:
                    await pool.putconn(con)
                health.recovered()
                return result
            except LostAtCommit as lost:
                url = self.sync.settings.url
                status = await acommit_status(url, lost.xid, attempts.deadline)
                if attempts.lost(lost, status):
                    health.recovered()
                    if self.replica is not None:
                        self.replica.lost()
                    return lost.result  # type: ignore[no-any-return]
            except psycopg.Error as exc:
                if attempts.failed(exc, con.broken if con else None) == "rebind":
                    binding = self.flows.binding
                    assert binding is not None
                    await self.bind_embedder(*binding)
                elif attempts.delay:
                    await asyncio.sleep(attempts.delay)
        raise AssertionError("unreachable")

    async def ping(self, timeout: float | None = None) -> None:
        """See :meth:`PostgresStore.ping`."""
        settings = self.sync.settings
        if timeout is not None:
            settings = replace(settings, unavailable_timeout=min(timeout, settings.timeout))
        attempts = settings.attempts("single", self.sync.health)
        if timeout is not None:
            attempts.pool_deadline = attempts.deadline
        for _ in attempts:
            con: psycopg.AsyncConnection[Any] | None = None
            try:
                pool = await self.pool()
                con = await self._checkout(pool, attempts)
                try:
                    await con.execute("SELECT 1")
                finally:
                    await pool.putconn(con)
                self.sync.health.recovered()
                return
            except psycopg.Error as exc:
                attempts.failed(exc, con.broken if con else None)
                if attempts.delay:
                    await asyncio.sleep(attempts.delay)

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

    async def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """See :meth:`PostgresStore.apply_purge`."""
        check_terms(plan, terms)
        count = await self._run(lambda: self.flows.apply_purge(plan, terms), "write")
        if plan.touched:
            try:
                async with (await self.pool()).connection() as con:
                    for statement in self.flows.vacuum_statements():
                        await con.execute(statement)
            except psycopg.Error as exc:
                log.warning(_VACUUM_FAILED, exc)
        return count

    async def export_rows(self) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`PostgresStore.export_rows`."""
        async with (await self.pool()).connection() as con:
            await con.execute(READ)
            try:
                after = 0
                while True:
                    after, chunk = await atransaction(
                        con, self.flows.export_chunk(after, _EXPORT_CHUNK), None
                    )
                    if not chunk:
                        break
                    for item in chunk:
                        yield item
            except psycopg.Error as exc:
                raise translate(exc) from exc
            finally:
                with contextlib.suppress(psycopg.Error):
                    await con.execute("COMMIT")

    async def close(self) -> None:
        """Close the asyncio pools and the blocking store."""
        for pool in (self._pool, self._replica_pool):
            if pool is not None:
                await pool.close()
        self._pool = self._replica_pool = None
        self.sync.close()
