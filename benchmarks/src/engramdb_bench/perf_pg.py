r"""PostgreSQL beside SQLite: the foundation's figures on both stores, HNSW recall, BM25 parity.

Run::

    python -m engramdb_bench.perf_pg --store postgresql://user@host/db \\
        [--sizes 10000,100000] [--out FILE.json] [--queries 200]

or call :func:`run`. Nothing here asserts a speed; figures are printed and
returned (and written as JSON with ``--out``).

For each size, on one SQLite file and on one PostgreSQL schema (``--schema``,
default ``engram_bench``, dropped and recreated), through the public
:class:`~engramdb.Memory` API with the benchmark-only
:class:`~engramdb_bench.perf.PrecomputedEmbedder` (vectors the real local
model computed earlier; everything but the model runs for real):

1. **add**: the fill rate (100 messages per call), and then 200 calls of one
   message and 20 calls of 32, at the current size, in messages/s;
2. **search** in one scope (one ``user_id``): ``Memory.search`` p50/p95 with
   the query vector looked up, ``store.vector_search`` alone, and the same
   search narrowed by a metadata filter (10% and 1% of the scope) and by a
   ``run_id`` (5%); the first search of a freshly opened store (cold caches);
3. **size**: SQLite file + WAL after a checkpoint; PostgreSQL's
   ``pg_total_relation_size`` of the schema's tables, the HNSW index apart;
4. **HNSW recall@10** of PostgreSQL's ``vector_search`` against the exact
   top 10 (numpy over every vector of the scope), unfiltered and with the 1%
   filter, and whether the plan uses the HNSW index.

And once, on the real LoCoMo dev data (one ``user_id`` per conversation, every
turn a memory): the **BM25 top-10 overlap** between the two stores' keyword
lists (``Store.candidates``) for every QA question.

Data: LoCoMo turns embedded once with the local model (cached as ``.npy``);
sizes above the turn count are synthetic-from-real (noisy convex mixes of 2-3
real turn vectors, text of the main parent plus a unique suffix), as in
``engramdb_bench.perf``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from engramdb.core.filters import parse_filters
from engramdb.embedders.local import LOCAL_MODEL_ID, MODEL_SHA256, LocalEmbedder
from engramdb.memory import Memory
from engramdb.nlp import query_terms
from engramdb.stores.base import Scope
from engramdb_bench._locomo import MISSING_DATA, data_path, default_data_path
from engramdb_bench.perf import PrecomputedEmbedder, default_cache_dir

__all__ = ["DEFAULT_SIZES", "main", "run"]

_Matrix = npt.NDArray[np.float32]
Echo = Callable[[str], None]

DEFAULT_SIZES: Final = (10_000, 100_000)
TOP_K: Final = 20
FILL_BATCH: Final = 100
USER: Final = "bench-user"
RUNS: Final = 20
NOISE: Final = 0.01


def _locomo(path: Path) -> tuple[list[tuple[str, list[str], list[str]]], list[str], list[str]]:
    """``(conversations, turns, questions)``: per conversation its id, turns and questions."""
    data = json.loads(path.read_text())
    convs = []
    turns: dict[str, None] = {}
    questions: dict[str, None] = {}
    for sample in data:
        conv = sample["conversation"]
        texts = [
            t["text"].strip()
            for key, session in conv.items()
            if key.startswith("session_") and isinstance(session, list)
            for t in session
            if isinstance(t, dict) and str(t.get("text", "")).strip()
        ]
        qs = [str(qa["question"]).strip() for qa in sample["qa"] if str(qa.get("question", ""))]
        convs.append((str(sample["sample_id"]), texts, qs))
        turns.update(dict.fromkeys(texts))
        questions.update(dict.fromkeys(qs))
    return convs, list(turns), list(questions)


def _embed(embedder: LocalEmbedder, texts: list[str], side: str, cache: Path) -> _Matrix:
    digest = hashlib.sha256(f"{LOCAL_MODEL_ID}:{MODEL_SHA256}:{side}\n".encode())
    for text in texts:
        digest.update(text.encode() + b"\0")
    path = cache / f"perf-pg-{side}-{digest.hexdigest()[:16]}.npy"
    if path.is_file():
        cached: _Matrix = np.load(path).astype(np.float32)
        return cached
    if side == "passage":
        matrix = embedder.embed_documents(texts)
    else:
        matrix = np.stack([embedder.embed_query(t) for t in texts]).astype(np.float32)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, matrix)
    return matrix


def _fill_set(
    turns: list[str], vectors: _Matrix, total: int, seed: int
) -> tuple[list[str], _Matrix]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(turns))
    n_real = min(total, len(turns))
    texts = [f"{turns[i]} (#{j})" for j, i in enumerate(order[:n_real])]
    out = np.empty((total, vectors.shape[1]), np.float32)
    out[:n_real] = vectors[order[:n_real]]
    extra = total - n_real
    if extra:
        parents = rng.integers(0, len(turns), size=(extra, 3))
        weights = rng.dirichlet(np.ones(3), size=extra).astype(np.float32)
        weights[rng.random(extra) < 0.5, 2] = 0
        weights /= weights.sum(axis=1, keepdims=True)
        mix = np.einsum("nk,nkd->nd", weights, vectors[parents]).astype(np.float32)
        mix += rng.normal(0, NOISE, mix.shape).astype(np.float32)
        mix /= np.linalg.norm(mix, axis=1, keepdims=True)
        out[n_real:] = mix
        main = parents[np.arange(extra), weights.argmax(axis=1)]
        texts += [f"{turns[int(p)]} (#{n_real + j})" for j, p in enumerate(main)]
    return texts, out


def _lat(samples: Sequence[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2),
        "n": len(ms),
    }


def _timed(fn: Callable[[int], object], count: int, warmup: int = 3) -> list[float]:
    for i in range(min(warmup, count)):
        fn(i)
    out = []
    for i in range(count):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


class _Backend:
    def __init__(self, name: str, config: dict[str, Any], embedder: PrecomputedEmbedder) -> None:
        self.name = name
        self.config = config
        self.embedder = embedder
        self.mem = self.open()
        self.filled = 0
        self.ids: list[str] = []  # memory ids in fill order

    def open(self) -> Memory:
        return Memory(config={"vector_store": self.config}, embedder=self.embedder)


def _fill(b: _Backend, texts: list[str], upto: int) -> float:
    start = time.perf_counter()
    i = b.filled
    while i < upto:
        batch = texts[i : min(upto, i + FILL_BATCH)]
        call = i // FILL_BATCH
        out = b.mem.add(
            [{"role": "user", "content": t} for t in batch],
            user_id=USER,
            run_id=f"r{call % RUNS}",
            metadata={"b10": call % 10, "b100": call % 100},
            infer=False,
        )
        b.ids.extend(r["id"] for r in out["results"])
        i += len(batch)
    seconds = time.perf_counter() - start
    added = upto - b.filled
    b.filled = upto
    return added / seconds if seconds else 0.0


def _add_rates(b: _Backend, extra: list[str], calls: tuple[int, int]) -> dict[str, float]:
    """Messages/s of 1-message and 32-message calls, into a separate user at this size."""
    singles, batches = extra[: calls[0]], extra[calls[0] : calls[0] + calls[1] * 32]
    start = time.perf_counter()
    for t in singles:
        b.mem.add(t, user_id="bench-adder", infer=False)
    single = len(singles) / (time.perf_counter() - start)
    start = time.perf_counter()
    for j in range(0, len(batches), 32):
        b.mem.add(
            [{"role": "user", "content": t} for t in batches[j : j + 32]],
            user_id="bench-adder",
            infer=False,
        )
    batched = len(batches) / (time.perf_counter() - start)
    b.mem.purge(user_id="bench-adder")
    return {"single_msgs_per_s": round(single, 1), "batched_msgs_per_s": round(batched, 1)}


def _search(b: _Backend, questions: list[str], qvecs: _Matrix) -> dict[str, Any]:
    n = len(questions)
    scope = Scope(user_id=USER)
    out: dict[str, Any] = {
        "search": _lat(
            _timed(lambda i: b.mem.search(questions[i % n], user_id=USER, top_k=TOP_K), n)
        ),
        "vector_search": _lat(
            _timed(lambda i: b.mem.store.vector_search(scope, None, qvecs[i % n], TOP_K), n)
        ),
    }
    for label, kwargs in (
        ("filter_10pct", {"filters": {"b10": 0}}),
        ("filter_1pct", {"filters": {"b100": 0}}),
        ("run_id_5pct", {"run_id": "r0"}),
    ):
        out[label] = _lat(
            _timed(
                lambda i, kw=kwargs: b.mem.search(
                    questions[i % n], user_id=USER, top_k=TOP_K, **kw
                ),  # type: ignore[misc]
                max(20, n // 4),
            )
        )
    fresh = b.open()
    start = time.perf_counter()
    fresh.search(questions[0], user_id=USER, top_k=TOP_K)
    out["cold_first_search_ms"] = round((time.perf_counter() - start) * 1000, 1)
    fresh.close()
    return out


def _size(b: _Backend) -> dict[str, Any]:
    store: Any = b.mem.store
    if b.name == "sqlite":
        import sqlite3

        lite = sqlite3.connect(store.path)
        lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        lite.close()
        total = store.path.stat().st_size
        wal = store.path.with_name(store.path.name + "-wal")
        total += wal.stat().st_size if wal.exists() else 0
        return {"bytes": total, "bytes_per_memory": round(total / max(1, store.count()))}
    import psycopg

    with psycopg.connect(store.settings.url) as con:
        rows = con.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (store.schema,),
        ).fetchall()
        hnsw = con.execute(
            "SELECT pg_relation_size(%s::regclass)", (f'"{store.schema}".memories_embedding_hnsw',)
        ).fetchone()
    total = sum(int(r[1]) for r in rows)
    return {
        "bytes": total,
        "bytes_per_memory": round(total / max(1, store.count())),
        "hnsw_index_bytes": int(hnsw[0]) if hnsw else None,
    }


def _recall(b: _Backend, vectors: _Matrix, qvecs: _Matrix, size: int) -> dict[str, Any]:
    """recall@10 of the store's vector_search against exact cosine search over the scope."""
    store = b.mem.store
    scope = Scope(user_id=USER)
    id_at = {mid: i for i, mid in enumerate(b.ids[:size])}
    calls = np.arange(size) // FILL_BATCH
    rare = calls % 100 == 0
    node = parse_filters({"b100": 0})
    out: dict[str, Any] = {}
    for label, where, mask in (("all", None, None), ("filter_1pct", node, rare)):
        recalls = []
        for q in qvecs:
            exact_scores = vectors[:size] @ q
            if mask is not None:
                exact_scores = np.where(mask, exact_scores, -np.inf)
            exact = set(np.argsort(-exact_scores, kind="stable")[:10].tolist())
            got = {id_at[row.id] for row, _ in store.vector_search(scope, where, q, 10)}
            recalls.append(len(got & exact) / 10)
        out[label] = round(float(np.mean(recalls)), 4)
    if b.name == "postgres":
        out["plan_uses_hnsw"] = _uses_hnsw(b, qvecs[0])
        # The recall/latency trade-off of hnsw.ef_search (the store's default is 200).
        flows = getattr(store, "flows", None)
        if flows is not None:
            default = flows.ef_search
            sweep = {}
            for ef in (40, 100, 200, 400):
                flows.ef_search = ef
                recalls, seconds = [], []
                for q in qvecs:
                    exact = set(np.argsort(-(vectors[:size] @ q), kind="stable")[:10].tolist())
                    start = time.perf_counter()
                    hits = store.vector_search(scope, None, q, 10)
                    seconds.append(time.perf_counter() - start)
                    recalls.append(len({id_at[row.id] for row, _ in hits} & exact) / 10)
                sweep[str(ef)] = {"recall": round(float(np.mean(recalls)), 4), **_lat(seconds)}
            flows.ef_search = default
            out["ef_search_sweep"] = sweep
    return out


def _uses_hnsw(b: _Backend, q: npt.NDArray[np.float32]) -> bool:
    import psycopg

    store: Any = b.mem.store
    s = f'"{store.schema}"'
    vec = "[" + ",".join(f"{x:.6f}" for x in q) + "]"
    # The query shape of PostgresStore's vector search, with its settings.
    with psycopg.connect(store.settings.url) as con, con.transaction():
        con.execute("SELECT set_config('hnsw.ef_search', '100', true), "
                    "set_config('hnsw.iterative_scan', 'relaxed_order', true)")  # fmt: skip
        plan = con.execute(
            "EXPLAIN WITH hits AS MATERIALIZED (SELECT m.rowid, m.embedding <=> %s::vector AS d "
            f"FROM {s}.memories m WHERE m.deleted_at IS NULL AND (m.expires_at IS NULL OR "
            "m.expires_at > now()) AND m.user_id = %s AND m.embedding IS NOT NULL ORDER BY d "
            "LIMIT 20) SELECT rowid, d FROM hits ORDER BY d, rowid",
            (vec, USER),
        ).fetchall()
    return any("memories_embedding_hnsw" in r[0] for r in plan)


def _bm25_overlap(
    convs: list[tuple[str, list[str], list[str]]],
    turns: list[str],
    vectors: _Matrix,
    questions: list[str],
    qvecs: _Matrix,
    sqlite_cfg: dict[str, Any],
    pg_cfg: dict[str, Any],
) -> dict[str, Any]:
    """Top-10 BM25 overlap between the two stores on LoCoMo (one user per conversation)."""
    emb = PrecomputedEmbedder()
    emb.add_documents(turns, vectors)
    emb.add_queries(questions, qvecs)
    qvec = dict(zip(questions, qvecs, strict=True))
    lists: dict[str, list[list[str]]] = {}
    for name, cfg in (("sqlite", sqlite_cfg), ("postgres", pg_cfg)):
        with Memory(config={"vector_store": cfg}, embedder=emb) as m:
            ranked: list[list[str]] = []
            for sample_id, texts, qs in convs:
                for j in range(0, len(texts), 100):
                    m.add([{"role": "user", "content": t} for t in texts[j : j + 100]],
                          user_id=sample_id, infer=False)  # fmt: skip
                for question in qs:
                    cands = m.store.candidates(
                        Scope(user_id=sample_id),
                        None,
                        qvec[question],
                        query_terms(question),
                        [],
                        10,
                    )
                    kw = sorted((c for c in cands if c.bm25_rank), key=lambda c: c.bm25_rank or 0)
                    ranked.append([c.row.text for c in kw][:10])
            lists[name] = ranked
    overlaps, same_order = [], 0
    for a, b in zip(lists["sqlite"], lists["postgres"], strict=True):
        if a or b:
            overlaps.append(len(set(a) & set(b)) / max(len(a), len(b)))
        same_order += a == b
    return {
        "questions": len(lists["sqlite"]),
        "with_keyword_hits": len(overlaps),
        "mean_top10_overlap": round(float(np.mean(overlaps)), 4) if overlaps else None,
        "min_top10_overlap": round(float(np.min(overlaps)), 4) if overlaps else None,
        "identical_ranked_lists": same_order,
    }


def _reset_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def run(
    store_url: str,
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    data: Path | None = None,
    cache_dir: Path | None = None,
    workdir: Path | None = None,
    queries: int = 200,
    schema: str = "engram_bench",
    seed: int = 0,
    add_calls: tuple[int, int] = (200, 20),
    echo: Echo | None = print,
) -> dict[str, Any]:
    """Measure both stores at each size; returns the report (see the module docstring)."""
    say = echo or (lambda _: None)
    sizes = sorted(sizes)
    data = data_path(data)
    if not data.is_file():
        raise FileNotFoundError(f"LoCoMo data not found at {data}; pass --data")
    convs, turns, questions = _locomo(data)
    cache = cache_dir or default_cache_dir()
    say(f"embedding {len(turns)} turns and {len(questions)} questions (cached) ...")
    model = LocalEmbedder()
    vectors = _embed(model, turns, "passage", cache)
    qvecs = _embed(model, questions, "query", cache)
    work = Path(workdir or tempfile.mkdtemp(prefix="engram-perf-pg-"))
    work.mkdir(parents=True, exist_ok=True)
    total = sizes[-1]
    all_texts, all_vectors = _fill_set(turns, vectors, total + 1000, seed)
    emb = PrecomputedEmbedder()
    emb.add_documents(all_texts, all_vectors)
    # the fill set, and 1000 more texts for the add-rate calls
    texts, fill_vectors, extra = all_texts[:total], all_vectors[:total], all_texts[total:]
    if add_calls[0] + 32 * add_calls[1] > len(extra):
        raise ValueError("add_calls asks for more than the 1000 spare texts")
    q_texts, q_vecs = questions[:queries], qvecs[:queries]
    emb.add_queries(q_texts, q_vecs)
    _reset_schema(store_url, schema)
    for f in work.glob("perf.db*"):
        f.unlink()
    backends = [
        _Backend("sqlite", {"provider": "sqlite", "config": {"path": str(work / "perf.db")}}, emb),
        _Backend("postgres", {"provider": "postgres",
                              "config": {"url": store_url, "collection_name": schema}}, emb),
    ]  # fmt: skip
    report: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "sizes": {},
    }
    for size in sizes:
        row: dict[str, Any] = {}
        for b in backends:
            say(f"{b.name}: filling to {size} ...")
            fill_rate = _fill(b, texts, size)
            figures: dict[str, Any] = {"fill_msgs_per_s": round(fill_rate, 1)}
            figures["add"] = _add_rates(b, extra, add_calls)
            say(f"{b.name}: searching at {size} ...")
            figures.update(_search(b, q_texts, q_vecs))
            figures["size"] = _size(b)
            figures["recall_at_10"] = _recall(b, fill_vectors, q_vecs[:100], size)
            row[b.name] = figures
            say(f"{b.name} @ {size}: {json.dumps(figures)}")
        report["sizes"][str(size)] = row
    for b in backends:
        b.mem.close()
    say("BM25 parity on LoCoMo dev ...")
    _reset_schema(store_url, schema + "_bm25")
    report["bm25_locomo"] = _bm25_overlap(
        convs,
        turns,
        vectors,
        questions,
        qvecs,
        {"provider": "sqlite", "config": {"path": str(work / "bm25.db")}},
        {"provider": "postgres", "config": {"url": store_url, "collection_name": schema + "_bm25"}},
    )
    say(f"BM25: {json.dumps(report['bm25_locomo'])}")
    (work / "bm25.db").unlink(missing_ok=True)
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as a Markdown table, SQLite and PostgreSQL side by side."""
    lines = [
        "| size | figure | SQLite | PostgreSQL |",
        "|---:|---|---:|---:|",
    ]
    keys: list[tuple[str, Callable[[dict[str, Any]], object]]] = [
        ("fill (100/call) msgs/s", lambda f: f["fill_msgs_per_s"]),
        ("add 1/call msgs/s", lambda f: f["add"]["single_msgs_per_s"]),
        ("add 32/call msgs/s", lambda f: f["add"]["batched_msgs_per_s"]),
        ("search p50 / p95 ms", lambda f: f"{f['search']['p50_ms']} / {f['search']['p95_ms']}"),
        ("vector_search p50 / p95 ms",
         lambda f: f"{f['vector_search']['p50_ms']} / {f['vector_search']['p95_ms']}"),
        ("search, filter 10% p50 ms", lambda f: f["filter_10pct"]["p50_ms"]),
        ("search, filter 1% p50 ms", lambda f: f["filter_1pct"]["p50_ms"]),
        ("search, run_id 5% p50 ms", lambda f: f["run_id_5pct"]["p50_ms"]),
        ("first search, cold ms", lambda f: f["cold_first_search_ms"]),
        ("bytes per memory", lambda f: f["size"]["bytes_per_memory"]),
        ("recall@10 vs exact", lambda f: f["recall_at_10"]["all"]),
        ("recall@10, filter 1%", lambda f: f["recall_at_10"]["filter_1pct"]),
    ]  # fmt: skip
    for size, row in report["sizes"].items():
        for label, get in keys:
            lines.append(
                f"| {int(size):,} | {label} | {get(row['sqlite'])} | {get(row['postgres'])} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.perf_pg --store postgresql://…``."""
    parser = argparse.ArgumentParser(prog="engram bench perf --store", description=__doc__)
    parser.add_argument("--store", required=True, help="postgresql:// URL of the server to measure")
    parser.add_argument("--sizes", help="comma-separated scope sizes (default 10000,100000)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--data", type=Path, help="LoCoMo JSON file (default: $ENGRAM_LOCOMO)")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--workdir", type=Path, help="where the SQLite file goes")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--schema", default="engram_bench", help="PostgreSQL schema (recreated)")
    args = parser.parse_args(argv)
    if args.data is None and default_data_path() is None:
        parser.error(MISSING_DATA)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(DEFAULT_SIZES)
    report = run(
        args.store,
        sizes=sizes,
        data=args.data,
        cache_dir=args.cache_dir,
        workdir=args.workdir,
        queries=args.queries,
        schema=args.schema,
    )
    print(format_report(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
