"""The pipeline benchmark's plumbing on a tiny synthetic LoCoMo-format file.

Figures are checked for shape and range only, never for speed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engramdb.cli import app
from engramdb.embedders import LocalEmbedder
from engramdb_bench import pipeline
from engramdb_bench._locomo import load_conversations, parse_session_date


def _turn(speaker: str, n: int, i: int, text: str) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": f"D{n}:{i}", "text": text}


def tiny_locomo() -> list[dict[str, Any]]:
    said = [
        "I adopted a grey cat called Miso last weekend.",
        "Congratulations! I started a pottery class on Tuesdays.",
        "My sister is visiting from Lisbon in June.",
        "I'm training for a half marathon in the autumn.",
        "We repainted the kitchen a pale green.",
        "I finished reading a novel about a lighthouse keeper.",
        "The garden has tomatoes and basil this year.",
    ]
    sessions: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Bo"}
    observation: dict[str, Any] = {}
    for n, date in ((1, "1:56 pm on 8 May, 2023"), (2, "10:02 am on 2 June, 2023")):
        turns = [_turn("Ana" if i % 2 else "Bo", n, i, said[(i + n) % 7]) for i in range(1, 8)]
        sessions[f"session_{n}"] = turns
        sessions[f"session_{n}_date_time"] = date
        observation[f"session_{n}_observation"] = {
            "Ana": [[f"Ana mentioned: {t['text']}", t["dia_id"]] for t in turns[::2]],
        }
    return [{"sample_id": "tiny-1", "conversation": sessions, "observation": observation}]


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_locomo()), encoding="utf-8")
    return path


def _finite(value: Any, low: float = 0.0) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= low


def test_session_dates_and_chunks(data_file: Path) -> None:
    date = parse_session_date("1:56 pm on 8 May, 2023")
    assert date is not None and date.isoformat() == "2023-05-08T13:56:00+00:00"
    assert parse_session_date("12:05 am on 1 Jan, 2024") is not None
    assert parse_session_date("sometime") is None
    convs = load_conversations(data_file)
    plan = list(pipeline.chunks(convs, 5))
    assert [len(c.messages) for c in plan] == [5, 2, 5, 2]
    assert {c.run_id for c in plan} == {"tiny-1/session_1", "tiny-1/session_2"}
    first = plan[0]
    # speaker_a speaks as the user, speaker_b as the assistant, both by name
    assert first.messages[0] == {
        "role": "user",
        "content": "My sister is visiting from Lisbon in June.",
        "name": "Ana",
    }
    assert first.messages[1]["role"] == "assistant" and first.messages[1]["name"] == "Bo"
    assert plan[0].timestamp == date
    assert all(1 <= len(c.facts) <= 3 for c in plan)


def test_run_reports_every_figure(tmp_path: Path, data_file: Path, embedder: LocalEmbedder) -> None:
    out = tmp_path / "pipeline.json"
    report = pipeline.run(
        adds=4,
        warmup=1,
        concurrency=[1, 3],
        delay=0.05,
        data=data_file,
        out=out,
        embedder=embedder,
        echo=None,
    )
    assert json.loads(out.read_text(encoding="utf-8"))["benchmark"] == "engramdb_bench.pipeline"
    per_add = {(r["mode"], r["llm"]): r for r in report["per_add"]}
    assert set(per_add) == {(m, k) for m in pipeline.MODES for k in pipeline.LLM_KINDS}
    for (mode, _kind), r in per_add.items():
        assert r["adds"] == 4 and r["measured_adds"] == 3
        calls = 1 if mode == "additive" else 2
        assert r["llm_calls_per_add"] == calls
        assert r["prompt_tokens_per_add"] > 100 and r["completion_tokens_per_add"] > 5
        assert 1 <= r["memories_added_per_add"] <= 3
        assert r["memories_stored"] >= 4
        for key in ("total_ms", "llm_ms", "embed_ms", "store_ms", "own_ms", "own_cpu_ms"):
            stats = r[key]
            assert all(_finite(stats[s]) for s in ("mean", "p50", "p95", "max")), (key, stats)
            assert stats["p50"] <= stats["max"]
        assert r["embed_ms"]["mean"] > 0 and r["store_ms"]["mean"] > 0
        # the parts add up to the whole
        parts = r["llm_ms"]["mean"] + r["embed_ms"]["mean"] + r["own_ms"]["mean"]
        assert math.isclose(parts, r["total_ms"]["mean"], rel_tol=0.01, abs_tol=0.01)
    # the same input through the wire server and the scripted LLM: same prompts
    for mode in pipeline.MODES:
        wire, scripted = per_add[(mode, "wire")], per_add[(mode, "scripted")]
        assert wire["prompt_tokens_per_add"] == pytest.approx(
            scripted["prompt_tokens_per_add"], rel=0.05
        )
        assert wire["memories_stored"] == scripted["memories_stored"]
    conc = report["concurrency"]
    assert [(r["inputs"], r["mode"], r["concurrent_adds"]) for r in conc] == [
        (inputs, mode, n)
        for inputs in pipeline.CONCURRENCY_INPUTS
        for mode in pipeline.MODES
        for n in (1, 3)
    ]
    for r in conc:
        calls = 1 if r["mode"] == "additive" else 2
        assert r["llm_calls"] == calls * r["concurrent_adds"]
        # each add waits for its own call(s) at least
        assert r["wall_s"] >= calls * 0.05
        assert 1 <= r["max_in_flight"] <= r["concurrent_adds"]
    assert set(report["target"]["met"]) == set(pipeline.MODES)
    assert "Per add (p50 ms" in pipeline.format_report(report)


def test_cli_pipeline_json(tmp_path: Path, data_file: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "pipeline",
            "--data",
            str(data_file),
            "--adds",
            "2",
            "--warmup",
            "0",
            "--concurrency",
            "2",
            "--delay",
            "0.01",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["per_add"]) == 4 and len(report["concurrency"]) == 4
    bad = CliRunner().invoke(app, ["bench", "pipeline", "--data", str(tmp_path / "none.json")])
    assert bad.exit_code == 1 and "not found" in bad.output


@pytest.mark.parametrize("command", ["pipeline", "perf", "locomo-retrieval", "locomo-qa"])
def test_cli_bench_without_data_names_both_ways(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_LOCOMO", raising=False)
    result = CliRunner().invoke(app, ["bench", command])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "--data" in message and "ENGRAM_LOCOMO" in message and "CC BY-NC" in message


def test_cli_bench_data_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_LOCOMO", str(tmp_path / "none.json"))
    missing = CliRunner().invoke(app, ["bench", "pipeline", "--adds", "1"])
    assert missing.exit_code == 1 and "none.json" in missing.output
    # An existing file is checked as the options are read, from the variable too.
    retrieval = CliRunner().invoke(app, ["bench", "locomo-retrieval"])
    assert retrieval.exit_code == 2 and "none.json" in " ".join(retrieval.output.split())
