"""The extraction pipeline benchmark: what one ``add(infer=True)`` costs, and concurrency.

Run::

    python -m engramdb_bench.pipeline [--adds 120] [--out FILE.json] [--quick] [--profile]
    engram bench pipeline ...

or call :func:`run`. It prints tables and returns (and optionally writes) one
JSON-able dict. Nothing here asserts a speed; the target is reported as met
or missed.

**Per add, with a zero-latency LLM** (additive and consolidate modes). The
LLM answers instantly, so what is left is engramdb's own cost. Two such LLMs:

- ``wire``: a real HTTP server on 127.0.0.1 speaking the OpenAI wire format
  (:mod:`engramdb_bench._wire`), reached through the real
  ``OpenAICompatibleLLM`` (httpx, JSON encoding, response parsing). Its
  ``usage`` is made up as characters/4 of the messages sent and of the reply.
- ``scripted``: the in-process :class:`~engramdb.llms.ScriptedLLM` (no
  socket; usage faked the same way).

Every effect of the flow is timed where it is performed, so each add's wall
time splits into:

- ``llm``: inside LLM calls (client, loopback HTTP and the server's own work
  for ``wire``; almost nothing for ``scripted``);
- ``embed``: inside the local embedding model (the query embedding of the new
  messages for the related-memories search, the new memories' vectors, and in
  consolidate mode one query embedding per fact);
- ``store``: inside SQLite store calls (context reads, candidate search, the
  write transaction);
- ``code``: everything else: validation, prompt building, reply parsing, id
  mapping, lemmatising and entity extraction, fusion.

**The pipeline's own time** is ``own = total - llm - embed`` (store + code):
what engramdb adds on top of the two models. The target is ``own`` ≤ 15 ms
(median, ``wire``).

Input: LoCoMo dev conversations (``--data FILE``, else ``$ENGRAM_LOCOMO``),
5 turns per add, each conversation one ``user_id`` and each session one
``run_id`` with its session date as ``timestamp``, so the store grows and the
context (recent messages, recent memories, related memories by hybrid
search) is what a real conversation would show. The scripted replies are 1-3
facts per add: LoCoMo's ``observation`` facts of those turns (written by an
LLM for the dataset), else the first turn as a fact. The first ``warmup`` adds
are not counted.

**Concurrency**: N concurrent ``AsyncMemory.add()`` calls (distinct users)
against the same server answering after ``delay`` seconds (0.5 s): wall time,
beside the N x calls x delay a sequential client would need. Two inputs: one
short sentence per add (the LLM wait dominates), and 5 LoCoMo turns per add
(then the local model, which serves one call at a time, weighs in: the new
messages are embedded for the related-memories search before the LLM call and
the new memories after it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engramdb._engine import Complete, Effect, EmbedDocuments, EmbedQuery, StoreCall
from engramdb.embedders import Embedder, LocalEmbedder
from engramdb.llms import OpenAICompatibleLLM, ScriptedLLM, make_llm
from engramdb.memory import AsyncMemory, Memory
from engramdb_bench._locomo import (
    MISSING_DATA,
    Conversation,
    Turn,
    default_data_path,
    load_conversations,
)
from engramdb_bench._locomo import data_path as resolve_data_path
from engramdb_bench._wire import RecordedRequest, Reply, WireServer

__all__ = ["TARGET_OWN_MS", "format_report", "main", "run"]

Echo = Callable[[str], None]

TARGET_OWN_MS = 15.0
"""Target for the pipeline's own time per add (median, wire LLM)."""

MODES = ("additive", "consolidate")
LLM_KINDS = ("wire", "scripted")
DEFAULT_CONCURRENCY = (1, 5, 20, 50)
CONCURRENCY_INPUTS = ("short", "locomo")
"""One short sentence per add (the LLM wait dominates), and 5 LoCoMo turns per add
(the embedding of the new messages for the related-memories search weighs in)."""
TURNS_PER_ADD = 5
MAX_FACTS = 3


# ------------------------------------------------------------------------ input


@dataclass(frozen=True)
class Chunk:
    """One add(): a few consecutive turns of a session, and the facts to reply with."""

    user_id: str
    run_id: str
    timestamp: datetime | None
    messages: list[dict[str, Any]]
    facts: list[tuple[str, str]]
    """``(attributed_to, text)``: what the zero-latency LLM answers."""


def _facts(conv: Conversation, turns: Sequence[Turn]) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for turn in turns:
        for speaker, fact in conv.observations.get(turn.dia_id, ()):
            if fact not in seen:
                seen.add(fact)
                out.append((conv.role(speaker), fact))
    if not out and turns:
        first = turns[0]
        out.append((conv.role(first.speaker), f"{first.speaker} said: {first.text}"))
    return out[:MAX_FACTS]


def chunks(convs: Sequence[Conversation], turns_per_add: int = TURNS_PER_ADD) -> Iterator[Chunk]:
    """The adds of a replay: conversation by conversation, session by session."""
    for conv in convs:
        for session in conv.sessions:
            for start in range(0, len(session.turns), turns_per_add):
                part = session.turns[start : start + turns_per_add]
                yield Chunk(
                    user_id=conv.sample_id,
                    run_id=f"{conv.sample_id}/session_{session.number}",
                    timestamp=session.date,
                    messages=conv.messages(part),
                    facts=_facts(conv, part),
                )


def _additive_reply(chunk: Chunk, link: bool) -> dict[str, Any]:
    return {
        "memory": [
            {
                "text": text,
                "attributed_to": who,
                # Now and then a link to a known memory, so the id mapping runs.
                "linked_memory_ids": ["0"] if link and i == 0 else [],
            }
            for i, (who, text) in enumerate(chunk.facts)
        ]
    }


def _facts_reply(chunk: Chunk) -> dict[str, Any]:
    return {"facts": [text for _, text in chunk.facts]}


def _update_reply(chunk: Chunk) -> dict[str, Any]:
    return {"memory": [{"event": "ADD", "text": text} for _, text in chunk.facts]}


def _replies(chunk: Chunk, mode: str, index: int) -> list[dict[str, Any]]:
    if mode == "consolidate":
        return [_facts_reply(chunk), _update_reply(chunk)]
    return [_additive_reply(chunk, link=index % 4 == 3)]


# ----------------------------------------------------------------- timed faces


class _TimedMemory(Memory):
    """``Memory`` that adds up the seconds spent performing each kind of effect.

    Wall seconds go to ``spent[kind]``, this thread's CPU seconds to
    ``spent[kind + "_cpu"]``.
    """

    spent: dict[str, float]

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Complete):
            kind = "llm"
        elif isinstance(effect, EmbedDocuments | EmbedQuery):
            kind = "embed"
        elif isinstance(effect, StoreCall):
            kind = "store"
        else:
            kind = "code"
        started = time.perf_counter()
        cpu = time.thread_time()
        try:
            return super()._perform(effect)
        finally:
            spent = self.spent
            spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - started
            spent[kind + "_cpu"] = spent.get(kind + "_cpu", 0.0) + time.thread_time() - cpu


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "mean": round(statistics.fmean(ordered), 3),
        "p50": round(statistics.median(ordered), 3),
        "p95": round(p95, 3),
        "max": round(ordered[-1], 3),
    }


_TIME_KEYS = (
    "total_ms",
    "llm_ms",
    "embed_ms",
    "store_ms",
    "code_ms",
    "own_ms",
    "own_cpu_ms",
    "store_cpu_ms",
    "code_cpu_ms",
)


def _add_row(
    total: float,
    total_cpu: float,
    spent: dict[str, float],
    before: dict[str, int | float],
    after: dict[str, int | float],
    out: dict[str, Any],
) -> dict[str, float]:
    """One add's figures, in milliseconds and counts."""
    llm, embed, store = (spent.get(k, 0.0) for k in ("llm", "embed", "store"))
    own_cpu = total_cpu - spent.get("llm_cpu", 0.0) - spent.get("embed_cpu", 0.0)
    return {
        "total_ms": total * 1e3,
        "llm_ms": llm * 1e3,
        "embed_ms": embed * 1e3,
        "store_ms": store * 1e3,
        "code_ms": (total - llm - embed - store) * 1e3,
        "own_ms": (total - llm - embed) * 1e3,
        "own_cpu_ms": own_cpu * 1e3,
        "store_cpu_ms": spent.get("store_cpu", 0.0) * 1e3,
        "code_cpu_ms": (own_cpu - spent.get("store_cpu", 0.0)) * 1e3,
        "llm_calls": after["calls"] - before["calls"],
        "prompt_tokens": after["prompt_tokens"] - before["prompt_tokens"],
        "completion_tokens": after["completion_tokens"] - before["completion_tokens"],
        "memories_added": sum(1 for r in out["results"] if r["event"] == "ADD"),
    }


def _wire_llm(server: WireServer) -> OpenAICompatibleLLM:
    llm = make_llm(
        "openai_compatible",
        {"base_url": server.base_url, "model": "bench-model", "max_retries": 0, "timeout": 60},
    )
    assert isinstance(llm, OpenAICompatibleLLM)
    return llm


def _measure_adds(
    mode: str,
    kind: str,
    plan: Sequence[Chunk],
    embedder: Embedder,
    workdir: Path,
    warmup: int,
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:
    server = WireServer().start() if kind == "wire" else None
    llm: OpenAICompatibleLLM | ScriptedLLM = (
        _wire_llm(server) if server is not None else ScriptedLLM()
    )
    path = workdir / f"pipeline-{mode}-{kind}.db"
    rows: list[dict[str, float]] = []
    try:
        mem = _TimedMemory(
            path, {"extraction": {"mode": mode}}, embedder=embedder, llm=llm, actor="bench"
        )
        with mem:
            for i, chunk in enumerate(plan):
                for content in _replies(chunk, mode, i):
                    if server is not None:
                        server.reply(content=content)
                    else:
                        assert isinstance(llm, ScriptedLLM)
                        llm.add(content)
                mem.spent = {}
                before = llm.stats()
                measured = profile is not None and i >= warmup
                if measured:
                    assert profile is not None
                    profile.enable()
                started = time.perf_counter()
                cpu = time.thread_time()
                out = mem.add(
                    chunk.messages,
                    user_id=chunk.user_id,
                    run_id=chunk.run_id,
                    timestamp=chunk.timestamp,
                )
                total = time.perf_counter() - started
                total_cpu = time.thread_time() - cpu
                if measured:
                    assert profile is not None
                    profile.disable()
                after = llm.stats()
                rows.append(_add_row(total, total_cpu, mem.spent, before, after, out))
            stored = mem.store.count()
    finally:
        llm.close()
        if server is not None:
            server.stop()
    kept = rows[warmup:] if len(rows) > warmup else rows
    result: dict[str, Any] = {
        "mode": mode,
        "llm": kind,
        "adds": len(rows),
        "measured_adds": len(kept),
        "memories_stored": stored,
    }
    for key in _TIME_KEYS:
        result[key] = _stats([r[key] for r in kept])
    for key in ("llm_calls", "prompt_tokens", "completion_tokens", "memories_added"):
        result[f"{key}_per_add"] = round(statistics.fmean(r[key] for r in kept), 2) if kept else 0
    return result


# ------------------------------------------------------------------ concurrency


def _schema_name(request: RecordedRequest) -> str:
    fmt = request.response_format or {}
    schema = fmt.get("json_schema")
    return str(schema.get("name")) if isinstance(schema, dict) else ""


def _short_messages(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"I started learning the cello in lesson {i}."}]


async def _concurrent_once(
    n: int,
    mode: str,
    delay: float,
    plan: Sequence[Chunk],
    embedder: Embedder,
    workdir: Path,
    inputs: str,
) -> dict[str, Any]:
    def answer(request: RecordedRequest) -> Reply:
        # Which call this is shows in the schema's name; every add gets one fact.
        name = _schema_name(request)
        if name == "facts":
            content: dict[str, Any] = {"facts": ["The user likes green tea."]}
        elif name == "memory":
            content = {"memory": [{"event": "ADD", "text": "The user likes green tea."}]}
        else:
            content = {
                "memory": [
                    {"text": "The user likes green tea.", "attributed_to": "user"},
                ]
            }
        return Reply(content=content, delay=delay)

    with WireServer() as server:
        server.handler = answer
        llm = _wire_llm(server)
        path = workdir / f"concurrency-{mode}-{inputs}-{n}.db"
        async with AsyncMemory(
            path, {"extraction": {"mode": mode}}, embedder=embedder, llm=llm, actor="bench"
        ) as mem:
            # Bind the embedder, open the connection pool and the threads first.
            await mem.add("warm up", user_id="warm-up", infer=False)
            await mem.add("warm up", user_id="warm-up-llm")
            server.reset()
            server.handler = answer
            before = llm.stats()
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    mem.add(
                        plan[i % len(plan)].messages if inputs == "locomo" else _short_messages(i),
                        user_id=f"user-{i}",
                        timestamp=plan[i % len(plan)].timestamp,
                    )
                    for i in range(n)
                )
            )
            wall = time.perf_counter() - started
            calls = llm.stats()["calls"] - before["calls"]
            in_flight = server.max_in_flight
    sequential = calls * delay
    return {
        "mode": mode,
        "inputs": inputs,
        "concurrent_adds": n,
        "llm_calls": calls,
        "wall_s": round(wall, 3),
        "sequential_s": round(sequential, 3),
        "speedup": round(sequential / wall, 1) if wall > 0 else None,
        "overhead_s": round(wall - (calls // max(n, 1)) * delay, 3),
        "max_in_flight": in_flight,
    }


def _measure_concurrency(
    levels: Sequence[int],
    modes: Sequence[str],
    delay: float,
    plan: Sequence[Chunk],
    embedder: Embedder,
    workdir: Path,
) -> list[dict[str, Any]]:
    out = []
    for inputs in CONCURRENCY_INPUTS:
        for mode in modes:
            for n in levels:
                out.append(
                    asyncio.run(_concurrent_once(n, mode, delay, plan, embedder, workdir, inputs))
                )
    return out


# --------------------------------------------------------------------- reports


def _row(r: dict[str, Any], stat: str) -> str:
    return (
        f"{r['mode']:<11} {r['llm']:<8} {r['llm_calls_per_add']:>5.1f} "
        f"{r['prompt_tokens_per_add']:>8.0f} {r['completion_tokens_per_add']:>6.0f} "
        f"{r['total_ms'][stat]:>8.1f} {r['llm_ms'][stat]:>7.1f} {r['embed_ms'][stat]:>7.1f} "
        f"{r['store_ms'][stat]:>7.1f} {r['code_ms'][stat]:>7.1f} {r['own_ms'][stat]:>7.1f} "
        f"{r['own_cpu_ms'][stat]:>8.1f}"
    )


def format_report(report: dict[str, Any]) -> str:
    """The report's tables as text."""
    lines: list[str] = []
    per_add = report.get("per_add") or []
    if per_add:
        header = (
            f"{'mode':<11} {'llm':<8} {'calls':>5} {'prompt':>8} {'compl':>6} "
            f"{'total':>8} {'llm':>7} {'embed':>7} {'store':>7} {'code':>7} {'own':>7} "
            f"{'own cpu':>8}"
        )
        for stat in ("p50", "mean", "p95"):
            lines.append(
                f"Per add ({stat} ms; calls and tokens are means per add; "
                f"own = total - llm - embed = store + code; own cpu = its CPU time)"
            )
            lines.append(header)
            lines.extend(_row(r, stat) for r in per_add)
            lines.append("")
        target = report.get("target") or {}
        if target:
            lines.append(
                f"Target: own time <= {target['own_ms']:.0f} ms (median, wire): "
                + ", ".join(
                    f"{mode} {'met' if ok else 'MISSED'}"
                    for mode, ok in target.get("met", {}).items()
                )
                + "; in CPU time: "
                + ", ".join(
                    f"{mode} {'met' if ok else 'MISSED'}"
                    for mode, ok in target.get("met_cpu", {}).items()
                )
            )
            load = report.get("machine", {}).get("loadavg")
            cpus = report.get("machine", {}).get("cpus")
            lines.append(f"(load average {load} on {cpus} CPUs)")
            lines.append("")
    conc = report.get("concurrency") or []
    if conc:
        delay = report.get("config", {}).get("delay_s")
        lines.append(f"Concurrent AsyncMemory.add() against a server answering after {delay} s")
        lines.append(
            f"{'inputs':<7} {'mode':<11} {'adds':>5} {'calls':>6} {'wall s':>8} "
            f"{'sequential s':>13} {'speedup':>8} {'in flight':>9}"
        )
        for r in conc:
            lines.append(
                f"{r['inputs']:<7} {r['mode']:<11} {r['concurrent_adds']:>5} {r['llm_calls']:>6} "
                f"{r['wall_s']:>8.2f} {r['sequential_s']:>13.1f} {r['speedup']:>8.1f} "
                f"{r['max_in_flight']:>9}"
            )
    if report.get("profile"):
        lines.append("")
        lines.append(report["profile"])
    return "\n".join(lines).rstrip()


def _profile_text(profile: cProfile.Profile, limit: int) -> str:
    buffer = io.StringIO()
    stats = pstats.Stats(profile, stream=buffer)
    stats.strip_dirs().sort_stats("tottime").print_stats(limit)
    return buffer.getvalue()


def run(
    *,
    adds: int = 120,
    warmup: int = 10,
    modes: Sequence[str] = MODES,
    llms: Sequence[str] = LLM_KINDS,
    concurrency: Sequence[int] = DEFAULT_CONCURRENCY,
    concurrency_modes: Sequence[str] = MODES,
    delay: float = 0.5,
    turns_per_add: int = TURNS_PER_ADD,
    data: str | Path | None = None,
    out: str | Path | None = None,
    embedder: Embedder | None = None,
    workdir: str | Path | None = None,
    profile: bool = False,
    echo: Echo | None = print,
) -> dict[str, Any]:
    """Run the benchmark; print tables through ``echo`` and return the figures.

    Args:
        adds: adds replayed per (mode, llm) pair; the first ``warmup`` are
            not counted.
        warmup: adds left out of the figures (model and cache warm-up).
        modes: extraction modes to measure per add.
        llms: ``"wire"`` (loopback OpenAI-wire server) and/or ``"scripted"``.
        concurrency: numbers of concurrent ``AsyncMemory.add()`` calls; empty
            skips that part.
        concurrency_modes: extraction modes of the concurrency part.
        delay: seconds the server waits before each answer in the concurrency part.
        turns_per_add: LoCoMo turns per add.
        data: the LoCoMo JSON file; default ``$ENGRAM_LOCOMO``.
        out: write the figures as JSON here too.
        embedder: default the local model.
        workdir: where the SQLite files go; default a temporary directory.
        profile: run cProfile over the measured adds of (additive, wire) and
            add the top functions to the report.
        echo: receives progress lines and the tables; ``None`` is silent.

    Raises:
        FileNotFoundError: the LoCoMo file is missing, or neither ``data`` nor
            ``$ENGRAM_LOCOMO`` names one (:class:`~engramdb_bench._locomo.MissingDataError`).
        ValueError: a bad size, mode or LLM kind.
    """
    say: Echo = echo if echo is not None else (lambda _line: None)
    if adds < 1 or warmup < 0 or turns_per_add < 1 or delay < 0:
        raise ValueError("adds and turns_per_add must be >= 1, warmup and delay >= 0")
    for mode in (*modes, *concurrency_modes):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    for kind in llms:
        if kind not in LLM_KINDS:
            raise ValueError(f"unknown llm {kind!r}; choose from {', '.join(LLM_KINDS)}")
    if any(n < 1 for n in concurrency):
        raise ValueError("concurrency levels must be >= 1")
    data_path = resolve_data_path(data)
    if not data_path.is_file():
        raise FileNotFoundError(
            f"LoCoMo file not found: {data_path}; pass data=PATH (--data) or set ENGRAM_LOCOMO"
        )
    convs = load_conversations(data_path)
    plan: list[Chunk] = []
    for chunk in chunks(convs, turns_per_add):
        if len(plan) >= max(adds, max(concurrency, default=0)):
            break
        plan.append(chunk)
    if not plan:
        raise ValueError(f"{data_path} holds no dialogue turns")
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = [round(x, 2) for x in os.getloadavg()]
    wall = time.perf_counter()
    emb = embedder or LocalEmbedder()
    emb.embed_query("warm up")  # load the model outside the figures
    prof = cProfile.Profile() if profile else None
    per_add: list[dict[str, Any]] = []
    conc: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="engramdb-pipeline-") as tmp:
        base = Path(workdir).expanduser() if workdir is not None else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        for mode in modes:
            for kind in llms:
                say(f"per add: {mode} mode, {kind} LLM, {min(adds, len(plan))} adds ...")
                per_add.append(
                    _measure_adds(
                        mode,
                        kind,
                        plan[:adds],
                        emb,
                        base,
                        warmup,
                        prof if (mode, kind) == ("additive", "wire") else None,
                    )
                )
        if concurrency:
            say(f"concurrency: {', '.join(map(str, concurrency))} adds at once, {delay} s LLM ...")
            conc = _measure_concurrency(concurrency, concurrency_modes, delay, plan, emb, base)
    wire = [r for r in per_add if r["llm"] == "wire"]
    met = {r["mode"]: r["own_ms"]["p50"] <= TARGET_OWN_MS for r in wire}
    met_cpu = {r["mode"]: r["own_cpu_ms"]["p50"] <= TARGET_OWN_MS for r in wire}
    report: dict[str, Any] = {
        "benchmark": "engramdb_bench.pipeline",
        "format": 1,
        "started_at": started_at,
        "seconds": round(time.perf_counter() - wall, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "config": {
            "adds": adds,
            "warmup": warmup,
            "turns_per_add": turns_per_add,
            "delay_s": delay,
            "embedder": emb.model,
            "data": str(data_path),
        },
        "definitions": {
            "llm_ms": "time inside LLM calls (client + loopback HTTP + server for wire)",
            "embed_ms": "time inside the embedding model",
            "store_ms": "time inside store calls (SQLite)",
            "code_ms": "the rest: validation, prompts, parsing, NLP, fusion",
            "own_ms": "total - llm - embed (= store + code): the pipeline's own time",
            "own_cpu_ms": "CPU time of the calling thread in the same part (load-independent)",
        },
        "per_add": per_add,
        "target": {
            "own_ms": TARGET_OWN_MS,
            "statistic": "p50, wire",
            "met": met,
            "met_cpu": met_cpu,
        },
        "concurrency": conc,
    }
    if prof is not None:
        report["profile"] = _profile_text(prof, 30)
    say("")
    say(format_report(report))
    if out is not None:
        out_path = Path(out).expanduser()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        say(f"\nwrote {out_path}")
    return report


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m engramdb_bench.pipeline``."""
    parser = argparse.ArgumentParser(
        prog="python -m engramdb_bench.pipeline",
        description="Measure the cost of add(infer=True) with a zero-latency LLM, and concurrency.",
    )
    parser.add_argument("--adds", type=int, default=120, help="adds per mode and LLM (120)")
    parser.add_argument("--warmup", type=int, default=10, help="adds not counted (10)")
    parser.add_argument("--concurrency", default="1,5,20,50", help="levels, comma-separated")
    parser.add_argument("--delay", type=float, default=0.5, help="LLM delay for concurrency (s)")
    parser.add_argument("--data", type=Path, help="LoCoMo JSON file (default: $ENGRAM_LOCOMO)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--workdir", type=Path, help="keep the SQLite files here")
    parser.add_argument("--quick", action="store_true", help="30 adds, concurrency 1,20")
    parser.add_argument("--profile", action="store_true", help="cProfile the additive wire adds")
    args = parser.parse_args(argv)
    if args.data is None and default_data_path() is None:
        parser.error(MISSING_DATA)
    try:
        run(
            adds=30 if args.quick else args.adds,
            warmup=5 if args.quick else args.warmup,
            concurrency=[1, 20] if args.quick else _ints(args.concurrency),
            delay=args.delay,
            data=args.data,
            out=args.out,
            workdir=args.workdir,
            profile=args.profile,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
