"""``engram bench compare``: engramdb and mem0 side by side, on the same machine and data.

The protocol (issue 16):

* **One workload for both**: the first ``messages`` LoCoMo dialogue turns (in
  file order: conversation by conversation, session by session), each added
  alone with ``infer=False`` under its conversation's ``user_id``, then
  ``questions`` LoCoMo questions of those conversations (round-robin over
  them), each searched with ``top_k`` results in its conversation's scope.
  The driver writes it once as JSON; both workers read that file.
* **One process each**: every run is a fresh subprocess: engramdb's worker
  (``_peer_engram.py``) with this python, the peer's (``_peer_mem0.py``) with
  ``--peer-python``: mem0's own virtual environment, where engramdb is not
  installed (``scripts/mem0-bench-venv`` makes one).
* **Alternating**: engramdb, peer, engramdb, peer, … for ``rounds`` rounds, so
  a change in the machine's load falls on both sides alike; the report gives
  the median of each figure over the rounds, and the machine's load average
  at the start and the end.
* **Same threads**: ``threads`` (1 by default) for both: mem0's torch and
  faiss, engramdb's OpenMP embedder; ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``
  and ``OPENBLAS_NUM_THREADS`` are set for both processes.

Each worker measures inside its own process, the timer around the one call
only: ms per added message (mean, p50, p95, and process CPU ms), search
latency p50/p95 (the query embedding included, as a user sees it), the first
add and first search apart (left out of the steady-state figures), start-up
(import and construction), ``ready`` (start-up plus the first add: engramdb
loads its model on first use, mem0 when it is constructed), and peak RSS
(``getrusage``). The ratios are engramdb / peer; the verdict holds them to
the issue's goal: add throughput at least 3 times mem0's, search p50 at most half.

Without a peer python, engramdb runs alone and the report says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from engramdb_bench._locomo import data_path, load_conversations
from engramdb_bench._machine import machine, machine_line

__all__ = [
    "ADD_GOAL",
    "DEFAULT_MESSAGES",
    "DEFAULT_QUESTIONS",
    "DEFAULT_ROUNDS",
    "FIGURES",
    "SEARCH_GOAL",
    "CompareError",
    "build_workload",
    "format_report",
    "medians",
    "ratios",
    "run",
    "verdict",
]

Echo = Callable[[str], None]
Peer = Literal["mem0", "engramdb"]

DEFAULT_MESSAGES: Final = 2_000
DEFAULT_QUESTIONS: Final = 200
DEFAULT_ROUNDS: Final = 3
DEFAULT_TOP_K: Final = 10
DEFAULT_TIMEOUT_S: Final = 3_600.0

ADD_GOAL: Final = 3.0
"""engramdb's add throughput must be at least this many times the peer's."""
SEARCH_GOAL: Final = 0.5
"""engramdb's search p50 must be at most this fraction of the peer's."""

FIGURES: Final = (
    "add_ms_per_message",
    "add_p50_ms",
    "add_p95_ms",
    "add_cpu_ms_per_message",
    "first_add_ms",
    "search_p50_ms",
    "search_p95_ms",
    "search_mean_ms",
    "search_cpu_ms_mean",
    "first_search_ms",
    "startup_ms",
    "ready_ms",
    "rss_ready_mb",
    "peak_rss_mb",
)
"""The per-run figures whose median over rounds is reported, and whose ratio is taken."""

_WORKERS: Final = {
    "engramdb": Path(__file__).with_name("_peer_engram.py"),
    "mem0": Path(__file__).with_name("_peer_mem0.py"),
}
_THREAD_VARS: Final = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_STDERR_TAIL: Final = 2_000
_SETUP_HINT: Final = (
    "make mem0's virtual environment with scripts/mem0-bench-venv and pass the python it "
    "prints as --peer-python"
)


class CompareError(RuntimeError):
    """A worker could not run, or failed; the message names it and ends with its stderr."""


def build_workload(
    data: str | Path | None = None,
    *,
    messages: int = DEFAULT_MESSAGES,
    questions: int = DEFAULT_QUESTIONS,
    top_k: int = DEFAULT_TOP_K,
    threads: int = 1,
) -> dict[str, Any]:
    """The JSON-able workload both workers run: turns to add, questions to search.

    ``data`` is a LoCoMo-format file (default ``$ENGRAM_LOCOMO``). Turns are
    taken in file order, each with its conversation's ``sample_id`` as
    ``user_id``, its speaker's chat role and name, and its text (with any
    photo caption, as the other LoCoMo benchmarks store it). Questions come
    from the conversations those turns belong to, one of each in turn.
    Fewer turns or questions than asked are taken as there are.
    """
    if messages < 2 or questions < 2:
        raise ValueError("need at least 2 messages and 2 questions (the first of each is warm-up)")
    if top_k < 1 or threads < 1:
        raise ValueError("top_k and threads must be at least 1")
    path = data_path(data)
    conversations = load_conversations(path)
    rows: list[dict[str, Any]] = []
    used: list[Any] = []
    for conv in conversations:
        if len(rows) >= messages:
            break
        turns = [turn for session in conv.sessions for turn in session.turns]
        taken = conv.messages(turns[: messages - len(rows)])
        if taken:
            used.append(conv)
            rows.extend({"user_id": conv.sample_id, **m} for m in taken)
    queues = [[q.question for q in conv.qa] for conv in used]
    asked: list[dict[str, str]] = []
    depth = 0
    while len(asked) < questions and any(depth < len(q) for q in queues):
        for conv, queue in zip(used, queues, strict=True):
            if depth < len(queue) and len(asked) < questions:
                asked.append({"user_id": conv.sample_id, "query": queue[depth]})
        depth += 1
    if len(rows) < 2 or len(asked) < 2:
        raise ValueError(f"{path}: fewer than 2 turns or 2 questions to run")
    return {
        "format": 1,
        "data": str(path),
        "conversations": [c.sample_id for c in used],
        "top_k": top_k,
        "threads": threads,
        "messages": rows,
        "questions": asked,
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """The median over ``runs`` of each of :data:`FIGURES` (``None`` where no run has it)."""
    out: dict[str, float | None] = {}
    for name in FIGURES:
        values = [float(r[name]) for r in runs if r.get(name) is not None]
        out[name] = round(statistics.median(values), 3) if values else None
    return out


def ratios(
    engram: dict[str, float | None], peer: dict[str, float | None]
) -> dict[str, float | None]:
    """Each figure's ratio engramdb/peer (``None`` where either is missing, or the peer's 0)."""
    out: dict[str, float | None] = {}
    for name in FIGURES:
        a, b = engram.get(name), peer.get(name)
        out[name] = round(a / b, 3) if a is not None and b else None
    return out


def verdict(ratio: dict[str, float | None], peer_name: str = "mem0") -> tuple[dict[str, Any], str]:
    """The issue's two goals held against ``ratio``: the goals section and a one-line verdict.

    Add: engramdb's throughput (1 / ms per message) at least :data:`ADD_GOAL`
    times the peer's; search: engramdb's p50 at most :data:`SEARCH_GOAL` of the
    peer's.
    """
    add = ratio.get("add_ms_per_message")
    search = ratio.get("search_p50_ms")
    throughput = round(1 / add, 2) if add else None
    add_met = throughput is not None and throughput >= ADD_GOAL
    search_met = search is not None and search <= SEARCH_GOAL
    goals = {
        "add_throughput_x": {"value": throughput, "goal": f">= {ADD_GOAL:g}", "met": add_met},
        "search_p50_ratio": {"value": search, "goal": f"<= {SEARCH_GOAL:g}", "met": search_met},
    }
    line = (
        f"add throughput {throughput if throughput is not None else '?'}x {peer_name}'s "
        f"(goal >= {ADD_GOAL:g}x): {'met' if add_met else 'MISSED'}; "
        f"search p50 {search if search is not None else '?'}x {peer_name}'s "
        f"(goal <= {SEARCH_GOAL:g}x): {'met' if search_met else 'MISSED'}"
    )
    return goals, line


def _worker_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in _THREAD_VARS:
        env[name] = str(threads)
    return env


def _tail(text: str) -> str:
    text = text.strip()
    return text[-_STDERR_TAIL:] if text else "(nothing on stderr)"


def run_worker(
    command: list[str],
    who: str,
    out: Path,
    *,
    threads: int,
    timeout: float,
    error: type[Exception],
    missing_hint: str = "",
) -> dict[str, Any]:
    """Run one worker process; the figures it wrote to ``out`` (plus ``wall_s``).

    Failures raise ``error`` naming the worker (``who``) with the end of its
    stderr; ``missing_hint`` is added when the worker could not import a module.
    Shared by ``engram bench compare`` and ``engram bench embedders``.
    """
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=_worker_env(threads),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raw = exc.stderr or ""
        stderr = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        raise error(f"{who} ran past {timeout:g} s; its stderr ends:\n{_tail(stderr)}") from None
    except OSError as exc:
        raise error(f"{who} could not start: {exc}") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        hint = f"\n({missing_hint})" if missing_hint and "No module named" in proc.stderr else ""
        raise error(
            f"{who} failed with exit status {proc.returncode}; its stderr ends:\n"
            f"{_tail(proc.stderr)}{hint}"
        )
    try:
        figures: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise error(
            f"{who} exited 0 but wrote no readable figures ({exc}); its stderr ends:\n"
            f"{_tail(proc.stderr)}"
        ) from None
    figures["wall_s"] = round(wall, 2)
    return figures


def _run_worker(
    label: str,
    python: str,
    script: Path,
    workload: Path,
    out: Path,
    *,
    threads: int,
    timeout: float,
) -> dict[str, Any]:
    """One worker process; its figures, or :class:`CompareError` naming it and its stderr."""
    return run_worker(
        [python, str(script), str(workload), str(out)],
        f"the {label} worker ({python} {script})",
        out,
        threads=threads,
        timeout=timeout,
        error=CompareError,
        missing_hint=""
        if label == "engramdb"
        else f"is {label} installed in {python}? {_SETUP_HINT}",
    )


def check_python(python: str | Path, error: type[Exception], setup_hint: str) -> str:
    """``python`` as a path string, or ``error`` if it is not an executable file."""
    path = Path(python).expanduser()
    if not path.exists():
        raise error(f"--peer-python {python}: no such file ({setup_hint})")
    if path.is_dir() or not os.access(path, os.X_OK):
        raise error(f"--peer-python {python}: not an executable python")
    return str(path)


def _check_python(python: str | Path) -> str:
    return check_python(python, CompareError, _SETUP_HINT)


def run(
    data: str | Path | None = None,
    *,
    messages: int = DEFAULT_MESSAGES,
    questions: int = DEFAULT_QUESTIONS,
    rounds: int = DEFAULT_ROUNDS,
    top_k: int = DEFAULT_TOP_K,
    threads: int = 1,
    peer_python: str | Path | None = None,
    peer: Peer = "mem0",
    peer_script: str | Path | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    out: str | Path | None = None,
    echo: Echo | None = None,
) -> dict[str, Any]:
    """Run engramdb and (with ``peer_python``) the peer, alternating; the report as a dict.

    ``peer`` chooses the peer's worker: ``"mem0"`` (the real comparison) or
    ``"engramdb"`` (engramdb against itself: a check of the driver);
    ``peer_script`` replaces that worker with another script taking the same
    two arguments. Without ``peer_python`` engramdb runs alone. ``out``, if
    given, receives the report as JSON. Raises :class:`CompareError` when a
    worker cannot start or fails, ``ValueError`` for a workload that cannot
    run, ``FileNotFoundError`` for missing data.
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    say = echo or (lambda _line: None)
    peer_exe = _check_python(peer_python) if peer_python is not None else None
    peer_worker = Path(peer_script) if peer_script is not None else _WORKERS[peer]
    if peer_exe is not None and not peer_worker.is_file():
        raise CompareError(f"the {peer} worker script {peer_worker} does not exist")
    workload = build_workload(
        data, messages=messages, questions=questions, top_k=top_k, threads=threads
    )
    load_start = os.getloadavg()
    started = datetime.now(UTC)
    sides: dict[str, dict[str, Any]] = {
        "engramdb": {
            "name": "engramdb",
            "python": sys.executable,
            "worker": str(_WORKERS["engramdb"]),
            "runs": [],
        }
    }
    if peer_exe is not None:
        sides["peer"] = {"name": peer, "python": peer_exe, "worker": str(peer_worker), "runs": []}
    order: list[dict[str, Any]] = []
    n_msgs, n_qs = len(workload["messages"]), len(workload["questions"])
    say(
        f"workload: {n_msgs} turns of {', '.join(workload['conversations'])}, {n_qs} questions, "
        f"top {top_k}, {threads} thread(s); {rounds} round(s)"
        + ("" if peer_exe else " of engramdb alone (no --peer-python)")
    )
    with tempfile.TemporaryDirectory(prefix="engram-compare-") as tmp:
        workload_file = Path(tmp) / "workload.json"
        text = json.dumps(workload, ensure_ascii=False)
        workload_file.write_text(text, encoding="utf-8")
        digest = hashlib.sha256(text.encode()).hexdigest()
        for r in range(1, rounds + 1):
            for key, side in sides.items():
                figures = _run_worker(
                    side["name"],
                    side["python"],
                    Path(side["worker"]),
                    workload_file,
                    Path(tmp) / f"round-{r}-{key}.json",
                    threads=threads,
                    timeout=timeout,
                )
                figures["round"] = r
                side["runs"].append(figures)
                order.append({"round": r, "side": key, "name": side["name"]})
                say(
                    f"round {r}/{rounds} {side['name']}: add {figures['add_ms_per_message']} "
                    f"ms/message, search p50 {figures['search_p50_ms']} ms, peak RSS "
                    f"{figures['peak_rss_mb']} MB ({figures['wall_s']} s)"
                )
    for side in sides.values():
        side["median"] = medians(side["runs"])
    report: dict[str, Any] = {
        "benchmark": "compare",
        "created_at": started.isoformat(timespec="seconds"),
        "workload": {
            "data": workload["data"],
            "conversations": workload["conversations"],
            "messages": n_msgs,
            "questions": n_qs,
            "top_k": top_k,
            "threads": threads,
            "sha256": digest,
        },
        "rounds": rounds,
        "order": order,
        "sides": sides,
        "peer": peer if peer_exe is not None else None,
    }
    if peer_exe is not None:
        ratio = ratios(sides["engramdb"]["median"], sides["peer"]["median"])
        goals, line = verdict(ratio, peer)
        report.update(ratios=ratio, goals=goals, verdict=line)
    else:
        report.update(
            ratios={},
            goals={},
            verdict="engramdb alone (no --peer-python): no ratios, no verdict",
        )
    report["machine"] = machine(load_start)
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    return report


_ROWS: Final = (
    ("add ms/message (mean)", "add_ms_per_message"),
    ("add p95 ms", "add_p95_ms"),
    ("add CPU ms/message", "add_cpu_ms_per_message"),
    ("first add ms", "first_add_ms"),
    ("search p50 ms", "search_p50_ms"),
    ("search p95 ms", "search_p95_ms"),
    ("search CPU ms (mean)", "search_cpu_ms_mean"),
    ("first search ms", "first_search_ms"),
    ("start-up ms (import + open)", "startup_ms"),
    ("ready ms (start-up + first add)", "ready_ms"),
    ("peak RSS MB", "peak_rss_mb"),
)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def format_report(report: dict[str, Any]) -> str:
    """The report as a table of medians (and ratios, with a peer) ending in the verdict."""
    w = report["workload"]
    sides = report["sides"]
    peer = sides.get("peer")
    names = ["engramdb"] + ([f"{peer['name']} (peer)"] if peer else [])
    head = (
        f"engram bench compare: {w['messages']} LoCoMo turns added one by one (infer=False), "
        f"{w['questions']} questions searched (top {w['top_k']}); {w['threads']} thread(s) each; "
        f"medians of {report['rounds']} round(s)" + (", alternating" if peer else "")
    )
    cols = [*names] + (["engramdb/peer"] if peer else [])
    width = max(len(label) for label, _ in _ROWS)
    lines = [head, "", f"{'':<{width}}  " + "  ".join(f"{c:>16}" for c in cols)]
    for label, key in _ROWS:
        cells = [_cell(sides["engramdb"]["median"][key])]
        if peer:
            cells.append(_cell(peer["median"][key]))
            cells.append(_cell(report["ratios"].get(key)))
        lines.append(f"{label:<{width}}  " + "  ".join(f"{c:>16}" for c in cells))
    lines.append("")
    for key, side in sides.items():
        lines.append(
            f"{side['name']}{' (peer)' if key == 'peer' else ''}: "
            + "; ".join(f"{k}={v}" for k, v in sorted(side["runs"][0].get("settings", {}).items()))
        )
    lines.append(machine_line(report["machine"]))
    lines.append(f"Verdict: {report['verdict']}")
    return "\n".join(lines)
