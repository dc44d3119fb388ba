"""Running the servers: the REST API and the MCP server under uvicorn or on stdio.

The one rule enforced here: a server without API keys accepts every caller
as an admin, so it only listens on a loopback address unless told
``insecure=True``.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
import uvicorn

from engramdb.errors import ConfigError
from engramdb.memory import AsyncMemory, Memory
from engramdb.server.activity import ActivityLog
from engramdb.server.app import create_app
from engramdb.server.keys import KeyStore
from engramdb.server.mcp import KeyGuard, build_mcp
from engramdb.server.service import MemoryService, ServerLimits
from engramdb.server.tenancy import Caller

__all__ = [
    "Transport",
    "check_exposure",
    "freeze_startup_heap",
    "is_loopback",
    "serve",
    "serve_mcp_http",
    "serve_mcp_stdio",
]

log = logging.getLogger("engramdb.server")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, keys: KeyStore, *, insecure: bool, fixed_scope: bool = False) -> None:
    """Refuse to listen beyond loopback when nobody would need a key to get in.

    Raises:
        ConfigError: ``host`` is not a loopback address, the key file holds no
            key, and ``insecure`` is off.
    """
    if is_loopback(host) or insecure or keys.any_keys():
        return
    who = "the configured scope" if fixed_scope else "every scope"
    raise ConfigError(
        f"refusing to listen on {host}: no API key is configured ({keys.path}), so anyone "
        f"who can reach the port could read and change {who}. Create a key with "
        "`engram keys create --user-id ID` (or --admin), listen on 127.0.0.1, or pass "
        "--insecure if something in front of the server authenticates"
    )


def freeze_startup_heap() -> None:
    """Keep what the server has allocated so far out of Python's full garbage collections.

    A long-running server's heap is mostly what startup made (modules, the
    app, the embedding model, the store's connections): ``gc.freeze()`` moves
    it to the permanent generation, so a full collection (which every few
    requests that build many objects set off, a list read for a text search,
    a search's candidates) walks only what was made after. Measured in
    ``engram bench ui`` (docs/ui.md, "Speed"). Objects frozen are still freed
    by reference counting; only cycles among them would stay.
    """
    gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class Transport:
    """How the server is reached: its own TLS, and which proxies it trusts.

    ``forwarded_allow_ips``: the addresses whose ``X-Forwarded-Proto`` /
    ``X-Forwarded-For`` uvicorn believes (comma-separated, ``*`` for any;
    ``None``: uvicorn's default, ``$FORWARDED_ALLOW_IPS`` or 127.0.0.1). A
    request that came over https, directly or through such a proxy, gets
    ``Secure`` cookies from the web UI.
    """

    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    forwarded_allow_ips: str | None = None


def _uvicorn_config(
    app: object, host: str, port: int, log_level: str, transport: Transport | None = None
) -> uvicorn.Config:
    tls = transport or Transport()
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_level=log_level,
        access_log=log_level == "debug",
        # One process: SQLite caches and the embedding model are per process.
        workers=None,
        server_header=False,
        timeout_graceful_shutdown=10,
        proxy_headers=True,
        forwarded_allow_ips=tls.forwarded_allow_ips,
        ssl_certfile=tls.ssl_certfile,
        ssl_keyfile=tls.ssl_keyfile,
    )


def serve(
    memory: AsyncMemory | Memory,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    keys: KeyStore,
    limits: ServerLimits | None = None,
    insecure: bool = False,
    log_level: str = "info",
    sockets: Sequence[socket.socket] | None = None,
    compat: Literal["mem0"] | None = None,
    transport: Transport | None = None,
) -> None:
    """Serve the REST API until interrupted; closes ``memory`` on the way out.

    ``compat="mem0"`` serves mem0's REST routes and error shapes instead of
    engramdb's own (see :func:`engramdb.server.app.create_app`); ``transport``
    sets TLS and the trusted proxies (:class:`Transport`).
    """
    check_exposure(host, keys, insecure=insecure)
    app = create_app(memory, keys=keys, limits=limits, close_memory=True, compat=compat)
    server = uvicorn.Server(_uvicorn_config(app, host, port, log_level, transport))
    freeze_startup_heap()
    server.run(sockets=list(sockets) if sockets else None)


def serve_mcp_stdio(
    memory: AsyncMemory,
    *,
    keys: KeyStore,
    caller: Caller | None,
    api_key: str | None,
    limits: ServerLimits | None = None,
) -> None:
    """Run the MCP server on stdin/stdout until the client closes it."""
    service = MemoryService(memory, limits)
    log = ActivityLog.beside(keys.path)
    server = build_mcp(service, caller=caller, keys=keys, api_key=api_key, activity=log)

    async def main() -> None:
        try:
            await server.run_stdio_async()
        finally:
            log.close()
            await memory.close()

    anyio.run(main)


def serve_mcp_http(
    memory: AsyncMemory,
    *,
    host: str,
    port: int,
    keys: KeyStore,
    caller: Caller | None,
    insecure: bool = False,
    limits: ServerLimits | None = None,
    log_level: str = "info",
) -> None:
    """Serve MCP over streamable HTTP at ``/mcp`` until interrupted."""
    check_exposure(host, keys, insecure=insecure, fixed_scope=caller is not None)
    service = MemoryService(memory, limits)
    log = ActivityLog.beside(keys.path)
    server = build_mcp(service, caller=caller, keys=keys, activity=log)
    app = KeyGuard(server.streamable_http_app(host=host), keys)
    try:
        uvicorn.Server(_uvicorn_config(app, host, port, log_level)).run()
    finally:
        log.close()
        anyio.run(memory.close)
