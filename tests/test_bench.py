"""The perf benchmark runs end to end and reports every figure with a sane shape.

Figures are checked for type and range only: speed targets are the
benchmark's business (it prints met/missed), never a test assertion.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb import Memory
from engramdb_bench import perf

_DATA = perf.default_data_path()  # $ENGRAM_LOCOMO (tests/conftest.py sets it when it can)
pytestmark = pytest.mark.skipif(
    _DATA is None or not _DATA.is_file(),
    reason=f"LoCoMo data not found (ENGRAM_LOCOMO={_DATA})",
)


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_latency(lat: dict[str, Any], what: str) -> None:
    assert lat["n"] >= 1, what
    for key in ("p50_ms", "p95_ms", "max_ms", "mean_ms"):
        assert _positive(lat[key]), (what, key, lat)
    assert lat["p50_ms"] <= lat["p95_ms"] <= lat["max_ms"], (what, lat)
    assert 0 <= lat["cpu_p50_ms"] <= lat["cpu_p95_ms"], (what, lat)


def _check_throughput(fig: dict[str, Any], what: str) -> None:
    assert isinstance(fig["messages"], int) and fig["messages"] >= 1, what
    assert _positive(fig["seconds"]) and _positive(fig["msgs_per_s"]), (what, fig)
    assert _positive(fig["cpu_seconds"]) and _positive(fig["cpu_msgs_per_s"]), (what, fig)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("perf")
    out = tmp / "perf.json"
    lines: list[str] = []
    result = perf.run([500], out=out, quick=True, cache_dir=tmp / "cache", echo=lines.append)
    assert any("targets" in line for line in lines)
    return result, out


def test_json_written_and_equal_to_the_result(report: tuple[dict[str, Any], Path]) -> None:
    result, out = report
    assert json.loads(out.read_text(encoding="utf-8")) == json.loads(json.dumps(result))


def test_header_and_data(report: tuple[dict[str, Any], Path]) -> None:
    result, _ = report
    assert result["benchmark"] == "engramdb_bench.perf"
    assert result["quick"] is True
    assert result["top_k"] == perf.TOP_K
    assert result["machine"]["cpus"] >= 1
    assert len(result["machine"]["loadavg_start"]) == 3
    data = result["data"]
    assert data["dim"] == 384
    assert data["real_turns"] >= 1 and data["questions"] >= 1
    assert "synthetic-from-real" in data["synthetic"]
    assert _positive(result["peak_rss_bytes"])


def test_embedder_and_add_figures(report: tuple[dict[str, Any], Path]) -> None:
    result, _ = report
    emb = result["embedder"]
    assert _positive(emb["batch32"]["sentences_per_s"])
    assert _positive(emb["single"]["sentences_per_s"])
    _check_latency(emb["single"]["call"], "embedder single")
    _check_latency(emb["query"], "query embedding")
    add = result["add"]
    for embedder in ("real_embedder", "precomputed_embedder"):
        single, batched = add[embedder]["single"], add[embedder]["batched"]
        _check_throughput(single, f"{embedder} single")
        _check_throughput(batched, f"{embedder} batched")
        assert single["messages_per_call"] == 1
        assert batched["messages_per_call"] == perf.SMALL_BATCH
        _check_latency(batched["call"], f"{embedder} batched calls")


def test_search_figures_per_size(report: tuple[dict[str, Any], Path]) -> None:
    result, _ = report
    assert [row["size"] for row in result["search"]] == [500]
    row = result["search"][0]
    assert row["real"] + row["synthetic"] == 500
    assert row["synthetic"] > 0  # the quick corpus has fewer real turns than 500
    _check_throughput(row["ingest"], "bulk ingest")
    for kind in ("e2e", "no_embed", "vector_search"):
        _check_latency(row[kind], kind)
    assert len(row["cold_ms"]) == len(row["cold_cpu_ms"]) >= 1
    assert all(_positive(v) for v in row["cold_ms"] + row["cold_cpu_ms"])
    assert _positive(row["cold_median_ms"]) and _positive(row["cold_cpu_median_ms"])
    # Nothing here would hold the index but the vectors (384 float32 each).
    assert row["index_bytes"] >= 500 * 384 * 4
    disk = row["disk"]
    assert disk["file_bytes"] > 0 and disk["wal_bytes"] >= 0
    assert disk["bytes_per_memory"] >= 384 * 4  # at least the vector itself
    assert disk["tables"] is None or disk["tables"]["memory_vectors"] >= 500 * 384 * 4
    assert _positive(row["peak_rss_bytes"])
    probe = row["probe"]
    assert "error" not in probe, probe
    assert _positive(probe["cold_search_e2e_ms"])
    assert _positive(probe["cold_search_e2e_cpu_ms"])
    rss = probe["rss_bytes"]
    assert 0 < rss["after_import"] <= rss["after_model"] <= rss["after_search"]
    assert probe["peak_rss_bytes"] >= rss["after_search"]
    assert probe["index_bytes"] == row["index_bytes"]


def test_narrowed_searches_select_what_they_say(report: tuple[dict[str, Any], Path]) -> None:
    result, _ = report
    narrowed = result["search"][-1]["narrowed"]
    assert set(narrowed) == {"filter_10pct", "filter_1pct", "run_id_5pct"}
    expected = {"filter_10pct": 50, "filter_1pct": 25, "run_id_5pct": 25}
    for name, fig in narrowed.items():
        _check_latency(fig, name)
        # 20 fill calls of 25: bucket10 = call % 10 hits 2 calls, bucket100 and
        # run-3 one call each.
        assert fig["matching"] == expected[name], (name, fig)
        assert 1 <= fig["hits"] <= perf.TOP_K


def test_targets_are_reported_not_enforced(report: tuple[dict[str, Any], Path]) -> None:
    result, _ = report
    targets = {t["name"]: t for t in result["targets"]}
    storage = targets["storage add, batched (msgs/s)"]
    assert storage["met"] in (True, False)
    assert _positive(storage["value"]) and _positive(storage["cpu_value"])
    # No 100k size was run, so the search targets cannot be judged.
    assert all(t["met"] is None for name, t in targets.items() if "100k" in name)


def test_precomputed_embedder_returns_the_vectors_it_was_given(tmp_path: Path) -> None:
    stand_in = perf.PrecomputedEmbedder()
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(2, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    stand_in.add_documents(["a", "b"], vecs)
    stand_in.add_queries(["q"], vecs[:1])
    assert np.array_equal(stand_in.embed_documents(["b", "a"]), vecs[::-1])
    assert stand_in.embed_documents([]).shape == (0, 384)
    assert np.array_equal(stand_in.embed_query("q"), vecs[0])
    with pytest.raises(KeyError, match="no vector"):
        stand_in.embed_documents(["unknown"])
    with pytest.raises(KeyError, match="no vector"):
        stand_in.embed_query("unknown")
    # It passes for the real model, so Memory accepts and stores its vectors.
    with Memory(tmp_path / "m.db", embedder=stand_in) as mem:
        assert mem.add("a", user_id="u", infer=False)["results"][0]["event"] == "ADD"


def test_bad_sizes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive integers"):
        perf.run([0], quick=True, cache_dir=tmp_path, echo=None)


def test_missing_data_is_explained(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="LoCoMo"):
        perf.run([500], quick=True, data=tmp_path / "none.json", echo=None)
