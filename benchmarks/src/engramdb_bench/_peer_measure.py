"""What both sides of ``engram bench compare`` measure, and how: one copy for both workers.

Standard library only, and not imported through the ``engramdb`` package: the
mem0 worker runs where engramdb is not installed, and the engramdb worker
must not import engramdb before its start-up clock starts. Each worker loads
this file by path with :func:`load` (a copy of four lines in each worker).
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from typing import Any

__all__ = ["finish", "rss_mb", "run_workload", "summary", "timed"]


def rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def summary(times_ms: list[float]) -> dict[str, float | None]:
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


def timed(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """``call(*args, **kwargs)``, its wall time and its process CPU time, in ms."""
    cpu0 = time.process_time_ns()
    t0 = time.perf_counter_ns()
    result = call(*args, **kwargs)
    t1 = time.perf_counter_ns()
    cpu1 = time.process_time_ns()
    return result, (t1 - t0) / 1e6, (cpu1 - cpu0) / 1e6


def run_workload(memory: Any, workload: dict[str, Any], top_k: int) -> dict[str, Any]:
    """Add every message, then search every question; the figures of both phases."""
    add_ms: list[float] = []
    add_cpu: list[float] = []
    stored = 0
    record = bool(workload.get("record_hits"))
    added_ids: list[list[str]] = []
    hit_ids: list[list[list[Any]]] = []
    for msg in workload["messages"]:
        message = {"role": msg["role"], "content": msg["content"], "name": msg["name"]}
        result, wall, cpu = timed(memory.add, [message], user_id=msg["user_id"], infer=False)
        stored += sum(1 for r in result.get("results", []) if r.get("event") == "ADD")
        if record:
            added_ids.append([str(r["id"]) for r in result.get("results", []) if "id" in r])
        add_ms.append(wall)
        add_cpu.append(cpu)
    rss_added = rss_mb()
    search_ms: list[float] = []
    search_cpu: list[float] = []
    hits = 0
    for q in workload["questions"]:
        result, wall, cpu = timed(
            memory.search, q["query"], filters={"user_id": q["user_id"]}, top_k=top_k
        )
        hits += len(result.get("results", []))
        if record:
            hit_ids.append(
                [[str(r["id"]), float(r.get("score") or 0.0)] for r in result.get("results", [])]
            )
        search_ms.append(wall)
        search_cpu.append(cpu)
    add = summary(add_ms[1:])
    search = summary(search_ms[1:])
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
        # ``record_hits``: what each add stored and each search found (retrieval quality).
        **({"added_ids": added_ids, "hit_ids": hit_ids} if record else {}),
    }


def finish(
    report: dict[str, Any],
    *,
    clock_ns: tuple[int, int, int],
    rss_ready_mb: float,
    **about: Any,
) -> dict[str, Any]:
    """Complete a worker's report with its start-up and memory figures; returns it.

    ``clock_ns`` is ``perf_counter_ns`` before the library's import, after it,
    and after the memory was constructed; ``about`` adds ``side``, ``library``,
    ``settings`` and ``python``. Start-up is import + construction; ``ready_ms``
    adds the first add (engramdb loads its model there, mem0 at construction).
    """
    t0, t1, t2 = clock_ns
    report.update(
        about,
        import_ms=round((t1 - t0) / 1e6, 1),
        construct_ms=round((t2 - t1) / 1e6, 1),
        startup_ms=round((t2 - t0) / 1e6, 1),
        rss_ready_mb=rss_ready_mb,
    )
    report["ready_ms"] = round(report["startup_ms"] + report["first_add_ms"], 1)
    report["peak_rss_mb"] = rss_mb()
    return report
