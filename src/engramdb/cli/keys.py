"""``engram keys``: the API keys of ``engram serve`` and ``engram mcp``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from engramdb.cli._app import (
    AgentId,
    RunId,
    UserId,
    _describe_scope,
    _expected_errors,
    _note,
    _print_json,
    _say,
    _stdout,
    _when,
    app,
)
from engramdb.cli.serve import KeysDb, _server

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
    can: Annotated[
        str | None,
        typer.Option(
            "--can",
            metavar="CAPS",
            help=(
                "Capabilities, comma-separated: read, write, delete, purge (admin comes with "
                "--admin). Default: all of them for --admin and a key bound to a user; "
                "read,write,delete for a key bound only to an agent or a run."
            ),
        ),
    ] = None,
    user: Annotated[
        list[str] | None,
        typer.Option(
            "--user",
            metavar="ID",
            help=(
                "A user a key bound only to an agent or a run may name (repeat for more). "
                "Without --user or --any-user it names none."
            ),
        ),
    ] = None,
    any_user: Annotated[
        bool,
        typer.Option(
            "--any-user",
            help="A key bound only to an agent or a run that may name any user (a service agent).",
        ),
    ] = False,
    keys_db: KeysDb = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the key and its fields as JSON.")
    ] = False,
) -> None:
    """Create an API key bound to a scope (or --admin); prints it once, alone on the last line."""
    with _expected_errors():
        created = _keys(keys_db).create(
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            admin=admin,
            name=name,
            can=can,
            users=user or (),
            any_user=any_user,
        )
    if json_out:
        _print_json({"key": created.key, **created.info.as_dict()})
        return
    scope = "every scope (admin)" if admin else _describe_scope(user_id, agent_id, run_id)
    _say(
        f"Created key {created.info.id} for {scope}, may {_grants(created.info)}. "
        "It is shown only now; store it safely:"
    )
    typer.echo(created.key)


def _grants(key: Any) -> str:
    """``read, write (users: any)``: what a key may do, for listings."""
    caps = ", ".join(key.capabilities)
    if key.admin or key.user_id is not None:
        return caps
    users = "any" if key.any_user else (", ".join(key.users) or "none")
    return f"{caps} (users: {users})"


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
    for column in ("id", "name", "scope", "may", "created", "revoked"):
        table.add_column(column, no_wrap=column not in ("name", "may"))
    for k in found:
        scope = "admin" if k.admin else _describe_scope(k.user_id, k.agent_id, k.run_id)
        table.add_row(
            k.id,
            Text(k.name or ""),
            Text(scope),
            Text(_grants(k)),
            _when(k.created_at),
            _when(k.revoked_at),
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
