"""engramdb: self-hosted long-term memory for LLM agents.

Offline by default (one SQLite file, a local embedding model, no network),
with a mem0-compatible API::

    from engramdb import Memory
    m = Memory()
    m.add("I am vegetarian and allergic to nuts", user_id="alice")
    m.search("what can alice eat?", user_id="alice")
"""

from engramdb.config import EngramConfig
from engramdb.core.access import ANY_USER, Access
from engramdb.errors import (
    AccessDeniedError,
    ConfigError,
    ConflictError,
    DuplicateMemoryError,
    EmbedderError,
    EmbedderMismatchError,
    EngramError,
    ExtractionError,
    FilterError,
    ImportFormatError,
    LLMAuthError,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMRateLimitError,
    LLMRefusalError,
    LLMResponseError,
    LLMTimeoutError,
    MemoryNotFoundError,
    MessagesError,
    MetadataError,
    ReplyFormatError,
    SchemaVersionError,
    ScopeError,
    StoreError,
    StoreUnavailableError,
    TextTooLongError,
    TimestampError,
    UnknownProviderError,
    ValidationError,
    VersionNotFoundError,
)
from engramdb.memory import AsyncMemory, Memory

__version__ = "0.1.0"

__all__ = [
    "ANY_USER",
    "Access",
    "AccessDeniedError",
    "AsyncMemory",
    "ConfigError",
    "ConflictError",
    "DuplicateMemoryError",
    "EmbedderError",
    "EmbedderMismatchError",
    "EngramConfig",
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
    "LLMTimeoutError",
    "Memory",
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
    "__version__",
]
