"""Keyword ranking inside the SQLite file (schema version 5): postings, statistics, parity.

Every write path keeps ``keyword_postings``, ``keyword_stats`` and
``keyword_docs`` equal to what the live memories' terms say, in the write's
own transaction, and the ranking over them gives what the in-process
:class:`~engramdb.core.bm25.BM25Index` gives over the same terms
(``keyword_index = "process"``, the ranking before version 5).
"""

from __future__ import annotations

import io
import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb import Memory
from engramdb.core.bm25 import BM25Index
from engramdb.core.filters import parse_filters
from engramdb.embedders import LocalEmbedder
from engramdb.errors import ConflictError
from engramdb.nlp import query_terms
from engramdb.stores.base import Candidate, NewMemory, Scope
from engramdb.stores.sqlite import SQLiteStore
from engramdb.stores.sqlite._keywords import POSTING, SEGMENT, rank

TEXTS = [
    "Alice hikes the ridge trail every Sunday morning",
    "Bob cooks spicy noodles for his sister",
    "Alice paints the lighthouse at dusk",
    "the lighthouse keeper collects old maps",
    "Carol runs the marathon in Boston",
    "Bob plays guitar in a jazz band",
    "Alice adopted a grey cat named Pixel",
    "the jazz band practices in the garage on Fridays",
    "Carol grows tomatoes and basil in the garden",
    "Bob travels to Lisbon for the jazz festival",
    "a cat sleeps on the warm lighthouse steps",
    "the garden needs water every morning",
]
QUERIES = [
    "Where does Alice hike?",
    "jazz band garage",
    "lighthouse",
    "What does Carol grow in the garden?",
    "cat",
    "morning water",
    "nothing matches zebra",
]


def check_postings(path: Path) -> int:
    """The postings, statistics and docs are what the live memories' terms say.

    Returns the number of live memories. Read on a connection of its own, so
    it sees only what the store committed.
    """
    con = sqlite3.connect(path)
    try:
        live = con.execute(
            "SELECT m.rowid, coalesce(f.terms, ''), m.user_id, m.owner FROM memories m "
            "LEFT JOIN memory_fts f ON f.rowid = m.rowid WHERE m.deleted_at IS NULL"
        ).fetchall()
        segments = con.execute("SELECT key, term, seg, postings FROM keyword_postings").fetchall()
        stats = con.execute("SELECT key, docs, length FROM keyword_stats").fetchall()
        docs = con.execute("SELECT memory_rowid, key, terms FROM keyword_docs").fetchall()
    finally:
        con.close()
    want: dict[tuple[str, str, int], tuple[int, int]] = {}
    want_stats: Counter[str] = Counter()
    want_lengths: Counter[str] = Counter()
    want_docs = {}
    for rowid, terms, user, owner in live:
        key = f"user:{user}" if user is not None else owner
        words = terms.split()
        want[(key, "", rowid)] = (len(words), len(words))
        for term, tf in Counter(words).items():
            want[(key, term, rowid)] = (tf, len(words))
        want_stats[key] += 1
        want_lengths[key] += len(words)
        want_docs[rowid] = (key, terms)
    got: dict[tuple[str, str, int], tuple[int, int]] = {}
    seen_segments: set[tuple[str, str, int]] = set()
    for key, term, seg, blob in segments:
        assert (key, term, seg) not in seen_segments
        seen_segments.add((key, term, seg))
        postings = np.frombuffer(blob, dtype=POSTING)
        assert 0 < postings.size <= SEGMENT  # no empty or oversized segment
        for row, tf, dl in postings.tolist():
            assert (key, term, row) not in got  # posted once
            got[(key, term, row)] = (tf, dl)
    assert got == want
    assert {k: (d, n) for k, d, n in stats} == {
        k: (want_stats[k], want_lengths[k]) for k in want_stats
    }
    assert {r: (k, t) for r, k, t in docs} == want_docs
    return len(live)


def _memory(path: Path, embedder: Any, keyword_index: str = "database") -> Memory:
    m = Memory(path, embedder=embedder)
    assert isinstance(m.store, SQLiteStore)
    m.store.keyword_index = keyword_index  # before the first search
    return m


def _candidates(m: Memory, scope: Scope, query: str, where: Any = None) -> list[Candidate]:
    vec = np.asarray(m.embedder.embed_query(query), dtype=np.float32)
    return m.store.candidates(scope, where, vec, query_terms(query), [], 10)


def _keyword(cands: list[Candidate]) -> tuple[list[str], dict[str, float], float]:
    ranked = sorted((c for c in cands if c.bm25_rank), key=lambda c: c.bm25_rank or 0)
    best = max((c.bm25_best for c in cands), default=0.0)
    return [c.row.id for c in ranked], {c.row.id: c.bm25 for c in cands}, best


def test_ranking_in_the_file_matches_the_in_process_index(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    path = tmp_path / "k.db"
    with _memory(path, embedder) as m:
        for i, text in enumerate(TEXTS * 2):  # repeats across users: statistics per scope
            m.add(text + f" #{i}", user_id=f"u{i % 2}", agent_id=f"a{i % 3}", infer=False)
        for i, text in enumerate(TEXTS[:5]):  # an agent's own memories, no user
            m.add(text + " for the agent", agent_id="a1", run_id=f"r{i % 2}", infer=False)
        ids = [r["id"] for r in m.get_all(user_id="u0", limit=100)["results"]]
        m.delete(ids[0])  # a deleted memory counts nowhere
        m.update(ids[1], "the lighthouse cat hikes to the jazz garden")
        check_postings(path)
        with _memory(path, embedder, "process") as ref:
            scopes: list[tuple[Scope, Any]] = [
                (Scope(user_id="u0"), None),
                (Scope(user_id="u1"), None),
                (Scope(agent_id="a1"), None),  # users' memories and its own
                (Scope(run_id="r1"), None),
                (Scope(user_id="u0", agent_id="a2"), None),
                (Scope(user_id="u1"), parse_filters({"created_at": {"gte": "2000-01-01"}})),
                (Scope(agent_id="a1"), parse_filters({"created_at": {"gte": "2000-01-01"}})),
            ]
            compared = 0
            for scope, where in scopes:
                for query in QUERIES:
                    got = _keyword(_candidates(m, scope, query, where))
                    want = _keyword(_candidates(ref, scope, query, where))
                    assert got[0] == want[0], (scope, query)
                    # The same float32 arithmetic in the same order: equal scores.
                    assert got[1] == want[1], (scope, query)
                    assert got[2] == pytest.approx(want[2], rel=1e-12), (scope, query)
                    compared += bool(want[0])
            assert compared >= 25
        # No keyword index was built in this process: the terms stayed in the file.
        assert all(len(c.bm25) == 0 for c in m.store._table.entries.values())  # type: ignore[attr-defined]


def test_rank_equals_bm25index_on_real_text_up_to_ties(tmp_path: Path) -> None:
    """The ranking function alone against BM25Index on lemmatised sentences, with a population."""
    from engramdb.nlp import document_terms

    path = tmp_path / "r.db"
    store = SQLiteStore(path)
    store.bind_embedder("m", 4)
    sentences = [
        f"{who} {verb} the {thing} near the {place} on {day}"
        for who in ("Maria", "John", "the neighbours")
        for verb in ("painted", "visited", "sold", "bought")
        for thing in ("lighthouse", "old boat", "garden shed", "red car")
        for place, day in (("harbour", "Sunday"), ("market", "Friday"), ("school", "Monday"))
    ]
    rng = np.random.default_rng(3)
    mems = []
    for text in sentences:
        v = rng.standard_normal(4).astype(np.float32)
        mems.append(
            NewMemory(
                id=str(uuid.uuid4()),
                text=text,
                hash=text,
                embedding=v / np.linalg.norm(v),
                terms=document_terms(text),
            )
        )
    store.add(mems, [], Scope(user_id="u"), "t")
    ref = BM25Index()
    with store._read() as con:
        rows = con.execute("SELECT rowid, terms FROM memory_fts ORDER BY rowid").fetchall()
        ref.add([r for r, _ in rows], [t.split() for _, t in rows])
        keys = np.array([r for r, _ in rows], dtype=np.int64)
        half = keys[::2]
        for query in ("Maria painted the lighthouse", "old boat market", "sold a red car Friday"):
            terms = query_terms(query)
            for population in (None, half):
                got = rank(con, ["user:u"], terms, 10, population=population)
                want_keys, want_scores = ref.search(terms, 10, population=population)
                assert got.hits  # something matched
                scores = got.scores_of(np.array(got.hits, dtype=np.int64))
                # Up to ties: the same scores in the same order, the same rows above the cut.
                assert [scores[k] for k in got.hits] == want_scores.tolist()
                cut = float(want_scores[-1])
                above = {
                    k
                    for k, s in zip(want_keys.tolist(), want_scores.tolist(), strict=True)
                    if s > cut
                }
                assert above <= set(got.hits)
                assert got.best(terms) == ref.best_score(terms, population=population)
    store.close()


def test_every_write_path_keeps_the_postings(tmp_path: Path, embedder: LocalEmbedder) -> None:
    path = tmp_path / "w.db"
    with _memory(path, embedder) as m:
        first = m.add("the quokka hides in the lighthouse", user_id="u", infer=False)
        batch = m.add([{"role": "user", "content": t} for t in TEXTS[:6]], user_id="u", infer=False)
        m.add("an agent note about maps", agent_id="scout", infer=False)  # no user
        check_postings(path)
        mid = first["results"][0]["id"]
        m.update(mid, "the quokka sleeps in the lighthouse by the sea")
        check_postings(path)
        m.restore(mid)  # back to the first version (undo of an update)
        check_postings(path)
        other = batch["results"][0]["id"]
        m.delete(other)
        check_postings(path)
        m.restore(other)  # undo of a delete
        check_postings(path)
        m.delete_all(user_id="u")
        assert check_postings(path) == 1
        m.restore(mid)
        check_postings(path)
        dump = io.StringIO()
        m.export_jsonl(dump)
        m.purge(mid)
        check_postings(path)
        m.purge(user_id="u")
        check_postings(path)
        m.reset()
        assert check_postings(path) == 0
        m.import_jsonl(io.StringIO(dump.getvalue()))
        assert check_postings(path) > 0
        m.add("the heron waits by the pond", user_id="v", infer=False)
        check_postings(path)
        assert m.search("quokka lighthouse", user_id="u")["results"]


def test_a_term_past_one_segment_is_posted_and_unposted(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.bind_embedder("m", 4)
    v = np.full(4, 0.5, dtype=np.float32)
    first = [
        NewMemory(id=str(uuid.uuid4()), text=f"t{i}", hash=f"t{i}", embedding=v, terms=f"x w{i}")
        for i in range(SEGMENT + 30)
    ]
    store.add(first[:100], [], Scope(user_id="u"), "t")  # a partial segment first
    store.add(first[100:], [], Scope(user_id="u"), "t")  # then fill it and open others
    assert check_postings(path) == SEGMENT + 30
    for mem in first[::7]:
        store.delete(mem.id, actor="t")
    check_postings(path)
    with store._read() as con:
        got = rank(con, ["user:u"], ["x"], 5)
    assert got.df == {"x": SEGMENT + 30 - len(first[::7])}
    store.close()


def test_a_failed_write_leaves_no_postings(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    store = SQLiteStore(path)
    store.bind_embedder("m", 4)
    v = np.full(4, 0.5, dtype=np.float32)
    ok = NewMemory(id=str(uuid.uuid4()), text="kept", hash="kept", embedding=v, terms="kept word")
    store.add([ok], [], Scope(user_id="u"), "t")
    before = check_postings(path)
    good = NewMemory(id=str(uuid.uuid4()), text="a", hash="a", embedding=v, terms="alpha beta")
    bad = NewMemory(
        id=str(uuid.uuid4()), text="b", hash="b", embedding=np.empty(0, np.float32), terms="gamma"
    )
    with pytest.raises(ConflictError):  # the second memory fails after the first was written
        store.add([good, bad], [], Scope(user_id="u"), "t")
    assert check_postings(path) == before
    with sqlite3.connect(path) as con:
        terms = {t for (t,) in con.execute("SELECT DISTINCT term FROM keyword_postings")}
    assert "alpha" not in terms and "kept" in terms
    store.close()


def test_the_migration_fills_the_postings_of_an_old_file(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    path = tmp_path / "old.db"
    with _memory(path, embedder) as m:
        for i, text in enumerate(TEXTS):
            m.add(text, user_id="u", agent_id=f"a{i % 2}", infer=False)
        m.add("an agent note about the lighthouse maps", agent_id="a0", infer=False)
        m.delete(m.get_all(user_id="u")["results"][0]["id"])
        want = [r["id"] for r in m.search("lighthouse jazz", user_id="u")["results"]]
        want_agent = [r["id"] for r in m.search("lighthouse maps", agent_id="a0")["results"]]
    # Back to version 4: the schema before keyword ranking moved into the file.
    con = sqlite3.connect(path)
    con.executescript(
        "DROP TABLE keyword_postings; DROP TABLE keyword_stats; DROP TABLE keyword_docs; "
        "DROP TABLE memory_codes; DROP TABLE vector_basis; PRAGMA user_version = 4;"
    )
    con.close()
    with _memory(path, embedder) as m:
        assert check_postings(path) == len(TEXTS)
        assert [r["id"] for r in m.search("lighthouse jazz", user_id="u")["results"]] == want
        assert [r["id"] for r in m.search("lighthouse maps", agent_id="a0")["results"]] == (
            want_agent
        )


def test_keyword_index_option_is_checked(tmp_path: Path) -> None:
    from engramdb.errors import ConfigError
    from engramdb.stores import make_store

    with pytest.raises(ValueError, match="keyword_index"):
        SQLiteStore(tmp_path / "x.db", keyword_index="disk")
    with pytest.raises(ConfigError, match="keyword_index"):
        make_store("sqlite", {"keyword_index": "disk"}, tmp_path / "y.db")
    store = make_store("sqlite", {"keyword_index": "process"}, tmp_path / "z.db")
    assert isinstance(store, SQLiteStore) and store.keyword_index == "process"
    store.close()
    store = make_store("sqlite", {}, tmp_path / "z.db")
    assert isinstance(store, SQLiteStore) and store.keyword_index == "database"
    store.close()
