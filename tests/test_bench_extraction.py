"""The extraction benchmark's scoring and plumbing, against a scripted extractor.

The data is test_bench_qa's made-up LoCoMo-format file. The scripted model
writes known facts for known turns, plus memories built to trip each score
(a first-person memory, an unresolved relative time, a verbatim copy, a
link between unrelated memories), so every figure can be checked by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from engramdb.cli import app
from engramdb.embedders import LocalEmbedder
from engramdb.llms import ScriptedLLM
from engramdb_bench import extraction
from engramdb_bench._locomo import load_conversations
from test_bench_qa import DATA  # the made-up LoCoMo-format conversations

_NEW = re.compile(r"<new_messages>(.*?)</new_messages>", re.S)
_MSG = re.compile(r'<message speaker="([^"]*)" role="(\w+)"[^>]*>\n(.*?)\n</message>', re.S)
_KNOWN = re.compile(r"^\[(\d+)\] (.*)$", re.M)

# first words of a turn -> the memories the scripted extractor writes for it
FACTS = {
    "We finally visited": ["Ana visited Lisbon and Porto in the week of 2023-05-01."],
    "I bought a red": ["I bought a red bicycle for the commute."],  # first person, verbatim
    "I've been doing": ["Bo has done pottery every Sunday recently."],  # relative time
    "My grandmother gave": ["Di received her grandmother's old piano."],
}


def respond(messages: list[dict[str, Any]]) -> dict[str, Any]:
    user = str(messages[-1]["content"])
    new = _NEW.search(user)
    assert new is not None, user[:200]
    known = dict(_KNOWN.findall(user.split("<recent_conversation>")[0]))
    items = []
    for _speaker, role, text in _MSG.findall(new.group(1)):
        for start, facts in FACTS.items():
            if text.startswith(start):
                for fact in facts:
                    links = []
                    if start == "I've been doing" and known:
                        links = [next(iter(known))]  # pottery -> a Lisbon trip: unrelated
                    items.append({"text": fact, "attributed_to": role, "linked_memory_ids": links})
    return {"memory": items}


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(DATA), encoding="utf-8")
    return path


def test_sessions_are_taken_round_robin_each_conversation_in_order(tmp_path: Path) -> None:
    convs = load_conversations(_data(tmp_path))
    plan = extraction.select_sessions(convs, 2)
    assert [(c.sample_id, [s.number for s in ss]) for c, ss in plan] == [
        ("conv-a", [1]),
        ("conv-b", [1]),
    ]
    plan = extraction.select_sessions(convs, 10)
    assert [(c.sample_id, [s.number for s in ss]) for c, ss in plan] == [
        ("conv-a", [1, 2]),
        ("conv-b", [1]),
    ]


def test_the_scores_by_hand(tmp_path: Path, embedder: LocalEmbedder) -> None:
    llm = ScriptedLLM([respond] * 50)
    samples = tmp_path / "samples.jsonl"
    report = extraction.run(
        _data(tmp_path),
        llm=llm,
        embedder=embedder,
        sessions=3,
        turns_per_add=2,
        out=tmp_path / "report.json",
        samples_out=samples,
        echo=None,
    )
    s = report["summary"]
    # conv-a s1: 3 turns -> 2 adds; s2: 2 turns -> 1 add; conv-b s1: 1 add
    assert (s["sessions"], s["adds"], s["failures"]) == (3, 4, 0)
    # observations: Lisbon (covered), pottery (covered: pottery, sunday); conv-b has none
    assert s["observations"] == 2
    assert s["fact_recall"] == 1.0
    assert s["memories"] == 4
    # "I bought ..." has a pronoun; "... recently" an unresolved time: 2 of 4 flagged
    assert (s["personal_pronoun"], s["relative_time"], s["self_contained"]) == (0.25, 0.25, 0.5)
    # "I bought a red bicycle for the commute." copies its message
    assert s["verbatim"] == 0.25
    # pottery -> Lisbon trip shares no term and is far apart: a wrong link
    assert (s["links"], s["wrong_links"]) == (1, 1)
    assert s["llm_calls_per_add"] == 1.0
    assert json.loads((tmp_path / "report.json").read_text())["summary"] == s
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(lines) == 2 and all(line["covered"] for line in lines)
    assert lines[0]["observation"] == "Ana visited Lisbon and Porto."
    assert lines[0]["memory"].startswith("Ana visited Lisbon")
    # both speakers are people: every message went in as a named user
    for call in llm.calls:
        assert 'role="assistant"' not in call.messages[-1]["content"]


def test_a_failed_extraction_is_counted_not_fatal(tmp_path: Path, embedder: LocalEmbedder) -> None:
    llm = ScriptedLLM(["not json at all"] * 50)
    report = extraction.run(
        _data(tmp_path), llm=llm, embedder=embedder, sessions=1, turns_per_add=4, echo=None
    )
    s = report["summary"]
    assert (s["adds"], s["failures"], s["memories"], s["fact_recall"]) == (1, 1, 0, 0.0)
    assert report["adds"][0]["failure"]
    assert report["adds"][0]["llm_calls"] == 2  # the call and its one retry


def test_coverage_rule() -> None:
    assert extraction.covers({"visit", "lisbon", "porto"}, {"visit", "lisbon"}, 0.1)
    assert not extraction.covers({"visit", "lisbon", "porto"}, {"lisbon"}, 0.1)
    assert extraction.covers({"a", "b", "c"}, set(), extraction.SEMANTIC_COVER)
    assert not extraction.covers(set(), {"x"}, 0.5)
    assert extraction.self_contained("I moved to Paris") == (True, False)
    assert extraction.self_contained("Ana moved to Paris last week") == (False, True)
    assert extraction.self_contained("Ana moved to the US in 2021") == (False, False)


def test_cli(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "extraction", "--data", str(_data(tmp_path)), "--sessions", "1"]
    )
    # no LLM configured: a clear error, not a traceback
    assert result.exit_code == 1
    assert "needs an LLM" in result.output
