"""LoCoMo question answering, end to end, against any configured LLM.

Run::

    engram bench locomo-qa --data locomo10.json [--limit N] [--cache DIR] [--top-k K]
    python -m engramdb_bench.locomo_qa --data ... (same options)

or call :func:`run`. For each conversation of a LoCoMo-format file:

1. **Ingest**: every session is replayed through ``Memory.add`` in chunks of
   a few turns, with the session's date as ``timestamp``, the speakers' names
   on the messages (``speaker_a`` as the user, ``speaker_b`` as the
   assistant), one ``user_id`` per conversation and one ``run_id`` per
   session. By default the configured LLM extracts memories (``infer=True``);
   with ``infer=False`` (``--no-infer``) nothing is extracted and ``keys``
   says what is stored verbatim: the dialogue ``turns``, or LoCoMo's own
   ``facts`` (its ``observation`` lists, written by an LLM for the dataset).
2. **Answer** every question from the top-k memories ``Memory.search``
   returns for the conversation's user (prompt: ``prompts/locomo_answer_v1.txt``).
3. **Score**: an LLM judge labels each answer CORRECT or WRONG against the
   gold answer (``prompts/locomo_judge_v1.txt``, JSON reply): that is *J*.
   Token F1 and BLEU-1 (:mod:`engramdb_bench.qa_metrics`) are computed too.

Figures are reported per LoCoMo category number: 1-4 (in the dataset's
README 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop), and their
total; category 5 (adversarial: the conversation does not hold the answer,
the correct reply says so) is reported apart and left out of the total. Per
question: retrieval time, the LLM latency and tokens of the answer and of the
judge call; per conversation: ingestion time, LLM calls and tokens.

**Cache** (``cache_dir``): every LLM call is stored on disk under the hash of
model, messages, schema and per-call options (:class:`CachedLLM`), so a
rerun repays nothing; and each conversation's ingested database is kept under
a key of (data file, conversation, model, ingestion settings), so reruns with
another ``limit`` or ``top_k`` skip ingestion. Without a cache directory
everything lives in a temporary directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from engramdb import __version__
from engramdb.config import EngramConfig, parse_config
from engramdb.embedders import Embedder, make_embedder
from engramdb.errors import EngramError, ExtractionError, ReplyFormatError
from engramdb.extract.repair import repair_json, strip_reasoning
from engramdb.llms import LLM, Completion, make_llm, parse_llm_spec
from engramdb.memory import Memory
from engramdb_bench._llm import CachedLLM, CountedLLM, build_llm, cache_key, load_config_file
from engramdb_bench._locomo import (
    MISSING_DATA,
    QA,
    Conversation,
    Session,
    data_path,
    default_data_path,
    load_conversations,
)
from engramdb_bench.qa_metrics import bleu1, token_f1

__all__ = [
    "ANSWER_PROMPT",
    "JUDGE_PROMPT",
    "JUDGE_SCHEMA",
    "NOT_MENTIONED",
    "CachedLLM",
    "answer_messages",
    "judge_messages",
    "main",
    "parse_judgement",
    "run",
]

Echo = Callable[[str], None]

ANSWER_PROMPT = "locomo_answer_v1.txt"
JUDGE_PROMPT = "locomo_judge_v1.txt"
NOT_MENTIONED = "Not mentioned in the conversation"
"""What the answer prompt asks for when the memories hold no answer; the
gold answer of category 5 (adversarial) questions."""
ADVERSARIAL = 5
CATEGORIES = (1, 2, 3, 4)
KEYS = ("turns", "facts")
DEFAULT_TOP_K = 10
DEFAULT_TURNS_PER_ADD = 4
FORMAT = 1

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "label": {"type": "string", "enum": ["CORRECT", "WRONG"]},
    },
    "required": ["reasoning", "label"],
}
"""The judge's reply: ``{"reasoning": "...", "label": "CORRECT" | "WRONG"}``."""


@cache
def _prompt(name: str) -> str:
    return (resources.files("engramdb_bench") / "prompts" / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------- the prompts


def _day(value: object) -> str:
    return str(value)[:10] if value else "undated"


def answer_messages(question: str, memories: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The answer call: the static prompt, then the memories and the question.

    Each memory is one line ``[n] (YYYY-MM-DD) text``; a dialogue turn stored
    verbatim (metadata ``{"locomo": "turn"}``) is shown as ``Speaker: text``.
    """
    lines = []
    for n, mem in enumerate(memories, 1):
        text = " ".join(str(mem.get("memory") or "").split())
        if (mem.get("metadata") or {}).get("locomo") == "turn" and mem.get("actor_id"):
            text = f"{mem['actor_id']}: {text}"
        lines.append(f"[{n}] ({_day(mem.get('observed_at') or mem.get('created_at'))}) {text}")
    listing = "\n".join(lines) if lines else "(no memories found)"
    return [
        {"role": "system", "content": _prompt(ANSWER_PROMPT)},
        {"role": "user", "content": f"Memories:\n{listing}\n\nQuestion: {question}"},
    ]


def judge_messages(question: str, gold: str, candidate: str) -> list[dict[str, Any]]:
    """The judge call: the static prompt, then question, gold answer and candidate."""
    body = (
        f"Question: {' '.join(question.split())}\n"
        f"Gold answer: {' '.join(gold.split())}\n"
        f"Candidate answer: {' '.join(candidate.split()) or '(empty)'}"
    )
    return [
        {"role": "system", "content": _prompt(JUDGE_PROMPT)},
        {"role": "user", "content": body},
    ]


_LABEL = re.compile(r"\b(CORRECT|WRONG)\b")


def parse_judgement(text: str) -> tuple[bool | None, str]:
    """Read the judge's reply: ``(True/False, reasoning)``, or ``(None, why)`` if unreadable.

    JSON first (code fences and similar faults repaired), else the last bare
    ``CORRECT``/``WRONG`` in the text.
    """
    try:
        value, _ = repair_json(text)
    except ReplyFormatError:
        value = None
    if isinstance(value, dict):
        label = str(value.get("label") or value.get("Label") or "").strip().upper()
        if label in ("CORRECT", "WRONG"):
            return label == "CORRECT", str(value.get("reasoning") or "")
    body, _ = strip_reasoning(text if isinstance(text, str) else "")
    found = _LABEL.findall(body)
    if found:
        return found[-1] == "CORRECT", "label read from prose"
    return None, "no CORRECT/WRONG label in the judge's reply"


def _clean_answer(text: str) -> str:
    body, _ = strip_reasoning(text)
    body = body.strip()
    if body.lower().startswith("answer:"):
        body = body[7:].strip()
    return " ".join(body.split())


# ------------------------------------------------------------------ ingestion


@dataclass
class _Settings:
    top_k: int
    infer: bool
    keys: str
    turns_per_add: int
    config: EngramConfig
    data_digest: str


_EVIDENCE = re.compile(r"^D(\d+):")


def _first_sessions(conv: Conversation, count: int) -> Conversation:
    """``conv`` cut to its first ``count`` sessions, with the questions they answer.

    A question stays when it names evidence and every piece lies in those
    sessions; one without evidence cannot be placed, so it goes.
    """
    kept = conv.sessions[:count]
    numbers = {s.number for s in kept}

    def inside(qa: QA) -> bool:
        found = [_EVIDENCE.match(e) for e in qa.evidence]
        return bool(found) and all(m is not None and int(m.group(1)) in numbers for m in found)

    return dataclasses.replace(conv, sessions=kept, qa=tuple(q for q in conv.qa if inside(q)))


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fp:
        for block in iter(lambda: fp.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _db_key(conv: Conversation, model: str, embedder: str, settings: _Settings) -> str:
    return cache_key(
        model,
        {
            "format": FORMAT,
            "data": settings.data_digest,
            "conversation": conv.sample_id,
            "sessions": len(conv.sessions),
            "embedder": embedder,
            "infer": settings.infer,
            "keys": settings.keys,
            "turns_per_add": settings.turns_per_add,
            "extraction": settings.config.extraction.model_dump(mode="json"),
            # Another engramdb or extraction prompt may extract other memories.
            "engramdb": __version__,
            "prompts": _extraction_prompts_digest() if settings.infer else None,
        },
    )[:32]


@cache
def _extraction_prompts_digest() -> str:
    digest = hashlib.sha256()
    folder = resources.files("engramdb.extract") / "prompts"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".txt"):
            digest.update(entry.name.encode("utf-8") + b"\0" + entry.read_bytes())
    return digest.hexdigest()


def _ingest_turns(mem: Memory, conv: Conversation, session: Session, s: _Settings) -> list[str]:
    """Add one session's turns; return one line per failed extraction (its messages are kept)."""
    failures = []
    run_id = f"session_{session.number}"
    if s.infer:
        for start in range(0, len(session.turns), s.turns_per_add):
            part = session.turns[start : start + s.turns_per_add]
            try:
                mem.add(
                    conv.messages(part),
                    user_id=conv.sample_id,
                    run_id=run_id,
                    timestamp=session.date,
                )
            except ExtractionError as exc:
                failures.append(f"{conv.sample_id} session {session.number}: {exc.reason}")
        return failures
    # Verbatim: each turn becomes a memory whose actor_id is the speaker.
    messages = [m for m in conv.messages(session.turns) if m["content"].strip()]
    for start in range(0, len(messages), 32):
        mem.add(
            messages[start : start + 32],
            user_id=conv.sample_id,
            run_id=run_id,
            timestamp=session.date,
            metadata={"locomo": "turn"},
            infer=False,
        )
    return failures


def _ingest_facts(mem: Memory, conv: Conversation, session: Session) -> None:
    run_id = f"session_{session.number}"
    seen: set[str] = set()
    texts = []
    for turn in session.turns:
        for _, fact in conv.observations.get(turn.dia_id, ()):
            if fact not in seen:
                seen.add(fact)
                texts.append({"role": "user", "content": fact})
    for start in range(0, len(texts), 32):
        mem.add(
            texts[start : start + 32],
            user_id=conv.sample_id,
            run_id=run_id,
            timestamp=session.date,
            infer=False,
        )


def _ingest(
    conv: Conversation,
    llm: CachedLLM,
    embedder: Embedder,
    settings: _Settings,
    db_dir: Path,
) -> tuple[Path, dict[str, Any]]:
    """The conversation's database, built now or found in the cache."""
    key = _db_key(conv, llm.model, embedder.model, settings)
    final = db_dir / f"{conv.sample_id}-{key}"
    done = final / "ingest.json"
    if done.is_file():
        found: dict[str, Any] = json.loads(done.read_text(encoding="utf-8"))
        found["cached"] = True
        return final / "memory.db", found
    work = db_dir / f".building-{conv.sample_id}-{key}-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    counted = CountedLLM(llm)
    started = time.perf_counter()
    failures: list[str] = []
    mem = Memory(work / "memory.db", settings.config, embedder=embedder, llm=counted)
    with mem:
        for session in conv.sessions:
            if settings.keys == "facts":
                _ingest_facts(mem, conv, session)
            else:
                failures += _ingest_turns(mem, conv, session, settings)
        memories = mem.store.count()
    info: dict[str, Any] = {
        "conversation": conv.sample_id,
        "sessions": len(conv.sessions),
        "turns": sum(len(s.turns) for s in conv.sessions),
        "memories": memories,
        "seconds": round(time.perf_counter() - started, 2),
        "extraction_failures": failures,
        **counted.figures(),
    }
    done_tmp = work / "ingest.json"
    done_tmp.write_text(json.dumps(info, indent=1), encoding="utf-8")
    if final.exists():  # another run finished it meanwhile
        shutil.rmtree(work, ignore_errors=True)
    else:
        os.replace(work, final)
    info["cached"] = False
    return final / "memory.db", info


# ---------------------------------------------------------------- questions


@dataclass
class _Result:
    conversation: str
    index: int
    category: int
    question: str
    gold: str
    answer: str = ""
    correct: bool | None = None
    judge_note: str = ""
    f1: float = 0.0
    bleu1: float = 0.0
    retrieved: int = 0
    retrieval_ms: float = 0.0
    answer_latency_s: float = 0.0
    judge_latency_s: float = 0.0
    answer_tokens: dict[str, int] = field(default_factory=dict)
    judge_tokens: dict[str, int] = field(default_factory=dict)
    cached: int = 0
    seconds: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["f1"] = round(self.f1, 4)
        out["bleu1"] = round(self.bleu1, 4)
        out["retrieval_ms"] = round(self.retrieval_ms, 2)
        out["answer_latency_s"] = round(self.answer_latency_s, 3)
        out["judge_latency_s"] = round(self.judge_latency_s, 3)
        out["seconds"] = round(self.seconds, 3)
        return out


def _gold(qa: QA) -> str:
    if qa.category == ADVERSARIAL:
        return NOT_MENTIONED
    return qa.answer


def _tokens(completion: Completion) -> dict[str, int]:
    return {
        "prompt": completion.usage.prompt_tokens,
        "completion": completion.usage.completion_tokens,
    }


def _ask(
    mem: Memory,
    conv: Conversation,
    index: int,
    qa: QA,
    llm: CachedLLM,
    judge: CachedLLM,
    top_k: int,
) -> _Result:
    res = _Result(conv.sample_id, index, qa.category, qa.question, _gold(qa))
    started = time.perf_counter()
    try:
        t0 = time.perf_counter()
        hits = mem.search(qa.question, user_id=conv.sample_id, top_k=top_k)["results"]
        res.retrieval_ms = (time.perf_counter() - t0) * 1e3
        res.retrieved = len(hits)
        answered, hit = llm.complete_ex(answer_messages(qa.question, hits))
        res.cached += int(hit)
        res.answer = _clean_answer(answered.text)
        res.answer_latency_s = answered.latency_s
        res.answer_tokens = _tokens(answered)
        judged, hit = judge.complete_ex(
            judge_messages(qa.question, res.gold, res.answer),
            schema=JUDGE_SCHEMA,
            schema_name="judgement",
        )
        res.cached += int(hit)
        res.correct, res.judge_note = parse_judgement(judged.text)
        res.judge_latency_s = judged.latency_s
        res.judge_tokens = _tokens(judged)
    except EngramError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.f1 = token_f1(res.answer, res.gold)
    res.bleu1 = bleu1(res.answer, res.gold)
    res.seconds = time.perf_counter() - started
    return res


# ------------------------------------------------------------------ summary


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _p(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 4)


def summarize(results: Sequence[_Result]) -> dict[str, Any]:
    """J, F1, BLEU-1, latency and tokens of a group of answered questions.

    ``j`` counts an unreadable judgement or a failed question as WRONG;
    ``judge_unreadable`` and ``errors`` say how many there were.
    """
    n = len(results)
    answer_prompt = [r.answer_tokens.get("prompt", 0) for r in results]
    answer_completion = [r.answer_tokens.get("completion", 0) for r in results]
    judge_total = [sum(r.judge_tokens.values()) for r in results]
    latency = [r.answer_latency_s for r in results]
    return {
        "n": n,
        "j": _mean([1.0 if r.correct else 0.0 for r in results]),
        "f1": _mean([r.f1 for r in results]),
        "bleu1": _mean([r.bleu1 for r in results]),
        "judge_unreadable": sum(1 for r in results if r.correct is None and r.error is None),
        "errors": sum(1 for r in results if r.error is not None),
        "retrieval_ms_mean": _mean([r.retrieval_ms for r in results]),
        "answer_latency_s": {
            "mean": _mean(latency),
            "p50": _p(latency, 0.5),
            "p95": _p(latency, 0.95),
        },
        "judge_latency_s_mean": _mean([r.judge_latency_s for r in results]),
        "answer_prompt_tokens_mean": _mean(answer_prompt),
        "answer_completion_tokens_mean": _mean(answer_completion),
        "judge_tokens_mean": _mean(judge_total),
    }


def _summary(results: Sequence[_Result]) -> dict[str, Any]:
    by_cat = {c: [r for r in results if r.category == c] for c in CATEGORIES}
    return {
        "categories": {str(c): summarize(rs) for c, rs in by_cat.items() if rs},
        "overall_1_4": summarize([r for r in results if r.category in CATEGORIES]),
        "adversarial_5": summarize([r for r in results if r.category == ADVERSARIAL]),
    }


def format_report(report: Mapping[str, Any]) -> str:
    """The report's tables as text."""
    s = report["summary"]
    rows = [(f"category {c}", v) for c, v in s["categories"].items()]
    rows += [("total 1-4", s["overall_1_4"]), ("category 5 (apart)", s["adversarial_5"])]
    lines = [
        f"LoCoMo QA: model {report['config']['model']}, judge {report['config']['judge_model']}, "
        f"top_k {report['config']['top_k']}, "
        + (
            "memories extracted by the LLM"
            if report["config"]["infer"]
            else f"{report['config']['keys']} stored verbatim"
        ),
        f"{'':<19} {'n':>5} {'J':>6} {'F1':>6} {'BLEU-1':>7} {'ans s':>7} "
        f"{'ans tok':>8} {'judge tok':>9} {'search ms':>9}",
    ]
    for name, v in rows:
        if not v["n"]:
            continue
        lines.append(
            f"{name:<19} {v['n']:>5} {v['j']:>6.3f} {v['f1']:>6.3f} {v['bleu1']:>7.3f} "
            f"{v['answer_latency_s']['mean']:>7.2f} "
            f"{v['answer_prompt_tokens_mean'] + v['answer_completion_tokens_mean']:>8.0f} "
            f"{v['judge_tokens_mean']:>9.0f} {v['retrieval_ms_mean']:>9.1f}"
        )
    ing = report["ingestion"]
    lines.append(
        f"ingestion: {len(ing)} conversation(s), "
        f"{sum(i['memories'] for i in ing)} memories, "
        f"{sum(i['llm_calls'] for i in ing)} LLM calls "
        f"({sum(i['prompt_tokens'] + i['completion_tokens'] for i in ing)} tokens), "
        f"{sum(1 for i in ing if i['cached'])} from the cache"
    )
    llm = report["llm"]
    lines.append(
        f"LLM calls this run: {llm['cache_misses']} sent, {llm['cache_hits']} from the cache"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------- run


def _build_llm(config: EngramConfig) -> LLM:
    return build_llm(config, "locomo-qa needs an LLM to answer and judge (and to extract memories)")


def run(
    data: str | Path | None = None,
    *,
    config: EngramConfig | dict[str, Any] | None = None,
    llm: LLM | None = None,
    judge_llm: LLM | None = None,
    embedder: Embedder | None = None,
    cache_dir: str | Path | None = None,
    limit: int | None = None,
    top_k: int = DEFAULT_TOP_K,
    infer: bool = True,
    keys: str = "turns",
    turns_per_add: int = DEFAULT_TURNS_PER_ADD,
    workers: int = 4,
    sessions: int | None = None,
    out: str | Path | None = None,
    echo: Echo | None = print,
) -> dict[str, Any]:
    """Run the LoCoMo QA evaluation; print the tables through ``echo``; return the report.

    Args:
        data: a LoCoMo-format JSON file; ``None``: ``$ENGRAM_LOCOMO``
            (:class:`~engramdb_bench._locomo.MissingDataError` if unset).
        config: a mem0-shaped config (its ``llm``, ``embedder``, ``extraction``
            and ``retrieval`` sections are used; the store path is ignored).
        llm: the LLM; default the config's, else ``ENGRAM_LLM``.
        judge_llm: the judge; default ``llm``.
        embedder: default the config's (the local model).
        cache_dir: keep LLM replies and ingested databases here across runs.
        limit: answer at most this many questions (in file order); only the
            conversations they belong to are ingested.
        top_k: memories retrieved per question.
        infer: extract memories with the LLM; ``False`` stores ``keys`` verbatim.
        keys: with ``infer=False``: ``"turns"`` (dialogue turns) or ``"facts"``
            (LoCoMo's observation facts).
        turns_per_add: turns per ``add()`` when extracting.
        workers: conversations ingested, and questions answered, in parallel.
        sessions: ingest only each conversation's first N sessions, and ask
            only the questions whose evidence lies in them (a subset a slow
            local model can get through).
        out: write the report as JSON here too.
        echo: receives progress lines and the tables; ``None`` is silent.

    Raises:
        ConfigError: no LLM configured.
        ValueError: a bad option.
        FileNotFoundError: no data file.
    """
    say: Echo = echo if echo is not None else (lambda _line: None)
    if keys not in KEYS:
        raise ValueError(f"keys must be one of {', '.join(KEYS)}, got {keys!r}")
    if infer and keys != "turns":
        raise ValueError("keys='facts' stores LoCoMo's facts verbatim: it needs infer=False")
    if top_k < 1 or turns_per_add < 1 or workers < 1 or (limit is not None and limit < 0):
        raise ValueError("top_k, turns_per_add and workers must be >= 1, limit >= 0")
    if sessions is not None and sessions < 1:
        raise ValueError("sessions must be >= 1")
    path = data_path(data)
    if not path.is_file():
        raise FileNotFoundError(f"LoCoMo file not found: {path}")
    cfg = parse_config(config, None)
    convs = load_conversations(path)
    if sessions is not None:
        convs = [_first_sessions(c, sessions) for c in convs]
    plan: list[tuple[Conversation, list[tuple[int, QA]]]] = []
    remaining = limit
    for conv in convs:
        if remaining is not None and remaining <= 0:
            break
        qas = list(enumerate(conv.qa))
        if remaining is not None:
            qas = qas[:remaining]
            remaining -= len(qas)
        if qas:
            plan.append((conv, qas))
    base_llm = llm if llm is not None else _build_llm(cfg)
    emb = embedder or make_embedder(cfg.embedder.provider, dict(cfg.embedder.config))
    settings = _Settings(top_k, infer, keys, turns_per_add, cfg, _file_digest(path))
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="engramdb-locomo-qa-") as tmp:
        root = Path(cache_dir).expanduser() if cache_dir is not None else Path(tmp)
        cached = CachedLLM(base_llm, root / "llm")
        judge = CachedLLM(judge_llm, root / "llm") if judge_llm is not None else cached
        say(
            f"{len(plan)} conversation(s), {sum(len(q) for _, q in plan)} question(s); "
            f"model {base_llm.model}; cache {root if cache_dir is not None else '(none)'}"
        )
        with ThreadPoolExecutor(max_workers=workers) as pool:
            built = list(
                pool.map(lambda p: _ingest(p[0], cached, emb, settings, root / "db"), plan)
            )
            for (conv, _), (_, info) in zip(plan, built, strict=True):
                say(
                    f"  {conv.sample_id}: {info['memories']} memories "
                    + ("(cached)" if info["cached"] else f"in {info['seconds']} s")
                )
            results: list[_Result] = []
            for (conv, qas), (db, _) in zip(plan, built, strict=True):
                with Memory(db, cfg, embedder=emb, llm=cached, actor="bench") as mem:
                    results += pool.map(
                        lambda item, m=mem, c=conv: _ask(
                            m, c, item[0], item[1], cached, judge, top_k
                        ),
                        qas,
                    )
        llm_stats = cached.stats()
        judge_stats = judge.stats() if judge is not cached else None
    report: dict[str, Any] = {
        "benchmark": "engramdb_bench.locomo_qa",
        "format": FORMAT,
        "started_at": started_at,
        "seconds": round(time.perf_counter() - wall, 1),
        "config": {
            "data": str(path),
            "model": base_llm.model,
            "judge_model": (judge_llm or base_llm).model,
            "top_k": top_k,
            "infer": infer,
            "keys": keys,
            "turns_per_add": turns_per_add,
            "limit": limit,
            "sessions": sessions,
            "extraction_mode": cfg.extraction.mode,
            "embedder": emb.model,
            "answer_prompt": ANSWER_PROMPT,
            "judge_prompt": JUDGE_PROMPT,
        },
        "summary": _summary(results),
        "ingestion": [info for _, info in built],
        "llm": llm_stats,
        "judge_llm": judge_stats,
        "questions": [r.as_dict() for r in results],
    }
    say("")
    say(format_report(report))
    if out is not None:
        out_path = Path(out).expanduser()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", "utf-8")
        say(f"wrote {out_path}")
    return report


def judge_from_spec(spec: str | None) -> LLM | None:
    """``provider:model`` → an LLM for the judge (keys from the provider's variables)."""
    if not spec:
        return None
    provider, model = parse_llm_spec(spec)
    return make_llm(provider, {"model": model} if model else {})


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m engramdb_bench.locomo_qa``."""
    parser = argparse.ArgumentParser(
        prog="python -m engramdb_bench.locomo_qa",
        description="LoCoMo question answering through engramdb, judged by an LLM.",
    )
    parser.add_argument(
        "--data", type=Path, help="LoCoMo-format JSON file (default: $ENGRAM_LOCOMO)"
    )
    parser.add_argument("--config", type=Path, help="mem0-shaped JSON config (llm section)")
    parser.add_argument("--judge", help="judge LLM as provider:model (default: the same LLM)")
    parser.add_argument("--limit", type=int, help="answer at most N questions")
    parser.add_argument("--cache", type=Path, help="cache directory for LLM replies and databases")
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    parser.add_argument("--keys", choices=KEYS, default="turns")
    parser.add_argument("--no-infer", action="store_true", help="store keys verbatim, no LLM")
    parser.add_argument("--turns-per-add", type=int, default=DEFAULT_TURNS_PER_ADD)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sessions", type=int, help="only each conversation's first N sessions")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    if args.data is None and default_data_path() is None:
        parser.error(MISSING_DATA)
    try:
        run(
            args.data,
            config=load_config_file(args.config),
            judge_llm=judge_from_spec(args.judge),
            cache_dir=args.cache,
            limit=args.limit,
            sessions=args.sessions,
            top_k=args.top_k,
            infer=not args.no_infer,
            keys=args.keys,
            turns_per_add=args.turns_per_add,
            workers=args.workers,
            out=args.out,
        )
    except (EngramError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
