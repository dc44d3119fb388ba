"""Knowledge-update benchmark: does search answer with what holds now, and what held then.

Run::

    engram bench knowledge-update [--data FILE] [--mode verbatim|facts|both]
        [--top-k 20] [--out FILE.json] [--details]

or ``python -m engramdb_bench.knowledge_update`` with the same options (and
``--derive``: ``engram maintain --apply``'s derived supersessions after each
conversation's ingestion), or call :func:`run`. It needs no LLM and no network: the
local embedding model only.

**The data** is engramdb's own (``tests/data/knowledge_updates.json``, made by
``scripts/gen_knowledge_updates.py``, whose docstring gives the format): 20
multi-session conversations between two or three people, 240 *change chains*
(one person's city, job, employer, partner, pet, diet, hobby, vehicle,
studies, travel plan, drink, sport, phone or language, with 2-4 successive
values and the day each became true), stated in dialogue turns among small
talk, one-off facts and near misses ("my brother just moved to Leeds").

**Ingestion**, one ``user_id`` per conversation, one ``run_id`` per session,
the session date as ``timestamp``, each message named by who said it:

- ``verbatim``: every turn, one ``add(infer=False)`` per session.
- ``facts``: the gold fact sentence of every turn that states something
  ("Maya moved from Lisbon to Porto."), named by the person it is about, one
  ``add(infer=False)`` per session: what a perfect extractor would keep. No
  links between the facts (the extractor's links are what issue 15 changes).
- ``linked``: the gold facts, one ``add(infer=False)`` each, every fact of a
  later value linked (``updates``) to the facts of the value it replaces: a
  perfect extractor that always sees what it replaces.
- ``scripted``: every session through ``add(infer=True)``, ten turns per add,
  with a scripted LLM that answers each real extraction request with the gold
  facts of its turns and links each change to the replaced facts *the request
  shows* (by their small ids): a perfect model behind the real pipeline, so the
  known memories the pipeline picks decide what can be linked (the report's
  ``links``: changes, those linked, and the share).
- ``extracted``: the same adds through a configured LLM (a real model).

The "now" and "before" questions are asked the day after the conversation's
last session (``search(as_of=...)``; ``--ask-at clock`` asks at the wall
clock), as a user would right after it: a recency decay measured at today's
clock on data from 2022-2024 would see every memory as years old.

**Scoring**, from ``Memory.search(question, user_id=..., top_k=...)``; a hit
*states* a value when it is one of the value's stating turns (verbatim) or
the fact of one (facts):

- ``current_p@1``: for "what holds now", the top hit states the chain's last
  value; ``current_mrr``: 1 / rank of the first hit stating it (0 if none in
  the top k); ``stale@1``: the top hit states an older value of the chain;
  ``current_vs_old``: the last value is found and ranks above every older one
  (the staleness part alone, whatever else ranks above them).
- ``as_of_acc``: for "what held on D" (D before the last change), the value
  valid on D is found and ranks above every other value of the chain, asked
  with ``search(as_of=D)`` (``use_as_of=False``, ``--no-as-of``: the plain ranking).
- ``previous_r@5``: for "what did they ... before", a hit among the first five
  states the value before the last one (or is the transition turn naming it).

Overall and per attribute kind. Search latency is ``Memory.search`` with the
query vector computed beforehand (the embedding is reported apart). Nothing
at search time sees the gold.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from engramdb import __version__
from engramdb.config import parse_config
from engramdb.embedders import Embedder, make_embedder
from engramdb.errors import ExtractionError
from engramdb.llms import LLM
from engramdb.llms.scripted import ScriptedLLM
from engramdb.memory import Memory
from engramdb_bench._llm import CachedLLM, build_llm, load_config_file
from engramdb_bench.locomo_retrieval import _latency, _QueryVectors

__all__ = [
    "ALL_MODES",
    "DEFAULT_DATA",
    "MODES",
    "Chain",
    "Conversation",
    "FactLine",
    "Question",
    "Session",
    "Turn",
    "Value",
    "format_report",
    "gold_reply",
    "ingest",
    "load",
    "load_dict",
    "main",
    "run",
    "score_question",
    "shown_memories",
    "stated_by_text",
    "summarise",
]

Mode = Literal["verbatim", "facts", "linked", "scripted", "extracted"]
AskAt = Literal["end", "clock"]
MODES: Final[tuple[Mode, ...]] = ("verbatim", "facts", "linked", "scripted")
"""The modes that need no LLM (``all``); ``extracted`` runs a configured LLM."""
ALL_MODES: Final[tuple[Mode, ...]] = (*MODES, "extracted")
TURNS_PER_ADD: Final = 10
"""``extracted``: turns of a session per ``add`` (a session is 12-30 turns)."""
TOP_K: Final = 20
STABLE_KS: Final = (5, 10, 50)
"""The top_k values whose top 1 must agree (``top1_stable``): the answer is not a cut."""

METRICS: Final = (
    "current_p@1",
    "current_mrr",
    "stale@1",
    "current_vs_old",
    "as_of_acc",
    "previous_p@1",
    "previous_r@5",
    "top1_stable",
)

DEFAULT_DATA: Final = Path(__file__).resolve().parents[3] / "tests/data/knowledge_updates.json"
"""The checked-in data set, in a checkout (it is not part of the installed package)."""


# -- the data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One dialogue turn."""

    id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class FactLine:
    """The gold fact sentence of a turn that states something."""

    turn: str
    about: str
    text: str


@dataclass(frozen=True)
class Session:
    """One session: its date (ISO-8601), turns and gold facts."""

    id: str
    date: str
    turns: tuple[Turn, ...]
    facts: tuple[FactLine, ...]


@dataclass(frozen=True)
class Value:
    """One value of a chain, the day it became true and the turns stating it."""

    value: str
    valid_from: str
    turns: tuple[str, ...]
    implicit: bool = False
    names_previous: bool = False


@dataclass(frozen=True)
class Question:
    """A question about a chain: ``current``, ``as_of`` (with ``date``) or ``previous``."""

    id: str
    type: str
    text: str
    expected: str
    date: str | None = None
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chain:
    """One attribute of one person and its successive values."""

    id: str
    subject: str
    kind: str
    attribute: str
    values: tuple[Value, ...]
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class Conversation:
    """One conversation of the data set."""

    id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    chains: tuple[Chain, ...]


def load(path: str | Path) -> list[Conversation]:
    """Read a knowledge-update data file (format 1: see scripts/gen_knowledge_updates.py)."""
    try:
        return load_dict(json.loads(Path(path).read_text("utf-8")))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def load_dict(raw: object) -> list[Conversation]:
    """The conversations of a knowledge-update data set already parsed from JSON."""
    if not isinstance(raw, dict) or raw.get("format") != 1:
        raise ValueError("not a knowledge-update data file of format 1")
    out = []
    for conv in raw["conversations"]:
        sessions = tuple(
            Session(
                str(s["id"]),
                str(s["date"]),
                tuple(Turn(str(t["id"]), str(t["speaker"]), str(t["text"])) for t in s["turns"]),
                tuple(
                    FactLine(str(f["turn"]), str(f["about"]), str(f["text"]))
                    for f in s.get("facts", [])
                ),
            )
            for s in conv["sessions"]
        )
        chains = tuple(
            Chain(
                str(c["id"]),
                str(c["subject"]),
                str(c["kind"]),
                str(c.get("attribute", "")),
                tuple(
                    Value(
                        str(v["value"]),
                        str(v["valid_from"]),
                        tuple(v["turns"]),
                        bool(v.get("implicit", False)),
                        bool(v.get("names_previous", False)),
                    )
                    for v in c["values"]
                ),
                tuple(
                    Question(
                        str(q["id"]),
                        str(q["type"]),
                        str(q["text"]),
                        str(q["expected"]),
                        q.get("date"),
                        tuple(q.get("evidence", ())),
                    )
                    for q in c["questions"]
                ),
            )
            for c in conv["chains"]
        )
        out.append(Conversation(str(conv["id"]), tuple(conv["speakers"]), sessions, chains))
    return out


# -- ingest --------------------------------------------------------------------------------


def _gold_links(conv: Conversation) -> dict[str, list[str]]:
    """What a perfect extractor links with ``updates``.

    For each stating turn of a chain's later value: the stating turns of the value
    before it.
    """
    out: dict[str, list[str]] = {}
    for chain in conv.chains:
        for before, value in zip(chain.values, chain.values[1:], strict=False):
            for turn in value.turns:
                out.setdefault(turn, []).extend(t for t in before.turns if t not in out[turn])
    return out


def _ingest_linked(memory: Memory, conv: Conversation) -> dict[str, list[str]]:
    """``linked`` mode: the gold facts, one add per fact.

    Each is linked (``updates``) to the facts of the value it replaces that were
    stored before it.
    """
    sources: dict[str, list[str]] = {}
    stored: dict[str, str] = {}  # turn id -> memory id
    gold = _gold_links(conv)
    for session in conv.sessions:
        for fact in session.facts:
            links = {stored[t]: "updates" for t in gold.get(fact.turn, ()) if t in stored}
            out = memory.add(
                [{"role": "user", "content": fact.text, "name": fact.about}],
                user_id=conv.id,
                run_id=session.id,
                metadata={"session": session.id},
                timestamp=session.date,
                infer=False,
                links=links or None,
            )
            mid = out["results"][0]["id"]
            stored.setdefault(fact.turn, mid)
            known = sources.setdefault(mid, [])
            if fact.turn not in known:
                known.append(fact.turn)
    return sources


_KNOWN = re.compile(r"<known_memories>\n(.*?)\n</known_memories>", re.DOTALL)
_KNOWN_LINE = re.compile(r"^\[(\d+)\] (.*?)(?: \(\d{4}-\d{2}-\d{2}\))?$")


def shown_memories(request: str) -> dict[str, str]:
    """The known memories an extraction request shows: text -> the small id it is shown with."""
    block = _KNOWN.search(request)
    out: dict[str, str] = {}
    for line in block.group(1).splitlines() if block else ():
        found = _KNOWN_LINE.match(line.strip())
        if found:
            out.setdefault(found.group(2), found.group(1))
    return out


@functools.cache
def _fact_texts(conv: Conversation) -> dict[str, str]:
    """Each stating turn's gold fact text (read-only: shared between calls)."""
    return {f.turn: f.text for s in conv.sessions for f in s.facts}


def gold_reply(
    conv: Conversation, turns: Sequence[Turn], request: str, gold: dict[str, list[str]]
) -> dict[str, Any]:
    """What a perfect extractor answers for ``turns``: their gold facts, linked where it can.

    A fact of a later value is linked (``updates``) to the facts of the value it
    replaces *that the request shows* in ``<known_memories>``, by the small ids
    shown there; a replaced fact the request does not show cannot be linked, as
    for a real model.
    """
    facts = _fact_texts(conv)
    shown = shown_memories(request)
    items = []
    for turn in turns:
        text = facts.get(turn.id)
        if text is None:
            continue
        ids = sorted(
            {shown[facts[b]] for b in gold.get(turn.id, ()) if facts.get(b) in shown}, key=int
        )
        items.append(
            {
                "text": text,
                "attributed_to": "user",
                "link_kind": "updates" if ids else "related",
                "linked_memory_ids": ids,
            }
        )
    return {"memory": items}


def _reply_to(
    conv: Conversation,
    turns: Sequence[Turn],
    gold: dict[str, list[str]],
    tally: dict[str, int],
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    """The scripted LLM's answer to one extraction call; counts the changes it could link."""
    reply = gold_reply(conv, turns, str(messages[-1]["content"]), gold)
    replacing = {t.id for t in turns if gold.get(t.id)}
    facts = _fact_texts(conv)
    texts = {facts[t] for t in replacing if t in facts}
    for item in reply["memory"]:
        if item["text"] in texts:
            tally["changes"] += 1
            tally["linked"] += bool(item["linked_memory_ids"])
    return reply


def _ingest_scripted(
    memory: Memory, conv: Conversation, llm: ScriptedLLM, tally: dict[str, int]
) -> dict[str, list[str]]:
    """``scripted`` mode: every session through ``add(infer=True)``, the LLM scripted.

    The same adds as ``extracted`` (ten turns each); the scripted LLM answers
    each with :func:`gold_reply`, so prompt building, the known memories shown,
    id mapping, parsing, validation and storage all run for real. ``tally``
    counts the facts of later values (``changes``) and those the request let
    it link (``linked``).
    """
    gold = _gold_links(conv)
    turns_of: dict[str, list[str]] = {}
    for session in conv.sessions:
        for fact in session.facts:
            turns_of.setdefault(fact.text, []).append(fact.turn)
    sources: dict[str, list[str]] = {}
    for session in conv.sessions:
        turns = list(session.turns)
        for start in range(0, len(turns), TURNS_PER_ADD):
            part = turns[start : start + TURNS_PER_ADD]
            llm.add(functools.partial(_reply_to, conv, part, gold, tally))
            out = memory.add(
                [{"role": "user", "content": t.text, "name": t.speaker} for t in part],
                user_id=conv.id,
                run_id=session.id,
                metadata={"session": session.id},
                timestamp=session.date,
            )
            for result in out["results"]:
                sources.setdefault(result["id"], turns_of.get(result["memory"], []))
    return sources


def _ingest_extracted(memory: Memory, conv: Conversation) -> dict[str, list[str]]:
    """``extracted`` mode: the configured LLM extracts from every session's turns."""
    for session in conv.sessions:
        turns = list(session.turns)
        for start in range(0, len(turns), TURNS_PER_ADD):
            part = turns[start : start + TURNS_PER_ADD]
            # A failure is kept as a failure record (counted after ingest); the run goes on.
            with contextlib.suppress(ExtractionError):
                memory.add(
                    [{"role": "user", "content": t.text, "name": t.speaker} for t in part],
                    user_id=conv.id,
                    run_id=session.id,
                    metadata={"session": session.id},
                    timestamp=session.date,
                )
    return {}


_ARTICLE = re.compile(r"^(?:a|an|the)\s+", re.IGNORECASE)


def _mentions(text: str, value: str) -> bool:
    bare = _ARTICLE.sub("", value.strip())
    return re.search(rf"(?<!\w){re.escape(bare)}(?!\w)", text, re.IGNORECASE) is not None


def stated_by_text(conv: Conversation, text: str) -> list[str]:
    """The turns a memory's *text* stands for, when no source turn is known (extracted).

    For every chain whose person the text names, the latest value of the chain
    the text mentions counts as stated (a transition, "moved from Lisbon to
    Porto", states the new value); the memory stands for that value's stating
    turns. Ground-truth bookkeeping, outside the system.
    """
    out: list[str] = []
    for chain in conv.chains:
        if not re.search(rf"(?<!\w){re.escape(chain.subject)}(?!\w)", text):
            continue
        named = [v for v in chain.values if _mentions(text, v.value)]
        if named:
            out.extend(named[-1].turns)
    return out


def ingest(
    memory: Memory, conv: Conversation, mode: Mode, tally: dict[str, int] | None = None
) -> dict[str, list[str]]:
    """Store one conversation; returns each memory id's source turn ids (ground truth).

    ``extracted`` returns ``{}``: its memories are scored by :func:`stated_by_text`.
    """
    if mode == "linked":
        return _ingest_linked(memory, conv)
    if mode == "extracted":
        return _ingest_extracted(memory, conv)
    if mode == "scripted":
        if not isinstance(memory.llm, ScriptedLLM):
            raise ValueError("scripted mode needs a Memory whose llm is a ScriptedLLM")
        return _ingest_scripted(memory, conv, memory.llm, tally if tally is not None else {})
    sources: dict[str, list[str]] = {}
    for session in conv.sessions:
        if mode == "verbatim":
            items = [(t.id, t.speaker, t.text) for t in session.turns]
        elif mode == "facts":
            items = [(f.turn, f.about, f.text) for f in session.facts]
        else:
            raise ValueError(f"mode must be one of {ALL_MODES}, got {mode!r}")
        if not items:
            continue
        out = memory.add(
            [{"role": "user", "content": text, "name": who} for _, who, text in items],
            user_id=conv.id,
            run_id=session.id,
            metadata={"session": session.id},
            timestamp=session.date,
            infer=False,
        )
        for (turn_id, _, _), result in zip(items, out["results"], strict=True):
            known = sources.setdefault(result["id"], [])
            if turn_id not in known:
                known.append(turn_id)
    return sources


def _settings(config: dict[str, Any] | None, retrieval: dict[str, Any] | None) -> dict[str, Any]:
    """The Memory config of a run: ``config`` with ``retrieval`` laid over its retrieval part."""
    settings = dict(config or {})
    if retrieval:
        settings["retrieval"] = {**settings.get("retrieval", {}), **retrieval}
    return settings


def _searches_with_llm(settings: dict[str, Any]) -> bool:
    """Whether the retrieval settings use an LLM at search time (reranker, query rewrite)."""
    retrieval = settings.get("retrieval", {})
    return bool(retrieval.get("rerank")) or retrieval.get("query_rewrite") is not None


def _day_after(conv: Conversation) -> str:
    """The moment the "now" and "before" questions are asked at: the day after the last session."""
    last = max(s.date for s in conv.sessions)
    moment = datetime.fromisoformat(last.replace("Z", "+00:00")) + timedelta(days=1)
    return moment.isoformat()


# -- scoring -------------------------------------------------------------------------------


def _rank_of(ranked: Sequence[Iterable[str]], turns: Iterable[str]) -> int | None:
    wanted = set(turns)
    for rank, hit in enumerate(ranked, 1):
        if wanted & set(hit):
            return rank
    return None


def _first_of_chain(chain: Chain, value: str, ranked: Sequence[Iterable[str]]) -> bool:
    """Whether ``value`` is found and ranks above every other value of the chain."""
    ranks = {v.value: _rank_of(ranked, v.turns) for v in chain.values}
    mine = ranks.get(value)
    return mine is not None and all(r is None or r > mine for k, r in ranks.items() if k != value)


def score_question(
    chain: Chain, question: Question, ranked: Sequence[Iterable[str]]
) -> dict[str, float]:
    """The figures of one question from its ranked hits (each hit: its source turn ids)."""
    if question.type == "current":
        last = chain.values[-1]
        rank = _rank_of(ranked, last.turns)
        older = {t for v in chain.values[:-1] for t in v.turns}
        top = set(ranked[0]) if ranked else set()
        return {
            "current_p@1": float(rank == 1),
            "current_mrr": 1.0 / rank if rank else 0.0,
            "stale@1": float(bool(top & older)),
            "current_vs_old": float(_first_of_chain(chain, last.value, ranked)),
        }
    if question.type == "as_of":
        return {"as_of_acc": float(_first_of_chain(chain, question.expected, ranked))}
    if question.type == "previous":
        evidence = question.evidence or next(
            (v.turns for v in chain.values if v.value == question.expected), ()
        )
        rank = _rank_of(list(ranked), evidence)
        return {
            "previous_p@1": float(rank == 1),
            "previous_r@5": float(rank is not None and rank <= 5),
        }
    raise ValueError(f"unknown question type {question.type!r}")


def summarise(rows: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Means of each metric over the rows that have it, with their counts."""
    out: dict[str, Any] = {}
    for metric in METRICS:
        values = [r[metric] for r in rows if metric in r]
        out[metric] = round(float(np.mean(values)), 4) if values else None
    out["n_current"] = sum(1 for r in rows if "current_p@1" in r)
    out["n_as_of"] = sum(1 for r in rows if "as_of_acc" in r)
    out["n_previous"] = sum(1 for r in rows if "previous_r@5" in r)
    return out


# -- the run -------------------------------------------------------------------------------


def _run_mode(
    mode: Mode,
    convs: Sequence[Conversation],
    wrapped: _QueryVectors,
    top_k: int,
    details: bool,
    say: Callable[[str], None],
    retrieval: dict[str, Any] | None = None,
    use_as_of: bool = True,
    config: dict[str, Any] | None = None,
    llm: LLM | None = None,
    ask_at: AskAt = "end",
    derive: bool = False,
) -> dict[str, Any]:
    settings = _settings(config, retrieval)
    with (
        tempfile.TemporaryDirectory(prefix="engram-ku-") as tmp,
        Memory(
            Path(tmp) / "ku.db",
            settings or None,
            embedder=wrapped,
            llm=ScriptedLLM()
            if mode == "scripted"
            else llm
            if mode == "extracted" or _searches_with_llm(settings)
            else None,
        ) as memory,
    ):
        started = time.perf_counter()
        sources: dict[str, dict[str, list[str]]] = {}
        tally = {"changes": 0, "linked": 0}
        derived = {"linked": 0}
        for n, conv in enumerate(convs, 1):
            say(f"{mode}: ingesting {conv.id} ({n}/{len(convs)})")
            sources[conv.id] = ingest(memory, conv, mode, tally)
            if derive:
                # engram maintain --apply: derived supersessions, no LLM.
                done = memory.maintain(
                    user_id=conv.id,
                    expire=False,
                    duplicates=False,
                    supersessions=True,
                    apply=True,
                )
                derived["linked"] += done.counts()["supersessions_linked"]
        ingest_s = time.perf_counter() - started
        memories = memory.store.count()
        failed = (
            sum(len(memory.failures(user_id=c.id)) for c in convs) if mode == "extracted" else 0
        )
        asked_at = {c.id: _day_after(c) for c in convs} if ask_at == "end" else {}
        rows: list[tuple[str, dict[str, float]]] = []
        search_times: list[float] = []
        per_question: list[dict[str, Any]] = []
        say(f"{mode}: searching")
        for conv in convs:
            ids = sources[conv.id]
            for chain in conv.chains:
                for q in chain.questions:
                    if q.type == "as_of":
                        at = q.date if use_as_of else None
                    else:
                        at = asked_at.get(conv.id)
                    t0 = time.perf_counter()
                    found = memory.search(q.text, user_id=conv.id, top_k=top_k, as_of=at)["results"]
                    search_times.append(time.perf_counter() - t0)
                    ranked = [
                        stated_by_text(conv, r["memory"])
                        if mode == "extracted"
                        else ids.get(r["id"], [])
                        for r in found
                    ]
                    figures = score_question(chain, q, ranked)
                    # The same question at other top_k: is the first answer the same?
                    firsts = {found[0]["id"] if found else None}
                    for other in STABLE_KS:
                        if other != top_k:
                            cut = memory.search(q.text, user_id=conv.id, top_k=other, as_of=at)
                            firsts.add(cut["results"][0]["id"] if cut["results"] else None)
                    figures["top1_stable"] = float(len(firsts) == 1)
                    rows.append((chain.kind, figures))
                    if details:
                        per_question.append(
                            {
                                "conversation": conv.id,
                                "chain": chain.id,
                                "question": q.id,
                                "type": q.type,
                                "text": q.text,
                                "expected": q.expected,
                                "top5": [r["memory"] for r in found[:5]],
                                **figures,
                            }
                        )
    kinds = sorted({k for k, _ in rows})
    result: dict[str, Any] = {
        "memories": memories,
        **(
            {"links": {**tally, "share": round(tally["linked"] / max(1, tally["changes"]), 4)}}
            if mode == "scripted"
            else {}
        ),
        **({"derived_links": derived["linked"]} if derive else {}),
        "ingest_seconds": round(ingest_s, 2),
        **({"failed_adds": failed} if mode == "extracted" else {}),
        "overall": summarise([r for _, r in rows]),
        "by_kind": {k: summarise([r for kind, r in rows if kind == k]) for k in kinds},
        "latency": {"search": _latency(search_times)},
    }
    if details:
        result["details"] = per_question
    return result


def run(
    data: str | Path | None = None,
    *,
    modes: Sequence[Mode] = MODES,
    top_k: int = TOP_K,
    out: str | Path | None = None,
    embedder: Embedder | None = None,
    details: bool = False,
    progress: Callable[[str], None] | None = None,
    retrieval: dict[str, Any] | None = None,
    use_as_of: bool = True,
    config: dict[str, Any] | None = None,
    llm: LLM | None = None,
    conversations: int | None = None,
    ask_at: AskAt = "end",
    cache_dir: str | Path | None = None,
    derive: bool = False,
) -> dict[str, Any]:
    """Run the benchmark in each of ``modes``; returns the report (and writes ``out``).

    ``data`` defaults to the checked-in :data:`DEFAULT_DATA`; ``embedder``
    replaces the local model (tests); ``details`` adds every question's top 5;
    ``retrieval`` overrides retrieval settings (``{"recency_weight": 0.3}``);
    ``use_as_of=False`` asks the as-of questions without ``search(as_of=...)``;
    ``ask_at="clock"`` asks the now/before questions at the wall clock instead
    of the day after each conversation's last session.
    ``extracted`` mode extracts with ``llm``, else the LLM of ``config`` (a
    mem0-shaped dict, also used for the extraction settings) or of
    ``$ENGRAM_LLM``; replies are cached under ``cache_dir`` (reruns are free).
    ``conversations`` keeps the first N conversations (a real local model
    takes minutes per conversation). ``derive`` runs ``engram maintain --apply``
    (derived supersessions, no LLM) on each conversation after its ingestion.
    """
    say = progress or (lambda _msg: None)
    for mode in modes:
        if mode not in ALL_MODES:
            raise ValueError(f"mode must be one of {ALL_MODES}, got {mode!r}")
    if conversations is not None and conversations < 1:
        raise ValueError("conversations must be at least 1")
    if top_k < 5:
        raise ValueError("top_k must be at least 5 (previous_r@5 reads the first five)")
    path = Path(data) if data is not None else DEFAULT_DATA
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file (pass --data FILE)")
    raw = path.read_bytes()
    convs = load(path)[:conversations]
    base = embedder or make_embedder("local", {})
    cached: CachedLLM | None = None
    if "extracted" in modes or _searches_with_llm(_settings(config, retrieval)):
        inner = llm or build_llm(
            parse_config(config, None), "--mode extracted and an LLM reranker need an LLM"
        )
        cache_root = Path(cache_dir).expanduser() if cache_dir else Path(tempfile.mkdtemp())
        cached = CachedLLM(inner, cache_root)
    wrapped = _QueryVectors(base)
    questions = [q for conv in convs for c in conv.chains for q in c.questions]
    say(f"embedding {len(questions)} questions")
    embed_times: list[float] = []
    for q in questions:
        if q.text not in wrapped.vectors:
            t0 = time.perf_counter()
            wrapped.vectors[q.text] = base.embed_query(q.text)
            embed_times.append(time.perf_counter() - t0)
    report: dict[str, Any] = {
        "benchmark": "knowledge-update",
        "engramdb": __version__,
        "data": str(path),
        "data_sha256": hashlib.sha256(raw).hexdigest(),
        "embedder": base.model,
        "top_k": top_k,
        "conversations": len(convs),
        "chains": sum(len(c.chains) for c in convs),
        "turns": sum(len(s.turns) for c in convs for s in c.sessions),
        "questions": {
            t: sum(1 for q in questions if q.type == t) for t in ("current", "as_of", "previous")
        },
        "latency": {"embed_query": _latency(embed_times)},
        "retrieval": retrieval or {},
        "as_of_parameter": use_as_of,
        "asked_at": ask_at,
        "derive": derive,
        "modes": {
            m: _run_mode(
                m,
                convs,
                wrapped,
                top_k,
                details,
                say,
                retrieval,
                use_as_of,
                config,
                cached,
                ask_at,
                derive,
            )
            for m in modes
        },
    }
    if cached is not None:
        report["llm"] = {"model": cached.model, **cached.stats()}
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2), "utf-8")
    return report


def _cell(value: object) -> str:
    return f"{value:7.3f}" if isinstance(value, float) else f"{'-':>7s}"


def format_report(report: dict[str, Any]) -> str:
    """The report as plain-text tables, one per mode: overall, then per kind."""
    q = report["questions"]
    lines = [
        f"Knowledge updates: {report['conversations']} conversations, {report['chains']} "
        f"chains, {report['turns']} turns; questions: {q['current']} current, "
        f"{q['as_of']} as-of, {q['previous']} previous; top_k={report['top_k']}"
    ]
    header = f"{'mode':9s} {'kind':10s} {'mem':>6s} " + " ".join(f"{m:>14s}" for m in METRICS)
    for mode, figures in report["modes"].items():
        lines.append("")
        lines.append(header)
        rows = [("overall", figures["overall"]), *figures["by_kind"].items()]
        for name, row in rows:
            mem = str(figures["memories"]) if name == "overall" else ""
            lines.append(
                f"{mode:9s} {name:10s} {mem:>6s} "
                + " ".join(f"{_cell(row[m]):>14s}" for m in METRICS)
            )
        if "links" in figures:
            links = figures["links"]
            lines.append(
                f"{mode}: {links['linked']} of {links['changes']} changes linked "
                f"({links['share']:.3f}): the rest replaced a memory the request did not show"
            )
        lat = figures["latency"]["search"]
        if lat.get("n"):
            lines.append(
                f"{mode}: ingest {figures['ingest_seconds']:.1f} s; search (query vector "
                f"precomputed) p50 {lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms"
            )
    emb = report["latency"]["embed_query"]
    if emb.get("n"):
        lines.append(f"query embedding p50 {emb['p50_ms']:.1f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.knowledge_update``."""
    parser = argparse.ArgumentParser(
        prog="python -m engramdb_bench.knowledge_update", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", type=Path, help=f"data file (default: {DEFAULT_DATA})")
    parser.add_argument("--mode", choices=(*ALL_MODES, "all"), default="all")
    parser.add_argument("--config", type=Path, help="mem0-shaped JSON config (extracted mode)")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--cache", type=Path, help="cache of LLM replies (extracted mode)")
    parser.add_argument("--top-k", type=int, default=TOP_K)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--details", action="store_true", help="per-question top 5 in the JSON")
    parser.add_argument(
        "--retrieval", type=json.loads, help='retrieval settings as JSON: {"recency_weight": 0.3}'
    )
    parser.add_argument(
        "--ask-at",
        choices=("end", "clock"),
        default="end",
        help="when the now/before questions are asked: the day after the last session "
        "(default) or the wall clock",
    )
    parser.add_argument(
        "--no-as-of", action="store_true", help="ask as-of questions without search(as_of=)"
    )
    parser.add_argument(
        "--derive",
        action="store_true",
        help="run engram maintain --apply (derived supersessions) after each conversation",
    )
    args = parser.parse_args(argv)
    modes: tuple[Mode, ...] = MODES if args.mode == "all" else (args.mode,)
    report = run(
        args.data,
        modes=modes,
        top_k=args.top_k,
        out=args.out,
        details=args.details,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        retrieval=args.retrieval,
        use_as_of=not args.no_as_of,
        config=load_config_file(args.config),
        conversations=args.conversations,
        cache_dir=args.cache,
        ask_at=args.ask_at,
        derive=args.derive,
    )
    print(format_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
