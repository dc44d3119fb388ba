"""``engram bench``: every benchmark, each a thin face over an ``engramdb_bench`` module.

The benchmarks are a distribution of their own, ``engramdb-bench`` (``benchmarks/``
in the repository), not part of the engramdb wheel. Their commands stay here, so
``engram bench --help`` lists them, and import their module only when run: without
``engramdb-bench`` installed every one says how to install it and exits with 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from engramdb.cli._app import (
    JsonOut,
    _expected_errors,
    _fail,
    _json_arg,
    _load_config,
    _note,
    _print_json,
    _say,
    app,
)
from engramdb.cli.serve import Engine, _server

LOCOMO_ENV = "ENGRAM_LOCOMO"
"""The variable naming the LoCoMo file (``engramdb_bench._locomo.ENV_VAR``; a test checks)."""

NOT_INSTALLED = (
    "the benchmarks are not installed: they are the engramdb-bench distribution; "
    "from a checkout of engramdb: pip install -e benchmarks/"
)
"""What every ``engram bench`` command says when ``engramdb-bench`` cannot be imported."""


@contextmanager
def _benchmarks() -> Iterator[None]:
    """Around an ``engramdb_bench`` import: without it installed, exit 1 saying how to install it.

    Only the distribution itself missing is caught: a module of it failing to
    import (a missing dependency of one benchmark) still raises as it is.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name != "engramdb_bench":
            raise
        _fail(NOT_INSTALLED)


# LoCoMo is CC BY-NC 4.0: never in the package, always named by the user.
_DATA_HELP = "A LoCoMo-format JSON file, e.g. locomo10.json (CC BY-NC 4.0: not shipped)."
LocomoFile = Annotated[
    Path | None,
    typer.Option(
        "--data",
        envvar=LOCOMO_ENV,
        metavar="FILE",
        help=_DATA_HELP,
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]
"""``--data``, else ``$ENGRAM_LOCOMO``: an existing file, checked as the options are read."""
LocomoPath = Annotated[
    Path | None,
    typer.Option("--data", envvar=LOCOMO_ENV, metavar="FILE", help=_DATA_HELP, dir_okay=False),
]
"""``--data``, else ``$ENGRAM_LOCOMO``: the benchmark reports a missing file itself."""


LlmConfigFile = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help=(
            "mem0-shaped JSON config whose 'llm' section names the model (default: the "
            "global --config, else $ENGRAM_LLM)."
        ),
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]
"""``--config`` of the benchmarks that need an LLM."""


def _locomo(data: Path | None) -> Path:
    """The file ``--data`` or ``$ENGRAM_LOCOMO`` names; with neither, a usage error (exit 2)."""
    if data is None:
        with _benchmarks():
            from engramdb_bench._locomo import MISSING_DATA

        _fail(MISSING_DATA, code=2)
    return data


bench_app = typer.Typer(
    name="bench",
    help=(
        "Benchmarks: run one, print its figures, write JSON.\n\n"
        "They are the engramdb-bench distribution, not part of engramdb: from a checkout, "
        "pip install -e benchmarks/."
    ),
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


@bench_app.command("serve")
def bench_serve(
    ctx: typer.Context,
    requests: Annotated[
        int, typer.Option(metavar="N", help="Requests per operation and concurrency level.")
    ] = 200,
    concurrency: Annotated[
        str, typer.Option(metavar="LIST", help="Concurrent clients per level, comma-separated.")
    ] = "1,8,32",
    engine: Annotated[
        Engine, typer.Option(help="The server's engine (see `engram serve --engine`).")
    ] = Engine.ASYNC,
    seed: Annotated[
        int, typer.Option(metavar="N", help="Memories in the searched scope before timing.")
    ] = 500,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the figures to this JSON file.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the figures as JSON instead of a table.")
    ] = False,
) -> None:
    """Requests/s and p50/p95 latency of search and add(infer=False) at 1, 8, 32 clients."""
    _server()
    with _benchmarks():
        from engramdb_bench import serve as bench

    try:
        levels = tuple(int(c) for c in concurrency.split(","))
    except ValueError:
        raise typer.BadParameter(
            f"--concurrency must be numbers like 1,8,32: {concurrency!r}"
        ) from None
    try:
        result = bench.run(
            requests=requests,
            concurrency=levels,
            engine=engine.value,
            seed=seed,
            out=out,
            config_file=ctx.find_root().obj.config_file,
        )
    except (RuntimeError, ValueError) as exc:
        _fail(str(exc))
    if json_out:
        _print_json(result)
        return
    bench.print_report(result)
    if out is not None:
        _note(f"Figures written to {out}")


@bench_app.command("locomo-retrieval")
def bench_locomo_retrieval(
    ctx: typer.Context,
    data: LocomoFile = None,
    keys: Annotated[
        str,
        typer.Option(
            "--keys",
            metavar="KIND",
            help=(
                "What is stored: 'turns' (every turn verbatim, infer=False), 'facts' (the "
                "turns, plus the additive pipeline with a scripted LLM answering LoCoMo's "
                "observation facts of each session) or 'facts-only'."
            ),
        ),
    ] = "turns",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Where to write the JSON report (default: locomo-retrieval-KIND.json here).",
            dir_okay=False,
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help=(
                "Where to write the PNG of recall@k per method (default: "
                "locomo-retrieval-KIND.png here); needs matplotlib (engramdb-bench installs it)."
            ),
            dir_okay=False,
        ),
    ] = None,
    reuse: Annotated[
        bool,
        typer.Option(
            "--reuse",
            help=(
                "Reuse the database ingested by an earlier --reuse run of the same data, keys, "
                "code and embedder (cached under --cache-dir) instead of ingesting afresh."
            ),
        ),
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            metavar="DIR",
            help="Where --reuse keeps ingested databases (default: $ENGRAM_HOME/bench-cache).",
            file_okay=False,
        ),
    ] = None,
    retrieval: Annotated[
        str | None,
        typer.Option(
            "--retrieval",
            metavar="JSON",
            help=(
                "Fusion settings to try, as a JSON object of FusionConfig fields; by default "
                "the --config file's 'retrieval' section, else the library's defaults."
            ),
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON instead of a table.")
    ] = False,
) -> None:
    """LoCoMo retrieval: any@k / all@k / NDCG@10 per category for hybrid, dense and BM25."""
    with _benchmarks():
        from engramdb_bench import locomo_retrieval as bench

    if keys not in ("turns", "facts", "facts-only"):
        raise typer.BadParameter("must be 'turns', 'facts' or 'facts-only'", param_hint="--keys")
    data = _locomo(data)
    fusion = _json_arg("--retrieval", retrieval)
    config = _load_config(ctx.find_root().obj.config_file)
    if fusion is None and isinstance(config, dict):
        fusion = config.get("retrieval")
    embedder = _config_embedder(config)
    out = out or Path(f"locomo-retrieval-{keys}.json")
    plot = plot or Path(f"locomo-retrieval-{keys}.png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _note("matplotlib is not installed (engramdb-bench needs it): no plot")
        plot = None
    _locomo_report(
        lambda: bench.run(
            data,
            keys=keys,  # type: ignore[arg-type]
            out=out,
            plot=plot,
            reuse=reuse,
            cache_dir=cache_dir,
            retrieval=fusion,
            embedder=embedder,
            progress=_note,
        ),
        data,
        json_out,
        bench.format_report,
        f"wrote {out}" + (f" and {plot}" if plot else ""),
    )


def _locomo_report(run: Any, data: Path, json_out: bool, format_report: Any, wrote: str) -> None:
    """Run a LoCoMo benchmark (``run()``), then print its report as JSON or a table."""
    with _expected_errors():
        try:
            report = run()
        except (ValueError, KeyError) as exc:
            _fail(f"{data}: {exc}")
    if json_out:
        _print_json(report)
        return
    _say(format_report(report))
    _note(wrote)


@bench_app.command("locomo-folds")
def bench_locomo_folds(
    ctx: typer.Context,
    data: LocomoFile = None,
    keys: Annotated[
        str,
        typer.Option(
            "--keys",
            metavar="KIND",
            help="What is stored, as for locomo-retrieval: 'turns', 'facts' or 'facts-only'.",
        ),
    ] = "turns",
    grid: Annotated[
        str | None,
        typer.Option(
            "--grid",
            metavar="JSON",
            help=(
                "The candidate fusion settings: a JSON object of FusionConfig field -> list "
                "of values (their product, each on the defaults), or a JSON list of partial "
                "FusionConfig objects; '@FILE' reads the JSON from FILE. The library's "
                "defaults are always a candidate."
            ),
        ),
    ] = None,
    metric: Annotated[
        str,
        typer.Option(
            "--metric",
            metavar="NAME",
            help=(
                "What each fold selects by (hybrid, overall, pooled over the training "
                "conversations): any@5, any@10, any@20, all@5, all@10, all@20 or ndcg@10."
            ),
        ),
    ] = "any@10",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Where to write the JSON report (default: locomo-folds-KIND.json here).",
            dir_okay=False,
        ),
    ] = None,
    reuse: Annotated[
        bool,
        typer.Option(
            "--reuse",
            help=(
                "Reuse the database ingested by an earlier --reuse run (of this benchmark or "
                "locomo-retrieval) of the same data, keys, code and embedder."
            ),
        ),
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            metavar="DIR",
            help="Where --reuse keeps ingested databases (default: $ENGRAM_HOME/bench-cache).",
            file_okay=False,
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON instead of tables.")
    ] = False,
) -> None:
    """LoCoMo retrieval by leave-one-conversation-out: tuned on the rest, judged held out.

    Each fold picks the best grid candidate on the other conversations and
    reports the held-out one; the headline is the mean and spread across folds.
    """
    with _benchmarks():
        from engramdb_bench import locomo_folds as bench

    if keys not in ("turns", "facts", "facts-only"):
        raise typer.BadParameter("must be 'turns', 'facts' or 'facts-only'", param_hint="--keys")
    if metric not in bench.METRICS:
        raise typer.BadParameter(
            f"must be one of {', '.join(bench.METRICS)}", param_hint="--metric"
        )
    if grid is not None and grid.startswith("@"):
        with _expected_errors():
            grid = Path(grid[1:]).read_text(encoding="utf-8")
    spec = _json_arg("--grid", grid)
    try:
        bench.parse_grid(spec)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--grid") from None
    data = _locomo(data)
    embedder = _config_embedder(_load_config(ctx.find_root().obj.config_file))
    out = out or Path(f"locomo-folds-{keys}.json")
    _locomo_report(
        lambda: bench.run(
            data,
            keys=keys,  # type: ignore[arg-type]
            grid=spec,
            metric=metric,
            out=out,
            reuse=reuse,
            cache_dir=cache_dir,
            embedder=embedder,
            progress=_note,
        ),
        data,
        json_out,
        bench.format_report,
        f"wrote {out}",
    )


def _config_embedder(config: object) -> Any:
    """The embedder a ``--config`` file's ``embedder`` section names, else None (the default)."""
    if not isinstance(config, dict) or not isinstance(config.get("embedder"), dict):
        return None
    from engramdb.embedders import make_embedder

    section = config["embedder"]
    with _expected_errors():
        return make_embedder(section.get("provider"), section.get("config"))


@bench_app.command("calibration")
def bench_calibration(
    data: LocomoFile = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Where to write the JSON report (default: calibration.json here).",
            dir_okay=False,
        ),
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """The logistic score curve (exact repeats ~ 1, unrelated ~ 0) per held-out fold."""
    with _benchmarks():
        from engramdb_bench import calibration as bench

    data = _locomo(data)
    out = out or Path("calibration.json")
    with _expected_errors():
        try:
            report = bench.run(data, out=out, progress=_note)
        except (ValueError, KeyError) as exc:
            _fail(f"{data}: {exc}")
    if json_out:
        _print_json(report)
        return
    _say(bench.format_report(report))
    _note(f"wrote {out}")


@bench_app.command("retrieval")
def bench_retrieval(
    ctx: typer.Context,
    shapes: Annotated[
        str,
        typer.Option(
            "--shapes",
            metavar="LIST",
            help=(
                "Comma-separated shapes: 'facts' (personal facts, one add each), 'locomo' "
                "(LoCoMo turns verbatim), 'updates' (knowledge-update facts, linked) and "
                "'extracted' (LoCoMo observation facts); default those four. 'owner' (only "
                "when named): the personal facts in the first person only, each user's "
                "first name as user_id."
            ),
        ),
    ] = "facts,locomo,updates,extracted",
    top_k: Annotated[
        int, typer.Option("--top-k", metavar="K", min=1, help="Memories retrieved per question.")
    ] = 30,
    folds: Annotated[
        int,
        typer.Option(
            "--folds",
            metavar="K",
            min=1,
            help="Leave-one-fold-out folds per shape (users or conversations, round-robin).",
        ),
    ] = 5,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help=(
                "A retrieval config JSON: a mem0-shaped config (its 'retrieval' and "
                "'embedder' sections) or a bare retrieval section of FusionConfig fields "
                "(default: the global --config's, else the library's defaults)."
            ),
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Where to write the JSON report (default: retrieval.json here).",
            dir_okay=False,
        ),
    ] = None,
    dump: Annotated[
        Path | None,
        typer.Option(
            "--dump",
            metavar="FILE",
            help=(
                "Write one JSON line per question: shape, fold, gold ids and every hit's id, "
                "rank, score, score_details and is_gold."
            ),
            dir_okay=False,
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Write a reliability diagram (score against observed precision) as PNG.",
            dir_okay=False,
        ),
    ] = None,
    mem0: Annotated[
        bool,
        typer.Option(
            "--mem0",
            help=(
                "Also run mem0 on the facts shape (needs $ENGRAM_MEM0_BENCH_PYTHON: "
                "scripts/mem0-bench-venv; skipped without it)."
            ),
        ),
    ] = False,
    data: LocomoPath = None,
    users: Annotated[
        int | None, typer.Option(metavar="N", min=1, help="facts: only the first N users.")
    ] = None,
    conversations: Annotated[
        int | None,
        typer.Option(metavar="N", min=1, help="locomo, extracted, updates: the first N only."),
    ] = None,
    questions: Annotated[
        int | None,
        typer.Option(metavar="N", min=1, help="Only the first N questions per user/conversation."),
    ] = None,
    reuse: Annotated[
        bool,
        typer.Option("--reuse", help="locomo: reuse the ingest cached by an earlier --reuse run."),
    ] = False,
    json_out: JsonOut = False,
) -> None:
    """Retrieval on several shapes: P@1, MRR, any/all@10, score calibration, per fold."""
    with _benchmarks():
        from engramdb_bench import retrieval as bench

    chosen = [s.strip() for s in shapes.split(",") if s.strip()]
    known = (*bench.SHAPES, *bench.OPT_IN_SHAPES)
    bad = [s for s in chosen if s not in known]
    if bad or not chosen:
        raise typer.BadParameter(
            f"must be a comma-separated list of {', '.join(known)}", param_hint="--shapes"
        )
    if ("locomo" in chosen or "extracted" in chosen) and data is None:
        data = _locomo(data)
    cfg = _load_config(config or ctx.find_root().obj.config_file)
    if cfg is not None and not isinstance(cfg, dict):
        _fail(f"{config}: a retrieval config must be a JSON object")
    if config is None and isinstance(cfg, dict):
        cfg = {k: v for k, v in cfg.items() if k in ("retrieval", "embedder")}
    embedder = _config_embedder(cfg)
    if isinstance(cfg, dict):
        cfg = {k: v for k, v in cfg.items() if k != "embedder"} or None
    out = out or Path("retrieval.json")
    with _expected_errors():
        try:
            report = bench.run(
                shapes=chosen,
                top_k=top_k,
                folds=folds,
                config=cfg,
                out=out,
                dump=dump,
                plot=plot,
                mem0=mem0,
                locomo=data,
                users=users,
                conversations=conversations,
                questions=questions,
                reuse=reuse,
                embedder=embedder,
                progress=_note,
            )
        except (FileNotFoundError, ValueError, KeyError, bench.RetrievalError) as exc:
            _fail(str(exc))
    if json_out:
        _print_json(report)
        return
    _say(bench.format_report(report))
    _note(f"wrote {out}" + (f", {dump}" if dump else "") + (f", {plot}" if plot else ""))
