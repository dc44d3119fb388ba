"""Who is calling a REST route: the API key of the request, as a FastAPI dependency.

Shared by both shapes of the REST API (engramdb's own and the mem0
compatibility mode): the rules are the same whatever the routes look like.
A key comes as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``; once
the key file holds any key every request needs one, and without keys every
caller acts as an admin (see :func:`engramdb.server.app.create_app`).
Refusals are ``401`` HTTP exceptions, which each mode's error handler shapes.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from engramdb.server import activity
from engramdb.server.keys import KeyStore
from engramdb.server.tenancy import Caller

__all__ = ["CallerDep", "Unauthorized", "caller_of"]

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <key>`")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="`X-API-Key: <key>`")


class Unauthorized(StarletteHTTPException):
    """No valid API key: HTTP 401 with ``WWW-Authenticate: Bearer``."""

    def __init__(self, message: str) -> None:
        """Refuse the request with ``message``."""
        super().__init__(401, message, headers={"WWW-Authenticate": "Bearer"})


async def caller_of(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key)],
) -> Caller:
    """The caller of a request, from its API key (see :func:`create_app` for the rules)."""
    keys: KeyStore | None = request.app.state.keys
    activity.want()
    given = bearer.credentials if bearer is not None else api_key
    if given is None:
        if keys is not None and keys.any_keys():
            raise Unauthorized(
                "this server needs an API key: send 'Authorization: Bearer <key>' or "
                "'X-API-Key: <key>' (create one with `engram keys create`)"
            )
        return Caller()
    if keys is None:
        raise Unauthorized("this server has no API keys; send the request without one")
    found = keys.verify(given.strip())
    if found is None:
        raise Unauthorized("the API key is unknown or revoked")
    activity.note_caller(found.id)
    return Caller.of_key(found)


CallerDep = Annotated[Caller, Depends(caller_of)]
"""A route parameter of this type receives the request's :class:`Caller`."""
