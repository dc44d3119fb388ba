"""``engram bench calibration``: what a search score means, measured on LoCoMo.

The fused score (:func:`engramdb.search.fuse`) ranks well but sits on its
own scale: an exact repeat of a memory's text fuses to about 0.7-0.85, an
unrelated query's best hit to about 0.3. mem0's users set thresholds on a
similarity scale, where an exact match is 1 and unrelated text is near 0.
:class:`~engramdb.search.ScoreCalibration` maps the fused score through a
logistic curve, strictly increasing (the ranking is the fused ranking, to
the last place), fitted so that an exact repeat scores about 1 and the best
hit of an unrelated query about 0.

This benchmark fits the curve and shows what it means, with
leave-one-conversation-out: for each LoCoMo conversation held out, the
curve is fitted on the other conversations and judged on the held-out one.

- **exact**: a sample of the conversation's turns, each searched with its
  own text: the fused score of that turn (which ranks first).
- **unrelated**: the questions of *other* conversations searched in this
  one's scope (other people, other lives): the fused score of the best hit.
- **questions**: the conversation's own questions: every top-10 hit's fused
  score and whether it is one of the question's evidence turns, so the
  report shows, per band of the calibrated score, how often a hit is
  evidence (the reliability curve).

The fit: the centre is the midpoint of the exact repeats' median and the
unrelated best hits' median, the width such that those medians land at
0.97 and 0.03. (Fitting the tails instead, exact's 10th percentile at 0.9
and unrelated's 90th at 0.1, gives a curve so steep that an evidence turn
of an ordinary question scores below mem0's default threshold of 0.1 one
time in five.) Reported per held-out fold: the medians, the share of exact
repeats at 0.8 or more, of unrelated best hits at 0.1 or less, of
question evidence hits kept by a threshold of 0.1 and of 0.3, and the
curve; the defaults in :class:`~engramdb.search.ScoreCalibration` are the
fit on all dev conversations, rounded.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engramdb import Memory
from engramdb.embedders import make_embedder
from engramdb.embedders.base import Embedder
from engramdb.search import FusionConfig, ScoreCalibration
from engramdb_bench._locomo import data_path
from engramdb_bench.locomo_retrieval import Conversation, ingest, load

__all__ = ["fit", "format_report", "measure", "run"]

EXACT_PER_CONVERSATION = 60
UNRELATED_PER_PAIR = 40
BANDS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0001)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


_HIGH = 0.97
"""Where the exact repeats' median lands (the unrelated median lands at 1 - this)."""


def fit(exact: Sequence[float], unrelated: Sequence[float]) -> ScoreCalibration:
    """The logistic curve putting exact's median at 0.97 and unrelated's median at 0.03."""
    hi, lo = _quantile(exact, 0.5), _quantile(unrelated, 0.5)
    if not hi > lo:
        raise ValueError(f"exact repeats ({hi:.3f}) do not score above unrelated hits ({lo:.3f})")
    center = (hi + lo) / 2
    width = (hi - center) / math.log(_HIGH / (1 - _HIGH))  # logistic((hi - c) / w) = 0.97
    return ScoreCalibration(center=round(center, 4), width=round(width, 4))


def measure(
    memory: Memory, convs: Sequence[Conversation], seed: int = 7
) -> dict[str, dict[str, Any]]:
    """Raw fused scores per conversation: exact repeats, unrelated best hits, question hits."""
    rng = random.Random(seed)
    out: dict[str, dict[str, Any]] = {}
    for conv in convs:
        scope = {"user_id": conv.sample_id}
        turns = [t for s in conv.sessions for t in s.turns if len(t.text.split()) >= 4]
        exact = []
        for turn in rng.sample(turns, min(EXACT_PER_CONVERSATION, len(turns))):
            hits = memory.search(turn.text, filters=scope, top_k=5, explain=True)["results"]
            mine = [h for h in hits if h["metadata"].get("dia_id") == turn.dia_id]
            if mine:
                exact.append(mine[0]["score_details"].get("relative", 0.0))
        unrelated = []
        for other in convs:
            if other is conv:
                continue
            for q in rng.sample(
                list(other.questions), min(UNRELATED_PER_PAIR, len(other.questions))
            ):
                hits = memory.search(q.text, filters=scope, top_k=1, explain=True)["results"]
                if hits:
                    unrelated.append(hits[0]["score_details"].get("relative", 0.0))
        questions = []
        for q in conv.questions:
            evidence = set(q.evidence)
            for h in memory.search(q.text, filters=scope, top_k=10, explain=True)["results"]:
                questions.append(
                    (
                        h["score_details"].get("relative", 0.0),
                        h["metadata"].get("dia_id") in evidence,
                    )
                )
        out[conv.sample_id] = {"exact": exact, "unrelated": unrelated, "questions": questions}
    return out


def _judge(cal: ScoreCalibration, part: dict[str, Any]) -> dict[str, Any]:
    exact = [cal.apply(s) for s in part["exact"]]
    unrelated = [cal.apply(s) for s in part["unrelated"]]
    bands = []
    for low, high in itertools.pairwise(BANDS):
        inside = [rel for s, rel in part["questions"] if low <= cal.apply(s) < high]
        bands.append(
            {
                "band": f"{low:.1f}-{min(high, 1.0):.1f}",
                "hits": len(inside),
                "evidence_share": round(sum(inside) / len(inside), 3) if inside else None,
            }
        )
    evidence = [cal.apply(s) for s, rel in part["questions"] if rel]
    return {
        "exact_at_least_0.8": round(sum(s >= 0.8 for s in exact) / len(exact), 3),
        "exact_median": round(statistics.median(exact), 3),
        "unrelated_at_most_0.1": round(sum(s <= 0.1 for s in unrelated) / len(unrelated), 3),
        "unrelated_median": round(statistics.median(unrelated), 3),
        "evidence_kept_at_0.1": round(sum(s >= 0.1 for s in evidence) / len(evidence), 3),
        "evidence_kept_at_0.3": round(sum(s >= 0.3 for s in evidence) / len(evidence), 3),
        "bands": bands,
    }


def run(
    data: str | Path | None = None,
    *,
    out: str | Path | None = None,
    embedder: Embedder | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure, fit per held-out fold and on everything; returns the report."""
    say = progress or (lambda _msg: None)
    convs = load(data_path(data))
    base = embedder or make_embedder("local", {})
    with tempfile.TemporaryDirectory(prefix="engram-calibration-") as tmp:
        memory = Memory(path=Path(tmp) / "locomo.db", embedder=base)
        try:
            for conv in convs:
                say(f"ingesting {conv.sample_id} ...")
                ingest(memory, conv, "turns")
            say("searching ...")
            raw = measure(memory, convs)
        finally:
            memory.close()
    folds = []
    for held in raw:
        rest = [raw[c] for c in raw if c != held]
        cal = fit([s for p in rest for s in p["exact"]], [s for p in rest for s in p["unrelated"]])
        folds.append(
            {"held_out": held, "fit": cal.model_dump(mode="json"), **_judge(cal, raw[held])}
        )
    whole = fit(
        [s for p in raw.values() for s in p["exact"]],
        [s for p in raw.values() for s in p["unrelated"]],
    )
    default = FusionConfig().calibration
    pooled = {
        "exact": [s for p in raw.values() for s in p["exact"]],
        "unrelated": [s for p in raw.values() for s in p["unrelated"]],
        "questions": [x for p in raw.values() for x in p["questions"]],
    }
    report: dict[str, Any] = {
        "conversations": len(raw),
        "folds": folds,
        "fit_on_all": whole.model_dump(mode="json"),
        "default": default.model_dump(mode="json") if default else None,
        "default_on_all": _judge(default, pooled) if default else None,
        "raw_medians": {
            "exact": round(statistics.median(pooled["exact"]), 3),
            "unrelated": round(statistics.median(pooled["unrelated"]), 3),
        },
    }
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as text: per held-out fold, then the default curve on everything."""
    lines = [
        "held-out fold  centre  width  exact med  exact>=0.8  unrel med  unrel<=0.1  "
        "evidence>=0.1  evidence>=0.3",
    ]
    for f in report["folds"]:
        lines.append(
            f"{f['held_out']:<14} {f['fit']['center']:.3f}  {f['fit']['width']:.3f}  "
            f"{f['exact_median']:>9.3f}  {f['exact_at_least_0.8']:>10.3f}  "
            f"{f['unrelated_median']:>9.3f}  {f['unrelated_at_most_0.1']:>10.3f}  "
            f"{f['evidence_kept_at_0.1']:>13.3f}  {f['evidence_kept_at_0.3']:>13.3f}"
        )
    fit_all, default = report["fit_on_all"], report["default"]
    lines.append(f"fit on all: centre {fit_all['center']}, width {fit_all['width']}")
    if default is not None:
        judged = report["default_on_all"]
        lines.append(
            f"default (centre {default['center']}, width {default['width']}): exact median "
            f"{judged['exact_median']}, unrelated median {judged['unrelated_median']}, evidence "
            f"kept at 0.1 {judged['evidence_kept_at_0.1']}, at 0.3 {judged['evidence_kept_at_0.3']}"
        )
        lines.append("calibrated score band -> share of LoCoMo question hits that are evidence")
        for band in judged["bands"]:
            share = "-" if band["evidence_share"] is None else f"{band['evidence_share']:.3f}"
            lines.append(f"  {band['band']}: {share} ({band['hits']} hits)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.calibration [--data FILE] [--out FILE.json]``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, help="LoCoMo JSON file (default: $ENGRAM_LOCOMO)")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    report = run(args.data, out=args.out, progress=print)
    print(format_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
