"""The serving benchmark: requests/s and latency of the REST API under concurrent clients.

Run ``engram bench serve`` (or call :func:`run`). It starts ``engram serve`` in
a subprocess on a free loopback port with a temporary database and key
file, seeds one scope with memories, then for each concurrency level (1, 8
and 32 clients by default) sends a bounded number of ``POST /search`` and
``POST /memories`` (``infer=False``: one new message each, so every add
embeds and writes) requests with an API key bound to that scope. Clients
are asyncio tasks sharing one ``httpx.AsyncClient`` per level, in this
process; the server is another process, so on a small machine the two
compete for the same cores — the figures are end to end, client included.

Nothing is asserted: it prints a table and returns (and optionally writes)
one JSON-able dict.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from engramdb import __version__
from engramdb_bench._machine import machine, machine_line
from engramdb_bench._serving import free_port

__all__ = ["DEFAULT_CONCURRENCY", "print_report", "run"]

DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 8, 32)

_QUERIES = (
    "what does the user drink in the morning?",
    "is the user allergic to anything?",
    "tell me about the user's pets",
    "where is the user travelling?",
    "what is the user's job?",
    "family events coming up",
    "what hobbies does the user have?",
    "who is visiting soon?",
    "favourite food",
    "what changed at work?",
)


def _seed_texts(count: int) -> list[str]:
    """Realistic-looking distinct sentences: the demo conversation, varied."""
    source = resources.files("engramdb").joinpath("data/demo_conversation.json")
    data = json.loads(source.read_text(encoding="utf-8"))
    base = [m["content"] for s in data["sessions"] for m in s["messages"] if m["role"] == "user"]
    return [f"{base[i % len(base)]} (note {i})" for i in range(count)]


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _phase(
    base_url: str,
    headers: dict[str, str],
    concurrency: int,
    total: int,
    make: Any,
) -> dict[str, Any]:
    """Send ``total`` requests from ``concurrency`` clients; time each one."""
    latencies: list[float] = []
    errors = 0
    counter = iter(range(total))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=120
    ) as client:

        async def worker() -> None:
            nonlocal errors
            for i in counter:
                method, path, body = make(i)
                started = time.perf_counter()
                response = await client.request(method, path, json=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "errors": errors,
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(latencies) / wall, 1) if wall > 0 else None,
        "p50_ms": round(1000 * _percentile(latencies, 0.50), 1),
        "p95_ms": round(1000 * _percentile(latencies, 0.95), 1),
    }


def _wait_healthy(base_url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"engram serve exited with status {process.returncode}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"engram serve did not answer /healthz within {timeout:.0f} s")


async def _measure(
    base_url: str,
    headers: dict[str, str],
    concurrency: Sequence[int],
    requests: int,
    seed: int,
) -> dict[str, Any]:
    texts = _seed_texts(seed)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120) as client:
        started = time.perf_counter()
        for i in range(0, len(texts), 25):
            batch = [{"role": "user", "content": t} for t in texts[i : i + 25]]
            r = await client.post("/memories", json={"messages": batch, "infer": False})
            r.raise_for_status()
        seeded_s = time.perf_counter() - started
        for query in _QUERIES:  # warm the scope's vector cache and the model
            (await client.post("/search", json={"query": query, "top_k": 10})).raise_for_status()
    search: list[dict[str, Any]] = []
    add: list[dict[str, Any]] = []
    stamp = int(time.time())
    for level, c in enumerate(concurrency):
        search.append(
            await _phase(
                base_url,
                headers,
                c,
                requests,
                lambda i: ("POST", "/search", {"query": _QUERIES[i % len(_QUERIES)], "top_k": 10}),
            )
        )
        add.append(
            await _phase(
                base_url,
                headers,
                c,
                requests,
                lambda i, level=level: (
                    "POST",
                    "/memories",
                    {
                        "messages": f"Benchmark note {stamp}-{level}-{i}: "
                        f"{_QUERIES[i % len(_QUERIES)]}",
                        "infer": False,
                    },
                ),
            )
        )
    return {"seed_memories": seed, "seed_s": round(seeded_s, 2), "search": search, "add": add}


def run(
    *,
    requests: int = 200,
    concurrency: Sequence[int] = DEFAULT_CONCURRENCY,
    engine: str = "async",
    seed: int = 500,
    out: Path | None = None,
    startup_timeout: float = 120.0,
    config_file: Path | None = None,
) -> dict[str, Any]:
    """Start a server, load it, and return the figures (written to ``out`` as JSON too).

    ``config_file`` (``engram --config``) is handed to the server, e.g. to
    measure another embedder; its database path is overridden by the
    temporary one.
    """
    from engramdb.server.keys import KeyStore

    if requests < 1 or seed < 1 or not concurrency or min(concurrency) < 1:
        raise ValueError("requests, seed and every concurrency level must be at least 1")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="engram-bench-serve-") as tmp:
        keys = KeyStore(Path(tmp) / "keys.db")
        key = keys.create(user_id="bench", name="bench serve").key
        keys.close()
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        command = [
            sys.executable,
            "-m",
            "engramdb.cli",
            *(["--config", str(config_file)] if config_file is not None else []),
            "--db",
            str(Path(tmp) / "engram.db"),
            "serve",
            "--port",
            str(port),
            "--keys-db",
            str(Path(tmp) / "keys.db"),
            "--engine",
            engine,
            "--log-level",
            "warning",
        ]
        env = {**os.environ, "ENGRAM_LLM": ""}
        log = (Path(tmp) / "server.log").open("wb")
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            try:
                _wait_healthy(base_url, process, startup_timeout)
            except RuntimeError as exc:
                tail = (Path(tmp) / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{exc}; its log ends:\n{tail}") from None
            figures = asyncio.run(
                _measure(base_url, {"X-API-Key": key}, concurrency, requests, seed)
            )
        finally:
            log.close()
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    result: dict[str, Any] = {
        "benchmark": "engramdb_bench.serve",
        "version": __version__,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        # Other work on the machine shares the cores with server and clients.
        "machine": machine(load_start),
        "engine": engine,
        "requests_per_level": requests,
        **figures,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def print_report(result: dict[str, Any]) -> None:
    """Print the figures as one table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"engram serve ({result['engine']} engine), {result['requests_per_level']} requests "
            f"per level, scope of {result['seed_memories']}+ memories"
        ),
        title_justify="left",
    )
    for column in ("operation", "clients", "requests/s", "p50 ms", "p95 ms", "errors"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for op, label in (("search", "search"), ("add", "add (infer=False)")):
        for row in result[op]:
            table.add_row(
                label,
                str(row["concurrency"]),
                f"{row['requests_per_s']:.1f}",
                f"{row['p50_ms']:.1f}",
                f"{row['p95_ms']:.1f}",
                str(row["errors"]),
            )
    Console(highlight=False).print(table)
    Console(highlight=False, stderr=True).print(machine_line(result["machine"]))
