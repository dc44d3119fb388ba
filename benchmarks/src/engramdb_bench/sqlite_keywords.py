"""Keyword ranking inside SQLite: parity with the in-process BM25, and its cost at size.

``python -m engramdb_bench.sqlite_keywords [--data locomo.json] [--sizes 10000 100000]
[--out FILE.json]``

- **Parity.** LoCoMo's turns go into a SQLite store, one user per
  conversation; for each question the store's keyword top 10 (BM25 over the
  postings in the file, schema version 5) is compared with
  :class:`~engramdb.core.bm25.BM25Index` over the same stored terms of the
  same user (row id order, as the in-process cache reads them): mean overlap
  of the two top 10s, how many lists are identical (order included), and
  whether the scores agree.
- **At size.** One user with ``size`` memories (LoCoMo's turns repeated,
  written by SQL in one transaction, so the store's own commit posts them):
  for ``keyword_index = "process"`` (the per-process cache, filled by the
  first search) and ``"database"``, the first ``candidates`` call of a new
  store object, the process's RSS growth over it, and the median and 95th
  percentile of the keyword ranking alone and of ``candidates`` (hash
  embedder: no model, so the figures are the store's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engramdb.core.bm25 import BM25Index
from engramdb.memory import Memory
from engramdb.nlp import query_terms
from engramdb.stores.base import Scope
from engramdb.stores.sqlite import SQLiteStore
from engramdb.stores.sqlite._keywords import rank
from engramdb_bench._hash_embedder import HashEmbedder
from engramdb_bench._locomo import data_path, load_conversations

__all__ = ["at_size", "main", "parity", "run"]

Echo = Callable[[str], None]


def _memory(path: Path, keyword_index: str = "database") -> Memory:
    m = Memory(path, embedder=HashEmbedder())
    assert isinstance(m.store, SQLiteStore)
    m.store.keyword_index = keyword_index
    return m


def _turns(data: Path, limit: int | None = None) -> list[tuple[str, list[str], list[str]]]:
    convs = load_conversations(data)[:limit]
    return [
        (
            c.sample_id,
            [t.text for s in c.sessions for t in s.turns if t.text.strip()],
            [qa.question for qa in c.qa],
        )
        for c in convs
    ]


def parity(path: Path, data: Path, *, limit: int | None = None) -> dict[str, Any]:
    """The store's keyword top 10 against BM25Index over the same terms, per LoCoMo question."""
    convs = _turns(data, limit)
    overlaps: list[float] = []
    identical = questions = same_scores = 0
    with _memory(path) as m:
        store: Any = m.store
        for sample_id, texts, qs in convs:
            for j in range(0, len(texts), 100):
                m.add([{"role": "user", "content": t} for t in texts[j : j + 100]],
                      user_id=sample_id, infer=False)  # fmt: skip
            with store._read() as con:
                rows = con.execute(
                    "SELECT m.rowid, m.id, coalesce(f.terms, '') FROM memories m "
                    "LEFT JOIN memory_fts f ON f.rowid = m.rowid WHERE m.user_id = ? "
                    "AND m.deleted_at IS NULL ORDER BY m.rowid",
                    (sample_id,),
                ).fetchall()
            index = BM25Index()
            index.add([r[0] for r in rows], [r[2].split() for r in rows])
            id_of = {int(r[0]): r[1] for r in rows}
            for question in qs:
                terms = query_terms(question)
                keys, scores = index.search(terms, 10)
                want = [id_of[int(k)] for k in keys]
                cands = store.candidates(
                    Scope(user_id=sample_id), None, m.embedder.embed_query(question), terms, [], 10
                )
                ranked = sorted((c for c in cands if c.bm25_rank), key=lambda c: c.bm25_rank)
                got = [c.row.id for c in ranked][:10]
                questions += 1
                if want or got:
                    overlaps.append(len(set(want) & set(got)) / max(len(want), len(got)))
                identical += want == got
                same_scores += [round(c.bm25, 6) for c in ranked][:10] == [
                    round(float(s), 6) for s in scores
                ]
    return {
        "conversations": len(convs),
        "questions": questions,
        "with_keyword_hits": len(overlaps),
        "mean_top10_overlap": round(float(np.mean(overlaps)), 4) if overlaps else None,
        "min_top10_overlap": round(float(np.min(overlaps)), 4) if overlaps else None,
        "identical_ranked_lists": identical,
        "identical_top10_scores": same_scores,
    }


def _fill(path: Path, user: str, size: int) -> None:
    """``size`` memories for ``user``: the file's memories copied with a suffix, in one write."""
    store = SQLiteStore(path)
    try:
        with store._write() as con:
            base = con.execute(
                "SELECT m.text, m.hash, f.terms, v.embedding FROM memories m "
                "JOIN memory_fts f ON f.rowid = m.rowid "
                "JOIN memory_vectors v ON v.memory_rowid = m.rowid "
                "WHERE m.user_id <> ? ORDER BY m.rowid",
                (user,),
            ).fetchall()
            (top,) = con.execute("SELECT coalesce(max(rowid), 0) FROM memories").fetchone()
            partition = f"u{len(user)}:{user}"
            mems, fts, vecs = [], [], []
            for i in range(size):
                text, hash_, terms, emb = base[i % len(base)]
                rowid = top + 1 + i
                mems.append((rowid, f"m{user}-{i}", f"{text} #{i}", f"{hash_}#{i}", f"user:{user}",
                             partition, user))  # fmt: skip
                fts.append((rowid, terms))
                vecs.append((rowid, emb))
            con.executemany(
                "INSERT INTO memories(rowid, id, text, hash, owner, partition, user_id, "
                "created_at, updated_at, seq) VALUES (?, ?, ?, ?, ?, ?, ?, "
                "'2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00', 1)",
                mems,
            )
            con.executemany("INSERT INTO memory_fts(rowid, terms) VALUES (?, ?)", fts)
            con.executemany(
                "INSERT INTO memory_vectors(memory_rowid, embedding) VALUES (?, ?)", vecs
            )
            store._bump(con)
    finally:
        store.close()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 1e6


def _pct(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
    }


def at_size(
    path: Path, questions: Sequence[str], size: int, *, repeats: int = 100
) -> dict[str, Any]:
    """First and later ``candidates`` calls at ``size`` memories, for both keyword indexes."""
    user = f"big{size}"
    started = time.perf_counter()
    _fill(path, user, size)
    out: dict[str, Any] = {"memories": size, "fill_s": round(time.perf_counter() - started, 1)}
    scope = Scope(user_id=user)
    cycle = (list(questions) * (1 + repeats // max(len(questions), 1)))[:repeats]
    for mode in ("database", "process"):
        with _memory(path, mode) as m:
            store: Any = m.store
            embed = m.embedder.embed_query
            rss = _rss_mb()
            begin = time.perf_counter()
            store.candidates(scope, None, embed(cycle[0]), query_terms(cycle[0]), [], 50)
            first = (time.perf_counter() - begin) * 1000
            grown = _rss_mb() - rss
            whole, ranking = [], []
            for q in cycle:
                vec, terms = embed(q), query_terms(q)
                begin = time.perf_counter()
                store.candidates(scope, None, vec, terms, [], 50)
                whole.append((time.perf_counter() - begin) * 1000)
                begin = time.perf_counter()
                if mode == "database":
                    with store._read() as con:
                        rank(con, [f"user:{user}"], terms, 50)
                else:
                    store._scope_cache(scope).bm25.search(terms, 50)
                ranking.append((time.perf_counter() - begin) * 1000)
        out[mode] = {
            "first_candidates_ms": round(first, 1),
            "rss_growth_first_mb": round(grown, 1),
            "candidates": _pct(whole),
            "keyword_ranking": _pct(ranking),
        }
    return out


def run(
    *,
    data: Path | None = None,
    sizes: Sequence[int] = (10_000, 100_000),
    limit: int | None = None,
    workdir: Path | None = None,
    echo: Echo = print,
) -> dict[str, Any]:
    """Parity on LoCoMo, then the costs at each size (one file in a temporary folder)."""
    path_data = data_path(data)
    report: dict[str, Any] = {
        "data": path_data.name,
        "load_average_start": list(os.getloadavg()),
    }
    with tempfile.TemporaryDirectory(prefix="engram-sqlite-kw-", dir=workdir) as tmp:
        path = Path(tmp) / "keywords.db"
        report["parity"] = parity(path, path_data, limit=limit)
        echo(f"parity: {json.dumps(report['parity'])}")
        questions = [q for _, _, qs in _turns(path_data, limit) for q in qs]
        report["sizes"] = {}
        for size in sizes:
            report["sizes"][str(size)] = at_size(path, questions, size)
            echo(f"{size}: {json.dumps(report['sizes'][str(size)])}")
    report["load_average_end"] = list(os.getloadavg())
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.sqlite_keywords``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--limit", type=int, default=None, help="first N conversations only")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(data=args.data, sizes=args.sizes, limit=args.limit)
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
