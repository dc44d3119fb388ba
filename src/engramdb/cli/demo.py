"""``engram demo``: a bundled conversation, stored and searched offline."""

from __future__ import annotations

import json
import shlex
import tempfile
import time
from contextlib import ExitStack
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from engramdb.cli._app import _expected_errors, _open, _print_json, _say, _stdout, _when, app


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
