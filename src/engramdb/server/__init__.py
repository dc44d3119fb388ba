"""engramdb over the network: a REST API (FastAPI) and an MCP server, with API keys.

Needs the ``server`` extra (``pip install 'engramdb[server]'``). Start them with
``engram serve`` and ``engram mcp``; in Python::

    from engramdb import AsyncMemory
    from engramdb.server import KeyStore, create_app

    app = create_app(AsyncMemory("engram.db"), keys=KeyStore("keys.db"))

``create_app(..., compat="mem0")`` (``engram serve --compat mem0``) serves the
REST API of mem0's open-source server instead. See docs/server.md for the
routes, authentication, limits and errors of both.
"""

from engramdb.server.app import create_app
from engramdb.server.keys import ApiKey, KeyStore, NewKey, default_keys_path
from engramdb.server.mcp import build_mcp
from engramdb.server.runner import is_loopback, serve
from engramdb.server.service import LimitExceededError, MemoryService, ServerLimits
from engramdb.server.tenancy import Caller, ScopeForbiddenError, resolve_scope

__all__ = [
    "ApiKey",
    "Caller",
    "KeyStore",
    "LimitExceededError",
    "MemoryService",
    "NewKey",
    "ScopeForbiddenError",
    "ServerLimits",
    "build_mcp",
    "create_app",
    "default_keys_path",
    "is_loopback",
    "resolve_scope",
    "serve",
]
