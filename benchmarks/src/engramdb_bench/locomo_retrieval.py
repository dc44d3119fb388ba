"""LoCoMo retrieval benchmark: does search find the turns a question needs.

Run::

    engram bench locomo-retrieval --data locomo-dev.json [--keys turns|facts|facts-only]
        [--out FILE.json] [--plot FILE.png] [--reuse]

or ``python -m engramdb_bench.locomo_retrieval`` with the same options, or
call :func:`run`.

What it does, per conversation (one ``user_id`` per conversation, one
``run_id`` per session):

- ``--keys turns`` (default): every turn is added verbatim with
  ``infer=False``: the session date as timestamp, the speaker as the message
  name (so the memory's ``actor_id``), the dialogue id in metadata, image
  captions appended to the text as ``[shares a photo: …]``.
- ``--keys facts``: the turns as above, and after each session the real
  additive pipeline (``infer=True``, one ``add()`` of the session's turns)
  with a :class:`~engramdb.llms.ScriptedLLM` that answers with LoCoMo's
  ``observation`` facts of that session: extracted facts added to their
  turns. The benchmark maps each stored fact back to the dialogue ids LoCoMo
  gives for it (by its text, from the data file: bookkeeping of ground truth
  outside the system), so a hit on a fact counts for the turns it came from.
- ``--keys facts-only``: the facts without the turns (what an application
  that only keeps extracted memories stores). LoCoMo's facts cite only part
  of the turns, which caps any@k below 1 whatever the ranking.

Then every question of categories 1-4 that has evidence is searched with
``Memory.search`` (``top_k`` 20; @5 and @10 are prefixes), and scored:
``any@k`` (some evidence turn is among the first k), ``all@k`` (every
evidence turn is), ``ndcg@10`` (binary gain per evidence turn, credited at
the first rank that covers it, ideal = each evidence turn alone at the top),
per category and overall. The dense-only and BM25-only rankings are the
store's own vector and keyword lists (``Store.candidates``) for the same
query, in the same run. Search latency is ``Memory.search`` with the query
vector computed beforehand (so it excludes the embedding, which is reported
separately).

Honesty rules: nothing at search time sees the evidence labels or the
answers, and no setting is tuned on question text. The default run ingests
afresh; ``--reuse`` reuses a database cached under ``--cache-dir`` for the
same data file, keys, code and embedder (ingesting once if there is none).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from engramdb import __version__
from engramdb.config import default_home
from engramdb.embedders import Embedder, make_embedder
from engramdb.embedders.base import Vector, Vectors
from engramdb.llms import ScriptedLLM
from engramdb.memory import Memory
from engramdb.nlp import TERMS_VERSION, query_terms
from engramdb.search import FusionConfig
from engramdb.stores.base import Scope
from engramdb_bench._locomo import MISSING_DATA, data_path, default_data_path

__all__ = [
    "CATEGORIES",
    "KS",
    "Conversation",
    "Fact",
    "Question",
    "Session",
    "Turn",
    "default_data_path",
    "embed_questions",
    "ingest_cached",
    "load",
    "main",
    "plot_recall",
    "run",
    "score_ranking",
    "summarise",
]

Keys = Literal["turns", "facts", "facts-only"]

CATEGORIES: Final = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""LoCoMo's question categories that have evidence turns (5, adversarial, is skipped)."""

KS: Final = (5, 10, 20)
"""The cut-offs reported; one search with ``top_k=max(KS)`` serves them all."""

METHODS: Final = ("hybrid", "dense", "bm25")

INGEST_VERSION: Final = 1
"""Bump when what :func:`ingest` stores changes, so cached databases are rebuilt."""

_USER_ROLE, _OTHER_ROLE = "user", "assistant"


def default_cache_dir() -> Path:
    """Where ``--reuse`` keeps ingested databases: ``$ENGRAM_HOME/bench-cache``."""
    return default_home() / "bench-cache"


# -- the data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One chat turn; ``text`` already carries the image caption, if any."""

    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Session:
    """One session of a conversation."""

    number: int
    date: str | None
    """ISO-8601 UTC, parsed from LoCoMo's ``"1:56 pm on 8 May, 2023"``."""
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Fact:
    """One LoCoMo observation: a fact about a speaker and the turns it came from."""

    speaker: str
    text: str
    dia_ids: tuple[str, ...]


@dataclass(frozen=True)
class Question:
    """One question with evidence, of a category in :data:`CATEGORIES`."""

    text: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample."""

    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    facts: dict[int, tuple[Fact, ...]] = field(default_factory=dict)
    """Observation facts per session number."""


_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y", "%I:%M %p on %B %d, %Y")


def parse_session_date(text: object) -> str | None:
    """LoCoMo's session time (``"1:56 pm on 8 May, 2023"``) as ISO-8601 UTC, or None."""
    if not isinstance(text, str):
        return None
    clean = " ".join(text.replace(",", ", ").split()).replace(" ,", ",")
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(clean, fmt).isoformat() + "+00:00"
        except ValueError:
            continue
    return None


def _dia_ids(value: object) -> tuple[str, ...]:
    """Dialogue ids from a string, a list, or a string holding several ("D1:3; D1:5")."""
    items: Iterable[object] = value if isinstance(value, list | tuple) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.extend(p for p in re.split(r"[\s,;]+", item) if p)
    return tuple(dict.fromkeys(out))


def _turn_text(raw: dict[str, Any]) -> str:
    text = str(raw.get("text") or "").strip()
    caption = raw.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [shares a photo: {caption.strip()}]".strip()
    return text


def load(path: str | Path) -> list[Conversation]:
    """Read a LoCoMo-format JSON file (a list of samples)."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a JSON list of LoCoMo samples")
    out: list[Conversation] = []
    for index, sample in enumerate(raw):
        conv = sample["conversation"]
        numbers = sorted(
            int(m.group(1)) for key in conv if (m := re.fullmatch(r"session_(\d+)", key))
        )
        sessions = []
        for n in numbers:
            turns = tuple(
                Turn(str(t["dia_id"]).strip(), str(t.get("speaker") or ""), _turn_text(t))
                for t in conv[f"session_{n}"] or []
                if isinstance(t, dict) and t.get("dia_id") and _turn_text(t)
            )
            date = parse_session_date(conv.get(f"session_{n}_date_time"))
            sessions.append(Session(n, date, turns))
        facts: dict[int, tuple[Fact, ...]] = {}
        for key, per_speaker in (sample.get("observation") or {}).items():
            m = re.fullmatch(r"session_(\d+)_observation", key)
            if not m or not isinstance(per_speaker, dict):
                continue
            found = []
            for speaker, items in per_speaker.items():
                for entry in items or []:
                    if isinstance(entry, list | tuple) and entry and isinstance(entry[0], str):
                        ids = _dia_ids(entry[1]) if len(entry) > 1 else ()
                        found.append(Fact(str(speaker), entry[0].strip(), ids))
            facts[int(m.group(1))] = tuple(f for f in found if f.text)
        questions = tuple(
            Question(str(q["question"]), _dia_ids(q.get("evidence") or []), int(q["category"]))
            for q in sample.get("qa") or []
            if q.get("category") in CATEGORIES and _dia_ids(q.get("evidence") or [])
        )
        out.append(
            Conversation(
                sample_id=str(sample.get("sample_id") or f"conv-{index}"),
                speakers=(str(conv.get("speaker_a") or "A"), str(conv.get("speaker_b") or "B")),
                sessions=tuple(sessions),
                questions=questions,
                facts=facts,
            )
        )
    return out


# -- ingest --------------------------------------------------------------------------------


def _role(conv: Conversation, speaker: str) -> str:
    # Both LoCoMo speakers are people; the roles only tell them apart, and let the
    # additive pipeline attribute a fact to the right speaker (actor_id).
    return _OTHER_ROLE if speaker == conv.speakers[1] else _USER_ROLE


def _norm(text: str) -> str:
    return " ".join(text.split())


def ingest(
    memory: Memory,
    conv: Conversation,
    keys: Keys,
    llm: ScriptedLLM | None = None,
) -> dict[str, list[str]]:
    """Store one conversation; returns each memory id's dialogue ids (ground truth).

    ``llm`` must be the :class:`ScriptedLLM` ``memory`` was built with when
    ``keys`` is ``facts`` or ``facts-only``.
    """
    sources: dict[str, list[str]] = {}

    def credit(memory_id: str, dia_ids: Iterable[str]) -> None:
        known = sources.setdefault(memory_id, [])
        known.extend(d for d in dia_ids if d not in known)

    for session in conv.sessions:
        run_id = f"session_{session.number}"
        if keys != "facts-only":
            for turn in session.turns:
                message = {
                    "role": _role(conv, turn.speaker),
                    "content": turn.text,
                    "name": turn.speaker,
                }
                out = memory.add(
                    [message],
                    user_id=conv.sample_id,
                    run_id=run_id,
                    metadata={"dia_id": turn.dia_id, "session": session.number},
                    timestamp=session.date,
                    infer=False,
                )
                for result in out["results"]:
                    credit(result["id"], [turn.dia_id])
        facts = conv.facts.get(session.number, ())
        if keys != "turns" and facts and session.turns:
            if llm is None:
                raise ValueError("facts need the ScriptedLLM the Memory was built with")
            llm.add(
                {
                    "memory": [
                        {
                            "text": f.text,
                            "attributed_to": _role(conv, f.speaker),
                            "linked_memory_ids": [],
                        }
                        for f in facts
                    ]
                }
            )
            by_text: dict[str, list[str]] = {}
            for f in facts:
                by_text.setdefault(_norm(f.text), []).extend(f.dia_ids)
            out = memory.add(
                [
                    {"role": _role(conv, t.speaker), "content": t.text, "name": t.speaker}
                    for t in session.turns
                ],
                user_id=conv.sample_id,
                run_id=run_id,
                metadata={"session": session.number, "kind": "fact"},
                timestamp=session.date,
                infer=True,
            )
            for result in out["results"]:
                credit(result["id"], by_text.get(_norm(result["memory"]), []))
    return sources


# -- scoring -------------------------------------------------------------------------------


def score_ranking(
    ranked: Sequence[Iterable[str]], evidence: Iterable[str], ks: Sequence[int] = KS
) -> dict[str, float]:
    """any@k, all@k and ndcg@10 of one ranked list of hits (each hit: its dialogue ids).

    NDCG: each evidence turn earns ``1 / log2(rank + 1)`` at the first rank
    whose hit covers it; the ideal puts every evidence turn alone at the top
    (``min(len(evidence), 10)`` ranks). With one turn per memory this is the
    usual binary NDCG.
    """
    wanted = set(evidence)
    out: dict[str, float] = {}
    covered: set[str] = set()
    first_rank: dict[str, int] = {}
    for rank, hit in enumerate(ranked, 1):
        for d in set(hit) & wanted:
            if d not in covered:
                covered.add(d)
                first_rank[d] = rank
    for k in ks:
        got = {d for d, r in first_rank.items() if r <= k}
        out[f"any@{k}"] = float(bool(got))
        out[f"all@{k}"] = float(bool(wanted) and got == wanted)
    dcg = sum(1.0 / np.log2(r + 1) for r in first_rank.values() if r <= 10)
    ideal = sum(1.0 / np.log2(r + 1) for r in range(1, min(len(wanted), 10) + 1))
    out["ndcg@10"] = float(min(1.0, dcg / ideal)) if ideal else 0.0
    return out


def _mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {"n": 0}
    keys = rows[0].keys()
    out: dict[str, float] = {k: round(float(np.mean([r[k] for r in rows])), 4) for k in keys}
    out["n"] = len(rows)
    return out


def _latency(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    ms = np.array(samples) * 1000.0
    return {
        "n": len(samples),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "max_ms": round(float(ms.max()), 3),
    }


class _QueryVectors:
    """Wraps an embedder so that search finds its query vector computed beforehand."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.vectors: dict[str, Vector] = {}

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: list[str]) -> Vectors:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Vector:
        found = self.vectors.get(text)
        return found if found is not None else self.inner.embed_query(text)


def summarise(rows: Sequence[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    """Mean scores overall and per category of ``(category, score_ranking row)`` pairs."""
    return {
        "overall": _mean([r for _, r in rows]),
        "by_category": {
            str(cat): {"name": name, **_mean([r for c, r in rows if c == cat])}
            for cat, name in CATEGORIES.items()
        },
    }


# -- the run -------------------------------------------------------------------------------


def _cache_key(data: bytes, keys: Keys, model: str, fusion: FusionConfig) -> str:
    h = hashlib.sha256(data)
    h.update(
        json.dumps(
            {
                "keys": keys,
                # The index-time settings change what is stored.
                "context_messages": fusion.context_messages,
                "embed_actor": fusion.embed_actor,
                "ingest": INGEST_VERSION,
                "terms": TERMS_VERSION,
                "embedder": model,
                "engramdb": __version__,
            },
            sort_keys=True,
        ).encode()
    )
    return h.hexdigest()[:20]


def ingest_cached(
    raw: bytes,
    convs: Sequence[Conversation],
    keys: Keys,
    db: Path,
    *,
    embedder: Embedder,
    model: str,
    fusion: FusionConfig,
    config: dict[str, Any],
    reuse: bool = False,
    cache_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, dict[str, list[str]]], bool]:
    """Store ``convs`` in a new database at ``db``; returns ``(sources, reused)``.

    ``sources`` maps each conversation's memory ids to their dialogue ids
    (:func:`ingest`). With ``reuse``, a database cached under ``cache_dir``
    (default :func:`default_cache_dir`) for the same data file ``raw``, keys,
    index-time settings of ``fusion``, code and embedder ``model`` is copied
    instead (``reused`` True); when there is none, the fresh one is cached.
    ``config`` is the Memory config to ingest with; ``embedder`` embeds.
    """
    say = progress or (lambda _msg: None)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = _cache_key(raw, keys, model, fusion)
    cached_db = cache_root / f"locomo-{key}.db"
    cached_map = cache_root / f"locomo-{key}.json"
    if reuse and cached_db.is_file() and cached_map.is_file():
        say(f"reusing the ingested database {cached_db}")
        shutil.copyfile(cached_db, db)
        sources: dict[str, dict[str, list[str]]] = json.loads(cached_map.read_text("utf-8"))
        return sources, True
    llm = ScriptedLLM(model="locomo-observations") if keys != "turns" else None
    sources = {}
    with Memory(db, config=config, embedder=embedder, llm=llm) as memory:
        for n, conv in enumerate(convs, 1):
            say(f"ingesting {conv.sample_id} ({n}/{len(convs)}, keys={keys})")
            sources[conv.sample_id] = ingest(memory, conv, keys, llm)
    if reuse:
        cache_root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(db, cached_db)
        cached_map.write_text(json.dumps(sources), "utf-8")
    return sources, False


def embed_questions(
    questions: Iterable[Question], base: Embedder, wrapped: _QueryVectors
) -> list[float]:
    """Embed each distinct question once into ``wrapped``; returns the seconds of each."""
    times: list[float] = []
    for q in questions:
        if q.text not in wrapped.vectors:
            t0 = time.perf_counter()
            wrapped.vectors[q.text] = base.embed_query(q.text)
            times.append(time.perf_counter() - t0)
    return times


def run(
    data: str | Path | None = None,
    *,
    keys: Keys = "turns",
    out: str | Path | None = None,
    plot: str | Path | None = None,
    reuse: bool = False,
    cache_dir: str | Path | None = None,
    retrieval: FusionConfig | dict[str, Any] | None = None,
    embedder: Embedder | None = None,
    details: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; returns the report (and writes ``out`` / ``plot`` if given).

    ``data`` is the LoCoMo file, default ``$ENGRAM_LOCOMO``
    (:class:`~engramdb_bench._locomo.MissingDataError` if neither names one);
    ``retrieval`` overrides the fusion settings (default: the library's);
    ``embedder`` replaces the local model (tests); ``details`` adds every
    question's top-10 dialogue ids per method.
    """
    say = progress or (lambda _msg: None)
    path = data_path(data)
    raw = path.read_bytes()
    convs = load(path)
    if keys not in ("turns", "facts", "facts-only"):
        raise ValueError(f"keys must be 'turns', 'facts' or 'facts-only', got {keys!r}")
    base = embedder or make_embedder("local", {})
    wrapped = _QueryVectors(base)
    config: dict[str, Any] = {}
    fusion = FusionConfig()
    if retrieval is not None:
        fusion = (
            retrieval
            if isinstance(retrieval, FusionConfig)
            else FusionConfig.model_validate(retrieval)
        )
        config["retrieval"] = fusion.model_dump()
    with tempfile.TemporaryDirectory(prefix="engram-locomo-") as tmp:
        db = Path(tmp) / "locomo.db"
        started = time.perf_counter()
        sources, reused = ingest_cached(
            raw,
            convs,
            keys,
            db,
            embedder=wrapped,
            model=base.model,
            fusion=fusion,
            config=config,
            reuse=reuse,
            cache_dir=cache_dir,
            progress=say,
        )
        ingest_s = time.perf_counter() - started

        questions = [(conv, q) for conv in convs for q in conv.questions]
        say(f"embedding {len(questions)} questions")
        embed_times = embed_questions([q for _, q in questions], base, wrapped)

        scores: dict[str, list[tuple[int, dict[str, float]]]] = {m: [] for m in METHODS}
        search_times: list[float] = []
        per_question: list[dict[str, Any]] = []
        top = max(KS)
        with Memory(db, config=config, embedder=wrapped) as memory:
            fusion_used = memory.config.retrieval.model_dump()
            memories = memory.store.count()
            say(f"searching {len(questions)} questions")
            for conv, q in questions:
                ids = sources.get(conv.sample_id, {})
                t0 = time.perf_counter()
                found = memory.search(q.text, user_id=conv.sample_id, top_k=top)["results"]
                search_times.append(time.perf_counter() - t0)
                vec = wrapped.vectors[q.text]
                cands = memory.store.candidates(
                    Scope(user_id=conv.sample_id), None, vec, query_terms(q.text), [], top
                )
                ranked = {
                    "hybrid": [r["id"] for r in found],
                    "dense": [
                        c.row.id
                        for c in sorted(
                            (c for c in cands if c.semantic_rank is not None),
                            key=lambda c: c.semantic_rank or 0,
                        )
                    ][:top],
                    "bm25": [
                        c.row.id
                        for c in sorted(
                            (c for c in cands if c.bm25_rank is not None),
                            key=lambda c: c.bm25_rank or 0,
                        )
                    ][:top],
                }
                for method, mem_ids in ranked.items():
                    hits = [ids.get(i, []) for i in mem_ids]
                    scores[method].append((q.category, score_ranking(hits, q.evidence)))
                if details:
                    per_question.append(
                        {
                            "conversation": conv.sample_id,
                            "question": q.text,
                            "category": q.category,
                            "evidence": list(q.evidence),
                            **{
                                m: [ids.get(i, []) for i in mem_ids[:10]]
                                for m, mem_ids in ranked.items()
                            },
                        }
                    )

    methods = {method: summarise(rows) for method, rows in scores.items()}
    report: dict[str, Any] = {
        "benchmark": "locomo-retrieval",
        "engramdb": __version__,
        "data": str(path),
        "data_sha256": hashlib.sha256(raw).hexdigest(),
        "keys": keys,
        "embedder": base.model,
        "conversations": len(convs),
        "memories": memories,
        "questions": len(questions),
        "ks": list(KS),
        "fusion": fusion_used,
        "ingest": {"seconds": round(ingest_s, 2), "reused": reused},
        "latency": {"search": _latency(search_times), "embed_query": _latency(embed_times)},
        "methods": methods,
    }
    if details:
        report["details"] = per_question
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2), "utf-8")
    if plot is not None:
        plot_recall(report, plot)
    return report


def plot_recall(report: dict[str, Any], path: str | Path) -> None:
    """Write a PNG of any@k and all@k per method (needs matplotlib: engramdb-bench has it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("the plot needs matplotlib: pip install 'matplotlib>=3.8,<4'") from exc
    ks = report["ks"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, metric in zip(axes, ("any", "all"), strict=True):
        for method, figures in report["methods"].items():
            values = [figures["overall"][f"{metric}@{k}"] for k in ks]
            ax.plot(ks, values, marker="o", label=method)
        ax.set_title(f"{metric}@k ({report['keys']})")
        ax.set_xlabel("k")
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("recall (share of questions)")
    axes[0].set_ylim(0, 1)
    axes[1].legend(loc="lower right")
    fig.suptitle(
        f"LoCoMo retrieval, {report['questions']} questions, "
        f"{report['conversations']} conversations"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_report(report: dict[str, Any]) -> str:
    """The report as a plain-text table."""
    lines = [
        f"LoCoMo retrieval: {report['conversations']} conversations, {report['memories']} "
        f"memories, {report['questions']} questions, keys={report['keys']}, "
        f"fusion={report['fusion']['method']}"
    ]
    cols = [f"{m}@{k}" for m in ("any", "all") for k in report["ks"]] + ["ndcg@10"]
    header = f"{'method':8s} {'category':12s} {'n':>4s} " + " ".join(f"{c:>7s}" for c in cols)
    lines.append(header)
    for method, figures in report["methods"].items():
        rows = [("overall", figures["overall"])] + [
            (f"{c} {v['name']}", v) for c, v in figures["by_category"].items()
        ]
        for name, row in rows:
            if not row.get("n"):
                continue
            lines.append(
                f"{method:8s} {name:12s} {row['n']:>4d} " + " ".join(f"{row[c]:7.3f}" for c in cols)
            )
    lat = report["latency"]["search"]
    emb = report["latency"]["embed_query"]
    if lat.get("n"):
        lines.append(
            f"search latency (query vector precomputed): p50 {lat['p50_ms']:.1f} ms, "
            f"p95 {lat['p95_ms']:.1f} ms; query embedding p50 "
            f"{emb.get('p50_ms', float('nan')):.1f} ms"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.locomo_retrieval``."""
    parser = argparse.ArgumentParser(
        prog="python -m engramdb_bench.locomo_retrieval", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--data", type=Path, help="LoCoMo-format JSON file (default: $ENGRAM_LOCOMO)"
    )
    parser.add_argument("--keys", choices=("turns", "facts", "facts-only"), default="turns")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--plot", type=Path, help="write a PNG of recall@k per method here")
    parser.add_argument("--reuse", action="store_true", help="reuse a cached ingested database")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--retrieval", help="fusion settings as JSON (FusionConfig fields)")
    parser.add_argument("--details", action="store_true", help="per-question top-10 in the JSON")
    args = parser.parse_args(argv)
    if args.data is None and default_data_path() is None:
        parser.error(MISSING_DATA)
    report = run(
        args.data,
        keys=args.keys,
        out=args.out,
        plot=args.plot,
        reuse=args.reuse,
        cache_dir=args.cache_dir,
        retrieval=json.loads(args.retrieval) if args.retrieval else None,
        details=args.details,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    print(format_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
