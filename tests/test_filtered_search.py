"""Filtered search: post-filtering the indexes' top hits must agree with the exact scan.

SQLite checks a metadata filter on each index's top hits and widens while
too few survive, scanning the scope only for very selective filters
(``stores/sqlite/_search.py``). These tests run on both backends where the
result is backend-independent (what a filter returns) and compare SQLite's
paths with each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb.core.filters import parse_filters
from engramdb.stores import Store, make_store
from engramdb.stores.base import Candidate, NewMemory, Scope
from engramdb.stores.sqlite import SQLiteStore

DIM = 8
MODEL = "test/model-8"
SIZE = 1_000
U = Scope(user_id="u")
WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date"]


def _vec(rng: np.random.Generator) -> np.ndarray[Any, np.dtype[np.float32]]:
    v = rng.standard_normal(DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def _fill(store: Store) -> Store:
    """1,000 memories of one user: ``b10 = i % 10``, ``b100 = i % 100``, one ``needle``.

    Added 50 a call, the calls cycling through runs ``r0``-``r3``.
    """
    store.bind_embedder(MODEL, DIM)
    rng = np.random.default_rng(7)
    rows = [
        NewMemory(
            id=str(uuid.uuid4()),
            text=f"memory {i}",
            hash=f"memory {i}",
            embedding=_vec(rng),
            terms=f"{WORDS[i % 7]} {WORDS[(i * 3) % 7]} w{i}",
            metadata={"b10": i % 10, "b100": i % 100, **({"needle": True} if i == 517 else {})},
        )
        for i in range(SIZE)
    ]
    for call, start in enumerate(range(0, SIZE, 50)):
        store.add(rows[start : start + 50], [], Scope("u", run_id=f"r{call % 4}"), "t")
    return store


@pytest.fixture
def filled(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """:func:`_fill` on each backend."""
    path = tmp_path / "filtered.db"
    if backend == "sqlite":
        store = make_store("sqlite", {"path": str(path)}, path)
    else:
        store = make_store("postgres", request.getfixturevalue("pg_config"), path)
    yield _fill(store)
    store.close()


def _number(text: str) -> int:
    return int(text.split()[1])


def _queries(count: int) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
    rng = np.random.default_rng(11)
    return [_vec(rng) for _ in range(count)]


FILTERS = [{"b10": 3}, {"b100": 7}, {"needle": True}]


@pytest.mark.parametrize("filters", FILTERS)
def test_filtered_search_returns_only_matching_memories(
    filled: Store, filters: dict[str, Any]
) -> None:
    node = parse_filters(filters)
    ((key, value),) = filters.items()
    for q in _queries(5):
        hits = filled.vector_search(U, node, q, 10)
        assert hits and all(row.metadata.get(key) == value for row, _ in hits)
        cands = filled.candidates(U, node, q, ["apple", "fig"], [], 20)
        assert cands and all(c.row.metadata.get(key) == value for c in cands)


def test_a_very_selective_filter_still_finds_its_match(filled: Store) -> None:
    node = parse_filters({"needle": True})
    q = _queries(1)[0]
    assert [_number(r.text) for r, _ in filled.vector_search(U, node, q, 5)] == [517]
    assert [_number(c.row.text) for c in filled.candidates(U, node, q, ["zzz"], [], 20)] == [517]
    assert [_number(c.row.text) for c in filled.candidates(U, node, q, ["w517"], [], 20)] == [517]


@pytest.mark.parametrize("filters", FILTERS[:2])
def test_vector_search_is_the_exact_top_k_among_matching_memories(
    filled: Store, filters: dict[str, Any]
) -> None:
    node = parse_filters(filters)
    ((key, value),) = filters.items()
    rows = filled.list_memories(U, None, limit=SIZE)
    assert len(rows) == SIZE
    rng = np.random.default_rng(7)
    vectors = np.stack([_vec(rng) for _ in range(SIZE)])
    match = np.array([i for i in range(SIZE) if {"b10": i % 10, "b100": i % 100}[key] == value])
    for q in _queries(10):
        expected = match[np.argsort(-(vectors[match] @ q), kind="stable")][:10].tolist()
        got = [_number(r.text) for r, _ in filled.vector_search(U, node, q, 10)]
        assert got == expected


@pytest.mark.parametrize("filters", [*FILTERS, {"b10": {"in": [1, 2, 3, 4, 5, 6]}}])
@pytest.mark.parametrize("scope", [U, Scope("u", run_id="r1")])
def test_post_filtering_agrees_with_the_exact_scan(
    tmp_path: Path, filters: dict[str, Any], scope: Scope
) -> None:
    # SQLite only: its two paths, compared.
    path = tmp_path / "sqlite.db"
    store = _fill(make_store("sqlite", {"path": str(path)}, path))
    assert isinstance(store, SQLiteStore)
    node = parse_filters(filters)
    terms = ["apple", "fig", "w17"]
    for q in _queries(8):
        store._filtered_path = "post"
        fast = (
            store.candidates(scope, node, q, terms, [], 20),
            store.vector_search(scope, node, q, 10),
        )
        store._filtered_path = "exact"
        exact = (
            store.candidates(scope, node, q, terms, [], 20),
            store.vector_search(scope, node, q, 10),
        )
        # The same vector top n (ids, ranks, cosines) and the same BM25 top n
        # (ranks and scores: BM25 ties may be broken either way).
        assert _semantic(fast[0]) == _semantic(exact[0])
        assert _keyword(fast[0]) == _keyword(exact[0])
        assert {c.bm25_best for c in fast[0]} == {c.bm25_best for c in exact[0]}
        assert [(r.id, round(s, 5)) for r, s in fast[1]] == [
            (r.id, round(s, 5)) for r, s in exact[1]
        ]
    store.close()


def _semantic(cands: list[Candidate]) -> list[tuple[int, str, float]]:
    return sorted(
        (c.semantic_rank, c.row.id, round(c.semantic, 5)) for c in cands if c.semantic_rank
    )


def _keyword(cands: list[Candidate]) -> list[tuple[int, float]]:
    return sorted((c.bm25_rank, round(c.bm25, 5)) for c in cands if c.bm25_rank)


@pytest.mark.parametrize("scope", [U, Scope("u", run_id="r1")])
def test_a_write_renews_the_rowids_a_filter_keeps(filled: Store, scope: Scope) -> None:
    node = parse_filters({"needle": True})
    q = _queries(1)[0]
    assert [_number(r.text) for r, _ in filled.vector_search(scope, node, q, 5)] == (
        [517] if scope.run_id is None else []
    )
    rng = np.random.default_rng(99)
    added = NewMemory(
        id=str(uuid.uuid4()),
        text="memory 5000",
        hash="memory 5000",
        embedding=_vec(rng),
        terms="needle",
        metadata={"needle": True},
    )
    filled.add([added], [], Scope("u", run_id="r1"), "t")
    found = {_number(r.text) for r, _ in filled.vector_search(scope, node, q, 5)}
    assert found == ({517, 5000} if scope.run_id is None else {5000})
    cands = filled.candidates(scope, node, q, ["needle"], [], 20)
    assert 5000 in {_number(c.row.text) for c in cands}
    filled.update(
        added.id, text="memory 5000", hash="memory 5000b", embedding=added.embedding,
        terms="needle", metadata={"needle": False}, actor="t",
    )  # fmt: skip
    assert 5000 not in {_number(r.text) for r, _ in filled.vector_search(scope, node, q, 5)}
    assert 5000 not in {_number(c.row.text) for c in filled.candidates(scope, node, q, [], [], 20)}


@pytest.mark.parametrize("filters", [*FILTERS, None])
@pytest.mark.parametrize("scope", [U, Scope("u", run_id="r1")])
def test_kept_rowid_sets_give_what_the_scan_gives(
    tmp_path: Path, filters: dict[str, Any] | None, scope: Scope
) -> None:
    path = tmp_path / "sqlite.db"
    store = _fill(make_store("sqlite", {"path": str(path)}, path))
    assert isinstance(store, SQLiteStore)
    node = parse_filters(filters) if filters is not None else None
    terms = ["apple", "fig", "w17"]

    def both(q: np.ndarray[Any, np.dtype[np.float32]]) -> tuple[list[Any], list[Any]]:
        cands = store.candidates(scope, node, q, terms, [], 20)
        hits = store.vector_search(scope, node, q, 10)
        return (
            sorted((c.row.id, c.semantic_rank, c.bm25_rank, c.bm25, c.bm25_best) for c in cands),
            [(r.id, s) for r, s in hits],
        )

    for q in _queries(4):
        store._filtered_path = "legacy"
        scanned = both(q)
        store._filtered_path = "auto"
        assert both(q) == scanned  # the scan, kept
        assert both(q) == scanned  # the kept set
    store.close()
