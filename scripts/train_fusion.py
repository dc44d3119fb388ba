"""Fit and measure a learned fusion on the retrieval development suite (a measurement tool).

Reads the candidate dumps of ``engram bench retrieval --dump`` (one JSON line
per question: its shape, fold, gold ids and the top hits with their
``score_details``, whose ``features`` are :data:`engramdb.search.FEATURES`), fits
a logistic regression ``P(a candidate answers the question | its features)``
and reports how it ranks and how calibrated it is, in sample and held out.
Nothing it fits ships: measured on the suite (docs/retrieval.md, "A learned
fusion, measured"), this pointwise model ranks worse than the hand-set fusion
on LoCoMo and loses the supersession order the updates shape depends on.

- **The mix decides, not the biggest shape**: every shape weighs the same in
  the fit (each candidate weighted by 1 / the candidates of its shape), and
  within a shape every question the same.
- **Held out, not tuned**: ``--folds`` refits once per fold key (a user of the
  facts shape, a conversation of LoCoMo) on every other fold of every shape and
  scores the held-out fold with that model: P@1, MRR, top-1 AUC (correct vs
  wrong-or-unanswerable) and expected calibration error, per shape and fold.
- **Reproducible bit for bit**: lbfgs on the same rows in the same order, and
  the coefficients rounded to 6 decimals; ``--check FILE`` refits and compares.

- **A residual re-ranker** (``--residual``): what a learned model adds *on top
  of* the shipped ranking. A pairwise logistic model (each right hit against
  each wrong one of its question) learns corrections over the shipped score,
  which enters as a fixed offset (``logit(score)``), from the features above
  and the levers' marks (lent, asks, chatter, other subject, time, attribute,
  supersession), L2-penalised by ``--lam``; held out the same way, it re-orders
  each question's first ``--top`` hits (a superseder kept above what it
  supersedes) and reports every shape's figures beside the dump's order.

Usage::

    engram bench retrieval --dump bench-results/retrieval-dump.jsonl
    python scripts/train_fusion.py bench-results/retrieval-dump.jsonl --folds
    python scripts/train_fusion.py DUMP --out bench-results/fusion.json --report R.json
    python scripts/train_fusion.py DUMP --residual [--lam 0.1] [--top 10]
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
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression

from engramdb.search import FEATURES
from engramdb_bench.retrieval import QueryDump, metrics

VERSION = "fusion_v1"


class LearnedFusion(BaseModel):
    """A logistic model over :data:`FEATURES`: ``score = P(answers the query)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    features: tuple[str, ...]
    coef: tuple[float, ...]
    intercept: float
    trained_on: dict[str, Any] = Field(default_factory=dict)

    def probability(self, values: list[float]) -> float:
        """The score of one candidate's feature values (in :attr:`features` order)."""
        z = self.intercept + sum(c * v for c, v in zip(self.coef, values, strict=True))
        return 0.0 if z < -700 else 1.0 / (1.0 + math.exp(-z))


C = 1.0
"""Inverse L2 strength: measured flat between 0.1 and 10 on the folds."""


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The dumped questions of every file, in file order."""
    out: list[dict[str, Any]] = []
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out


def rows_of(question: dict[str, Any]) -> list[tuple[list[float], int]]:
    """Feature vectors and labels of a question's hits that carry features."""
    out = []
    for hit in question["hits"]:
        feats = (hit.get("score_details") or {}).get("features")
        if feats is None:
            continue  # a lent neighbour: scored from its anchor, not by the model
        out.append(([float(feats[f]) for f in FEATURES], 1 if hit["is_gold"] else 0))
    return out


def fit(questions: list[dict[str, Any]]) -> LearnedFusion:
    """One model on ``questions``: each shape weighs the same, each question within it too."""
    per_shape: dict[str, int] = defaultdict(int)
    for q in questions:
        per_shape[q["shape"]] += 1
    xs: list[list[float]] = []
    ys: list[int] = []
    ws: list[float] = []
    for q in questions:
        rows = rows_of(q)
        if not rows:
            continue
        weight = 1.0 / (per_shape[q["shape"]] * len(rows))
        for x, y in rows:
            xs.append(x)
            ys.append(y)
            ws.append(weight)
    x_arr = np.asarray(xs, dtype=np.float64)
    y_arr = np.asarray(ys, dtype=np.int64)
    w_arr = np.asarray(ws, dtype=np.float64)
    w_arr *= len(w_arr) / w_arr.sum()
    model = LogisticRegression(C=C, solver="lbfgs", max_iter=5000, tol=1e-10)
    model.fit(x_arr, y_arr, sample_weight=w_arr)
    return LearnedFusion(
        version=VERSION,
        features=FEATURES,
        coef=tuple(round(float(c), 6) for c in model.coef_[0]),
        intercept=round(float(model.intercept_[0]), 6),
        trained_on={
            "shapes": dict(sorted(per_shape.items())),
            "candidates": len(ys),
            "positives": int(y_arr.sum()),
            "C": C,
        },
    )


def score_questions(model: LearnedFusion, questions: list[dict[str, Any]]) -> dict[str, float]:
    """P@1, MRR, top-1 AUC and ECE of ``model`` re-ranking each question's dumped hits."""
    p1 = rr = 0.0
    answerable = 0
    top: list[tuple[float, int]] = []  # (top-1 score, correct)
    calib: list[tuple[float, int]] = []
    for q in questions:
        rows = rows_of(q)
        scored = sorted(((model.probability(x), y) for x, y in rows), key=lambda t: -t[0])
        calib.extend(scored)
        if not scored:
            top.append((0.0, 0))
            continue
        correct = scored[0][1] == 1 and q.get("answerable", True)
        top.append((scored[0][0], 1 if correct else 0))
        if q.get("answerable", True) and q.get("gold"):
            answerable += 1
            p1 += 1.0 if scored[0][1] == 1 else 0.0
            rank = next((i for i, (_, y) in enumerate(scored) if y == 1), None)
            rr += 1.0 / (rank + 1) if rank is not None else 0.0
    return {
        "questions": len(questions),
        "p@1": p1 / answerable if answerable else 0.0,
        "mrr": rr / answerable if answerable else 0.0,
        "auc_top1": auc(top),
        "ece": ece(calib),
    }


def auc(pairs: list[tuple[float, int]]) -> float:
    """Area under the ROC curve of scores for label 1 vs 0 (ties count a half)."""
    pos = [s for s, y in pairs if y == 1]
    neg = [s for s, y in pairs if y == 0]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def ece(pairs: list[tuple[float, int]], bins: int = 10) -> float:
    """Expected calibration error over equal-width score bins."""
    if not pairs:
        return float("nan")
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [(s, y) for s, y in pairs if lo <= s < hi or (b == bins - 1 and s == 1.0)]
        if inside:
            mean_s = sum(s for s, _ in inside) / len(inside)
            mean_y = sum(y for _, y in inside) / len(inside)
            total += len(inside) / len(pairs) * abs(mean_s - mean_y)
    return total


def folds(questions: list[dict[str, Any]]) -> dict[str, Any]:
    """Leave-one-fold-out: each fold scored by a model fitted on every other fold."""
    keys = sorted({(q["shape"], str(q["fold"])) for q in questions})
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for shape, key in keys:
        train = [q for q in questions if (q["shape"], str(q["fold"])) != (shape, key)]
        test = [q for q in questions if (q["shape"], str(q["fold"])) == (shape, key)]
        model = fit(train)
        per[shape].append({"fold": key, **score_questions(model, test)})
    summary = {}
    for shape, rows in per.items():
        summary[shape] = {
            metric: _mean([r[metric] for r in rows]) for metric in ("p@1", "mrr", "auc_top1", "ece")
        }
    return {"per_fold": dict(per), "mean": summary}


def _mean(values: list[float]) -> float:
    real = [v for v in values if not math.isnan(v)]
    return sum(real) / len(real) if real else float("nan")


# -- the residual re-ranker ----------------------------------------------------------

RESIDUAL_FEATURES: tuple[str, ...] = (
    *FEATURES,
    "cosine",
    "attribute",
    "lent",
    "asks",
    "time_factor",
    "chatter",
    "other_subject",
    "speaker_named",
    "supersedes",
)
"""What the residual model reads of a hit besides its score: :data:`FEATURES` (0 for
a lent hit, which has none), the raw cosine, the attribute part, and the marks
the levers after fusion leave in ``score_details``."""


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1.0 - 1e-4)
    return math.log(p / (1.0 - p))


def residual_row(hit: dict[str, Any]) -> list[float]:
    """One hit's :data:`RESIDUAL_FEATURES` values."""
    d = hit.get("score_details") or {}
    feats = d.get("features") or {}
    parts = d.get("parts") or {}
    return [
        *(float(feats.get(f, 0.0)) for f in FEATURES),
        float(d.get("semantic") or 0.0),
        float(parts.get("attribute") or 0.0),
        0.0 if "features" in d else 1.0,
        1.0 if "question" in d else 0.0,
        float(d.get("time_factor", 1.0)),
        float(d.get("chatter", 1.0)),
        float(d.get("other_subject", 1.0)),
        1.0 if d.get("speaker_named") else 0.0,
        1.0 if "lifted_from" in d else 0.0,
    ]


def _matrices(question: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hits = question["hits"]
    x = np.array([residual_row(h) for h in hits], dtype=np.float64).reshape(len(hits), -1)
    offset = np.array([_logit(float(h["score"])) for h in hits], dtype=np.float64)
    gold = np.array([bool(h["is_gold"]) for h in hits], dtype=bool)
    return x, offset, gold


def fit_residual(questions: list[dict[str, Any]], lam: float) -> np.ndarray:
    """Corrections over the shipped score (:data:`RESIDUAL_FEATURES` order).

    Pairwise logistic loss on every (right hit, wrong hit) pair of a question,
    the shipped score's logit a fixed offset; each shape weighs the same, each
    question within it too; L2 strength ``lam`` on standardised differences.
    """
    per_shape: dict[str, int] = defaultdict(int)
    blocks = []
    for q in questions:
        x, offset, gold = _matrices(q)
        if gold.any() and (~gold).any():
            per_shape[q["shape"]] += 1
            blocks.append((q["shape"], x, offset, gold))
    diffs, offsets, weights = [], [], []
    for shape, x, offset, gold in blocks:
        d = (x[gold][:, None, :] - x[~gold][None, :, :]).reshape(-1, x.shape[1])
        o = (offset[gold][:, None] - offset[~gold][None, :]).reshape(-1)
        diffs.append(d)
        offsets.append(o)
        weights.append(np.full(len(d), 1.0 / (len(d) * per_shape[shape])))
    d_all = np.vstack(diffs)
    o_all = np.concatenate(offsets)
    w_all = np.concatenate(weights)
    w_all /= w_all.sum()
    scale = d_all.std(axis=0) + 1e-9
    d_all = d_all / scale

    def loss(beta: np.ndarray) -> tuple[float, np.ndarray]:
        z = o_all + d_all @ beta
        value = float((w_all * np.logaddexp(0.0, -z)).sum() + lam * beta @ beta)
        grad = -(w_all / (1.0 + np.exp(z))) @ d_all + 2.0 * lam * beta
        return value, grad

    found = minimize(loss, np.zeros(d_all.shape[1]), jac=True, method="L-BFGS-B")
    coef: np.ndarray = found.x / scale
    return coef


def reordered(question: dict[str, Any], coef: np.ndarray, top: int) -> list[dict[str, Any]]:
    """The question's hits, the first ``top`` re-ordered by the residual model.

    A superseder stays above a memory it supersedes (``lifted_from``), as the
    shipped order keeps it.
    """
    hits: list[dict[str, Any]] = question["hits"]
    if not hits:
        return []
    x, offset, _ = _matrices(question)
    score = offset + x @ coef
    head = sorted(range(min(top, len(hits))), key=lambda i: (-score[i], i))
    order = [hits[i] for i in head] + hits[len(head) :]
    moved = True
    while moved:
        moved = False
        ids = [h["id"] for h in order]
        for pos, hit in enumerate(order):
            source = (hit.get("score_details") or {}).get("lifted_from")
            if source in ids[:pos]:
                order.insert(ids.index(source), order.pop(pos))
                moved = True
                break
    return order


_FIGURES = ("p@1", "p@3", "mrr", "any@10", "all@10", "multi_hop_all@10")


def _figures(questions: list[dict[str, Any]], orders: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The suite's ranking figures (:func:`engramdb_bench.retrieval.metrics`) of ``orders``."""
    dumps = [
        QueryDump(**{**q, "hits": tuple({**h, "rank": r} for r, h in enumerate(hits, 1))})
        for q, hits in zip(questions, orders, strict=True)
    ]
    found = metrics(dumps)
    return {k: found[k] for k in _FIGURES if found.get(k) is not None}


def residual_folds(questions: list[dict[str, Any]], lam: float, top: int) -> dict[str, Any]:
    """Leave-one-fold-out: the dump's order and the re-ranked one, per shape and fold."""
    keys = sorted({(q["shape"], str(q["fold"])) for q in questions})
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    coefs = []
    for shape, key in keys:
        train = [q for q in questions if (q["shape"], str(q["fold"])) != (shape, key)]
        test = [q for q in questions if (q["shape"], str(q["fold"])) == (shape, key)]
        coef = fit_residual(train, lam)
        coefs.append(coef)
        per[shape].append(
            {
                "fold": key,
                "shipped": _figures(test, [q["hits"] for q in test]),
                "residual": _figures(test, [reordered(q, coef, top) for q in test]),
            }
        )
    mean: dict[str, Any] = {}
    for shape, rows in per.items():
        mean[shape] = {
            side: {m: _mean([r[side][m] for r in rows]) for m in rows[0][side]}
            for side in ("shipped", "residual")
        }
    learned = dict(zip(RESIDUAL_FEATURES, np.mean(coefs, axis=0).round(4).tolist(), strict=True))
    return {"lam": lam, "top": top, "per_fold": dict(per), "mean": mean, "coef_mean": learned}


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="Write the model here.")
    parser.add_argument("--report", type=Path, default=None, help="Write fold figures here.")
    parser.add_argument("--folds", action="store_true", help="Leave-one-fold-out figures.")
    parser.add_argument("--check", type=Path, default=None, help="Refit; compare with FILE.")
    parser.add_argument(
        "--residual", action="store_true", help="Held-out figures of a residual re-ranker."
    )
    parser.add_argument("--lam", type=float, default=0.1, help="Its L2 strength.")
    parser.add_argument("--top", type=int, default=10, help="The hits it re-orders.")
    args = parser.parse_args(argv)
    questions = load(args.dumps)
    if args.residual:
        found = residual_folds(questions, args.lam, args.top)
        print(json.dumps({k: found[k] for k in ("lam", "top", "mean", "coef_mean")}, indent=2))
        if args.report is not None:
            args.report.parent.mkdir(parents=True, exist_ok=True)
            args.report.write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
        return 0
    model = fit(questions)
    text = model.model_dump_json(indent=2) + "\n"
    if args.check is not None:
        same = args.check.read_text(encoding="utf-8") == text
        print("same" if same else f"differs from {args.check}")
        return 0 if same else 1
    report: dict[str, Any] = {"model": json.loads(text), "in_sample": {}}
    by_shape: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        by_shape[q["shape"]].append(q)
    for shape, qs in sorted(by_shape.items()):
        report["in_sample"][shape] = score_questions(model, qs)
    if args.folds:
        report["folds"] = folds(questions)
    print(json.dumps({k: v for k, v in report.items() if k != "folds"}, indent=2))
    if args.folds:
        print(json.dumps(report["folds"]["mean"], indent=2))
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
