"""LoCoMo retrieval, leave-one-conversation-out: how well do tuned defaults generalise.

Run::

    engram bench locomo-folds --data locomo-dev.json [--keys turns|facts]
        [--grid JSON] [--metric any@10] [--out FILE.json] [--reuse]

or call :func:`run`.

Every retrieval default chosen from data must be chosen on conversations it
is then not judged on. This benchmark ingests the LoCoMo conversations once
(as ``engram bench locomo-retrieval`` does, sharing its ``--reuse`` cache),
embeds each question once, and searches every question with every candidate
fusion setting (:class:`~engramdb.search.FusionConfig`) from ``--grid``: a
JSON object mapping field names to lists of values (their cartesian product,
each on top of the library's defaults), or a JSON list of partial
FusionConfig objects (an entry whose values are lists expands to their
product). The library's defaults are always a candidate (the first).

Then, for each fold (one conversation held out), the candidate with the best
mean of ``--metric`` (hybrid, default ``any@10``) over the questions of the
*other* conversations (pooled: a micro-average) is chosen, ties going to the
defaults, then to the earlier candidate in the grid; that fold reports the
held-out conversation's figures for the chosen candidate and for the
defaults. The headline is the mean over folds (a macro-average over
conversations) with its spread (minimum, maximum, sample standard deviation);
beside it, the in-sample best (the candidate best on every conversation at
once, what tuning on all the data would pick) with its in-sample figure, so
the optimism of in-sample tuning is visible, and for every parameter of the
grid the value each fold chose (a choice that moves with the fold is not
supported by the data).

Index-time settings (``context_messages``, ``embed_actor``) change what is
stored and so cannot vary over one ingest; ``rerank`` needs an LLM, which this
benchmark does not run: all three are refused in a grid. The defaults
themselves were chosen by hand on these same conversations, so their figures
here are in-sample too; what is held out is the grid's selection.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from engramdb import __version__
from engramdb.embedders import Embedder, make_embedder
from engramdb.memory import Memory
from engramdb.search import FusionConfig
from engramdb_bench._locomo import data_path
from engramdb_bench.locomo_retrieval import (
    CATEGORIES,
    KS,
    Conversation,
    Keys,
    _QueryVectors,
    embed_questions,
    ingest_cached,
    load,
    score_ranking,
    summarise,
)

__all__ = [
    "FIGURES",
    "METRICS",
    "Candidate",
    "Scored",
    "evaluate",
    "format_report",
    "metric_mean",
    "parse_grid",
    "run",
    "select",
]

METRICS: Final = ("any@5", "any@10", "any@20", "all@5", "all@10", "all@20", "ndcg@10")
"""What ``--metric`` may select by (hybrid, overall)."""

FIGURES: Final = ("any@5", "any@10", "any@20", "all@10", "ndcg@10")
"""The figures reported per fold and summarised across folds."""

FIXED_FIELDS: Final = {
    "context_messages": "an index-time setting (it changes what is stored, and one ingest "
    "serves every candidate): compare it with `engram bench locomo-retrieval --retrieval`",
    "embed_actor": "an index-time setting (it changes what is stored, and one ingest serves "
    "every candidate): compare it with `engram bench locomo-retrieval --retrieval`",
    "rerank": "the reranker needs an LLM, which this benchmark does not run",
    "query_rewrite": "query rewriting needs an LLM, which this benchmark does not run: "
    "measure it with scripts/bench_query_rewrite.py",
}
"""FusionConfig fields a grid may not vary, and why."""

DEFAULTS_NAME: Final = "defaults"


# -- candidates ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One fusion setting to try: the library's defaults with ``overrides``."""

    name: str
    """``"defaults"``, or the overrides that differ from them (``"bm25_weight=1.5"``)."""
    overrides: dict[str, Any]
    """The fields that differ from the defaults, with their values."""
    fusion: FusionConfig


def _show(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _candidate(fields: Mapping[str, Any], where: str) -> Candidate:
    unknown = [f for f in fields if f not in FusionConfig.model_fields]
    if unknown:
        known = ", ".join(f for f in FusionConfig.model_fields if f not in FIXED_FIELDS)
        raise ValueError(
            f"{where}: unknown FusionConfig field(s) {', '.join(map(repr, unknown))} "
            f"(the grid may vary: {known})"
        )
    for name in fields:
        if name in FIXED_FIELDS:
            raise ValueError(f"{where}: {name!r} cannot be in a grid: {FIXED_FIELDS[name]}")
    try:
        fusion = FusionConfig.model_validate(dict(fields))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])} = {e.get('input')!r}: {e['msg']}"
            for e in exc.errors()
        )
        raise ValueError(f"{where}: invalid value(s): {problems}") from None
    defaults = FusionConfig().model_dump()
    dumped = fusion.model_dump()
    overrides = {k: dumped[k] for k in FusionConfig.model_fields if dumped[k] != defaults[k]}
    name = ", ".join(f"{k}={_show(v)}" for k, v in overrides.items()) or DEFAULTS_NAME
    return Candidate(name, overrides, fusion)


def _expand(entry: Mapping[str, Any], where: str, *, lists_only: bool) -> list[dict[str, Any]]:
    """The cartesian product of an entry's list values (scalars stay as they are)."""
    axes: list[list[Any]] = []
    for name, values in entry.items():
        if isinstance(values, list):
            if not values:
                raise ValueError(f"{where}: grid field {name!r} has no values")
            axes.append(values)
        elif lists_only:
            raise ValueError(
                f"{where}: grid field {name!r} must map to a list of values, got {values!r}"
            )
        else:
            axes.append([values])
    return [dict(zip(entry, combo, strict=True)) for combo in itertools.product(*axes)]


def parse_grid(spec: str | Mapping[str, Any] | Sequence[Any] | None) -> list[Candidate]:
    """The candidates of a grid: the library's defaults first, then the grid's, deduplicated.

    ``spec`` is JSON text or the decoded value: an object mapping FusionConfig
    field names to lists of values (their cartesian product, each combined
    with the defaults), or a list of objects of FusionConfig fields (an
    object whose values are lists expands to their product). ``None`` or an
    empty grid: the defaults alone. A candidate equal to an earlier one (the
    defaults included) is dropped. Raises ValueError naming the field or the
    value at fault.
    """
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"the grid is not valid JSON: {exc.msg} at character {exc.pos}"
            ) from None
    entries: list[tuple[dict[str, Any], str]] = []
    if spec is None:
        pass
    elif isinstance(spec, Mapping):
        entries = [(c, "grid") for c in _expand(spec, "grid", lists_only=True)]
    elif isinstance(spec, Sequence) and not isinstance(spec, str | bytes):
        for i, entry in enumerate(spec):
            where = f"grid entry {i}"
            if not isinstance(entry, Mapping):
                raise ValueError(
                    f"{where}: expected an object of FusionConfig fields, got {entry!r}"
                )
            entries.extend((c, where) for c in _expand(entry, where, lists_only=False))
    else:
        raise ValueError(
            "the grid must be a JSON object of field: [values] or a list of objects of "
            f"FusionConfig fields, got {spec!r}"
        )
    out = [_candidate({}, "defaults")]
    seen = {json.dumps(out[0].fusion.model_dump(), sort_keys=True)}
    for fields, where in entries:
        cand = _candidate(fields, f"{where} {json.dumps(fields, sort_keys=True)}")
        key = json.dumps(cand.fusion.model_dump(), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(cand)
    return out


def _grid_fields(spec: str | Mapping[str, Any] | Sequence[Any] | None) -> list[str]:
    """The fields a grid names, in order of appearance."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    entries = [spec] if isinstance(spec, Mapping) else list(spec or [])
    return list(dict.fromkeys(name for entry in entries for name in entry))


# -- the pure part: a table of per-question scores -----------------------------------------


@dataclass(frozen=True)
class Scored:
    """One question's scores (:func:`~engramdb_bench.locomo_retrieval.score_ranking`)."""

    conversation: str
    category: int
    scores: Mapping[str, float]


Table = Sequence[Sequence[Scored]]
"""Per candidate (in grid order), the same questions in the same order."""


def metric_mean(rows: Sequence[Scored], metric: str) -> float:
    """The mean of ``metric`` over ``rows`` (a micro-average); NaN for no rows."""
    if not rows:
        return math.nan
    return math.fsum(r.scores[metric] for r in rows) / len(rows)


def select(table: Table, metric: str, exclude: str | None = None) -> int:
    """The index of the candidate with the best mean ``metric`` outside ``exclude``.

    The mean is over the questions of every conversation but ``exclude``
    (pooled); ties go to the lowest index (the defaults first, then grid order).
    """
    best, best_value = 0, -math.inf
    for index, rows in enumerate(table):
        value = metric_mean([r for r in rows if r.conversation != exclude], metric)
        # Rounded, so that equal figures reached in another order still tie.
        if round(value, 12) > round(best_value, 12):
            best, best_value = index, value
    return best


def _figures(rows: Sequence[Scored]) -> dict[str, Any]:
    return summarise([(r.category, dict(r.scores)) for r in rows])


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": round(statistics.fmean(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "sd": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
    }


def _across(per_fold: Sequence[dict[str, Any]], pooled: Sequence[Scored]) -> dict[str, Any]:
    """Held-out figures across folds: spread overall, means per category, pooled rows."""
    by_category: dict[str, Any] = {}
    for cat, name in CATEGORIES.items():
        present = [f["by_category"][str(cat)] for f in per_fold if f["by_category"][str(cat)]["n"]]
        by_category[str(cat)] = {
            "name": name,
            "folds": len(present),
            **{k: round(statistics.fmean(p[k] for p in present), 4) for k in FIGURES if present},
        }
    return {
        "overall": {k: _spread([f["overall"][k] for f in per_fold]) for k in FIGURES},
        "by_category": by_category,
        "pooled": _figures(pooled)["overall"],
    }


def _ref(index: int, cand: Candidate) -> dict[str, Any]:
    return {"index": index, "name": cand.name, "overrides": cand.overrides}


def evaluate(
    table: Table,
    candidates: Sequence[Candidate],
    metric: str = "any@10",
    fields: Sequence[str] = (),
) -> dict[str, Any]:
    """Leave-one-conversation-out selection over a score table (no I/O, no search).

    ``table[i]`` holds candidate ``i``'s scores (``candidates[0]`` the
    defaults). Returns ``folds`` (per held-out conversation: the chosen
    candidate, its and the defaults' training figure, and the held-out
    figures of both), ``summary`` (``loco`` and ``defaults``: each figure's
    mean, min, max and sd across folds, per category means, the pooled
    held-out figures), ``in_sample`` (the best on all conversations, its
    pooled and per-conversation-mean figure beside the LOCO one),
    ``parameters`` (for each of ``fields``: the value each fold chose) and
    ``candidates`` (every candidate's figure per conversation).
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if len(table) != len(candidates) or not table:
        raise ValueError("the table needs one row list per candidate, and a candidate")
    convs = list(dict.fromkeys(r.conversation for r in table[0]))
    if len(convs) < 2:
        raise ValueError("leave-one-conversation-out needs at least two conversations")
    folds: list[dict[str, Any]] = []
    held: dict[str, list[dict[str, Any]]] = {"loco": [], "defaults": []}
    pooled: dict[str, list[Scored]] = {"loco": [], "defaults": []}
    for conv in convs:
        chosen = select(table, metric, exclude=conv)
        out_rows = {
            "loco": [r for r in table[chosen] if r.conversation == conv],
            "defaults": [r for r in table[0] if r.conversation == conv],
        }
        train = {
            "chosen": metric_mean([r for r in table[chosen] if r.conversation != conv], metric),
            "defaults": metric_mean([r for r in table[0] if r.conversation != conv], metric),
        }
        fold: dict[str, Any] = {
            "held_out": conv,
            "questions": len(out_rows["loco"]),
            "chosen": _ref(chosen, candidates[chosen]),
            "train": {k: round(v, 4) for k, v in train.items()},
        }
        for which, rows in out_rows.items():
            figures = _figures(rows)
            fold[which] = figures
            held[which].append(figures)
            pooled[which].extend(rows)
        folds.append(fold)
    best = select(table, metric)
    per_conv = {
        conv: metric_mean([r for r in table[best] if r.conversation == conv], metric)
        for conv in convs
    }
    loco_mean = statistics.fmean(f["overall"][metric] for f in held["loco"])
    macro = statistics.fmean(per_conv.values())
    in_sample = {
        **_ref(best, candidates[best]),
        "metric": metric,
        "pooled": round(metric_mean(table[best], metric), 4),
        "mean_over_conversations": round(macro, 4),
        "loco_held_out_mean": round(loco_mean, 4),
        "optimism": round(macro - loco_mean, 4),
        "defaults_pooled": round(metric_mean(table[0], metric), 4),
    }
    defaults = FusionConfig().model_dump()
    parameters: dict[str, Any] = {}
    for name in fields:
        chosen_values = {
            f["held_out"]: candidates[f["chosen"]["index"]].fusion.model_dump()[name] for f in folds
        }
        values = list(chosen_values.values())
        parameters[name] = {
            "default": defaults[name],
            "in_sample": candidates[best].fusion.model_dump()[name],
            "folds": chosen_values,
            "stable": all(v == values[0] for v in values),
            "folds_off_default": sum(v != defaults[name] for v in values),
        }
    listing = []
    for index, cand in enumerate(candidates):
        scored = table[index]
        listing.append(
            {
                **_ref(index, cand),
                "pooled": {k: round(metric_mean(scored, k), 4) for k in FIGURES},
                "by_conversation": {
                    conv: round(
                        metric_mean([r for r in scored if r.conversation == conv], metric), 4
                    )
                    for conv in convs
                },
            }
        )
    return {
        "metric": metric,
        "folds": folds,
        "summary": {which: _across(held[which], pooled[which]) for which in held},
        "in_sample": in_sample,
        "parameters": parameters,
        "candidates": listing,
    }


# -- the run -------------------------------------------------------------------------------


def _search_all(
    db: Path,
    cand: Candidate,
    wrapped: _QueryVectors,
    questions: Sequence[tuple[Conversation, Any]],
    sources: Mapping[str, Mapping[str, list[str]]],
) -> list[Scored]:
    top = max(KS)
    rows = []
    with Memory(db, config={"retrieval": cand.fusion.model_dump()}, embedder=wrapped) as memory:
        if memory.config.retrieval != cand.fusion:  # pragma: no cover - a wiring error
            raise RuntimeError(f"the Memory did not take the candidate's settings: {cand.name}")
        for conv, q in questions:
            ids = sources.get(conv.sample_id, {})
            found = memory.search(q.text, user_id=conv.sample_id, top_k=top)["results"]
            hits = [ids.get(r["id"], []) for r in found]
            rows.append(Scored(conv.sample_id, q.category, score_ranking(hits, q.evidence)))
    return rows


def run(
    data: str | Path | None = None,
    *,
    keys: Keys = "turns",
    grid: str | Mapping[str, Any] | Sequence[Any] | None = None,
    metric: str = "any@10",
    out: str | Path | None = None,
    reuse: bool = False,
    cache_dir: str | Path | None = None,
    embedder: Embedder | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; returns the report (and writes it to ``out`` if given).

    ``data`` is the LoCoMo file, default ``$ENGRAM_LOCOMO``; ``grid`` the
    candidates (:func:`parse_grid`); ``metric`` what selects (one of
    :data:`METRICS`, hybrid overall); ``reuse`` / ``cache_dir`` as in
    ``locomo_retrieval.run``; ``embedder`` replaces the local model (tests).
    """
    say = progress or (lambda _msg: None)
    if keys not in ("turns", "facts", "facts-only"):
        raise ValueError(f"keys must be 'turns', 'facts' or 'facts-only', got {keys!r}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    candidates = parse_grid(grid)
    fields = _grid_fields(grid)
    path = data_path(data)
    raw = path.read_bytes()
    convs = load(path)
    if len(convs) < 2:
        raise ValueError(
            f"{path}: leave-one-conversation-out needs at least two conversations, "
            f"found {len(convs)}"
        )
    base = embedder or make_embedder("local", {})
    wrapped = _QueryVectors(base)
    fusion = FusionConfig()
    with tempfile.TemporaryDirectory(prefix="engram-locomo-folds-") as tmp:
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
            config={},
            reuse=reuse,
            cache_dir=cache_dir,
            progress=say,
        )
        ingest_s = time.perf_counter() - started
        questions = [(conv, q) for conv in convs for q in conv.questions]
        say(f"embedding {len(questions)} questions")
        embed_questions([q for _, q in questions], base, wrapped)
        with Memory(db, embedder=wrapped) as memory:
            memories = memory.store.count()
        table: list[list[Scored]] = []
        started = time.perf_counter()
        for n, cand in enumerate(candidates, 1):
            say(
                f"searching {len(questions)} questions, candidate {n}/{len(candidates)}: "
                + cand.name
            )
            table.append(_search_all(db, cand, wrapped, questions, sources))
        search_s = time.perf_counter() - started
    report: dict[str, Any] = {
        "benchmark": "locomo-folds",
        "engramdb": __version__,
        "data": str(path),
        "data_sha256": hashlib.sha256(raw).hexdigest(),
        "keys": keys,
        "embedder": base.model,
        "conversations": {c.sample_id: len(c.questions) for c in convs},
        "memories": memories,
        "questions": len(questions),
        "defaults": fusion.model_dump(),
        "grid": grid if not isinstance(grid, str) else json.loads(grid),
        "grid_fields": fields,
        "ingest": {"seconds": round(ingest_s, 2), "reused": reused},
        "search": {
            "seconds": round(search_s, 2),
            "searches": len(questions) * len(candidates),
        },
        **evaluate(table, candidates, metric, fields),
    }
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2), "utf-8")
    return report


# -- the table -----------------------------------------------------------------------------


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def format_report(report: dict[str, Any]) -> str:
    """The report as plain-text tables."""
    metric = report["metric"]
    folds = report["folds"]
    lines = [
        f"LoCoMo leave-one-conversation-out: {len(report['conversations'])} conversations, "
        f"{report['memories']} memories, {report['questions']} questions, "
        f"keys={report['keys']}, {len(report['candidates'])} candidates; each fold picks "
        f"the best hybrid {metric} on the other conversations (pooled)",
        "",
        "Per fold (held-out conversation): the chosen candidate and the defaults",
    ]
    head = f"{'held out':10s} {'n':>4s} {'setting':44s} {'train':>6s} " + " ".join(
        f"{c:>7s}" for c in FIGURES
    )
    lines.append(head)
    for fold in folds:
        for which, label in (("loco", "#{i} {name}"), ("defaults", "defaults")):
            ref = fold["chosen"]
            text = label.format(i=ref["index"], name=ref["name"])
            train = fold["train"]["chosen" if which == "loco" else "defaults"]
            first = which == "loco"
            lines.append(
                f"{fold['held_out'] if first else '':10s} "
                f"{str(fold['questions']) if first else '':>4s} "
                f"{_cut(text, 44):44s} {train:6.3f} "
                + " ".join(f"{fold[which]['overall'][c]:7.3f}" for c in FIGURES)
            )
    lines += ["", f"Held out, across {len(folds)} folds (sd: sample standard deviation)"]
    lines.append(
        f"{'figure':8s} | {'LOCO mean':>9s} {'sd':>6s} {'min':>6s} {'max':>6s} | "
        f"{'defaults mean':>13s} {'sd':>6s} {'min':>6s} {'max':>6s}"
    )
    for c in FIGURES:
        lo, de = (report["summary"][w]["overall"][c] for w in ("loco", "defaults"))
        lines.append(
            f"{c:8s} | {lo['mean']:9.3f} {lo['sd']:6.3f} {lo['min']:6.3f} {lo['max']:6.3f} | "
            f"{de['mean']:13.3f} {de['sd']:6.3f} {de['min']:6.3f} {de['max']:6.3f}"
        )
    lines += ["", "Per category, mean over the folds that have the category"]
    lines.append(
        f"{'':14s} {'category':14s} {'folds':>5s} " + " ".join(f"{c:>7s}" for c in FIGURES)
    )
    for which, label in (("loco", "LOCO-selected"), ("defaults", "defaults")):
        for cat, row in report["summary"][which]["by_category"].items():
            if not row["folds"]:
                continue
            lines.append(
                f"{label:14s} {cat + ' ' + row['name']:14s} {row['folds']:>5d} "
                + " ".join(f"{row[c]:7.3f}" for c in FIGURES)
            )
    loco, dflt = (report["summary"][w]["pooled"][metric] for w in ("loco", "defaults"))
    lines.append(
        f"pooled held-out {metric} (every question, scored by its fold's choice): "
        f"LOCO {loco:.3f}, defaults {dflt:.3f}"
    )
    ins = report["in_sample"]
    lines += [
        "",
        f"In-sample best on all {len(folds)} conversations (naive tuning): #{ins['index']} "
        f"{ins['name']}",
        f"  {metric} in-sample: {ins['pooled']:.3f} pooled, {ins['mean_over_conversations']:.3f} "
        f"mean over conversations; LOCO held-out mean {ins['loco_held_out_mean']:.3f} "
        f"(optimism {ins['optimism']:+.3f}); defaults {ins['defaults_pooled']:.3f} pooled",
    ]
    if report["parameters"]:
        convs = [f["held_out"] for f in folds]
        lines += ["", "Value chosen per fold"]
        lines.append(
            f"{'parameter':16s} {'default':>8s} {'in-sample':>9s} "
            + " ".join(f"{c:>8s}" for c in convs)
            + "  stable"
        )
        for name, p in report["parameters"].items():
            lines.append(
                f"{name:16s} {_show(p['default']):>8s} {_show(p['in_sample']):>9s} "
                + " ".join(f"{_show(p['folds'][c]):>8s}" for c in convs)
                + f"  {'yes' if p['stable'] else 'no'}"
                + f" ({p['folds_off_default']}/{len(convs)} folds off the default)"
            )
    return "\n".join(lines)
