"""Every error engramdb raises on purpose.

The whole tree::

    EngramError
    ├── ConfigError (ValueError)            bad or unknown configuration
    │   └── UnknownProviderError            a provider name we do not ship
    ├── ValidationError (ValueError)        bad input to an API call
    │   ├── ScopeError                      missing / empty / non-string ids
    │   ├── MessagesError                   messages of a wrong shape
    │   ├── MetadataError                   metadata not a JSON object, reserved keys
    │   ├── TextTooLongError                text over the configured limit
    │   ├── TimestampError                  malformed timestamp / expiration_date
    │   ├── FilterError                     malformed or unknown filter
    │   └── DuplicateMemoryError            an update/restore would repeat a live memory
    ├── MemoryNotFoundError (KeyError)      unknown id (or not visible in this scope)
    ├── AccessDeniedError (PermissionError) a view or key may not do this (capability, user)
    ├── VersionNotFoundError (ValueError)   restore(version=N) with no such version
    ├── EmbedderError                       the embedder failed or cannot run here
    │   └── EmbedderMismatchError           the store was built with another model
    ├── StoreError                          the storage backend failed
    │   ├── SchemaVersionError              file written by a newer engramdb
    │   ├── ConflictError                   changed by someone else meanwhile; retry
    │   └── StoreUnavailableError           the database cannot be reached; retry later
    ├── ImportFormatError (ValueError)      a JSONL import line we cannot read
    ├── ExtractionError                     the LLM's reply was unusable; messages kept
    └── LLMError                            the LLM call failed (.url, .model, .status)
        ├── LLMConnectionError (ConnectionError)  server unreachable, after retries
        ├── LLMTimeoutError (TimeoutError)  no reply within the timeout, after retries
        ├── LLMHTTPError                    the server answered with an HTTP error
        │   ├── LLMAuthError                401/403: the API key is missing or wrong
        │   └── LLMRateLimitError           429 on every attempt
        ├── LLMResponseError                a reply we cannot read (not JSON, no choices)
        │   ├── LLMRefusalError             the model declined to answer
        │   └── ReplyFormatError (ValueError)  content not of the asked JSON shape, after repair
        └── LLMScriptError                  a ScriptedLLM ran out of responses (tests)

Messages say what was wrong and what to do about it. Subclasses of
``ValueError`` keep ``except ValueError`` working for code written against
mem0, which raises ``ValueError`` for bad input.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "ConfigError",
    "ConflictError",
    "DuplicateMemoryError",
    "EmbedderError",
    "EmbedderMismatchError",
    "EngramError",
    "ExtractionError",
    "FilterError",
    "ImportFormatError",
    "LLMAuthError",
    "LLMConnectionError",
    "LLMError",
    "LLMHTTPError",
    "LLMRateLimitError",
    "LLMRefusalError",
    "LLMResponseError",
    "LLMScriptError",
    "LLMTimeoutError",
    "MemoryNotFoundError",
    "MessagesError",
    "MetadataError",
    "ReplyFormatError",
    "SchemaVersionError",
    "ScopeError",
    "StoreError",
    "StoreUnavailableError",
    "TextTooLongError",
    "TimestampError",
    "UnknownProviderError",
    "ValidationError",
    "VersionNotFoundError",
]


class EngramError(Exception):
    """Base class of every error engramdb raises on purpose."""


class ConfigError(EngramError, ValueError):
    """The configuration is malformed or names something unsupported."""


class UnknownProviderError(ConfigError):
    """A provider name that engramdb does not ship."""

    def __init__(self, kind: str, name: str, supported: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.supported = sorted(supported)
        super().__init__(
            f"unknown {kind} provider {name!r}; supported {kind} providers: "
            + ", ".join(self.supported)
        )


class ValidationError(EngramError, ValueError):
    """An API call received input it cannot accept; nothing was stored."""


class ScopeError(ValidationError):
    """Scope ids (user_id / agent_id / run_id) are missing or malformed."""


class MessagesError(ValidationError):
    """``messages`` has the wrong type or a message lacks usable content."""


class MetadataError(ValidationError):
    """Metadata is not a JSON object or tries to set a reserved key."""


class TextTooLongError(ValidationError):
    """A memory or message text is longer than the configured limit."""


class TimestampError(ValidationError):
    """A timestamp or expiration date cannot be parsed."""


class FilterError(ValidationError):
    """A search / list filter is malformed or uses an unknown operator."""


class DuplicateMemoryError(ValidationError):
    """An update or restore would make a memory equal to another live one."""

    def __init__(self, memory_id: str, existing_id: str | None) -> None:
        self.memory_id = memory_id
        self.existing_id = existing_id
        where = f"memory {existing_id!r}" if existing_id else "another live memory"
        super().__init__(
            f"cannot change memory {memory_id!r}: {where} of the same scope already "
            "holds this text; delete one of them first"
        )


class MemoryNotFoundError(EngramError, KeyError, ValueError):
    """No memory with this id (or it is outside the caller's scope).

    A ``KeyError`` (a lookup that found nothing) and a ``ValueError`` (what
    mem0 raises for an unknown id on ``update`` / ``delete``), so code
    written for either catches it.
    """

    def __init__(self, memory_id: str) -> None:
        self.memory_id = memory_id
        super().__init__(memory_id)

    def __str__(self) -> str:
        return (
            f"memory {self.memory_id!r} not found; check the id "
            "(get_all() lists the ids of a scope)"
        )


class AccessDeniedError(EngramError, PermissionError):
    """A view (or the API key behind it) lacks what the call needs.

    Raised for a missing capability (``read``, ``write``, ``delete``,
    ``purge``), for naming a user the view was not granted, and for changing
    a memory the view holds only because its run or agent was attached to it
    (it belongs to another scope). A memory the view cannot see at all is a
    :class:`MemoryNotFoundError`, never this, so ids of others cannot be probed.
    """


class VersionNotFoundError(EngramError, ValueError):
    """``restore(version=N)`` names a version the memory never had."""


class EmbedderError(EngramError):
    """The embedding model failed or cannot run on this machine."""


class EmbedderMismatchError(EmbedderError):
    """The store's vectors were made by another model or dimension."""


class StoreError(EngramError):
    """The storage backend failed; the write it was doing was rolled back."""


class SchemaVersionError(StoreError):
    """The database was written by a newer engramdb than this one."""


class ConflictError(StoreError):
    """The memory changed between reading and writing; nothing was written."""


class StoreUnavailableError(StoreError):
    """The database could not be reached within the store's deadline; nothing was done.

    Raised when PostgreSQL stays unreachable (stopped, restarting, network
    down) for the whole of the store's ``unavailable_timeout``. The call was
    not applied (a write whose commit outcome is unknown says so with a plain
    :class:`StoreError` instead), so repeating it later is safe.
    ``retry_after`` is a suggested wait in seconds (the server's
    ``Retry-After``).
    """

    def __init__(self, message: str, *, retry_after: float = 5.0) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class ImportFormatError(EngramError, ValueError):
    """A line of a JSONL import cannot be read; nothing was imported."""


class LLMError(EngramError):
    """An LLM call failed; the message names the URL and model and what to check.

    Attributes carry the same facts for programs: ``url`` (credentials
    removed), ``model``, ``status`` (the last HTTP status, if any) and
    ``attempts`` (requests sent, retries included). No API key ever appears
    in the message or the attributes.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        model: str | None = None,
        status: int | None = None,
        attempts: int = 1,
    ) -> None:
        self.url = url
        self.model = model
        self.status = status
        self.attempts = attempts
        super().__init__(message)


class LLMConnectionError(LLMError, ConnectionError):
    """The LLM server could not be reached (refused, DNS, dropped), even after retries."""


class LLMTimeoutError(LLMError, TimeoutError):
    """The LLM server sent no complete reply within the timeout, even after retries."""


class LLMHTTPError(LLMError):
    """The LLM server answered with an HTTP error status (``.status``)."""


class LLMAuthError(LLMHTTPError):
    """HTTP 401/403: the API key is missing, wrong or lacks access to the model."""


class LLMRateLimitError(LLMHTTPError):
    """HTTP 429 on every attempt: the server is rate limiting or out of quota."""


class LLMResponseError(LLMError):
    """The server replied, but not with a chat completion we can read."""


class LLMRefusalError(LLMResponseError):
    """The model declined to answer (an explicit refusal instead of content)."""


class LLMScriptError(LLMError):
    """A :class:`~engramdb.llms.ScriptedLLM` was called more often than scripted."""


class ReplyFormatError(LLMResponseError, ValueError):
    """The model's reply is not of the shape asked for, even after repairing common faults.

    ``feedback`` is written for the model, not the user: the pipeline shows
    it in its one retry (see :func:`engramdb.extract.retry_messages`). The
    message and the feedback never quote the reply, which may be huge or
    hostile; ``reply`` holds it instead, when the pipeline set it (the last
    unusable reply of an extraction, kept with the failure).
    """

    def __init__(
        self,
        message: str,
        *,
        feedback: str | None = None,
        url: str | None = None,
        model: str | None = None,
    ) -> None:
        self.feedback = feedback if feedback is not None else message
        self.reply: str | None = None
        super().__init__(message, url=url, model=model)


class ExtractionError(EngramError):
    """Extraction failed (an unusable reply after one retry, or the LLM unreachable).

    Nothing is lost: the messages were stored and the failure recorded as
    ``failure_id``; ``Memory.retry_extraction(failure_id)`` runs extraction
    on them again.
    """

    def __init__(self, reason: str, failure_id: int, message_count: int) -> None:
        self.reason = reason
        self.failure_id = failure_id
        self.message_count = message_count
        super().__init__(
            f"memory extraction failed: {reason}. The {message_count} message(s) were kept "
            f"(failure {failure_id}); call retry_extraction({failure_id}) to run extraction "
            "on them again"
        )
