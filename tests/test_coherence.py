"""Coherence across processes: one writes, another (already warm) searches and lists.

Every store keeps per-process caches (vector and keyword indexes per scope)
that catch up with other processes' writes; these tests make a reader warm
(it has searched and listed, so its caches are filled), let another
``Memory`` -- in this process, or in a real second OS process -- write,
update, delete, restore, purge, delete_all or reset, and check that the
reader's next search and listing show exactly the new state, keyword index
included. Races that cannot be forced by timing are forced with hooks.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from _coherence_child import HashEmbedder, open_memory
from engramdb import EmbedderMismatchError, Memory
from engramdb.core.bm25 import BM25Index
from engramdb.search import plan_query
from engramdb.stores.base import Scope
from engramdb.stores.sqlite import SQLiteStore

CHILD = str(Path(__file__).with_name("_coherence_child.py"))
USER = "u"


# -- helpers --------------------------------------------------------------------------------


def store_spec(backend: str, request: pytest.FixtureRequest, db_path: Path) -> str:
    """What a Memory (here or in a child) opens: a SQLite path or a vector_store JSON."""
    if backend == "sqlite":
        return str(db_path)
    config = request.getfixturevalue("pg_config")
    return json.dumps({"provider": "postgres", "config": config})


def listing(m: Memory, user: str = USER) -> dict[str, str]:
    return {r["id"]: r["memory"] for r in m.get_all(user_id=user, top_k=1000)["results"]}


def found(m: Memory, query: str = "anything at all", user: str = USER) -> dict[str, str]:
    return {r["id"]: r["memory"] for r in m.search(query, user_id=user, top_k=1000)["results"]}


def keyword_hits(m: Memory, word: str, user: str = USER) -> set[str]:
    """Ids whose keyword (BM25) score for ``word`` is positive, from the reader's cache."""
    plan = plan_query(word, m.config.retrieval)
    vec = m.embedder.embed_query(word)
    cands = m.store.candidates(Scope(user_id=user), None, vec, plan.terms, [], 1000)
    return {c.row.id for c in cands if c.bm25 > 0}


class Child:
    """A second OS process running Memory calls (tests/_coherence_child.py)."""

    def __init__(self, spec: str, model: str = "test-hash", dim: int = 64) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, spec, model, str(dim)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._reply() == "ready"

    def _reply(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            raise AssertionError(f"the child died: {self.proc.stderr.read()}")
        reply = json.loads(line)
        if "error" in reply:
            raise AssertionError(f"child: {reply['error']}: {reply['message']}")
        return reply["ok"]

    def __call__(self, op: str, *args: Any, **kwargs: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "args": args, "kwargs": kwargs}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def raw(self, op: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The reply as sent, errors included."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, "args": args, "kwargs": kwargs}) + "\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()


Writer = Callable[..., Any]


def local_writer(m: Memory) -> Writer:
    return lambda op, *args, **kwargs: getattr(m, op)(*args, **kwargs)


def first_id(result: dict[str, Any]) -> str:
    return str(result["results"][0]["id"])


PROBES = ("tea", "coffee", "lisbon", "sister", "pepper", "rex", "violin", "marathon")


def run_every_operation(write: Writer, reader: Memory, cold: Callable[[], Memory]) -> None:
    """The shared scenario: after each operation of ``write``, the warm reader agrees.

    Agreeing means: its listing and search show exactly ``expected``, and its
    keyword index gives every probe word the same hits as a cold reader
    (a new Memory, caches empty) opened on the same store.
    """

    def agree(expected: dict[str, str]) -> None:
        assert listing(reader) == expected
        assert found(reader) == expected
        with cold() as fresh:
            assert {w: keyword_hits(reader, w) for w in PROBES} == {
                w: keyword_hits(fresh, w) for w in PROBES
            }

    id1 = first_id(write("add", "I like green tea", user_id=USER))
    id2 = first_id(write("add", "My sister lives in Lisbon", user_id=USER))
    agree({id1: "I like green tea", id2: "My sister lives in Lisbon"})
    assert id1 in keyword_hits(reader, "tea")

    # add
    id3 = first_id(write("add", "I adopted a cat named Pepper", user_id=USER))
    agree(
        {
            id1: "I like green tea",
            id2: "My sister lives in Lisbon",
            id3: "I adopted a cat named Pepper",
        }
    )
    assert id3 in keyword_hits(reader, "pepper")

    # update: the new words are searchable, the old ones are gone
    write("update", id1, "I like black coffee")
    agree(
        {
            id1: "I like black coffee",
            id2: "My sister lives in Lisbon",
            id3: "I adopted a cat named Pepper",
        }
    )
    assert id1 in keyword_hits(reader, "coffee")

    # delete and restore
    write("delete", id2)
    agree({id1: "I like black coffee", id3: "I adopted a cat named Pepper"})
    assert id2 not in keyword_hits(reader, "lisbon")
    write("restore", id2)
    agree(
        {
            id1: "I like black coffee",
            id2: "My sister lives in Lisbon",
            id3: "I adopted a cat named Pepper",
        }
    )
    assert id2 in keyword_hits(reader, "lisbon")

    # purge, then an add that may reuse the purged row's internal id
    write("purge", id3)
    agree({id1: "I like black coffee", id2: "My sister lives in Lisbon"})
    id4 = first_id(write("add", "I adopted a dog named Rex", user_id=USER))
    agree(
        {
            id1: "I like black coffee",
            id2: "My sister lives in Lisbon",
            id4: "I adopted a dog named Rex",
        }
    )
    assert id4 in keyword_hits(reader, "rex")

    # delete_all, then the scope lives on
    write("delete_all", user_id=USER)
    agree({})
    id5 = first_id(write("add", "I play the violin", user_id=USER))
    agree({id5: "I play the violin"})

    # reset, then new memories (internal ids start over on SQLite)
    write("reset")
    agree({})
    id6 = first_id(write("add", "I run marathons every spring", user_id=USER))
    agree({id6: "I run marathons every spring"})
    assert keyword_hits(reader, "marathon") == {id6}


# -- every operation, two instances in one process and two OS processes -----------------------


def test_two_instances_see_every_operation(
    backend: str, request: pytest.FixtureRequest, db_path: Path
) -> None:
    spec = store_spec(backend, request, db_path)
    with open_memory(spec, "test-hash", 64) as writer, open_memory(spec, "test-hash", 64) as reader:
        run_every_operation(
            local_writer(writer), reader, lambda: open_memory(spec, "test-hash", 64)
        )


def test_second_os_process_writes_and_warm_reader_sees_it(
    backend: str, request: pytest.FixtureRequest, db_path: Path
) -> None:
    spec = store_spec(backend, request, db_path)
    with open_memory(spec, "test-hash", 64) as reader:
        # the reader opens first, so its store exists before the child starts
        child = Child(spec)
        try:
            run_every_operation(child, reader, lambda: open_memory(spec, "test-hash", 64))
        finally:
            child.close()


def test_real_model_reader_sees_another_instance(mem: Memory, embedder: Any) -> None:
    """The same with the real local model, on the ``mem`` fixture's store."""
    store: Any = mem.store
    if isinstance(store, SQLiteStore):
        other = Memory(store.path, embedder=embedder)
    else:
        section = {"url": store.settings.url, "collection_name": store.schema}
        other = Memory(
            config={"vector_store": {"provider": "postgres", "config": section}},
            embedder=embedder,
        )
    with other:
        kept = first_id(other.add("My favourite food is spicy ramen", user_id=USER))
        gone = first_id(other.add("I work night shifts as a nurse", user_id=USER))
        assert set(found(mem, "food")) == {kept, gone}
        other.update(kept, "My favourite food is sushi")
        other.purge(gone)
        assert found(mem, "food") == {kept: "My favourite food is sushi"}
        assert kept in keyword_hits(mem, "sushi")
        assert gone not in keyword_hits(mem, "nurse")


# -- the embedder binding after a reset elsewhere --------------------------------------------


@pytest.mark.parametrize("dim", [64, 32])
def test_warm_process_refuses_another_model_after_reset_elsewhere(
    backend: str, request: pytest.FixtureRequest, db_path: Path, dim: int
) -> None:
    spec = store_spec(backend, request, db_path)
    with open_memory(spec, "model-a", 64) as warm:
        first_id(warm.add("I like green tea", user_id=USER))
        assert found(warm)  # bound, searched, cached
        child = Child(spec, "model-b", dim)
        try:
            child("reset")
            b_id = first_id(child("add", "I like black coffee", user_id=USER))
        finally:
            child.close()
        with pytest.raises(EmbedderMismatchError):
            warm.add("I play the violin", user_id=USER)
        with pytest.raises(EmbedderMismatchError):
            warm.search("violin", user_id=USER)
        mid = b_id
        with pytest.raises(EmbedderMismatchError):
            warm.update(mid, "I like green coffee")
        # reading needs no embedder, and model-b's store holds only model-b's memory
        assert listing(warm) == {b_id: "I like black coffee"}
    with open_memory(spec, "model-b", dim) as fresh:
        assert found(fresh) == {b_id: "I like black coffee"}


def test_first_writer_after_a_reset_binds_its_model(
    backend: str, request: pytest.FixtureRequest, db_path: Path
) -> None:
    spec = store_spec(backend, request, db_path)
    with open_memory(spec, "model-a", 64) as warm, open_memory(spec, "model-a", 64) as resetter:
        warm.add("I like green tea", user_id=USER)
        resetter.reset()
        # the warm process writes first after the reset: its model is bound again
        kept = first_id(warm.add("I play the violin", user_id=USER))
        assert found(warm) == {kept: "I play the violin"}
    with open_memory(spec, "model-b", 64) as other, pytest.raises(EmbedderMismatchError):
        other.add("I like black coffee", user_id=USER)


# -- BM25: the lock is never swapped while held -------------------------------------------------


def _compacting_index() -> BM25Index:
    index = BM25Index()
    index.add(list(range(3000)), [["common", f"w{i}"] for i in range(3000)])
    return index


def test_bm25_compaction_keeps_its_lock() -> None:
    index = _compacting_index()
    lock = index._lock
    index.remove(list(range(1, 2000)))  # past the compaction threshold
    assert index._dead == 0  # it did compact
    assert index._lock is lock
    keys, _ = index.search(["common"], 5000)
    assert sorted(keys.tolist()) == [0, *range(2000, 3000)]


def test_bm25_search_waits_for_a_compaction_in_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    index = _compacting_index()
    inside, release = threading.Event(), threading.Event()
    real_add = BM25Index.add

    def paused_add(self: BM25Index, keys: Any, docs: Any) -> None:
        # the compaction's re-add: hold the index half rebuilt until released
        if threading.current_thread().name == "compactor":
            inside.set()
            release.wait(30)
        real_add(self, keys, docs)

    monkeypatch.setattr(BM25Index, "add", paused_add)
    compactor = threading.Thread(
        target=lambda: index.remove(list(range(1, 2000))), name="compactor"
    )
    compactor.start()
    assert inside.wait(30)
    result: list[list[int]] = []
    searcher = threading.Thread(
        target=lambda: result.append(sorted(index.search(["common"], 5000)[0].tolist()))
    )
    searcher.start()
    searcher.join(1.0)  # a correct index makes it wait for the compaction
    release.set()
    compactor.join(30)
    searcher.join(30)
    assert result == [[0, *range(2000, 3000)]]


# -- SQLite: a slow cold catch-up of one scope does not block another scope ---------------------


def test_sqlite_cold_catch_up_blocks_only_its_own_scope(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = HashEmbedder()
    with Memory(db_path, embedder=embedder) as writer, Memory(db_path, embedder=embedder) as m:
        writer.add("I like green tea", user_id="fast")
        writer.add("I like black coffee", user_id="slow")
        assert found(m, user="fast")  # warm for "fast"
        inside, release = threading.Event(), threading.Event()
        real = SQLiteStore._catch_up

        def slow_catch_up(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
            if "slow" in args:
                inside.set()
                release.wait(30)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(SQLiteStore, "_catch_up", slow_catch_up)
        slow_result: list[dict[str, str]] = []
        slow = threading.Thread(target=lambda: slow_result.append(found(m, user="slow")))
        slow.start()
        try:
            assert inside.wait(30)
            fast_result: list[dict[str, str]] = []
            fast = threading.Thread(target=lambda: fast_result.append(found(m, user="fast")))
            fast.start()
            fast.join(20)
            blocked = fast.is_alive()
        finally:
            release.set()
            slow.join(30)
        fast.join(30)
        assert not blocked, "a search of another scope waited for the slow catch-up"
        assert list(fast_result[0].values()) == ["I like green tea"]
        assert list(slow_result[0].values()) == ["I like black coffee"]


def test_sqlite_concurrent_catch_ups_of_one_scope_agree(db_path: Path) -> None:
    embedder = HashEmbedder()
    with Memory(db_path, embedder=embedder) as writer, Memory(db_path, embedder=embedder) as m:
        ids = {
            first_id(writer.add(f"note number {i} about topic {i}", user_id=USER))
            for i in range(40)
        }
        results: list[set[str]] = []
        threads = [threading.Thread(target=lambda: results.append(set(found(m)))) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [ids] * 6


# -- PostgreSQL: a connection broken at COMMIT ----------------------------------------------------


class CommitCutter:
    """A TCP proxy to PostgreSQL that can break the connection at the next COMMIT.

    ``arm("after")``: COMMIT reaches the server and is executed, but its reply
    never reaches the client (the outcome is unknown to the client, and
    committed). ``arm("before")``: the connection is cut instead of
    forwarding COMMIT (the server aborts the transaction).
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode: str | None = None
        self.cuts = 0
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: str) -> None:
        with self._lock:
            self.mode = mode

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._socks += [client, server]
            state = {"cut": False, "await_reply": False}
            threading.Thread(target=self._up, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, state), daemon=True).start()

    def _cut(self, *socks: socket.socket) -> None:
        for s in socks:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _up(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                return
            if not data:
                self._cut(client, server)
                return
            if b"COMMIT\x00" in data:
                with self._lock:
                    mode, self.mode = self.mode, None
                if mode == "before":
                    self.cuts += 1
                    self._cut(client, server)
                    return
                if mode == "after":
                    state["await_reply"] = True
            try:
                server.sendall(data)
            except OSError:
                return

    def _down(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        while True:
            try:
                data = server.recv(65536)
            except OSError:
                return
            if not data:
                self._cut(client, server)
                return
            if state["await_reply"] and b"COMMIT\x00" in data:
                # the server has committed; the client never hears of it
                self.cuts += 1
                self._cut(client, server)
                return
            try:
                client.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        self._cut(*self._socks)


@contextmanager
def through_cutter(pg_config: dict[str, Any]) -> Iterator[tuple[CommitCutter, dict[str, Any]]]:
    info = psycopg.conninfo.conninfo_to_dict(pg_config["url"])
    cutter = CommitCutter(str(info["host"]), int(info["port"]))
    info["port"] = str(cutter.port)
    try:
        yield cutter, {**pg_config, "url": psycopg.conninfo.make_conninfo(**info)}
    finally:
        cutter.close()


def _pg(config: dict[str, Any]) -> Memory:
    return Memory(
        config={"vector_store": {"provider": "postgres", "config": {**config, "max_size": 1}}},
        embedder=HashEmbedder(),
    )


@pytest.mark.parametrize("cut", ["after", "before"])
def test_postgres_connection_lost_at_commit_is_not_applied_twice(
    pg_config: dict[str, Any], cut: str
) -> None:
    with through_cutter(pg_config) as (cutter, config), _pg(config) as m, _pg(pg_config) as check:
        mid = first_id(m.add("I like green tea", user_id=USER))
        cutter.arm(cut)
        try:
            m.update(mid, "I like black coffee")
        except Exception as exc:  # allowed only as the documented "outcome unknown"
            assert "outcome" in str(exc) and "unknown" in str(exc), exc
        assert cutter.cuts == 1
        events = [h["event"] for h in check.history(mid)]
        assert events.count("UPDATE") == 1, events
        assert check.get(mid)["memory"] == "I like black coffee"  # type: ignore[index]


@pytest.mark.parametrize("cut", ["after", "before"])
def test_postgres_add_with_connection_lost_at_commit_reports_add(
    pg_config: dict[str, Any], cut: str
) -> None:
    with through_cutter(pg_config) as (cutter, config), _pg(config) as m, _pg(pg_config) as check:
        m.add("I like green tea", user_id=USER)
        cutter.arm(cut)
        out = m.add([{"role": "user", "content": "I play the violin"}], user_id=USER)
        assert cutter.cuts == 1
        # the caller is told ADD (not NONE for its own write), and each message is stored once
        assert [r["event"] for r in out["results"]] == ["ADD"]
        assert sorted(listing(check).values()) == ["I like green tea", "I play the violin"]
        s = '"' + pg_config["collection_name"] + '"'
        with psycopg.connect(pg_config["url"]) as con:
            row = con.execute(f"SELECT count(*) FROM {s}.messages").fetchone()
        assert row is not None and row[0] == 2  # green tea and violin, once each


def test_postgres_async_connection_lost_at_commit_is_not_applied_twice(
    pg_config: dict[str, Any],
) -> None:
    import asyncio

    from engramdb import AsyncMemory

    async def go() -> None:
        with through_cutter(pg_config) as (cutter, config):
            section = {"provider": "postgres", "config": {**config, "max_size": 1}}
            m = AsyncMemory(config={"vector_store": section}, embedder=HashEmbedder())
            try:
                mid = first_id(await m.add("I like green tea", user_id=USER))
                cutter.arm("after")
                try:
                    await m.update(mid, "I like black coffee")
                except Exception as exc:
                    assert "outcome" in str(exc) and "unknown" in str(exc), exc
                assert cutter.cuts == 1
                events = [h["event"] for h in await m.history(mid)]
                assert events.count("UPDATE") == 1, events
            finally:
                await m.close()

    asyncio.run(go())


# -- PostgreSQL: a long transaction elsewhere in the cluster --------------------------------------


def _rows_read(m: Memory) -> int:
    return int(m.store.flows.caught_up_rows)  # type: ignore[attr-defined]


def test_postgres_long_transaction_does_not_make_searches_reread(
    pg_config: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # ENGRAM_LONG_TX_CHANGES=3000 for the figure in docs/ARCHITECTURE.md
    n = int(os.environ.get("ENGRAM_LONG_TX_CHANGES", "300"))
    s = '"' + pg_config["collection_name"] + '"'
    # The per-process keyword cache's catch-up (the ranking before schema version 5).
    cached = {**pg_config, "keyword_index": "process"}
    with _pg(cached) as writer, _pg(cached) as reader:
        writer.add("warm up the store", user_id=USER)
        assert found(reader)
        with psycopg.connect(pg_config["url"]) as long_tx:
            # a transaction with an id, open for the whole test: the cluster's xmin stays
            long_tx.execute("SELECT pg_current_xact_id()")
            for i in range(n):
                writer.add(f"note {i} about item {i}", user_id=USER)
            before = _rows_read(reader)
            assert len(found(reader)) == min(n + 1, 1000)  # top_k's bound
            first = _rows_read(reader) - before
            reads = []
            started = time.perf_counter()
            for _ in range(5):
                mark = _rows_read(reader)
                assert len(found(reader)) == min(n + 1, 1000)  # top_k's bound
                reads.append(_rows_read(reader) - mark)
            per_search_ms = (time.perf_counter() - started) / 5 * 1000
            with psycopg.connect(pg_config["url"]) as con:
                # what a catch-up from the oldest running xid (the old rule) reads
                row = con.execute(
                    f"SELECT count(*) FROM {s}.memories WHERE user_id = %s AND txid >= "
                    "pg_snapshot_xmin(pg_current_snapshot())",
                    (USER,),
                ).fetchone()
            old_rule = int(row[0]) if row else -1
            # a write while the long transaction is still open is seen once
            writer.add("one more note", user_id=USER)
            mark = _rows_read(reader)
            assert len(found(reader)) == min(n + 2, 1000)
            after_write = _rows_read(reader) - mark
            long_tx.rollback()
    with capsys.disabled():
        print(
            f"\nlong transaction open, {n} changes since it began: catch-up rows read by the "
            f"first search {first}, by the next five {reads} ({per_search_ms:.1f} ms a search), "
            f"after one more write {after_write}; reading from the oldest running xid would "
            f"read {old_rule} rows on every search"
        )
    assert first == n
    assert reads == [0] * 5
    assert after_write == 1


def test_postgres_changes_committed_by_a_transaction_in_flight_are_not_missed(
    pg_config: dict[str, Any],
) -> None:
    with _pg(pg_config) as writer, _pg(pg_config) as reader:
        writer.add("warm up the store", user_id=USER)
        assert found(reader)
        s = '"' + pg_config["collection_name"] + '"'
        mid = first_id(writer.add("I like green tea", user_id=USER))
        with psycopg.connect(pg_config["url"]) as slow:
            # a writer in flight while the reader catches up, committing afterwards
            slow.execute(
                f"UPDATE {s}.memories SET terms = 'black coffee', txid = pg_current_xact_id() "
                "WHERE id = %s",
                (mid,),
            )
            assert keyword_hits(reader, "tea") == {mid}
            slow.commit()
        assert keyword_hits(reader, "coffee") == {mid}
        assert keyword_hits(reader, "tea") == set()


# -- the row memo: a warm search returns what a cold one does, field by field ---------------


def _results(m: Memory, query: str = "anything at all") -> list[dict[str, Any]]:
    """Every field of every hit but the score (which a cold cache computes alike)."""
    hits = m.search(query, user_id=USER, top_k=1000)["results"]
    return sorted(({k: v for k, v in h.items() if k != "score"} for h in hits), key=str)


def test_warm_search_results_match_a_cold_reader_after_every_change(
    backend: str, request: pytest.FixtureRequest, db_path: Path
) -> None:
    """Searches keep the rows they read (SQLite's row memo); no change may leave one stale.

    After each change by the reader itself, by another instance and by
    another OS process — metadata only, a session attached by a repeat, a
    link from a new memory, a delete, an expiry passing with no write at all
    — the warm reader's results equal, field by field, a cold reader's.
    Changing a returned result's metadata changes nothing stored or cached.
    """
    spec = store_spec(backend, request, db_path)
    with open_memory(spec, "test-hash", 64) as reader, open_memory(spec, "test-hash", 64) as other:
        child = Child(spec)
        try:

            def agree() -> None:
                warm = _results(reader)
                _results(reader)  # a second warm search reads the memo, if any
                with open_memory(spec, "test-hash", 64) as cold:
                    assert _results(reader) == warm == _results(cold)

            a = first_id(reader.add("I like green tea", user_id=USER, infer=False))
            b = first_id(reader.add("My sister lives in Lisbon", user_id=USER, infer=False))
            soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
            c = first_id(
                reader.add(
                    "The parking pass is valid today",
                    user_id=USER,
                    infer=False,
                    expiration_date=soon,
                )
            )
            agree()
            # A caller changing what search returned changes nothing kept.
            hit = next(h for h in reader.search("tea", user_id=USER)["results"] if h["id"] == a)
            hit["metadata"]["tampered"] = True
            hit["memory"] = "tampered"
            agree()
            assert all("tampered" not in h["metadata"] for h in _results(reader))
            # Metadata holding a list or an object: its insides are the caller's too.
            reader.update(b, metadata={"tags": ["family"], "where": {"city": "Lisbon"}})
            agree()
            for _ in range(2):  # the second from the memo
                hit = next(h for h in reader.search("sister", user_id=USER)["results"])
                assert hit["metadata"] == {"tags": ["family"], "where": {"city": "Lisbon"}}
                hit["metadata"]["tags"].append("tampered")
                hit["metadata"]["where"]["city"] = "tampered"
            agree()

            other.update(a, metadata={"source": "other instance"})
            agree()
            assert next(h for h in _results(reader) if h["id"] == a)["metadata"] == {
                "source": "other instance"
            }
            child("update", b, metadata={"source": "child process"})
            agree()
            # A repeat in a new run attaches that run to the stored memory.
            child("add", "My sister lives in Lisbon", user_id=USER, run_id="trip", infer=False)
            agree()
            assert "trip" in next(h for h in _results(reader) if h["id"] == b)["run_ids"]
            # A new memory linked to an old one changes the old one's links.
            d = first_id(
                other.add(
                    "My sister moved to Porto",
                    user_id=USER,
                    infer=False,
                    links={b: "updates"},
                )
            )
            agree()
            assert d in next(h for h in _results(reader) if h["id"] == b)["linked_memory_ids"]
            reader.update(a, "I like black coffee")
            agree()
            child("delete", d)
            agree()
            assert d not in {h["id"] for h in _results(reader)}
            # Expiry passes without any write: the kept row must not outlive it.
            assert c in {h["id"] for h in _results(reader)}
            time.sleep(max(0.0, (datetime.fromisoformat(soon) - datetime.now(UTC)).total_seconds()))
            time.sleep(0.2)
            agree()
            assert c not in {h["id"] for h in _results(reader)}
        finally:
            child.close()


def test_sqlite_cold_load_in_chunks_equals_one_read(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold cache is filled chunk by chunk; the result is the one-read cache's, even
    after a failure part way (the next search reads the missing rows again)."""
    from engramdb.stores.sqlite import _base, _search

    spec = str(db_path)
    with open_memory(spec, "test-hash", 64) as writer:
        ids = [
            first_id(writer.add(f"note {i}: tea and {PROBES[i % 8]} day {i}", user_id=USER))
            for i in range(60)
        ]
        writer.delete(ids[3])
        writer.update(ids[5], "note five: coffee instead")
    with open_memory(spec, "test-hash", 64) as whole:
        expected = {w: _results(whole, w) for w in ("tea", "coffee", "rex", "day 7")}
    assert len(expected["tea"]) == 59

    monkeypatch.setattr(_search, "_CATCH_UP_ROWS", 7)
    with open_memory(spec, "test-hash", 64) as chunked:
        assert {w: _results(chunked, w) for w in expected} == expected

    calls = {"n": 0}
    apply = _base._Cache.apply

    def failing(self: Any, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise sqlite3.OperationalError("disk I/O error (injected)")
        apply(self, *args, **kwargs)

    monkeypatch.setattr(_base._Cache, "apply", failing)
    with open_memory(spec, "test-hash", 64) as flaky:
        with pytest.raises(Exception, match="injected"):
            flaky.search("tea", user_id=USER)
        assert {w: _results(flaky, w) for w in expected} == expected


def test_entity_degrees_follow_every_write(
    backend: str, request: pytest.FixtureRequest, db_path: Path
) -> None:
    """Entity degrees a search counted are kept until the next write (SQLite's
    DegreeMemo): after writes by another instance and another process that change how
    many memories name an entity, a warm search's entity parts equal a cold one's."""
    spec = store_spec(backend, request, db_path)

    def entity_parts(m: Memory) -> dict[str, float]:
        hits = m.search("What did Caroline paint?", user_id=USER, top_k=100, explain=True)
        return {h["id"]: h["score_details"]["entity"] for h in hits["results"]}

    with open_memory(spec, "test-hash", 64) as reader, open_memory(spec, "test-hash", 64) as other:
        child = Child(spec)
        try:
            for i in range(3):
                reader.add(f"Caroline painted a lake, picture {i}", user_id=USER, infer=False)
            reader.add("Melanie went camping", user_id=USER, infer=False)
            # Two people's facts: Caroline's do not outnumber Melanie's two to one, so she
            # is not taken for the store's own person (owner.py), whose name would leave
            # the entity channel.
            reader.add("Melanie baked bread", user_id=USER, infer=False)

            def agree() -> dict[str, float]:
                warm = entity_parts(reader)
                assert entity_parts(reader) == warm  # the second search reads the memo
                with open_memory(spec, "test-hash", 64) as cold:
                    assert entity_parts(cold) == warm
                return warm

            first = agree()
            other.add("Caroline painted a sunrise", user_id=USER, infer=False)
            second = agree()
            assert max(second.values()) < max(first.values())  # a commoner entity
            for i in range(3):
                child("add", f"Caroline went to a support group {i}", user_id=USER, infer=False)
            agree()
            victim = next(iter(first))
            child("delete", victim)
            after = agree()
            assert victim not in after
        finally:
            child.close()
