"""The compact vector index and its form in the SQLite file (schema version 6).

A large scope is searched through :class:`CompactVectorIndex`: projections
on the file's basis and int8 codes in memory, exact cosines re-scored from
the stored float32 vectors. Here the size at which that starts is lowered
(``_vectors.COMPACT_AT``) so a small file exercises it; the real threshold
is 20,000 memories.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb.core.vectors import CompactVectorIndex, VectorIndex, encode, fit_basis, project
from engramdb.stores.base import NewMemory, Scope
from engramdb.stores.sqlite import SQLiteStore, _vectors

DIM = 32
MODEL = "test/model-32"


def _unit(rng: np.random.Generator, n: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    # Anisotropic, like real embeddings: a shared direction plus noise.
    common = np.ones(DIM, np.float32)
    vecs = (rng.standard_normal((n, DIM)) + 2 * common).astype(np.float32)
    out: np.ndarray[Any, np.dtype[np.float32]] = vecs / np.linalg.norm(vecs, axis=1)[:, None]
    return out


def test_compact_index_returns_exact_cosines_of_the_true_neighbours() -> None:
    rng = np.random.default_rng(0)
    vecs = _unit(rng, 5_000)
    keys = np.arange(10, 5_010, dtype=np.int64)
    stored = dict(zip(keys.tolist(), vecs, strict=True))
    fetched: list[int] = []

    def fetch(wanted: Any) -> tuple[Any, Any]:
        got = [k for k in wanted.tolist() if k in stored]
        fetched.append(len(wanted))
        return np.array(got, dtype=np.int64), np.array([stored[k] for k in got], np.float32)

    basis, offset = fit_basis(vecs[:2_000], DIM)  # full width: recall here is the codes'
    index = CompactVectorIndex(DIM, basis, offset, fetch, min_pool=400, oversample=20)
    codes, scales = encode(vecs)
    index.add_encoded(keys, codes, scales, project(vecs, basis, offset))
    assert len(index) == 5_000 and index.held_bytes < 5_000 * (DIM + 4 * DIM + 200)
    hits = 0
    for q in _unit(rng, 50):
        got_keys, got_scores = index.search(q, 10)
        exact = vecs @ q
        want = keys[np.argsort(-exact)[:10]]
        hits += len(set(got_keys.tolist()) & set(want.tolist()))
        # Scores are the exact cosines of what is returned, best first.
        assert np.allclose(got_scores, [float(stored[k] @ q) for k in got_keys], atol=1e-6)
        assert list(got_scores) == sorted(got_scores, reverse=True)
    assert hits / 500 >= 0.95
    assert max(fetched) == 18  # only the best k + max(k // 4, 8) are read exactly
    # Removed keys and keys the fetch no longer finds are not returned.
    index.remove(keys[:2_500])
    del stored[int(keys[2_600])]
    for q in _unit(rng, 5):
        got_keys, _ = index.search(q, 20)
        assert not set(got_keys.tolist()) & {*keys[:2_500].tolist(), int(keys[2_600])}
    # allowed: only those keys.
    allowed = keys[3_000:3_050]
    got_keys, _ = index.search(_unit(rng, 1)[0], 10, allowed=allowed)
    assert set(got_keys.tolist()) <= set(allowed.tolist()) and got_keys.size == 10
    # cosines: the exact cosine of each given key still there, as a search within them.
    q = _unit(rng, 1)[0]
    asked = np.concatenate([keys[2_590:2_700], keys[2_590:2_600], keys[:5], [10**9]])
    got_keys, got_scores = index.cosines(q, asked)
    expected = {k for k in keys[2_590:2_700].tolist() if k != int(keys[2_600])}
    assert set(got_keys.tolist()) == expected and got_keys.size == len(expected)
    assert np.allclose(got_scores, [float(stored[k] @ q) for k in got_keys.tolist()], atol=1e-6)
    same_keys, same_scores = index.search(q, asked.size, allowed=asked)
    assert dict(zip(same_keys.tolist(), same_scores.tolist(), strict=True)) == dict(
        zip(got_keys.tolist(), got_scores.tolist(), strict=True)
    )
    assert index.cosines(q, np.empty(0, np.int64))[0].size == 0


def test_the_full_index_gives_the_cosines_of_given_keys() -> None:
    rng = np.random.default_rng(3)
    vecs = _unit(rng, 300)
    index = VectorIndex(DIM)
    index.add(np.arange(300, dtype=np.int64), vecs)
    index.remove([5])
    q = _unit(rng, 1)[0]
    got_keys, got_scores = index.cosines(q, [4, 5, 6, 6, 999])
    assert sorted(got_keys.tolist()) == [4, 6]
    assert np.allclose(got_scores, [float(vecs[k] @ q) for k in got_keys.tolist()], atol=1e-6)


def _fill(store: SQLiteStore, n: int, rng: np.random.Generator, user: str = "u") -> list[str]:
    ids = []
    vecs = _unit(rng, n)
    tag = uuid.uuid4().hex[:8]  # every call's texts are new: none is a repeat
    for start in range(0, n, 250):
        batch = [
            NewMemory(
                id=str(uuid.uuid4()),
                text=f"memory {user} {start + i} {tag}",
                hash=f"memory {user} {start + i} {tag}",
                embedding=vecs[start + i],
                terms=f"word{(start + i) % 7} w{start + i}",
            )
            for i in range(min(250, n - start))
        ]
        store.add(batch, [], Scope(user_id=user), "t")
        ids += [m.id for m in batch]
    return ids


def check_codes(path: Path) -> int:
    """Every stored vector has its codes, and its projection on the file's basis."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute(
            "SELECT v.memory_rowid, v.embedding, c.codes, c.projection FROM memory_vectors v "
            "LEFT JOIN memory_codes c ON c.memory_rowid = v.memory_rowid"
        ).fetchall()
        (extra,) = con.execute(
            "SELECT count(*) FROM memory_codes WHERE memory_rowid NOT IN "
            "(SELECT memory_rowid FROM memory_vectors)"
        ).fetchone()
        basis = _vectors.load_basis(con)
    finally:
        con.close()
    assert extra == 0
    for _rowid, blob, codes, projection in rows:
        vec = np.frombuffer(blob, dtype="<f4")[None, :]
        want_codes, want_scale = encode(vec)
        assert codes is not None
        got_codes, got_scale, _ = _vectors.decode([codes], [b""], DIM, 0)
        assert np.array_equal(got_codes, want_codes) and np.allclose(got_scale, want_scale)
        if basis is None:
            assert projection is None
        else:
            want = project(vec, basis.basis, basis.offset).astype("<f2")
            assert projection == want.tobytes()
    return len(rows)


def _exact(store: SQLiteStore, q: Any, k: int, user: str = "u") -> list[tuple[str, float]]:
    with store._read() as con:
        rows = con.execute(
            "SELECT m.id, v.embedding FROM memories m JOIN memory_vectors v "
            "ON v.memory_rowid = m.rowid WHERE m.user_id = ? AND m.deleted_at IS NULL",
            (user,),
        ).fetchall()
    scored = sorted(
        ((i, float(np.frombuffer(b, dtype="<f4") @ q)) for i, b in rows), key=lambda x: -x[1]
    )
    return scored[:k]


def test_a_large_scope_is_served_compact_and_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_vectors, "COMPACT_AT", 300)
    path = tmp_path / "c.db"
    store = SQLiteStore(path)
    store.bind_embedder(MODEL, DIM)
    rng = np.random.default_rng(1)
    _fill(store, 200, rng)
    assert check_codes(path) == 200  # codes, no basis yet
    store.vector_search(Scope(user_id="u"), None, _unit(rng, 1)[0], 5)
    first = store._table.entries[("user_id", "u")].index
    assert isinstance(first, VectorIndex)  # a small scope: the float32 vectors
    ids = _fill(store, 600, rng)  # past the threshold: the basis is fitted
    _fill(store, 50, rng, user="small")
    assert check_codes(path) == 850
    with store._read() as con:
        basis = _vectors.load_basis(con)
    assert basis is not None and basis.fitted_at >= 300
    for q in _unit(rng, 20):
        got = [(r.id, s) for r, s in store.vector_search(Scope(user_id="u"), None, q, 10)]
        want = _exact(store, q, 10)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)
        small = [r.id for r, _ in store.vector_search(Scope(user_id="small"), None, q, 5)]
        assert small == [i for i, _ in _exact(store, q, 5, user="small")]
    cache = store._table.entries[("user_id", "u")]
    assert isinstance(cache.index, CompactVectorIndex)
    assert not isinstance(store._table.entries[("user_id", "small")].index, CompactVectorIndex)
    # Writes after the fit: encoded and projected in their transaction, seen by the cache.
    q = _unit(rng, 1)[0]
    store.update(ids[0], text="moved", hash="moved", embedding=q, terms="moved",
                 metadata={}, actor="t")  # fmt: skip
    store.delete(ids[1], actor="t")
    check_codes(path)
    top = store.vector_search(Scope(user_id="u"), None, q, 3)
    assert top[0][0].id == ids[0] and top[0][1] == pytest.approx(1.0, abs=1e-6)
    assert ids[1] not in {r.id for r, _ in store.vector_search(Scope(user_id="u"), None, q, 50)}
    cands = store.candidates(Scope(user_id="u"), None, q, ["word3"], [], 20)
    for c in cands:  # the cosine of every candidate is exact
        with store._read() as con:
            (blob,) = con.execute(
                "SELECT embedding FROM memory_vectors v JOIN memories m "
                "ON m.rowid = v.memory_rowid WHERE m.id = ?",
                (c.row.id,),
            ).fetchone()
        assert c.semantic == pytest.approx(float(np.frombuffer(blob, dtype="<f4") @ q), abs=1e-6)
    store.close()


def test_the_migration_encodes_an_old_files_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_vectors, "COMPACT_AT", 300)
    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    store.bind_embedder(MODEL, DIM)
    rng = np.random.default_rng(2)
    _fill(store, 400, rng)
    q = _unit(rng, 1)[0]
    want = [r.id for r, _ in store.vector_search(Scope(user_id="u"), None, q, 10)]
    store.close()
    con = sqlite3.connect(path)  # back to version 5: no codes, no basis
    con.executescript(
        "DROP TABLE memory_codes; DROP TABLE vector_basis; "
        "DELETE FROM meta WHERE key = 'vector_basis'; PRAGMA user_version = 5;"
    )
    con.close()
    store = SQLiteStore(path)
    assert check_codes(path) == 400
    with store._read() as con2:
        assert _vectors.load_basis(con2) is not None
    got = [r.id for r, _ in store.vector_search(Scope(user_id="u"), None, q, 10)]
    assert got == want
    assert isinstance(store._table.entries[("user_id", "u")].index, CompactVectorIndex)
    store.close()


def test_a_cached_scope_that_outgrows_the_threshold_is_loaded_again_compact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_vectors, "COMPACT_AT", 300)
    path = tmp_path / "g.db"
    store = SQLiteStore(path)
    store.bind_embedder(MODEL, DIM)
    rng = np.random.default_rng(3)
    _fill(store, 400, rng, user="a")  # the file is fitted at 400
    _fill(store, 50, rng, user="b")
    q = _unit(rng, 1)[0]
    store.vector_search(Scope(user_id="b"), None, q, 5)
    assert isinstance(store._table.entries[("user_id", "b")].index, VectorIndex)
    _fill(store, 260, rng, user="b")  # 310 memories; the file (710) is not refitted
    with store._read() as con:
        basis = _vectors.load_basis(con)
    assert basis is not None and basis.fitted_at == 400
    got = [(r.id, s) for r, s in store.vector_search(Scope(user_id="b"), None, q, 10)]
    assert isinstance(store._table.entries[("user_id", "b")].index, CompactVectorIndex)
    want = _exact(store, q, 10, user="b")
    assert [i for i, _ in got] == [i for i, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)
    store.close()
