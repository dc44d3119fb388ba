r"""LoCoMo retrieval with and without query rewriting (``retrieval.query_rewrite``).

Needs an OpenAI-compatible LLM server (e.g. llama-server with the CI's local
model on 127.0.0.1:8091) and the LoCoMo dev file. Every LLM reply is kept in
the benchmarks' reply cache (``engramdb_bench._llm.CachedLLM`` under
``--llm-cache``, keyed by the request), so a rerun, or another variant of the
lever's settings, costs no LLM time; the latency reported for a cached reply is
the one measured when it was first asked.

Run::

    .venv/bin/python scripts/bench_query_rewrite.py --data locomo-dev.json \\
        --base-url http://127.0.0.1:8091/v1 --sample 4 --out /tmp/rewrite.json

Categories: every multi-hop question (category 1) of every conversation, and
every ``--sample``-th question of categories 2-4 (evenly through each
conversation's list). Each variant in ``--variants`` (a JSON list of
``query_rewrite`` configs; ``null`` is the lever off) is scored per
conversation and category: any@10, all@10, ndcg@10; the LLM time per search
is reported separately from the search time without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engramdb.embedders import make_embedder
from engramdb.llms import make_llm
from engramdb.memory import Memory
from engramdb.search import FusionConfig
from engramdb_bench._llm import CachedLLM
from engramdb_bench._locomo import data_path
from engramdb_bench.locomo_retrieval import (
    CATEGORIES,
    _QueryVectors,
    default_cache_dir,
    embed_questions,
    ingest_cached,
    load,
    score_ranking,
)

FIGS = ("any@10", "all@10", "ndcg@10")


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {"n": 0}
    out = {f: round(float(np.mean([r[f] for r in rows])), 4) for f in FIGS}
    out["n"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the variants and print the report as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path)
    parser.add_argument("--base-url", default="http://127.0.0.1:8091/v1")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    parser.add_argument(
        "--llm-cache",
        type=Path,
        default=default_cache_dir() / "llm-replies",
        help="where LLM replies are kept (default: $ENGRAM_HOME/bench-cache/llm-replies)",
    )
    parser.add_argument("--sample", type=int, default=4, help="every n-th question of cats 2-4")
    parser.add_argument("--multi-hop-only", action="store_true")
    parser.add_argument(
        "--variants",
        default="[null, {}]",
        help="JSON list of query_rewrite configs (null: off)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    path = data_path(args.data)
    raw = path.read_bytes()
    convs = load(path)
    base = make_embedder("local", {})
    wrapped = _QueryVectors(base)
    inner = make_llm(
        "llamacpp",
        {
            "model": args.model,
            "base_url": args.base_url,
            "temperature": 0,
            "timeout": 120,
            "max_retries": 0,
        },
    )
    llm = CachedLLM(inner, args.llm_cache)
    variants: list[Mapping[str, Any] | None] = json.loads(args.variants)
    picked = []
    for conv in convs:
        others = 0
        for q in conv.questions:
            if q.category == 1:
                picked.append((conv, q))
            elif not args.multi_hop_only:
                if others % max(1, args.sample) == 0:
                    picked.append((conv, q))
                others += 1

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    say(f"{len(picked)} questions")
    embed_questions([q for _, q in picked], base, wrapped)
    report: dict[str, Any] = {"model": args.model, "questions": len(picked), "variants": []}
    with tempfile.TemporaryDirectory(prefix="rewrite-bench-") as tmp:
        db = Path(tmp) / "locomo.db"
        sources, _ = ingest_cached(
            raw,
            convs,
            "turns",
            db,
            embedder=wrapped,
            model=base.model,
            fusion=FusionConfig(),
            config={},
            reuse=True,
            progress=say,
        )
        for variant in variants:
            fusion = FusionConfig.model_validate({"query_rewrite": variant})
            config = {"retrieval": fusion.model_dump()}
            rows: list[tuple[str, int, dict[str, float]]] = []
            search_s: list[float] = []
            llm_s: list[float] = []
            asked = 0
            with Memory(db, config=config, embedder=wrapped, llm=llm) as memory:
                for n, (conv, q) in enumerate(picked, 1):
                    before = llm.stats()
                    t0 = time.perf_counter()
                    found = memory.search(q.text, user_id=conv.sample_id, top_k=10)["results"]
                    took = time.perf_counter() - t0
                    after = llm.stats()
                    # The LLM time a search cost when first asked (a cached reply keeps it);
                    # only a reply really asked for now took wall time here.
                    spent = float(after["latency_s"]) - float(before["latency_s"])
                    asked += after["calls"] > before["calls"]
                    llm_s.append(spent)
                    search_s.append(
                        took - (spent if after["cache_misses"] > before["cache_misses"] else 0.0)
                    )
                    ids = sources[conv.sample_id]
                    hits = [ids.get(r["id"], []) for r in found]
                    rows.append((conv.sample_id, q.category, score_ranking(hits, q.evidence)))
                    if n % 50 == 0:
                        say(f"{variant}: {n}/{len(picked)}")
            per: dict[str, Any] = {}
            for conv in convs:
                per[conv.sample_id] = {
                    CATEGORIES[c]: _mean(
                        [r for s, cc, r in rows if s == conv.sample_id and cc == c]
                    )
                    for c in CATEGORIES
                }
            entry = {
                "query_rewrite": variant,
                "by_category": {
                    CATEGORIES[c]: _mean([r for _, cc, r in rows if cc == c]) for c in CATEGORIES
                },
                "others": _mean([r for _, cc, r in rows if cc != 1]),
                "by_conversation": per,
                "llm_calls": asked,
                "llm_s_per_search": round(float(np.mean(llm_s)), 3),
                "llm_s_p50_when_asked": round(float(np.median([s for s in llm_s if s] or [0])), 3),
                "search_ms_p50_without_llm": round(float(np.median(search_s)) * 1000, 2),
            }
            report["variants"].append(entry)
            say(json.dumps({k: entry[k] for k in entry if k != "by_conversation"}))
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text, "utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
