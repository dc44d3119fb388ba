"""The PostgreSQL-beside-SQLite benchmark runs end to end on a tiny corpus (figures not judged)."""

from __future__ import annotations

import json
from pathlib import Path

from engramdb_bench import perf_pg
from pg import PgServer


def tiny_locomo(path: Path) -> Path:
    topics = ["hiking", "cooking", "painting", "running", "guitar", "travel", "garden"]
    data = []
    for c in range(2):
        turns = [
            {"speaker": "A", "dia_id": f"D1:{i}", "text": f"I love {topics[i % 7]} day {i} c{c}"}
            for i in range(40)
        ]
        qa = [{"question": f"What does A love about {t}?", "answer": "x"} for t in topics[:4]]
        data.append({"sample_id": f"conv-{c}", "conversation": {"session_1": turns}, "qa": qa})
    path.write_text(json.dumps(data))
    return path


def test_perf_pg_reports_both_stores(pg_server: PgServer, tmp_path: Path) -> None:
    report = perf_pg.run(
        pg_server.url,
        sizes=[150],
        data=tiny_locomo(tmp_path / "locomo.json"),
        cache_dir=tmp_path / "cache",
        workdir=tmp_path / "work",
        queries=4,
        schema="bench_test",
        add_calls=(5, 2),
        echo=None,
    )
    row = report["sizes"]["150"]
    for name in ("sqlite", "postgres"):
        figures = row[name]
        assert figures["fill_msgs_per_s"] > 0 and figures["add"]["single_msgs_per_s"] > 0
        assert figures["search"]["n"] == 4 and figures["vector_search"]["p50_ms"] > 0
        # at this size every search is exact
        assert figures["recall_at_10"] == {**figures["recall_at_10"], "all": 1.0}
    assert row["postgres"]["size"]["hnsw_index_bytes"] > 0
    bm25 = report["bm25_locomo"]
    # PostgreSQL ranks in SQL (float8, ties by row id); the in-process index in
    # float32, cutting ties at the 10th place in any order: this corpus is all ties.
    assert bm25["questions"] == 8 and bm25["mean_top10_overlap"] >= 0.95
    assert "| 150 | recall@10 vs exact | 1.0 | 1.0 |" in perf_pg.format_report(report)
