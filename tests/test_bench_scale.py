"""``engram bench scale`` end to end at tiny sizes: real server processes, real figures.

The synthetic data is deterministic and the servers' embedder recomputes a
memory's vector from its text; the benchmark then runs on SQLite (through the
CLI) and on the suite's PostgreSQL server, and its figures are checked for
sense: everything loaded is stored, p50 <= p95, recall in [0, 1], RSS read
for every process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from engramdb.cli import app
from engramdb_bench import scale
from pg import PgServer

TINY: dict[str, Any] = {
    "per_tenant": 20,
    "sample_tenants": 4,
    "warm_searches": 2,
    "adds": 6,
    "add_clients": 3,
    "recall_tenants": 4,
    "embedder": "fast",
}


@pytest.fixture
def runner() -> Iterator[CliRunner]:
    yield CliRunner(env={"ENGRAM_DB": None})


def test_synthetic_memories_are_deterministic_and_the_embedder_recomputes_them() -> None:
    pool = scale.load_pool(None, "fast")
    synth = scale.Synth(pool.texts, pool.vectors, seed=3)
    again = scale.Synth(pool.texts, pool.vectors, seed=3)
    assert [synth.text(i) for i in range(20)] == [again.text(i) for i in range(20)]
    assert len({synth.text(i) for i in range(200)}) == 200  # the marker makes each unique
    assert scale.marker(synth.text(12345)) == 12345 and scale.marker("no marker") is None
    vectors = synth.matrix(range(5))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    embedder = scale.ScaleEmbedder(synth, pool.questions, pool.qvectors, pool.model)
    got = embedder.embed_documents([synth.text(i) for i in range(5)])
    assert np.allclose(got, vectors)
    assert np.allclose(embedder.embed_query(pool.questions[0]), pool.qvectors[0])
    assert embedder.embed_query("not a pool question").shape == (pool.vectors.shape[1],)


def test_the_layout_splits_memories_into_contiguous_tenants() -> None:
    layout = scale.Layout(1_000, per_tenant=50, skew=1.0, seed=0)
    tenants = layout.tenants(1_000)
    blocks = [layout.block(t, 1_000) for t in range(tenants)]
    assert sum(len(b) for b in blocks) == 1_000
    assert [b.start for b in blocks[1:]] == [b.stop for b in blocks[:-1]]
    assert layout.tenants(400) <= tenants and min(len(b) for b in blocks) >= 1


def _check(report: dict[str, Any], sizes: list[int], processes: list[int]) -> None:
    assert [step["size"] for step in report["steps"]] == sizes
    assert report["not_reached"] == []
    for step in report["steps"]:
        assert step["stored_count"] == step["expected_count"]
        assert step["expected_count"] == step["size"] + sum(
            r["add"]["stored"] for s in report["steps"] if s["size"] <= step["size"]
            for r in s["runs"]
        )  # fmt: skip
        assert step["tenants"] >= 2 and step["largest_tenant"] >= 1
        assert [r["processes"] for r in step["runs"]] == processes
        for r in step["runs"]:
            search = r["search"]
            assert search["errors"] == 0 and r["add"]["errors"] == 0
            assert search["cold"]["n"] == search["tenants"] == min(4, step["tenants"] - 1)
            assert search["warm"]["n"] == 2 * search["tenants"]
            for lat in (search["cold"], search["warm"], r["add"]):
                assert 0 < lat["p50_ms"] <= lat["p95_ms"]
            assert r["add"]["stored"] == 6 and r["add"]["per_s"] > 0
            assert len(r["rss"]) == r["processes"]
            for proc in r["rss"]:
                assert proc["start_bytes"] > 10e6 and proc["end_bytes"] > 10e6
                assert proc["curve"][-1]["tenants_served"] == proc["tenants_served"] >= 1
        for key in ("random", "largest"):
            recall = step["recall"][key]["recall_at_10"]
            assert 0.0 <= recall <= 1.0 and step["recall"][key]["queries"] > 0


def test_engram_bench_scale_on_sqlite(runner: CliRunner, tmp_path: Path) -> None:
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    args = ["bench", "scale", "--sizes", "120,240", "--processes", "1,2", "--per-tenant", "20"]
    args += ["--sample-tenants", "4", "--adds", "6", "--add-clients", "3", "--recall-tenants", "4"]
    args += ["--embedder", "fast", "--out", str(out), "--plot", str(png), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text(encoding="utf-8"))
    assert (report["benchmark"], report["store"]) == ("scale", "sqlite")
    _check(report, [120, 240], [1, 2])
    # SQLite searches every scope exactly
    assert all(s["recall"]["random"]["recall_at_10"] == 1.0 for s in report["steps"])
    pytest.importorskip("matplotlib")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = scale.format_report(report)
    assert "recall@10" in table and "240" in table
    bad = runner.invoke(app, ["bench", "scale", "--sizes", "ten"])
    assert bad.exit_code == 2


def test_bench_scale_on_postgres(pg_server: PgServer) -> None:
    report = scale.run(store=pg_server.url, sizes=[150], processes=[2], echo=lambda _: None, **TINY)
    assert report["store"] == "postgresql"
    _check(report, [150], [2])
    plan = report["steps"][0]["recall"]["plan_uses_hnsw"]
    assert set(plan) == {"random_tenant", "largest_tenant"}
    assert all(isinstance(v, bool) for v in plan.values())


def test_settings_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        scale.run(sizes=[0], echo=lambda _: None)
    with pytest.raises(ValueError, match="at least 1"):
        scale.run(sizes=[10], adds=0, echo=lambda _: None)
    with pytest.raises(ValueError, match="embedder"):
        scale.run(sizes=[10], embedder="model", echo=lambda _: None)
