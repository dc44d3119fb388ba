"""The memory commands, one per :class:`engramdb.Memory` method.

``add``, ``search``, ``list``, ``get``, ``update``, ``delete``, ``restore``,
``history``, ``delete-all``, ``purge``, ``export`` and ``import`` (``import FILE``,
and ``import mem0``, which reads a mem0 store through :mod:`engramdb.importers.mem0`):
each opens the store, calls one library method and prints its result (see
:mod:`engramdb.cli`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from engramdb.cli._app import (
    AgentId,
    Filters,
    JsonOut,
    MemoryId,
    MetadataOpt,
    Reason,
    RunId,
    UserId,
    Yes,
    _api_default,
    _call,
    _confirm,
    _describe_scope,
    _fail,
    _fields_table,
    _json_arg,
    _memories_table,
    _memory_cell,
    _note,
    _print_json,
    _say,
    _stderr,
    _stdout,
    _when,
    app,
)
from engramdb.errors import MemoryNotFoundError
from engramdb.importers.mem0 import (
    DEFAULT_COLLECTION,
    Mem0ImportReport,
    Mem0Store,
    Progress,
    default_history_db,
    import_mem0,
)
from engramdb.memory import Memory


@app.command()
def add(
    ctx: typer.Context,
    text: Annotated[
        str | None,
        typer.Argument(metavar="TEXT", help="The text to remember (stored as one user message)."),
    ] = None,
    messages_file: Annotated[
        typer.FileText | None,
        typer.Option(
            "--messages-file",
            "-f",
            metavar="FILE",
            help=(
                "A JSON file holding a message dict or a list of them "
                '({"role": "user", "content": "..."}); "-" reads stdin.'
            ),
            encoding="utf-8",
        ),
    ] = None,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    metadata: MetadataOpt = None,
    timestamp: Annotated[
        str | None,
        typer.Option(
            metavar="TIME", help="When the messages were said, ISO-8601: 2024-05-01T14:30:00Z."
        ),
    ] = None,
    infer: Annotated[
        bool,
        typer.Option(
            help="Let the configured LLM extract facts; without one, messages are stored verbatim."
        ),
    ] = _api_default(Memory.add, "infer"),
    json_out: JsonOut = False,
) -> None:
    """Remember a text or a conversation (Memory.add)."""
    if (text is None) == (messages_file is None):
        raise typer.BadParameter(
            "give the text to remember as TEXT or with --messages-file, exactly one of them"
        )
    if messages_file is not None:
        try:
            messages: Any = json.load(messages_file)
        except json.JSONDecodeError as exc:
            _fail(f"--messages-file is not valid JSON: {exc.msg} (line {exc.lineno})")
    else:
        messages = text
    meta = _json_arg("--metadata", metadata)
    result = _call(
        ctx,
        lambda m: m.add(
            messages,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            metadata=meta,
            timestamp=timestamp,
            infer=infer,
        ),
    )
    if json_out:
        _print_json(result)
        return
    table = Table(title=f"{len(result['results'])} result(s)", title_justify="left")
    table.add_column("event", no_wrap=True)
    table.add_column("memory / id", min_width=36, overflow="fold")
    for item in result["results"]:
        style = "green" if item["event"] == "ADD" else "yellow"
        table.add_row(Text(item["event"], style=style), _memory_cell(item))
    _stdout().print(table)


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(metavar="QUERY", help="What to look for, in any language.")
    ],
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    top_k: Annotated[
        int, typer.Option("--top-k", "-k", metavar="N", help="How many results at most.")
    ] = _api_default(Memory.search, "top_k"),
    threshold: Annotated[
        float | None,
        typer.Option(metavar="SCORE", help="Drop results scoring below this (0 to 1)."),
    ] = None,
    filters: Filters = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show the parts each score is made of.")
    ] = False,
    json_out: JsonOut = False,
) -> None:
    """Find the memories most relevant to a query, best first (Memory.search)."""
    parsed = _json_arg("--filters", filters)
    result = _call(
        ctx,
        lambda m: m.search(
            query,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            top_k=top_k,
            threshold=threshold,
            filters=parsed,
            explain=explain,
        ),
    )
    if json_out:
        _print_json(result)
        return
    hits = result["results"]
    if not hits:
        _note("No matching memories.")
        return
    _stdout().print(_memories_table(hits, title=f"{len(hits)} result(s) for {query!r}"))


@app.command("list")
def list_(
    ctx: typer.Context,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    filters: Filters = None,
    top_k: Annotated[
        int, typer.Option("--top-k", "-k", metavar="N", help="How many memories at most.")
    ] = _api_default(Memory.get_all, "top_k"),
    offset: Annotated[
        int, typer.Option(metavar="N", help="Skip this many memories first (for paging).")
    ] = _api_default(Memory.get_all, "offset"),
    json_out: JsonOut = False,
) -> None:
    """List the memories of a scope, newest first (Memory.get_all)."""
    parsed = _json_arg("--filters", filters)
    result = _call(
        ctx,
        lambda m: m.get_all(
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            filters=parsed,
            top_k=top_k,
            offset=offset,
        ),
    )
    if json_out:
        _print_json(result)
        return
    items = result["results"]
    if not items:
        _note("No memories in this scope.")
        return
    first = offset + 1
    title = f"memories {first}-{offset + len(items)}"
    _stdout().print(_memories_table(items, title=title))


@app.command()
def get(
    ctx: typer.Context,
    memory_id: MemoryId,
    json_out: JsonOut = False,
) -> None:
    """Show one memory by id (Memory.get); exits with 1 if there is none."""
    item = _call(ctx, lambda m: m.get(memory_id))
    if json_out:
        _print_json(item)
    if item is None:
        # The library answers None rather than raising, as mem0 does; a shell
        # script still needs a failing status to notice.
        _fail(f"memory {memory_id!r} not found (or deleted; see `engram history {memory_id}`)")
    if not json_out:
        _stdout().print(_fields_table(item))


@app.command()
def update(
    ctx: typer.Context,
    memory_id: MemoryId,
    text: Annotated[
        str | None, typer.Option("--text", "-t", metavar="TEXT", help="The new text.")
    ] = None,
    metadata: Annotated[
        str | None,
        typer.Option(
            "--metadata",
            "-m",
            metavar="JSON",
            help="New metadata as a JSON object; replaces the old one.",
        ),
    ] = None,
    reason: Reason = None,
    json_out: JsonOut = False,
) -> None:
    """Change a memory's text and/or metadata; history keeps the old version (Memory.update)."""
    meta = _json_arg("--metadata", metadata)
    result = _call(ctx, lambda m: m.update(memory_id, text=text, metadata=meta, reason=reason))
    if json_out:
        _print_json(result)
        return
    _note(str(result["message"]))
    _stdout().print(_fields_table({k: v for k, v in result.items() if k != "message"}))


@app.command()
def delete(
    ctx: typer.Context,
    memory_id: MemoryId,
    reason: Reason = None,
    json_out: JsonOut = False,
) -> None:
    """Delete a memory; `engram restore ID` brings it back (Memory.delete)."""
    result = _call(ctx, lambda m: m.delete(memory_id, reason=reason))
    if json_out:
        _print_json(result)
        return
    _say(f"Deleted {result['id']}. Undo with: engram restore {result['id']}")


@app.command()
def restore(
    ctx: typer.Context,
    memory_id: MemoryId,
    version: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="The version to return to (see `engram history`); default: the previous.",
        ),
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Undo a delete or an update (Memory.restore)."""
    item = _call(ctx, lambda m: m.restore(memory_id, version=version))
    if json_out:
        _print_json(item)
        return
    _note(f"Restored {item['id']}.")
    _stdout().print(_fields_table(item))


@app.command()
def history(
    ctx: typer.Context,
    memory_id: MemoryId,
    json_out: JsonOut = False,
) -> None:
    """Show every change of a memory, oldest first (Memory.history)."""

    def changes(m: Memory) -> list[dict[str, Any]]:
        # The library answers [] for an unknown id (as mem0 does); a person asked
        # about one memory: say it is not there.
        events = m.history(memory_id)
        if not events:
            raise MemoryNotFoundError(memory_id)
        return events

    events = _call(ctx, changes)
    if json_out:
        _print_json(events)
        return
    table = Table(title=f"history of {memory_id}", title_justify="left")
    table.add_column("version", justify="right", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("at", no_wrap=True)
    table.add_column("actor", no_wrap=True)
    table.add_column("before")
    table.add_column("after")
    table.add_column("reason")
    for event in events:
        table.add_row(
            str(event["version"]),
            event["event"],
            _when(event["created_at"]),
            Text(str(event["actor"] or "")),
            Text(str(event["old_memory"] or "")),
            Text(str(event["new_memory"] or "")),
            Text(str(event["reason"] or "")),
        )
    _stdout().print(table)


@app.command("delete-all")
def delete_all(
    ctx: typer.Context,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    yes: Yes = False,
    json_out: JsonOut = False,
) -> None:
    """Delete every memory of a scope; each stays restorable (Memory.delete_all)."""
    scope = _describe_scope(user_id, agent_id, run_id)
    # With no scope the library refuses; asking first would only delay its message.
    if scope and not yes:
        _confirm(f"Delete every memory of {scope}?")
    result = _call(ctx, lambda m: m.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id))
    if json_out:
        _print_json(result)
        return
    _say(f"Deleted {result['deleted']} memories of {scope}.")


@app.command()
def purge(
    ctx: typer.Context,
    memory_id: Annotated[
        str | None, typer.Argument(metavar="ID", help="One memory to erase; or give a scope.")
    ] = None,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    yes: Yes = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Erase nothing: list the memories, messages and failure records that would go.",
        ),
    ] = False,
    json_out: JsonOut = False,
) -> None:
    """Erase for good, with history and source messages; not undoable (Memory.purge)."""
    scope = _describe_scope(user_id, agent_id, run_id)
    target = f"memory {memory_id!r}" if memory_id else f"every memory of {scope}"
    # Ask only when there is something to erase; otherwise the library's error says why.
    if (memory_id or scope) and not yes and not dry_run:
        _confirm(f"Erase {target} permanently, with its history? This cannot be undone.")
    result = _call(
        ctx,
        lambda m: m.purge(
            memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id, dry_run=dry_run
        ),
    )
    if json_out:
        _print_json(result)
        return
    if not dry_run:
        _say(f"Purged {result['purged']} memories.")
        return
    _say(
        f"Would purge {result['purged']} memories"
        + (
            f", {result['messages']} raw messages, {result['failures']} extraction failure "
            f"records and {result['entities']} entities, and re-index {result['reindexed']} "
            "other memories"
            if "messages" in result
            else ""
        )
        + ". Nothing was erased."
    )
    for mid in result["memory_ids"]:
        typer.echo(mid)


@app.command()
def export(
    ctx: typer.Context,
    file: Annotated[
        typer.FileTextWrite,
        typer.Argument(
            metavar="FILE",
            help='Where to write the JSONL export; "-" (the default) is stdout.',
            encoding="utf-8",
            # Lazy: an existing file is not truncated when opening the store fails.
            lazy=True,
        ),
    ] = "-",  # type: ignore[assignment]  # Typer opens the file named by this string
    json_out: JsonOut = False,
) -> None:
    """Write the whole store as JSON lines: memories, history, vectors (Memory.export_jsonl)."""
    to_stdout = file.name in ("-", "<stdout>")
    if to_stdout and json_out:
        raise typer.BadParameter("--json needs a FILE: stdout already carries the export")
    count = _call(ctx, lambda m: m.export_jsonl(file))
    if json_out:
        _print_json(count)
        return
    where = "stdout" if to_stdout else file.name
    _note(f"Exported {count} memories to {where}.")


class _ImportGroup(TyperGroup):
    """``engram import FILE`` stays the export's import; ``engram import mem0 ...`` reads mem0."""

    # ctx: Typer's own (vendored) click Context, which it does not export.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # Anything but a subcommand's name (or --help) is the old form: FILE and
        # its options. A file that is named like a subcommand is ./mem0.
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["file", *args]
        return super().parse_args(ctx, args)


import_app = typer.Typer(
    name="import",
    cls=_ImportGroup,
    subcommand_metavar="FILE | mem0 [OPTIONS]",
    help=(
        "Load data into the store: `engram import FILE` reads an `engram export` "
        "(Memory.import_jsonl); `engram import mem0 ...` brings a mem0 store over."
    ),
    no_args_is_help=True,
)
app.add_typer(import_app)


@import_app.command("file")
def import_file(
    ctx: typer.Context,
    file: Annotated[
        typer.FileText,
        typer.Argument(
            metavar="FILE",
            help='A JSONL file written by `engram export`; "-" reads stdin.',
            encoding="utf-8",
        ),
    ],
    json_out: JsonOut = False,
) -> None:
    """Load an export into an empty store (Memory.import_jsonl); also `engram import FILE`."""
    count = _call(ctx, lambda m: m.import_jsonl(file))
    if json_out:
        _print_json(count)
        return
    _say(f"Imported {count} memories.")


@import_app.command("mem0")
def import_mem0_(
    ctx: typer.Context,
    qdrant_path: Annotated[
        Path | None,
        typer.Option(
            "--qdrant-path",
            metavar="DIR",
            help="mem0's local Qdrant folder (its qdrant config's `path`; default /tmp/qdrant).",
            file_okay=False,
        ),
    ] = None,
    faiss_path: Annotated[
        Path | None,
        typer.Option(
            "--faiss-path",
            metavar="DIR",
            help="mem0's FAISS folder, holding <collection>.json (or .pkl) and .faiss.",
            file_okay=False,
        ),
    ] = None,
    pgvector_dsn: Annotated[
        str | None,
        typer.Option(
            "--pgvector-dsn",
            metavar="DSN",
            help="The PostgreSQL database of mem0's pgvector store (postgresql://...).",
        ),
    ] = None,
    collection: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            help="mem0's collection_name: the Qdrant collection, FAISS file stem or table.",
        ),
    ] = DEFAULT_COLLECTION,
    history_db: Annotated[
        Path | None,
        typer.Option(
            "--history-db",
            metavar="FILE",
            help=(
                "mem0's history file (its history_db_path); default "
                "$MEM0_DIR/history.db or ~/.mem0/history.db when it exists."
            ),
            dir_okay=False,
        ),
    ] = None,
    no_history: Annotated[
        bool,
        typer.Option("--no-history", help="Read no history: each memory gets one ADD event."),
    ] = False,
    keep_vectors: Annotated[
        bool,
        typer.Option(
            "--keep-vectors",
            help=(
                "Keep mem0's vectors instead of embedding again: only when mem0 used "
                "engramdb's embedding model (the dimensions are checked)."
            ),
        ),
    ] = False,
    skip_invalid: Annotated[
        bool,
        typer.Option(
            "--skip-invalid",
            help="Leave out memories that cannot be imported (listed) instead of failing.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Read and check everything, report, write nothing."),
    ] = False,
    json_out: JsonOut = False,
) -> None:
    """Bring a mem0 store over: memories with ids, scopes, metadata, times and history."""
    given = [
        store
        for store, where in (
            (Mem0Store("qdrant", str(qdrant_path), collection), qdrant_path),
            (Mem0Store("faiss", str(faiss_path), collection), faiss_path),
            (Mem0Store("pgvector", str(pgvector_dsn), collection), pgvector_dsn),
        )
        if where is not None
    ]
    if len(given) != 1:
        raise typer.BadParameter(
            "name mem0's vector store with exactly one of --qdrant-path, --faiss-path "
            "or --pgvector-dsn (to import an export file named mem0, write ./mem0)"
        )
    if history_db is not None and no_history:
        raise typer.BadParameter("give --history-db or --no-history, not both")
    if history_db is None and not no_history:
        default = default_history_db()
        if default.is_file():
            history_db = default
            _note(f"Reading mem0's history from {default} (--history-db names another).")

    def run(m: Memory) -> Mem0ImportReport:
        with _import_progress(json_out) as progress:
            return import_mem0(
                m,
                given[0],
                history_db=history_db,
                keep_vectors=keep_vectors,
                skip_invalid=skip_invalid,
                dry_run=dry_run,
                on_progress=progress,
            )

    report = _call(ctx, run)
    if json_out:
        _print_json(report.as_dict())
        return
    verb = "Would import" if dry_run else "Imported"
    vectors = {
        "kept": "mem0's vectors kept",
        "re-embedded": f"embedded with {report.embedder}",
        "not computed": "vectors not computed (dry run)",
    }[report.vectors]
    _say(
        f"{verb} {report.memories} memories and {report.history_events} history events "
        f"from the {report.source}; {vectors}."
    )
    if report.skipped:
        # One line each, unwrapped: the ids are for copying and the lines for grep.
        _say(f"Not imported ({len(report.skipped)}):")
        for skipped in report.skipped:
            _say(f"  {skipped.id}: {skipped.reason}")
    for note in report.notes:
        _note(f"Note: {note}.")
    if dry_run:
        _note("Dry run: nothing was written.")


@contextmanager
def _import_progress(quiet: bool) -> Iterator[Progress | None]:
    """A progress bar on stderr (a terminal only), fed by import_mem0's ``on_progress``."""
    console = _stderr()
    if quiet or not console.is_terminal:
        yield None
        return
    labels = {"embedding": "Embedding", "writing": "Writing"}
    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update
