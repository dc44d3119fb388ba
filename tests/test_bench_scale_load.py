"""``engram bench scale``'s COPY loader writes what ``Memory.add`` writes, on real PostgreSQL.

Two schemas of the suite's server get the same few hundred synthetic memories:
one through ``Memory.add(infer=False)`` (the API loader, calls of a few
messages so that terms borrow words within a call and not across), the other
through the COPY loader (the first tenant through ``Memory.add``, which binds
the store, the rest copied by a worker process with the HNSW index dropped and
built again). Every table must hold the same rows up to ids and instants; the
copied memories must then be found by keyword and by vector search, counted,
and erased cleanly by a purge (the triggers' postings and statistics too).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from engramdb.memory import Memory
from engramdb_bench import _scale_load as load
from engramdb_bench import scale
from pg import PgServer

SIZE = 300
CALL = 7


@pytest.fixture
def two_schemas(pg_server: PgServer) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    with pg_server.schema() as api, pg_server.schema() as copied:
        yield api, copied


def _memory(config: dict[str, Any], pool_path: Path) -> Memory:
    return Memory(
        config={"vector_store": {"provider": "postgres", "config": config}},
        embedder=scale._embedder_from(pool_path),
    )


def _add(mem: Memory, synth: scale.Synth, user: str, start: int, stop: int) -> None:
    for lo in range(start, stop, CALL):
        messages = [
            {"role": "user", "content": synth.text(i)} for i in range(lo, min(stop, lo + CALL))
        ]
        mem.add(messages, user_id=user, infer=False)


_READS = {
    "memories": "SELECT user_id, agent_id, run_id, text, hash, owner, partition, actor_id, role, "
    "attributed_to, memory_type, metadata::text, version, terms, embedding::text, "
    "deleted_at IS NULL, expires_at, created_at = updated_at, observed_at IS NOT NULL "
    "FROM {s}.memories",
    "messages": "SELECT user_id, agent_id, run_id, role, name, content, observed_at IS NOT NULL "
    "FROM {s}.messages",
    "memory_sources": "SELECT m.text, g.content FROM {s}.memory_sources x "
    "JOIN {s}.memories m ON m.rowid = x.memory_rowid "
    "JOIN {s}.messages g ON g.rowid = x.message_rowid",
    "memory_context": "SELECT m.text, g.content FROM {s}.memory_context x "
    "JOIN {s}.memories m ON m.rowid = x.memory_rowid "
    "JOIN {s}.messages g ON g.rowid = x.message_rowid",
    "entities": "SELECT owner, name, normalized, type FROM {s}.entities",
    "memory_entities": "SELECT m.text, e.owner, e.normalized FROM {s}.memory_entities x "
    "JOIN {s}.memories m ON m.rowid = x.memory_rowid "
    "JOIN {s}.entities e ON e.rowid = x.entity_rowid",
    "history": "SELECT m.text, h.event, h.version, h.old_memory, h.new_memory, "
    "h.old_metadata::text, h.new_metadata::text, h.actor, h.reason, h.old_expires_at, "
    "h.new_expires_at FROM {s}.history h JOIN {s}.memories m ON m.id = h.memory_id",
    "keyword_postings": "SELECT m.text, k.term, k.tf, k.dl, k.user_id FROM {s}.keyword_postings k "
    "JOIN {s}.memories m ON m.rowid = k.memory_rowid",
    "keyword_stats": "SELECT user_id, sum(docs), sum(length) FROM {s}.keyword_stats "
    "GROUP BY user_id",
    "memory_scope": "SELECT * FROM {s}.memory_scope",
    "memory_links": "SELECT * FROM {s}.memory_links",
}


def _tables(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as con:
        return {
            name: sorted(
                (tuple(str(v) for v in row) for row in con.execute(sql.format(s=f'"{schema}"'))),
            )
            for name, sql in _READS.items()
        }


def test_the_copy_loader_writes_what_memory_add_writes(
    two_schemas: tuple[dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    api_config, copy_config = two_schemas
    url = str(api_config["url"])
    pool = scale.load_pool(None, "fast")
    pool_path = tmp_path / "pool.npz"
    scale._save_pool(pool, 0, pool_path)
    synth = scale.Synth(pool.texts, pool.vectors, 0)
    layout = scale.Layout(SIZE, per_tenant=40, skew=1.0, seed=0)
    tenants = layout.tenants(SIZE)
    assert tenants >= 5
    jobs = [(scale.Layout.name(t), layout.block(t, SIZE).start, layout.block(t, SIZE).stop)
            for t in range(tenants)]  # fmt: skip

    api = _memory(api_config, pool_path)
    for user, lo, hi in jobs:
        _add(api, synth, user, lo, hi)
    api.close()

    copied = _memory(copy_config, pool_path)
    _add(copied, synth, *jobs[0])  # binds the store and creates its HNSW index
    schema = str(copy_config["collection_name"])
    assert load.drop_index(url, schema)
    ticks: list[int] = []
    batches = [jobs[1:3], jobs[3:]]
    got = load.run_copy_load(url, schema, str(pool_path), batches, 1, ticks.append, call=CALL)
    load.build_index(url, schema, maintenance_mem="64MB")
    load.vacuum(url, schema)
    assert got == sum(ticks) == SIZE - len(layout.block(0, SIZE))

    want = _tables(url, str(api_config["collection_name"]))
    have = _tables(url, schema)
    assert len(want["memories"]) == SIZE and len(want["memory_context"]) > 0
    assert len(want["memory_entities"]) > 0 and len(want["keyword_postings"]) > SIZE
    for name in _READS:
        assert have[name] == want[name], name

    # What was copied is found, counted and erased like what was added.
    assert copied.store.count() == SIZE
    user, lo, hi = jobs[-1]
    text = synth.text(hi - 1)
    found = copied.search(text, user_id=user, top_k=3)["results"]
    assert found and found[0]["memory"] == text
    with psycopg.connect(url) as con:
        plan = con.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (schema, load.INDEX),
        ).fetchone()
    assert plan is not None and "hnsw" in plan[0]
    copied.purge(user_id=user)
    after = _tables(url, schema)
    assert not [r for r in after["keyword_postings"] if r[-1] == user]
    assert [r for r in after["keyword_stats"] if r[0] == user] in ([], [(user, "0", "0")])
    assert copied.store.count() == SIZE - (hi - lo)
    copied.close()


def test_bench_scale_loads_by_copy_and_sweeps_tenants(pg_server: PgServer) -> None:
    report = scale.run(
        store=pg_server.url,
        sizes=[150, 400],
        processes=[1],
        per_tenant=20,
        sample_tenants=3,
        adds=4,
        add_clients=2,
        recall_tenants=3,
        embedder="fast",
        sweep_tenants=12,
        echo=lambda _: None,
    )
    assert report["loading"].startswith("the first tenant through Memory.add")
    first, second = report["steps"]
    # counted as claimed: what was loaded plus the adds answered 2xx, nothing else
    assert first["stored_count"] == first["expected_count"] == 150 + 4
    assert second["stored_count"] == second["expected_count"] == 400 + 8
    assert {"api_s", "copy_s", "index_s", "vacuum_s"} == set(first["load_phases_s"])
    assert "index_s" in second["load_phases_s"]  # 250 more on 154: the index is built again
    for step in report["steps"]:
        assert step["recall"]["random"]["recall_at_10"] == 1.0  # small tenants: exact plans
        assert step["runs"][0]["search"]["errors"] == 0
    assert first["sweep"] is None
    sweep = second["sweep"]
    assert sweep["tenants"] == 12 and sweep["search"]["n"] == 12 and sweep["search"]["errors"] == 0
    assert sweep["rss_at_end"]["tenants_served"] == 12 and sweep["rss_at_end"]["rss_bytes"] > 10e6
    assert "one process serving 12 tenants" in scale.format_report(report)
