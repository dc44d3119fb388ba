"""The torture benchmark: engramdb's promises tried the hard way, as figures.

Run ``engram bench torture`` (or call :func:`run`). Each part counts what
must be zero; the command exits non-zero when any count is not (see
:func:`violations`), so it can gate a release.

``kills``
    A writer process (``engramdb_bench._torture_writer``: verbatim adds,
    repeats, updates, deletes, purges) is killed with SIGKILL at a random
    moment after it started writing, ``--kills`` times on one SQLite file.
    After each kill the file must pass ``PRAGMA integrity_check`` and
    ``foreign_key_check``, open through :class:`~engramdb.Memory`, and every
    memory must be whole: text matching its hash, a vector of the model's
    size, a keyword row, an ADD event, a version and a deleted flag that match
    its history, its source messages; no row of any side table without its
    memory; no two live copies of one text in a scope.
``writers-sqlite`` / ``writers-pg``
    ``--writers`` processes each make ``--adds`` adds to one scope at once,
    half of their texts drawn from a pool all of them share, a fifth repeats
    of their own. Counted: errors (raised adds, failed processes), lost (an
    add answered ADD or NONE whose memory is not there with that text),
    duplicated (two live memories with the same text in the scope), and, for
    information, unattached (a writer's run missing from a memory it was
    answered for). PostgreSQL is ``--pg-url`` or an embedded server; skipped,
    with the reason, when neither can be had.
``corpus``
    Every reply of the hostile-reply corpus (:mod:`engramdb_bench._hostile`)
    through a real ``Memory.add`` whose LLM is the OpenAI-wire test server
    (additive mode, and consolidate mode for the facts and update replies).
    Handled: the memories stored as the case expects, or a clean
    ``ExtractionError`` whose raw messages were kept as an extraction failure.
``fuzz``
    schemathesis against a live REST server on 127.0.0.1, every operation,
    valid and invalid requests, with an admin key and a user-bound key:
    requests sent, and answers of 500 or more (must be 0).
``attacks`` / ``purge``
    The tenant attack suite (``engramdb_bench._attacks.run_attack_suite``)
    and the purge probes (``engramdb_bench._probes.run_purge_probes``),
    imported when run; reported as missing when not installed.

Vectors are the real local model's, computed once per text stem and looked
up by the writers, so their time is spent in the write path.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import random
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engramdb import __version__
from engramdb_bench._machine import machine, machine_line
from engramdb_bench._progress import Progress, Tick, load_average, quiet
from engramdb_bench._serving import LiveServer
from engramdb_bench._torture_corpus import all_memories, part_corpus
from engramdb_bench._torture_writer import STEMS, StemVectors

__all__ = ["DEFAULTS", "PARTS", "print_report", "run", "violations"]

log = logging.getLogger("engramdb_bench.torture")

PARTS: tuple[str, ...] = (
    "kills",
    "writers-sqlite",
    "writers-pg",
    "corpus",
    "fuzz",
    "attacks",
    "purge",
)
"""The parts, in the order they run."""

DEFAULTS: dict[str, int] = {"kills": 200, "writers": 8, "adds": 1000, "fuzz_examples": 50}
"""Default sizes: a full run takes about 10-15 minutes on a loaded 2-core machine."""

SABOTAGE_ENV = "ENGRAM_TORTURE_SABOTAGE"
"""Test hook: ``kills`` removes a vector after each kill, ``writers`` purges an
answered memory after the writers; the checks must then report a violation."""


# -- vectors --------------------------------------------------------------------------------


def _stem_vectors(workdir: Path) -> Path:
    """The real model's vector of every stem, in a file the writers read."""
    path = workdir / "stems.npz"
    if not path.exists():
        from engramdb.embedders import LocalEmbedder

        model = LocalEmbedder()
        vectors = np.asarray(model.embed_documents(list(STEMS)), dtype="f4")
        np.savez(
            path,
            stems=np.array(STEMS),
            vectors=vectors,
            model=np.array(model.model),
            dim=np.array(model.dim),
        )
    return path


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENGRAM_STORE_URL", "ENGRAM_DB")}
    env["ENGRAM_LLM"] = ""
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _writer(args: Sequence[str], stderr: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "engramdb_bench._torture_writer", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=_child_env(),
    )


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The child's next stdout line, or b"" if it exits or says nothing in time."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            if proc.poll() is not None:
                return b""
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            return b""
        buf += chunk
        if chunk == b"\n":
            return buf
    return b""


def _send(proc: subprocess.Popen[bytes], line: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, OSError):
        proc.stdin.write(line)
        proc.stdin.flush()


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


# -- SQLite: is every memory whole? ---------------------------------------------------------


def check_sqlite(db: Path, dim: int) -> tuple[int, list[str]]:
    """Open ``db`` raw and check every memory is whole; returns (memories, problems)."""
    from engramdb.core.text import content_hash

    problems: list[str] = []
    con = sqlite3.connect(db, timeout=30)
    try:
        integrity = con.execute("PRAGMA integrity_check").fetchall()
        if integrity != [("ok",)]:
            problems.append(f"integrity_check: {integrity[:3]}")
        fk = con.execute("PRAGMA foreign_key_check").fetchall()
        if fk:
            problems.append(f"foreign_key_check: {len(fk)} rows, e.g. {fk[:3]}")

        def count(sql: str) -> int:
            return int(con.execute(sql).fetchone()[0])

        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        n = count("SELECT count(*) FROM memories")
        checks = {
            "memories without a vector": "SELECT count(*) FROM memories m WHERE NOT EXISTS "
            "(SELECT 1 FROM memory_vectors v WHERE v.memory_rowid = m.rowid)",
            "vectors of the wrong size": "SELECT count(*) FROM memory_vectors WHERE "
            f"length(embedding) != {4 * dim}",
            "memories without a keyword row": "SELECT count(*) FROM memories m WHERE NOT EXISTS "
            "(SELECT 1 FROM memory_fts f WHERE f.rowid = m.rowid)",
            "keyword rows without a memory": "SELECT count(*) FROM memory_fts f WHERE NOT EXISTS "
            "(SELECT 1 FROM memories m WHERE m.rowid = f.rowid)",
            "vectors without a memory": "SELECT count(*) FROM memory_vectors v WHERE NOT EXISTS "
            "(SELECT 1 FROM memories m WHERE m.rowid = v.memory_rowid)",
            "memories without an ADD event": "SELECT count(*) FROM memories m WHERE NOT EXISTS "
            "(SELECT 1 FROM history h WHERE h.memory_id = m.id AND h.event = 'ADD')",
            "versions that differ from history": "SELECT count(*) FROM memories m WHERE "
            "m.version != (SELECT max(version) FROM history h WHERE h.memory_id = m.id)",
            "deleted flags that differ from history": "SELECT count(*) FROM memories m WHERE "
            "(m.deleted_at IS NOT NULL) != coalesce((SELECT event FROM history h WHERE "
            "h.memory_id = m.id AND h.event IN ('ADD', 'DELETE', 'RESTORE') ORDER BY rowid "
            "DESC LIMIT 1) = 'DELETE', 0)",
            "history of no memory": "SELECT count(*) FROM history h WHERE NOT EXISTS "
            "(SELECT 1 FROM memories m WHERE m.id = h.memory_id)",
            "memories without their source messages": "SELECT count(*) FROM memories m WHERE "
            "NOT EXISTS (SELECT 1 FROM memory_sources s WHERE s.memory_rowid = m.rowid)",
            "source rows of no message": "SELECT count(*) FROM memory_sources s WHERE NOT EXISTS "
            "(SELECT 1 FROM messages g WHERE g.rowid = s.message_rowid)",
            "live duplicates in a scope": "SELECT coalesce(sum(c - 1), 0) FROM (SELECT count(*) "
            "AS c FROM memories WHERE deleted_at IS NULL GROUP BY coalesce(user_id, ''), "
            "coalesce(agent_id, ''), CASE WHEN user_id IS NULL AND agent_id IS NULL THEN "
            "run_id END, hash HAVING count(*) > 1)",
        }
        side = {
            "memory_scope": "memory_rowid",
            "memory_links": "from_rowid",
            "memory_entities": "memory_rowid",
            "memory_context": "memory_rowid",
        }
        for table, column in side.items():
            if table in tables:
                checks[f"{table} rows of no memory"] = (
                    f"SELECT count(*) FROM {table} x WHERE NOT EXISTS "
                    f"(SELECT 1 FROM memories m WHERE m.rowid = x.{column})"
                )
        for what, sql in checks.items():
            bad = count(sql)
            if bad:
                problems.append(f"{bad} {what}")
        torn = [
            memory_id
            for memory_id, text, digest in con.execute("SELECT id, text, hash FROM memories")
            if not text or content_hash(text) != digest
        ]
        if torn:
            problems.append(f"{len(torn)} texts that do not match their hash, e.g. {torn[:3]}")
        return n, problems
    except sqlite3.DatabaseError as exc:
        return -1, [*problems, f"{type(exc).__name__}: {exc}"]
    finally:
        con.close()


def _describe(exc: BaseException) -> str:
    """An exception as one line; an ExceptionGroup (anyio task groups) by its leaves."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(sub) for sub in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def _opens(db: Path, embedder: Any) -> str | None:
    """None if the store opens and reads through Memory, else the error."""
    from engramdb import Memory

    try:
        with Memory(db, embedder=embedder, llm=None) as m:
            m.get_all(user_id="user0", top_k=1)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _sabotage_vector(db: Path) -> None:
    con = sqlite3.connect(db, timeout=30)
    with con:
        con.execute(
            "DELETE FROM memory_vectors WHERE memory_rowid = (SELECT max(rowid) FROM memories)"
        )
    con.close()


# -- part: kill -9 ---------------------------------------------------------------------------


def _part_kills(
    workdir: Path, kills: int, rng: random.Random, bars: Progress, sabotage: bool
) -> dict[str, Any]:
    db = workdir / "kills.db"
    vectors = _stem_vectors(workdir)
    embedder = StemVectors(vectors)
    from engramdb import Memory

    Memory(db, embedder=embedder, llm=None).close()  # created up front: the kills are on writes
    log = (workdir / "kills-writers.log").open("ab")
    killed = not_killed = writer_failures = rounds = 0
    broken_rounds = 0
    open_failures = 0
    problems: list[str] = []
    delays: list[float] = []
    memories = 0
    max_rounds = 2 * kills + 10
    try:
        nxt = _writer(["crash", str(db), str(vectors), str(rng.randrange(1 << 30))], log)
        with bars.bar("kill -9 of a writer", kills) as tick:
            while killed < kills and rounds < max_rounds:
                rounds += 1
                proc = nxt
                armed = _read_line(proc, 120)
                _send(proc, b"go\n")
                ready = _read_line(proc, 120) if armed == b"armed\n" else b""
                # The next writer imports while this one writes, so a round costs
                # the delay and the check, not a Python start.
                nxt = _writer(["crash", str(db), str(vectors), str(rng.randrange(1 << 30))], log)
                if ready != b"ready\n":
                    writer_failures += 1
                    _reap(proc)
                    problems.append(f"round {rounds}: the writer never started writing")
                else:
                    delay = rng.uniform(0, 0.02) if rng.random() < 0.3 else rng.uniform(0.02, 0.5)
                    time.sleep(delay)
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGKILL)
                        killed += 1
                        delays.append(delay)
                        tick()
                    else:
                        not_killed += 1
                    _reap(proc)
                    if proc.returncode not in (-signal.SIGKILL, 0):
                        writer_failures += 1
                        problems.append(f"round {rounds}: writer exit status {proc.returncode}")
                if sabotage:
                    _sabotage_vector(db)
                memories, found = check_sqlite(db, embedder.dim)
                error = _opens(db, embedder)
                if error is not None:
                    open_failures += 1
                    found.append(f"does not open: {error}")
                if found:
                    broken_rounds += 1
                    problems.extend(f"after kill {killed}: {p}" for p in found)
        _reap(nxt)
    finally:
        log.close()
    # and the store still works through the API
    works = True
    try:
        with Memory(db, embedder=embedder, llm=None) as m:
            hits = m.search("my cat", user_id="user0", top_k=3)["results"]
            works = all(h.get("user_id") == "user0" for h in hits)
            m.add("still writable after the kills #final", user_id="user0")
    except Exception as exc:
        works = False
        problems.append(f"after all kills: {type(exc).__name__}: {exc}")
    final, found = check_sqlite(db, embedder.dim)
    if found:
        broken_rounds += 1
        problems.extend(f"after the final add: {p}" for p in found)
    return {
        "kills": killed,
        "rounds": rounds,
        "not_killed": not_killed,
        "writer_failures": writer_failures,
        "broken": broken_rounds,
        "open_failures": open_failures,
        "works_after": works,
        "memories": final if final >= 0 else memories,
        "delay_ms": {
            "min": round(1000 * min(delays), 1) if delays else None,
            "median": round(1000 * float(np.median(delays)), 1) if delays else None,
            "max": round(1000 * max(delays), 1) if delays else None,
        },
        "file_bytes": db.stat().st_size if db.exists() else 0,
        "problems": problems[:20],
    }


# -- part: many writers ----------------------------------------------------------------------


def _part_writers(
    workdir: Path,
    backend: str,
    store: str,
    where: dict[str, Any],
    writers: int,
    adds: int,
    bars: Progress,
    sabotage: bool,
) -> dict[str, Any]:
    """``writers`` processes x ``adds`` adds with repeats on one store; count the damage."""
    from engramdb import Memory

    vectors = _stem_vectors(workdir)
    embedder = StemVectors(vectors)
    Memory(**where, embedder=embedder, llm=None).close()  # created first: the race is on writes
    shared = max(1, adds // 4)
    outs = [workdir / f"{backend}-writer{p}.jsonl" for p in range(writers)]
    logs = [workdir / f"{backend}-writer{p}.log" for p in range(writers)]
    for path in outs:
        path.unlink(missing_ok=True)
    handles = [path.open("wb") for path in logs]
    procs = [
        _writer(
            ["concurrent", store, str(vectors), str(p), str(adds), str(shared), str(outs[p])],
            handles[p],
        )
        for p in range(writers)
    ]
    errors = 0
    problems: list[str] = []
    started = time.perf_counter()
    try:
        armed = [_read_line(p, 180) for p in procs]
        for proc in procs:
            _send(proc, b"go\n")
        started = time.perf_counter()
        for index, line in enumerate(armed):
            if line != b"armed\n":
                problems.append(f"writer {index} did not start")
        deadline = time.monotonic() + max(600.0, adds * writers * 0.5)
        with bars.bar(f"{writers} writers x {adds} adds ({backend})", writers * adds) as tick:
            while time.monotonic() < deadline:
                done = sum(_count_lines(path) for path in outs)
                tick(completed=done)
                if all(proc.poll() is not None for proc in procs):
                    break
                time.sleep(0.5)
            tick(completed=sum(_count_lines(path) for path in outs))
    finally:
        for proc in procs:
            if proc.poll() is None:
                problems.append(f"writer pid {proc.pid} ran past the deadline; killed")
            _reap(proc)
        for handle in handles:
            handle.close()
    wall = time.perf_counter() - started
    for index, proc in enumerate(procs):
        if proc.returncode != 0:
            errors += 1
            tail = logs[index].read_text(errors="replace")[-300:]
            problems.append(f"writer {index} exit status {proc.returncode}: {tail}")
    records = [json.loads(line) for path in outs if path.exists() for line in path.open()]
    raised = [r for r in records if "error" in r]
    errors += len(raised)
    problems.extend(f"add raised {r['error']}" for r in raised[:5])
    answered = [
        (res, f"proc{path_index}")
        for path_index, path in enumerate(outs)
        if path.exists()
        for line in path.open()
        for res in json.loads(line).get("results", [])
    ]
    missing_adds = writers * adds - len(records)
    if missing_adds > 0:
        errors += missing_adds
        problems.append(f"{missing_adds} adds never reported")
    with Memory(**where, embedder=embedder, llm=None) as m:
        if sabotage and answered:
            m.purge(answered[0][0]["id"])
        live = all_memories(m, "shared")
    by_id = {item["id"]: item for item in live}
    lost = 0
    unattached = 0
    for res, run_id in answered:
        item = by_id.get(res["id"])
        if res["event"] not in ("ADD", "NONE"):
            continue
        if item is None or item["memory"] != res["memory"]:
            lost += 1
            if lost <= 5:
                problems.append(f"lost: {res['event']} {res['id']} {res['memory']!r}")
            continue
        runs = set(item.get("run_ids") or [item.get("run_id")])
        if run_id not in runs:
            unattached += 1
    texts: dict[str, int] = {}
    from engramdb.core.text import normalize_text

    for item in live:
        key = normalize_text(item["memory"])
        texts[key] = texts.get(key, 0) + 1
    duplicated = sum(c - 1 for c in texts.values() if c > 1)
    submitted = {normalize_text(t) for r in records for t in r["texts"]}
    result: dict[str, Any] = {
        "backend": backend,
        "writers": writers,
        "adds_per_writer": adds,
        "adds": len(records),
        "messages": sum(len(r["texts"]) for r in records),
        "distinct_texts": len(submitted),
        "shared_pool": shared,
        "answers": len(answered),
        "memories": len(live),
        "errors": errors,
        "lost": lost,
        "duplicated": duplicated,
        "unattached": unattached,
        "adds_per_s": round(len(records) / wall, 1) if wall > 0 else None,
        "problems": problems[:20],
    }
    if "path" in where:
        _, found = check_sqlite(Path(where["path"]), embedder.dim)
        result["inconsistent"] = len(found)
        result["problems"] = (problems + found)[:20]
    return result


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 16), b""))


# -- part: REST fuzzing ------------------------------------------------------------------------


def _fuzz_one(
    op: Any,
    mode: Any,
    examples: int,
    url: str,
    headers: dict[str, dict[str, str]],
    counts: dict[str, int],
    samples: list[str],
    per_operation: dict[str, int],
    tick: Tick,
) -> None:
    """Send ``examples`` generated requests of one operation and mode with every key."""
    import hypothesis

    label = f"{op.method.upper()} {op.path}"

    @hypothesis.settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        derandomize=True,
        database=None,
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=op.as_strategy(generation_mode=mode))
    def fuzz(case: Any) -> None:
        for header in headers.values():
            try:
                response = case.call(base_url=url, headers=header, timeout=60)
            except Exception as exc:  # a dropped connection is a failure too
                counts["unreachable"] += 1
                if len(samples) < 10:
                    samples.append(f"{label}: {type(exc).__name__}: {exc}")
                continue
            counts["requests"] += 1
            per_operation[label] = per_operation.get(label, 0) + 1
            tick()
            status = response.status_code
            if status >= 500:
                counts["server_errors"] += 1
                if len(samples) < 10:
                    samples.append(f"{status}: {case.as_curl_command()}"[:500])
            elif status >= 400 and response.text != "Invalid HTTP request received.":
                try:
                    body = response.json()
                    ok = set(body) == {"error"} and isinstance(body["error"].get("code"), str)
                except (ValueError, AttributeError, TypeError):
                    ok = False
                if not ok:
                    counts["bad_envelope"] += 1

    fuzz()


def _part_fuzz(workdir: Path, examples: int, bars: Progress) -> dict[str, Any]:
    try:
        import hypothesis  # noqa: F401  (the fuzzing needs it; checked here)
        import schemathesis
        from schemathesis import GenerationMode
        from schemathesis.core.result import Ok
    except ImportError as exc:
        return {"status": "skipped", "reason": f"schemathesis is not installed ({exc})"}
    from engramdb import AsyncMemory
    from engramdb.embedders import LocalEmbedder
    from engramdb.server import KeyStore, ServerLimits, create_app

    memory = AsyncMemory(workdir / "fuzz.db", embedder=LocalEmbedder(), llm=None)
    keys = KeyStore(workdir / "fuzz-keys.db")
    headers = {
        "admin": {"Authorization": f"Bearer {keys.create(admin=True).key}"},
        "user": {"Authorization": f"Bearer {keys.create(user_id='alice').key}"},
    }
    limits = ServerLimits(max_body_bytes=256 * 1024)
    counts = {
        "requests": 0,
        "server_errors": 0,
        "bad_envelope": 0,
        "unreachable": 0,
        "invalid_operations": 0,
    }
    samples: list[str] = []
    per_operation: dict[str, int] = {}
    app = create_app(memory, keys=keys, limits=limits, close_memory=True)
    # A 5xx is counted, with its request as a curl command; its traceback would be noise.
    try:
        with (
            quiet("engramdb", "uvicorn", "uvicorn.error"),
            LiveServer(app, log_level="error", start_timeout=60, stop_timeout=30) as live,
        ):
            schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
            found = list(schema.get_all_operations())
            operations = [r.ok() for r in found if isinstance(r, Ok)]
            counts["invalid_operations"] = len(found) - len(operations)
            plans = [
                (op, mode)
                for op in operations
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
                if mode is GenerationMode.POSITIVE
                or op.path not in ("/healthz", "/readyz", "/metrics")
            ]
            total = len(plans) * examples * len(headers)
            with bars.bar("REST fuzzing (schemathesis)", total) as tick:
                for op, mode in plans:
                    _fuzz_one(
                        op, mode, examples, live.url, headers, counts, samples, per_operation, tick
                    )
                # Hypothesis stops early where an operation has few distinct inputs.
                tick(0, total=counts["requests"] + counts["unreachable"])
    finally:
        keys.close()
    return {
        "examples_per_operation_and_mode": examples,
        "keys": len(headers),
        "operations": len(per_operation),
        **counts,
        "samples": samples,
    }


# -- parts written elsewhere: the attack suite, the purge probes --------------------------------


def _external(module: str, function: str) -> Callable[..., dict[str, Any]] | str:
    """The function, or why it cannot be had ("missing: ...")."""
    name = f"engramdb_bench.{module}"
    try:
        loaded = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return f"missing: {name} is not installed"
        raise
    fn = getattr(loaded, function, None)
    if not callable(fn):
        return f"missing: {name} has no {function}()"
    return fn  # type: ignore[no-any-return]


def _part_attacks(workdir: Path, bars: Progress) -> dict[str, Any]:
    fn = _external("_attacks", "run_attack_suite")
    if isinstance(fn, str):
        return {"status": "missing", "reason": fn}
    with bars.bar("tenant attack suite", None) as tick:
        result = fn(workdir, progress=_progress_adapter(tick))
    return _trim(dict(result))


def _part_purge(workdir: Path, pg_url: str | None) -> dict[str, Any]:
    fn = _external("_probes", "run_purge_probes")
    if isinstance(fn, str):
        return {"status": "missing", "reason": fn}
    return _trim(dict(fn(workdir, pg_url=pg_url)))


def _progress_adapter(tick: Tick) -> Callable[..., None]:
    """A progress callback that takes what it is given: (done, total), a number, or a label."""

    def progress(*args: Any, **kwargs: Any) -> None:
        numbers = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
        labels = [a for a in args if isinstance(a, str)]
        done = kwargs.get("done", numbers[0] if numbers else None)
        total = kwargs.get("total", numbers[1] if len(numbers) > 1 else None)
        label = kwargs.get("description", labels[0] if labels else None)
        if done is None and total is None and label is None:
            tick()
            return
        tick(
            0,
            completed=done if isinstance(done, int) else None,
            total=total if isinstance(total, int) else None,
            description=f"tenant attack suite: {label}"[:80] if label else None,
        )

    return progress


def _trim(result: dict[str, Any], keep: int = 50) -> dict[str, Any]:
    details = result.get("details")
    if isinstance(details, list) and len(details) > keep:
        result["details"] = details[:keep]
        result["details_left_out"] = len(details) - keep
    return json.loads(json.dumps(result, default=str))  # type: ignore[no-any-return]


# -- invariants -----------------------------------------------------------------------------


def violations(report: dict[str, Any]) -> list[str]:
    """Every broken promise in a report, one line each (empty: all held)."""
    out: list[str] = []
    for name, part in report["parts"].items():
        status = part.get("status")
        if status == "error":
            out.append(f"{name}: the part failed: {part.get('reason')}")
            continue
        if status in ("skipped", "missing"):
            continue
        if name == "kills":
            if part["broken"]:
                out.append(f"kills: {part['broken']} checks found a broken file or memory")
            if part["writer_failures"]:
                out.append(f"kills: {part['writer_failures']} writers failed on their own")
            if not part["works_after"]:
                out.append("kills: the store did not work after the kills")
        elif name.startswith("writers"):
            for key in ("errors", "lost", "duplicated", "inconsistent"):
                if part.get(key):
                    out.append(f"{name}: {key} = {part[key]}")
        elif name == "corpus":
            if part["handled"] != part["total"]:
                out.append(f"corpus: handled {part['handled']} of {part['total']}")
            if part["raw_kept"] != part["failures"]:
                out.append(f"corpus: raw messages kept for {part['raw_kept']} of "
                           f"{part['failures']} failures")  # fmt: skip
        elif name == "fuzz":
            if part["server_errors"] or part["unreachable"] or part.get("invalid_operations"):
                out.append(
                    f"fuzz: {part['server_errors']} answers >= 500, "
                    f"{part['unreachable']} requests unanswered, "
                    f"{part.get('invalid_operations', 0)} operations the schema could not load"
                )
        elif name == "attacks":
            if part.get("leaks"):
                out.append(f"attacks: {part['leaks']} leaks")
        elif name == "purge" and part.get("found_after"):
            out.append(f"purge: found after purge = {part['found_after']}")
    return out


# -- the run --------------------------------------------------------------------------------


def _choose(parts: Sequence[str] | None) -> list[str]:
    if not parts:
        return list(PARTS)
    chosen: set[str] = set()
    for part in parts:
        if part == "writers":
            chosen |= {"writers-sqlite", "writers-pg"}
        elif part in PARTS:
            chosen.add(part)
        else:
            raise ValueError(f"unknown part {part!r}; the parts are {', '.join(PARTS)}, writers")
    return [p for p in PARTS if p in chosen]


def run(
    *,
    parts: Sequence[str] | None = None,
    kills: int = DEFAULTS["kills"],
    writers: int = DEFAULTS["writers"],
    adds: int = DEFAULTS["adds"],
    fuzz_examples: int = DEFAULTS["fuzz_examples"],
    pg_url: str | None = None,
    out: Path | None = None,
    workdir: Path | None = None,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the chosen parts (all by default) and return the report (also written to ``out``).

    ``report["violations"]`` lists every invariant that did not hold; a part
    that cannot run here is ``{"status": "skipped", "reason": ...}`` (never
    faked), one whose module is not installed ``{"status": "missing", ...}``.
    """
    chosen = _choose(parts)
    if min(kills, writers, adds, fuzz_examples) < 1:
        raise ValueError("--kills, --writers, --adds and --fuzz-examples must be at least 1")
    sabotage = os.environ.get(SABOTAGE_ENV, "")
    rng = random.Random(seed)
    load_start = os.getloadavg()
    started = time.perf_counter()
    own_dir = workdir is None
    base = Path(tempfile.mkdtemp(prefix="engram-torture-")) if workdir is None else workdir
    base.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    pg: Any = None
    pg_reason: str | None = None
    try:
        with Progress(progress) as bars:
            if {"writers-pg", "purge"} & set(chosen):
                from engramdb_bench import _pg

                try:
                    pg = _pg.start(pg_url, prefix="engram-torture-pg-")
                except _pg.PgUnavailable as exc:
                    pg_reason = str(exc)
            for name in chosen:
                t0, l0 = time.perf_counter(), load_average()
                folder = base / name
                folder.mkdir(exist_ok=True)
                try:
                    result = _run_part(
                        name, folder, bars, rng, kills, writers, adds, fuzz_examples,
                        pg, pg_reason, sabotage,
                    )  # fmt: skip
                except Exception as exc:
                    result = {"status": "error", "reason": _describe(exc)[:1000]}
                    log.exception("torture part %s failed", name)
                result.setdefault("status", "ran")
                result["wall_s"] = round(time.perf_counter() - t0, 1)
                result["load_avg_start"] = l0
                result["load_avg_end"] = load_average()
                results[name] = result
    finally:
        if pg is not None:
            pg.stop()
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)
    report: dict[str, Any] = {
        "benchmark": "engramdb_bench.torture",
        "version": __version__,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start),
        "sizes": {
            "kills": kills,
            "writers": writers,
            "adds": adds,
            "fuzz_examples": fuzz_examples,
            "seed": seed,
        },
        "wall_s": round(time.perf_counter() - started, 1),
        "parts": results,
    }
    found = violations(report)
    for name, part in results.items():
        if part["status"] == "ran":
            part["status"] = "violated" if any(v.startswith(name) for v in found) else "ok"
    report["violations"] = found
    report["ok"] = not found
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _run_part(
    name: str,
    folder: Path,
    bars: Progress,
    rng: random.Random,
    kills: int,
    writers: int,
    adds: int,
    fuzz_examples: int,
    pg: Any,
    pg_reason: str | None,
    sabotage: str,
) -> dict[str, Any]:
    if name == "kills":
        return _part_kills(folder, kills, rng, bars, sabotage == "kills")
    if name == "writers-sqlite":
        db = folder / "writers.db"
        return _part_writers(
            folder, "sqlite", str(db), {"path": db}, writers, adds, bars, sabotage == "writers"
        )
    if name == "writers-pg":
        if pg is None:
            return {"status": "skipped", "reason": pg_reason or "no PostgreSQL server"}
        from engramdb_bench import _pg

        schema = _pg.new_schema()
        section = {
            "provider": "postgres",
            "config": {"url": pg.url, "collection_name": schema, "min_size": 1, "max_size": 2},
        }
        try:
            return _part_writers(
                folder,
                "postgres",
                json.dumps(section),
                {"config": {"vector_store": section}},
                writers,
                adds,
                bars,
                sabotage == "writers",
            )
        finally:
            _pg.drop_schema(pg.url, schema)
    if name == "corpus":
        return part_corpus(folder, bars)
    if name == "fuzz":
        return _part_fuzz(folder, fuzz_examples, bars)
    if name == "attacks":
        return _part_attacks(folder, bars)
    if name == "purge":
        return _part_purge(folder, pg.url if pg is not None else None)
    raise ValueError(name)


# -- the table --------------------------------------------------------------------------------


def _figures(name: str, part: dict[str, Any]) -> tuple[str, str]:
    """(what was done, what was found) for one part."""
    if part["status"] in ("skipped", "missing", "error"):
        return "—", f"{part['status']}: {part.get('reason', '')}"
    if name == "kills":
        return (
            f"{part['kills']} kills ({part['memories']} memories at the end)",
            f"broken files/memories {part['broken']}, writer failures "
            f"{part['writer_failures']}, works after: {'yes' if part['works_after'] else 'NO'}",
        )
    if name.startswith("writers"):
        return (
            f"{part['writers']} x {part['adds_per_writer']} adds, "
            f"{part['distinct_texts']} distinct texts, {part['memories']} memories",
            f"errors {part['errors']}, lost {part['lost']}, duplicated {part['duplicated']} "
            f"(unattached {part['unattached']})",
        )
    if name == "corpus":
        return (
            f"{part['total']} replies ({part['as_expected']} as expected, "
            f"{part['failed_clean']} clean failures)",
            f"handled {part['handled']} / {part['total']}, raw kept "
            f"{part['raw_kept']} / {part['failures']}",
        )
    if name == "fuzz":
        return (
            f"{part['requests']} requests, {part['operations']} operations",
            f"5xx {part['server_errors']}, unanswered {part['unreachable']} "
            f"(bad error envelopes {part['bad_envelope']})",
        )
    if name == "attacks":
        return f"{part.get('attempts')} attempts", f"leaks {part.get('leaks')}"
    if name == "purge":
        return (
            f"{part.get('planted')} secrets planted ({part.get('backend')})",
            f"found after purge {part.get('found_after')}",
        )
    return "", ""


def print_report(report: dict[str, Any]) -> None:
    """Print the report as one table, and the violations."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="engram bench torture", title_justify="left")
    for column in ("part", "status", "done", "found", "wall s", "load"):
        table.add_column(column, justify="right" if column in ("wall s", "load") else "left")
    for name, part in report["parts"].items():
        done, found = _figures(name, part)
        table.add_row(
            name,
            part["status"],
            done,
            found,
            f"{part['wall_s']:.0f}",
            f"{part['load_avg_start']:.1f}→{part['load_avg_end']:.1f}",
        )
    # Wide enough for the figures when the output is a file or a pipe (80 columns there).
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
    console.print(table)
    err = Console(highlight=False, stderr=True)
    err.print(f"{machine_line(report['machine'])}; {report['wall_s']:.0f} s")
    for line in report["violations"]:
        err.print(f"[bold red]VIOLATED[/] {line}")
