"""The retrieval development suite: several shapes of memory, one report, folds, a dump.

Run::

    engram bench retrieval [--shapes facts,locomo,updates,extracted] [--top-k 30]
        [--folds 5] [--config RETRIEVAL.json] [--out FILE.json] [--dump FILE.jsonl]
        [--plot FILE.png] [--mem0] [--data LOCOMO.json] [--reuse]

or call :func:`run`. No LLM, no network: the local embedding model only.

**The shapes** (each with the library's defaults, or the given retrieval config):

- ``facts``: engramdb's personal-facts set (``data/personal_facts.json``, made by
  ``scripts/gen_personal_facts.py``): 40 users, each fact stored as an app stores
  it, ``add(text, user_id=<user>, infer=False, timestamp=...)``, one call per fact,
  in one database with one scope per user; paraphrased questions, half naming the
  person, half saying "the user", about 45 % about an attribute the user has no
  fact for (unanswerable: ``gold`` empty).
- ``locomo``: the LoCoMo dev conversations stored verbatim (one turn per add, as
  ``engram bench locomo-retrieval --keys turns`` does, sharing its ``--reuse``
  cache); the questions of categories 1-4 with evidence; gold = the evidence turns.
- ``updates``: the knowledge-update set (``tests/data/knowledge_updates.json``),
  ``linked`` mode (gold facts, one add each, linked ``updates`` to what they
  replace); its "current" questions asked the day after the conversation's last
  session; gold = the facts stating the current value.
- ``owner`` (opt-in: ``--shapes owner``): the ``facts`` set as an app that
  names its users by their first name stores it: ``user_id="priya"``, only the
  first-person facts (questions whose gold is only a summary are left out), so
  no stored fact names the person a named question asks about.
- ``extracted``: LoCoMo dev's ``observation`` facts (one memory per fact, scope =
  the conversation, attributed to its speaker, the session date as timestamp):
  the shape of LLM-extracted facts. A question's gold = the observations citing
  one of its evidence turns; questions whose evidence no observation cites are
  left out (counted as ``no_gold``).

**Metrics** per shape (answerable questions unless said): ``p@1`` (the top hit is
gold), ``p@3`` (a gold hit among the first three: success at 3, not precision),
``mrr``; LoCoMo-like shapes also ``any@10`` / ``all@10`` (every evidence turn
covered by the top 10; for ``extracted``, every evidence turn that some
observation cites) and ``multi_hop_all@10`` (category 1); ``facts`` also
``user_p@1`` (the "the user" questions). Calibration, over every question:
``auc_top1`` (AUC of the top-1 score separating a correct top 1 from a wrong
or unanswerable one), ``ece`` (expected calibration error of the score as the
probability that a returned hit is gold, 10 equal bins, every returned hit),
and at ``threshold`` (0.3): ``hidden_correct`` (share of correct top-1 answers
whose score is below it) and ``unanswerable_empty`` (share of unanswerable
questions whose best hit is below it: the search would return nothing).

**Folds**: each shape's groups (users for ``facts``, conversations otherwise)
are dealt round-robin, in sorted order, into ``k`` folds (at most one fold per
group). :func:`run_folds` scores each fold held out: without a trainer, the
searched scores as they are; with a trainer, a fusion trained on the *other*
folds' :class:`QueryDump` of the same shape re-scores the held-out fold's hits
(from their ``score_details``) and they are ranked again. The report gives
each fold's figures and their mean.

**Dump** (``--dump``): one JSON line per question (:meth:`QueryDump.to_json`):
``shape``, ``fold``, ``group``, ``id``, ``question``, ``answerable``, ``gold``
(memory ids), ``gold_groups`` (for all@k: per evidence turn, the memory ids
covering it), ``category``, ``names_person``, and ``hits``: for each of the top-k
results ``id``, ``memory`` (the text), ``rank``, ``score``, ``score_details``
(as ``search(explain=True)`` returns it) and ``is_gold``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from engramdb import __version__
from engramdb.embedders import Embedder, make_embedder
from engramdb.memory import Memory
from engramdb.search import FusionConfig

__all__ = [
    "BINS",
    "DEFAULT_FACTS",
    "MEM0_ENV",
    "OPT_IN_SHAPES",
    "SHAPES",
    "THRESHOLD",
    "FusionParams",
    "QueryDump",
    "RetrievalError",
    "Trainer",
    "assign_folds",
    "auc",
    "format_report",
    "load_facts",
    "metrics",
    "plot_reliability",
    "reliability",
    "run",
    "run_folds",
    "shape_extracted",
    "shape_facts",
    "shape_locomo",
    "shape_updates",
]

SHAPES: Final = ("facts", "locomo", "updates", "extracted")
OPT_IN_SHAPES: Final = ("owner",)
"""Shapes run only when named: a variant of another, not a part of the default mix."""
TOP_K: Final = 30
FOLDS: Final = 5
THRESHOLD: Final = 0.3
BINS: Final = 10
DEFAULT_FACTS: Final = Path(__file__).with_name("data") / "personal_facts.json"
MEM0_ENV: Final = "ENGRAM_MEM0_BENCH_PYTHON"

FusionParams = Callable[[Mapping[str, Any]], float]
"""A trained fusion: a hit (``score``, ``score_details``) -> its new score in [0, 1]."""
Trainer = Callable[[list["QueryDump"]], FusionParams]
"""Trains a fusion on the dumps of the folds not held out."""
Say = Callable[[str], None]


class RetrievalError(RuntimeError):
    """A part of the suite could not run (the mem0 worker failed, a shape has no data)."""


# -- the dump ------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryDump:
    """One question's search: what was asked, what is gold, and every hit with its parts."""

    shape: str
    group: str
    """The user (facts) or conversation the question belongs to."""
    id: str
    question: str
    answerable: bool
    gold: tuple[str, ...]
    hits: tuple[dict[str, Any], ...]
    """Best first: ``id``, ``memory``, ``rank``, ``score``, ``score_details``, ``is_gold``."""
    fold: str = ""
    gold_groups: tuple[tuple[str, ...], ...] = ()
    category: int | None = None
    names_person: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The dump line's object."""
        return {
            "shape": self.shape,
            "fold": self.fold,
            "group": self.group,
            "id": self.id,
            "question": self.question,
            "answerable": self.answerable,
            "gold": list(self.gold),
            "gold_groups": [list(g) for g in self.gold_groups],
            "category": self.category,
            "names_person": self.names_person,
            "hits": list(self.hits),
        }

    def rescored(self, params: FusionParams) -> QueryDump:
        """The same question with its hits scored by ``params`` and ranked again."""
        scored = [(float(params(h)), h) for h in self.hits]
        scored.sort(key=lambda pair: -pair[0])
        hits = tuple(
            {**h, "rank": rank, "score": score} for rank, (score, h) in enumerate(scored, 1)
        )
        return QueryDump(**{**self.__dict__, "hits": hits})


def _hits(found: Sequence[Mapping[str, Any]], gold: Iterable[str]) -> tuple[dict[str, Any], ...]:
    wanted = set(gold)
    return tuple(
        {
            "id": r["id"],
            "memory": r.get("memory"),
            "rank": rank,
            "score": float(r.get("score") or 0.0),
            "score_details": r.get("score_details") or {},
            "is_gold": r["id"] in wanted,
        }
        for rank, r in enumerate(found, 1)
    )


# -- metrics -------------------------------------------------------------------------------


def auc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """Mann-Whitney AUC: the chance a positive scores above a negative (ties: half)."""
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def reliability(dumps: Sequence[QueryDump], bins: int = BINS) -> list[dict[str, Any]]:
    """Per score bin (equal width over [0, 1]): hits, mean score, share gold."""
    rows: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for d in dumps:
        for h in d.hits:
            s = min(max(float(h["score"]), 0.0), 1.0)
            rows[min(int(s * bins), bins - 1)].append((s, bool(h["is_gold"])))
    return [
        {
            "low": round(i / bins, 3),
            "high": round((i + 1) / bins, 3),
            "hits": len(r),
            "mean_score": round(statistics.fmean(s for s, _ in r), 4) if r else None,
            "precision": round(sum(g for _, g in r) / len(r), 4) if r else None,
        }
        for i, r in enumerate(rows)
    ]


def _ece(dumps: Sequence[QueryDump], bins: int = BINS) -> float | None:
    table = reliability(dumps, bins)
    total = sum(r["hits"] for r in table)
    if not total:
        return None
    return math.fsum(
        r["hits"] / total * abs(r["mean_score"] - r["precision"]) for r in table if r["hits"]
    )


def _covered(d: QueryDump, k: int) -> tuple[bool, bool]:
    top = {h["id"] for h in d.hits[:k]}
    groups = d.gold_groups or tuple((g,) for g in d.gold)
    got = [bool(top & set(g)) for g in groups]
    return any(got), bool(got) and all(got)


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def metrics(dumps: Sequence[QueryDump], threshold: float = THRESHOLD) -> dict[str, Any]:
    """The figures of a list of questions (see the module docstring)."""
    answerable = [d for d in dumps if d.answerable]
    unanswerable = [d for d in dumps if not d.answerable]

    def first_gold(d: QueryDump) -> int | None:
        return next((h["rank"] for h in d.hits if h["is_gold"]), None)

    ranks = [first_gold(d) for d in answerable]
    out: dict[str, Any] = {
        "questions": len(dumps),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "p@1": _mean([float(r == 1) for r in ranks]),
        "p@3": _mean([float(r is not None and r <= 3) for r in ranks]),
        "mrr": _mean([1.0 / r if r else 0.0 for r in ranks]),
    }
    if any(d.category is not None for d in answerable):
        cover = [_covered(d, 10) for d in answerable]
        out["any@10"] = _mean([float(a) for a, _ in cover])
        out["all@10"] = _mean([float(b) for _, b in cover])
        multi = [_covered(d, 10)[1] for d in answerable if d.category == 1]
        out["multi_hop_all@10"] = _mean([float(b) for b in multi])
    if any(d.names_person is not None for d in answerable):
        user = [first_gold(d) for d in answerable if d.names_person is False]
        named = [first_gold(d) for d in answerable if d.names_person is True]
        out["user_p@1"] = _mean([float(r == 1) for r in user])
        out["named_p@1"] = _mean([float(r == 1) for r in named])

    def top(d: QueryDump) -> float:
        return float(d.hits[0]["score"]) if d.hits else 0.0

    correct = [top(d) for d in answerable if d.hits and d.hits[0]["is_gold"]]
    wrong = [top(d) for d in dumps if not (d.answerable and d.hits and d.hits[0]["is_gold"])]
    auc_top1 = auc(correct, wrong)
    ece = _ece(dumps)
    out["auc_top1"] = round(auc_top1, 4) if auc_top1 is not None else None
    out["ece"] = round(ece, 4) if ece is not None else None
    out["threshold"] = threshold
    out["hidden_correct"] = _mean([float(s < threshold) for s in correct])
    out["unanswerable_empty"] = _mean([float(top(d) < threshold) for d in unanswerable])
    return out


# -- folds ---------------------------------------------------------------------------------


def assign_folds(groups: Iterable[str], k: int) -> dict[str, str]:
    """Each group's fold: sorted groups dealt round-robin into ``min(k, groups)`` folds."""
    names = sorted(set(groups))
    k = max(1, min(k, len(names)))
    width = len(str(k - 1))
    return {g: f"fold{i % k:0{width}d}" for i, g in enumerate(names)}


def _with_folds(dumps: Sequence[QueryDump], k: int) -> list[QueryDump]:
    folds = assign_folds((d.group for d in dumps), k)
    return [QueryDump(**{**d.__dict__, "fold": folds[d.group]}) for d in dumps]


def run_folds(
    train: Trainer | None,
    dumps: Sequence[QueryDump],
    *,
    threshold: float = THRESHOLD,
) -> dict[str, Any]:
    """Leave-one-fold-out per shape; each fold's figures and their mean.

    ``dumps`` carry their ``fold``. Without ``train``, each held-out fold is
    scored as searched. With it, for each shape and fold, ``train`` gets the
    dumps of that shape's *other* folds and returns a fusion
    (:data:`FusionParams`) that re-scores every hit of the held-out fold.
    """
    out: dict[str, Any] = {}
    for shape in dict.fromkeys(d.shape for d in dumps):
        mine = [d for d in dumps if d.shape == shape]
        per_fold: dict[str, Any] = {}
        for fold in sorted({d.fold for d in mine}):
            held = [d for d in mine if d.fold == fold]
            if train is not None:
                params = train([d for d in mine if d.fold != fold])
                held = [d.rescored(params) for d in held]
            per_fold[fold] = {
                "groups": sorted({d.group for d in held}),
                **metrics(held, threshold),
            }
        keys = [k for k, v in next(iter(per_fold.values())).items() if isinstance(v, float)]
        mean = {}
        for key in keys:
            values = [f[key] for f in per_fold.values() if f.get(key) is not None]
            mean[key] = _mean(values)
            if len(values) > 1:
                mean[f"{key}_sd"] = round(statistics.stdev(values), 4)
        out[shape] = {"folds": per_fold, "mean": mean}
    return out


# -- the shapes ----------------------------------------------------------------------------


def _settings(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Memory config from ``--config``: a mem0-shaped config or a bare retrieval section."""
    if not config:
        return {}
    cfg = dict(config)
    if "retrieval" not in cfg:
        cfg = {"retrieval": cfg}
    FusionConfig.model_validate(cfg["retrieval"] or {})
    return cfg


def _fusion(settings: Mapping[str, Any]) -> FusionConfig:
    return FusionConfig.model_validate(settings.get("retrieval") or {})


def as_owner(people: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``owner`` shape's users: id = first name, first-person facts only.

    Gold ids that were summaries are dropped; an answerable question left
    without gold is left out (unanswerable questions stay).
    """
    out: list[dict[str, Any]] = []
    for user in people:
        facts = [f for f in user["facts"] if f["voice"] == "first"]
        kept = {f["id"] for f in facts}
        asked = []
        for q in user["questions"]:
            gold = [g for g in q["gold"] if g in kept]
            if q["answerable"] and not gold:
                continue
            asked.append({**q, "gold": gold})
        out.append({**user, "id": user["first_name"].lower(), "facts": facts, "questions": asked})
    if len({u["id"] for u in out}) != len(out):
        raise ValueError("the owner shape needs every user's first name to differ")
    return out


def load_facts(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The users of a personal-facts file (format 1; default :data:`DEFAULT_FACTS`)."""
    raw = json.loads(Path(path or DEFAULT_FACTS).read_text("utf-8"))
    if not isinstance(raw, dict) or raw.get("format") != 1:
        raise ValueError(f"{path or DEFAULT_FACTS}: not a personal-facts file of format 1")
    users: list[dict[str, Any]] = raw["users"]
    return users


def shape_facts(
    db: Path,
    *,
    settings: Mapping[str, Any],
    embedder: Embedder,
    top_k: int,
    users: int | None = None,
    questions: int | None = None,
    data: str | Path | None = None,
    say: Say = lambda _m: None,
    shape: str = "facts",
) -> tuple[list[QueryDump], dict[str, Any]]:
    """Store every user's facts one add each, search every question; dumps and timings.

    ``shape="owner"``: the users as :func:`as_owner` makes them.
    """
    people = load_facts(data)[:users]
    if shape == "owner":
        people = as_owner(people)
    dumps: list[QueryDump] = []
    t0 = time.perf_counter()
    with Memory(db, dict(settings) or None, embedder=embedder) as memory:
        ids: dict[str, str] = {}  # fact id -> memory id
        for n, user in enumerate(people, 1):
            say(f"{shape}: storing {user['id']} ({n}/{len(people)})")
            for fact in user["facts"]:
                out = memory.add(
                    fact["text"], user_id=user["id"], infer=False, timestamp=fact["timestamp"]
                )
                ids[fact["id"]] = out["results"][0]["id"]
        t1 = time.perf_counter()
        say(f"{shape}: searching")
        for user in people:
            for q in user["questions"][:questions]:
                gold = tuple(ids[g] for g in q["gold"])
                found = memory.search(q["text"], user_id=user["id"], top_k=top_k, explain=True)
                dumps.append(
                    QueryDump(
                        shape,
                        user["id"],
                        q["id"],
                        q["text"],
                        bool(q["answerable"]),
                        gold,
                        _hits(found["results"], gold),
                        names_person=bool(q["names_person"]),
                    )
                )
        t2 = time.perf_counter()
    facts = sum(len(u["facts"]) for u in people)
    return dumps, {"memories": facts, "ingest_s": round(t1 - t0, 2), "search_s": round(t2 - t1, 2)}


def _invert(sources: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for mid, dia in sources.items():
        for d in dia:
            out.setdefault(d, []).append(mid)
    return out


def _locomo_dumps(
    shape: str,
    memory: Memory,
    convs: Sequence[Any],
    sources: Mapping[str, Mapping[str, Sequence[str]]],
    top_k: int,
    questions: int | None,
) -> tuple[list[QueryDump], int]:
    dumps: list[QueryDump] = []
    no_gold = 0
    for conv in convs:
        by_dia = _invert(sources.get(conv.sample_id, {}))
        for n, q in enumerate(conv.questions[:questions]):
            groups = tuple(tuple(by_dia[d]) for d in q.evidence if by_dia.get(d))
            if not groups:
                no_gold += 1
                continue
            gold = tuple(dict.fromkeys(m for g in groups for m in g))
            found = memory.search(q.text, user_id=conv.sample_id, top_k=top_k, explain=True)
            dumps.append(
                QueryDump(
                    shape,
                    conv.sample_id,
                    f"{conv.sample_id}q{n + 1:03d}",
                    q.text,
                    True,
                    gold,
                    _hits(found["results"], gold),
                    gold_groups=groups,
                    category=q.category,
                )
            )
    return dumps, no_gold


def shape_locomo(
    db: Path,
    *,
    settings: Mapping[str, Any],
    embedder: Embedder,
    top_k: int,
    data: str | Path | None = None,
    conversations: int | None = None,
    questions: int | None = None,
    reuse: bool = False,
    cache_dir: str | Path | None = None,
    say: Say = lambda _m: None,
) -> tuple[list[QueryDump], dict[str, Any]]:
    """LoCoMo turns stored verbatim (``locomo_retrieval.ingest_cached``); its questions."""
    from engramdb_bench._locomo import data_path
    from engramdb_bench.locomo_retrieval import ingest_cached, load

    path = data_path(data)
    raw = path.read_bytes()
    convs = load(path)[:conversations]
    if conversations is not None:  # a part of the file: its own cache key
        raw = raw + json.dumps([c.sample_id for c in convs]).encode()
    t0 = time.perf_counter()
    sources, reused = ingest_cached(
        raw,
        convs,
        "turns",
        db,
        embedder=embedder,
        model=embedder.model,
        fusion=_fusion(settings),
        config=dict(settings),
        reuse=reuse,
        cache_dir=cache_dir,
        progress=lambda m: say(f"locomo: {m}"),
    )
    t1 = time.perf_counter()
    say("locomo: searching")
    with Memory(db, dict(settings) or None, embedder=embedder) as memory:
        dumps, no_gold = _locomo_dumps("locomo", memory, convs, sources, top_k, questions)
        count = memory.store.count()
    t2 = time.perf_counter()
    return dumps, {
        "memories": count,
        "reused": reused,
        "no_gold": no_gold,
        "ingest_s": round(t1 - t0, 2),
        "search_s": round(t2 - t1, 2),
    }


def shape_extracted(
    db: Path,
    *,
    settings: Mapping[str, Any],
    embedder: Embedder,
    top_k: int,
    data: str | Path | None = None,
    conversations: int | None = None,
    questions: int | None = None,
    say: Say = lambda _m: None,
) -> tuple[list[QueryDump], dict[str, Any]]:
    """LoCoMo's observation facts, one add each, attributed to their speaker; its questions."""
    from engramdb_bench._locomo import data_path
    from engramdb_bench.locomo_retrieval import _role, load

    convs = load(data_path(data))[:conversations]
    t0 = time.perf_counter()
    sources: dict[str, dict[str, list[str]]] = {}
    with Memory(db, dict(settings) or None, embedder=embedder) as memory:
        for n, conv in enumerate(convs, 1):
            say(f"extracted: storing {conv.sample_id} ({n}/{len(convs)})")
            mine = sources.setdefault(conv.sample_id, {})
            for session in conv.sessions:
                for fact in conv.facts.get(session.number, ()):
                    out = memory.add(
                        [
                            {
                                "role": _role(conv, fact.speaker),
                                "content": fact.text,
                                "name": fact.speaker,
                            }
                        ],
                        user_id=conv.sample_id,
                        run_id=f"session_{session.number}",
                        timestamp=session.date,
                        infer=False,
                    )
                    for result in out["results"]:
                        mine.setdefault(result["id"], []).extend(fact.dia_ids)
        t1 = time.perf_counter()
        say("extracted: searching")
        dumps, no_gold = _locomo_dumps("extracted", memory, convs, sources, top_k, questions)
        count = memory.store.count()
    t2 = time.perf_counter()
    return dumps, {
        "memories": count,
        "no_gold": no_gold,
        "ingest_s": round(t1 - t0, 2),
        "search_s": round(t2 - t1, 2),
    }


def shape_updates(
    db: Path,
    *,
    settings: Mapping[str, Any],
    embedder: Embedder,
    top_k: int,
    data: str | Path | None = None,
    conversations: int | None = None,
    questions: int | None = None,
    say: Say = lambda _m: None,
) -> tuple[list[QueryDump], dict[str, Any]]:
    """The knowledge-update set, linked facts; its "current" questions (gold: the current value)."""
    from engramdb_bench import knowledge_update as ku

    convs = ku.load(data or ku.DEFAULT_DATA)[:conversations]
    dumps: list[QueryDump] = []
    t0 = time.perf_counter()
    with Memory(db, dict(settings) or None, embedder=embedder) as memory:
        sources: dict[str, dict[str, list[str]]] = {}
        for n, conv in enumerate(convs, 1):
            say(f"updates: storing {conv.id} ({n}/{len(convs)})")
            sources[conv.id] = ku.ingest(memory, conv, "linked")
        t1 = time.perf_counter()
        say("updates: searching")
        for conv in convs:
            at = ku._day_after(conv)
            current = [(c, q) for c in conv.chains for q in c.questions if q.type == "current"]
            for chain, q in current[:questions]:
                wanted = set(chain.values[-1].turns)
                gold = tuple(m for m, turns in sources[conv.id].items() if wanted & set(turns))
                found = memory.search(q.text, user_id=conv.id, top_k=top_k, as_of=at, explain=True)
                dumps.append(
                    QueryDump(
                        "updates",
                        conv.id,
                        q.id,
                        q.text,
                        bool(gold),
                        gold,
                        _hits(found["results"], gold),
                    )
                )
        count = memory.store.count()
    t2 = time.perf_counter()
    return dumps, {"memories": count, "ingest_s": round(t1 - t0, 2), "search_s": round(t2 - t1, 2)}


# -- mem0 on the facts shape ---------------------------------------------------------------


def _mem0_facts(
    python: str,
    *,
    top_k: int,
    users: int | None,
    questions: int | None,
    data: str | Path | None,
    timeout: float,
    say: Say,
) -> dict[str, Any]:
    """The facts shape through mem0 (``_peer_mem0.py``): P@1, P@3, MRR and calibration."""
    from engramdb_bench.compare import check_python, run_worker

    exe = check_python(python, RetrievalError, "scripts/mem0-bench-venv makes one")
    people = load_facts(data)[:users]
    messages = [
        {"role": "user", "content": f["text"], "name": "user", "user_id": u["id"]}
        for u in people
        for f in u["facts"]
    ]
    fact_ids = [f["id"] for u in people for f in u["facts"]]
    asked = [(u, q) for u in people for q in u["questions"][:questions]]
    workload = {
        "top_k": top_k,
        "threads": 1,
        "record_hits": True,
        "messages": messages,
        "questions": [{"query": q["text"], "user_id": u["id"]} for u, q in asked],
    }
    say(f"mem0: {len(messages)} facts, {len(asked)} questions")
    with tempfile.TemporaryDirectory(prefix="engram-retrieval-mem0-") as tmp:
        wl = Path(tmp) / "workload.json"
        wl.write_text(json.dumps(workload), "utf-8")
        out = Path(tmp) / "out.json"
        script = Path(__file__).with_name("_peer_mem0.py")
        figures = run_worker(
            [exe, str(script), str(wl), str(out)],
            f"the mem0 worker ({exe} {script})",
            out,
            threads=1,
            timeout=timeout,
            error=RetrievalError,
        )
    ids: dict[str, str] = {}
    for fid, added in zip(fact_ids, figures["added_ids"], strict=True):
        if added:
            ids[fid] = added[0]
    dumps = []
    for (u, q), hits in zip(asked, figures["hit_ids"], strict=True):
        gold = tuple(ids[g] for g in q["gold"] if g in ids)
        found = [{"id": h[0], "score": h[1]} for h in hits]
        dumps.append(
            QueryDump(
                "facts-mem0",
                u["id"],
                q["id"],
                q["text"],
                bool(q["answerable"]),
                gold,
                _hits(found, gold),
                names_person=bool(q["names_person"]),
            )
        )
    return {
        "settings": figures.get("settings"),
        "library": figures.get("library"),
        "metrics": metrics(dumps),
        "search_p50_ms": figures.get("search_p50_ms"),
        "wall_s": figures.get("wall_s"),
    }


# -- the run -------------------------------------------------------------------------------


def run(
    *,
    shapes: Sequence[str] = SHAPES,
    top_k: int = TOP_K,
    folds: int = FOLDS,
    config: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    dump: str | Path | None = None,
    plot: str | Path | None = None,
    mem0: bool = False,
    mem0_python: str | None = None,
    locomo: str | Path | None = None,
    facts: str | Path | None = None,
    updates: str | Path | None = None,
    users: int | None = None,
    conversations: int | None = None,
    questions: int | None = None,
    reuse: bool = False,
    cache_dir: str | Path | None = None,
    embedder: Embedder | None = None,
    threshold: float = THRESHOLD,
    train: Trainer | None = None,
    progress: Say | None = None,
) -> dict[str, Any]:
    """Run the shapes; returns the report (written to ``out``; dumps to ``dump``).

    ``users`` / ``conversations`` / ``questions`` cut the data (per user or
    conversation) for quick runs; ``locomo`` is the LoCoMo file (default
    ``$ENGRAM_LOCOMO``); ``config`` a retrieval config (a mem0-shaped config or a
    bare ``retrieval`` section); ``train`` a fusion trainer for :func:`run_folds`.
    """
    say = progress or (lambda _m: None)
    unknown = [s for s in shapes if s not in (*SHAPES, *OPT_IN_SHAPES)]
    if unknown or not shapes:
        raise ValueError(
            f"shapes must be among {', '.join((*SHAPES, *OPT_IN_SHAPES))}, got {list(shapes)!r}"
        )
    if top_k < 1 or folds < 1:
        raise ValueError("top_k and folds must be at least 1")
    settings = _settings(config)
    base = embedder or make_embedder("local", {})
    all_dumps: list[QueryDump] = []
    shape_info: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engram-retrieval-") as tmp:
        for shape in shapes:
            db = Path(tmp) / f"{shape}.db"
            started = time.perf_counter()
            if shape in ("facts", "owner"):
                dumps, info = shape_facts(
                    db,
                    settings=settings,
                    embedder=base,
                    top_k=top_k,
                    users=users,
                    questions=questions,
                    data=facts,
                    say=say,
                    shape=shape,
                )
            elif shape == "locomo":
                dumps, info = shape_locomo(
                    db,
                    settings=settings,
                    embedder=base,
                    top_k=top_k,
                    data=locomo,
                    conversations=conversations,
                    questions=questions,
                    reuse=reuse,
                    cache_dir=cache_dir,
                    say=say,
                )
            elif shape == "extracted":
                dumps, info = shape_extracted(
                    db,
                    settings=settings,
                    embedder=base,
                    top_k=top_k,
                    data=locomo,
                    conversations=conversations,
                    questions=questions,
                    say=say,
                )
            else:
                dumps, info = shape_updates(
                    db,
                    settings=settings,
                    embedder=base,
                    top_k=top_k,
                    data=updates,
                    conversations=conversations,
                    questions=questions,
                    say=say,
                )
            if not dumps:
                raise RetrievalError(f"the {shape} shape has no questions to ask")
            info["seconds"] = round(time.perf_counter() - started, 2)
            info["groups"] = len({d.group for d in dumps})
            dumps = _with_folds(dumps, folds)
            all_dumps.extend(dumps)
            shape_info[shape] = info
    report: dict[str, Any] = {
        "benchmark": "retrieval",
        "engramdb": __version__,
        "embedder": base.model,
        "top_k": top_k,
        "folds": folds,
        "threshold": threshold,
        "retrieval": _fusion(settings).model_dump(),
        "config_sha256": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[
            :16
        ],
        "trained": train is not None,
        "shapes": {},
    }
    by_fold = run_folds(train, all_dumps, threshold=threshold)
    for shape in shapes:
        mine = [d for d in all_dumps if d.shape == shape]
        report["shapes"][shape] = {
            **shape_info[shape],
            "overall": metrics(mine, threshold),
            "reliability": reliability(mine),
            **by_fold[shape],
        }
    if mem0:
        python = mem0_python or os.environ.get(MEM0_ENV)
        if "facts" not in shapes:
            report["mem0"] = {"skipped": "the mem0 side runs on the facts shape only"}
        elif not python:
            report["mem0"] = {
                "skipped": f"${MEM0_ENV} is not set (scripts/mem0-bench-venv makes mem0's venv)"
            }
        else:
            report["mem0"] = _mem0_facts(
                python,
                top_k=top_k,
                users=users,
                questions=questions,
                data=facts,
                timeout=3600.0,
                say=say,
            )
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2), "utf-8")
    if dump is not None:
        with Path(dump).open("w", encoding="utf-8") as fh:
            for d in all_dumps:
                fh.write(json.dumps(d.to_json()) + "\n")
    if plot is not None:
        plot_reliability(report, plot)
    return report


def plot_reliability(report: Mapping[str, Any], path: str | Path) -> None:
    """A reliability diagram: per shape, the share of gold hits against the score bin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey", label="perfectly calibrated")
    for shape, body in report["shapes"].items():
        rows = [r for r in body["reliability"] if r["hits"]]
        ax.plot(
            [r["mean_score"] for r in rows],
            [r["precision"] for r in rows],
            marker="o",
            label=f"{shape} (ECE {body['overall']['ece']})",
        )
    ax.set_xlabel("score (bin mean)")
    ax.set_ylabel("observed precision (share of hits that are gold)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(f"engramdb {report['engramdb']}: reliability, top {report['top_k']}")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- the table -----------------------------------------------------------------------------

_COLUMNS: Final = (
    "p@1",
    "p@3",
    "mrr",
    "any@10",
    "all@10",
    "multi_hop_all@10",
    "user_p@1",
    "auc_top1",
    "ece",
    "hidden_correct",
    "unanswerable_empty",
)


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-"


def format_report(report: Mapping[str, Any]) -> str:
    """The report as plain-text tables: overall per shape, then the fold means."""
    head = f"{'shape':10s} {'n':>4s} " + " ".join(f"{c:>9s}" for c in _COLUMNS) + "  seconds"
    lines = [
        f"Retrieval development suite: top {report['top_k']}, {report['folds']} folds, "
        f"threshold {report['threshold']} ({'trained fusion' if report['trained'] else 'config'})",
        "",
        "Overall (p@3: a gold hit in the top 3; hidden_correct / unanswerable_empty at the "
        "threshold)",
        head,
    ]
    for shape, body in report["shapes"].items():
        o = body["overall"]
        lines.append(
            f"{shape:10s} {o['questions']:>4d} "
            + " ".join(f"{_cell(o.get(c)):>9s}" for c in _COLUMNS)
            + f"  {body['seconds']:.1f}"
        )
    lines += ["", "Held-out folds: mean (sd)"]
    lines.append(f"{'shape':10s} {'folds':>5s} " + " ".join(f"{c:>15s}" for c in _COLUMNS[:8]))
    for shape, body in report["shapes"].items():
        m = body["mean"]
        cells = []
        for c in _COLUMNS[:8]:
            v, sd = m.get(c), m.get(f"{c}_sd")
            cells.append(f"{_cell(v)} ({_cell(sd)})" if v is not None else "-")
        lines.append(
            f"{shape:10s} {len(body['folds']):>5d} " + " ".join(f"{c:>15s}" for c in cells)
        )
    mem0 = report.get("mem0")
    if mem0:
        lines.append("")
        if "skipped" in mem0:
            lines.append(f"mem0: skipped: {mem0['skipped']}")
        else:
            e, p = report["shapes"]["facts"]["overall"], mem0["metrics"]
            lines.append("facts, side by side   p@1     p@3     mrr     auc_top1")
            for name, row in (("engramdb", e), ("mem0", p)):
                lines.append(
                    f"{name:20s} "
                    + " ".join(
                        f"{_cell(row.get(c)):>7s}" for c in ("p@1", "p@3", "mrr", "auc_top1")
                    )
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - the CLI is the face
    """``python -m engramdb_bench.retrieval``: the default run, the table on stdout."""
    del argv
    report = run(progress=lambda m: print(m, file=sys.stderr))
    print(format_report(report))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
