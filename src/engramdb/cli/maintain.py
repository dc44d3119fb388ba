"""``engram maintain``: the upkeep jobs of :mod:`engramdb.maintain`.

Expires memories past their expiry, lists near-duplicate clusters for review
and, with ``--merge`` and an LLM configured, stores merged memories that
supersede each cluster; proposes derived supersessions (no LLM), which
``--apply`` writes as reversible links (``--undo RUN`` takes a run's back);
``--dry-run`` reports it all and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from engramdb.cli._app import (
    AgentId,
    JsonOut,
    RunId,
    UserId,
    _api_default,
    _call,
    _describe_scope,
    _note,
    _print_json,
    _say,
    _stderr,
    _stdout,
    _when,
    app,
)
from engramdb.maintain import MaintenanceReport, ProgressCallback, maintain
from engramdb.memory import Memory

_PHASE_LABELS = {
    "read": "Reading memories",
    "expire": "Expiring",
    "embed": "Embedding",
    "compare": "Comparing",
    "merge": "Merging (LLM)",
    "derive": "Deriving supersessions",
    "link": "Linking",
}


@app.command("maintain")
def maintain_cmd(
    ctx: typer.Context,
    user_id: UserId = None,
    agent_id: AgentId = None,
    run_id: RunId = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Report what every job would do; change nothing."),
    ] = False,
    no_expire: Annotated[
        bool,
        typer.Option("--no-expire", help="Skip the expire job (memories past expires_at)."),
    ] = False,
    no_duplicates: Annotated[
        bool,
        typer.Option("--no-duplicates", help="Skip looking for near-duplicate clusters."),
    ] = False,
    merge: Annotated[
        bool,
        typer.Option(
            "--merge",
            help=(
                "Ask the configured LLM for one merged memory per cluster and store it as "
                "a new memory that supersedes the cluster (delete it to undo)."
            ),
        ),
    ] = False,
    cosine: Annotated[
        float,
        typer.Option(
            "--cosine",
            metavar="X",
            help="Near-duplicates: vectors with at least this cosine similarity, in (0, 1].",
        ),
    ] = _api_default(maintain, "cosine"),
    text_similarity: Annotated[
        float,
        typer.Option(
            "--text-similarity",
            metavar="X",
            help=(
                "Near-duplicates: texts with at least this similarity (Dice of "
                "character trigrams), in (0, 1]."
            ),
        ),
    ] = _api_default(maintain, "text_similarity"),
    no_supersessions: Annotated[
        bool,
        typer.Option(
            "--no-supersessions",
            help=(
                "Skip proposing derived supersessions (a newer memory of the same subject "
                "and attribute that states another value; no LLM; written only with --apply)."
            ),
        ),
    ] = False,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help=(
                "Write the derived supersessions at least --threshold confident as "
                "derived_update links, in one transaction; the report names the run "
                "(--undo RUN takes them back)."
            ),
        ),
    ] = False,
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            metavar="X",
            help="Derived supersessions: the confidence --apply needs, in (0, 1].",
        ),
    ] = _api_default(maintain, "threshold"),
    undo: Annotated[
        str | None,
        typer.Option(
            "--undo",
            metavar="RUN",
            help="Remove the derived links that run RUN of --apply wrote (in the scope).",
        ),
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Upkeep: expire past-date memories, list near-duplicates, propose merges and supersessions.

    Without scope ids it works on the whole store. Every change is a soft
    delete, a new memory or a link, recorded in history as made by `system`,
    so `engram restore ID`, `engram delete ID` or `engram maintain --undo RUN`
    undoes it; safe to run while the store is in use.
    """

    def run(m: Memory) -> MaintenanceReport:
        with _progress(json_out) as progress:
            return maintain(
                m,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                expire=not no_expire,
                duplicates=not no_duplicates,
                merge=merge,
                dry_run=dry_run,
                cosine=cosine,
                text_similarity=text_similarity,
                progress=progress,
                # An undo reads the links it removes; proposing anew waits for the next run.
                supersessions=(not no_supersessions or apply) and undo is None,
                apply=apply,
                threshold=threshold,
                undo=undo,
            )

    report = _call(ctx, run)
    if json_out:
        _print_json(report.to_dict())
        return
    _print_report(report, _describe_scope(user_id, agent_id, run_id) or "the whole store")


@contextmanager
def _progress(
    quiet: bool, labels: dict[str, str] = _PHASE_LABELS
) -> Iterator[ProgressCallback | None]:
    """A progress bar per phase on stderr (a terminal only; never with --json)."""
    console = _stderr()
    if quiet or not console.is_terminal:
        yield None
        return
    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(labels.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


def _print_report(report: MaintenanceReport, scope: str) -> None:
    out = _stdout()
    dry = report.dry_run
    _say(f"Read {report.scanned} memories of {scope} in {report.seconds:.1f} s.")
    if report.settings["expire"]:
        _print_expired(report, dry)
    if report.settings["duplicates"]:
        if not report.clusters:
            _say("No near-duplicates found.")
        for number, cluster in enumerate(report.clusters, 1):
            owner = ", ".join(f"{k}={v!r}" for k, v in cluster.scope.items())
            table = Table(
                title=f"near-duplicates {number} ({owner}): {len(cluster.members)} memories",
                title_justify="left",
                show_lines=True,
            )
            table.add_column("memory / id", min_width=36, overflow="fold")
            table.add_column("created_at", no_wrap=True)
            for member in cluster.members:
                cell = Text(member.memory)
                cell.append(f"\n{member.id}", style="dim")
                table.add_row(cell, _when(member.created_at).replace(" ", "\n"))
            out.print(table)
            for pair in cluster.pairs:
                _say(
                    f"  {pair.a[:8]} ~ {pair.b[:8]}: cosine {pair.cosine:.3f}, "
                    f"text {pair.text_similarity:.3f}"
                )
            if cluster.pairs_total > len(cluster.pairs):
                _say(f"  ... and {cluster.pairs_total - len(cluster.pairs)} more pairs")
    for proposal in report.merges:
        _print_merge(proposal.cluster + 1, proposal.status, proposal.memory, proposal.id)
        if proposal.note:
            _say(f"  {proposal.note}")
    if report.settings.get("supersessions") or report.settings.get("undo"):
        _print_supersessions(report)
    for note in report.notes:
        _note(f"Note: {note}.")
    if dry:
        _note("Dry run: nothing was changed.")


def _print_expired(report: MaintenanceReport, dry: bool) -> None:
    if not report.expired:
        _say("No memories past their expiry.")
        return
    done = sum(e.status != "skipped" for e in report.expired)
    if dry:
        _say(f"Would expire {done} memories (soft delete, by system):")
    else:
        _say(f"Expired {done} memories (soft-deleted by system; `engram restore ID` undoes one):")
    table = Table(show_lines=True)
    table.add_column("memory / id", min_width=36, overflow="fold")
    table.add_column("expires_at", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for entry in report.expired:
        cell = Text(entry.memory)
        cell.append(f"\n{entry.id}", style="dim")
        if entry.note:
            cell.append(f"\n{entry.note}", style="dim")
        table.add_row(cell, _when(entry.expires_at).replace(" ", "\n"), entry.status)
    _stdout().print(table)


def _print_merge(number: int, status: str, text: str | None, new_id: str | None) -> None:
    if status == "stored":
        _say(f"Merged cluster {number} into {new_id}: {text}")
    elif status == "proposed":
        _say(f"Would merge cluster {number} into: {text}")
    else:
        _say(f"Cluster {number} not merged ({status}).")


_DERIVED_WORDS = {
    "proposed": "proposed (--apply writes it)",
    "below_threshold": "below the threshold",
    "would_link": "would link",
    "linked": "linked",
    "failed": "not written",
    "would_unlink": "would unlink",
    "unlinked": "unlinked",
}


def _print_supersessions(report: MaintenanceReport) -> None:
    found = report.supersessions
    if not found:
        _say("No derived supersessions proposed.")
        return
    counts = report.counts()
    _say(
        f"Derived supersessions: {counts['supersessions_proposed']} at least "
        f"{report.settings['threshold']:.2f} confident, "
        f"{counts['supersessions_below_threshold']} below; "
        f"{counts['supersessions_linked']} linked, {counts['supersessions_unlinked']} unlinked."
    )
    table = Table(show_lines=True)
    table.add_column("subject / attribute", overflow="fold")
    table.add_column("old -> new", min_width=36, overflow="fold")
    table.add_column("confidence", no_wrap=True)
    table.add_column("status")
    for d in found:
        cell = Text(d.older)
        cell.append(f"\n{d.older_id}", style="dim")
        cell.append("\n-> ")
        cell.append(d.newer)
        cell.append(f"\n{d.newer_id}", style="dim")
        who = f"{d.subject or 'the user'}\n{d.attribute or '-'}"
        table.add_row(who, cell, f"{d.confidence:.2f}", _DERIVED_WORDS.get(d.status, d.status))
    _stdout().print(table)
    if report.run and counts["supersessions_linked"]:
        _say(f"Run {report.run}: undo with `engram maintain --undo {report.run}`.")
