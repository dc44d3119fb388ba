"""engramdb: self-hosted long-term memory for LLM agents.

Offline by default (one SQLite file, a local embedding model, no network),
with a mem0-compatible API::

    from engramdb import Memory
    m = Memory()
    m.add("I am vegetarian and allergic to nuts", user_id="alice")
    m.search("what can alice eat?", user_id="alice")
"""

from engramdb.config import EngramConfig
from engramdb.errors import (
    ConfigError,
    ConflictError,
    DuplicateMemoryError,
    EmbedderError,
    EmbedderMismatchError,
    EngramError,
    FilterError,
    ImportFormatError,
    MemoryNotFoundError,
    MessagesError,
    MetadataError,
    SchemaVersionError,
    ScopeError,
    StoreError,
    TextTooLongError,
    TimestampError,
    UnknownProviderError,
    ValidationError,
    VersionNotFoundError,
)
from engramdb.memory import Memory

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConflictError",
    "DuplicateMemoryError",
    "EmbedderError",
    "EmbedderMismatchError",
    "EngramConfig",
    "EngramError",
    "FilterError",
    "ImportFormatError",
    "Memory",
    "MemoryNotFoundError",
    "MessagesError",
    "MetadataError",
    "SchemaVersionError",
    "ScopeError",
    "StoreError",
    "TextTooLongError",
    "TimestampError",
    "UnknownProviderError",
    "ValidationError",
    "VersionNotFoundError",
    "__version__",
]
