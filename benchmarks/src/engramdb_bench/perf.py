"""The foundation performance benchmark: add throughput, search latency, disk and memory.

Run::

    python -m engramdb_bench.perf [--sizes 1000,10000,100000] [--out FILE.json] [--quick]

or call :func:`run`. It prints tables and returns (and optionally writes) one
JSON-able dict. Nothing here asserts a speed: targets are reported as met or
missed, never enforced.

What is measured, all through the public :class:`~engramdb.Memory` API unless
said otherwise:

1. **add(infer=False) with the real local embedder**: one message per call and
   32 per call, in messages/s, beside the embedder's own sentences/s (batch 32
   and one at a time), so the share of the model is visible.
2. **The storage path of add**, embedding excluded: the same ``Memory.add``
   calls with :class:`PrecomputedEmbedder`, a *benchmark-only* stand-in that
   returns vectors the real model computed earlier by dictionary look-up.
   Everything else (validation, hashing, lemmatising, entity extraction, the
   SQLite transaction, history, messages) runs for real.
3. **Search latency** in one scope (one ``user_id``) at each size: (a) end to
   end with the real query embedding, (b) ``Memory.search`` with the query
   vector looked up instead of computed, (b') ``store.vector_search`` alone,
   (c) the query embedding alone; plus the first (cold) search of a freshly
   opened store, which loads the scope's vectors from the file into the
   in-memory index. At the largest size also with a metadata filter (10% and
   1% selective) and with a second scope id (``run_id``, 5%).
4. **Size on disk** per memory (file + WAL after a checkpoint, with a per-table
   breakdown), the in-memory index's bytes, and resident memory: this process's
   peak, and a separate *probe* process that only opens the store and searches
   it, so the figure is what an application pays, not this benchmark.

Data: the real corpus is the LoCoMo dev dialogue turns (``conversation`` →
``session_N`` → ``text``), embedded once with the local model and cached as
``.npy``; queries are the LoCoMo ``qa`` questions, embedded on the query side.
Filling 100k memories through the model would take most of an hour, so sizes
above the real turn count are **synthetic-from-real**: each extra vector is a
random convex mix of 2-3 real turn vectors plus N(0, 0.01) noise per dimension,
renormalised, with the text of its main parent turn plus a unique suffix. They
keep the anisotropy and topic structure of real e5 vectors, but they are not
a real 100k-memory scope; the report says so.

Every time is taken twice: wall clock, and the CPU time of the calling thread,
which on a shared, loaded machine stays close to what an idle one would show
(see :func:`_clock`). ``docs/benchmarks.md`` has the figures and what bounds
them.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import os
import platform
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from engramdb.embedders.base import Embedder
from engramdb.embedders.local import LOCAL_MODEL_ID, MODEL_SHA256, LocalEmbedder
from engramdb.memory import Memory
from engramdb.nlp import query_terms
from engramdb.stores.base import Scope
from engramdb_bench._locomo import data_path as resolve_data_path
from engramdb_bench._locomo import default_data_path, load_conversations

__all__ = [
    "DEFAULT_SIZES",
    "QUICK_SIZES",
    "PrecomputedEmbedder",
    "default_cache_dir",
    "default_data_path",
    "format_report",
    "load_locomo",
    "main",
    "run",
]

_Matrix = npt.NDArray[np.float32]
_Vector = npt.NDArray[np.float32]
Echo = Callable[[str], None]

DEFAULT_SIZES: Final = (1_000, 10_000, 100_000)
QUICK_SIZES: Final = (1_000, 5_000)
TOP_K: Final = 20
"""Results per search: ``Memory.search``'s default ``top_k``."""
SMALL_BATCH: Final = 32
"""Messages per call in the "batched" add figures, and the embedder's batch."""
BULK_BATCH: Final = 500
"""Messages per call when filling the search store: the default ``limits.max_messages``."""
# Per-dimension noise of a synthetic vector: with 384 dimensions its norm is
# ~0.2, so a synthetic vector stays on its parents' topic without being a copy.
# The same recipe as engramdb_bench.vector_index, so the two reports compare.
SYNTH_NOISE: Final = 0.01
SEARCH_USER: Final = "bench-user"
# Fill-batch metadata and run ids cycle with these periods, so at the largest
# size a filter on them selects 10% / 1% of the scope and a run_id 5%.
_BUCKETS: Final = (10, 100)
_RUNS: Final = 20

TARGETS: Final = {
    "storage_add_batched_msgs_per_s": 2_000.0,
    "search_100k_no_embed_p50_ms": 10.0,
    "search_100k_no_embed_p95_ms": 25.0,
    "search_100k_e2e_p50_ms": 20.0,
    "search_100k_e2e_p95_ms": 40.0,
}
"""The figures the store is meant to reach on a 2-core machine."""

SYNTHETIC_NOTE: Final = (
    "sizes above the real LoCoMo turn count are synthetic-from-real: each extra memory "
    "is a random convex mix of 2-3 real turn vectors (Dirichlet weights) plus "
    f"N(0, {SYNTH_NOISE}) noise per dimension, renormalised, with its main parent's "
    "text plus a unique suffix; queries are real LoCoMo questions"
)


@dataclass(frozen=True)
class _Plan:
    """How much work each measurement does (full run or ``--quick``)."""

    real_turns: int | None  # None: every LoCoMo turn
    questions: int | None  # None: every LoCoMo question
    embed_batch_texts: int
    embed_single_texts: int
    query_embeds: int
    add_single: int
    add_batches: int
    storage_single: int
    storage_batches: int
    search_queries: int
    e2e_queries: int
    cold_repeats: int
    warmup: int


_FULL = _Plan(
    real_turns=None,
    questions=None,
    embed_batch_texts=512,
    embed_single_texts=128,
    query_embeds=200,
    add_single=128,
    add_batches=16,
    storage_single=2_000,
    storage_batches=300,
    search_queries=500,
    e2e_queries=200,
    cold_repeats=3,
    warmup=20,
)
_QUICK = _Plan(
    real_turns=64,
    questions=20,
    embed_batch_texts=32,
    embed_single_texts=8,
    query_embeds=8,
    add_single=8,
    add_batches=1,
    storage_single=200,
    storage_batches=30,
    search_queries=60,
    e2e_queries=5,
    cold_repeats=1,
    warmup=5,
)


# ------------------------------------------------------------------------ data


def default_cache_dir() -> Path:
    """Where embedded matrices are cached: ``$XDG_CACHE_HOME/engramdb/bench``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "engramdb" / "bench"


def load_locomo(path: Path) -> tuple[list[str], list[str]]:
    """Return ``(turns, questions)`` of a LoCoMo file, each without repeats, in file order.

    Turns are the ``text`` of every dialogue turn of every session (photo
    captions left out: they are not what a user types); questions are the
    ``qa`` questions.
    """
    turns: dict[str, None] = {}
    questions: dict[str, None] = {}
    for conversation in load_conversations(path):
        for session in conversation.sessions:
            for turn in session.turns:
                if turn.text.strip():
                    turns[turn.text.strip()] = None
        for qa in conversation.qa:
            if qa.question.strip():
                questions[qa.question.strip()] = None
    return list(turns), list(questions)


def _embed_cached(
    embedder: LocalEmbedder, texts: list[str], side: str, cache_dir: Path
) -> tuple[_Matrix, float | None]:
    """Embed ``texts`` on the ``passage`` or ``query`` side, cached as ``.npy``.

    Returns the matrix and the seconds spent embedding (``None`` when it came
    from the cache). The cache key covers the model checksum and every text,
    so a new model or corpus never reads stale vectors.
    """
    digest = hashlib.sha256(f"{LOCAL_MODEL_ID}:{MODEL_SHA256}:{side}\n".encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    path = cache_dir / f"perf-locomo-{side}-{digest.hexdigest()[:16]}.npy"
    if path.is_file():
        cached = np.load(path)
        if cached.shape == (len(texts), embedder.dim):
            return np.ascontiguousarray(cached, dtype=np.float32), None
    started = time.perf_counter()
    if side == "passage":
        matrix = embedder.embed_documents(texts)
    else:
        matrix = np.stack([embedder.embed_query(t) for t in texts]).astype(np.float32)
    seconds = time.perf_counter() - started
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Written aside then renamed, so an interrupted run never leaves a torn cache.
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
    np.save(tmp, matrix)
    tmp.replace(path)
    return matrix, seconds


@dataclass
class _Corpus:
    turns: list[str]
    vectors: _Matrix
    questions: list[str]
    query_vectors: _Matrix
    embed_seconds: dict[str, float | None]


def _load_corpus(
    path: Path, embedder: LocalEmbedder, cache_dir: Path, plan: _Plan, seed: int
) -> _Corpus:
    turns, questions = load_locomo(path)
    # Shuffled so that any prefix (the 1k set, the quick subset) spans every
    # conversation rather than the first one.
    random.Random(seed).shuffle(turns)
    if plan.real_turns is not None:
        turns = turns[: plan.real_turns]
    if plan.questions is not None:
        questions = questions[: plan.questions]
    vectors, passage_s = _embed_cached(embedder, turns, "passage", cache_dir)
    query_vectors, query_s = _embed_cached(embedder, questions, "query", cache_dir)
    return _Corpus(
        turns, vectors, questions, query_vectors, {"passages": passage_s, "queries": query_s}
    )


def _synthesise(
    real: _Matrix, count: int, rng: np.random.Generator
) -> tuple[_Matrix, npt.NDArray[np.intp]]:
    """``count`` noisy convex mixes of 2-3 real vectors, and each one's main parent."""
    out = np.empty((count, real.shape[1]), dtype=np.float32)
    main = np.empty(count, dtype=np.intp)
    # In chunks: a (count, 3, dim) gather at 100k rows would be ~450 MB.
    for start in range(0, count, 10_000):
        n = min(10_000, count - start)
        parents = rng.integers(0, real.shape[0], size=(n, 3))
        weights = rng.dirichlet(np.ones(3), size=n).astype(np.float32)
        weights[rng.random(n) < 0.5, 2] = 0.0
        weights /= weights.sum(axis=1, keepdims=True)
        mix = np.einsum("nk,nkd->nd", weights, real[parents]).astype(np.float32)
        mix += rng.normal(0.0, SYNTH_NOISE, size=mix.shape).astype(np.float32)
        mix /= np.linalg.norm(mix, axis=1, keepdims=True)
        out[start : start + n] = mix
        main[start : start + n] = parents[np.arange(n), weights.argmax(axis=1)]
    return out, main


def _fill_set(corpus: _Corpus, total: int, seed: int) -> tuple[list[str], _Matrix, int]:
    """Texts and vectors of the search store: real turns first, then synthetic ones."""
    n_real = min(len(corpus.turns), total)
    vectors = np.empty((total, corpus.vectors.shape[1]), dtype=np.float32)
    vectors[:n_real] = corpus.vectors[:n_real]
    # The suffix keeps every text unique: a repeat would be deduplicated (NONE)
    # instead of stored, and the scope would come out smaller than asked.
    texts = [f"{corpus.turns[i]} (#{i})" for i in range(n_real)]
    if total > n_real:
        synthetic, main = _synthesise(corpus.vectors, total - n_real, np.random.default_rng(seed))
        vectors[n_real:] = synthetic
        texts.extend(f"{corpus.turns[int(p)]} (#{n_real + j})" for j, p in enumerate(main.tolist()))
    return texts, vectors, n_real


# ------------------------------------------------------------ the stand-in


class PrecomputedEmbedder:
    """BENCHMARK ONLY: hands back vectors the real model computed earlier.

    Not an embedding model: :meth:`embed_documents` and :meth:`embed_query`
    look each text up in a dictionary filled by :meth:`add_documents` and
    :meth:`add_queries`, and raise ``KeyError`` for any other text. It reports
    the real model's ``model`` and ``dim``, because the vectors it returns are
    that model's, so a store filled through it opens with the real embedder.
    It exists to time everything in ``add``/``search`` except the model.
    """

    def __init__(self, model: str = LOCAL_MODEL_ID, dim: int = 384) -> None:
        """Start empty; ``model`` and ``dim`` are those of the model that made the vectors."""
        self._model = model
        self._dim = dim
        self._documents: dict[str, _Vector] = {}
        self._queries: dict[str, _Vector] = {}

    @property
    def model(self) -> str:
        """The real model's identifier (the vectors are its)."""
        return self._model

    @property
    def dim(self) -> int:
        """Length of every vector."""
        return self._dim

    def add_documents(self, texts: Sequence[str], vectors: _Matrix) -> None:
        """Make ``embed_documents`` return ``vectors[i]`` for ``texts[i]``."""
        self._documents.update(zip(texts, vectors, strict=True))

    def add_queries(self, texts: Sequence[str], vectors: _Matrix) -> None:
        """Make ``embed_query`` return ``vectors[i]`` for ``texts[i]``."""
        self._queries.update(zip(texts, vectors, strict=True))

    def embed_documents(self, texts: list[str]) -> _Matrix:
        """Return the stored passage vectors of ``texts``, shape ``(n, dim)``."""
        if not texts:
            return np.empty((0, self._dim), dtype=np.float32)
        try:
            return np.stack([self._documents[t] for t in texts])
        except KeyError as exc:
            raise KeyError(f"PrecomputedEmbedder has no vector for document {exc}") from None

    def embed_query(self, text: str) -> _Vector:
        """Return the stored query vector of ``text``."""
        try:
            return self._queries[text]
        except KeyError:
            raise KeyError(f"PrecomputedEmbedder has no vector for query {text!r}") from None


# -------------------------------------------------------------- measuring


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


@dataclass
class _Timing:
    """Wall-clock and calling-thread CPU seconds of one timed block."""

    wall: float = 0.0
    cpu: float = 0.0


@contextmanager
def _clock() -> Iterator[_Timing]:
    """Time a block in wall-clock seconds and in CPU seconds of the calling thread.

    Why the CPU figure: on a shared, loaded machine the wall clock mostly
    measures waiting for a core. The calling thread's CPU time does not, and
    it approximates an idle machine's wall clock: exactly for single-threaded
    work (Python, SQLite), and roughly for work the model or BLAS splits
    evenly over two threads, since the calling thread does its half. Process
    CPU time would count helper threads that spin while they wait for a core.
    """
    timing = _Timing()
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        yield timing
    finally:
        timing.wall = time.perf_counter() - wall
        timing.cpu = time.thread_time() - cpu


@dataclass
class _Samples:
    """Per-call wall-clock and CPU seconds."""

    wall: list[float]
    cpu: list[float]


def _latency(samples: _Samples) -> dict[str, Any]:
    """p50 / p95 / max / mean wall milliseconds of per-call samples, and CPU p50 / p95."""
    ms = np.asarray(samples.wall, dtype=np.float64) * 1e3
    cpu = np.asarray(samples.cpu, dtype=np.float64) * 1e3
    return {
        "n": len(samples.wall),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "max_ms": round(float(ms.max()), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 3),
        "cpu_p95_ms": round(float(np.percentile(cpu, 95)), 3),
    }


def _timed_calls(fn: Callable[[int], object], count: int, warmup: int = 0) -> _Samples:
    """Call ``fn(i)`` ``warmup`` times untimed, then ``count`` times, timing each call."""
    for i in range(warmup):
        fn(i)
    samples = _Samples([], [])
    for i in range(count):
        with _clock() as timing:
            fn(i)
        samples.wall.append(timing.wall)
        samples.cpu.append(timing.cpu)
    return samples


def _cycle(items: Sequence[str], count: int) -> list[str]:
    return [items[i % len(items)] for i in range(count)]


def _rss_now() -> int | None:
    """Resident bytes of this process now (Linux), else ``None``."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _high_water_rss() -> int | None:
    """Highest resident bytes of this process image (``VmHWM``, Linux), else ``None``.

    Unlike ``ru_maxrss``, which Linux carries over from the parent through
    fork and exec, this starts from zero in a freshly exec'd process, so a
    child's figure is its own.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _peak_rss() -> int:
    """Highest resident bytes of this process so far (``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def _index_bytes(store: object, kind: str, value: str) -> int | None:
    """Bytes of the in-memory vector index of one scope, if the store has built it.

    Reads the store's private cache table: the store has no public statistics
    call yet. ``None`` if that internal shape changes.
    """
    caches = getattr(store, "_caches", None)
    if not isinstance(caches, dict):
        return None
    cache = caches.get((kind, value))
    index = getattr(cache, "index", None)
    nbytes = getattr(index, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else None


def _add_throughput(mem: Memory, texts: list[str], user_id: str, batch: int) -> dict[str, Any]:
    """Add ``texts`` through ``Memory.add(infer=False)``, ``batch`` messages per call."""
    calls: list[str | list[dict[str, Any]]] = [
        texts[i] if batch == 1 else [{"role": "user", "content": t} for t in texts[i : i + batch]]
        for i in range(0, len(texts), batch)
    ]
    stored = 0

    def one(i: int) -> None:
        nonlocal stored
        result = mem.add(calls[i], user_id=user_id, infer=False)
        stored += sum(1 for r in result["results"] if r["event"] == "ADD")

    with _clock() as total:
        samples = _timed_calls(one, len(calls))
    if stored != len(texts):
        raise RuntimeError(f"expected {len(texts)} new memories, {stored} were stored")
    return {**_throughput(len(texts), batch, total), "call": _latency(samples)}


def _throughput(messages: int, per_call: int, timing: _Timing) -> dict[str, Any]:
    return {
        "messages": messages,
        "messages_per_call": per_call,
        "seconds": round(timing.wall, 3),
        "msgs_per_s": round(messages / timing.wall, 1),
        "cpu_seconds": round(timing.cpu, 3),
        "cpu_msgs_per_s": round(messages / max(timing.cpu, 1e-9), 1),
    }


def _measure_embedder(
    embedder: LocalEmbedder, corpus: _Corpus, plan: _Plan, echo: Echo
) -> dict[str, Any]:
    echo("embedder: sentences/s at batch 32 and one at a time, query latency ...")
    batch_texts = _cycle(corpus.turns, plan.embed_batch_texts)
    with _clock() as batch_time:
        embedder.embed_documents(batch_texts)
    single_texts = _cycle(corpus.turns, plan.embed_single_texts)
    single = _timed_calls(lambda i: embedder.embed_documents([single_texts[i]]), len(single_texts))
    queries = _cycle(corpus.questions, plan.query_embeds)
    query = _timed_calls(lambda i: embedder.embed_query(queries[i]), len(queries))
    return {
        "model": embedder.model,
        "batch32": {
            "sentences": len(batch_texts),
            "seconds": round(batch_time.wall, 3),
            "sentences_per_s": round(len(batch_texts) / batch_time.wall, 1),
            "cpu_seconds": round(batch_time.cpu, 3),
        },
        "single": {
            "sentences": len(single_texts),
            "sentences_per_s": round(len(single_texts) / sum(single.wall), 1),
            "call": _latency(single),
        },
        "query": _latency(query),
    }


def _measure_add(
    workdir: Path,
    embedder: LocalEmbedder,
    corpus: _Corpus,
    plan: _Plan,
    echo: Echo,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    echo("add(infer=False) with the real embedder ...")
    with Memory(workdir / "add-real.db", embedder=embedder) as mem:
        # Binds the embedder to the new file and warms SQLite, off the clock.
        mem.add("warm-up", user_id="warm-up", infer=False)
        single = [f"{t} (single {i})" for i, t in enumerate(_cycle(corpus.turns, plan.add_single))]
        batched = [
            f"{t} (batch {i})"
            for i, t in enumerate(_cycle(corpus.turns, plan.add_batches * SMALL_BATCH))
        ]
        out["real_embedder"] = {
            "single": _add_throughput(mem, single, "add-single", 1),
            "batched": _add_throughput(mem, batched, "add-batched", SMALL_BATCH),
        }

    echo("add(infer=False), storage path (precomputed vectors) ...")
    stand_in = PrecomputedEmbedder(embedder.model, embedder.dim)
    vectors = {t: v for t, v in zip(corpus.turns, corpus.vectors, strict=True)}
    single_turns = _cycle(corpus.turns, plan.storage_single)
    batch_turns = _cycle(corpus.turns, plan.storage_batches * SMALL_BATCH)
    single = [f"{t} (single {i})" for i, t in enumerate(single_turns)]
    batched = [f"{t} (batch {i})" for i, t in enumerate(batch_turns)]
    stand_in.add_documents(single, np.stack([vectors[t] for t in single_turns]))
    stand_in.add_documents(batched, np.stack([vectors[t] for t in batch_turns]))
    stand_in.add_documents(["warm-up"], corpus.vectors[:1])
    with Memory(workdir / "add-storage.db", embedder=stand_in) as mem:
        mem.add("warm-up", user_id="warm-up", infer=False)
        out["precomputed_embedder"] = {
            "note": "embedding excluded: PrecomputedEmbedder returns the real model's "
            "vectors by dictionary look-up; everything else in add() runs",
            "single": _add_throughput(mem, single, "storage-single", 1),
            "batched": _add_throughput(mem, batched, "storage-batched", SMALL_BATCH),
        }
    return out


def _disk(path: Path) -> dict[str, Any]:
    """Checkpoint the WAL, then file sizes and a per-table breakdown (via ``dbstat``)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables: dict[str, int] | None = None
        try:
            owner = dict(con.execute("SELECT name, tbl_name FROM sqlite_schema").fetchall())
            tables = {}
            for name, size in con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
                table = str(owner.get(name, name))
                # FTS5 keeps its index in shadow tables memory_fts_data, _idx, ...
                table = "memory_fts" if table.startswith("memory_fts") else table
                tables[table] = tables.get(table, 0) + int(size)
            tables = dict(sorted(tables.items(), key=lambda kv: -kv[1]))
        except sqlite3.OperationalError:
            tables = None  # SQLite built without the dbstat table
    finally:
        con.close()
    wal = path.with_name(path.name + "-wal")
    file_bytes = path.stat().st_size
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    return {"file_bytes": file_bytes, "wal_bytes": wal_bytes, "tables": tables}


@contextmanager
def _swapped(mem: Memory, embedder: Embedder) -> Iterator[None]:
    """Let ``mem`` embed with ``embedder`` for a while.

    Both embedders report the same model, so the store's binding holds; and
    the searches of both share ``mem``'s warm index, which is the point.
    """
    saved = mem.embedder
    mem.embedder = embedder
    try:
        yield
    finally:
        mem.embedder = saved


def _probe(path: Path, user_id: str, query: str) -> dict[str, Any]:
    """In a fresh process: what opening and searching the store costs an application."""
    rss: dict[str, int | None] = {"after_import": _rss_now()}
    embedder = LocalEmbedder(batch_size=SMALL_BATCH)
    with _clock() as model:
        embedder.load()
        embedder.embed_query(query)
    model_s = model.wall
    rss["after_model"] = _rss_now()
    with Memory(path, embedder=embedder) as mem:
        with _clock() as cold:
            mem.search(query, user_id=user_id, top_k=TOP_K)
        rss["after_search"] = _rss_now()
        index = _index_bytes(mem.store, "user_id", user_id)
    return {
        "model_load_and_first_query_s": round(model_s, 3),
        "cold_search_e2e_ms": _ms(cold.wall),
        "cold_search_e2e_cpu_ms": _ms(cold.cpu),
        "rss_bytes": rss,
        # The kernel updates VmHWM lazily; it can trail the RSS just read.
        "peak_rss_bytes": max((v for v in (_high_water_rss(), *rss.values()) if v), default=None),
        "index_bytes": index,
    }


def _run_probe(path: Path, user_id: str, query: str) -> dict[str, Any] | None:
    cmd = [
        sys.executable,
        "-m",
        "engramdb_bench.perf",
        "--probe",
        str(path),
        "--probe-user",
        user_id,
        "--probe-query",
        query,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-2_000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _search_figures(
    mem: Memory,
    stand_in: PrecomputedEmbedder,
    embedder: LocalEmbedder,
    corpus: _Corpus,
    plan: _Plan,
) -> dict[str, Any]:
    """Warm latencies (a), (b), (b') at one size; ``mem`` has its index built."""
    questions = _cycle(corpus.questions, plan.search_queries)
    vectors = [corpus.query_vectors[i % len(corpus.questions)] for i in range(len(questions))]
    scope = Scope(user_id=SEARCH_USER)
    with _swapped(mem, stand_in):
        no_embed = _timed_calls(
            lambda i: mem.search(questions[i], user_id=SEARCH_USER, top_k=TOP_K),
            len(questions),
            plan.warmup,
        )
    store_only = _timed_calls(
        lambda i: mem.store.vector_search(scope, None, vectors[i], TOP_K),
        len(questions),
        plan.warmup,
    )
    e2e_questions = questions[: plan.e2e_queries]
    with _swapped(mem, embedder):
        e2e = _timed_calls(
            lambda i: mem.search(e2e_questions[i], user_id=SEARCH_USER, top_k=TOP_K),
            len(e2e_questions),
            min(plan.warmup, 3),
        )
    return {
        "e2e": _latency(e2e),
        "no_embed": _latency(no_embed),
        "vector_search": _latency(store_only),
    }


def _narrowed_figures(
    mem: Memory, stand_in: PrecomputedEmbedder, corpus: _Corpus, plan: _Plan, size: int
) -> dict[str, Any]:
    """Time searches narrowed by a metadata filter or a second scope id (no embedding).

    On SQLite each query runs on every path of ``SQLiteStore._filtered_path``
    alternately in this one process, so load moves them alike: ``auto`` (the
    default: the rowid scan kept until the next write), ``legacy`` (the scan
    on every search: the path before) and ``post`` (post-filtering the
    indexes' top hits). ``after_write`` times ``auto`` with a write to
    another user before each search (the kept set renewed every time).
    Recall@10 of each path is against ``legacy`` over the same queries.
    """
    questions = _cycle(corpus.questions, plan.search_queries)
    cases: dict[str, dict[str, Any]] = {
        "filter_10pct": {"filters": {"bucket10": 3}},
        "filter_1pct": {"filters": {"bucket100": 7}},
        "run_id_5pct": {"run_id": "run-3"},
    }
    store = mem.store
    paths = ("auto", "legacy", "post") if hasattr(store, "_filtered_path") else ("auto",)
    writes = 0
    out: dict[str, Any] = {}
    with _swapped(mem, stand_in):
        for name, kwargs in cases.items():
            first = mem.search(questions[0], user_id=SEARCH_USER, top_k=TOP_K, **kwargs)
            samples = {path: _Samples([], []) for path in (*paths, "after_write")}
            recall: dict[str, list[float]] = {path: [] for path in paths}
            for i in range(-plan.warmup, len(questions)):
                question = questions[max(i, 0)]
                order = paths if i % 2 == 0 else paths[::-1]
                top: dict[str, list[str]] = {}
                for path in order:
                    if len(paths) > 1:
                        store._filtered_path = path  # type: ignore[attr-defined]
                    with _clock() as timing:
                        found = mem.search(question, user_id=SEARCH_USER, top_k=TOP_K, **kwargs)
                    top[path] = [h["id"] for h in found["results"]][:10]
                    if i >= 0:
                        samples[path].wall.append(timing.wall)
                        samples[path].cpu.append(timing.cpu)
                if len(paths) > 1:
                    store._filtered_path = "auto"  # type: ignore[attr-defined]
                    if i >= 0 and i < plan.search_queries // 4:
                        text = f"write {writes}"
                        stand_in.add_documents([text], corpus.vectors[:1])
                        mem.add(text, user_id="bench-other", infer=False)
                        writes += 1
                        with _clock() as timing:
                            mem.search(question, user_id=SEARCH_USER, top_k=TOP_K, **kwargs)
                        samples["after_write"].wall.append(timing.wall)
                        samples["after_write"].cpu.append(timing.cpu)
                    if i >= 0:
                        want = set(top["legacy"])
                        for path in paths:
                            recall[path].append(len(want & set(top[path])) / max(1, len(want)))
            matching = len(mem.get_all(user_id=SEARCH_USER, top_k=size, **kwargs)["results"])
            out[name] = {
                **kwargs,
                "matching": matching,
                "hits": len(first["results"]),
                **_latency(samples["auto"]),
            }
            if len(paths) > 1:
                for path in ("legacy", "post", "after_write"):
                    out[name][path] = _latency(samples[path])
                for path in ("auto", "post"):
                    out[name][f"recall_at_10_{path}_vs_legacy"] = round(
                        float(np.mean(recall[path])), 4
                    )
    return out


def run_narrowed(
    size: int = 100_000,
    out: str | Path | None = None,
    *,
    data: str | Path | None = None,
    cache_dir: str | Path | None = None,
    queries: int = 200,
    seed: int = 0,
    echo: Echo | None = print,
) -> dict[str, Any]:
    """Only the narrowed searches: fill one store to ``size`` and time them, before and after.

    The figures of :func:`_narrowed_figures` (default and legacy path
    alternately, recall@10), without the rest of the benchmark; the LoCoMo
    vectors must be cached already or are embedded once.
    """
    say: Echo = echo if echo is not None else (lambda _line: None)
    data_path = resolve_data_path(data)
    if not data_path.is_file():
        raise FileNotFoundError(f"LoCoMo file not found: {data_path}")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    plan = dataclasses.replace(_FULL, search_queries=queries)
    embedder = LocalEmbedder(batch_size=SMALL_BATCH)
    corpus = _load_corpus(data_path, embedder, cache, plan, seed)
    texts, vectors, _ = _fill_set(corpus, size, seed)
    stand_in = PrecomputedEmbedder(embedder.model, embedder.dim)
    stand_in.add_documents(texts, vectors)
    stand_in.add_queries(corpus.questions, corpus.query_vectors)
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="engramdb-perf-") as tmp:
        path = Path(tmp) / "search.db"
        with Memory(path, embedder=stand_in) as mem:
            say(f"filling to {size} memories ...")
            _fill(mem, texts, 0, size, max(1, min(BULK_BATCH, size // 20)), 0)
            mem.search(corpus.questions[0], user_id=SEARCH_USER, top_k=TOP_K)
            say("narrowed searches, default and legacy path alternately ...")
            narrowed = _narrowed_figures(mem, stand_in, corpus, plan, size)
            questions = _cycle(corpus.questions, plan.search_queries)
            with _swapped(mem, stand_in):
                unfiltered = _timed_calls(
                    lambda i: mem.search(questions[i], user_id=SEARCH_USER, top_k=TOP_K),
                    len(questions),
                    plan.warmup,
                )
    report = {
        "benchmark": "engramdb_bench.perf narrowed",
        "size": size,
        "queries": queries,
        "loadavg": [loadavg_start, [round(x, 2) for x in os.getloadavg()]],
        "narrowed": narrowed,
        "unfiltered": _latency(unfiltered),
    }
    plain = _latency(unfiltered)
    say(
        f"unfiltered: {plain['p50_ms']}/{plain['p95_ms']} "
        f"({plain['cpu_p50_ms']}/{plain['cpu_p95_ms']})"
    )
    for name, fig in narrowed.items():
        say(f"{name}: matching {fig['matching']}; ms p50/p95 wall (CPU):")
        for way in ("auto", "legacy", "post", "after_write"):
            f = fig if way == "auto" else fig.get(way)
            if f:
                say(f"  {way:12} {f['p50_ms']}/{f['p95_ms']} ({f['cpu_p50_ms']}/{f['cpu_p95_ms']})")
        say(
            f"  recall@10 vs legacy: auto {fig.get('recall_at_10_auto_vs_legacy')}, "
            f"post {fig.get('recall_at_10_post_vs_legacy')}"
        )
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _fill(
    writer: Memory, texts: list[str], filled: int, size: int, per_call: int, calls: int
) -> tuple[int, int]:
    """Add ``texts[filled:size]``, ``per_call`` per ``Memory.add``; return the new counters.

    Every call gets its own run id and metadata buckets, cycling, so narrowed
    searches at the largest size select known fractions of the scope.
    """
    while filled < size:
        chunk = texts[filled : min(size, filled + per_call)]
        writer.add(
            [{"role": "user", "content": t} for t in chunk],
            user_id=SEARCH_USER,
            run_id=f"run-{calls % _RUNS}",
            metadata={f"bucket{b}": calls % b for b in _BUCKETS},
            infer=False,
        )
        filled += len(chunk)
        calls += 1
    return filled, calls


def _measure_search(
    workdir: Path,
    embedder: LocalEmbedder,
    corpus: _Corpus,
    plan: _Plan,
    sizes: list[int],
    seed: int,
    echo: Echo,
) -> list[dict[str, Any]]:
    """Grow one store through ``sizes`` and measure search at each; one row per size."""
    largest = sizes[-1]
    texts, vectors, n_real = _fill_set(corpus, largest, seed)
    stand_in = PrecomputedEmbedder(embedder.model, embedder.dim)
    stand_in.add_documents(texts, vectors)
    stand_in.add_queries(corpus.questions, corpus.query_vectors)
    # The benchmark's own 100k texts and vectors are no part of the library:
    # keep the garbage collector from walking them during the measurements.
    gc.collect()
    gc.freeze()
    try:
        return _fill_and_search(
            workdir, embedder, corpus, plan, sizes, echo, stand_in, texts, n_real
        )
    finally:
        gc.unfreeze()


def _fill_and_search(
    workdir: Path,
    embedder: LocalEmbedder,
    corpus: _Corpus,
    plan: _Plan,
    sizes: list[int],
    echo: Echo,
    stand_in: PrecomputedEmbedder,
    texts: list[str],
    n_real: int,
) -> list[dict[str, Any]]:
    """The body of :func:`_measure_search`, once the benchmark's data is frozen."""
    largest = sizes[-1]
    # At least 20 fill calls at the largest size, so the per-call metadata and
    # run ids below take every value there.
    per_call = max(1, min(BULK_BATCH, largest // 20))
    path = workdir / "search.db"
    rows: list[dict[str, Any]] = []
    filled = 0
    calls = 0
    with Memory(path, embedder=stand_in) as writer:
        for size in sizes:
            echo(f"search store: filling to {size} memories ({per_call} per add call) ...")
            with _clock() as fill_time:
                filled, calls = _fill(writer, texts, filled, size, per_call, calls)
            added = size - (rows[-1]["size"] if rows else 0)
            row: dict[str, Any] = {
                "size": size,
                "real": min(size, n_real),
                "synthetic": size - min(size, n_real),
                "ingest": _throughput(added, per_call, fill_time),
            }
            disk = _disk(path)
            disk["bytes_per_memory"] = round((disk["file_bytes"] + disk["wal_bytes"]) / size, 1)
            row["disk"] = disk

            echo(f"  {size}: cold searches ...")
            # Each repeat opens the file anew, so its first search loads the scope's
            # vectors and terms from SQLite into fresh in-memory indexes.
            cold: list[_Timing] = []
            for repeat in range(plan.cold_repeats):
                mem = Memory(path, embedder=stand_in)
                rss_before = _rss_now()
                with _clock() as timing:
                    mem.search(corpus.questions[repeat], user_id=SEARCH_USER, top_k=TOP_K)
                cold.append(timing)
                rss_after = _rss_now()
                if repeat < plan.cold_repeats - 1:
                    mem.close()
            row["cold_ms"] = [_ms(t.wall) for t in cold]
            row["cold_cpu_ms"] = [_ms(t.cpu) for t in cold]
            row["cold_median_ms"] = _ms(float(np.median([t.wall for t in cold])))
            row["cold_cpu_median_ms"] = _ms(float(np.median([t.cpu for t in cold])))
            row["index_bytes"] = _index_bytes(mem.store, "user_id", SEARCH_USER)
            row["rss_growth_cold_search_bytes"] = (
                None if rss_before is None or rss_after is None else rss_after - rss_before
            )
            echo(f"  {size}: warm searches ...")
            row.update(_search_figures(mem, stand_in, embedder, corpus, plan))
            if size == largest:
                echo(f"  {size}: filtered and two-scope searches ...")
                row["narrowed"] = _narrowed_figures(mem, stand_in, corpus, plan, size)
            mem.close()
            row["rss_bytes"] = _rss_now()
            row["peak_rss_bytes"] = _peak_rss()
            echo(f"  {size}: probe process (open + first search, real embedder) ...")
            row["probe"] = _run_probe(path, SEARCH_USER, corpus.questions[0])
            rows.append(row)
    return rows


# ------------------------------------------------------------- reporting


def _targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Judge each target on the measured wall clock.

    The calling thread's CPU-time equivalent rides along: about what an idle
    machine would show (see :func:`_clock`).
    """
    storage = report["add"]["precomputed_embedder"]["batched"]
    out = [
        {
            "name": "storage add, batched (msgs/s)",
            "target": f">= {TARGETS['storage_add_batched_msgs_per_s']:g}",
            "value": storage["msgs_per_s"],
            "cpu_value": storage["cpu_msgs_per_s"],
            "met": storage["msgs_per_s"] >= TARGETS["storage_add_batched_msgs_per_s"],
        }
    ]
    at_100k = [r for r in report["search"] if r["size"] == 100_000]
    for label, key, stat, target in (
        ("search 100k no embedding p50 (ms)", "no_embed", "p50_ms", "search_100k_no_embed_p50_ms"),
        ("search 100k no embedding p95 (ms)", "no_embed", "p95_ms", "search_100k_no_embed_p95_ms"),
        ("search 100k end to end p50 (ms)", "e2e", "p50_ms", "search_100k_e2e_p50_ms"),
        ("search 100k end to end p95 (ms)", "e2e", "p95_ms", "search_100k_e2e_p95_ms"),
    ):
        value = at_100k[0][key][stat] if at_100k else None
        cpu = at_100k[0][key][f"cpu_{stat}"] if at_100k else None
        out.append(
            {
                "name": label,
                "target": f"<= {TARGETS[target]:g}",
                "value": value,
                "cpu_value": cpu,
                "met": None if value is None else value <= TARGETS[target],
            }
        )
    return out


def _table(rows: list[list[str]], header: list[str]) -> str:
    """Columns padded to width: the first left-aligned, the figures right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def _pair(fig: dict[str, Any], prefix: str = "") -> str:
    return f"{fig[prefix + 'p50_ms']:.2f} / {fig[prefix + 'p95_ms']:.2f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def format_report(report: dict[str, Any]) -> str:
    """Return the human-readable tables of a :func:`run` result."""
    machine = report["machine"]
    emb = report["embedder"]
    add = report["add"]
    lines = [
        f"engramdb perf: {machine['cpus']} CPUs, load average {machine['loadavg_start']} at "
        f"start, {machine['loadavg_end']} at end; {'quick' if report['quick'] else 'full'} run",
        "(cpu = CPU time of the calling thread: about an idle machine's wall clock, "
        "exact for single-threaded work)",
        "",
        "add(infer=False), messages/s (cpu-time equivalent in brackets)",
    ]

    def rate(fig: dict[str, Any]) -> str:
        return f"{fig['msgs_per_s']:g} ({fig['cpu_msgs_per_s']:g})"

    lines.append(
        _table(
            [
                [
                    "Memory.add, real embedder",
                    rate(add["real_embedder"]["single"]),
                    rate(add["real_embedder"]["batched"]),
                ],
                [
                    "embedder alone, sentences/s",
                    f"{emb['single']['sentences_per_s']:g}",
                    f"{emb['batch32']['sentences_per_s']:g}",
                ],
                [
                    "Memory.add, precomputed vectors",
                    rate(add["precomputed_embedder"]["single"]),
                    rate(add["precomputed_embedder"]["batched"]),
                ],
            ],
            ["", "1 per call", f"{SMALL_BATCH} per call"],
        )
    )
    lines += [
        "",
        f"query embedding alone, ms: p50 / p95 {_pair(emb['query'])}",
        "",
        f"search, one user_id scope, top_k={TOP_K}, ms p50 / p95",
    ]
    lines.append(
        _table(
            [
                [
                    f"{r['size']:,}",
                    f"{r['synthetic']:,}",
                    _pair(r["e2e"]),
                    _pair(r["no_embed"]),
                    _pair(r["no_embed"], "cpu_"),
                    _pair(r["vector_search"]),
                    f"{r['cold_median_ms']:.0f} ({r['cold_cpu_median_ms']:.0f})",
                ]
                for r in report["search"]
            ],
            [
                "memories",
                "synthetic",
                "end to end",
                "no embedding",
                "no embedding cpu",
                "vector_search",
                "cold (cpu)",
            ],
        )
    )
    lines += ["", "ingest, disk and memory"]
    rows = []
    for r in report["search"]:
        probe = r.get("probe") or {}
        rss = probe.get("rss_bytes") or {}
        rows.append(
            [
                f"{r['size']:,}",
                rate(r["ingest"]),
                f"{r['disk']['bytes_per_memory']:.0f}",
                _mb(r["index_bytes"]),
                _mb(rss.get("after_search")),
                _mb(probe.get("peak_rss_bytes")),
                _mb(r["peak_rss_bytes"]),
            ]
        )
    lines.append(
        _table(
            rows,
            [
                "memories",
                f"ingest msgs/s ({BULK_BATCH}/call)",
                "disk B/memory",
                "vector index MB",
                "app RSS MB",
                "app peak MB",
                "bench peak MB",
            ],
        )
    )
    narrowed = report["search"][-1].get("narrowed") if report["search"] else None
    if narrowed:
        lines += [
            "",
            f"narrowed searches at {report['search'][-1]['size']:,}, no embedding, ms p50 / p95",
        ]
        lines.append(
            _table(
                [
                    [name, f"{v['matching']:,}", _pair(v), _pair(v, "cpu_")]
                    for name, v in narrowed.items()
                ],
                ["", "matching", "wall", "cpu"],
            )
        )
    lines += ["", "targets"]
    lines.append(
        _table(
            [
                [
                    t["name"],
                    t["target"],
                    _num(t["value"]),
                    _num(t["cpu_value"]),
                    {True: "met", False: "MISSED", None: "n/a"}[t["met"]],
                ]
                for t in report["targets"]
            ],
            ["", "target", "wall", "cpu", ""],
        )
    )
    lines += [
        "",
        "app RSS / app peak: a separate process that loads the model, opens the store and "
        "searches once; bench peak: this process (ru_maxrss), which also holds the corpus",
        f"note: {SYNTHETIC_NOTE}",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------- run


def run(
    sizes: Sequence[int] | None = None,
    out: str | Path | None = None,
    quick: bool = False,
    *,
    data: str | Path | None = None,
    cache_dir: str | Path | None = None,
    workdir: str | Path | None = None,
    seed: int = 0,
    echo: Echo | None = print,
) -> dict[str, Any]:
    """Run the benchmark; print tables through ``echo`` and return the figures.

    Args:
        sizes: memories in the search scope; default 1k, 10k, 100k (1k, 5k
            with ``quick``). Measured in ascending order on one growing store.
        out: write the figures as JSON here too.
        quick: fewer texts, queries and repeats; for tests and smoke runs.
        data: the LoCoMo JSON file; default ``$ENGRAM_LOCOMO``.
        cache_dir: where embedded corpora are cached; default
            :func:`default_cache_dir`.
        workdir: where the SQLite files go; default a temporary directory,
            removed afterwards.
        seed: seeds the turn order and the synthetic vectors.
        echo: receives progress lines and the final tables; ``None`` is silent.

    Raises:
        FileNotFoundError: the LoCoMo file is missing, or neither ``data`` nor
            ``$ENGRAM_LOCOMO`` names one (:class:`~engramdb_bench._locomo.MissingDataError`).
        ValueError: a size is not a positive integer.
    """
    say: Echo = echo if echo is not None else (lambda _line: None)
    plan = _QUICK if quick else _FULL
    chosen = sorted(set(sizes if sizes is not None else (QUICK_SIZES if quick else DEFAULT_SIZES)))
    if not chosen or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in chosen):
        raise ValueError(f"sizes must be positive integers, got {sizes!r}")
    data_path = resolve_data_path(data)
    if not data_path.is_file():
        raise FileNotFoundError(
            f"LoCoMo file not found: {data_path}; pass data=PATH (--data) or set ENGRAM_LOCOMO"
        )
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()

    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    wall = time.perf_counter()
    embedder = LocalEmbedder(batch_size=SMALL_BATCH)
    load_started = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - load_started
    say(f"LoCoMo corpus from {data_path} (embedding cache: {cache}) ...")
    corpus = _load_corpus(data_path, embedder, cache, plan, seed)

    stages = {"corpus": round(time.perf_counter() - wall, 1)}
    with tempfile.TemporaryDirectory(prefix="engramdb-perf-") as tmp:
        base = Path(workdir).expanduser() if workdir is not None else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        mark = time.perf_counter()
        emb = _measure_embedder(embedder, corpus, plan, say)
        emb["load_s"] = round(load_s, 3)
        add = _measure_add(base, embedder, corpus, plan, say)
        stages["embedder_and_add"] = round(time.perf_counter() - mark, 1)
        mark = time.perf_counter()
        search = _measure_search(base, embedder, corpus, plan, chosen, seed, say)
        stages["search"] = round(time.perf_counter() - mark, 1)

    report: dict[str, Any] = {
        "benchmark": "engramdb_bench.perf",
        "format": 1,
        "quick": quick,
        "started_at": started_at,
        "seconds": round(time.perf_counter() - wall, 1),
        "stage_seconds": stages,
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": loadavg_start,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "sqlite": sqlite3.sqlite_version,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "data": {
            "source": str(data_path),
            "real_turns": len(corpus.turns),
            "questions": len(corpus.questions),
            "dim": int(corpus.vectors.shape[1]),
            "embed_seconds": corpus.embed_seconds,
            "synthetic": SYNTHETIC_NOTE,
        },
        "top_k": TOP_K,
        "embedder": emb,
        "add": add,
        "search": search,
        "peak_rss_bytes": _peak_rss(),
    }
    report["targets"] = _targets(report)
    say("")
    say(format_report(report))
    if out is not None:
        out_path = Path(out).expanduser()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        say(f"\nwrote {out_path}")
    return report


def run_cold(
    size: int = 100_000,
    out: str | Path | None = None,
    *,
    data: str | Path | None = None,
    cache_dir: str | Path | None = None,
    workdir: str | Path | None = None,
    repeats: int = 3,
    queries: int = 300,
    seed: int = 0,
    echo: Echo | None = print,
) -> dict[str, Any]:
    """Only the cold start at ``size``: the probe ``repeats`` times, then warm searches.

    The store is filled as the full run fills its search store (kept in
    ``workdir`` as ``cold-<size>.db`` and reused when it is there, so code
    before and after can be timed on one file). Each probe is a fresh
    process: load the model, open the store, one ``Memory.search`` (its wall
    time, RSS after it and peak RSS). Then, in this process, a freshly
    opened store's first search and ``queries`` warm searches without the
    query embedding (the stand-in embedder), p50 / p95.
    """
    say: Echo = echo if echo is not None else (lambda _line: None)
    data_path = resolve_data_path(data)
    if not data_path.is_file():
        raise FileNotFoundError(f"LoCoMo file not found: {data_path}")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    plan = dataclasses.replace(_FULL, search_queries=queries)
    embedder = LocalEmbedder(batch_size=SMALL_BATCH)
    corpus = _load_corpus(data_path, embedder, cache, plan, seed)
    texts, vectors, _ = _fill_set(corpus, size, seed)
    stand_in = PrecomputedEmbedder(embedder.model, embedder.dim)
    stand_in.add_documents(texts, vectors)
    stand_in.add_queries(corpus.questions, corpus.query_vectors)
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="engramdb-perf-") as tmp:
        base = Path(workdir).expanduser() if workdir is not None else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        path = base / f"cold-{size}.db"
        if not path.exists():
            with Memory(path, embedder=stand_in) as mem:
                say(f"filling {path} to {size} memories ...")
                _fill(mem, texts, 0, size, max(1, min(BULK_BATCH, size // 20)), 0)
        probes = []
        for repeat in range(repeats):
            say(f"probe {repeat + 1}/{repeats} (fresh process: model, open, first search) ...")
            probes.append(_run_probe(path, SEARCH_USER, corpus.questions[repeat]))
        say("a fresh store object's first search, then warm searches without the embedding ...")
        # As in the full run, where the fill came first: this process has lemmatised
        # before, so the first search pays for the store alone, not for loading the
        # lemmatiser's dictionaries (about 0.2 s of CPU, which the probes do pay).
        query_terms(corpus.questions[1])
        with Memory(path, embedder=stand_in) as mem:
            with _clock() as cold:
                mem.search(corpus.questions[-1], user_id=SEARCH_USER, top_k=TOP_K)
            questions = _cycle(corpus.questions, queries)
            warm = _timed_calls(
                lambda i: mem.search(questions[i], user_id=SEARCH_USER, top_k=TOP_K),
                len(questions),
                _FULL.warmup,
            )
    report: dict[str, Any] = {
        "benchmark": "engramdb_bench.perf cold",
        "size": size,
        "loadavg": [loadavg_start, [round(x, 2) for x in os.getloadavg()]],
        "probes": probes,
        "cold_no_embed_ms": _ms(cold.wall),
        "cold_no_embed_cpu_ms": _ms(cold.cpu),
        "warm_no_embed": _latency(warm),
    }
    for probe in probes:
        if probe and "rss_bytes" in probe:
            say(
                f"probe: first search {probe['cold_search_e2e_ms']} ms "
                f"(CPU {probe['cold_search_e2e_cpu_ms']}), RSS after it "
                f"{_mb(probe['rss_bytes'].get('after_search'))} MB, peak "
                f"{_mb(probe.get('peak_rss_bytes'))} MB"
            )
        else:
            say(f"probe failed: {probe}")
    fig = report["warm_no_embed"]
    say(
        f"first search without the embedding {report['cold_no_embed_ms']} ms; warm "
        f"p50/p95 {fig['p50_ms']}/{fig['p95_ms']} ms (CPU {fig['cpu_p50_ms']}/{fig['cpu_p95_ms']})"
    )
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m engramdb_bench.perf``."""
    parser = argparse.ArgumentParser(
        prog="python -m engramdb_bench.perf",
        description="Measure add throughput, search latency, disk and memory of engramdb.",
    )
    parser.add_argument("--sizes", help="comma-separated scope sizes (default 1000,10000,100000)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--quick", action="store_true", help="sizes 1000,5000, fewer iterations")
    parser.add_argument("--data", type=Path, help="LoCoMo JSON file (default: $ENGRAM_LOCOMO)")
    parser.add_argument("--cache-dir", type=Path, help="where embedded corpora are cached")
    parser.add_argument("--workdir", type=Path, help="keep the SQLite files here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--narrowed-only",
        action="store_true",
        help="only the filtered and two-scope searches, before/after, at the largest size",
    )
    parser.add_argument(
        "--cold-only",
        action="store_true",
        help="only the cold start at the largest size: probes, then warm searches "
        "(with --workdir the filled file is kept and reused)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="probes with --cold-only")
    # The memory probe: this module re-run in a fresh process (see _probe).
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--probe-user", default=SEARCH_USER, help=argparse.SUPPRESS)
    parser.add_argument("--probe-query", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        print(json.dumps(_probe(args.probe, args.probe_user, args.probe_query)))
        return 0
    sizes = None
    if args.sizes:
        try:
            sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        except ValueError:
            parser.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if args.cold_only:
        run_cold(
            max(sizes or DEFAULT_SIZES), args.out, data=args.data, cache_dir=args.cache_dir,
            workdir=args.workdir, repeats=args.repeats, seed=args.seed,
        )  # fmt: skip
        return 0
    if args.narrowed_only:
        run_narrowed(
            max(sizes or DEFAULT_SIZES), args.out, data=args.data, cache_dir=args.cache_dir,
            seed=args.seed,
        )  # fmt: skip
        return 0
    try:
        run(
            sizes,
            args.out,
            args.quick,
            data=args.data,
            cache_dir=args.cache_dir,
            workdir=args.workdir,
            seed=args.seed,
        )
    except (FileNotFoundError, ValueError) as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
