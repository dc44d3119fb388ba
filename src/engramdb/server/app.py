"""The REST API: a FastAPI app over :class:`~engramdb.server.service.MemoryService`.

Routes follow mem0's REST server where it has one (``POST /memories``,
``GET /memories``, ``GET|PUT|DELETE /memories/{id}``,
``GET /memories/{id}/history``, ``POST /search``, ``DELETE /memories``) and
add restore, purge and export. Each route checks the HTTP shape (pydantic
models), resolves the caller from the API key, calls one service method and
returns the library's result unchanged. Every error is
``{"error": {"code", "message"}}`` with a 4xx status for bad input
(:mod:`engramdb.server.errors`).

``create_app(compat="mem0")`` serves mem0's own routes, bodies and error
shapes instead (:mod:`engramdb.server.mem0_compat`); restore, purge, export
and the open routes are served in both modes.
"""

from __future__ import annotations

import html
import json
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import IO, Annotated, Any, Literal

import anyio.to_thread
from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engramdb import __version__
from engramdb.errors import EngramError
from engramdb.memory import AsyncMemory, Memory
from engramdb.server import mem0_compat
from engramdb.server.activity import ActivityLog, ActivityMiddleware
from engramdb.server.auth import CallerDep
from engramdb.server.errors import describe_error, error_headers, openapi_errors, retry_after
from engramdb.server.keys import KeyStore
from engramdb.server.service import MemoryService, ServerLimits
from engramdb.server.ui import install_ui
from engramdb.stores.base import KEEP

__all__ = ["COMPAT_MODES", "create_app"]

log = logging.getLogger("engramdb.server")

READY_TIMEOUT_S = 0.9
"""How long ``/readyz`` waits for the store to answer before it says 503: under the
1 s a readiness probe waits by default (Kubernetes' ``timeoutSeconds``)."""

MemoryId = Annotated[str, Path(description="The memory's id.")]

# -- request and response shapes ------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MessageIn(BaseModel):
    """One conversation message, as in ``Memory.add``."""

    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant", "system", "tool"] = "user"
    content: str | list[dict[str, Any]] = Field(
        description="The text, or OpenAI-style content parts ({'type': 'text', 'text': ...})."
    )
    name: str | None = Field(None, description="Who said it (kept as the memory's actor_id).")
    timestamp: str | float | None = Field(
        None, description="When it was said: ISO-8601 or epoch seconds."
    )


class AddRequest(_Body):
    """The arguments of ``Memory.add``."""

    messages: str | MessageIn | list[MessageIn] = Field(
        description="A text, a message, or a list of messages."
    )
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] | None = None
    infer: bool = Field(
        True, description="Let the configured LLM extract memories; without one, store verbatim."
    )
    timestamp: str | float | None = Field(None, description="When the messages were said.")
    expiration_date: str | float | None = Field(None, description="When the memories expire.")
    memory_type: Literal["procedural_memory"] | None = None
    prompt: str | None = Field(None, description="Extra extraction instructions for this call.")
    links: dict[str, Literal["related", "updates", "contradicts", "follows_up"]] | None = Field(
        None,
        description="Verbatim adds (infer=false): link what is stored to these memories, "
        "by id, with a kind; 'updates' and 'contradicts' make them superseded.",
    )


class SearchRequest(_Body):
    """The arguments of ``Memory.search``."""

    query: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    filters: dict[str, Any] | None = Field(
        None, description="Filter language of docs/filters.md; scope ids may be given here too."
    )
    top_k: int | None = Field(None, ge=1, description="How many results at most (default 20).")
    limit: int | None = Field(None, ge=1, description="Alias of top_k (mem0's name).")
    threshold: float | None = Field(None, ge=0, le=1, description="Drop results below it.")
    explain: bool = Field(False, description="Add the parts each score is made of.")
    expand_links: bool = Field(False, description="Add memories linked to each hit.")
    rerank: bool | None = Field(
        None, description="False skips a configured reranker (default: the configuration)."
    )
    show_expired: bool = Field(False, description="Include memories past their expiry.")
    as_of: str | None = Field(
        None,
        description="Answer as of this date or ISO-8601 time (a plain date: the end of that "
        "day): memories stated by then, superseded only by what was stated by then.",
    )
    include_superseded: bool = Field(
        True, description="False drops memories a newer one updates or contradicts."
    )


class UpdateRequest(_Body):
    """The arguments of ``Memory.update``."""

    text: str | None = Field(None, description="The new text.")
    data: str | None = Field(None, description="mem0's name for text.")
    metadata: dict[str, Any] | None = Field(None, description="Replaces the metadata.")
    expiration_date: str | float | None = Field(
        None, description="The new expiry (null clears it); left out: unchanged."
    )
    reason: str | None = Field(None, description="Why; kept in the history.")


class RestoreRequest(_Body):
    """The arguments of ``Memory.restore``."""

    version: int | None = Field(
        None, ge=1, le=1_000_000_000, description="The version to return to; default: previous."
    )


class PurgeRequest(_Body):
    """The arguments of ``Memory.purge``: one memory id, or a scope."""

    memory_id: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    dry_run: bool = False
    """Erase nothing; answer what would go (memory ids, messages, failure records)."""


class MemoryOut(BaseModel):
    """A memory, as ``Memory.get`` returns it (optional fields only when set)."""

    model_config = ConfigDict(extra="allow")

    id: str
    memory: str
    hash: str
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    linked_memory_ids: list[str] = []
    link_kinds: dict[str, str] | None = Field(
        None,
        description="The kind of each link that is not 'related', read from this memory's "
        "side: updates, contradicts, follows_up, or updated_by, contradicted_by, "
        "followed_up_by.",
    )
    superseded_by: list[str] | None = Field(
        None,
        description="Newer memories that update or contradict this one (search results: "
        "always, [] when none; elsewhere only when there are some).",
    )
    score: float | None = Field(None, description="Search results only.")


class ResultsOut(BaseModel):
    """``{"results": [...]}``."""

    results: list[MemoryOut]


class AddEventOut(BaseModel):
    """One outcome of an add."""

    model_config = ConfigDict(extra="allow")

    id: str
    memory: str
    event: str


class AddOut(BaseModel):
    """What ``Memory.add`` returns."""

    results: list[AddEventOut]


class HistoryEventOut(BaseModel):
    """One change of a memory."""

    model_config = ConfigDict(extra="allow")

    id: int
    memory_id: str
    event: str
    version: int
    old_memory: str | None
    new_memory: str | None
    actor: str | None
    reason: str | None
    created_at: str


class FailureOut(BaseModel):
    """One extraction whose LLM reply was unusable; its messages were kept."""

    model_config = ConfigDict(extra="allow")

    id: int
    error: str
    created_at: str
    resolved_at: str | None = None
    messages: int = Field(description="How many messages were kept.")
    reply: str | None = Field(
        None, description="The last unusable LLM reply, verbatim; null when there was none."
    )


class FailuresOut(BaseModel):
    """``{"results": [...]}`` of ``GET /failures``, newest first."""

    results: list[FailureOut]


class SourceMessageOut(BaseModel):
    """One raw conversation message a memory was made from."""

    model_config = ConfigDict(extra="allow")

    id: int
    role: str
    content: str
    name: str | None = None
    observed_at: str | None = None


class SourceMessagesOut(BaseModel):
    """``{"results": [...]}`` of ``GET /memories/{id}/messages``, oldest first."""

    results: list[SourceMessageOut]


class MessageOut(BaseModel):
    """A confirmation, with counts where the call has them."""

    model_config = ConfigDict(extra="allow")

    message: str


class ErrorBody(BaseModel):
    """What went wrong, for people (message) and programs (code)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class ErrorOut(BaseModel):
    """Every error response."""

    error: ErrorBody


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return openapi_errors(ErrorOut, 401, 413, 422, *statuses)


# -- errors ---------------------------------------------------------------------------------


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = {"error": {"code": code, "message": message, **extra}}
    return JSONResponse(body, status_code=status, headers=headers)


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def _where(loc: Iterable[Any]) -> str:
    return ".".join(str(p) for p in loc) or "request"


def _install_error_handlers(app: FastAPI) -> None:
    async def engram_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, EngramError)
        status, body = describe_error(exc)
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        response = _error(status, **body)
        response.headers.update(error_headers(exc))
        return response

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return _error(400, "invalid_json", "the request body is not valid JSON")
        details = [
            {"where": _where(e.get("loc", ())), "problem": str(e.get("msg", ""))} for e in errors
        ]
        first = details[0] if details else {"where": "request", "problem": "invalid"}
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        message = f"{first['where']}: {first['problem']}{more}"
        return _error(422, "invalid_request", message, details=details)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}; see /docs"
        response = _error(exc.status_code, code, message)
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s raised", request.method, request.url.path)
        return _error(500, "internal_error", "the server failed; see its log")

    app.add_exception_handler(EngramError, engram_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


# -- middleware -----------------------------------------------------------------------------


class _BodyLimit:
    """Refuse request bodies over the limit before they are read or parsed (HTTP 413).

    ``mem0_errors``: answer mem0's ``{"detail": ...}`` instead of engramdb's envelope.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, mem0_errors: bool = False) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.mem0_errors = mem0_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
        if declared is not None and declared > self.max_bytes:
            if self.mem0_errors:
                response = JSONResponse({"detail": self._message()}, status_code=413)
            else:
                response = _error(413, "payload_too_large", self._message())
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # Raised inside the route's body read: FastAPI re-raises
                    # HTTPExceptions, and the handler above shapes it.
                    raise StarletteHTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than this server's limit of {self.max_bytes} bytes"


class _Metrics:
    """Count and time every request by route template (not raw path: ids would explode it)."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "engram_http_requests",
            "HTTP requests answered, by method, route and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "engram_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route.",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.in_flight = Gauge(
            "engram_http_requests_in_flight", "HTTP requests being answered.", registry=registry
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.in_flight.inc()
        try:
            await self.app(scope, receive, watch)
        finally:
            self.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = str(scope.get("method", ""))
            self.requests.labels(method, template, str(status)).inc()
            self.latency.labels(method, template).observe(time.perf_counter() - started)


class _LLMCollector(Collector):
    """LLM calls and tokens, read from the LLM's own counters at scrape time."""

    _FIELDS = (
        ("calls", "engram_llm_calls", "LLM calls started."),
        ("errors", "engram_llm_errors", "LLM calls that failed."),
        ("requests", "engram_llm_requests", "HTTP requests sent to the LLM (retries included)."),
        ("retries", "engram_llm_retries", "LLM requests retried after a transient failure."),
        ("latency_s", "engram_llm_latency_seconds", "Seconds spent in successful LLM calls."),
    )

    def __init__(self, memory: AsyncMemory | Memory) -> None:
        self.memory = memory

    def collect(self) -> Iterator[CounterMetricFamily]:
        llm = self.memory.llm
        stats_fn: Callable[[], dict[str, float]] | None = getattr(llm, "stats", None)
        stats = stats_fn() if stats_fn is not None else {}
        for key, name, doc in self._FIELDS:
            yield CounterMetricFamily(name, doc, value=float(stats.get(key, 0)))
        tokens = CounterMetricFamily(
            "engram_llm_tokens", "Tokens the LLM reported, by kind.", labels=["kind"]
        )
        tokens.add_metric(["prompt"], float(stats.get("prompt_tokens", 0)))
        tokens.add_metric(["completion"], float(stats.get("completion_tokens", 0)))
        yield tokens


# -- the docs page --------------------------------------------------------------------------


def _docs_page(spec: dict[str, Any]) -> str:
    """A self-contained reference page: no scripts or styles fetched from elsewhere."""
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(spec['info']['title'])}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;"
        "padding:0 1rem;line-height:1.4}code,pre{background:#f4f4f4;padding:.1rem .3rem}"
        "pre{padding:.6rem;overflow:auto}h2{margin-top:2rem;border-top:1px solid #ddd;"
        "padding-top:1rem}.m{font-weight:bold;color:#064}</style></head><body>",
        f"<h1>{html.escape(spec['info']['title'])} {html.escape(spec['info']['version'])}</h1>",
        f"<p>{html.escape(spec['info'].get('description', ''))}</p>",
        "<p>Machine-readable schema: <a href='/openapi.json'>/openapi.json</a>.</p>",
    ]
    schemas = spec.get("components", {}).get("schemas", {})
    for path, item in spec.get("paths", {}).items():
        for method, op in item.items():
            out.append(
                f"<h2><span class='m'>{method.upper()}</span> <code>{html.escape(path)}</code>"
                f"</h2><p>{html.escape(op.get('summary', ''))}</p>"
            )
            if op.get("description"):
                out.append(f"<pre>{html.escape(op['description'])}</pre>")
            params = op.get("parameters", [])
            if params:
                out.append("<p>Parameters:</p><ul>")
                for p in params:
                    desc = p.get("description") or p.get("schema", {}).get("description", "")
                    out.append(
                        f"<li><code>{html.escape(p['name'])}</code> ({html.escape(p['in'])})"
                        f" {html.escape(desc)}</li>"
                    )
                out.append("</ul>")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                ref = body.get("schema", {}).get("$ref", "")
                name = ref.rsplit("/", 1)[-1]
                shown = schemas.get(name, body.get("schema", {}))
                out.append(
                    f"<p>Body ({html.escape(name or 'JSON')}):</p>"
                    f"<pre>{html.escape(json.dumps(shown, indent=1))}</pre>"
                )
    out.append("</body></html>")
    return "\n".join(out)


# -- the app --------------------------------------------------------------------------------

_DESCRIPTION = (
    "Long-term memory for LLM agents, over HTTP. Send an API key as "
    "'Authorization: Bearer <key>' or 'X-API-Key: <key>'; a key bound to a scope "
    "only sees and changes that scope's memories. Errors are "
    '{"error": {"code", "message"}}.'
)


COMPAT_MODES: tuple[str, ...] = ("mem0",)
"""The values of ``create_app(compat=...)`` besides ``None`` (engramdb's own API)."""


def create_app(
    memory: AsyncMemory | Memory,
    *,
    keys: KeyStore | None = None,
    limits: ServerLimits | None = None,
    close_memory: bool = False,
    compat: Literal["mem0"] | None = None,
    activity: ActivityLog | None = None,
) -> FastAPI:
    """Build the REST app serving ``memory``.

    ``memory`` is an :class:`~engramdb.AsyncMemory` (LLM calls never block
    the event loop; the store runs in worker threads) or a
    :class:`~engramdb.Memory`, whose every call runs in a worker thread.
    ``keys`` authenticates callers: once it holds any key, every request
    needs one; without keys (or with ``keys=None``) every caller acts as an
    admin, which :func:`engramdb.server.runner.serve` only allows on loopback.
    With ``close_memory`` the app closes ``memory`` when it shuts down.

    ``compat="mem0"`` serves mem0's REST routes, bodies and ``{"detail": ...}``
    errors instead of engramdb's own (:mod:`engramdb.server.mem0_compat`),
    over the same service, keys and scoping rules.

    ``activity`` keeps who did what (:mod:`engramdb.server.activity`); left
    out, ``activity.db`` beside the key file (in memory without ``keys``),
    closed when the app shuts down; a log given here is the caller's to close.

    Raises:
        ValueError: ``compat`` is not ``None`` or one of :data:`COMPAT_MODES`.
    """
    if compat is not None and compat not in COMPAT_MODES:
        raise ValueError(
            f"unknown compatibility mode {compat!r}; the modes are: {', '.join(COMPAT_MODES)}"
        )
    service = MemoryService(memory, limits)
    lim = service.limits
    log_of_activity = activity
    own_log = activity is None
    if log_of_activity is None:
        log_of_activity = ActivityLog.beside(keys.path) if keys is not None else ActivityLog()
    registry = CollectorRegistry()
    registry.register(_LLMCollector(memory))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if own_log:
                log_of_activity.close()
            if close_memory:
                if isinstance(memory, AsyncMemory):
                    await memory.close()
                else:
                    memory.close()

    app = FastAPI(
        title="engramdb" if compat is None else f"engramdb ({compat} compatibility mode)",
        version=__version__,
        description=_DESCRIPTION if compat is None else mem0_compat.DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.keys = keys
    app.state.registry = registry
    app.state.compat = compat
    app.state.activity = log_of_activity
    if compat == "mem0":
        mem0_compat.install_error_handlers(app)
    else:
        _install_error_handlers(app)
    app.add_middleware(_BodyLimit, max_bytes=lim.max_body_bytes, mem0_errors=compat == "mem0")
    app.add_middleware(_Metrics, registry=registry)
    app.add_middleware(ActivityMiddleware, log=log_of_activity, face=compat or "rest")

    # -- open routes --

    @app.get("/healthz", tags=["server"], summary="Liveness: answers while the server runs.")
    async def healthz() -> dict[str, Any]:
        health = {"status": "ok", "version": __version__, "engine": service.engine}
        if compat is not None:
            health["compat"] = compat
        return health

    @app.get(
        "/readyz",
        tags=["server"],
        summary="Readiness: 200 when the store answers, else 503 with Retry-After.",
        responses={503: {"description": "The store cannot be reached or failed."}},
    )
    async def readyz() -> JSONResponse:
        try:
            await service.ready(READY_TIMEOUT_S)
        except EngramError as exc:
            _, error = describe_error(exc)
            log.warning("/readyz: the store is not ready: %s", exc)
            return JSONResponse(
                {"status": "unavailable", "error": error},
                status_code=503,
                headers={"Retry-After": retry_after(exc)},
            )
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", tags=["server"], summary="Prometheus metrics.", response_class=Response)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(_docs_page(app.openapi()))

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/docs")

    # The web UI (its own session cookie and forms; the same tenancy rules).
    install_ui(app, memory, keys=keys, limits=lim, activity=log_of_activity)

    if compat == "mem0":
        mem0_compat.install_routes(app, service)
        _extra_routes(app, service)
        return app

    # -- memories of a scope --

    @app.post(
        "/memories",
        tags=["memories"],
        summary="Remember messages (Memory.add).",
        responses={200: {"model": AddOut}, **_errors(403, 502)},
    )
    async def add_memories(body: AddRequest, caller: CallerDep) -> dict[str, Any]:
        messages: Any = body.messages
        if isinstance(messages, MessageIn):
            messages = messages.model_dump(exclude_none=True)
        elif isinstance(messages, list):
            messages = [m.model_dump(exclude_none=True) for m in messages]
        return await service.add(
            caller,
            messages,
            user_id=body.user_id,
            agent_id=body.agent_id,
            run_id=body.run_id,
            metadata=body.metadata,
            infer=body.infer,
            timestamp=body.timestamp,
            expiration_date=body.expiration_date,
            memory_type=body.memory_type,
            prompt=body.prompt,
            links=body.links,
        )

    @app.get(
        "/memories",
        tags=["memories"],
        summary="List a scope's memories, newest first (Memory.get_all).",
        responses={200: {"model": ResultsOut}, **_errors(403)},
    )
    async def list_memories(
        caller: CallerDep,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        top_k: Annotated[
            int | None, Query(ge=1, description="How many at most (default 100, capped).")
        ] = None,
        limit: Annotated[int | None, Query(ge=1, description="Alias of top_k.")] = None,
        offset: Annotated[int, Query(ge=0, description="Skip this many first.")] = 0,
        filters: Annotated[
            str | None, Query(description="Filters as a JSON object (docs/filters.md).")
        ] = None,
        show_expired: Annotated[
            bool, Query(description="Include memories past their expiry.")
        ] = False,
    ) -> dict[str, Any]:
        return await service.list_memories(
            caller,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            filters=_json_query("filters", filters),
            top_k=limit if limit is not None else top_k,
            offset=offset,
            show_expired=show_expired,
        )

    @app.delete(
        "/memories",
        tags=["memories"],
        summary="Delete every memory of a named scope; each stays restorable (delete_all).",
        responses={200: {"model": MessageOut}, **_errors(403)},
    )
    async def delete_all(
        caller: CallerDep,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        return await service.delete_all(caller, user_id=user_id, agent_id=agent_id, run_id=run_id)

    @app.post(
        "/search",
        tags=["memories"],
        summary="The memories most relevant to a query, best first (Memory.search).",
        responses={200: {"model": ResultsOut}, **_errors(403)},
    )
    async def search(body: SearchRequest, caller: CallerDep) -> dict[str, Any]:
        return await service.search(
            caller,
            body.query,
            user_id=body.user_id,
            agent_id=body.agent_id,
            run_id=body.run_id,
            filters=body.filters,
            top_k=body.limit if body.limit is not None else body.top_k,
            threshold=body.threshold,
            explain=body.explain,
            expand_links=body.expand_links,
            rerank=body.rerank,
            show_expired=body.show_expired,
            as_of=body.as_of,
            include_superseded=body.include_superseded,
        )

    # -- one memory --

    @app.get(
        "/memories/{memory_id}",
        tags=["memory"],
        summary="One memory (Memory.get).",
        responses={200: {"model": MemoryOut}, **_errors(404)},
    )
    async def get_memory(memory_id: MemoryId, caller: CallerDep) -> dict[str, Any]:
        return await service.get(caller, memory_id)

    @app.put(
        "/memories/{memory_id}",
        tags=["memory"],
        summary="Change a memory's text and/or metadata; history keeps the old (update).",
        responses={200: {"model": MemoryOut}, **_errors(404, 409)},
    )
    async def update_memory(
        memory_id: MemoryId, body: UpdateRequest, caller: CallerDep
    ) -> dict[str, Any]:
        return await service.update(
            caller,
            memory_id,
            expiration_date=(
                body.expiration_date if "expiration_date" in body.model_fields_set else KEEP
            ),
            text=body.text,
            data=body.data,
            metadata=body.metadata,
            reason=body.reason,
        )

    @app.delete(
        "/memories/{memory_id}",
        tags=["memory"],
        summary="Delete a memory; restorable (Memory.delete).",
        responses={200: {"model": MessageOut}, **_errors(404)},
    )
    async def delete_memory(
        memory_id: MemoryId,
        caller: CallerDep,
        reason: Annotated[str | None, Query(description="Why; kept in the history.")] = None,
    ) -> dict[str, Any]:
        return await service.delete(caller, memory_id, reason=reason)

    @app.get(
        "/memories/{memory_id}/history",
        tags=["memory"],
        summary="Every change of a memory, oldest first (Memory.history).",
        responses={200: {"model": list[HistoryEventOut]}, **_errors(404)},
    )
    async def history(memory_id: MemoryId, caller: CallerDep) -> list[dict[str, Any]]:
        return await service.history(caller, memory_id)

    @app.get(
        "/memories/{memory_id}/timeline",
        tags=["memory"],
        summary="The memory and its linked memories, by observation time (Memory.timeline).",
        responses={200: {"model": ResultsOut}, **_errors(404)},
    )
    async def timeline(memory_id: MemoryId, caller: CallerDep) -> dict[str, Any]:
        return {"results": await service.timeline(caller, memory_id)}

    @app.get(
        "/memories/{memory_id}/messages",
        tags=["memory"],
        summary="The raw messages a memory was made from, oldest first (Memory.source_messages).",
        responses={200: {"model": SourceMessagesOut}, **_errors(404)},
    )
    async def source_messages(memory_id: MemoryId, caller: CallerDep) -> dict[str, Any]:
        return {"results": await service.source_messages(caller, memory_id)}

    # -- extraction failures --

    @app.get(
        "/failures",
        tags=["extraction"],
        summary="Adds of a scope whose LLM reply was unusable (Memory.failures).",
        responses={200: {"model": FailuresOut}, **_errors(403)},
    )
    async def failures(
        caller: CallerDep,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        include_resolved: Annotated[
            bool, Query(description="Also list failures already retried successfully.")
        ] = False,
    ) -> dict[str, Any]:
        found = await service.failures(
            caller,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            include_resolved=include_resolved,
        )
        return {"results": found}

    @app.post(
        "/failures/{failure_id}/retry",
        tags=["extraction"],
        summary="Run extraction again on a failure's kept messages (Memory.retry_extraction).",
        responses={200: {"model": AddOut}, **_errors(400, 502)},
    )
    async def retry_extraction(
        failure_id: Annotated[
            int, Path(ge=1, le=2**62, description="The failure's id (from GET /failures).")
        ],
        caller: CallerDep,
    ) -> dict[str, Any]:
        return await service.retry_extraction(caller, failure_id)

    _extra_routes(app, service)
    return app


def _extra_routes(app: FastAPI, service: MemoryService) -> None:
    """Add the routes mem0 has no counterpart for: restore, purge, export (both modes)."""

    @app.post(
        "/memories/{memory_id}/restore",
        tags=["memory"],
        summary="Undo a delete or an update (Memory.restore).",
        responses={200: {"model": MemoryOut}, **_errors(404, 409)},
    )
    async def restore(
        memory_id: MemoryId, caller: CallerDep, body: RestoreRequest | None = None
    ) -> dict[str, Any]:
        version = body.version if body is not None else None
        return await service.restore(caller, memory_id, version=version)

    @app.post(
        "/purge",
        tags=["memories"],
        summary="Erase one memory or a named scope for good, with history (Memory.purge).",
        responses={200: {"model": MessageOut}, **_errors(403, 404)},
    )
    async def purge(body: PurgeRequest, caller: CallerDep) -> dict[str, Any]:
        return await service.purge(
            caller,
            body.memory_id,
            user_id=body.user_id,
            agent_id=body.agent_id,
            run_id=body.run_id,
            dry_run=body.dry_run,
        )

    @app.get(
        "/export",
        tags=["memories"],
        summary="The caller's memories with history and vectors, as JSON lines (export).",
        response_class=StreamingResponse,
        responses={
            200: {"content": {"application/x-ndjson": {}}, "description": "JSON lines."},
            **_errors(403),
        },
    )
    async def export(
        caller: CallerDep,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> StreamingResponse:
        lines = service.export_lines(caller, user_id=user_id, agent_id=agent_id, run_id=run_id)
        # Written whole in one worker thread: the store's read transaction must not
        # hop between threads. The scope is checked before anything is sent, so a
        # refusal is a proper error response, not a stream cut short.
        spool = await anyio.to_thread.run_sync(_spool, lines)
        return StreamingResponse(_read_spool(spool), media_type="application/x-ndjson")


def _json_query(name: str, value: str | None) -> dict[str, Any] | None:
    """Decode a JSON-valued query parameter; the library then checks its shape."""
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", name), "msg": "is not valid JSON"}]
        ) from None
    if not isinstance(decoded, dict):
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", name), "msg": "must be a JSON object"}]
        )
    return decoded


def _spool(lines: Iterator[str]) -> IO[bytes]:
    """Write the lines to a temporary file (in memory up to 8 MiB) and rewind it."""
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # noqa: SIM115
    try:
        for line in lines:
            spool.write(line.encode("utf-8"))
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def _read_spool(spool: IO[bytes]) -> Iterator[bytes]:
    with spool:
        while chunk := spool.read(65536):
            yield chunk
