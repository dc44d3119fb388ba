"""The retrieval development suite (issue 28): the data, each shape on a tiny run, the dump, folds.

The tiny runs use the real local model on one or two users / conversations and
a few questions each; the fold and metric logic is also tested on hand-made
dumps (no search).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engramdb.embedders import LocalEmbedder
from engramdb_bench import retrieval
from engramdb_bench.retrieval import QueryDump
from test_retrieval import _tiny_locomo

ROOT = Path(__file__).resolve().parent.parent
DUMP_FIELDS = {
    "shape",
    "fold",
    "group",
    "id",
    "question",
    "answerable",
    "gold",
    "gold_groups",
    "category",
    "names_person",
    "hits",
}
HIT_FIELDS = {"id", "memory", "rank", "score", "score_details", "is_gold"}


# -- the data --------------------------------------------------------------------------------


def test_generator_check_passes() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_personal_facts.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_personal_facts_shape() -> None:
    users = retrieval.load_facts()
    assert len(users) == 40
    assert len({u["name"] for u in users}) == 40
    facts = [f for u in users for f in u["facts"]]
    questions = [q for u in users for q in u["questions"]]
    assert 600 <= len(facts) <= 800
    assert all(9 <= len(u["facts"]) <= 25 for u in users)
    assert len(questions) >= 250 and sum(q["answerable"] for q in questions) >= 150
    share = sum(not q["answerable"] for q in questions) / len(questions)
    assert 0.4 <= share <= 0.5
    first = sum(f["voice"] == "first" for f in facts) / len(facts)
    assert 0.68 <= first <= 0.82
    named = sum(q["names_person"] for q in questions) / len(questions)
    assert 0.4 <= named <= 0.6
    for user in users:
        kinds = {f["id"]: (f["kind"], f["distractor"]) for f in user["facts"]}
        for q in user["questions"]:
            if q["answerable"]:
                assert q["gold"] and all(kinds[g] == (q["kind"], False) for g in q["gold"])
            else:
                assert not q["gold"]
                assert all(k != q["kind"] or d for k, d in kinds.values())
            if not q["names_person"]:
                assert "the user" in q["text"].lower()
    assert sum(f["distractor"] for f in facts) >= 80


# -- the pure part: metrics and folds ----------------------------------------------------


def _dump(group: str, fold: str, gold_first: bool, answerable: bool = True) -> QueryDump:
    hits: tuple[dict[str, Any], ...] = (
        {"id": "g", "rank": 1, "score": 0.9, "score_details": {"fusion": 0.5}, "is_gold": True},
        {"id": "x", "rank": 2, "score": 0.2, "score_details": {"fusion": 0.6}, "is_gold": False},
    )
    if not gold_first:
        hits = (
            {**hits[1], "rank": 1},
            {**hits[0], "rank": 2},
        )
    if not answerable:
        hits = tuple({**h, "is_gold": False} for h in hits)
    return QueryDump(
        "facts",
        group,
        f"{group}-{gold_first}-{answerable}",
        "q?",
        answerable,
        ("g",) if answerable else (),
        hits,
        fold=fold,
        names_person=False,
    )


def test_owner_shape_is_the_facts_in_the_first_person_under_first_names() -> None:
    users = retrieval.load_facts()
    owned = retrieval.as_owner(users)
    assert [u["id"] for u in owned] == [u["first_name"].lower() for u in users]
    for user, mine in zip(users, owned, strict=True):
        first = {f["id"] for f in user["facts"] if f["voice"] == "first"}
        assert {f["id"] for f in mine["facts"]} == first
        for q in mine["questions"]:
            assert set(q["gold"]) <= first
            assert bool(q["gold"]) == q["answerable"]
        # Only questions answered by summaries alone are left out.
        left = {q["id"] for q in user["questions"]} - {q["id"] for q in mine["questions"]}
        for q in user["questions"]:
            if q["id"] in left:
                assert q["answerable"] and not set(q["gold"]) & first
    assert sum(len(u["questions"]) for u in owned) < sum(len(u["questions"]) for u in users)


def test_metrics_by_hand() -> None:
    dumps = [
        _dump("a", "fold0", True),
        _dump("a", "fold0", False),
        _dump("b", "fold1", False, answerable=False),
    ]
    m = retrieval.metrics(dumps, threshold=0.3)
    assert m["questions"] == 3 and m["answerable"] == 2 and m["unanswerable"] == 1
    assert m["p@1"] == 0.5 and m["p@3"] == 1.0 and m["mrr"] == 0.75
    assert m["user_p@1"] == 0.5
    # Correct top 1 scored 0.9; wrong: 0.2 (wrong top 1) and 0.2 (unanswerable, top 0.2).
    assert m["auc_top1"] == 1.0
    assert m["hidden_correct"] == 0.0 and m["unanswerable_empty"] == 1.0
    assert 0.0 <= m["ece"] <= 1.0


def test_folds_train_on_the_other_folds_only() -> None:
    dumps = [
        _dump("u1", "fold0", True),
        _dump("u2", "fold1", False),
        _dump("u3", "fold2", False),
        _dump("u3", "fold2", True, answerable=False),
    ]
    seen: list[set[str]] = []

    def train(rows: list[QueryDump]) -> retrieval.FusionParams:
        seen.append({d.fold for d in rows})
        # A fusion that prefers the raw fused value: puts "x" first.
        return lambda hit: float(hit["score_details"]["fusion"])

    report = retrieval.run_folds(train, dumps)
    assert seen == [{"fold1", "fold2"}, {"fold0", "fold2"}, {"fold0", "fold1"}]
    folds = report["facts"]["folds"]
    assert set(folds) == {"fold0", "fold1", "fold2"}
    assert folds["fold0"]["p@1"] == 0.0 and folds["fold1"]["p@1"] == 0.0
    assert report["facts"]["mean"]["p@1"] == 0.0
    untrained = retrieval.run_folds(None, dumps)
    assert untrained["facts"]["folds"]["fold0"]["p@1"] == 1.0


def test_assign_folds_round_robin() -> None:
    assert retrieval.assign_folds(["c", "a", "b", "d"], 2) == {
        "a": "fold0",
        "b": "fold1",
        "c": "fold0",
        "d": "fold1",
    }
    assert set(retrieval.assign_folds(["a", "b"], 5).values()) == {"fold0", "fold1"}


# -- tiny runs of every shape ------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_locomo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    samples = []
    for n in range(2):
        sample = _tiny_locomo()[0]
        sample["sample_id"] = f"tiny-{n + 1}"
        samples.append(sample)
    path = tmp_path_factory.mktemp("retrieval") / "tiny.json"
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


def _in_range(figures: dict[str, Any]) -> None:
    for key in ("p@1", "p@3", "mrr", "auc_top1", "ece", "hidden_correct", "unanswerable_empty"):
        value = figures[key]
        assert value is None or 0.0 <= value <= 1.0, (key, value)


def test_tiny_run_every_shape(
    tiny_locomo: Path,
    tmp_path: Path,
    embedder: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(retrieval.MEM0_ENV, raising=False)
    out, dump, plot = tmp_path / "r.json", tmp_path / "d.jsonl", tmp_path / "r.png"
    report = retrieval.run(
        users=2,
        conversations=2,
        questions=4,
        folds=2,
        locomo=tiny_locomo,
        out=out,
        dump=dump,
        plot=plot,
        mem0=True,
        embedder=embedder,
    )
    assert json.loads(out.read_text()) == report
    assert plot.stat().st_size > 1000
    assert set(report["shapes"]) == set(retrieval.SHAPES)
    for shape, body in report["shapes"].items():
        overall = body["overall"]
        assert overall["questions"] > 0, shape
        _in_range(overall)
        assert body["seconds"] >= 0 and body["groups"] == 2
        assert set(body["folds"]) == {"fold0", "fold1"}
        assert 0.0 <= body["mean"]["p@1"] <= 1.0
        assert len(body["reliability"]) == retrieval.BINS
    facts = report["shapes"]["facts"]["overall"]
    assert facts["questions"] == 8 and facts["unanswerable"] > 0
    assert "user_p@1" in facts
    for shape in ("locomo", "extracted"):
        o = report["shapes"][shape]["overall"]
        for key in ("any@10", "all@10"):
            assert 0.0 <= o[key] <= 1.0
        # Six turns / two observations per conversation: everything is in the top 10.
        assert o["any@10"] == 1.0
    assert report["shapes"]["locomo"]["overall"]["questions"] == 6
    # The opt-in shape runs only when named, and dumps under its own name.
    owner = retrieval.run(shapes=["owner"], users=2, questions=4, folds=1, embedder=embedder)
    assert list(owner["shapes"]) == ["owner"]
    assert owner["shapes"]["owner"]["overall"]["questions"] > 0
    assert "skipped" in report["mem0"]
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(lines) == sum(b["overall"]["questions"] for b in report["shapes"].values())
    for line in lines:
        assert set(line) == DUMP_FIELDS
        assert line["fold"] in ("fold0", "fold1")
        assert len(line["hits"]) <= 30
        for rank, hit in enumerate(line["hits"], 1):
            assert set(hit) == HIT_FIELDS and hit["rank"] == rank
            assert hit["is_gold"] == (hit["id"] in line["gold"])
            assert isinstance(hit["score_details"], dict) and hit["score_details"]
        assert line["answerable"] == bool(line["gold"])
    text = retrieval.format_report(report)
    assert "facts" in text and "extracted" in text and "mem0: skipped" in text


def test_cli(tiny_locomo: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from engramdb.cli import app

    out, dump = tmp_path / "cli.json", tmp_path / "cli.jsonl"
    config = tmp_path / "retrieval.json"
    config.write_text(json.dumps({"bm25_weight": 1.5}))
    args = ["bench", "retrieval", "--data", str(tiny_locomo), "--out", str(out)]
    bad = CliRunner().invoke(app, [*args, "--shapes", "facts,nope"])
    assert bad.exit_code == 2
    result = CliRunner().invoke(
        app,
        [
            *args,
            "--shapes",
            "facts",
            "--users",
            "1",
            "--questions",
            "3",
            "--folds",
            "1",
            "--config",
            str(config),
            "--dump",
            str(dump),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["retrieval"]["bm25_weight"] == 1.5
    assert list(report["shapes"]) == ["facts"]
    assert len(dump.read_text().splitlines()) == 3
