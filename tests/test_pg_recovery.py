"""PostgreSQL restarts under a warm pool: recovery, fast failure, readiness.

A server of its own (the embedded one, stopped and started with ``pg_ctl``,
fast and immediate), so the session's shared server is never restarted
under other tests. What is checked:

- once the server accepts connections again, no call fails (the pooled
  connections it closed are never handed to a call);
- a read cut off by a shutdown is run again, never reported as a write whose
  outcome is unknown;
- while the server is stopped, calls fail within their deadline
  (``unavailable_timeout``) + 1 s with :class:`StoreUnavailableError`;
- over REST, ``/readyz`` is 503 with ``Retry-After`` during the outage and
  200 after, and a call during the outage is 503 ``store_unavailable`` with
  ``Retry-After``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest

from engramdb import AsyncMemory, Memory, StoreError, StoreUnavailableError
from engramdb.server import create_app
from engramdb.stores.postgres import PostgresStore
from engramdb.stores.postgres._driver import READ, Attempts, Health, transaction
from engramdb.stores.postgres._sql import _Q, Tx
from engramdb_bench._hash_embedder import HashEmbedder
from engramdb_bench._pg import PgServer, start
from engramdb_bench._serving import live

PATIENCE = 1.5
"""The stores' unavailable_timeout here: short, so the outage tests stay fast."""
POOL = 6


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    """An embedded server of this module's own (it is stopped and started by the tests)."""
    # Durable: an immediate stop must not lose acknowledged commits (the suite's
    # shared server runs without fsync or synchronous commit).
    pg = start(None, durable=True, max_connections=100, prefix="engram-pg-restart-")
    yield pg
    pg.stop()


@pytest.fixture
def config(server: PgServer) -> Iterator[dict[str, Any]]:
    """A store config on a fresh schema with a pool of 6 and a short deadline."""
    with server.schema("restart", max_size=POOL) as cfg:
        yield {**cfg, "min_size": POOL, "unavailable_timeout": PATIENCE}


def _memory(config: dict[str, Any]) -> Memory:
    section = {"provider": "postgres", "config": config}
    return Memory(config={"vector_store": section}, embedder=HashEmbedder(), llm=None)


def _warm(mem: Memory, user: str) -> None:
    """Fill the pool: 12 concurrent searches leave its 6 connections open and idle."""
    for i in range(4):
        mem.add(f"fact {i} about the garden of {user}", user_id=user, infer=False)
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda i: mem.search(f"garden {i}", user_id=user), range(12)))
    store = mem.store
    assert isinstance(store, PostgresStore)
    assert store.pool().get_stats()["pool_size"] >= POOL - 1


def _restart(server: PgServer, mode: str) -> None:
    server.pause(mode)
    server.resume()


# -- the policy, without I/O -------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _broken() -> psycopg.OperationalError:
    return psycopg.OperationalError("server closed the connection unexpectedly")


def test_policy_retries_broken_connections_until_the_deadline_then_says_unavailable() -> None:
    clock, health = _Clock(), Health()
    attempts = Attempts("read", health=health, patience=5.0, pool_timeout=30.0, clock=clock)
    assert attempts.wait() == pytest.approx(0.5)  # waits in slices, healthy: up to pool_timeout
    for _ in range(20):  # far more than the old single retry
        assert attempts.failed(_broken(), True) == "retry"
        clock.now += 0.2
    assert health.failing
    clock.now = 104.9
    assert attempts.wait() == pytest.approx(0.1)  # failing: the deadline bounds the wait
    clock.now = 105.0
    with pytest.raises(StoreUnavailableError) as caught:
        attempts.failed(_broken(), True)
    assert caught.value.retry_after == 5.0
    assert "unavailable_timeout" in str(caught.value)
    with pytest.raises(StoreUnavailableError):
        attempts.wait()


def test_policy_a_busy_pool_is_not_an_outage() -> None:
    clock = _Clock()
    attempts = Attempts("write", patience=5.0, pool_timeout=30.0, clock=clock)
    clock.now += 10  # every connection in use for 10 s: the server is fine, keep waiting
    assert attempts.wait() == pytest.approx(0.5)
    clock.now += 20
    with pytest.raises(StoreError) as caught:
        attempts.wait()
    assert not isinstance(caught.value, StoreUnavailableError)
    assert "pool_timeout" in str(caught.value)


def test_policy_an_error_on_a_live_connection_is_not_retried() -> None:
    attempts = Attempts("read")
    with pytest.raises(StoreError):  # e.g. a statement timeout: the connection is fine
        attempts.failed(psycopg.errors.QueryCanceled("canceling statement"), False)


# -- a read cut off at its COMMIT ---------------------------------------------------------------


def _self_terminating_read(kill: Callable[[int], None]) -> Tx[int]:
    pid = (yield _Q("SELECT pg_backend_pid()", fetch="one"))[0]
    kill(pid)  # the server drops this connection before the read's COMMIT
    return int(pid)


def _terminate(url: str) -> Callable[[int], None]:
    def kill(pid: int) -> None:
        with psycopg.connect(url, autocommit=True) as con:
            con.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.05)

    return kill


def test_a_read_cut_off_at_commit_is_an_error_to_retry_not_a_lost_write(
    config: dict[str, Any],
) -> None:
    with (
        psycopg.connect(config["url"], autocommit=True) as con,
        pytest.raises(psycopg.OperationalError) as caught,
    ):
        transaction(con, _self_terminating_read(_terminate(config["url"])), READ)
    assert "outcome" not in str(caught.value)
    assert type(caught.value).__name__ != "LostAtCommit"


def test_the_store_runs_a_read_again_when_its_connection_dies(config: dict[str, Any]) -> None:
    store = PostgresStore(config["url"], schema=config["collection_name"], unavailable_timeout=5)
    try:
        kills = []

        def kill_once(pid: int) -> None:
            if not kills:
                kills.append(pid)
                _terminate(config["url"])(pid)

        pid = store._run(lambda: _self_terminating_read(kill_once), "read")
        assert kills and pid != kills[0]  # the second attempt ran on a fresh connection
    finally:
        store.close()


# -- restarts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_no_call_fails_once_the_server_is_back(
    server: PgServer, config: dict[str, Any], mode: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    with _memory(config) as mem:
        _warm(mem, user)
        _restart(server, mode)
        failures: list[BaseException] = []
        for i in range(16):  # every pooled connection is stale now
            try:
                if i % 2:
                    mem.add(f"new fact {i} about {user}", user_id=user, infer=False)
                else:
                    mem.search("garden", user_id=user)
            except Exception as exc:
                failures.append(exc)
        assert failures == []
        # concurrent calls after a second restart: the same
        _restart(server, mode)
        with ThreadPoolExecutor(8) as pool:
            done = list(pool.map(lambda i: mem.search(f"fact {i}", user_id=user), range(16)))
        assert len(done) == 16
        assert len(mem.get_all(user_id=user)["results"]) == 12


def test_reads_during_a_fast_shutdown_are_never_reported_as_lost_writes(
    server: PgServer, config: dict[str, Any]
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    with _memory({**config, "unavailable_timeout": 10.0}) as mem:
        _warm(mem, user)
        stop = threading.Event()
        errors: list[BaseException] = []
        calls = [0]

        def reader() -> None:
            while not stop.is_set():
                try:
                    mem.search("garden", user_id=user)
                    calls[0] += 1
                except Exception as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(6)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        server.pause("fast")
        time.sleep(0.5)
        server.resume()
        time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        assert calls[0] > 0
        # the deadline (10 s) outlasts the outage: every read waited and succeeded
        assert errors == [], [str(e) for e in errors]


def test_calls_while_the_server_is_down_fail_within_the_deadline(
    server: PgServer, config: dict[str, Any]
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    with _memory(config) as mem:
        _warm(mem, user)
        memory_id = mem.get_all(user_id=user)["results"][0]["id"]
        server.pause("immediate")
        try:
            calls: list[Callable[[], Any]] = [
                lambda: mem.search("garden", user_id=user),
                lambda: mem.add("a fact said during the outage", user_id=user, infer=False),
                lambda: mem.get(memory_id),
            ]
            for call in calls:
                started = time.monotonic()
                with pytest.raises(StoreUnavailableError) as caught:
                    call()
                assert time.monotonic() - started <= PATIENCE + 1.0
                assert caught.value.retry_after == PATIENCE
            with pytest.raises(StoreUnavailableError):
                mem.ping(0.5)
        finally:
            server.resume()
        mem.ping()
        assert mem.get(memory_id) is not None
        assert mem.search("garden", user_id=user)["results"]


def test_async_store_recovers_and_fails_fast_too(server: PgServer, config: dict[str, Any]) -> None:
    import asyncio

    user = f"u-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        section = {"provider": "postgres", "config": config}
        mem = AsyncMemory(config={"vector_store": section}, embedder=HashEmbedder(), llm=None)
        try:
            for i in range(3):
                await mem.add(f"fact {i} of {user}", user_id=user, infer=False)
            await asyncio.gather(*(mem.search("fact", user_id=user) for _ in range(12)))
            await asyncio.to_thread(_restart, server, "fast")
            for _ in range(12):
                await mem.search("fact", user_id=user)
            await asyncio.to_thread(server.pause, "fast")
            try:
                started = time.monotonic()
                with pytest.raises(StoreUnavailableError):
                    await mem.search("fact", user_id=user)
                assert time.monotonic() - started <= PATIENCE + 1.0
            finally:
                await asyncio.to_thread(server.resume)
            assert len((await mem.get_all(user_id=user))["results"]) == 3
        finally:
            await mem.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_rest_readyz_and_503_during_an_outage(
    server: PgServer, config: dict[str, Any], engine: str
) -> None:
    section = {"provider": "postgres", "config": config}
    cls = AsyncMemory if engine == "async" else Memory
    memory = cls(config={"vector_store": section}, embedder=HashEmbedder(), llm=None)
    body = {"query": "garden", "user_id": "alice"}
    with (
        live(create_app(memory, close_memory=True)) as app,
        httpx.Client(base_url=app.url, timeout=30) as client,
    ):
        added = client.post(
            "/memories", json={"messages": "alice tends the garden", "user_id": "alice"}
        )
        assert added.status_code == 200, added.text
        assert client.get("/readyz").json() == {"status": "ready"}
        server.pause("fast")
        try:
            assert client.get("/healthz").status_code == 200  # liveness never asks the store
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["status"] == "unavailable"
            assert int(ready.headers["Retry-After"]) >= 1
            started = time.monotonic()
            found = client.post("/search", json=body)
            assert time.monotonic() - started <= PATIENCE + 1.0
            assert found.status_code == 503, found.text
            assert found.json()["error"]["code"] == "store_unavailable"
            assert found.headers["Retry-After"] == "2"  # ceil(1.5)
        finally:
            server.resume()
        assert client.get("/readyz").status_code == 200
        found = client.post("/search", json=body)
        assert found.status_code == 200, found.text
        assert found.json()["results"]


def test_bench_pg_restart_reports_every_target() -> None:
    from engramdb_bench import pg_restart

    report = pg_restart.run(
        clients=2,
        outage_s=2.5,  # room for a whole /readyz probe (0.9 s) while it is down
        modes=("immediate",),
        patience=1.0,
        settle_s=0.5,
        after_s=1.0,
        echo=lambda line: None,
    )
    figures = report["modes"]["immediate"]
    assert figures["failures_after_back"] == 0
    assert figures["adds_2xx"] > 0 and figures["adds_2xx_not_stored_once"] == 0
    assert figures["adds_503_stored"] == 0
    assert figures["longest_wait_s"] <= 2.0
    assert report["met"], figures
    assert "immediate stop (met)" in pg_restart.format_report(report)
