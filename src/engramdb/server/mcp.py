"""The MCP server: memory tools for assistants, over stdio or streamable HTTP.

Tools: ``add_memory``, ``search_memories``, ``list_memories``, ``get_memory``,
``update_memory``, ``delete_memory``, ``memory_history``. They call the same
:class:`~engramdb.server.service.MemoryService` as the REST API, so the same
scoping rules hold: the caller is the scope given at launch
(``engram mcp --user-id alice``) or the API key (``--api-key`` for stdio; the
``Authorization``/``X-API-Key`` header of each HTTP request). A tool given bad
input answers with a tool error (``is_error``) whose text starts with the
error code (``invalid_scope: ...``), never with a crash.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engramdb import __version__
from engramdb.errors import EngramError, ValidationError
from engramdb.server import activity as activity_log
from engramdb.server.activity import ActivityLog
from engramdb.server.errors import describe_error, retry_after
from engramdb.server.keys import KeyStore
from engramdb.server.service import MemoryService
from engramdb.server.tenancy import Caller
from engramdb.stores.base import KEEP

__all__ = ["TOOL_NAMES", "KeyGuard", "build_mcp", "key_from_headers"]

TOOL_NAMES = (
    "add_memory",
    "search_memories",
    "list_memories",
    "get_memory",
    "update_memory",
    "delete_memory",
    "restore_memory",
    "memory_history",
)

_INSTRUCTIONS = (
    "Long-term memory. Call search_memories before answering questions that may depend on "
    "what the user said in earlier conversations; call add_memory with facts worth keeping "
    "(preferences, plans, people, decisions). Memories are scoped to the configured user."
)


class MessageArg(BaseModel):
    """One conversation message."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system", "tool"] = "user"
    content: str
    name: str | None = None


ScopeArg = Annotated[
    str | None,
    Field(description="Optional; the configured scope is used when left out."),
]


def key_from_headers(headers: Any) -> str | None:
    """The API key an HTTP request carries (Bearer token or X-API-Key), if any."""
    if headers is None:
        return None
    auth = headers.get("authorization")
    if isinstance(auth, str) and auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    value = headers.get("x-api-key")
    return (value.strip() or None) if isinstance(value, str) else None


def _tool_error(exc: EngramError) -> ToolError:
    status, body = describe_error(exc)
    extra = f" (failure_id {body['failure_id']})" if "failure_id" in body else ""
    if status == 503:
        extra = f"; the memory store is unavailable, retry in {retry_after(exc)} s"
    return ToolError(f"{body['code']}: {body['message']}{extra}")


def build_mcp(
    service: MemoryService,
    *,
    caller: Caller | None = None,
    keys: KeyStore | None = None,
    api_key: str | None = None,
    activity: ActivityLog | None = None,
) -> MCPServer:
    """Build the MCP server over ``service``.

    The caller of a tool call is, in order: the key of the HTTP request
    (when the transport has headers), the ``api_key`` given at launch, else
    ``caller`` (the launch scope). Keys are checked against ``keys`` on every
    call, so a revoked key stops working at once. Each tool call leaves a row
    in ``activity`` (face ``mcp``), when given.
    """
    server: MCPServer = MCPServer(
        "engramdb", version=__version__, instructions=_INSTRUCTIONS, log_level="WARNING"
    )

    def who(ctx: Context) -> Caller:
        key = key_from_headers(ctx.headers) or api_key
        if key is not None:
            found = keys.verify(key) if keys is not None else None
            if found is None:
                raise ToolError("unauthorized: the API key is unknown or revoked")
            activity_log.note_caller(found.id)
            return Caller.of_key(found)
        if keys is not None and keys.any_keys() and ctx.headers is not None:
            raise ToolError("unauthorized: send an API key (Authorization: Bearer <key>)")
        if caller is None:
            raise ToolError("unauthorized: no scope is configured for this server")
        return caller

    async def run(ctx: Context, call: Callable[[Caller], Awaitable[Any]]) -> Any:
        logged = activity is not None and activity.enabled
        entry, token = activity_log.begin("mcp") if logged else (None, None)
        status = 500
        try:
            found = await call(who(ctx))
            status = 200
            return found
        except ToolError:
            status = 401  # who() refused the caller
            raise
        except EngramError as exc:
            status = describe_error(exc)[0]
            raise _tool_error(exc) from None
        finally:
            if entry is not None and activity is not None:
                activity_log.end(token)
                entry.wanted = True
                activity.record(entry, status)

    @server.tool(description="Remember a text or conversation messages (Memory.add).")
    async def add_memory(
        ctx: Context,
        messages: Annotated[
            str | list[MessageArg],
            Field(description="A text to remember, or a list of {role, content} messages."),
        ],
        user_id: ScopeArg = None,
        agent_id: ScopeArg = None,
        run_id: ScopeArg = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Optional JSON object kept with it.")
        ] = None,
        infer: Annotated[
            bool, Field(description="Let the configured LLM extract facts; else verbatim.")
        ] = True,
        links: Annotated[
            dict[str, Literal["related", "updates", "contradicts", "follows_up"]] | None,
            Field(
                description="With infer=false: link what is stored to these memory ids; "
                "'updates' marks a memory the new one replaces."
            ),
        ] = None,
    ) -> dict[str, Any]:
        msgs: Any = (
            messages
            if isinstance(messages, str)
            else [m.model_dump(exclude_none=True) for m in messages]
        )
        return await run(  # type: ignore[no-any-return]
            ctx,
            lambda c: service.add(
                c,
                msgs,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                metadata=metadata,
                infer=infer,
                links=links,
            ),
        )

    @server.tool(description="Find the memories most relevant to a query, best first.")
    async def search_memories(
        ctx: Context,
        query: Annotated[str, Field(description="What to look for, in any language.")],
        top_k: Annotated[int, Field(ge=1, description="How many results at most.")] = 10,
        threshold: Annotated[
            float | None, Field(ge=0, le=1, description="Drop results scoring below this.")
        ] = None,
        filters: Annotated[
            dict[str, Any] | None,
            Field(description='Optional filters, e.g. {"category": "food"}.'),
        ] = None,
        expand_links: Annotated[
            bool, Field(description="Also return the memories linked to each hit.")
        ] = False,
        show_expired: Annotated[
            bool, Field(description="Include memories past their expiration date.")
        ] = False,
        as_of: Annotated[
            str | None,
            Field(
                description="Answer as of this date (YYYY-MM-DD) or ISO-8601 time: what held then."
            ),
        ] = None,
        include_superseded: Annotated[
            bool,
            Field(description="False drops memories that a newer one updates or contradicts."),
        ] = True,
        user_id: ScopeArg = None,
        agent_id: ScopeArg = None,
        run_id: ScopeArg = None,
    ) -> dict[str, Any]:
        return await run(  # type: ignore[no-any-return]
            ctx,
            lambda c: service.search(
                c,
                query,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                filters=filters,
                top_k=top_k,
                threshold=threshold,
                expand_links=expand_links,
                show_expired=show_expired,
                as_of=as_of,
                include_superseded=include_superseded,
            ),
        )

    @server.tool(description="List memories, newest first; page with offset.")
    async def list_memories(
        ctx: Context,
        top_k: Annotated[int, Field(ge=1, description="How many at most.")] = 50,
        offset: Annotated[int, Field(ge=0, description="Skip this many first.")] = 0,
        filters: Annotated[dict[str, Any] | None, Field(description="Optional filters.")] = None,
        user_id: ScopeArg = None,
        agent_id: ScopeArg = None,
        run_id: ScopeArg = None,
    ) -> dict[str, Any]:
        return await run(  # type: ignore[no-any-return]
            ctx,
            lambda c: service.list_memories(
                c,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                filters=filters,
                top_k=top_k,
                offset=offset,
            ),
        )

    @server.tool(description="One memory by id.")
    async def get_memory(
        ctx: Context, memory_id: Annotated[str, Field(description="The memory's id.")]
    ) -> dict[str, Any]:
        return await run(ctx, lambda c: service.get(c, memory_id))  # type: ignore[no-any-return]

    @server.tool(
        description="Change a memory's text, metadata and/or expiry; its history keeps the old."
    )
    async def update_memory(
        ctx: Context,
        memory_id: Annotated[str, Field(description="The memory's id.")],
        text: Annotated[str | None, Field(description="The new text.")] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="New metadata; replaces the old.")
        ] = None,
        expiration_date: Annotated[
            str | None,
            Field(description="New expiry, YYYY-MM-DD (shown through that day, UTC)."),
        ] = None,
        clear_expiration: Annotated[
            bool, Field(description="Remove the memory's expiry (it never expires).")
        ] = False,
        reason: Annotated[str | None, Field(description="Why; kept in the history.")] = None,
    ) -> dict[str, Any]:
        async def change(c: Caller) -> dict[str, Any]:
            if clear_expiration and expiration_date is not None:
                raise ValidationError("give expiration_date or clear_expiration, not both")
            expiry: object = KEEP
            if clear_expiration:
                expiry = None
            elif expiration_date is not None:
                expiry = expiration_date
            return await service.update(
                c, memory_id, text=text, metadata=metadata, reason=reason, expiration_date=expiry
            )

        return await run(ctx, change)  # type: ignore[no-any-return]

    @server.tool(description="Delete a memory (it stays restorable through the history).")
    async def delete_memory(
        ctx: Context,
        memory_id: Annotated[str, Field(description="The memory's id.")],
        reason: Annotated[str | None, Field(description="Why; kept in the history.")] = None,
    ) -> dict[str, Any]:
        return await run(  # type: ignore[no-any-return]
            ctx, lambda c: service.delete(c, memory_id, reason=reason)
        )

    @server.tool(
        description=(
            "Undo a delete or an update: bring a memory back to a version of its history "
            "(default: the one before its last change)."
        )
    )
    async def restore_memory(
        ctx: Context,
        memory_id: Annotated[str, Field(description="The memory's id.")],
        version: Annotated[
            int | None,
            Field(ge=1, description="The version to return to (see memory_history)."),
        ] = None,
    ) -> dict[str, Any]:
        return await run(  # type: ignore[no-any-return]
            ctx, lambda c: service.restore(c, memory_id, version=version)
        )

    @server.tool(description="Every change of a memory, oldest first.")
    async def memory_history(
        ctx: Context, memory_id: Annotated[str, Field(description="The memory's id.")]
    ) -> dict[str, Any]:
        events = await run(ctx, lambda c: service.history(c, memory_id))
        return {"history": events}

    return server


class KeyGuard:
    """ASGI wrapper for the MCP HTTP app: no valid key, no session; a session is its key's.

    Only enforced once the key file holds a key; each tool call then checks
    the key again (for its scope, and in case it was revoked meanwhile).
    A session (``mcp-session-id``) belongs to the key whose request opened
    it: a request of another key naming it is answered 404, exactly like an
    unknown session, and the session lives on for its owner.
    """

    MAX_SESSIONS = 100_000
    """Sessions remembered at most (the oldest forgotten first)."""

    def __init__(self, app: ASGIApp, keys: KeyStore) -> None:
        self.app = app
        self.keys = keys
        self._owners: OrderedDict[str, str] = OrderedDict()
        """Session id -> the id of the key that opened it."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 401 without a valid key, 404 for another key's session; pass the rest on."""
        if scope["type"] != "http" or not self.keys.any_keys():
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        key = key_from_headers(headers)
        found = self.keys.verify(key) if key is not None else None
        if found is None:
            await _refuse(
                scope,
                receive,
                send,
                401,
                "unauthorized",
                "send a valid API key: 'Authorization: Bearer <key>'",
            )
            return
        session = headers.get("mcp-session-id")
        if session is not None:
            owner = self._owners.get(session)
            if owner is not None and owner != found.id:
                await _refuse(
                    scope,
                    receive,
                    send,
                    404,
                    "session_not_found",
                    "no such MCP session for this key; start one with initialize",
                )
                return
            if owner is None:
                # Unknown here (opened before a restart, or forgotten): the MCP app
                # answers for it; a session we never saw opened is never claimed.
                await self.app(scope, receive, send)
                return
            await self.app(scope, receive, send)
            if scope.get("method") == "DELETE":
                self._owners.pop(session, None)
            return

        async def claim(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", ()):
                    if name.decode("latin-1").lower() == "mcp-session-id":
                        self._owners[value.decode("latin-1")] = found.id
                        while len(self._owners) > self.MAX_SESSIONS:
                            self._owners.popitem(last=False)
            await send(message)

        await self.app(scope, receive, claim)


async def _refuse(
    scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
) -> None:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    response = JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )
    await response(scope, receive, send)
