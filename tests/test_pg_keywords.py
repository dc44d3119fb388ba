"""Keyword ranking inside PostgreSQL (schema version 5): postings, statistics, parity.

Every write path keeps ``keyword_postings`` and ``keyword_stats`` equal to
what the memories' terms say, and the SQL ranking gives what the in-process
:class:`~engramdb.core.bm25.BM25Index` gives over the same terms
(``keyword_index = "process"``, the ranking before version 5).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from engramdb import Memory
from engramdb.core.filters import parse_filters
from engramdb.embedders import LocalEmbedder
from engramdb.nlp import query_terms
from engramdb.stores.base import Candidate, Scope
from engramdb.stores.postgres import PostgresStore

WRITER = str(Path(__file__).with_name("_writer.py"))


def _memory(config: dict[str, Any], embedder: Any, **store: Any) -> Memory:
    section = {"provider": "postgres", "config": {**config, **store}}
    return Memory(config={"vector_store": section}, embedder=embedder)


def check_postings(config: dict[str, Any]) -> int:
    """The postings and statistics are what the live memories' terms say; returns their count."""
    s = '"' + config["collection_name"] + '"'
    with psycopg.connect(config["url"]) as con:
        live = con.execute(
            f"SELECT rowid, terms, user_id FROM {s}.memories WHERE deleted_at IS NULL"
        ).fetchall()
        posted = con.execute(
            f"SELECT memory_rowid, term, tf, dl, user_id FROM {s}.keyword_postings"
        ).fetchall()
        stats = con.execute(
            f"SELECT user_id, sum(docs), sum(length) FROM {s}.keyword_stats GROUP BY user_id"
        ).fetchall()
    want: dict[tuple[int, str], tuple[int, int, str | None]] = {}
    users: Counter[str] = Counter()
    lengths: Counter[str] = Counter()
    for rowid, terms, user in live:
        words = terms.split()
        want[(rowid, "")] = (len(words), len(words), user)
        for term, tf in Counter(words).items():
            want[(rowid, term)] = (tf, len(words), user)
        if user is not None:
            users[user] += 1
            lengths[user] += len(words)
    got = {(r[0], r[1]): (r[2], r[3], r[4]) for r in posted}
    assert got == want
    got_stats = {u: (int(d), int(n)) for u, d, n in stats if int(d) or int(n)}
    assert got_stats == {u: (users[u], lengths[u]) for u in users}
    return len(live)


def _candidates(m: Memory, scope: Scope, query: str, where: Any = None) -> list[Candidate]:
    vec = np.asarray(m.embedder.embed_query(query), dtype=np.float32)
    return m.store.candidates(scope, where, vec, query_terms(query), [], 10)


def _keyword(cands: list[Candidate]) -> tuple[list[str], dict[str, float], float]:
    ranked = sorted((c for c in cands if c.bm25_rank), key=lambda c: c.bm25_rank or 0)
    best = max((c.bm25_best for c in cands), default=0.0)
    return [c.row.id for c in ranked], {c.row.id: c.bm25 for c in cands}, best


TEXTS = [
    "Alice hikes the ridge trail every Sunday morning",
    "Bob cooks spicy noodles for his sister",
    "Alice paints the lighthouse at dusk",
    "the lighthouse keeper collects old maps",
    "Carol runs the marathon in Boston",
    "Bob plays guitar in a jazz band",
    "Alice adopted a grey cat named Pixel",
    "the jazz band practices in the garage on Fridays",
    "Carol grows tomatoes and basil in the garden",
    "Bob travels to Lisbon for the jazz festival",
    "a cat sleeps on the warm lighthouse steps",
    "the garden needs water every morning",
]
QUERIES = [
    "Where does Alice hike?",
    "jazz band garage",
    "lighthouse",
    "What does Carol grow in the garden?",
    "cat",
    "morning water",
    "nothing matches zebra",
]


def test_sql_ranking_matches_the_in_process_index(
    pg_config: dict[str, Any], embedder: LocalEmbedder
) -> None:
    with _memory(pg_config, embedder) as m:
        for i, text in enumerate(TEXTS * 2):  # repeats across users: statistics per scope
            m.add(text + f" #{i}", user_id=f"u{i % 2}", agent_id=f"a{i % 3}", infer=False)
        ids = [r["id"] for r in m.get_all(user_id="u0", limit=100)["results"]]
        m.delete(ids[0])  # a deleted memory counts nowhere
        m.update(ids[1], "the lighthouse cat hikes to the jazz garden")
        with _memory(pg_config, embedder, keyword_index="process") as ref:
            scopes: list[tuple[Scope, Any]] = [
                (Scope(user_id="u0"), None),
                (Scope(user_id="u1"), None),
                (Scope(agent_id="a1"), None),
                (Scope(user_id="u0", agent_id="a2"), None),
                (Scope(user_id="u1"), parse_filters({"created_at": {"gte": "2000-01-01"}})),
            ]
            compared = 0
            for scope, where in scopes:
                for query in QUERIES:
                    got = _keyword(_candidates(m, scope, query, where))
                    want = _keyword(_candidates(ref, scope, query, where))
                    assert got[0] == want[0], (scope, query)
                    assert got[1] == pytest.approx(want[1], rel=1e-5), (scope, query)
                    assert got[2] == pytest.approx(want[2], rel=1e-6), (scope, query)
                    compared += bool(want[0])
            assert compared >= 20
            assert m.store.flows.caught_up_rows == 0  # type: ignore[attr-defined]


def test_every_write_path_keeps_the_postings(
    pg_config: dict[str, Any], embedder: LocalEmbedder
) -> None:
    with _memory(pg_config, embedder) as m:
        first = m.add("the quokka hides in the lighthouse", user_id="u", infer=False)
        batch = m.add([{"role": "user", "content": t} for t in TEXTS[:6]], user_id="u", infer=False)
        m.add("an agent note about maps", agent_id="scout", infer=False)  # no user
        check_postings(pg_config)
        mid = first["results"][0]["id"]
        m.update(mid, "the quokka sleeps in the lighthouse by the sea")
        check_postings(pg_config)
        m.restore(mid)  # back to the first version (undo of an update)
        check_postings(pg_config)
        other = batch["results"][0]["id"]
        m.delete(other)
        check_postings(pg_config)
        m.restore(other)  # undo of a delete
        check_postings(pg_config)
        m.delete_all(user_id="u")
        assert check_postings(pg_config) == 1
        m.restore(mid)
        check_postings(pg_config)
        dump = io.StringIO()
        m.export_jsonl(dump)
        m.purge(mid)
        check_postings(pg_config)
        m.purge(user_id="u")
        check_postings(pg_config)
        m.reset()
        assert check_postings(pg_config) == 0
        m.import_jsonl(io.StringIO(dump.getvalue()))  # the bulk path (COPY)
        assert check_postings(pg_config) > 0
        m.add("the heron waits by the pond", user_id="v", infer=False)
        check_postings(pg_config)
        assert m.search("quokka lighthouse", user_id="u")["results"]


def test_the_migration_fills_the_postings_of_existing_memories(
    pg_config: dict[str, Any], embedder: LocalEmbedder
) -> None:
    with _memory(pg_config, embedder) as m:
        for text in TEXTS:
            m.add(text, user_id="u", infer=False)
        m.delete(m.get_all(user_id="u")["results"][0]["id"])
        want = [r["id"] for r in m.search("lighthouse jazz", user_id="u")["results"]]
    s = '"' + pg_config["collection_name"] + '"'
    with psycopg.connect(pg_config["url"], autocommit=True) as con:  # back to version 4
        con.execute(
            f"DROP TABLE {s}.keyword_postings, {s}.keyword_stats; "
            f"DROP TRIGGER keyword_insert ON {s}.memories; "
            f"DROP TRIGGER keyword_update ON {s}.memories; "
            f"DROP TRIGGER keyword_delete ON {s}.memories; "
            f"DROP FUNCTION {s}.keyword_inserted, {s}.keyword_updated, {s}.keyword_deleted, "
            f"{s}.keyword_apply, {s}.keyword_words; "
            f"UPDATE {s}.meta SET value = '4' WHERE key = 'schema_version'"
        )
    with _memory(pg_config, embedder) as m:
        assert check_postings(pg_config) == len(TEXTS) - 1
        assert [r["id"] for r in m.search("lighthouse jazz", user_id="u")["results"]] == want


@pytest.mark.slow
def test_eight_processes_adding_to_one_user_keep_the_statistics(
    pg_config: dict[str, Any], embedder: LocalEmbedder
) -> None:
    section = {"provider": "postgres", "config": pg_config}
    Memory(config={"vector_store": section}, embedder=embedder).close()
    procs = [
        subprocess.Popen(
            [sys.executable, WRITER, json.dumps(section), "concurrent", str(p), "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for p in range(8)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()
        assert b"retrying" not in err, err.decode()  # no deadlock: stats never wait
    assert check_postings(pg_config) > 0
    s = '"' + pg_config["collection_name"] + '"'
    with psycopg.connect(pg_config["url"]) as con:
        row = con.execute(f"SELECT count(*) FROM {s}.keyword_stats").fetchone()
    assert row is not None and row[0] <= 8  # folded: about one row per concurrent writer


def test_keyword_index_option_is_checked(pg_config: dict[str, Any]) -> None:
    from engramdb.errors import ConfigError
    from engramdb.stores import make_store

    with pytest.raises(ConfigError, match="keyword_index"):
        make_store("postgres", {**pg_config, "keyword_index": "disk"}, Path("unused"))
    store = make_store("postgres", {**pg_config, "keyword_index": "process"}, Path("unused"))
    assert isinstance(store, PostgresStore) and store.flows.keyword_index == "process"
    store.close()


def test_the_parity_benchmark_runs(pg_server: Any, tmp_path: Path) -> None:
    from engramdb_bench import pg_keywords
    from test_bench_pg import tiny_locomo

    report = pg_keywords.run(
        pg_server.url, data=tiny_locomo(tmp_path / "locomo.json"), sizes=[300], echo=lambda _: None
    )
    assert report["parity"]["questions"] == 8
    assert report["parity"]["mean_top10_overlap"] >= 0.95
    sized = report["sizes"]["300"]
    assert sized["database"]["rss_growth_mb"] >= 0 and sized["process"]["p50_ms"] > 0


def test_the_ranking_does_no_numeric_arithmetic_per_posting(
    pg_config: dict[str, Any], embedder: LocalEmbedder
) -> None:
    """``0.75 * p.dl`` would be ``numeric`` (a quarter of the ranking's time at 100k)."""
    with _memory(pg_config, embedder) as m:
        for text in TEXTS:
            m.add(text, user_id="u", infer=False)
        flows: Any = m.store.flows  # type: ignore[attr-defined]
        for scope in (Scope(user_id="u"), Scope(agent_id="a")):
            sql, params = flows.where(scope, None, False)
            step = flows.keyword_ranking(scope, None, sql, params, ["lighthouse", "jazz"], 10)
            query = next(step)
            with psycopg.connect(pg_config["url"]) as con:
                plan = con.execute("EXPLAIN (VERBOSE) " + query.sql, query.params).fetchall()
            scoring = [r[0] for r in plan if ".dl" in r[0]]
            assert scoring and not any("numeric" in line for line in scoring), scope
