"""Fit the score calibration on the retrieval development suite (the shipped defaults).

The ``score`` search returns is a curve of ``relative``
(:class:`engramdb.search.ScoreCalibration`): the fused score over what a
perfect match of the query would fuse to in that scope, so it depends on the
query, the memory and the scope, never on what else is in the candidate pool.
This script fits the curve's ``knots`` so that the score is the probability
that the memory answers the query: isotonic regression (pool adjacent
violators) of "is an answer" on ``relative``, over every dumped hit of every
question, answerable or not, in bins of 0.05 of ``relative``; the
knots are the bins' mean ``relative`` and fitted probability, made strictly
increasing by 0.0001 a step so that the score keeps the fused order. Two
curves: ``knots`` for questions that name none of the memories' speakers,
``speaker_knots`` for those that name one (the actor part in play, read from
each hit's ``score_details["speaker_named"]``); each is fitted on its own
questions, which keep the weight they have in the whole mix. Platt
scaling (a logistic ``center``/``width``, the curve's other form) is fitted
and judged beside it for comparison.

- **The mix decides**: each shape weighs the same, and within a shape each
  question the same (its hits share its weight).
- **Held out**: ``--folds`` refits once per fold (a user of the facts shape, a
  conversation of LoCoMo; every other fold of every shape trains) and reports,
  per shape, the expected calibration error, the top-1 AUC (correct vs wrong or
  unanswerable), and at ``--threshold`` the share of correct top-1 answers
  hidden and of unanswerable questions that return nothing.
- **Reproducible bit for bit**: fixed bins, pooling in order (Newton's method
  from a fixed start for Platt), no random state; rounded to 4 decimals.

The dumps come from the shipped code (``engram bench retrieval --dump``), so
their scores were made with the calibration in force then. Each hit's
``relative`` is the dumped one (``score_details["relative"]``) where the curve
in force (the shipped knots, or ``--center``/``--width`` for a dump made with a
logistic) maps it to the hit's score; where a lever after fusion moved the score
(a lent neighbour, a superseder lifted to what it replaces), it is read back
from the score through that curve. Needs numpy, engramdb and its benchmarks.

Usage::

    engram bench retrieval --dump bench-results/retrieval-dump.jsonl
    python scripts/fit_calibration.py bench-results/retrieval-dump.jsonl --folds

The printed ``knots`` are what ``ScoreCalibration.knots`` ships.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from engramdb.search import ScoreCalibration
from engramdb_bench.retrieval import auc

EPS = 1e-12


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The dumped questions of every file, in file order."""
    out: list[dict[str, Any]] = []
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out


def speaker_named(question: dict[str, Any]) -> bool:
    """Whether a dumped question named a speaker of the memories (its hits say so).

    A dump made before the key existed: whether a hit had the actor part.
    """
    hits = question["hits"]
    if hits and "speaker_named" in hits[0]["score_details"]:
        return bool(hits[0]["score_details"]["speaker_named"])
    return any(h["score_details"].get("actor", 0) > 0 for h in hits)


def relative_of(score: float, dumped: ScoreCalibration, speaker: bool = False) -> float:
    """The relative fused score that the curve the dump was made with mapped to ``score``.

    Knots are inverted piecewise-linearly (a score at a flat end reads as that end);
    ``speaker``: the question named a speaker (the dump's ``speaker_knots``).
    """
    knots = dumped.curve(speaker)
    if knots:
        xs = [x for x, _ in knots]
        ys = [y for _, y in knots]
        return float(np.interp(score, ys, xs))
    s = min(max(score, EPS), 1.0 - EPS)
    return float(dumped.center + dumped.width * math.log(s / (1.0 - s)))


AFTER_CURVE: tuple[str, ...] = ("question", "superseded")
"""The ``score_details`` keys of the factors applied to a calibrated score:
``FusionConfig.question_factor`` (a turn that asks) and
``FusionConfig.superseded_factor`` (a replaced memory, for a question about now)."""


def after_curve_factor(hit: dict[str, Any]) -> float:
    """What a hit's calibrated score was multiplied by after the curve (1: nothing).

    Such a hit is fitted at its ``relative`` like every other, and judged with
    its factors (:data:`AFTER_CURVE`).
    """
    details = hit.get("score_details", {})
    return math.prod(float(details.get(key, 1.0)) for key in AFTER_CURVE)


def hit_relative(hit: dict[str, Any], dumped: ScoreCalibration, speaker: bool = False) -> float:
    """A dumped hit's relative fused score: as dumped, unless a lever moved its score.

    ``score_details["relative"]`` is the value the curve read; a lever after
    fusion (a lent neighbour, a superseder lifted) moves the score off the curve,
    and then only the score says where the hit stands: it is read back
    (:func:`relative_of`). Reading every hit back would pin those beyond a flat
    end of the curve to that end, and move the end knots a little on every refit.
    The factors after the curve are taken out of its score first
    (:func:`after_curve_factor`).
    """
    relative = hit.get("score_details", {}).get("relative")
    factor = after_curve_factor(hit)
    if factor <= 0:  # a factor of 0: nothing of the score is left to read back
        return float(relative) if relative is not None else 0.0
    score = float(hit["score"]) / factor
    if relative is not None and abs(dumped.apply(float(relative), speaker) - score) <= 1e-9:
        return float(relative)
    return relative_of(score, dumped, speaker)


def rows(
    questions: list[dict[str, Any]], dumped: ScoreCalibration, speaker: bool | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(relative, label, weight) of every hit; each shape and each question weighs the same.

    ``speaker``: only the questions that name a speaker (True) or none (False),
    each keeping the weight it has among all of ``questions``.
    """
    per_shape: dict[str, int] = defaultdict(int)
    for q in questions:
        if q["hits"]:
            per_shape[q["shape"]] += 1
    xs: list[float] = []
    ys: list[float] = []
    ws: list[float] = []
    for q in questions:
        hits = q["hits"]
        named = speaker_named(q)
        if not hits or (speaker is not None and named != speaker):
            continue
        weight = 1.0 / (per_shape[q["shape"]] * len(hits))
        for hit in hits:
            xs.append(hit_relative(hit, dumped, named))
            ys.append(1.0 if hit["is_gold"] else 0.0)
            ws.append(weight)
    w = np.asarray(ws)
    return np.asarray(xs), np.asarray(ys), w * (len(w) / w.sum())


def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted logistic regression ``y ~ sigmoid(a x + b)`` by Newton's method: (center, width)."""
    a, b = 10.0, -8.0
    for _ in range(100):
        z = np.clip(a * x + b, -700, 700)
        p = 1.0 / (1.0 + np.exp(-z))
        g = w * (p - y)
        h = w * p * (1.0 - p) + 1e-9
        grad = np.array([np.sum(g * x), np.sum(g)])
        hess = np.array([[np.sum(h * x * x), np.sum(h * x)], [np.sum(h * x), np.sum(h)]])
        step = np.linalg.solve(hess, grad)
        a, b = a - float(step[0]), b - float(step[1])
        if float(np.max(np.abs(step))) < 1e-10:
            break
    return round(-b / a, 4), round(1.0 / a, 4)


def fit_knots(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, step: float = 0.05
) -> tuple[tuple[float, float], ...]:
    """Binned isotonic regression of ``y`` on ``x``: strictly increasing (relative, p) knots.

    Probabilities are rounded to 4 decimals and at least 0.0001.
    """
    count = round(1 / step)
    bins = np.minimum((np.clip(x, 0.0, 1.0) / step).astype(int), count - 1)
    blocks: list[list[float]] = []  # [sum w*x, sum w*y, sum w] of each pooled block
    for b in range(count):
        inside = bins == b
        if not inside.any():
            continue
        blocks.append([float(np.sum(w[inside] * x[inside])), float(np.sum(w[inside] * y[inside])),
                       float(np.sum(w[inside]))])  # fmt: skip
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            last = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], last, strict=True)]
    knots: list[tuple[float, float]] = []
    for sx, sy, sw in blocks:
        # Never 0: a bin with no answer in the suite cannot promise that none ever is.
        kx, ky = round(sx / sw, 4), max(round(sy / sw, 4), 0.0001)
        if knots:
            kx = max(kx, knots[-1][0] + 0.0001)
            ky = max(ky, knots[-1][1] + 0.0001)
        knots.append((round(kx, 4), round(min(ky, 1.0), 4)))
    return tuple(knots)


def fit_curves(questions: list[dict[str, Any]], dumped: ScoreCalibration) -> ScoreCalibration:
    """Both curves: ``knots`` on questions naming no speaker, ``speaker_knots`` on the rest."""
    return ScoreCalibration(
        knots=fit_knots(*rows(questions, dumped, speaker=False)),
        speaker_knots=fit_knots(*rows(questions, dumped, speaker=True)),
    )


def _means(
    per: dict[str, list[dict[str, Any]]], metrics: tuple[str, ...]
) -> dict[str, dict[str, float | None]]:
    """Each shape's mean over its folds of each metric (NaN folds left out)."""
    return {
        shape: {
            m: round(float(np.mean(vals)), 4)
            if (vals := [r[m] for r in rs if r[m] == r[m]])
            else None
            for m in metrics
        }
        for shape, rs in per.items()
    }


def _top_auc(top: list[tuple[float, int]]) -> float | None:
    """The top-1 AUC as the benchmark computes it (right top answers against the rest)."""
    return auc([s for s, y in top if y == 1], [s for s, y in top if y == 0])


def ece(pairs: list[tuple[float, float, int]], bins: int = 10) -> float:
    """Expected calibration error (weighted) over equal-width score bins: (score, weight, label)."""
    total_w = sum(w for _, w, _ in pairs)
    if not total_w:
        return float("nan")
    err = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [(s, w, y) for s, w, y in pairs if lo <= s < hi or (b == bins - 1 and s >= 1.0)]
        bw = sum(w for _, w, _ in inside)
        if bw:
            mean_s = sum(s * w for s, w, _ in inside) / bw
            mean_y = sum(y * w for _, w, y in inside) / bw
            err += bw / total_w * abs(mean_s - mean_y)
    return err


def judge(
    questions: list[dict[str, Any]],
    cal: ScoreCalibration,
    dumped: ScoreCalibration,
    threshold: float,
) -> dict[str, float]:
    """ECE, top-1 AUC, hidden correct answers and empty unanswerable ones under ``cal``.

    ``cal``: the curve judged (isotonic knots, or a Platt logistic).
    """
    calib: list[tuple[float, float, int]] = []
    top: list[tuple[float, int]] = []
    correct = hidden = unanswerable = empty = 0
    for q in questions:
        hits = q["hits"]
        named = speaker_named(q)
        scores = [
            cal.apply(hit_relative(h, dumped, named), named) * after_curve_factor(h) for h in hits
        ]
        for h, s in zip(hits, scores, strict=True):
            calib.append((s, 1.0 / len(hits), 1 if h["is_gold"] else 0))
        answerable = bool(q.get("answerable", True)) and bool(q.get("gold"))
        right = bool(hits) and bool(hits[0]["is_gold"]) and answerable
        top.append((scores[0] if scores else 0.0, 1 if right else 0))
        if right:
            correct += 1
            hidden += scores[0] < threshold
        if not answerable:
            unanswerable += 1
            empty += not scores or scores[0] < threshold
    return {
        "ece": round(ece(calib), 4),
        "auc_top1": round(top_auc, 4) if (top_auc := _top_auc(top)) is not None else float("nan"),
        "hidden_correct": round(hidden / correct, 4) if correct else float("nan"),
        "unanswerable_empty": round(empty / unanswerable, 4) if unanswerable else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument(
        "--center", type=float, default=None, help="The dump's logistic centre (default: knots)."
    )
    parser.add_argument(
        "--width", type=float, default=None, help="The dump's logistic width (default: knots)."
    )
    parser.add_argument("--threshold", type=float, default=0.3)
    parser.add_argument("--folds", action="store_true", help="Leave-one-fold-out figures.")
    parser.add_argument("--report", type=Path, default=None, help="Write the figures here.")
    args = parser.parse_args(argv)
    questions = load(args.dumps)
    dumped = ScoreCalibration()  # the shipped knots
    if args.center is not None or args.width is not None:
        dumped = ScoreCalibration(center=args.center or 0.77, width=args.width or 0.06)
    data = rows(questions, dumped)
    curves = fit_curves(questions, dumped)
    one = ScoreCalibration(knots=fit_knots(*data), speaker_knots=())
    center, width = fit(*data)
    # Not validated: Platt's centre lands above 1 here (docs/retrieval.md).
    platt = ScoreCalibration.model_construct(knots=(), speaker_knots=(), center=center, width=width)
    by_shape: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        by_shape[q["shape"]].append(q)
    report: dict[str, Any] = {
        "knots": [list(k) for k in curves.knots],
        "speaker_knots": [list(k) for k in curves.speaker_knots],
        "platt": {"center": center, "width": width},
        "in_sample": {s: judge(qs, curves, dumped, args.threshold) for s, qs in by_shape.items()},
        "in_sample_one_curve": {
            s: judge(qs, one, dumped, args.threshold) for s, qs in by_shape.items()
        },
        "in_sample_platt": {
            s: judge(qs, platt, dumped, args.threshold) for s, qs in by_shape.items()
        },
        "dumped_curve": {
            s: judge(qs, dumped, dumped, args.threshold) for s, qs in by_shape.items()
        },
    }
    if args.folds:
        metrics = ("ece", "auc_top1", "hidden_correct", "unanswerable_empty")
        per: dict[str, list[dict[str, Any]]] = defaultdict(list)
        per_one: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for shape, key in sorted({(q["shape"], str(q["fold"])) for q in questions}):
            train = [q for q in questions if (q["shape"], str(q["fold"])) != (shape, key)]
            test = [q for q in questions if (q["shape"], str(q["fold"])) == (shape, key)]
            fold = fit_curves(train, dumped)
            per[shape].append({"fold": key} | judge(test, fold, dumped, args.threshold))
            fold_one = ScoreCalibration(knots=fit_knots(*rows(train, dumped)), speaker_knots=())
            per_one[shape].append({"fold": key} | judge(test, fold_one, dumped, args.threshold))
        report["folds"] = dict(per)
        report["folds_mean"] = _means(per, metrics)
        report["folds_mean_one_curve"] = _means(per_one, metrics)
    print(json.dumps({k: v for k, v in report.items() if k != "folds"}, indent=2))
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
