"""The plain records that cross the extraction boundary.

They hold only strings, dates and tuples, so the pipeline can build them
from whatever its store returns and the extraction code never sees a
database row, an embedding or an HTTP reply.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

__all__ = [
    "AdditiveContext",
    "Attribution",
    "ChatMessage",
    "Event",
    "Extracted",
    "KnownMemory",
    "Operation",
    "ParseOutcome",
]

T = TypeVar("T")

Attribution = Literal["user", "assistant"]
"""Whose turn a memory was taken from."""

Event = Literal["ADD", "UPDATE", "DELETE", "NONE"]
"""What the consolidating mode may ask for one fact."""


@dataclass(frozen=True)
class ChatMessage:
    """One conversation message as the prompts show it.

    ``name`` is the speaker's name when the application gave one; the
    prompt then uses it instead of "the user" / "the assistant", so the
    memories name the person. ``timestamp`` is ISO-8601 (UTC) or ``None``.
    """

    role: str
    content: str
    name: str | None = None
    timestamp: str | None = None


@dataclass(frozen=True)
class KnownMemory:
    """A stored memory shown to the LLM as context; ``id`` is the real (UUID) id."""

    id: str
    text: str
    observed_at: str | None = None


@dataclass(frozen=True)
class AdditiveContext:
    """Everything one additive extraction call shows the LLM, all from the call's scope.

    ``recent_memories`` (extracted from this scope lately) and
    ``related_memories`` (found by search for the new messages) are merged
    into one list of known memories, recent first, duplicates removed.
    """

    new_messages: Sequence[ChatMessage]
    recent_messages: Sequence[ChatMessage]
    recent_memories: Sequence[KnownMemory]
    related_memories: Sequence[KnownMemory]
    observation_date: dt.date
    custom_instructions: str | None = None
    includes: str | None = None
    excludes: str | None = None


@dataclass(frozen=True)
class Extracted:
    """One memory the additive pass wants to add; ``linked_ids`` are real ids.

    ``link_kind`` (one of :data:`engramdb.core.records.LINK_KINDS`) is what the
    model said the new memory does to every one of ``linked_ids``.
    """

    text: str
    attributed_to: Attribution
    linked_ids: tuple[str, ...] = ()
    link_kind: str = "related"


@dataclass(frozen=True)
class Operation:
    """One decision of the consolidating mode.

    ``memory_id`` is the real id of the memory an UPDATE, DELETE or NONE
    acts on (``None`` for ADD); ``text`` is the new text of an ADD or
    UPDATE (``None`` for DELETE and NONE).
    """

    event: Event
    text: str | None
    memory_id: str | None


@dataclass(frozen=True)
class ParseOutcome(Generic[T]):
    """What a reply parser kept, and what it had to say about the reply.

    ``warnings`` name what was dropped or defaulted (an unknown id, an
    empty text, a missing attribution); ``repaired`` names the faults that
    were fixed without losing anything the model meant (a code fence, a
    trailing comma, another key casing). Both are for logs and metrics; an
    empty ``items`` with no warnings is a valid "nothing to remember".
    """

    items: list[T]
    warnings: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
