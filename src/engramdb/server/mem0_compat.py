"""mem0 compatibility mode of the REST API: mem0's open-source server, over engramdb.

``create_app(memory, compat="mem0")`` (``engram serve --compat mem0``) serves
the routes of mem0's self-hosted server (``server/main.py`` of mem0ai/mem0)
with its request bodies, its response shapes and its errors — FastAPI's
``{"detail": ...}``, 400 for input the library refuses, ``200 null`` for an
unknown id on ``GET /memories/{id}`` — so that an HTTP client written for
that server works unchanged. Underneath it is the same
:class:`~engramdb.server.service.MemoryService`, with the same API keys and
the same tenancy rules as engramdb's own API: a key bound to a scope never
reaches another scope's memories, whatever ids a body or query names.

Where mem0's server does something unsafe, this mode keeps engramdb's rule
and answers in mem0's error shape: ``/configure`` (a client swapping the
server's LLM or store) is refused, ``POST /reset`` needs an admin API key, an
admin's ``GET /memories`` must name a scope. docs/server.md ("mem0
compatibility mode") lists each route and every remaining difference.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, TypedDict

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from engramdb.errors import EngramError, MemoryNotFoundError
from engramdb.server.auth import CallerDep
from engramdb.server.errors import describe_error_mem0, error_headers, openapi_errors
from engramdb.server.service import MemoryService
from engramdb.server.tenancy import SCOPE_KINDS
from engramdb.stores.base import KEEP

__all__ = [
    "DESCRIPTION",
    "Mem0AddRequest",
    "Mem0Message",
    "Mem0SearchRequest",
    "Mem0UpdateRequest",
    "install_error_handlers",
    "install_routes",
]

log = logging.getLogger("engramdb.server")

DESCRIPTION = (
    "Long-term memory for LLM agents, over HTTP, in the shape of mem0's open-source REST "
    "server (mem0 compatibility mode): mem0's routes, bodies and {'detail': ...} errors. "
    "Send an engramdb API key as 'X-API-Key: <key>' or 'Authorization: Bearer <key>'; a "
    "key bound to a scope only sees and changes that scope's memories."
)

MemoryId = Annotated[str, Path(description="The memory's id.")]

PROCEDURAL = "procedural_memory"

_CONFIGURE_REFUSED = (
    "this server's configuration (LLM, embedder, store) is fixed when it starts and is "
    "neither read nor changed over HTTP: edit the configuration file of `engram serve` and "
    "restart it"
)

# mem0 drops these from an update's metadata: the scope of a memory never changes.
_IMMUTABLE_METADATA = frozenset({*SCOPE_KINDS, "actor_id"})


# -- mem0's request bodies (unknown fields are ignored, as mem0's models do) ----------------


class _Mem0Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Mem0Message(_Mem0Body):
    """One message of ``POST /memories``: mem0's ``{"role", "content"}``."""

    role: str = Field(description="Role of the message (user or assistant).")
    content: str = Field(description="Message content.")


class Mem0AddRequest(_Mem0Body):
    """mem0's ``MemoryCreate``: the body of ``POST /memories``."""

    messages: list[Mem0Message] = Field(description="List of messages to store.")
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] | None = None
    expiration_date: str | None = Field(None, description="Expiration date, YYYY-MM-DD.")
    infer: bool | None = Field(None, description="Extract facts from the messages (default).")
    memory_type: str | None = Field(None, description="Only 'procedural_memory' (needs an LLM).")
    prompt: str | None = Field(None, description="Custom prompt for fact extraction.")


class Mem0UpdateRequest(_Mem0Body):
    """mem0's ``MemoryUpdate``: the body of ``PUT /memories/{id}``."""

    text: str | None = Field(None, description="New content of the memory.")
    metadata: dict[str, Any] | None = Field(
        None, description="Merged into the memory's metadata (keys given replace theirs)."
    )
    expiration_date: str | None = Field(
        None, description="Refused here: an update does not change the expiration date."
    )


class Mem0SearchRequest(_Mem0Body):
    """mem0's ``SearchRequest``: the body of ``POST /search``."""

    query: str = Field(description="Search query.")
    user_id: str | None = None
    run_id: str | None = None
    agent_id: str | None = None
    filters: dict[str, Any] | None = Field(
        None, description="Filter language of docs/filters.md; scope ids may be given here."
    )
    top_k: int | None = Field(None, description="Maximum number of results (default 20).")
    threshold: float | None = Field(None, description="Minimum score of the results.")
    explain: bool | None = Field(None, description="Include score details for each result.")
    show_expired: bool | None = Field(None, description="Include expired memories.")


class _DetailOut(BaseModel):
    detail: Any


class _MessageOut(BaseModel):
    message: str


def _responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return openapi_errors(_DetailOut, 401, *statuses)


# -- errors ---------------------------------------------------------------------------------


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error as mem0's server does: ``{"detail": ...}``.

    Library and server errors get :func:`describe_error_mem0`'s status and
    body; request-shape errors FastAPI's own ``422 {"detail": [...]}``; HTTP
    errors (401, unknown route, 405, 413) ``{"detail": message}``.
    """

    async def engram_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, EngramError)
        status, body = describe_error_mem0(exc)
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return JSONResponse(body, status_code=status, headers=error_headers(exc))

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return await request_validation_exception_handler(request, exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return await http_exception_handler(request, exc)

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s raised", request.method, request.url.path)
        body = {"detail": "the server failed; see its log", "code": "internal_error"}
        return JSONResponse(body, status_code=500)

    app.add_exception_handler(EngramError, engram_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


# -- routes ---------------------------------------------------------------------------------


class _Ids(TypedDict):
    user_id: str | None
    agent_id: str | None
    run_id: str | None


def _ids(user_id: str | None, agent_id: str | None, run_id: str | None) -> _Ids:
    """The scope ids a request names; empty strings count as left out, as in mem0."""
    return {"user_id": user_id or None, "agent_id": agent_id or None, "run_id": run_id or None}


def install_routes(app: FastAPI, service: MemoryService) -> None:
    """Add mem0's REST routes to ``app``, served by ``service``.

    Scope ids a request leaves out are filled in from a bound key, and naming
    another value for a bound id is refused (403), as in engramdb's own API;
    an admin must name a scope wherever mem0 requires one.
    """

    @app.post(
        "/memories",
        tags=["memories"],
        summary="Create memories (mem0: add).",
        responses=_responses(400, 403, 413, 502),
    )
    async def add_memory(body: Mem0AddRequest, caller: CallerDep) -> dict[str, Any]:
        ids = _ids(body.user_id, body.agent_id, body.run_id)
        if caller.admin and not any(ids.values()):
            raise HTTPException(
                400, "At least one identifier (user_id, agent_id, run_id) is required."
            )
        if body.memory_type is not None and body.memory_type != PROCEDURAL:
            raise HTTPException(
                400,
                f"Invalid 'memory_type' {body.memory_type!r}: pass {PROCEDURAL!r} to create "
                "a procedural memory, or leave it out",
            )
        return await service.add(
            caller,
            [{"role": m.role, "content": m.content} for m in body.messages],
            **ids,
            metadata=body.metadata,
            infer=True if body.infer is None else body.infer,
            expiration_date=body.expiration_date,
            memory_type=body.memory_type,
            prompt=body.prompt,
        )

    @app.get(
        "/memories",
        tags=["memories"],
        summary="Get memories of a scope, newest first (mem0: get_all).",
        responses=_responses(400, 403),
    )
    async def get_all_memories(
        caller: CallerDep,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
        top_k: Annotated[
            int | None, Query(ge=0, le=1000, description="How many at most (default 100).")
        ] = None,
        show_expired: Annotated[bool, Query(description="Include expired memories.")] = False,
    ) -> dict[str, Any]:
        ids = _ids(user_id, agent_id, run_id)
        if caller.admin and not any(ids.values()):
            raise HTTPException(
                400,
                "At least one identifier is required: this server does not list the whole "
                "store (name a user_id, agent_id or run_id)",
            )
        # top_k=0 asks for nothing; the scope is still checked like any other listing.
        result = await service.list_memories(
            caller, **ids, top_k=top_k or None, show_expired=show_expired
        )
        if top_k == 0:
            result["results"] = []
        return result

    @app.get(
        "/memories/{memory_id}",
        tags=["memories"],
        summary="Get a memory; null when there is none in the caller's scope (mem0: get).",
        responses=_responses(400),
    )
    async def get_memory(memory_id: MemoryId, caller: CallerDep) -> dict[str, Any] | None:
        try:
            return await service.get(caller, memory_id)
        except MemoryNotFoundError:
            return None

    @app.post(
        "/search",
        tags=["memories"],
        summary="Search memories, best first (mem0: search).",
        responses=_responses(400, 403, 413),
    )
    async def search_memories(body: Mem0SearchRequest, caller: CallerDep) -> dict[str, Any]:
        return await service.search(
            caller,
            body.query,
            **_ids(body.user_id, body.agent_id, body.run_id),
            filters=body.filters,
            top_k=body.top_k,
            threshold=body.threshold,
            explain=bool(body.explain),
            show_expired=bool(body.show_expired),
        )

    @app.put(
        "/memories/{memory_id}",
        tags=["memories"],
        summary="Update a memory's text and/or metadata (mem0: update).",
        responses={200: {"model": _MessageOut}, **_responses(400, 404, 409, 413)},
    )
    async def update_memory(
        memory_id: MemoryId, body: Mem0UpdateRequest, caller: CallerDep
    ) -> dict[str, Any]:
        # mem0: a given expiration_date (null clears it) changes the expiry; as every
        # change here it is in the history and a restore brings the old one back.
        expiry = body.expiration_date if "expiration_date" in body.model_fields_set else KEEP
        metadata = body.metadata
        if metadata is not None:
            # mem0 merges the given keys into the memory's metadata (engramdb's update
            # replaces it) and ignores the scope keys, which never change.
            current = await service.get(caller, memory_id)
            given = {k: v for k, v in metadata.items() if k not in _IMMUTABLE_METADATA}
            metadata = {**(current.get("metadata") or {}), **given}
        await service.update(
            caller, memory_id, text=body.text, metadata=metadata, expiration_date=expiry
        )
        return {"message": "Memory updated successfully!"}

    @app.get(
        "/memories/{memory_id}/history",
        tags=["memories"],
        summary="Every change of a memory, oldest first; [] for an unknown id (mem0: history).",
        responses=_responses(400),
    )
    async def memory_history(memory_id: MemoryId, caller: CallerDep) -> list[dict[str, Any]]:
        try:
            return await service.history(caller, memory_id)
        except MemoryNotFoundError:
            return []

    @app.delete(
        "/memories/{memory_id}",
        tags=["memories"],
        summary="Delete a memory; restorable (mem0: delete).",
        responses={200: {"model": _MessageOut}, **_responses(400, 404)},
    )
    async def delete_memory(memory_id: MemoryId, caller: CallerDep) -> dict[str, Any]:
        await service.delete(caller, memory_id)
        return {"message": "Memory deleted successfully"}

    @app.delete(
        "/memories",
        tags=["memories"],
        summary="Delete every memory of a named scope; each stays restorable (delete_all).",
        responses={200: {"model": _MessageOut}, **_responses(400, 403)},
    )
    async def delete_all_memories(
        caller: CallerDep,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> dict[str, Any]:
        ids = _ids(user_id, agent_id, run_id)
        if not any(ids.values()):
            raise HTTPException(400, "At least one identifier is required.")
        await service.delete_all(caller, **ids)
        return {"message": "All relevant memories deleted"}

    @app.post(
        "/reset",
        tags=["server"],
        summary="Erase every memory of the store; admin API keys only (mem0: reset).",
        responses={200: {"model": _MessageOut}, **_responses(403)},
    )
    async def reset_memory(caller: CallerDep) -> dict[str, Any]:
        await service.reset(caller)
        return {"message": "All memories reset"}

    async def refuse_configure(caller: CallerDep) -> dict[str, Any]:
        raise HTTPException(403, _CONFIGURE_REFUSED)

    for method, path, summary in (
        ("GET", "/configure", "Refused: the configuration is not readable over HTTP."),
        ("GET", "/configure/providers", "Refused: providers are not chosen over HTTP."),
        (
            "POST",
            "/configure",
            "Refused: a client may not change the server's LLM, embedder or store.",
        ),
    ):
        app.add_api_route(
            path,
            refuse_configure,
            methods=[method],
            tags=["server"],
            summary=summary,
            responses=_responses(403),
        )

    @app.get("/api/health", tags=["server"], summary="Liveness, in mem0's shape.")
    async def api_health() -> dict[str, Any]:
        # Like /healthz it never touches the store, so it answers while work is queued.
        return {"status": "ok", "database": "connected"}
