"""``engram reembed``: move the store to the configured embedder (:meth:`Memory.reembed`).

The configured embedder is the one every other command uses: the
``embedder`` section of ``--config`` (the default local model without one).
Opening the store binds nothing, so a store bound to another model opens
here like anywhere else; ``Memory.reembed`` re-embeds it before anything
would check the binding.
"""

from __future__ import annotations

from typing import Annotated

import typer

from engramdb.cli._app import JsonOut, _api_default, _call, _note, _print_json, _say, app
from engramdb.cli.maintain import _progress
from engramdb.memory import Memory
from engramdb.reembed import ReembedReport
from engramdb.retag import RetagReport

_PHASE_LABELS = {
    "embed": "Embedding",
    "catch_up": "Embedding what changed meanwhile",
    "write": "Swapping vectors and binding",
}


@app.command("reembed")
def reembed_cmd(
    ctx: typer.Context,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Say what would be re-embedded; change nothing."),
    ] = False,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            min=1,
            metavar="N",
            help="Memories read and embedded per batch.",
        ),
    ] = _api_default(Memory.reembed, "batch_size"),
    json_out: JsonOut = False,
) -> None:
    """Move the store to the configured embedder: re-embed every memory, then rebind.

    A store is bound to the embedding model that wrote its vectors, and
    other commands refuse a different one. This re-embeds every memory
    (deleted ones too, so restore keeps working; every user, agent and run)
    with the embedder of the configuration (--config; the default local model
    without one), then swaps all vectors and the binding in one transaction.
    Until that commit the store stays fully on the old model: an error or
    Ctrl-C changes nothing. Memories written meanwhile by a process on the
    old model are embedded again before the swap; such processes are refused
    afterwards and need the new configuration. The new vectors are held in
    memory until the swap (4 x dim bytes per memory). A store already bound
    to the configured embedder is left as it is (exit status 0).

    Typical use: `engram --config new.json reembed --dry-run`, then the same
    without --dry-run, then run everything with new.json.
    """

    def run(m: Memory) -> ReembedReport:
        with _progress(json_out, _PHASE_LABELS) as progress:
            return m.reembed(batch_size=batch_size, dry_run=dry_run, progress=progress)

    report = _call(ctx, run)
    if json_out:
        _print_json(report.to_dict())
        return
    _print_report(report)


def _model(name: str | None, dim: int | None) -> str:
    return f"{name!r} (dim {dim})"


def _print_report(report: ReembedReport) -> None:
    new = _model(report.new_model, report.new_dim)
    old = _model(report.old_model, report.old_dim)
    if report.status == "already_bound":
        _say(f"The store is already bound to the configured embedder {new}; nothing to do.")
    elif report.status == "unbound":
        _say(
            f"The store holds no vectors yet; the configured embedder {new} is bound on first "
            "use. Nothing to do."
        )
    elif report.status == "would_reembed":
        megabytes = report.count * report.new_dim * 4 / 1e6
        _say(
            f"Would re-embed {report.count} memories (deleted ones included) from {old} to "
            f"{new}, then bind the store to {report.new_model!r} (about {megabytes:.1f} MB of "
            "new vectors held in memory until the swap)."
        )
        _note("Dry run: nothing was changed.")
    else:
        _say(
            f"Re-embedded {report.count} memories (deleted ones included) from {old} to {new} "
            f"in {report.seconds:.1f} s; the store is now bound to {report.new_model!r}."
        )
        if report.caught_up:
            _say(
                f"{report.caught_up} memories written meanwhile were embedded again "
                f"({report.rounds} attempts to swap)."
            )


@app.command("reindex-attributes")
def reindex_attributes_cmd(
    ctx: typer.Context,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Count what would change; change nothing."),
    ] = False,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            min=1,
            metavar="N",
            help="Memories read, and changes written in one transaction, per batch.",
        ),
    ] = _api_default(Memory.reindex_attributes, "batch_size"),
    json_out: JsonOut = False,
) -> None:
    """Read every memory's attribute terms again with this release's classifier.

    A memory's attribute terms (@home, @vehicle, ...) are read from its vector
    by the classifier engramdb ships, when it is stored. After upgrading to a
    release with a retrained classifier, run this once: memories stored before
    keep the old reading until then. No embedding: the stored vectors are read
    again. Each batch is one transaction; stopping half-way leaves every memory
    valid (run it again to finish), and a memory written meanwhile keeps its
    own terms.
    """

    def run(m: Memory) -> RetagReport:
        return m.reindex_attributes(batch_size=batch_size, dry_run=dry_run)

    report = _call(ctx, run)
    if json_out:
        _print_json(report.to_dict())
        return
    if report.reason is not None:
        _say(f"Nothing to do: {report.reason}.")
        return
    verb = "Would rewrite" if report.dry_run else "Rewrote"
    _say(
        f"{verb} the attribute terms of {report.changed} of {report.read} memories "
        f"(deleted ones included) with the classifier {report.classifier}."
    )
    if report.skipped:
        _say(f"{report.skipped} memories written meanwhile kept their own terms.")
    if report.dry_run:
        _note("Dry run: nothing was changed.")
