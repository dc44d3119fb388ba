"""``engramdb_bench.embedder_candidates``: the workload and the scoring, without models.

The candidates themselves need their own virtual environments (torch, the
converted ONNX graphs); docs/embedders.md, "Candidates re-measured on the mix",
has the run.
"""

from __future__ import annotations

import numpy as np

from engramdb_bench import embedder_candidates as ec


def test_fact_set_shape() -> None:
    fs = ec.fact_set()
    assert len(fs["facts"]) == 15 * 12
    assert len(fs["questions"]) == 15 * 12 * len(ec.LANGS)
    styles = {f["style"] for f in fs["facts"]}
    assert styles == {"first-person", "summary"}
    for q in fs["questions"]:
        assert fs["facts"][q["fact"]]["user"] == q["user"]
    # each user's twelve facts are twelve different slots
    for u in range(15):
        slots = [f["slot"] for f in fs["facts"] if f["user"] == u]
        assert len(set(slots)) == 12


def test_score_facts_perfect_and_reversed() -> None:
    fs = ec.fact_set()
    docs = np.eye(len(fs["facts"]), dtype=np.float32)
    qs = docs[[q["fact"] for q in fs["questions"]]]
    scores = ec.score_facts(fs, docs, qs)
    assert scores["en"] == {"n": 180, "p@1": 1.0, "p@3": 1.0, "mrr": 1.0}
    assert scores["de/summary"]["p@1"] == 1.0
    scores = ec.score_facts(fs, docs, -qs)  # the gold fact is ranked last of 12
    assert scores["es"]["p@1"] == 0.0
    assert abs(scores["es"]["mrr"] - 1 / 12) < 1e-3


def test_score_locomo_any_and_all() -> None:
    ls = {
        "turns": [{"conv": 0}, {"conv": 0}, {"conv": 1}],
        "questions": [{"conv": 0, "gold": [0, 1]}, {"conv": 1, "gold": [2]}],
    }
    turns = np.eye(3, dtype=np.float32)
    qs = np.array([[1, 0, 0], [0, 0, 1]], dtype=np.float32)
    out = ec.score_locomo(ls, turns, qs, k=1)
    assert out == {"questions": 2, "any@1": 1.0, "all@1": 0.5}
    assert ec.score_probe(turns, turns) == 3


def test_worker_imports_only_stdlib_and_numpy() -> None:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(ec.__file__).read_text(encoding="utf-8"))
    top = {
        (node.module if isinstance(node, ast.ImportFrom) else node.names[0].name).split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    assert top <= {
        "__future__",
        "argparse",
        "json",
        "os",
        "platform",
        "statistics",
        "subprocess",
        "sys",
        "tempfile",
        "time",
        "datetime",
        "pathlib",
        "typing",
        "numpy",
    }
