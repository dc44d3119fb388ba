"""The ``engram`` command: a thin face over :class:`engramdb.Memory`.

Each command opens the store (recording ``actor="cli"`` in history), calls
one library method, prints the result and closes. Validation, defaults and
error messages belong to the library; this package only turns command-line
text into arguments and results into tables or JSON.

Output contract: with ``--json`` stdout carries exactly the library's return
value as JSON and nothing else; messages, prompts and errors go to stderr.
An :class:`~engramdb.errors.EngramError` exits with status 1 and its message
(no traceback); usage errors exit with 2, as Typer does.

Layout, by command group, as the Python API is grouped:

- :mod:`~engramdb.cli._app`: the Typer app, the global options (``--db``,
  ``--config``), shared option types and the plumbing every command uses;
- :mod:`~engramdb.cli.memories`: one command per ``Memory`` method;
- :mod:`~engramdb.cli.demo`: ``engram demo``;
- :mod:`~engramdb.cli.serve`: ``engram serve`` and ``engram mcp``;
- :mod:`~engramdb.cli.keys`: ``engram keys …``;
- :mod:`~engramdb.cli.bench` and :mod:`~engramdb.cli.bench_runs`: ``engram bench …``;
- :mod:`~engramdb.cli.maintain`: ``engram maintain``;
- :mod:`~engramdb.cli.reembed`: ``engram reembed``.

The modules register their commands when imported, in the order
``engram --help`` lists them.
"""

from __future__ import annotations

from engramdb.cli._app import app

# Each module registers its commands on `app` when imported: this order is the
# order of `engram --help` (and of docs/cli.md), so the imports are not sorted.
# isort: off
from engramdb.cli import memories
from engramdb.cli import demo
from engramdb.cli import serve
from engramdb.cli import keys
from engramdb.cli import bench, bench_runs
from engramdb.cli import maintain
from engramdb.cli import reembed

# isort: on

__all__ = ["app", "main"]

_COMMAND_MODULES = (memories, demo, serve, keys, bench, bench_runs, maintain, reembed)
"""The command modules, in registration order (imported for their commands)."""


def main() -> None:
    """Entry point of the ``engram`` command."""
    app(prog_name="engram")
