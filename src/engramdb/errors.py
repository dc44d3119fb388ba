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
    ├── VersionNotFoundError (ValueError)   restore(version=N) with no such version
    ├── EmbedderError                       the embedder failed or cannot run here
    │   └── EmbedderMismatchError           the store was built with another model
    ├── StoreError                          the storage backend failed
    │   ├── SchemaVersionError              file written by a newer engramdb
    │   └── ConflictError                   changed by someone else meanwhile; retry
    └── ImportFormatError (ValueError)      a JSONL import line we cannot read

Messages say what was wrong and what to do about it. Subclasses of
``ValueError`` keep ``except ValueError`` working for code written against
mem0, which raises ``ValueError`` for bad input.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConflictError",
    "DuplicateMemoryError",
    "EmbedderError",
    "EmbedderMismatchError",
    "EngramError",
    "FilterError",
    "ImportFormatError",
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
            f"cannot change memory {memory_id!r}: {where} of the same owner already "
            "holds this text; delete one of them first"
        )


class MemoryNotFoundError(EngramError, KeyError):
    """No memory with this id (or it is outside the caller's scope)."""

    def __init__(self, memory_id: str) -> None:
        self.memory_id = memory_id
        super().__init__(memory_id)

    def __str__(self) -> str:
        return (
            f"memory {self.memory_id!r} not found; check the id "
            "(get_all() lists the ids of a scope)"
        )


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


class ImportFormatError(EngramError, ValueError):
    """A line of a JSONL import cannot be read; nothing was imported."""
