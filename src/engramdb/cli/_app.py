"""The ``engram`` app itself: global options, shared option types and plumbing.

Every command module (:mod:`~engramdb.cli.memories`, :mod:`~engramdb.cli.demo`,
:mod:`~engramdb.cli.serve`, :mod:`~engramdb.cli.keys`, :mod:`~engramdb.cli.bench`)
registers its commands on :data:`app` and uses the helpers here, so that every
command opens the store, reports errors and prints output the same way.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from engramdb import __version__
from engramdb.errors import EngramError
from engramdb.memory import Memory

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


def _fail(message: str, code: int = 1) -> NoReturn:
    """Print ``message`` in red on stderr and exit with status ``code`` (1: an error)."""
    # soft_wrap: a long message stays one line, so it can be grepped and copied.
    _stderr().print(Text(f"Error: {message}", style="red"), soft_wrap=True)
    raise typer.Exit(code)


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
    scored = any(item.get("score") is not None for item in items)
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
            row.append(f"{item.get('score') or 0.0:.3f}")
        explain = item.get("score_details")
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
