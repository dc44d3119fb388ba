"""The LoCoMo QA benchmark's plumbing, against a scripted LLM on a tiny synthetic file.

The data here is made up (the real LoCoMo files are CC BY-NC and live outside
the repository). The scripted LLM answers the three kinds of prompt
(extraction, answer, judge) deterministically from the prompt's text, so the
metrics can be checked by hand.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engramdb.cli import app
from engramdb.embedders import LocalEmbedder
from engramdb.llms import ScriptedLLM
from engramdb_bench import locomo_qa
from engramdb_bench.qa_metrics import bleu1, normalize_answer, token_f1

TURNS = {
    # text -> the fact the scripted extractor writes for it
    "We finally visited Lisbon and Porto last week!": "Ana visited Lisbon and Porto in May 2023.",
    "I bought a red bicycle for the commute.": "Ana bought a red bicycle.",
    "I've been doing pottery every Sunday.": "Bo does pottery every Sunday.",
    "My grandmother gave me her old piano.": "Bo received a piano from Bo's grandmother.",
}

DATA: list[dict[str, Any]] = [
    {
        "sample_id": "conv-a",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Bo",
            "session_1_date_time": "10:00 am on 8 May, 2023",
            "session_1": [
                {
                    "speaker": "Ana",
                    "dia_id": "D1:1",
                    "text": "We finally visited Lisbon and Porto last week!",
                },
                {"speaker": "Bo", "dia_id": "D1:2", "text": "How lovely. What else is new?"},
                {
                    "speaker": "Ana",
                    "dia_id": "D1:3",
                    "text": "I bought a red bicycle for the commute.",
                    "blip_caption": "a photo of a red bicycle",
                },
            ],
            "session_2_date_time": "4:30 pm on 20 June, 2023",
            "session_2": [
                {
                    "speaker": "Bo",
                    "dia_id": "D2:1",
                    "text": "I've been doing pottery every Sunday.",
                },
                {"speaker": "Ana", "dia_id": "D2:2", "text": "That sounds relaxing."},
            ],
        },
        "observation": {
            "session_1_observation": {
                "Ana": [["Ana visited Lisbon and Porto.", "D1:1"]],
                "Bo": [],
            },
            "session_2_observation": {"Bo": [["Bo does pottery on Sundays.", "D2:1"]]},
        },
        "qa": [
            {
                "question": "Which cities did Ana visit?",
                "answer": "Lisbon and Porto",
                "category": 1,
            },
            {"question": "When did Ana visit Lisbon?", "answer": "7 May 2023", "category": 2},
            {"question": "What did Ana buy?", "answer": "a red bicycle", "category": 3},
            {"question": "What does Bo do on Sundays?", "answer": "pottery", "category": 4},
            {"question": "What is Bo's dog called?", "answer": "Rex", "category": 4},
            {
                "question": "What car did Ana buy?",
                "adversarial_answer": "a blue car",
                "category": 5,
            },
        ],
    },
    {
        "sample_id": "conv-b",
        "conversation": {
            "speaker_a": "Cy",
            "speaker_b": "Di",
            "session_1_date_time": "9:15 am on 1 March, 2022",
            "session_1": [
                {"speaker": "Di", "dia_id": "D1:1", "text": "My grandmother gave me her old piano."}
            ],
        },
        "qa": [{"question": "Who gave Di a piano?", "answer": "her grandmother", "category": 4}],
    },
]

# question -> (the scripted answer, the scripted judge label)
ANSWERS = {
    "Which cities did Ana visit?": ("Porto and Lisbon", "CORRECT"),
    "When did Ana visit Lisbon?": ("May 2023", "WRONG"),
    "What did Ana buy?": ("The bicycle was red", "CORRECT"),
    "What does Bo do on Sundays?": ("Pottery.", "CORRECT"),
    "What is Bo's dog called?": ("Not mentioned in the conversation", "WRONG"),
    "What car did Ana buy?": ("Not mentioned in the conversation.", "CORRECT"),
    "Who gave Di a piano?": ("Her grandmother", "CORRECT"),
}

_NEW = re.compile(r"<new_messages>(.*?)</new_messages>", re.S)
_HINT = re.compile(r" \[[^\]]*\]")
_MSG = re.compile(r'<message speaker="([^"]*)" role="(\w+)"[^>]*>\n(.*?)\n</message>', re.S)


def respond(messages: list[dict[str, Any]]) -> str | dict[str, Any]:
    """The scripted model: extraction, answer or judge, chosen by the prompt."""
    user = str(messages[-1]["content"])
    new = _NEW.search(user)
    if new is not None:
        facts = []
        for _speaker, role, text in _MSG.findall(new.group(1)):
            # The prompt shows relative times with their dates: "last week [the week of …]".
            first_line = _HINT.sub("", text.split("\n")[0])
            if first_line in TURNS:
                facts.append(
                    {"text": TURNS[first_line], "attributed_to": role, "linked_memory_ids": []}
                )
        return {"memory": facts}
    if user.startswith("Memories:"):
        question = user.rsplit("Question: ", 1)[1].strip()
        return ANSWERS[question][0]
    if user.startswith("Question:") and "Gold answer:" in user:
        question = user.split("\n")[0].removeprefix("Question: ")
        label = ANSWERS[question][1]
        if question.startswith("What does Bo do"):  # a fenced reply, repaired
            return f'```json\n{{"reasoning": "same activity", "label": "{label}"}}\n```'
        return {"reasoning": "compared with the gold answer", "label": label}
    raise AssertionError(f"unexpected prompt: {user[:200]}")


def scripted() -> ScriptedLLM:
    return ScriptedLLM([respond] * 500)


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps(DATA), encoding="utf-8")
    return path


def scores(summary: dict[str, Any]) -> list[Any]:
    """The parts of a summary a rerun must repeat exactly (times differ)."""
    groups = [*summary["categories"].values(), summary["overall_1_4"], summary["adversarial_5"]]
    keys = ("n", "j", "f1", "bleu1", "answer_prompt_tokens_mean", "judge_tokens_mean")
    return [[g[k] for k in keys] + [g["answer_latency_s"]["mean"]] for g in groups]


def close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, abs_tol=1e-4)


# -- metrics -------------------------------------------------------------------------------


def test_metrics_by_hand() -> None:
    assert normalize_answer("The Red, red bicycle!") == "red red bicycle"
    # same tokens, another order
    assert token_f1("Porto and Lisbon", "Lisbon and Porto") == 1.0
    assert bleu1("Porto and Lisbon", "Lisbon and Porto") == 1.0
    # 2 of 3 gold tokens, nothing extra: P 1, R 2/3 -> F1 0.8; BLEU-1 = exp(1 - 3/2) * 1
    assert close(token_f1("May 2023", "7 May 2023"), 0.8)
    assert close(bleu1("May 2023", "7 May 2023"), math.exp(-0.5))
    # "bicycle was red" vs "red bicycle": P 2/3, R 1 -> F1 0.8; longer, so no penalty
    assert close(token_f1("The bicycle was red", "a red bicycle"), 0.8)
    assert close(bleu1("The bicycle was red", "a red bicycle"), 2 / 3)
    # clipping: a repeated word counts once per gold occurrence
    assert close(bleu1("red red red", "red bicycle"), 1 / 3)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0 and bleu1("", "x") == 0.0


def test_judgement_parsing() -> None:
    assert locomo_qa.parse_judgement('{"reasoning": "ok", "label": "CORRECT"}') == (True, "ok")
    assert locomo_qa.parse_judgement('```json\n{"label": "WRONG"}\n```')[0] is False
    assert locomo_qa.parse_judgement("<think>CORRECT?</think> The answer is WRONG.")[0] is False
    assert locomo_qa.parse_judgement("no idea")[0] is None


# -- the run -------------------------------------------------------------------------------


def test_run_scores_per_category_and_caches(
    tmp_path: Path, data_file: Path, embedder: LocalEmbedder
) -> None:
    cache = tmp_path / "cache"
    llm = scripted()
    report = locomo_qa.run(
        data_file, llm=llm, embedder=embedder, cache_dir=cache, turns_per_add=2, echo=None
    )
    summary = report["summary"]
    cats = summary["categories"]
    assert set(cats) == {"1", "2", "3", "4"}
    assert cats["1"]["n"] == 1 and cats["1"]["j"] == 1.0
    assert close(cats["1"]["f1"], 1.0) and close(cats["1"]["bleu1"], 1.0)
    assert cats["2"]["j"] == 0.0
    assert close(cats["2"]["f1"], 0.8) and close(cats["2"]["bleu1"], math.exp(-0.5))
    assert close(cats["3"]["f1"], 0.8) and close(cats["3"]["bleu1"], 2 / 3)
    # category 4: "Pottery." (exact), "Not mentioned..." vs "Rex" (0), "Her grandmother" (exact)
    assert cats["4"]["n"] == 3
    assert close(cats["4"]["j"], 2 / 3)
    assert close(cats["4"]["f1"], 2 / 3) and close(cats["4"]["bleu1"], 2 / 3)
    total = summary["overall_1_4"]
    assert total["n"] == 6 and close(total["j"], 4 / 6)
    assert close(total["f1"], (1 + 0.8 + 0.8 + 1 + 0 + 1) / 6)
    assert close(total["bleu1"], (1 + math.exp(-0.5) + 2 / 3 + 1 + 0 + 1) / 6)
    # category 5 apart, against "Not mentioned in the conversation"
    adv = summary["adversarial_5"]
    assert adv["n"] == 1 and adv["j"] == 1.0 and close(adv["f1"], 1.0)
    assert total["judge_unreadable"] == 0 and total["errors"] == 0

    questions = report["questions"]
    assert len(questions) == 7
    for q in questions:
        assert q["retrieved"] >= 1 and q["retrieval_ms"] > 0
        assert q["answer_tokens"]["prompt"] > 0 and q["judge_tokens"]["completion"] > 0
        assert q["cached"] == 0
    # the answer prompt saw the extracted memories, dated
    ask = next(
        c.messages[-1]["content"]
        for c in llm.calls
        if str(c.messages[-1]["content"]).endswith("Which cities did Ana visit?")
    )
    assert "(2023-05-08) Ana visited Lisbon and Porto in May 2023." in ask

    ingestion = {i["conversation"]: i for i in report["ingestion"]}
    # conv-a: 3 turns in 2 adds + 2 turns in 1 add; conv-b: 1 add
    assert ingestion["conv-a"]["llm_calls"] == 3 and ingestion["conv-b"]["llm_calls"] == 1
    assert ingestion["conv-a"]["memories"] == 3 and not ingestion["conv-a"]["cached"]
    first_calls = len(llm.calls)
    assert first_calls == 4 + 7 * 2
    assert report["llm"]["cache_misses"] == first_calls and report["llm"]["cache_hits"] == 0

    # A rerun repays nothing: every reply and both databases come from the cache.
    again = scripted()
    rerun = locomo_qa.run(
        data_file, llm=again, embedder=embedder, cache_dir=cache, turns_per_add=2, echo=None
    )
    assert again.calls == []
    assert rerun["llm"]["cache_misses"] == 0 and rerun["llm"]["cache_hits"] == 14
    assert all(i["cached"] for i in rerun["ingestion"])
    assert scores(rerun["summary"]) == scores(summary)
    assert all(q["cached"] == 2 for q in rerun["questions"])

    # --limit: the first N questions in file order, and only their conversations.
    limited = scripted()
    small = locomo_qa.run(
        data_file,
        llm=limited,
        embedder=embedder,
        cache_dir=cache,
        limit=2,
        turns_per_add=2,
        echo=None,
    )
    assert limited.calls == []
    assert [q["question"] for q in small["questions"]] == [
        "Which cities did Ana visit?",
        "When did Ana visit Lisbon?",
    ]
    assert [i["conversation"] for i in small["ingestion"]] == ["conv-a"]
    assert small["summary"]["adversarial_5"]["n"] == 0


def test_verbatim_turns_and_facts(tmp_path: Path, data_file: Path, embedder: LocalEmbedder) -> None:
    llm = scripted()
    report = locomo_qa.run(
        data_file, llm=llm, embedder=embedder, infer=False, limit=1, echo=None, workers=1
    )
    # no extraction calls: one answer and one judgement
    assert len(llm.calls) == 2
    assert report["ingestion"][0]["memories"] == 5 and report["ingestion"][0]["llm_calls"] == 0
    prompt = str(llm.calls[0].messages[-1]["content"])
    # verbatim turns are shown with their speaker and the session date; captions kept
    assert "(2023-05-08) Ana: We finally visited Lisbon and Porto last week!" in prompt
    assert "[shares a photo: a photo of a red bicycle]" in prompt

    facts = locomo_qa.run(
        data_file,
        llm=scripted(),
        embedder=embedder,
        infer=False,
        keys="facts",
        limit=1,
        echo=None,
    )
    assert facts["ingestion"][0]["memories"] == 2
    with pytest.raises(ValueError, match="infer=False"):
        locomo_qa.run(data_file, llm=scripted(), embedder=embedder, keys="facts", echo=None)


def test_cache_keys_and_failures_not_cached(tmp_path: Path) -> None:
    inner = ScriptedLLM(["one", RuntimeError("down"), "two"])
    llm = locomo_qa.CachedLLM(inner, tmp_path)
    msgs = [{"role": "user", "content": "hi"}]
    assert llm.complete(msgs).text == "one"
    assert llm.complete(msgs).text == "one"  # cached
    with pytest.raises(RuntimeError):
        llm.complete(msgs, schema={"type": "object"})  # another key; failure not cached
    assert llm.complete(msgs, schema={"type": "object"}).text == "two"
    stats = llm.stats()
    assert stats["calls"] == 4 and stats["cache_hits"] == 1 and stats["errors"] == 1
    assert len(inner.calls) == 3


def test_no_llm_says_how_to_configure(
    data_file: Path, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_LLM", raising=False)
    from engramdb.errors import ConfigError

    with pytest.raises(ConfigError, match="ENGRAM_LLM"):
        locomo_qa.run(data_file, embedder=embedder, echo=None)


def test_cli_runs_against_a_configured_llm(
    tmp_path: Path, data_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_LLM", raising=False)
    config = tmp_path / "config.json"
    replies = ["Porto and Lisbon", {"reasoning": "same cities", "label": "CORRECT"}]
    config.write_text(
        json.dumps({"llm": {"provider": "scripted", "config": {"responses": replies}}}),
        encoding="utf-8",
    )
    out = tmp_path / "report.json"
    args = [
        "bench",
        "locomo-qa",
        "--data",
        str(data_file),
        "--config",
        str(config),
        "--no-infer",
        "--limit",
        "1",
        "--cache",
        str(tmp_path / "cache"),
        "--out",
        str(out),
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["summary"]["overall_1_4"]["j"] == 1.0
    assert scores(json.loads(out.read_text(encoding="utf-8"))["summary"]) == scores(
        report["summary"]
    )
    # The same command again: the script is used up, so any LLM call would fail.
    config.write_text(
        json.dumps({"llm": {"provider": "scripted", "config": {"responses": []}}}),
        encoding="utf-8",
    )
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["llm"]["cache_misses"] == 0

    missing = CliRunner().invoke(app, ["bench", "locomo-qa", "--data", str(data_file)])
    assert missing.exit_code == 1
    assert "ENGRAM_LLM" in missing.output


def test_first_sessions_keeps_the_questions_they_answer() -> None:
    from engramdb_bench._locomo import QA, Conversation, Session

    conv = Conversation(
        "c",
        "Ana",
        "Bo",
        tuple(Session(n, None, "", ()) for n in (1, 2, 3)),
        qa=(
            QA("in one", "a", 4, ("D1:3",)),
            QA("in one and two", "b", 1, ("D1:1", "D2:4")),
            QA("in three", "c", 2, ("D3:1",)),
            QA("no evidence", "d", 3, ()),
            QA("bad evidence", "e", 3, ("somewhere",)),
        ),
    )
    cut = locomo_qa._first_sessions(conv, 2)
    assert [s.number for s in cut.sessions] == [1, 2]
    assert [q.question for q in cut.qa] == ["in one", "in one and two"]
    assert [q.question for q in locomo_qa._first_sessions(conv, 1).qa] == ["in one"]
