"""The web UI's page times: a scope of 10,000 memories, measured on the server side.

Run::

    engram bench ui [--memories 10000] [--samples 30] [--out FILE.json]

or call :func:`run`. It fills a fresh store with ``memories`` memories of one
user (``add(infer=False)``: no LLM), then asks the app for each page the way
a browser would — through the whole ASGI app (sign-in cookie, middleware,
tenancy, templates) in process, with no socket — and reports p50 and p95 per
page against the 100 ms target (issue 30). Nothing asserts a speed: the
target is reported as met or missed.

The pages: the scope list (its counts are one aggregate query of the store,
``Store.scope_counts``, cached for a few seconds: the cold figure clears the
cache before every sample, the warm one does not), the first and a deep page
of the scope's memories, a filtered page (counted by ``Store.count_memories``
up to 2,000), a text search of the list (one store query, counted up to 2,000), one
memory (text, history, timeline), a search with ``explain``, the scope's
entities (``Store.entities``: one aggregate over the scope's live memories,
nothing cached), a name search among them and one entity's memories, and the
activity log filled to its bound (100,000 rows, a quarter of them the bound
key's) as the bound key and as an admin.

Python's garbage collector is timed too (``gc.callbacks``): each page reports
the milliseconds its samples spent in collections and how many were full
(generation 2) ones, so a p95 made by a collection shows as such.

The embedder is a **benchmark-only** stand-in (:class:`HashEmbedder`: a
vector from a hash of the text), so that filling 10,000 memories does not
take the local model's minutes; the pages' work (SQL, BM25, fusion,
templates) runs for real, but a search's query embedding costs nothing here.
``docs/ui.md`` has the figures.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from engramdb.memory import AsyncMemory
from engramdb.server import KeyStore, create_app
from engramdb.server.activity import ActivityLog, Entry
from engramdb.server.runner import freeze_startup_heap
from engramdb_bench._hash_embedder import HashEmbedder
from engramdb_bench._machine import machine, machine_line

__all__ = ["TARGET_MS", "GcClock", "format_report", "run"]

TARGET_MS = 100.0
"""Each page's p95, server side, should stay under this (issue 30)."""

_TOPICS = (
    "coffee", "tea", "hiking", "Python", "Rust", "Paris", "Tokyo", "cats", "dogs", "jazz",
    "cycling", "chess", "sushi", "running", "Lisbon", "piano", "gardening", "football",
)  # fmt: skip


def _text(i: int) -> str:
    a, b = _TOPICS[i % len(_TOPICS)], _TOPICS[(i * 7 + 3) % len(_TOPICS)]
    return f"Note {i}: I enjoy {a} on weekdays and talk about {b} with friends"


async def _fill(memory: AsyncMemory, count: int, user_id: str) -> float:
    started = time.perf_counter()
    batch = 100
    for start in range(0, count, batch):
        messages = [
            {"role": "user", "content": _text(i)} for i in range(start, min(count, start + batch))
        ]
        await memory.add(
            messages,
            user_id=user_id,
            run_id=f"session-{start // 1000}",
            infer=False,
            metadata={"category": _TOPICS[(start // batch) % len(_TOPICS)], "batch": start},
        )
    return time.perf_counter() - started


class GcClock:
    """Time spent in Python's garbage collections while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        """Not counting until :meth:`install`."""
        self.seconds = 0.0
        self.full = 0
        self._started = 0.0

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._started
        if info.get("generation") == 2:
            self.full += 1

    def install(self) -> None:
        """Start counting."""
        gc.callbacks.append(self._tick)

    def remove(self) -> None:
        """Stop counting."""
        if self._tick in gc.callbacks:
            gc.callbacks.remove(self._tick)


def _figures(samples: list[float], gc_s: float = 0.0, full: int = 0) -> dict[str, Any]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "samples": len(samples),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(p95 * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "gc_ms": round(gc_s * 1000, 1),
        "gc_full": full,
        "met": p95 * 1000 < TARGET_MS,
    }


async def _measure(
    folder: Path, count: int, samples: int, echo: Callable[[str], None], freeze_heap: bool
) -> dict[str, Any]:
    keys = KeyStore(folder / "keys.db")
    key = keys.create(user_id="alice", name="bench").key
    echo(f"filling {count} memories (infer=False) ...")
    filler = AsyncMemory(folder / "e.db", embedder=HashEmbedder(64), llm=None, actor="bench")
    fill_s = await _fill(filler, count, "alice")
    await filler.close()
    admin_key = keys.create(admin=True, name="bench admin").key
    activity = ActivityLog.beside(keys.path)
    log_rows = _fill_activity(activity, keys.verify(key).id)  # type: ignore[union-attr]
    echo(f"activity log filled to {log_rows} rows")
    # The server as `engram serve` starts it: the file opened afresh, the app made,
    # the startup heap frozen (unless asked not to, to measure what that does).
    memory = AsyncMemory(folder / "e.db", embedder=HashEmbedder(64), llm=None, actor="bench")
    app = create_app(memory, keys=keys, activity=activity)
    if freeze_heap:
        freeze_startup_heap()
    ui = app.state.ui
    transport = httpx.ASGITransport(app=app)
    pages: dict[str, Any] = {}
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://bench") as client,
        httpx.AsyncClient(transport=transport, base_url="http://bench") as admin,
    ):
        for who, secret in ((client, key), (admin, admin_key)):
            form = (await who.get("/ui/signin")).text
            csrf = re.search(r'name="csrf" value="([^"]+)"', form)
            assert csrf is not None
            await who.post("/ui/signin", data={"csrf": csrf.group(1), "key": secret})
        listing = (await client.get("/ui/memories")).text
        found = re.search(r"/ui/memory/([0-9a-f-]{36})", listing)
        assert found is not None, "the memories page shows no memory"
        memory_id = found.group(1)
        entities = (await client.get("/ui/entities")).text
        named = re.search(r'/ui/entity\?[^"]*name=([^"&]+)', entities)
        assert named is not None, "the entities page shows no entity"
        deep = max(1, count // 50 - 1)
        plan: list[tuple[str, str, str]] = [
            ("scopes (counts, cold)", "/ui/scopes", "catalog"),
            ("scopes (counts, cached)", "/ui/scopes", ""),
            ("overview (cached)", "/ui/overview", ""),
            ("memories, page 1", "/ui/memories", ""),
            (f"memories, page {deep}", f"/ui/memories?page={deep}", ""),
            ("memories, filtered", "/ui/memories?fk=category&fv=jazz", ""),
            ("memories, text search", "/ui/memories?text=jazz", ""),
            ("memory (history, timeline)", f"/ui/memory/{memory_id}", ""),
            ("search (explain)", "/ui/search?q=weekend+jazz+with+friends", ""),
            ("fragment: search", "/ui/fragments/search?q=coffee+in+Lisbon", ""),
            ("entities", "/ui/entities", ""),
            ("entities, name search", "/ui/entities?q=o&type=PLACE", ""),
            ("entity (its memories)", f"/ui/entity?name={named.group(1)}", ""),
            ("entity, a deep page", f"/ui/entity?name={named.group(1)}&page=100", ""),
            ("activity (bound key)", "/ui/activity", ""),
            ("activity, 4xx (bound key)", "/ui/activity?status=4xx", ""),
            ("activity (admin, all rows)", "/ui/activity", "admin"),
            ("activity, no match (admin)", "/ui/activity?op=search&user_id=nobody", "admin"),
        ]
        clock = GcClock()
        clock.install()
        try:
            for name, path, how in plan:
                who = admin if how == "admin" else client
                times = []
                await who.get(path)  # warm-up (vector index loaded, templates compiled)
                gc_before, full_before = clock.seconds, clock.full
                for _ in range(samples):
                    if how == "catalog":
                        ui._forget_catalog()
                    started = time.perf_counter()
                    response = await who.get(path)
                    times.append(time.perf_counter() - started)
                    if response.status_code != 200:
                        raise RuntimeError(f"{path} answered {response.status_code}")
                spent, full = clock.seconds - gc_before, clock.full - full_before
                pages[name] = {"path": path, **_figures(times, spent, full)}
                fig = pages[name]
                echo(
                    f"  {name}: p50 {fig['p50_ms']} ms, p95 {fig['p95_ms']} ms "
                    f"(gc {fig['gc_ms']} ms, {full} full)"
                )
        finally:
            clock.remove()
    await memory.close()
    activity.close()
    keys.close()
    if freeze_heap:
        gc.unfreeze()
    return {
        "fill_s": round(fill_s, 2),
        "activity_rows": log_rows,
        "gc_frozen": freeze_heap,
        "pages": pages,
    }


def _fill_activity(log: ActivityLog, key_id: str) -> int:
    """Fill the log to its bound: a quarter the bench key's rows, the rest other keys'."""
    faces = ("rest", "mem0", "mcp", "ui")
    ops = ("add", "search", "get", "list", "update", "delete")
    for i in range(log.max_rows):
        mine = i % 4 == 0
        entry = Entry(
            face=faces[i % 4],
            key_id=key_id if mine else f"{i % 97:08x}",
            operation=ops[i % len(ops)],
            scope={"user_id": "alice" if mine else f"user{i % 500}"},
            target=f"m{i}",
        )
        log.record(entry, 404 if i % 50 == 0 else 200)
        if i % 5000 == 4999:
            log.flush()
    log.flush()
    return log.size()


def run(
    memories: int = 10_000,
    samples: int = 30,
    out: Path | None = None,
    echo: Callable[[str], None] = print,
    freeze_heap: bool = True,
) -> dict[str, Any]:
    """Fill a store and time the UI's pages; returns (and with ``out`` writes) the report.

    ``freeze_heap``: freeze the heap once the app is made, as ``engram serve``
    does (:func:`engramdb.server.runner.freeze_startup_heap`); off, to measure
    what that changes.
    """
    if memories < 100:
        raise ValueError("--memories must be at least 100")
    if samples < 1:
        raise ValueError("--samples must be at least 1")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="engram-bench-ui-") as folder:
        measured = asyncio.run(_measure(Path(folder), memories, samples, echo, freeze_heap))
    report = {
        "benchmark": "ui",
        "memories": memories,
        "samples": samples,
        "target_ms": TARGET_MS,
        "embedder": "HashEmbedder (benchmark-only stand-in; no model)",
        "machine": machine(load_start),
        **measured,
        "target_met": all(p["met"] for p in measured["pages"].values()),
    }
    if out is not None:
        out.write_text(json.dumps(report, indent=2))
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as a table: one line per page, p50 / p95 / max against the target."""
    lines = [
        f"Web UI page times, server side: one scope of {report['memories']} memories, "
        f"{report['samples']} samples per page (filled in {report['fill_s']} s)",
        "",
        f"{'page':<30} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'gc ms':>7} {'full':>4}"
        f"  < {report['target_ms']:.0f} ms",
    ]
    for name, fig in report["pages"].items():
        mark = "yes" if fig["met"] else "NO"
        lines.append(
            f"{name:<30} {fig['p50_ms']:>8.1f} {fig['p95_ms']:>8.1f} {fig['max_ms']:>8.1f} "
            f"{fig.get('gc_ms', 0.0):>7.1f} {fig.get('gc_full', 0):>4}  {mark}"
        )
    lines.append("")
    if "gc_frozen" in report:
        frozen = "frozen after startup" if report["gc_frozen"] else "not frozen"
        lines.append(f"heap {frozen} (gc ms: time in collections over all samples)")
    lines.append(machine_line(report["machine"]))
    lines.append("target met" if report["target_met"] else "target MISSED on some page")
    return "\n".join(lines)
