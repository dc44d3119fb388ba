from __future__ import annotations

import math

import numpy as np
import pytest

from engramdb.core.bm25 import BM25Index


def reference(
    docs: dict[int, list[str]], query: list[str], k1: float = 1.2, b: float = 0.75
) -> dict[int, float]:
    n = len(docs)
    avgdl = sum(len(d) for d in docs.values()) / n
    out = {}
    for key, doc in docs.items():
        s = 0.0
        for t in dict.fromkeys(query):
            df = sum(1 for d in docs.values() if t in d)
            if not df or t not in doc:
                continue
            tf = doc.count(t)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        if s > 0:
            out[key] = s
    return out


DOCS = {
    1: ["cat", "sat", "mat"],
    2: ["dog", "chase", "cat", "cat"],
    3: ["bird", "sing"],
    4: ["dog", "bark", "loud", "night", "dog"],
    5: ["sushi", "favourite", "food"],
}


def build(docs: dict[int, list[str]]) -> BM25Index:
    idx = BM25Index()
    idx.add(list(docs), list(docs.values()))
    return idx


def test_scores_match_the_formula() -> None:
    idx = build(DOCS)
    keys, scores = idx.search(["cat", "dog"], 10)
    ref = reference(DOCS, ["cat", "dog"])
    assert set(keys.tolist()) == set(ref)
    for key, score in zip(keys, scores, strict=True):
        assert score == pytest.approx(ref[int(key)], rel=1e-5)
    assert list(scores) == sorted(scores, reverse=True)


def test_only_matching_docs_and_k() -> None:
    idx = build(DOCS)
    keys, _ = idx.search(["sushi"], 10)
    assert keys.tolist() == [5]
    assert idx.search(["nothing"], 10)[0].size == 0
    assert idx.search(["cat", "dog"], 1)[0].size == 1


def test_remove_and_replace_update_statistics() -> None:
    idx = build(DOCS)
    idx.remove([2, 4])
    rest = {k: v for k, v in DOCS.items() if k not in (2, 4)}
    keys, scores = idx.search(["cat"], 10)
    assert keys.tolist() == [1]
    assert scores[0] == pytest.approx(reference(rest, ["cat"])[1], rel=1e-5)
    idx.add([1], [["dog"]])
    assert idx.search(["cat"], 10)[0].size == 0
    assert idx.search(["dog"], 10)[0].tolist() == [1]
    assert len(idx) == 3


def test_allowed_subset() -> None:
    idx = build(DOCS)
    keys, _ = idx.search(["cat", "dog"], 10, allowed=np.array([4, 99], dtype=np.int64))
    assert keys.tolist() == [4]


def test_compaction_keeps_results() -> None:
    idx = BM25Index()
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(50)]
    docs = {i: [vocab[j] for j in rng.integers(0, 50, 8)] for i in range(3000)}
    idx.add(list(docs), list(docs.values()))
    idx.remove(list(range(0, 2000)))
    rest = {k: v for k, v in docs.items() if k >= 2000}
    _, scores = idx.search(["w1", "w2"], 5)
    ref = sorted(reference(rest, ["w1", "w2"]).items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert scores.tolist() == pytest.approx([s for _, s in ref], rel=1e-5)


def _random_docs(seed: int, count: int) -> dict[int, list[str]]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(300)]
    return {
        int(key): [vocab[int(i)] for i in rng.zipf(1.3, size=int(rng.integers(0, 15))) % 300]
        for key in rng.choice(10_000, size=count, replace=False)
    }


def _all_scores(idx: BM25Index, queries: list[list[str]]) -> list[tuple[list[int], list[float]]]:
    out = []
    for q in queries:
        keys, scores = idx.search(q, 10_000)
        out.append((keys.tolist(), [round(float(s), 5) for s in scores]))
        out.append(([], [round(idx.best_score(q), 5)]))
    return out


def assert_formula(idx: BM25Index, docs: dict[int, list[str]], queries: list[list[str]]) -> None:
    """Every query's hits and scores are the formula's over ``docs``."""
    for q in queries:
        keys, scores = idx.search(q, 10_000)
        ref = reference(docs, q)
        assert set(keys.tolist()) == set(ref)
        for key, score in zip(keys, scores, strict=True):
            assert score == pytest.approx(ref[int(key)], rel=1e-4)


def test_bulk_build_equals_one_by_one_through_removals_and_replacements() -> None:
    """A cold load (one ``add`` of many) and incremental adds index exactly alike.

    Both are checked against the formula, through removals (which leave dead
    rows in the postings), replacements, a key repeated within one call, and
    enough removals to compact.
    """
    docs = _random_docs(1, 1500)
    queries = [["w0"], ["w1", "w2"], ["w5", "w0", "w299"], ["w17"], ["absent"]]
    bulk = build(docs)
    single = BM25Index()
    for key, doc in docs.items():
        single.add([key], [doc])
    assert _all_scores(bulk, queries) == _all_scores(single, queries)
    assert_formula(bulk, docs, queries)

    # Remove a third, replace some, repeat a key within one call (the last wins).
    keys = list(docs)
    gone, changed = keys[:500], keys[500:800]
    for idx in (bulk, single):
        idx.remove(gone)
    new = {k: ["w1", "w1", "fresh"] for k in changed}
    bulk.add([*changed, changed[0]], [*new.values(), ["w2"]])
    for k, doc in new.items():
        single.add([k], [doc])
    single.add([changed[0]], [["w2"]])
    expect = {k: v for k, v in docs.items() if k not in gone} | new | {changed[0]: ["w2"]}
    queries.append(["fresh"])
    assert len(bulk) == len(single) == len(expect)
    assert _all_scores(bulk, queries) == _all_scores(single, queries)
    assert_formula(bulk, expect, queries)

    # Past 1,000 dead rows and a quarter of the live ones, the index compacts.
    for idx in (bulk, single):
        idx.remove(list(expect)[:600])
    rest = {k: v for k, v in expect.items() if k not in list(expect)[:600]}
    assert bulk._dead == 0
    assert _all_scores(bulk, queries) == _all_scores(single, queries)
    for q in queries:
        assert set(bulk.search(q, 10_000)[0].tolist()) == set(reference(rest, q))
