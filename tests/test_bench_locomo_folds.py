"""The leave-one-conversation-out benchmark: grid parsing, selection, folds, one small run.

The selection logic is tested on hand-made score tables (no search); one
end-to-end run on a tiny LoCoMo-format file (three copies of the retrieval
tests' conversation) checks the plumbing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engramdb.embedders import LocalEmbedder
from engramdb.search import FusionConfig
from engramdb_bench import locomo_folds as folds
from engramdb_bench.locomo_folds import Candidate, Scored
from test_retrieval import _tiny_locomo


def row(conv: str, value: float, category: int = 4) -> Scored:
    return Scored(conv, category, dict.fromkeys(folds.METRICS, value))


def column(spec: dict[str, list[float]], category: int = 4) -> list[Scored]:
    """One candidate's rows: per conversation, its questions' scores (any metric)."""
    return [row(conv, v, category) for conv, values in spec.items() for v in values]


def cands(n: int) -> list[Candidate]:
    grid = [{"bm25_weight": 1.0 + i} for i in range(n - 1)]
    out = folds.parse_grid(grid)
    assert len(out) == n
    return out


# -- grid parsing ---------------------------------------------------------------------------


def test_object_grid_is_a_product_on_the_defaults() -> None:
    got = folds.parse_grid('{"bm25_weight": [1.0, 1.5], "method": ["weighted", "rrf"]}')
    assert got[0].name == "defaults" and got[0].fusion == FusionConfig()
    assert [c.overrides for c in got[1:]] == [
        {"bm25_weight": 1.0},
        {"method": "rrf", "bm25_weight": 1.0},
        {"bm25_weight": 1.5},
        {"method": "rrf", "bm25_weight": 1.5},
    ]
    assert got[2].fusion == FusionConfig(bm25_weight=1.0, method="rrf")
    assert got[2].name == "method=rrf, bm25_weight=1"


def test_list_grid_dedupes_and_keeps_the_defaults_first() -> None:
    got = folds.parse_grid(
        [{"bm25_half": 9}, {"bm25_weight": 1.25}, {"bm25_half": 9.0}, {"rrf_k": [5, 20]}]
    )
    # {"bm25_weight": 1.25} is the default; the second bm25_half=9 repeats the first.
    assert [c.name for c in got] == ["defaults", "bm25_half=9", "rrf_k=5", "rrf_k=20"]
    assert folds.parse_grid(None) == folds.parse_grid({}) == folds.parse_grid([])
    assert len(folds.parse_grid(None)) == 1


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ('{"bm25_wieght": [1]}', ["unknown", "'bm25_wieght'", "bm25_weight"]),
        ('{"bm25_weight": [-1]}', ["bm25_weight", "-1", "greater than or equal"]),
        ('{"method": ["rrf", "fancy"]}', ["method", "'fancy'"]),
        ('{"bm25_weight": 1.5}', ["'bm25_weight'", "list of values"]),
        ('{"bm25_weight": []}', ["'bm25_weight'", "no values"]),
        ('[{"context_messages": 2}]', ["'context_messages'", "index-time"]),
        ('{"embed_actor": [false]}', ["'embed_actor'", "index-time"]),
        ('[{"rerank": {"pool": 10}}]', ["'rerank'", "LLM"]),
        ("[1]", ["grid entry 0", "1"]),
        ("3", ["grid must be"]),
        ("{nope", ["not valid JSON"]),
    ],
)
def test_grid_errors_name_the_fault(spec: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        folds.parse_grid(spec)
    for word in words:
        assert word in str(info.value)


def test_grid_fields_in_order() -> None:
    assert folds._grid_fields('{"b": [1], "a": [2]}') == ["b", "a"]
    assert folds._grid_fields([{"rrf_k": 5}, {"method": "rrf", "rrf_k": 9}]) == ["rrf_k", "method"]


# -- selection and folds --------------------------------------------------------------------


def test_selection_excludes_the_held_out_conversation() -> None:
    # Candidate 1 is perfect on A (the largest conversation) and useless elsewhere:
    # best in-sample, but whenever A is held out the others say "defaults".
    table = [
        column({"A": [0] * 6, "B": [1, 1], "C": [1, 1]}),
        column({"A": [1] * 6, "B": [0, 0], "C": [0, 0]}),
    ]
    assert folds.select(table, "any@10") == 1  # in-sample: 6/10 against 4/10
    assert folds.select(table, "any@10", exclude="A") == 0
    assert folds.select(table, "any@10", exclude="B") == 1
    report = folds.evaluate(table, cands(2), "any@10", ["bm25_weight"])
    by_fold = {f["held_out"]: f for f in report["folds"]}
    assert by_fold["A"]["chosen"]["index"] == 0
    assert by_fold["B"]["chosen"]["index"] == 1 and by_fold["C"]["chosen"]["index"] == 1
    # The held-out figure is the chosen candidate's on the held-out conversation only.
    assert by_fold["A"]["loco"]["overall"]["any@10"] == 0.0  # not candidate 1's 1.0
    assert by_fold["B"]["loco"]["overall"]["any@10"] == 0.0
    assert by_fold["B"]["defaults"]["overall"]["any@10"] == 1.0
    assert by_fold["B"]["train"] == {"chosen": 0.75, "defaults": 0.25}
    assert by_fold["A"]["questions"] == 6
    loco = report["summary"]["loco"]["overall"]["any@10"]
    assert loco == {"mean": 0.0, "min": 0.0, "max": 0.0, "sd": 0.0}
    dflt = report["summary"]["defaults"]["overall"]["any@10"]
    assert dflt["mean"] == pytest.approx(2 / 3, abs=1e-4)
    assert dflt["min"] == 0.0 and dflt["max"] == 1.0
    assert dflt["sd"] == pytest.approx(0.57735, abs=1e-4)  # sample sd of 0, 1, 1
    # Pooled over every held-out question: LOCO scores 0 everywhere.
    assert report["summary"]["loco"]["pooled"]["any@10"] == 0.0
    assert report["summary"]["defaults"]["pooled"]["any@10"] == pytest.approx(0.4)
    # Naive tuning picks candidate 1 and believes 0.6 (0.333 per conversation).
    ins = report["in_sample"]
    assert ins["index"] == 1 and ins["pooled"] == 0.6
    assert ins["mean_over_conversations"] == pytest.approx(1 / 3, abs=1e-4)
    assert ins["loco_held_out_mean"] == 0.0
    assert ins["optimism"] == pytest.approx(1 / 3, abs=1e-4)
    param = report["parameters"]["bm25_weight"]
    assert param["folds"] == {"A": 1.25, "B": 1.0, "C": 1.0}
    assert param["in_sample"] == 1.0 and param["default"] == 1.25
    assert not param["stable"] and param["folds_off_default"] == 2
    assert report["candidates"][1]["by_conversation"] == {"A": 1.0, "B": 0.0, "C": 0.0}


def test_ties_go_to_the_defaults_then_to_grid_order() -> None:
    same = {"A": [1, 0], "B": [0, 1]}
    assert folds.select([column(same), column(same)], "any@10") == 0
    better = {"A": [1, 1], "B": [1, 0]}
    table = [column(same), column(better), column(better)]
    assert folds.select(table, "any@10") == 1  # 1 and 2 tie above the defaults
    # Trained on B alone, all three tie at 0.5: the defaults; on A alone, 1 beats 0.
    assert folds.select(table, "any@10", exclude="A") == 0
    assert folds.select(table, "any@10", exclude="B") == 1
    report = folds.evaluate(table, cands(3), "any@10", ["bm25_weight"])
    assert [f["chosen"]["index"] for f in report["folds"]] == [0, 1]
    param = report["parameters"]["bm25_weight"]
    assert param["folds"] == {"A": 1.25, "B": 1.0}
    assert not param["stable"] and param["folds_off_default"] == 1
    # Equal NDCG sums reached in another order still tie.
    a = [Scored("A", 4, {"ndcg@10": v}) for v in (0.1, 0.2, 0.3)]
    b = [Scored("A", 4, {"ndcg@10": v}) for v in (0.3, 0.1, 0.2)]
    assert folds.select([a, b], "ndcg@10") == 0


def test_the_metric_chooses() -> None:
    base = column({"A": [1, 1], "B": [1, 1]})
    # Same any@10, better NDCG for candidate 1.
    alt = [Scored(r.conversation, 4, {**r.scores, "ndcg@10": 0.9}) for r in base]
    base = [Scored(r.conversation, 4, {**r.scores, "ndcg@10": 0.5}) for r in base]
    assert folds.select([base, alt], "any@10") == 0
    assert folds.select([base, alt], "ndcg@10") == 1
    with pytest.raises(ValueError, match="metric must be one of"):
        folds.evaluate([base, alt], cands(2), "recall")


def test_categories_average_over_the_folds_that_have_them() -> None:
    table = [
        column({"A": [1, 0]}, category=1) + column({"B": [1]}, category=4),
        column({"A": [0, 0]}, category=1) + column({"B": [0]}, category=4),
    ]
    report = folds.evaluate(table, cands(2))
    cats = report["summary"]["defaults"]["by_category"]
    assert cats["1"]["folds"] == 1 and cats["1"]["any@10"] == 0.5
    assert cats["4"]["folds"] == 1 and cats["4"]["any@10"] == 1.0
    assert cats["2"] == {"name": "temporal", "folds": 0}
    text = folds.format_report(
        {"conversations": {"A": 2, "B": 1}, "memories": 3, "questions": 3, "keys": "turns"} | report
    )
    assert "LOCO-selected" in text and "1 multi-hop" in text and "2 temporal" not in text


def test_one_conversation_is_not_enough() -> None:
    with pytest.raises(ValueError, match="at least two"):
        folds.evaluate([column({"A": [1]})], cands(1))


# -- one small run --------------------------------------------------------------------------


def _three_conversations() -> list[dict[str, Any]]:
    out = []
    for n in range(3):
        sample = _tiny_locomo()[0]
        sample["sample_id"] = f"tiny-{n + 1}"
        out.append(sample)
    return out


@pytest.fixture(scope="module")
def tiny_three(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("locomo-folds") / "tiny3.json"
    path.write_text(json.dumps(_three_conversations()), encoding="utf-8")
    return path


GRID = '{"method": ["rrf"]}'


def test_run_end_to_end(tiny_three: Path, tmp_path: Path, embedder: LocalEmbedder) -> None:
    out = tmp_path / "folds.json"
    cache = tmp_path / "cache"
    messages: list[str] = []
    report = folds.run(
        tiny_three,
        grid=GRID,
        out=out,
        reuse=True,
        cache_dir=cache,
        embedder=embedder,
        progress=messages.append,
    )
    assert json.loads(out.read_text()) == report
    assert report["conversations"] == {"tiny-1": 3, "tiny-2": 3, "tiny-3": 3}
    assert report["memories"] == 18 and report["questions"] == 9
    assert [c["name"] for c in report["candidates"]] == ["defaults", "method=rrf"]
    assert report["search"]["searches"] == 18
    assert len(report["folds"]) == 3
    for fold in report["folds"]:
        assert fold["questions"] == 3
        for which in ("loco", "defaults"):
            assert fold[which]["overall"]["n"] == 3
            assert 0.0 <= fold[which]["overall"]["any@10"] <= 1.0
    # Three identical conversations: every candidate scores the same on each, so
    # every fold picks the same one, and held out equals in sample.
    assert len({f["chosen"]["index"] for f in report["folds"]}) == 1
    assert report["parameters"]["method"]["stable"]
    assert report["in_sample"]["optimism"] == pytest.approx(0.0, abs=1e-4)
    # Six memories per scope: all@20 is 1 whatever the fusion.
    assert report["summary"]["defaults"]["pooled"]["all@20"] == 1.0
    assert any("candidate 2/2: method=rrf" in m for m in messages)
    text = folds.format_report(report)
    assert "tiny-1" in text and "In-sample best" in text and "method" in text
    # The ingest is cached and shared with locomo-retrieval's --reuse.
    again = folds.run(tiny_three, grid=GRID, reuse=True, cache_dir=cache, embedder=embedder)
    assert again["ingest"]["reused"] and again["folds"] == report["folds"]
    from engramdb_bench import locomo_retrieval

    single = locomo_retrieval.run(tiny_three, reuse=True, cache_dir=cache, embedder=embedder)
    assert single["ingest"]["reused"]
    assert single["methods"]["hybrid"]["overall"] == report["summary"]["defaults"]["pooled"]


def test_cli(tiny_three: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from engramdb.cli import app

    grid = tmp_path / "grid.json"
    grid.write_text(GRID)
    out = tmp_path / "cli.json"
    args = ["bench", "locomo-folds", "--data", str(tiny_three), "--out", str(out)]
    bad = CliRunner().invoke(app, [*args, "--grid", '{"bm25_weight": [-2]}'])
    assert bad.exit_code == 2 and "bm25_weight" in bad.output
    bad = CliRunner().invoke(app, [*args, "--metric", "recall"])
    assert bad.exit_code == 2
    result = CliRunner().invoke(app, [*args, "--grid", f"@{grid}", "--metric", "ndcg@10", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["metric"] == "ndcg@10" and len(report["candidates"]) == 2
    assert json.loads(out.read_text()) == report


def test_cli_without_data_names_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from engramdb.cli import app

    monkeypatch.delenv("ENGRAM_LOCOMO", raising=False)
    result = CliRunner().invoke(app, ["bench", "locomo-folds"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "--data" in message and "ENGRAM_LOCOMO" in message and "CC BY-NC" in message
