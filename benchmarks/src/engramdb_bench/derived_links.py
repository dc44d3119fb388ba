"""Derived supersessions: how right the links ``engram maintain`` proposes without an LLM are.

Run::

    python -m engramdb_bench.derived_links [--fit] [--out FILE.json]

No LLM, no network: the local embedding model only (about 15 s).

**Changes** (recall and precision): the knowledge-update set
(``tests/data/knowledge_updates.json``) in ``facts`` mode, one gold fact per
stating turn, stored with ``add(infer=False)`` (:func:`engramdb_bench.knowledge_update.ingest`).
A proposal (older, newer) is right when both facts state values of one
chain and the newer's value comes later in it; a restatement of the same
value, a fact of another chain or a one-off fact is wrong. Recall: of the
facts of a value that a later value replaced, those given a right proposal.
Figures are per half: the conversations at even positions (``fit``: the
weights and the threshold are chosen there) and at odd ones (``test``).

**No changes** (false links): the personal-facts set
(``data/personal_facts.json``, 40 users, 672 memories, one add per fact as an
app stores them): no fact replaces another, so every proposal is a false
link; reported per 100 memories.

``--fit`` fits the weights of :data:`engramdb.derived.WEIGHTS` again
(L2-regularised logistic regression over every candidate pair of the fitting
half) and reports them; paste them into ``derived.py`` to use them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from engramdb.attributes import AttributeModel
from engramdb.derived import (
    APPLY_THRESHOLD,
    FEATURES,
    WEIGHTS,
    PairFeatures,
    candidates,
    confidence,
)
from engramdb.embedders import Embedder, make_embedder
from engramdb.memory import Memory
from engramdb.stores.base import MemoryRow
from engramdb_bench import knowledge_update as ku
from engramdb_bench.retrieval import DEFAULT_FACTS

__all__ = ["THRESHOLDS", "evaluate", "fit", "main", "run"]

THRESHOLDS: Final = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _scopes(memory: Memory) -> dict[str, tuple[list[MemoryRow], npt.NDArray[np.float32]]]:
    """Each user's live memories and their stored vectors."""
    rows: dict[str, list[MemoryRow]] = defaultdict(list)
    vecs: dict[str, list[Any]] = defaultdict(list)
    for rec in memory.store.export_rows():
        row: MemoryRow = rec["row"]
        if row.deleted_at is None and row.user_id is not None:
            rows[row.user_id].append(row)
            vecs[row.user_id].append(np.asarray(rec["embedding"], dtype=np.float32))
    return {u: (rows[u], np.stack(vecs[u])) for u in rows}


def _labels(conv: ku.Conversation) -> dict[str, tuple[str, int]]:
    """Each stating turn's chain and the index of its value in the chain."""
    out: dict[str, tuple[str, int]] = {}
    for chain in conv.chains:
        for index, value in enumerate(chain.values):
            for turn in value.turns:
                out.setdefault(turn, (chain.id, index))
    return out


def _right(older: list[str], newer: list[str], labels: dict[str, tuple[str, int]]) -> int:
    """How right a proposal (older, newer) is: 2, 1 or 0.

    2: the newer states a later value of the older's chain; 1: the same value
    again (a restatement: a harmless link for "what holds now"); 0: anything else.
    """
    out = 0
    for a in older:
        for b in newer:
            la, lb = labels.get(a), labels.get(b)
            if la is not None and lb is not None and la[0] == lb[0] and lb[1] >= la[1]:
                out = max(out, 2 if lb[1] > la[1] else 1)
    return out


def _replaced(turns: list[str], labels: dict[str, tuple[str, int]], last: dict[str, int]) -> bool:
    return any(t in labels and labels[t][1] < last[labels[t][0]] for t in turns)


def _collect(embedder: Embedder, data: Path | None) -> dict[str, Any]:
    """Ingest both sets; every candidate pair with its features and label."""
    convs = ku.load(data or ku.DEFAULT_DATA)
    out: dict[str, Any] = {"ku": [], "facts": []}
    with tempfile.TemporaryDirectory(prefix="engram-derived-") as tmp:
        with Memory(Path(tmp) / "ku.db", embedder=embedder) as memory:
            sources = {c.id: ku.ingest(memory, c, "facts") for c in convs}
            model = AttributeModel.shipped()
            scopes = _scopes(memory)
            for n, conv in enumerate(convs):
                rows, vectors = scopes[conv.id]
                labels = _labels(conv)
                last = {c.id: len(c.values) - 1 for c in conv.chains}
                turns = [sources[conv.id].get(r.id, []) for r in rows]
                pairs = [
                    (
                        c.older,
                        c.newer,
                        c.features.values(),
                        _right(turns[c.older], turns[c.newer], labels),
                    )
                    for c in candidates(rows, vectors, model)
                ]
                replaced = [i for i, t in enumerate(turns) if _replaced(t, labels, last)]
                out["ku"].append(
                    {
                        "half": "fit" if n % 2 == 0 else "test",
                        "pairs": pairs,
                        "replaced": replaced,
                        "n": len(rows),
                    }
                )
        with Memory(Path(tmp) / "facts.db", embedder=embedder) as memory:
            users = json.loads(Path(DEFAULT_FACTS).read_text("utf-8"))["users"]
            for user in users:
                for fact in user["facts"]:
                    memory.add(
                        fact["text"], user_id=user["id"], infer=False, timestamp=fact["timestamp"]
                    )
            for rows, vectors in _scopes(memory).values():
                pairs = [
                    (c.older, c.newer, c.features.values(), 0)
                    for c in candidates(rows, vectors, model)
                ]
                out["facts"].append({"pairs": pairs, "replaced": [], "n": len(rows)})
    return out


def _best(pairs: Sequence[Any], weights: Sequence[float]) -> dict[int, tuple[float, int]]:
    """Each older memory's most confident candidate, as ``derive`` keeps it."""
    best: dict[int, tuple[float, int]] = {}
    for older, _newer, values, right in pairs:
        score = confidence(PairFeatures(*values), weights)
        if older not in best or score > best[older][0]:
            best[older] = (score, right)
    return best


def evaluate(
    scopes: Sequence[dict[str, Any]], weights: Sequence[float], threshold: float
) -> dict[str, Any]:
    """Precision, recall and proposals per 100 memories at ``threshold``."""
    proposed = right = same = replaced = found = memories = 0
    for scope in scopes:
        memories += scope["n"]
        best = _best(scope["pairs"], weights)
        replaced += len(scope["replaced"])
        kept = {i: ok for i, (score, ok) in best.items() if score >= threshold}
        proposed += len(kept)
        right += sum(1 for v in kept.values() if v == 2)
        same += sum(1 for v in kept.values() if v == 1)
        found += sum(1 for i in scope["replaced"] if kept.get(i) == 2)
    return {
        "threshold": threshold,
        "proposed": proposed,
        "right": right,
        "restatements": same,
        "precision": round(right / proposed, 4) if proposed else None,
        "precision_with_restatements": round((right + same) / proposed, 4) if proposed else None,
        "recall": round(found / replaced, 4) if replaced else None,
        "per_100_memories": round(100 * proposed / memories, 2) if memories else 0.0,
    }


def fit(scopes: Sequence[dict[str, Any]], l2: float = 1.0, steps: int = 50) -> list[float]:
    """Logistic regression (Newton's method, L2 on the weights, not the bias) on every pair."""
    x = np.array([[1.0, *v] for s in scopes for _, _, v, _ in s["pairs"]], dtype=np.float64)
    y = np.array([float(ok == 2) for s in scopes for _, _, _, ok in s["pairs"]], dtype=np.float64)
    w = np.zeros(x.shape[1])
    reg = np.eye(x.shape[1]) * l2
    reg[0, 0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + reg @ w
        hess = (x * (p * (1 - p))[:, None]).T @ x + reg
        w -= np.linalg.solve(hess, grad)
    return [round(float(v), 2) for v in w]


def run(data: Path | None = None, *, refit: bool = False) -> dict[str, Any]:
    """Measure the proposals on both sets; ``refit``: with weights fitted on the fit half."""
    embedder = make_embedder("local", {})
    got = _collect(embedder, data)
    fit_half = [s for s in got["ku"] if s["half"] == "fit"]
    test_half = [s for s in got["ku"] if s["half"] == "test"]
    weights = fit(fit_half) if refit else list(WEIGHTS)
    report: dict[str, Any] = {
        "benchmark": "engramdb_bench.derived_links",
        "features": list(FEATURES),
        "weights": weights,
        "apply_threshold": APPLY_THRESHOLD,
        "pairs": {
            "fit": sum(len(s["pairs"]) for s in fit_half),
            "fit_right": sum(ok == 2 for s in fit_half for *_, ok in s["pairs"]),
            "test": sum(len(s["pairs"]) for s in test_half),
        },
        "sweep": {
            name: [evaluate(scopes, weights, t) for t in THRESHOLDS]
            for name, scopes in (
                ("fit", fit_half),
                ("test", test_half),
                ("no_changes", got["facts"]),
            )
        },
    }
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.derived_links``."""
    parser = argparse.ArgumentParser(prog="python -m engramdb_bench.derived_links")
    parser.add_argument("--data", type=Path, help="knowledge-update data file")
    parser.add_argument("--fit", action="store_true", help="fit the weights on the fit half")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    report = run(args.data, refit=args.fit)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text, "utf-8")
    print(f"weights {report['weights']} ({', '.join(report['features'])})")
    for name, rows in report["sweep"].items():
        for row in rows:
            print(
                f"{name:10s} t={row['threshold']:.1f} proposed {row['proposed']:4d} "
                f"precision {row['precision']} (with restatements "
                f"{row['precision_with_restatements']}) recall {row['recall']} "
                f"per 100 memories {row['per_100_memories']}",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
