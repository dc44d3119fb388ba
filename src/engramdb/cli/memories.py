"""The memory commands, one per :class:`engramdb.Memory` method.

``add``, ``search``, ``list``, ``get``, ``update``, ``delete``, ``restore``,
``history``, ``delete-all``, ``purge``, ``export`` and ``import``: each opens the
store, calls one library method and prints its result (see :mod:`engramdb.cli`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

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
    _stdout,
    _when,
    app,
)
from engramdb.errors import MemoryNotFoundError
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
    json_out: JsonOut = False,
) -> None:
    """Erase for good, with history and source messages; not undoable (Memory.purge)."""
    scope = _describe_scope(user_id, agent_id, run_id)
    target = f"memory {memory_id!r}" if memory_id else f"every memory of {scope}"
    # Ask only when there is something to erase; otherwise the library's error says why.
    if (memory_id or scope) and not yes:
        _confirm(f"Erase {target} permanently, with its history? This cannot be undone.")
    result = _call(
        ctx,
        lambda m: m.purge(memory_id, user_id=user_id, agent_id=agent_id, run_id=run_id),
    )
    if json_out:
        _print_json(result)
        return
    _say(f"Purged {result['purged']} memories.")


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


@app.command("import")
def import_(
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
    """Load an export into an empty store (Memory.import_jsonl)."""
    count = _call(ctx, lambda m: m.import_jsonl(file))
    if json_out:
        _print_json(count)
        return
    _say(f"Imported {count} memories.")
