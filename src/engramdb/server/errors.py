"""How the library's errors look to a server's clients: an HTTP status and a stable code.

One table, read top to bottom (subclasses before their bases), serves the
REST API (``{"error": {"code", "message"}}`` with the status) and the MCP
tools (the code and message as the tool error). Bad input is always a 4xx;
only a failure of the server itself (store, embedder, a bug) is a 5xx, and
an unreachable or broken LLM is a 502/504 because it is an upstream.
"""

from __future__ import annotations

from typing import Any

from engramdb.errors import (
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
    TextTooLongError,
    TimestampError,
    ValidationError,
    VersionNotFoundError,
)
from engramdb.server.service import LimitExceededError
from engramdb.server.tenancy import ScopeForbiddenError

__all__ = ["ERROR_TABLE", "describe_error"]

ERROR_TABLE: tuple[tuple[type[EngramError], int, str], ...] = (
    (ScopeForbiddenError, 403, "scope_forbidden"),
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
    (StoreError, 500, "store_error"),
    (EngramError, 500, "internal_error"),
)
"""``(error class, HTTP status, code)``; the first row the error is an instance of wins."""


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
