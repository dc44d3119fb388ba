"""VectorIndex: exact and prefilter paths, mutations, filters, threads."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from engramdb.core.vectors import VectorIndex, _best_unordered

Matrix = npt.NDArray[np.float32]
Keys = npt.NDArray[np.int64]

DIM = 192  # the default prefilter keeps a third of it: 64 dimensions


def make_space(seed: int, dim: int = DIM) -> Callable[[int, np.random.Generator], Matrix]:
    """Return a sampler of clustered, anisotropic unit vectors.

    Like e5 embeddings, every vector shares a large common offset (unrelated
    vectors have cosine ~0.8) and the variance decays over the directions,
    so ranking well depends on centring and on the leading components.
    """
    rng = np.random.default_rng(seed)
    spectrum = 1.0 / (1.0 + np.arange(dim) / 16.0)
    offset = rng.normal(size=dim)
    offset *= 2.5 * np.sqrt((spectrum**2).sum()) / np.linalg.norm(offset)
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    centres = (rng.normal(size=(40, dim)) * spectrum) @ rotation.T

    def sample(n: int, draw: np.random.Generator) -> Matrix:
        picked = centres[draw.integers(0, len(centres), size=n)]
        noise = 0.8 * (draw.normal(size=(n, dim)) * spectrum) @ rotation.T
        x = offset + picked + noise
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    return sample


@pytest.fixture(scope="module")
def data() -> tuple[Keys, Matrix, Matrix]:
    sample = make_space(0)
    draw = np.random.default_rng(1)
    vectors = sample(6_000, draw)
    queries = sample(100, draw)
    # Rowid-like keys: positive, increasing, not starting at 0.
    keys = np.arange(100, 100 + len(vectors), dtype=np.int64) * 3
    return keys, vectors, queries


def brute_force(keys: Keys, vectors: Matrix, query: Matrix, k: int) -> tuple[Keys, Matrix]:
    # einsum rather than `@`, like the index: a multi-threaded BLAS call
    # crawls on a busy 2-core machine, and this runs hundreds of times.
    scores = np.einsum("ij,j->i", vectors, query)
    order = np.argsort(-scores, kind="stable")[:k]
    return keys[order], scores[order]


def exact_index(keys: Keys, vectors: Matrix) -> VectorIndex:
    index = VectorIndex(vectors.shape[1], exact_threshold=10**9)
    index.add(keys, vectors)
    assert not index.uses_prefilter
    return index


def prefilter_index(keys: Keys, vectors: Matrix, pool: int = 100) -> VectorIndex:
    # A small re-score pool (under 2 % of the rows) so that recall measures
    # the quality of the prefilter's ranking, not the size of the pool.
    index = VectorIndex(vectors.shape[1], exact_threshold=500, oversample=1, min_pool=pool)
    index.add(keys, vectors)
    assert index.uses_prefilter
    return index


BOTH_PATHS = pytest.mark.parametrize("build", [exact_index, prefilter_index], ids=["exact", "pre"])


def test_exact_path_returns_true_top_k(data: tuple[Keys, Matrix, Matrix]) -> None:
    keys, vectors, queries = data
    index = exact_index(keys, vectors)
    for query in queries[:20]:
        found, scores = index.search(query, 10)
        want_keys, want_scores = brute_force(keys, vectors, query, 10)
        assert found.dtype == np.int64 and scores.dtype == np.float32
        assert found.tolist() == want_keys.tolist()
        np.testing.assert_allclose(scores, want_scores, atol=1e-5)
        assert np.all(np.diff(scores) <= 0)


def test_prefilter_recall_at_10(data: tuple[Keys, Matrix, Matrix]) -> None:
    keys, vectors, queries = data
    index = prefilter_index(keys, vectors)
    hits = 0
    for query in queries:
        found, scores = index.search(query, 10)
        want, _ = brute_force(keys, vectors, query, 10)
        hits += len(set(found.tolist()) & set(want.tolist()))
        # Scores are exact cosines whatever path found the candidates.
        rows = np.searchsorted(keys, found)
        np.testing.assert_allclose(scores, vectors[rows] @ query, atol=1e-5)
        assert np.all(np.diff(scores) <= 0)
    assert hits / (10 * len(queries)) >= 0.95


def test_prefilter_refits_when_the_scope_grows() -> None:
    # The basis is fitted on one population; a second, four times larger,
    # lies in other directions. Without a refit its neighbours would be
    # ranked on directions that barely describe them.
    dim = 96
    first, second = make_space(1, dim), make_space(2, dim)
    draw = np.random.default_rng(3)
    index = VectorIndex(dim, exact_threshold=500, prefilter_dim=32, oversample=1, min_pool=100)
    vectors = np.vstack([first(1_000, draw), second(4_000, draw)])
    keys = np.arange(len(vectors), dtype=np.int64)
    index.add(keys[:1_000], vectors[:1_000])
    assert index.uses_prefilter
    for start in range(1_000, len(vectors), 1_000):
        index.add(keys[start : start + 1_000], vectors[start : start + 1_000])
    queries = second(50, draw)
    hits = 0
    for query in queries:
        found, _ = index.search(query, 10)
        want, _ = brute_force(keys, vectors, query, 10)
        hits += len(set(found.tolist()) & set(want.tolist()))
    assert hits / (10 * len(queries)) >= 0.95


@BOTH_PATHS
def test_re_adding_a_key_replaces_its_vector(
    data: tuple[Keys, Matrix, Matrix], build: Callable[[Keys, Matrix], VectorIndex]
) -> None:
    keys, vectors, queries = data
    index = build(keys, vectors)
    target = int(keys[7])
    index.add(np.array([target]), queries[:1])
    assert len(index) == len(keys)
    found, scores = index.search(queries[0], 1)
    assert found.tolist() == [target]
    assert scores[0] == pytest.approx(1.0, abs=1e-5)
    # The old vector is gone: searching for it no longer finds the key first.
    found, _ = index.search(vectors[7], 1)
    assert found.tolist() != [target]


def test_repeated_key_in_one_batch_keeps_the_last_vector() -> None:
    index = VectorIndex(3)
    index.add(np.array([5, 6, 5]), np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32))
    assert len(index) == 2
    found, scores = index.search(np.array([0, 0, 1], np.float32), 1)
    assert found.tolist() == [5]
    assert scores[0] == pytest.approx(1.0)


@BOTH_PATHS
def test_removed_keys_never_come_back(
    data: tuple[Keys, Matrix, Matrix], build: Callable[[Keys, Matrix], VectorIndex]
) -> None:
    keys, vectors, queries = data
    index = build(keys, vectors)
    # Remove each query's current best hits, then more than a quarter of all
    # rows so that the index compacts.
    best = {int(key) for q in queries for key in index.search(q, 5)[0]}
    removed = set(best) | set(keys[::3].tolist())
    assert index.remove(np.array(sorted(removed), dtype=np.int64)) == len(removed)
    assert index.remove(np.array(sorted(best))) == 0  # already gone: ignored
    assert len(index) == len(keys) - len(removed)
    keep = np.array([key not in removed for key in keys.tolist()])
    exact = build is exact_index
    hits = 0
    for query in queries:
        found, _ = index.search(query, 10)
        assert not set(found.tolist()) & removed
        want, _ = brute_force(keys[keep], vectors[keep], query, 10)
        if exact:
            assert found.tolist() == want.tolist()
        hits += len(set(found.tolist()) & set(want.tolist()))
    assert hits / (10 * len(queries)) >= 0.95


@BOTH_PATHS
# 50: fewer than the pool, scored exactly; 1,000: a subset ranked on its own
# rows; 5,000: most rows, the others masked out of a full scan.
@pytest.mark.parametrize("size", [50, 1_000, 5_000])
def test_allowed_restricts_results(
    data: tuple[Keys, Matrix, Matrix],
    build: Callable[[Keys, Matrix], VectorIndex],
    size: int,
) -> None:
    keys, vectors, queries = data
    index = build(keys, vectors)
    draw = np.random.default_rng(size)
    chosen = np.sort(draw.choice(len(keys), size=size, replace=False))
    # Keys the index never saw are ignored, not an error.
    allowed = np.concatenate([keys[chosen], np.array([-1, 10**12], dtype=np.int64)])
    allowed_set = set(keys[chosen].tolist())
    hits = 0
    for query in queries[:30]:
        found, scores = index.search(query, 10, allowed)
        assert len(found) == 10
        assert set(found.tolist()) <= allowed_set
        assert np.all(np.diff(scores) <= 0)
        want, _ = brute_force(keys[chosen], vectors[chosen], query, 10)
        hits += len(set(found.tolist()) & set(want.tolist()))
    assert hits / (10 * 30) >= 0.95


def test_allowed_smaller_than_k_and_empty(data: tuple[Keys, Matrix, Matrix]) -> None:
    keys, vectors, queries = data
    index = prefilter_index(keys, vectors)
    found, scores = index.search(queries[0], 10, keys[:3])
    assert sorted(found.tolist()) == sorted(keys[:3].tolist())
    assert np.all(np.diff(scores) <= 0)
    found, scores = index.search(queries[0], 10, np.array([], dtype=np.int64))
    assert found.size == 0 and scores.size == 0


def test_k_larger_than_the_index() -> None:
    index = VectorIndex(4)
    index.add(np.array([1, 2, 3]), np.eye(3, 4, dtype=np.float32))
    index.remove(np.array([2]))
    found, scores = index.search(np.array([1, 1, 0, 0], np.float32), 50)
    assert found.tolist() == [1, 3]
    np.testing.assert_allclose(scores, [np.sqrt(0.5), 0.0], atol=1e-6)
    assert index.search(np.ones(4, np.float32), 0)[0].size == 0


def test_empty_index() -> None:
    index = VectorIndex(8)
    assert len(index) == 0
    found, scores = index.search(np.ones(8, np.float32), 10)
    assert found.shape == (0,) and found.dtype == np.int64
    assert scores.shape == (0,) and scores.dtype == np.float32
    index.add(np.array([1]), np.ones((1, 8), np.float32))
    index.remove(np.array([1]))
    assert index.search(np.ones(8, np.float32), 10)[0].size == 0


def test_vectors_are_normalised_and_scores_are_cosines() -> None:
    index = VectorIndex(2)
    index.add(np.array([1, 2]), np.array([[3, 0], [-5, 5]], np.float32))
    found, scores = index.search(np.array([10, 0], np.float32), 2)
    assert found.tolist() == [1, 2]
    np.testing.assert_allclose(scores, [1.0, -np.sqrt(0.5)], atol=1e-6)
    assert np.all(scores <= 1.0) and np.all(scores >= -1.0)


def test_bad_input_raises_and_changes_nothing() -> None:
    index = VectorIndex(4)
    index.add(np.array([1]), np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
        index.add(np.array([2]), np.ones((1, 5), np.float32))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        index.search(np.ones(3, np.float32), 1)
    with pytest.raises(ValueError, match="2 keys but 1 vectors"):
        index.add(np.array([2, 3]), np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="zero or not finite"):
        index.add(np.array([2, 3]), np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32))
    with pytest.raises(ValueError, match="zero or not finite"):
        index.add(np.array([2]), np.array([[np.nan, 0, 0, 0]], np.float32))
    with pytest.raises(ValueError, match="integer keys"):
        index.add(np.array([2.5]), np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="k must be"):
        index.search(np.ones(4, np.float32), -1)
    assert len(index) == 1
    assert 1 in index and 2 not in index


def test_appending_one_at_a_time_grows_geometrically() -> None:
    index = VectorIndex(16)
    draw = np.random.default_rng(0)
    sizes = set()
    for key in range(2_000):
        index.add(np.array([key]), draw.normal(size=(1, 16)).astype(np.float32))
        sizes.add(index.nbytes)
    # Each distinct allocation is one copy of the matrix; a copy per append
    # would give 2,000.
    assert len(sizes) < 15
    assert len(index) == 2_000


def test_prefilter_dropped_well_below_threshold(data: tuple[Keys, Matrix, Matrix]) -> None:
    keys, vectors, queries = data
    index = VectorIndex(DIM, exact_threshold=4_000)
    index.add(keys, vectors)
    assert index.uses_prefilter
    index.remove(keys[:2_500])  # 3,500 left: below the threshold, exact again
    assert not index.uses_prefilter
    found, _ = index.search(queries[0], 10)
    assert found.tolist() == brute_force(keys[2_500:], vectors[2_500:], queries[0], 10)[0].tolist()
    index.remove(keys[2_500:4_500])  # 1,500 left: under half, projection released
    assert index._proj is None  # private, but memory release has no public signal
    found, _ = index.search(queries[0], 10)
    assert found.tolist() == brute_force(keys[4_500:], vectors[4_500:], queries[0], 10)[0].tolist()


def test_concurrent_add_and_search(data: tuple[Keys, Matrix, Matrix]) -> None:
    keys, vectors, queries = data
    # A low threshold so that the projection is fitted and refitted while
    # searches run.
    index = VectorIndex(DIM, exact_threshold=300)
    errors: list[BaseException] = []
    chunks = np.array_split(np.arange(2_000), 4)

    def writer(rows: npt.NDArray[np.intp]) -> None:
        try:
            for start in range(0, len(rows), 50):
                part = rows[start : start + 50]
                index.add(keys[part], vectors[part])
                index.remove(keys[part[:1]])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for i in range(150):
                found, scores = index.search(queries[i % len(queries)], 10)
                assert len(found) == len(scores) <= 10
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(chunk,)) for chunk in chunks]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    removed = sum(len(range(0, len(chunk), 50)) for chunk in chunks)
    assert len(index) == 2_000 - removed


@pytest.mark.parametrize("shape", ["random", "ties", "sorted", "two_clusters"])
def test_best_unordered_is_argpartitions_set(shape: str) -> None:
    """The compact index's pool: the same scores as argpartition's ``count`` best, whatever
    the sample says (ties at the bound, scores in order, a sample unlike the rest)."""
    rng = np.random.default_rng(7)
    for n, count in [(100_000, 5_000), (20_000, 1_600), (3_000, 700), (50, 3), (1_000, 999)]:
        if shape == "random":
            scores = rng.normal(size=n)
        elif shape == "ties":
            scores = np.round(rng.normal(size=n), 1)
        elif shape == "sorted":
            scores = np.sort(rng.normal(size=n))
        else:
            scores = np.concatenate([rng.normal(size=n // 2) - 3, rng.normal(size=n - n // 2)])
        values: npt.NDArray[np.float32] = scores.astype(np.float32)
        got = _best_unordered(values, count)
        want = np.argpartition(values, n - count)[n - count :]
        assert np.unique(got).size == count
        assert np.array_equal(np.sort(values[got]), np.sort(values[want]))
