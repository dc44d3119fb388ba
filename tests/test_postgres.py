"""What only the PostgreSQL store has: many writers, migrations, native async, selection.

The behaviours every store shares are in test_store_contract.py (and the
Memory API suite runs on both backends through the ``mem`` fixture).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb import (
    AsyncMemory,
    ConfigError,
    Memory,
    SchemaVersionError,
    StoreError,
    ValidationError,
)
from engramdb.core.filters import parse_filters
from engramdb.core.filters_pg import compile_postgres
from engramdb.embedders import LocalEmbedder
from engramdb.stores import STORE_URL_ENV, make_store
from engramdb.stores.base import NewMemory, Scope
from engramdb.stores.postgres import AsyncPostgresStore, PostgresStore
from engramdb.stores.postgres.schema import LATEST
from pg import PgServer
from test_filters import Row, filter_dicts, pg_load, pg_rows, ref_rows, rows
from test_filters import pg_db as pg_db  # the fixture: the table the filters run on

WRITER = str(Path(__file__).with_name("_writer.py"))


def q(url: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(url) as con:
        row = con.execute(sql, params).fetchone()
        assert row is not None
        return row[0]


def check_consistent(config: dict[str, Any]) -> int:
    """Every memory has its vector, terms and ADD event; versions and deletes match history."""
    url, s = config["url"], '"' + config["collection_name"] + '"'
    n = int(q(url, f"SELECT count(*) FROM {s}.memories"))
    assert q(url, f"SELECT count(*) FROM {s}.memories WHERE embedding IS NULL OR terms = ''") == 0
    assert (
        q(
            url,
            f"SELECT count(*) FROM {s}.memories m WHERE NOT EXISTS (SELECT 1 FROM {s}.history h "
            "WHERE h.memory_id = m.id AND h.event = 'ADD')",
        )
        == 0
    )
    assert (
        q(
            url,
            f"SELECT count(*) FROM {s}.memories m WHERE m.version != "
            f"(SELECT max(version) FROM {s}.history h WHERE h.memory_id = m.id)",
        )
        == 0
    )
    assert (
        q(
            url,
            f"SELECT count(*) FROM (SELECT owner, hash FROM {s}.memories WHERE deleted_at IS "
            "NULL GROUP BY 1, 2 HAVING count(*) > 1) d",
        )
        == 0
    )
    assert (
        q(
            url,
            f"SELECT count(*) FROM {s}.history h WHERE NOT EXISTS "
            f"(SELECT 1 FROM {s}.memories m WHERE m.id = h.memory_id)",
        )
        == 0
    )
    return n


# -- many writers ------------------------------------------------------------------------------


@pytest.mark.slow
def test_four_processes_add_to_one_database(
    pg_config: dict[str, Any], embedder: LocalEmbedder
) -> None:
    section = {"provider": "postgres", "config": pg_config}
    Memory(config={"vector_store": section}, embedder=embedder).close()  # the race is on writes
    procs = [
        subprocess.Popen(
            [sys.executable, WRITER, json.dumps(section), "concurrent", str(p), "250"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for p in range(4)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()
        # no deadlock, no serialisation failure: nothing had to be retried
        assert b"retrying" not in err, err.decode()
        outputs.append(json.loads(out))
    results = [r for out in outputs for r in out]
    assert len(results) == 1000
    by_text: dict[str, set[str]] = {}
    for r in results:
        by_text.setdefault(r["memory"], set()).add(r["id"])
    assert len(by_text) < 1000  # the processes did repeat each other
    assert all(len(ids) == 1 for ids in by_text.values())
    assert check_consistent(pg_config) == len(by_text)
    with Memory(config={"vector_store": section}, embedder=embedder) as m:
        stored = m.get_all(user_id="shared", top_k=10_000)["results"]
        assert sorted(i["memory"] for i in stored) == sorted(by_text)
        # every process that saw a text is attached to it: no session link was lost
        for item in stored:
            seen_by = {
                f"proc{p}" for p, out in enumerate(outputs) for r in out if r["id"] == item["id"]
            }
            assert set(item.get("run_ids", [item["run_id"]])) == seen_by


def test_threads_adding_overlapping_batches_never_deadlock(
    pg_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store("postgres", pg_config, Path("unused"))
    store.bind_embedder("m", 4)
    pool = [f"fact {i}" for i in range(30)]
    errors: list[BaseException] = []
    ids: dict[str, set[str]] = {}
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for n in range(25):
                texts = rng.sample(pool, 6)  # overlapping batches, in random orders
                batch = [
                    NewMemory(
                        id=f"{seed}-{n}-{j}",
                        text=t,
                        hash=t,
                        embedding=np.full(4, 0.5, np.float32),
                        terms=t,
                        entities=[(w, w, "THING") for w in rng.sample(["a", "b", "c", "d"], 3)],
                        links=[f"{seed}-{n - 1}-0"] if n else [],
                    )
                    for j, t in enumerate(texts)
                ]
                out = store.add(batch, [], Scope("u", run_id=f"t{seed}"), "t")
                with lock:
                    for o in out:
                        ids.setdefault(o.memory, set()).add(o.id)
        except BaseException as exc:
            errors.append(exc)

    with caplog.at_level(logging.WARNING, logger="engramdb.store"):
        threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors
    assert "retrying" not in caplog.text
    assert all(len(v) == 1 for v in ids.values())
    assert check_consistent(pg_config) == len(ids)
    store.close()


# -- schema and migrations ----------------------------------------------------------------------


def test_concurrent_first_opens_migrate_once(pg_server: PgServer) -> None:
    with pg_server.schema() as config:
        errors: list[BaseException] = []

        def open_it() -> None:
            try:
                make_store("pgvector", config, Path("unused")).close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        s = '"' + config["collection_name"] + '"'
        version = q(config["url"], f"SELECT value FROM {s}.meta WHERE key = 'schema_version'")
        assert version == str(LATEST)
        # a schema written by a newer engramdb is refused
        with psycopg.connect(config["url"], autocommit=True) as con:
            con.execute(f"UPDATE {s}.meta SET value = '99' WHERE key = 'schema_version'")
        with pytest.raises(SchemaVersionError, match="newer"):
            make_store("postgres", config, Path("unused"))


def test_nul_characters_are_refused_not_stored(pg_config: dict[str, Any]) -> None:
    store = make_store("postgres", pg_config, Path("unused"))
    store.bind_embedder("m", 4)
    bad = NewMemory("x", "a\x00b", "h", np.full(4, 0.5, np.float32), "a b")
    with pytest.raises(ValidationError, match="NUL"):
        store.add([bad], [], Scope("u"), "t")
    assert store.count() == 0
    store.close()


# -- selection ------------------------------------------------------------------------------------


def test_provider_names_and_mem0_keys(pg_server: PgServer, pg_config: dict[str, Any]) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_server.url)
    mem0_style = {
        "dbname": info["dbname"],
        "user": info["user"],
        "host": info["host"],
        "port": int(str(info["port"])),
        "collection_name": pg_config["collection_name"],
        "embedding_model_dims": 384,
        "hnsw": True,
        "max_size": 3,
    }
    for provider, config in (
        ("pgvector", mem0_style),
        ("postgres", {"connection_string": pg_server.url, "schema": pg_config["collection_name"]}),
        ("postgresql", pg_config),
    ):
        store = make_store(provider, config, Path("unused"))
        assert isinstance(store, PostgresStore)
        assert store.schema == pg_config["collection_name"]
        store.close()
    with pytest.raises(ConfigError, match="unknown"):
        make_store("pgvector", {"url": pg_server.url, "tabel": "x"}, Path("unused"))
    with pytest.raises(ConfigError, match="needs a url"):
        make_store("pgvector", {"collection_name": "x"}, Path("unused"))
    with pytest.raises(ConfigError, match="not both"):
        make_store(
            "postgres", {"url": pg_server.url, "schema": "a", "collection_name": "b"}, Path()
        )


def test_engram_store_url_selects_postgres_when_nothing_is_configured(
    pg_server: PgServer,
    pg_config: dict[str, Any],
    embedder: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv(STORE_URL_ENV, pg_server.url)
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))
    with Memory(embedder=embedder) as m:
        assert isinstance(m.store, PostgresStore) and m.store.schema == "engramdb"
    with psycopg.connect(pg_server.url, autocommit=True) as con:
        con.execute('DROP SCHEMA "engramdb" CASCADE')
    # an explicit store (or path) wins over the variable
    with Memory(tmp_path / "x.db", embedder=embedder) as m:
        assert not isinstance(m.store, PostgresStore)
    monkeypatch.setenv(STORE_URL_ENV, "mysql://nope")
    with pytest.raises(ConfigError, match="postgresql://"):
        Memory(embedder=embedder)


# -- native async ----------------------------------------------------------------------------------


def test_async_memory_awaits_the_native_store(
    pg_config: dict[str, Any], embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    to_thread = asyncio.to_thread
    threaded: list[str] = []

    async def spy(fn: Any, *args: Any, **kwargs: Any) -> Any:
        threaded.append(getattr(fn, "__qualname__", repr(fn)))
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", spy)

    async def main() -> None:
        config = {"vector_store": {"provider": "postgres", "config": pg_config}}
        async with AsyncMemory(config=config, embedder=embedder) as am:
            assert isinstance(am._native_store(), AsyncPostgresStore)
            outs = await asyncio.gather(
                *(am.add(f"async fact {i}", user_id="u", run_id=f"r{i % 3}") for i in range(8))
            )
            assert all(o["results"][0]["event"] == "ADD" for o in outs)
            again = await am.add("async fact 1", user_id="u", run_id="r9")
            assert again["results"][0]["event"] == "NONE"
            hits = await am.search("async fact 3", user_id="u", top_k=3)
            assert hits["results"][0]["memory"] == "async fact 3"
            listed = await am.get_all(user_id="u", run_id="r9")
            assert [r["memory"] for r in listed["results"]] == ["async fact 1"]
            mid = hits["results"][0]["id"]
            await am.update(mid, "async fact three")
            await am.delete(mid)
            await am.restore(mid)
            assert [e["event"] for e in await am.history(mid)] == [
                "ADD",
                "UPDATE",
                "DELETE",
                "RESTORE",
            ]
            await am.reset()
            assert (await am.get_all(user_id="u"))["results"] == []

    asyncio.run(main())

    # an asyncio pool belongs to one event loop: another loop is told so
    async def other() -> AsyncMemory:
        am = AsyncMemory(
            config={"vector_store": {"provider": "postgres", "config": pg_config}},
            embedder=embedder,
        )
        await am.add("loop one", user_id="w")
        return am

    am = asyncio.run(other())
    with pytest.raises(StoreError, match="another event loop"):
        asyncio.run(am.get_all(user_id="w"))
    am.store.close()
    # the embedder ran in threads; no store call did
    assert threaded and not any("Store" in name for name in threaded), threaded


# -- the filter compiler against the reference --------------------------------------------


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.lists(rows(), max_size=10), filters=st.lists(filter_dicts, min_size=1, max_size=4))
def test_postgres_selects_what_the_reference_selects(
    pg_db: psycopg.Connection[Any],
    data: list[Row],
    filters: list[dict[str, Any]],
) -> None:
    pg_load(pg_db, data)
    everything = set(range(1, len(data) + 1))
    for filter_dict in filters:
        node = parse_filters(filter_dict)
        assert node is not None
        selected = pg_rows(pg_db, node)
        assert selected == ref_rows(data, node), (filter_dict, node, compile_postgres(node))
        assert pg_rows(pg_db, node, negate=True) == everything - selected
