"""The extraction benchmark: what ``add(infer=True)`` keeps of LoCoMo sessions.

Run::

    engram bench extraction --data locomo-dev.json --config llm.json [--sessions 10]
    python -m engramdb_bench.extraction ... (same options)

or call :func:`run`. It replays LoCoMo sessions through ``Memory.add`` with
the configured LLM (extraction on) and scores what was kept against LoCoMo's
``observation`` lists: facts written for the dataset, per dialogue turn, by
an LLM that saw the whole session.

**Input.** ``sessions`` sessions, taken round-robin over the conversations
(conversation 1 session 1, conversation 2 session 1, …, conversation 1
session 2, …), each conversation's in order, so later sessions see the
memories of earlier ones as a real deployment would. Each conversation is
one ``user_id``, each session one ``run_id``, the session date is the
``timestamp``, and ``turns_per_add`` turns (4) go into each ``add``. Both
speakers are people, so both are sent as ``user`` messages carrying their
names (``speaker_a``'s as a user and ``speaker_b``'s as the assistant would
tell the model that half the facts belong to an AI; ``role_map="locomo-qa"``
sends them that way, as ``engram bench locomo-qa`` does).

**Scores** (per session, then over all):

- ``fact_recall``: the share of the session's observations *covered* by a
  memory extracted from that session. The rule (:func:`covers`): the memory is
  about the same person (the first speaker named in each is the same one),
  and it holds at least ``LEXICAL_COVER`` (0.5) of the observation's content
  terms (lemmatised, stop words and the speakers' names left out) or its
  cosine similarity under the local embedding model is at least
  ``SEMANTIC_COVER`` (0.95). Chosen on one hand-judged sample of 40 pairs and
  checked on another (docs/benchmarks.md gives the agreement).
- ``self_contained``: the share of memories with no first- or second-person
  pronoun (``I``, ``my``, ``we``, ``you``…) and no unresolved relative time
  (``yesterday``, ``last week``, ``two days ago``, ``next month``,
  ``recently``…); both parts are reported too.
- ``verbatim``: memories that copy a message (nine tenths of their terms in
  one message's order-free term set and as long as the message).
- ``wrong_links``: links (``linked_memory_ids``) between memories that share
  neither a content term nor a cosine of ``LINK_RELATED``: a link that cannot
  be about the same thing.
- ``failures``: adds whose extraction failed (the messages were kept).
- per add: seconds, LLM calls, prompt and completion tokens.

``cache_dir`` keeps every LLM reply on disk, so a rerun with the same prompt
and model repays nothing. Nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engramdb import __version__
from engramdb.config import EngramConfig, parse_config
from engramdb.embedders import Embedder, make_embedder
from engramdb.errors import EngramError, ExtractionError
from engramdb.llms import LLM
from engramdb.memory import Memory
from engramdb.nlp import query_terms
from engramdb_bench._llm import CachedLLM, CountedLLM, build_llm, load_config_file
from engramdb_bench._locomo import (
    MISSING_DATA,
    Conversation,
    Session,
    data_path,
    default_data_path,
    load_conversations,
)

__all__ = [
    "LEXICAL_COVER",
    "LINK_RELATED",
    "SEMANTIC_COVER",
    "covers",
    "format_report",
    "main",
    "run",
    "select_sessions",
    "self_contained",
    "subject",
]

Echo = Callable[[str], None]
FORMAT = 1
DEFAULT_SESSIONS = 10
DEFAULT_TURNS_PER_ADD = 4
ROLE_MAPS = ("people", "locomo-qa")

LEXICAL_COVER = 0.5
"""Share of an observation's content terms a memory must hold to cover it."""
SEMANTIC_COVER = 0.95
"""Cosine (local embedding model) at which a memory of the same person covers an
observation whatever the words (0.9 let "Gina thanked Jon for his support" cover
"Gina appreciates Jon's determination")."""
LINK_RELATED = 0.8
"""Cosine above which two linked memories count as related without a shared term."""

_PERSONAL = re.compile(
    r"\b(?:I|I'm|I've|I'd|I'll|[Mm]e|[Mm]y|[Mm]ine|[Mm]yself|[Ww]e|[Uu]s|[Oo]ur|[Oo]urs|"
    r"[Oo]urselves|[Yy]ou|[Yy]our|[Yy]ours|[Yy]ourself|[Yy]ou're|[Yy]ou've|[Ww]e're)\b"
)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_PERIODS = f"week|weekend|month|year|summer|winter|spring|fall|autumn|night|morning|evening|{_DAYS}"
_RELATIVE = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|recently|lately|the other day|"
    rf"(?:last|next|this|coming|past) (?:{_PERIODS})|"
    r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|few|several|couple of)"
    r" (?:days?|weeks?|months?|years?) ago)\b",
    re.I,
)


def self_contained(text: str) -> tuple[bool, bool]:
    """``(has a first/second-person pronoun, has an unresolved relative time)`` of a memory."""
    return bool(_PERSONAL.search(text)), bool(_RELATIVE.search(text))


def _content_terms(text: str, names: frozenset[str]) -> set[str]:
    return {t for t in query_terms(text) if t not in names}


def _names(conv: Conversation) -> frozenset[str]:
    words = f"{conv.speaker_a} {conv.speaker_b}"
    return frozenset(query_terms(words))


def subject(text: str, speakers: Sequence[str]) -> str | None:
    """The speaker a text is about: the one it names first (``None`` if it names none)."""
    found = [
        (m.start(), name)
        for name in speakers
        if name and (m := re.search(rf"\b{re.escape(name)}\b", text)) is not None
    ]
    return min(found)[1] if found else None


def covers(
    observation: set[str],
    memory: set[str],
    cosine: float,
    *,
    same_subject: bool = True,
) -> bool:
    """Whether a memory covers an observation (see the module docstring for the rule).

    ``same_subject``: whether both name the same speaker first (or the
    observation names none); "John made peach cobbler" does not cover
    "Maria made peach cobbler", however many words they share.
    """
    if not same_subject:
        return False
    if cosine >= SEMANTIC_COVER:
        return True
    if not observation:
        return False
    return len(observation & memory) / len(observation) >= LEXICAL_COVER


# ------------------------------------------------------------------- the input


def select_sessions(
    conversations: Sequence[Conversation], count: int
) -> list[tuple[Conversation, list[Session]]]:
    """``count`` sessions round-robin over the conversations, each conversation's in order."""
    chosen: dict[str, list[Session]] = {c.sample_id: [] for c in conversations}
    left = count
    depth = 0
    while left > 0 and any(depth < len(c.sessions) for c in conversations):
        for conv in conversations:
            if left > 0 and depth < len(conv.sessions) and conv.sessions[depth].turns:
                chosen[conv.sample_id].append(conv.sessions[depth])
                left -= 1
        depth += 1
    return [(c, chosen[c.sample_id]) for c in conversations if chosen[c.sample_id]]


def _messages(conv: Conversation, turns: Sequence[Any], role_map: str) -> list[dict[str, Any]]:
    out = conv.messages(list(turns))
    if role_map == "people":
        for message in out:
            message["role"] = "user"
    return [m for m in out if str(m["content"]).strip()]


# -------------------------------------------------------------------- scoring


@dataclass
class _Add:
    conversation: str
    session: int
    turns: str
    seconds: float = 0.0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    memories: int = 0
    failure: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _SessionScore:
    conversation: str
    session: int
    observations: int = 0
    covered: int = 0
    memories: int = 0
    personal: int = 0
    relative: int = 0
    flagged: int = 0
    """Memories with a pronoun, a relative time or both (each counted once)."""
    verbatim: int = 0
    links: int = 0
    wrong_links: int = 0
    failures: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "samples"}
        out["fact_recall"] = (
            round(self.covered / self.observations, 3) if self.observations else None
        )
        return out


def _embed(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    # Rows come L2-normalised (the Embedder contract): products are cosines.
    return np.asarray(embedder.embed_documents(list(texts)), dtype=np.float32)


def _score_session(
    mem: Memory,
    conv: Conversation,
    session: Session,
    failures: int,
) -> _SessionScore:
    names = _names(conv)
    run_id = f"session_{session.number}"
    rows = mem.get_all(user_id=conv.sample_id, run_id=run_id, limit=10_000)["results"]
    texts = [str(r["memory"]) for r in rows]
    observations = [
        fact
        for turn in session.turns
        for _speaker, fact in conv.observations.get(turn.dia_id, ())
        if fact.strip()
    ]
    speakers = (conv.speaker_a, conv.speaker_b)
    obs_terms = [_content_terms(o, names) for o in observations]
    obs_subjects = [subject(o, speakers) for o in observations]
    mem_subjects = [subject(t, speakers) for t in texts]
    mem_terms = [_content_terms(t, names) for t in texts]
    obs_vecs = _embed(mem.embedder, observations)
    mem_vecs = _embed(mem.embedder, texts)
    sims = obs_vecs @ mem_vecs.T if texts and observations else np.zeros((len(observations), 0))
    score = _SessionScore(
        conv.sample_id,
        session.number,
        observations=len(observations),
        memories=len(texts),
        failures=failures,
    )
    for i, terms in enumerate(obs_terms):
        best = -1
        hit = False
        for j in range(len(texts)):
            same = obs_subjects[i] is None or obs_subjects[i] == mem_subjects[j]
            if covers(terms, mem_terms[j], float(sims[i, j]), same_subject=same):
                hit = True
                best = j
                break
        if not hit and texts:
            best = int(np.argmax(sims[i]))
        score.covered += int(hit)
        score.samples.append(
            {
                "observation": observations[i],
                "memory": texts[best] if best >= 0 else None,
                "cosine": round(float(sims[i, best]), 3) if best >= 0 else None,
                "lexical": round(len(terms & mem_terms[best]) / len(terms), 3)
                if best >= 0 and terms
                else None,
                "covered": hit,
            }
        )
    # What the speaker typed, without a photo's caption: what a copy would repeat.
    message_terms = [set(query_terms(t.text)) for t in session.turns if t.text.strip()]
    by_id = {str(r["id"]): k for k, r in enumerate(rows)}
    for k, (row, text) in enumerate(zip(rows, texts, strict=True)):
        personal, relative = self_contained(text)
        score.personal += int(personal)
        score.relative += int(relative)
        score.flagged += int(personal or relative)
        terms = set(query_terms(text))
        if terms and any(
            len(terms & m) >= 0.9 * len(terms) and len(terms) >= 0.9 * len(m) for m in message_terms
        ):
            score.verbatim += 1
        for linked in row.get("linked_memory_ids") or ():
            score.links += 1
            other = mem.get(str(linked))
            if other is None:
                score.wrong_links += 1
                continue
            other_text = str(other["memory"])
            found = by_id.get(str(linked))
            other_vec = (
                mem_vecs[found] if found is not None else _embed(mem.embedder, [other_text])[0]
            )
            related = float(mem_vecs[k] @ other_vec) >= LINK_RELATED or bool(
                mem_terms[k] & _content_terms(other_text, names)
            )
            score.wrong_links += int(not related)
    return score


# ---------------------------------------------------------------------- run


def _build_llm(config: EngramConfig) -> LLM:
    return build_llm(config, "the extraction benchmark needs an LLM")


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _summary(scores: Sequence[_SessionScore], adds: Sequence[_Add]) -> dict[str, Any]:
    obs = sum(s.observations for s in scores)
    memories = sum(s.memories for s in scores)
    personal = sum(s.personal for s in scores)
    relative = sum(s.relative for s in scores)
    contained = memories - sum(s.flagged for s in scores)
    links = sum(s.links for s in scores)
    seconds = [a.seconds for a in adds]
    ok = [a for a in adds if a.failure is None]
    recalls = [s.covered / s.observations for s in scores if s.observations]
    return {
        "sessions": len(scores),
        "adds": len(adds),
        "observations": obs,
        "memories": memories,
        "memories_per_observation": _ratio(memories, obs),
        "fact_recall": _ratio(sum(s.covered for s in scores), obs),
        "fact_recall_session_min": round(min(recalls), 3) if recalls else None,
        "fact_recall_session_max": round(max(recalls), 3) if recalls else None,
        "self_contained": _ratio(contained, memories),
        "personal_pronoun": _ratio(personal, memories),
        "relative_time": _ratio(relative, memories),
        "verbatim": _ratio(sum(s.verbatim for s in scores), memories),
        "links": links,
        "wrong_links": sum(s.wrong_links for s in scores),
        "failures": sum(1 for a in adds if a.failure is not None),
        "seconds_per_add": round(statistics.fmean(seconds), 2) if seconds else None,
        "seconds_per_add_p95": round(float(np.percentile(seconds, 95)), 2) if seconds else None,
        "prompt_tokens_per_add": round(statistics.fmean(a.prompt_tokens for a in ok), 1)
        if ok
        else None,
        "completion_tokens_per_add": round(statistics.fmean(a.completion_tokens for a in ok), 1)
        if ok
        else None,
        "llm_calls_per_add": round(statistics.fmean(a.llm_calls for a in adds), 2)
        if adds
        else None,
    }


def format_report(report: Mapping[str, Any]) -> str:
    """The report as a few readable lines."""
    s = report["summary"]
    cfg = report["config"]

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f} %"

    lines = [
        f"extraction with {cfg['model']} ({cfg['extraction_mode']}), {s['sessions']} sessions, "
        f"{s['adds']} adds of {cfg['turns_per_add']} turns",
        f"  fact recall        {pct(s['fact_recall'])} of {s['observations']} observations "
        f"(sessions {pct(s['fact_recall_session_min'])} to {pct(s['fact_recall_session_max'])})",
        f"  memories           {s['memories']} ({s['memories_per_observation']} per observation)",
        f"  self-contained     {pct(s['self_contained'])} (I/you: {pct(s['personal_pronoun'])}, "
        f"relative time: {pct(s['relative_time'])})",
        f"  verbatim copies    {pct(s['verbatim'])}",
        f"  links              {s['links']}, of which wrong {s['wrong_links']}",
        f"  failures           {s['failures']} of {s['adds']} adds",
        f"  per add            {s['seconds_per_add']} s (p95 {s['seconds_per_add_p95']} s), "
        f"{s['llm_calls_per_add']} LLM calls, {s['prompt_tokens_per_add']} prompt + "
        f"{s['completion_tokens_per_add']} completion tokens",
    ]
    return "\n".join(lines)


def run(
    data: str | Path | None = None,
    *,
    config: EngramConfig | dict[str, Any] | None = None,
    llm: LLM | None = None,
    embedder: Embedder | None = None,
    sessions: int = DEFAULT_SESSIONS,
    turns_per_add: int = DEFAULT_TURNS_PER_ADD,
    role_map: str = "people",
    cache_dir: str | Path | None = None,
    out: str | Path | None = None,
    samples_out: str | Path | None = None,
    echo: Echo | None = print,
) -> dict[str, Any]:
    """Replay LoCoMo sessions through ``add(infer=True)``; score; print; return the report.

    Args:
        data: a LoCoMo-format JSON file; ``None``: ``$ENGRAM_LOCOMO``.
        config: a mem0-shaped config (its ``llm``, ``embedder`` and
            ``extraction`` sections are used; the store is a temporary file).
        llm: the LLM; default the config's, else ``ENGRAM_LLM``.
        embedder: default the config's (the local model); also scores coverage.
        sessions: how many sessions (round-robin over the conversations).
        turns_per_add: dialogue turns per ``add()``.
        role_map: ``"people"`` (both speakers as named users) or
            ``"locomo-qa"`` (``speaker_b`` as the assistant).
        cache_dir: keep LLM replies here across runs.
        out: write the report as JSON here too.
        samples_out: write every observation with its best memory (the
            material for checking the coverage rule by hand) as JSON lines.
        echo: receives progress lines and the summary; ``None`` is silent.

    Raises:
        ConfigError: no LLM configured.
        ValueError: a bad option.
        FileNotFoundError: no data file.
    """
    say: Echo = echo if echo is not None else (lambda _line: None)
    if sessions < 1 or turns_per_add < 1:
        raise ValueError("sessions and turns_per_add must be >= 1")
    if role_map not in ROLE_MAPS:
        raise ValueError(f"role_map must be one of {', '.join(ROLE_MAPS)}, got {role_map!r}")
    path = data_path(data)
    if not path.is_file():
        raise FileNotFoundError(f"LoCoMo file not found: {path}")
    cfg = parse_config(config, None)
    plan = select_sessions(load_conversations(path), sessions)
    base_llm = llm if llm is not None else _build_llm(cfg)
    emb = embedder or make_embedder(cfg.embedder.provider, dict(cfg.embedder.config))
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    wall = time.perf_counter()
    adds: list[_Add] = []
    scores: list[_SessionScore] = []
    total_adds = sum(
        -(-len(_messages(c, s.turns, role_map)) // turns_per_add) for c, ss in plan for s in ss
    )
    with tempfile.TemporaryDirectory(prefix="engramdb-extraction-") as tmp:
        root = Path(cache_dir).expanduser() if cache_dir is not None else Path(tmp)
        cached = CachedLLM(base_llm, root / "llm")
        say(
            f"{sum(len(ss) for _, ss in plan)} session(s) of {len(plan)} conversation(s), "
            f"{total_adds} adds; model {base_llm.model}; "
            f"cache {root if cache_dir is not None else '(none)'}"
        )
        for conv, chosen in plan:
            db = Path(tmp) / f"{conv.sample_id}.db"
            with Memory(db, cfg, embedder=emb, llm=cached, actor="bench") as mem:
                for session in chosen:
                    messages = _messages(conv, session.turns, role_map)
                    failed = 0
                    for start in range(0, len(messages), turns_per_add):
                        part = messages[start : start + turns_per_add]
                        counted = CountedLLM(cached)
                        mem.llm = counted
                        began = time.perf_counter()
                        record = _Add(
                            conv.sample_id, session.number, f"{start + 1}-{start + len(part)}"
                        )
                        try:
                            result = mem.add(
                                part,
                                user_id=conv.sample_id,
                                run_id=f"session_{session.number}",
                                timestamp=session.date,
                            )
                            record.memories = len(result["results"])
                        except ExtractionError as exc:
                            record.failure = exc.reason
                            failed += 1
                        record.seconds = round(time.perf_counter() - began, 3)
                        figures = counted.figures()
                        record.llm_calls = figures["llm_calls"]
                        record.prompt_tokens = figures["prompt_tokens"]
                        record.completion_tokens = figures["completion_tokens"]
                        adds.append(record)
                        say(
                            f"  [{len(adds)}/{total_adds}] {conv.sample_id} s{session.number} "
                            f"turns {record.turns}: "
                            + (
                                f"failed ({record.failure})"
                                if record.failure
                                else f"{record.memories} memories"
                            )
                            + f" in {record.seconds:.1f} s"
                        )
                    scores.append(_score_session(mem, conv, session, failed))
        llm_stats = cached.stats()
    report: dict[str, Any] = {
        "benchmark": "engramdb_bench.extraction",
        "format": FORMAT,
        "engramdb": __version__,
        "started_at": started_at,
        "seconds": round(time.perf_counter() - wall, 1),
        "config": {
            "data": str(path),
            "model": base_llm.model,
            "extraction_mode": cfg.extraction.mode,
            "sessions": sessions,
            "turns_per_add": turns_per_add,
            "role_map": role_map,
            "embedder": emb.model,
            "lexical_cover": LEXICAL_COVER,
            "semantic_cover": SEMANTIC_COVER,
            "link_related": LINK_RELATED,
        },
        "summary": _summary(scores, adds),
        "llm": llm_stats,
        "sessions": [s.as_dict() for s in scores],
        "adds": [a.as_dict() for a in adds],
    }
    say("")
    say(format_report(report))
    if out is not None:
        _write(Path(out), json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        say(f"wrote {out}")
    if samples_out is not None:
        lines = (
            json.dumps(
                {"conversation": s.conversation, "session": s.session, **x}, ensure_ascii=False
            )
            for s in scores
            for x in s.samples
        )
        _write(Path(samples_out), "".join(line + "\n" for line in lines))
        say(f"wrote {samples_out}")
    return report


def _write(path: Path, text: str) -> None:
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m engramdb_bench.extraction``."""
    parser = argparse.ArgumentParser(
        prog="python -m engramdb_bench.extraction",
        description="What add(infer=True) keeps of LoCoMo sessions, against their observations.",
    )
    parser.add_argument(
        "--data", type=Path, help="LoCoMo-format JSON file (default: $ENGRAM_LOCOMO)"
    )
    parser.add_argument("--config", type=Path, help="mem0-shaped JSON config (llm section)")
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS)
    parser.add_argument("--turns-per-add", type=int, default=DEFAULT_TURNS_PER_ADD)
    parser.add_argument("--roles", choices=ROLE_MAPS, default="people")
    parser.add_argument("--cache", type=Path, help="cache directory for LLM replies")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--samples", type=Path, help="write observation/memory pairs (JSONL)")
    args = parser.parse_args(argv)
    if args.data is None and default_data_path() is None:
        parser.error(MISSING_DATA)
    try:
        run(
            args.data,
            config=load_config_file(args.config),
            sessions=args.sessions,
            turns_per_add=args.turns_per_add,
            role_map=args.roles,
            cache_dir=args.cache,
            out=args.out,
            samples_out=args.samples,
        )
    except (EngramError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
