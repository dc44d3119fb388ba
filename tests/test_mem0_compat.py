"""mem0's documented call patterns, run against engramdb: arguments, errors, result shapes.

Each test is a pattern from mem0's OSS documentation (mem0ai 2.x: quickstart,
memory operations, expiration, reranking, history) written as a mem0 user
writes it, with only the import changed. Where engramdb keeps a behaviour
of its own on purpose, docs/migrating-from-mem0.md says so and the test
checks our behaviour by name.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from engramdb import Memory
from engramdb.config import parse_config
from engramdb.embedders import LocalEmbedder
from engramdb.errors import ConfigError
from engramdb.stores.sqlite import SQLiteStore


def test_unknown_ids_raise_value_error_as_mem0_documents(mem: Memory) -> None:
    # mem0: update()/delete() of an unknown id raise ValueError; code catches that.
    for call in (lambda: mem.update("no-such-id", text="x"), lambda: mem.delete("no-such-id")):
        with pytest.raises(ValueError, match="not found"):
            call()
        with pytest.raises(KeyError):  # and still a KeyError, as before
            call()


def test_add_without_any_id_is_a_value_error(mem: Memory) -> None:
    with pytest.raises(ValueError):
        mem.add("I like tea")


def test_history_of_an_unknown_id_is_an_empty_list(mem: Memory) -> None:
    assert mem.history("no-such-id") == []


def test_verbatim_add_results_carry_actor_id_and_role(mem: Memory) -> None:
    out = mem.add(
        [
            {"role": "user", "content": "I live in Lyon", "name": "alice"},
            {"role": "assistant", "content": "Lyon is lovely in spring"},
        ],
        user_id="alice",
        infer=False,
    )
    assert [(r["event"], r["actor_id"], r["role"]) for r in out["results"]] == [
        ("ADD", "alice", "user"),
        ("ADD", None, "assistant"),
    ]


def test_get_and_get_all_items_have_mem0_keys(mem: Memory) -> None:
    mid = mem.add("I like green tea", user_id="u", infer=False)["results"][0]["id"]
    got = mem.get(mid)
    assert got is not None
    assert {"id", "memory", "hash", "metadata", "score", "created_at", "updated_at"} <= set(got)
    assert got["score"] is None
    listed = mem.get_all(filters={"user_id": "u"})["results"]
    assert [r["id"] for r in listed] == [mid] and listed[0]["score"] is None


def test_history_items_have_mem0_keys(mem: Memory) -> None:
    mid = mem.add("I like green tea", user_id="u", infer=False)["results"][0]["id"]
    mem.update(mid, text="I like black tea")
    mem.delete(mid)
    events = mem.history(mid)
    assert [e["event"] for e in events] == ["ADD", "UPDATE", "DELETE"]
    for e in events:
        assert {
            "id",
            "memory_id",
            "old_memory",
            "new_memory",
            "event",
            "created_at",
            "updated_at",
            "is_deleted",
            "actor_id",
            "role",
        } <= set(e)
        assert isinstance(e["id"], str)
    assert [e["is_deleted"] for e in events] == [False, False, True]
    assert events[0]["updated_at"] is None and events[1]["updated_at"] is not None
    assert events[1]["old_memory"] == "I like green tea"
    assert events[1]["new_memory"] == "I like black tea"
    assert {e["role"] for e in events} == {"user"}


def test_search_explain_gives_score_details(mem: Memory) -> None:
    mem.add("I like green tea", user_id="u", infer=False)
    hit = mem.search("green tea", filters={"user_id": "u"}, explain=True)["results"][0]
    assert {"semantic", "fusion"} <= set(hit["score_details"])
    plain = mem.search("green tea", filters={"user_id": "u"})["results"][0]
    assert "score_details" not in plain


def test_search_accepts_rerank_both_ways(mem: Memory) -> None:
    mem.add("I like green tea", user_id="u", infer=False)
    mem.add("My cat is called Tom", user_id="u", infer=False)
    default = mem.search("tea", filters={"user_id": "u"})["results"]
    # No reranker is configured: rerank=True keeps the fused order (as mem0 does).
    for flag in (True, False):
        again = mem.search("tea", filters={"user_id": "u"}, rerank=flag)["results"]
        assert [r["id"] for r in again] == [r["id"] for r in default]


def test_expired_memories_are_hidden_unless_show_expired(mem: Memory) -> None:
    gone = mem.add(
        "My trial plan ends soon", user_id="u", infer=False, expiration_date="2001-01-31"
    )["results"][0]["id"]
    kept = mem.add("My plan is the yearly one", user_id="u", infer=False)["results"][0]["id"]
    scope = {"user_id": "u"}

    def ids(results: dict[str, object]) -> set[str]:
        return {r["id"] for r in results["results"]}  # type: ignore[attr-defined,index]

    assert ids(mem.get_all(filters=scope)) == {kept}
    assert ids(mem.get_all(filters=scope, show_expired=True)) == {kept, gone}
    assert ids(mem.search("trial plan", filters=scope)) == {kept}
    assert gone in ids(mem.search("trial plan", filters=scope, show_expired=True))
    # get() by id always returns it, with mem0's expiration_date (inclusive day)
    got = mem.get(gone)
    assert got is not None and got["expiration_date"] == "2001-01-31"
    # deleted memories stay hidden even with show_expired
    mem.delete(gone)
    assert ids(mem.get_all(filters=scope, show_expired=True)) == {kept}


def test_a_date_only_expiration_is_shown_through_that_day(mem: Memory) -> None:
    mid = mem.add("Offer valid this week", user_id="u", infer=False, expiration_date="2099-03-31")
    got = mem.get(mid["results"][0]["id"])
    assert got is not None
    assert got["expires_at"] == "2099-04-01T00:00:00.000000+00:00"
    assert got["expiration_date"] == "2099-03-31"


# -- config dicts ---------------------------------------------------------------------------


def test_mem0_default_style_config_loads_on_the_embedded_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = {
        "vector_store": {
            "provider": "qdrant",
            "config": {"collection_name": "test", "path": str(tmp_path / "qdrant")},
        },
        "embedder": {"provider": "huggingface", "config": {"model": "multi-qa-MiniLM-L6-cos-v1"}},
        "version": "v1.1",
    }
    with caplog.at_level(logging.WARNING, logger="engramdb"):
        m = Memory.from_config(config)
    try:
        assert isinstance(m.store, SQLiteStore)
        assert m.store.path == tmp_path / "qdrant" / "test.engramdb.sqlite"
        assert m.embedder.model == LocalEmbedder().model
        mid = m.add("I like green tea", user_id="u", infer=False)["results"][0]["id"]
        assert m.search("tea", filters={"user_id": "u"})["results"][0]["id"] == mid
    finally:
        m.close()
    said = caplog.text
    assert "qdrant" in said and "huggingface" in said  # each substitution is told


@pytest.mark.parametrize("provider", ["faiss", "chroma"])
def test_other_file_stores_of_mem0_become_the_embedded_store(tmp_path: Path, provider: str) -> None:
    config = {"vector_store": {"provider": provider, "config": {"path": str(tmp_path)}}}
    m = Memory.from_config(config)
    try:
        assert m.store.path == tmp_path / "mem0.engramdb.sqlite"  # type: ignore[attr-defined]
    finally:
        m.close()


@pytest.mark.parametrize(
    "options",
    [{"host": "localhost", "port": 6333}, {"url": "https://qdrant.example"}, {"api_key": "k"}],
)
def test_a_mem0_store_on_a_server_is_refused_not_replaced(options: dict[str, object]) -> None:
    config = {"vector_store": {"provider": "qdrant", "config": {"collection_name": "c", **options}}}
    with pytest.raises(ConfigError, match="pgvector"):
        Memory.from_config(config)


def test_mem0_reranker_blocks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    base = {"vector_store": {"provider": "sqlite", "config": {"path": str(tmp_path / "a.db")}}}
    cfg = parse_config({**base, "reranker": {"provider": "llm_reranker"}}, None)
    assert cfg.retrieval.rerank is not None
    with caplog.at_level(logging.WARNING, logger="engramdb"):
        dropped = parse_config({**base, "reranker": {"provider": "cohere"}}, None)
    assert dropped.retrieval.rerank is None and "cohere" in caplog.text


def test_huggingface_with_a_tei_server_is_the_openai_compatible_embedder() -> None:
    cfg = parse_config(
        {
            "embedder": {
                "provider": "huggingface",
                "config": {"huggingface_base_url": "http://127.0.0.1:8080/v1", "model": "bge"},
            }
        },
        None,
    )
    assert cfg.embedder.provider == "openai"
    assert cfg.embedder.config == {"base_url": "http://127.0.0.1:8080/v1", "model": "bge"}


# -- update(expiration_date=): reversible like every change ----------------------------------


def test_update_sets_and_clears_the_expiry_and_restore_brings_it_back(mem: Memory) -> None:
    mid = mem.add("My trial plan ends soon", user_id="u", infer=False)["results"][0]["id"]
    scope = {"user_id": "u"}
    mem.update(mid, expiration_date="2001-01-31")  # mem0's call: only the expiry
    assert mem.get_all(filters=scope)["results"] == []
    got = mem.get(mid)
    assert got is not None and got["expiration_date"] == "2001-01-31"
    assert got["memory"] == "My trial plan ends soon"
    events = mem.history(mid)
    assert [e["event"] for e in events] == ["ADD", "UPDATE"]
    assert (events[1]["old_expires_at"], events[1]["new_expires_at"]) == (
        None,
        "2001-02-01T00:00:00.000000+00:00",
    )
    mem.restore(mid)  # back to version 1: no expiry
    assert [r["id"] for r in mem.get_all(filters=scope)["results"]] == [mid]
    mem.update(mid, text="My trial plan ends in May", expiration_date="2099-05-31")
    mem.update(mid, expiration_date=None)  # None clears it
    cleared = mem.get(mid)
    assert cleared is not None and cleared["expiration_date"] is None
    mem.restore(mid, version=4)  # v1 add, v2 expiry, v3 restore, v4 text + expiry, v5 clear
    again = mem.get(mid)
    assert again is not None and again["expiration_date"] == "2099-05-31"
    assert again["memory"] == "My trial plan ends in May"
    with pytest.raises(ValueError, match="needs text, metadata and/or expiration_date"):
        mem.update(mid)


def test_schema_v2_history_gets_the_memorys_expiry(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Before v3 an expiry could not change after the add: every event had the memory's.
    from engramdb.stores import make_store
    from engramdb.stores.postgres.schema import BOOTSTRAP as PG_BOOTSTRAP
    from engramdb.stores.postgres.schema import MIGRATIONS as PG_MIGRATIONS
    from engramdb.stores.sqlite._base import _split_sql
    from engramdb.stores.sqlite.schema import MIGRATIONS as SQLITE_MIGRATIONS

    expiry = "2030-01-01T00:00:00.000000+00:00"
    stamp = "2024-01-01T00:00:00.000000+00:00"
    history = [
        ("m1", "ADD", 1, None, "old text", "api", stamp),
        ("m1", "UPDATE", 2, "old text", "new text", "api", stamp),
    ]
    if backend == "sqlite":
        import sqlite3

        path = tmp_path / "v2.db"
        con = sqlite3.connect(path)
        for migration in SQLITE_MIGRATIONS[:2]:
            for statement in _split_sql(migration):
                con.execute(statement)
        con.execute("PRAGMA user_version = 2")
        con.execute(
            "INSERT INTO memories(id, text, hash, owner, partition, user_id, created_at, "
            "updated_at, expires_at, version, seq) VALUES ('m1', 'new text', 'h', 'u', 'u1:u', "
            "'u', ?, ?, ?, 2, 1)",
            (stamp, stamp, expiry),
        )
        con.executemany(
            "INSERT INTO history(memory_id, event, version, old_memory, new_memory, actor, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            history,
        )
        con.commit()
        con.close()
        store = make_store("sqlite", {"path": str(path)}, tmp_path)
    else:
        import psycopg

        config = request.getfixturevalue("pg_config")
        schema = f'"{config["collection_name"]}"'
        with psycopg.connect(config["url"], autocommit=True) as pg:
            pg.execute(PG_BOOTSTRAP.format(s=schema))
            for migration in PG_MIGRATIONS[:2]:
                pg.execute(migration.format(s=schema))
            pg.execute(f"INSERT INTO {schema}.meta VALUES ('schema_version', '2')")
            pg.execute(
                f"INSERT INTO {schema}.memories (id, text, hash, owner, partition, user_id, "
                "created_at, updated_at, expires_at, version) VALUES ('m1', 'new text', 'h', "
                "'u', 'u1:u', 'u', %s, %s, %s, 2)",
                (stamp, stamp, expiry),
            )
            with pg.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {schema}.history (memory_id, event, version, old_memory, "
                    "new_memory, actor, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    history,
                )
        store = make_store("postgres", config, tmp_path)
    try:
        events = store.history("m1")
        assert [(e.old_expires_at, e.new_expires_at) for e in events] == [
            (None, expiry),
            (expiry, expiry),
        ]
        plan = store.plan_restore("m1", 1)
        assert (plan.text, plan.expires_at) == ("old text", expiry)
    finally:
        store.close()
