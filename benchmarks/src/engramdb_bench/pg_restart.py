"""``engram bench pg-restart``: PostgreSQL stopped under REST load, and what clients saw.

An embedded PostgreSQL server (durable: fsync on), the REST server as ``engram
serve`` runs it (``create_app`` over an :class:`~engramdb.AsyncMemory`, or a
:class:`~engramdb.Memory` with ``engine="sync"``, served by uvicorn in a
thread), and 8 HTTP clients that add and search without pause, each as its own
user. PostgreSQL is stopped (``pg_ctl stop -m fast``, then ``-m immediate``)
for 5 s and started again, while a prober asks ``/readyz`` every 0.1 s. Then:

- **failures after it is back**: requests sent once ``pg_ctl start`` returned
  (the server accepts connections) that did not answer 2xx; must be 0;
- **every 2xx add stored exactly once**: each add's text is unique, and is
  counted in the database afterwards; an add answered 503 must be stored
  0 times (the error promises nothing was done);
- **/readyz**: every answer while the server was down is 503 (with
  ``Retry-After``), and how long after the restart it answered 200 again;
- **the longest wait** of any request; must be at most the store's
  ``unavailable_timeout`` + 1 s.

The embedder is :class:`HashEmbedder` (no model, no meaning): what is
measured is the store and the server, not embedding.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engramdb_bench._hash_embedder import HashEmbedder
from engramdb_bench._machine import machine, machine_line

__all__ = ["format_report", "run"]

MODES = ("fast", "immediate")


@dataclass
class _Call:
    """One request: who sent it, what, when (seconds from the run's start), what came back."""

    client: int
    kind: str
    start: float
    end: float = 0.0
    status: int = 0
    code: str = ""
    text: str = ""
    retry_after: str | None = None


@dataclass
class _Timeline:
    """The moments of one outage, in seconds from the run's start."""

    stop_sent: float = 0.0
    stopped: float = 0.0
    start_sent: float = 0.0
    back: float = 0.0
    readyz: list[tuple[float, float, int, str | None]] = field(default_factory=list)


class _Load:
    """8 clients adding and searching without pause, and a /readyz prober."""

    def __init__(self, url: str, clients: int, origin: float, tag: str) -> None:
        self.url = url
        self.tag = tag
        self.clients = clients
        self.origin = origin
        self.calls: list[_Call] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.readyz: list[tuple[float, float, int, str | None]] = []
        """Each /readyz probe: sent, answered, status, Retry-After."""
        self.threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)
        ]
        self.threads.append(threading.Thread(target=self._prober, daemon=True))

    def now(self) -> float:
        """Seconds since the run's start."""
        return time.monotonic() - self.origin

    def start(self) -> None:
        """Start the clients and the prober."""
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        """Stop sending and wait for the answers in flight."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def _client(self, i: int) -> None:
        user = f"{self.tag}-client-{i}"  # each outage's texts are its own
        n = 0
        with httpx.Client(base_url=self.url, timeout=120) as client:
            while not self.stop.is_set():
                n += 1
                if n % 2:
                    text = f"{self.tag} client {i} note {n}: the garden needs water on day {n}"
                    call = _Call(i, "add", self.now(), text=text)
                    body: dict[str, Any] = {"messages": text, "user_id": user, "infer": False}
                    path = "/memories"
                else:
                    call = _Call(i, "search", self.now())
                    body = {"query": f"garden water day {n - 1}", "user_id": user, "top_k": 5}
                    path = "/search"
                try:
                    response = client.post(path, json=body)
                    call.status = response.status_code
                    call.retry_after = response.headers.get("Retry-After")
                    if response.status_code >= 400:
                        call.code = str(response.json().get("error", {}).get("code", ""))
                except (httpx.HTTPError, ValueError) as exc:
                    call.code = f"transport: {type(exc).__name__}"
                call.end = self.now()
                with self.lock:
                    self.calls.append(call)

    def _prober(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                at = self.now()
                try:
                    response = client.get("/readyz")
                    status, retry = response.status_code, response.headers.get("Retry-After")
                except httpx.HTTPError:
                    status, retry = 0, None
                self.readyz.append((at, self.now(), status, retry))
                time.sleep(0.1)


def _stored(url: str, schema: str) -> dict[str, int]:
    """How many live memories hold each text, in the benchmark's schema."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute(
            f'SELECT text, count(*) FROM "{schema}".memories WHERE deleted_at IS NULL GROUP BY text'
        ).fetchall()
    return {str(text): int(count) for text, count in rows}


def _outage(
    mode: str,
    url: str,
    server: Any,
    clients: int,
    outage_s: float,
    settle_s: float,
    after_s: float,
    echo: Callable[[str], None],
) -> tuple[list[_Call], _Timeline]:
    origin = time.monotonic()
    load = _Load(url, clients, origin, mode)
    timeline = _Timeline()
    load.start()
    time.sleep(settle_s)
    echo(f"  {mode}: stopping PostgreSQL under load ...")
    timeline.stop_sent = load.now()
    server.pause(mode)
    timeline.stopped = load.now()
    time.sleep(outage_s)
    timeline.start_sent = load.now()
    server.resume()
    timeline.back = load.now()
    echo(f"  {mode}: PostgreSQL is back after {timeline.back - timeline.stop_sent:.1f} s")
    time.sleep(after_s)
    load.finish()
    timeline.readyz = load.readyz
    return load.calls, timeline


def _figures(
    calls: list[_Call], timeline: _Timeline, stored: dict[str, int], patience: float
) -> dict[str, Any]:
    ok = [c for c in calls if 200 <= c.status < 300]
    after = [c for c in calls if c.start >= timeline.back]
    failed_after = [c for c in after if not 200 <= c.status < 300]
    during = [c for c in calls if c.start < timeline.back and c.end > timeline.stop_sent]
    codes: dict[str, int] = {}
    for c in calls:
        if not 200 <= c.status < 300:
            key = f"{c.status} {c.code}".strip()
            codes[key] = codes.get(key, 0) + 1
    adds_ok = [c for c in ok if c.kind == "add"]
    adds_503 = [c for c in calls if c.kind == "add" and c.status == 503]
    adds_other = [c for c in calls if c.kind == "add" and c.status >= 400 and c.status != 503]
    not_once = [c.text for c in adds_ok if stored.get(c.text, 0) != 1]
    stored_503 = [c.text for c in adds_503 if stored.get(c.text, 0) != 0]
    waits = [c.end - c.start for c in calls]
    longest = max(waits) if waits else 0.0
    # Probes sent once the server had stopped and answered before it was being started.
    down = [r for r in timeline.readyz if r[0] >= timeline.stopped and r[1] < timeline.start_sent]
    readyz_back = next(
        (r[1] for r in timeline.readyz if r[0] >= timeline.back and r[2] == 200), None
    )
    first_ok = next(
        (c.end for c in sorted(after, key=lambda c: c.end) if 200 <= c.status < 300), None
    )
    unavailable = [c for c in calls if c.status == 503]
    return {
        "requests": len(calls),
        "requests_2xx": len(ok),
        "answers_not_2xx": codes,
        "stop_s": round(timeline.stopped - timeline.stop_sent, 2),
        "down_s": round(timeline.back - timeline.stop_sent, 2),
        "start_s": round(timeline.back - timeline.start_sent, 2),
        "requests_during_outage": len(during),
        "requests_after_back": len(after),
        "failures_after_back": len(failed_after),
        "failures_after_back_codes": sorted({f"{c.status} {c.code}".strip() for c in failed_after}),
        "first_2xx_after_back_s": None if first_ok is None else round(first_ok - timeline.back, 3),
        "adds_2xx": len(adds_ok),
        "adds_2xx_not_stored_once": len(not_once),
        "adds_503": len(adds_503),
        "adds_503_stored": len(stored_503),
        "adds_other_errors": len(adds_other),
        "readyz_probes_while_down": len(down),
        "readyz_503_while_down": sum(1 for r in down if r[2] == 503),
        "readyz_retry_after": sorted({r[3] for r in down if r[3] is not None}),
        "readyz_200_after_back_s": None
        if readyz_back is None
        else round(readyz_back - timeline.back, 3),
        "answers_503_with_retry_after": sum(1 for c in unavailable if c.retry_after),
        "answers_503": len(unavailable),
        "longest_wait_s": round(longest, 3),
        "longest_wait_limit_s": patience + 1.0,
        "met": (
            not failed_after
            and not not_once
            and not stored_503
            and bool(down)
            and all(r[2] == 503 for r in down)
            and longest <= patience + 1.0
        ),
    }


def run(
    *,
    clients: int = 8,
    outage_s: float = 5.0,
    modes: tuple[str, ...] = MODES,
    patience: float = 5.0,
    engine: str = "async",
    settle_s: float = 2.0,
    after_s: float = 5.0,
    out: Path | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Stop PostgreSQL under REST load in each mode; returns (and with ``out`` writes) the report.

    ``patience`` is the store's ``unavailable_timeout``; ``settle_s`` and
    ``after_s`` the seconds of load before the stop and after the restart.
    """
    if clients < 1:
        raise ValueError("--clients must be at least 1")
    if outage_s <= 0 or patience <= 0:
        raise ValueError("--outage and --deadline must be positive seconds")
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        raise ValueError(f"--modes takes {', '.join(MODES)} (got {', '.join(unknown) or 'none'})")
    if engine not in ("async", "sync"):
        raise ValueError("--engine is async or sync")
    from engramdb import AsyncMemory, Memory
    from engramdb.server import create_app
    from engramdb_bench._pg import drop_schema, new_schema, start
    from engramdb_bench._serving import live

    load_start = os.getloadavg()
    echo("Starting an embedded PostgreSQL server (durable) ...")
    server = start(None, durable=True, prefix="engram-pg-restart-")
    schema = new_schema("restart")
    results: dict[str, Any] = {}
    try:
        section = {
            "provider": "postgres",
            "config": {
                "url": server.url,
                "collection_name": schema,
                "unavailable_timeout": patience,
            },
        }
        cls = AsyncMemory if engine == "async" else Memory
        memory = cls(config={"vector_store": section}, embedder=HashEmbedder(), llm=None)
        with live(create_app(memory, close_memory=True)) as app:
            for mode in modes:
                calls, timeline = _outage(
                    mode, app.url, server, clients, outage_s, settle_s, after_s, echo
                )
                results[mode] = _figures(calls, timeline, _stored(server.url, schema), patience)
    finally:
        drop_schema(server.url, schema)
        server.stop()
    report = {
        "benchmark": "pg-restart",
        "clients": clients,
        "outage_s": outage_s,
        "unavailable_timeout_s": patience,
        "engine": engine,
        "pool": {"min_size": 1, "max_size": 10},
        "embedder": "HashEmbedder (benchmark-only stand-in; no model)",
        "machine": machine(load_start),
        "modes": results,
        "met": all(r["met"] for r in results.values()),
    }
    if out is not None:
        out.write_text(json.dumps(report, indent=2))
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as lines: one block per stop mode, each target marked."""
    lines = [
        f"PostgreSQL stopped for {report['outage_s']:g} s under REST load: {report['clients']} "
        f"clients adding and searching, engine {report['engine']}, unavailable_timeout "
        f"{report['unavailable_timeout_s']:g} s",
        "",
    ]
    for mode, r in report["modes"].items():
        mark = "met" if r["met"] else "MISSED"
        lines += [
            f"{mode} stop ({mark}): stop took {r['stop_s']} s, down {r['down_s']} s, "
            f"start {r['start_s']} s",
            f"  requests {r['requests']} ({r['requests_2xx']} 2xx); during the outage "
            f"{r['requests_during_outage']}, after it was back {r['requests_after_back']}",
            f"  failures after it was back: {r['failures_after_back']} (target 0); first 2xx "
            f"{r['first_2xx_after_back_s']} s after",
            f"  adds 2xx {r['adds_2xx']}, not stored exactly once {r['adds_2xx_not_stored_once']} "
            f"(target 0); adds 503 {r['adds_503']}, of them stored {r['adds_503_stored']} "
            f"(target 0)",
            f"  /readyz while down: {r['readyz_503_while_down']} of "
            f"{r['readyz_probes_while_down']} probes 503 (Retry-After "
            f"{', '.join(r['readyz_retry_after']) or '-'}); 200 again "
            f"{r['readyz_200_after_back_s']} s after the restart",
            f"  answers not 2xx: {r['answers_not_2xx'] or 'none'}; 503 with Retry-After "
            f"{r['answers_503_with_retry_after']} of {r['answers_503']}",
            f"  longest wait of any request {r['longest_wait_s']} s (limit "
            f"{r['longest_wait_limit_s']:g} s)",
            "",
        ]
    lines.append(machine_line(report["machine"]))
    lines.append("all targets met" if report["met"] else "some target MISSED")
    return "\n".join(lines)
