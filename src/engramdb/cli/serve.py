"""The servers: ``engram serve`` (REST) and ``engram mcp`` (MCP tools).

The server options and plumbing shared with ``engram keys`` and
``engram bench serve`` live here too.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from engramdb.cli._app import (
    _expected_errors,
    _fail,
    _Globals,
    _load_config,
    _note,
    _print_json,
    app,
)
from engramdb.memory import Memory

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


class Compat(StrEnum):
    """Another server's REST API that ``engram serve`` can speak instead of its own."""

    MEM0 = "mem0"


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
    compat: Annotated[
        Compat | None,
        typer.Option(
            help=(
                "Serve another server's REST API instead of engramdb's: mem0 (the routes, "
                "bodies and errors of mem0's open-source server; see docs/server.md)."
            )
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            metavar="IPS",
            help=(
                "Proxies whose X-Forwarded-Proto/-For are trusted (comma-separated, * for any; "
                "default: $FORWARDED_ALLOW_IPS or 127.0.0.1). An https request through one gets "
                "Secure cookies."
            ),
        ),
    ] = None,
    ssl_certfile: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Serve https with this certificate (PEM).", exists=True),
    ] = None,
    ssl_keyfile: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="The certificate's private key (PEM).", exists=True),
    ] = None,
    log_level: LogLevel = "info",
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print the server's address and settings as JSON first."),
    ] = False,
) -> None:
    """Serve the REST API and the web UI over HTTP until interrupted (docs at /docs, UI at /ui)."""
    server = _server()
    with _expected_errors():
        keys = server.KeyStore(keys_db)
        server.runner.check_exposure(host, keys, insecure=insecure)
        limits = server.ServerLimits(
            max_body_bytes=max_body_bytes, max_top_k=max_top_k, max_messages=max_messages
        )
        if (ssl_certfile is None) != (ssl_keyfile is None):
            _fail("https needs both --ssl-certfile and --ssl-keyfile")
        transport = server.runner.Transport(
            ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
            ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
            forwarded_allow_ips=forwarded_allow_ips,
        )
        memory = _open_async(ctx, engine)
        url = f"{'https' if ssl_certfile else 'http'}://{host}:{port}"
        info = {"url": url, "engine": engine.value, "keys": str(keys.path), "auth": keys.any_keys()}
        if compat is not None:
            info["compat"] = compat.value
        if json_out:
            _print_json(info)
        else:
            auth = "API keys required" if info["auth"] else "no API keys: open to this machine"
            api = f"; {compat.value}'s REST API" if compat is not None else ""
            _note(f"engram serving {url} ({engine.value} engine; {auth}{api}); docs at {url}/docs")
        server.serve(
            memory,
            host=host,
            port=port,
            keys=keys,
            limits=limits,
            insecure=insecure,
            log_level=log_level,
            compat=compat.value if compat is not None else None,
            transport=transport,
        )


@app.command()
def ui(
    ctx: typer.Context,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            metavar="FILE",
            help="The memory database to look into (default: the global --db, else the default).",
            dir_okay=False,
        ),
    ] = None,
    port: Annotated[
        int, typer.Option(metavar="PORT", help="The loopback port to listen on (0: any free one).")
    ] = 8765,
    keys_db: KeysDb = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the UI in the default web browser.")
    ] = False,
    log_level: LogLevel = "warning",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the UI's address as JSON first.")
    ] = False,
) -> None:
    """Look into a store in the web browser: the web UI on 127.0.0.1, until interrupted."""
    import socket

    server = _server()
    with _expected_errors():
        keys = server.KeyStore(keys_db)
        g: _Globals = ctx.find_root().obj
        from engramdb.memory import AsyncMemory

        memory = AsyncMemory(db or g.db, config=_load_config(g.config_file), actor="server")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError as exc:
            listener.close()
            _fail(f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); pick another --port")
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/ui"
        info = {"url": url, "keys": str(keys.path), "auth": keys.any_keys()}
        if json_out:
            _print_json(info)
        else:
            how = "sign in with an API key" if info["auth"] else "no API keys: you see everything"
            _note(f"engram UI at {url} ({how}); Ctrl-C stops it")
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        server.serve(
            memory,
            host="127.0.0.1",
            port=listener.getsockname()[1],
            keys=keys,
            log_level=log_level,
            sockets=[listener],
        )


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
