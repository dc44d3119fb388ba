"""How the library's errors look to a server's clients: an HTTP status and a stable code.

One table, read top to bottom (subclasses before their bases), serves the
REST API (``{"error": {"code", "message"}}`` with the status), its mem0
compatibility mode (``{"detail": message}``, :func:`describe_error_mem0`) and
the MCP tools (the code and message as the tool error). Bad input is always a 4xx;
only a failure of the server itself (store, embedder, a bug) is a 5xx, and
an unreachable or broken LLM is a 502/504 because it is an upstream. A store
that cannot be reached is a 503 with ``Retry-After`` (:func:`error_headers`):
nothing was done, the client may repeat the call later.
"""

from __future__ import annotations

import math
from typing import Any

from engramdb.errors import (
    AccessDeniedError,
    ConfigError,
    ConflictError,
    DuplicateMemoryError,
    EmbedderError,
    EngramError,
    ExtractionError,
    FilterError,
    LLMError,
    LLMTimeoutError,
    MemoryNotFoundError,
    MessagesError,
    MetadataError,
    ScopeError,
    StoreError,
    StoreUnavailableError,
    TextTooLongError,
    TimestampError,
    ValidationError,
    VersionNotFoundError,
)
from engramdb.server.service import LimitExceededError
from engramdb.server.tenancy import AdminRequiredError, ScopeForbiddenError

__all__ = [
    "ERROR_TABLE",
    "describe_error",
    "describe_error_mem0",
    "error_headers",
    "openapi_errors",
    "retry_after",
]

_STATUS_TEXT: dict[int, str] = {
    400: "The input is invalid (the library refused it).",
    401: "No valid API key.",
    403: "The request names a scope the key may not use, or needs an admin key.",
    404: "No such memory in the caller's scope.",
    409: "The change conflicts with the stored state.",
    413: "The request body is too large.",
    422: "The input is invalid or over a limit.",
    502: "The LLM failed.",
    503: "The store cannot be reached; retry after the Retry-After header's seconds.",
}


def openapi_errors(model: type[Any], *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of an operation's error statuses, in one body ``model``.

    Both server modes describe their errors with this one table; each passes
    its error body (engramdb's envelope or mem0's ``{"detail"}``).
    """
    return {s: {"model": model, "description": _STATUS_TEXT[s]} for s in dict.fromkeys(statuses)}


ERROR_TABLE: tuple[tuple[type[EngramError], int, str], ...] = (
    (ScopeForbiddenError, 403, "scope_forbidden"),
    (AdminRequiredError, 403, "admin_required"),
    (AccessDeniedError, 403, "access_denied"),
    (LimitExceededError, 422, "limit_exceeded"),
    (MemoryNotFoundError, 404, "not_found"),
    (VersionNotFoundError, 404, "version_not_found"),
    (DuplicateMemoryError, 409, "duplicate_memory"),
    (ConflictError, 409, "conflict"),
    (ScopeError, 422, "invalid_scope"),
    (MessagesError, 422, "invalid_messages"),
    (MetadataError, 422, "invalid_metadata"),
    (TextTooLongError, 422, "text_too_long"),
    (TimestampError, 422, "invalid_timestamp"),
    (FilterError, 422, "invalid_filter"),
    (ValidationError, 422, "validation_error"),
    (ConfigError, 400, "not_configured"),
    (ExtractionError, 502, "extraction_failed"),
    (LLMTimeoutError, 504, "llm_timeout"),
    (LLMError, 502, "llm_error"),
    (EmbedderError, 500, "embedder_error"),
    (StoreUnavailableError, 503, "store_unavailable"),
    (StoreError, 500, "store_error"),
    (EngramError, 500, "internal_error"),
)
"""``(error class, HTTP status, code)``; the first row the error is an instance of wins."""


_MEM0_STATUS = {422: 400, 504: 502}
"""engramdb's statuses that mem0's server answers otherwise: it refuses input the
library rejects with 400, and every upstream failure (the LLM, timeouts too) with 502."""


def describe_error_mem0(exc: EngramError) -> tuple[int, dict[str, Any]]:
    """Return ``(HTTP status, body)`` for an error in mem0's shape (compatibility mode).

    The body is ``{"detail": message}`` as mem0's server (FastAPI) answers;
    a server-side failure (5xx) adds the stable ``code`` (mem0's upstream
    errors carry one too), an extraction failure its ``failure_id``. The
    status is :func:`describe_error`'s, but 422 becomes 400 and 504 becomes 502.
    """
    status, error = describe_error(exc)
    status = _MEM0_STATUS.get(status, status)
    body: dict[str, Any] = {"detail": error["message"]}
    if status >= 500:
        body["code"] = error["code"]
    if "failure_id" in error:
        body["failure_id"] = error["failure_id"]
    return status, body


def describe_error(exc: EngramError) -> tuple[int, dict[str, Any]]:
    """Return ``(HTTP status, the "error" object)`` for a library or server error."""
    status, code = next(
        ((status, code) for cls, status, code in ERROR_TABLE if isinstance(exc, cls)),
        (500, "internal_error"),
    )
    body: dict[str, Any] = {"code": code, "message": str(exc)}
    if isinstance(exc, ExtractionError):
        # The messages were kept: the client can retry extraction on them later.
        body["failure_id"] = exc.failure_id
    return status, body


def retry_after(exc: BaseException | None = None) -> str:
    """The ``Retry-After`` value (whole seconds, at least 1) for an unavailable store."""
    seconds = exc.retry_after if isinstance(exc, StoreUnavailableError) else 5.0
    return str(max(1, math.ceil(seconds)))


def error_headers(exc: EngramError) -> dict[str, str]:
    """Extra HTTP headers of an error's answer: ``Retry-After`` for an unavailable store."""
    if isinstance(exc, StoreUnavailableError):
        return {"Retry-After": retry_after(exc)}
    return {}
