"""The store port: records that cross it, and the protocol every backend implements.

A backend owns persistence and transactions; it never decides *what* to
remember (the core does) and never scores fusion (the retrieval layer does).
Every method that writes is one transaction: all of it lands or none of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from engramdb.core.filters import Node

__all__ = [
    "AddOutcome",
    "Candidate",
    "EntityRef",
    "HistoryEvent",
    "MemoryRow",
    "NewMemory",
    "NewMessage",
    "RestorePlan",
    "Scope",
    "Store",
]

ScopeKind = Literal["user_id", "agent_id", "run_id"]

EntityRef = tuple[str, str, str]
"""An entity mention: ``(name, normalized, type)``."""


@dataclass(frozen=True)
class Scope:
    """The ids a call is scoped to; at least one is set (the core checks)."""

    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None

    @property
    def owner(self) -> str:
        """Dedup key: the user when given, else the agent, else the run.

        A fact is stored once per owner; seeing it again in another run or
        with another agent attaches that session to the existing memory.
        """
        if self.user_id is not None:
            return f"user:{self.user_id}"
        if self.agent_id is not None:
            return f"agent:{self.agent_id}"
        if self.run_id is not None:
            return f"run:{self.run_id}"
        raise ValueError("a scope needs user_id, agent_id or run_id")

    def items(self) -> list[tuple[ScopeKind, str]]:
        """The ids that are set, as ``(field, value)`` pairs."""
        out: list[tuple[ScopeKind, str]] = []
        if self.user_id is not None:
            out.append(("user_id", self.user_id))
        if self.agent_id is not None:
            out.append(("agent_id", self.agent_id))
        if self.run_id is not None:
            out.append(("run_id", self.run_id))
        return out


@dataclass
class NewMessage:
    """A raw conversation message to keep beside the memories made from it."""

    role: str
    content: str
    name: str | None = None
    observed_at: str | None = None


@dataclass
class NewMemory:
    """A memory the core has decided to store; the store assigns nothing but rowids."""

    id: str
    text: str
    hash: str
    embedding: np.ndarray[Any, np.dtype[np.float32]]
    terms: str
    actor_id: str | None = None
    role: str | None = None
    attributed_to: str | None = None
    memory_type: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    observed_at: str | None = None
    expires_at: str | None = None
    source_messages: list[int] = field(default_factory=list)
    """Indexes into the ``messages`` list passed with the same add."""
    links: list[str] = field(default_factory=list)
    """Public ids of existing memories this one relates to."""
    entities: list[EntityRef] = field(default_factory=list)
    """Entities mentioned in the text, linked relationally on write."""


@dataclass
class MemoryRow:
    """A stored memory as the store returns it."""

    id: str
    text: str
    hash: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    actor_id: str | None
    role: str | None
    attributed_to: str | None
    memory_type: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    observed_at: str | None
    expires_at: str | None
    deleted_at: str | None
    version: int
    run_ids: list[str] = field(default_factory=list)
    """Extra runs this memory was seen in (besides ``run_id``)."""
    agent_ids: list[str] = field(default_factory=list)
    """Extra agents this memory was seen with (besides ``agent_id``)."""
    linked_ids: list[str] = field(default_factory=list)


@dataclass
class HistoryEvent:
    """One row of the append-only history."""

    memory_id: str
    event: str
    version: int
    old_memory: str | None
    new_memory: str | None
    old_metadata: dict[str, Any] | None
    new_metadata: dict[str, Any] | None
    actor: str
    reason: str | None
    created_at: str
    id: int | None = None


@dataclass
class AddOutcome:
    """What happened to one memory of an add: stored (ADD) or already there (NONE)."""

    id: str
    memory: str
    event: Literal["ADD", "NONE"]
    history: HistoryEvent | None


@dataclass
class Candidate:
    """A memory found by at least one retrieval signal, with every signal's value.

    The store gathers the signals; the retrieval layer fuses them into a score.
    """

    row: MemoryRow
    semantic: float
    """Cosine similarity to the query vector (computed for every candidate)."""
    bm25: float
    """BM25 of the query terms within the scope; 0 when no term matches."""
    semantic_rank: int | None = None
    """1-based rank in the semantic list, if the memory came from it."""
    bm25_rank: int | None = None
    """1-based rank in the keyword list, if the memory came from it."""
    entities: list[tuple[str, int]] = field(default_factory=list)
    """Query entities this memory is linked to, with each entity's degree
    (how many memories it is linked to)."""


@dataclass
class RestorePlan:
    """What :meth:`Store.apply_restore` will write, computed before the write lock."""

    memory_id: str
    expected_version: int
    undelete: bool
    text: str
    metadata: dict[str, Any]
    to_version: int | None
    """The version whose content comes back; ``None`` for a plain undelete."""


class Store(Protocol):
    """Persistence of memories, vectors, index rows, links, messages and history."""

    def bind_embedder(self, model: str, dim: int) -> None:
        """Record the embedder on first use; refuse a different one afterwards."""
        ...

    def bound_embedder(self) -> tuple[str, int] | None:
        """The ``(model, dim)`` recorded in the store, if any."""
        ...

    def add(
        self,
        memories: Sequence[NewMemory],
        messages: Sequence[NewMessage],
        scope: Scope,
        actor: str,
        *,
        source_rowids: Sequence[int] = (),
        resolve_failure: int | None = None,
    ) -> list[AddOutcome]:
        """Store messages and memories in one transaction; repeats become NONE.

        A memory with an empty ``embedding`` is one the caller believed to be a
        repeat; if it is not (any more), the store raises ConflictError and
        writes nothing.
        """
        ...

    def attach_session(self, memory_id: str, scope: Scope, actor: str) -> HistoryEvent | None:
        """Attach the scope's run/agent to a live memory; None if nothing was new."""
        ...

    def keep_failed(
        self, scope: Scope, messages: Sequence[NewMessage], error: str, reply: str | None
    ) -> int:
        """Store the messages of a failed extraction and the failure; returns its id."""
        ...

    def failure(self, failure_id: int) -> tuple[Scope, list[tuple[int, NewMessage]], bool] | None:
        """A recorded failure: scope, ``(message id, message)`` pairs, resolved or not."""
        ...

    def failures(self, scope: Scope, *, include_resolved: bool = False) -> list[dict[str, Any]]:
        """Recorded extraction failures of a scope, newest first."""
        ...

    def recent_messages(self, scope: Scope, limit: int) -> list[NewMessage]:
        """The last ``limit`` raw messages of a scope, oldest first."""
        ...

    def existing_hashes(self, owner: str, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` a live memory of ``owner`` already has."""
        ...

    def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """One memory by public id, or ``None``."""
        ...

    def list_memories(
        self, scope: Scope, where: Node | None, *, limit: int, offset: int = 0
    ) -> list[MemoryRow]:
        """Live memories of a scope, newest first (ties by insertion order)."""
        ...

    def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[tuple[MemoryRow, float]]:
        """The ``k`` live memories of the scope most similar to ``query`` (cosine)."""
        ...

    def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
    ) -> list[Candidate]:
        """Candidates for a query: the vector top ``n``, the BM25 top ``n``, entity links.

        Only live memories in scope; the memories linked to the query's
        (normalised) entities are included.
        """
        ...

    def update(
        self,
        memory_id: str,
        *,
        text: str,
        hash: str,
        embedding: np.ndarray[Any, np.dtype[np.float32]] | None,
        terms: str,
        entities: Sequence[EntityRef],
        metadata: dict[str, Any],
        actor: str,
        reason: str | None = None,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Change text and/or metadata of a live memory, writing an UPDATE event."""
        ...

    def delete(
        self, memory_id: str, *, actor: str, reason: str | None = None
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Soft-delete one memory (hidden, restorable)."""
        ...

    def delete_scope(self, scope: Scope, *, actor: str) -> list[HistoryEvent]:
        """Soft-delete every live memory matching all ids of ``scope``."""
        ...

    def plan_restore(self, memory_id: str, version: int | None) -> RestorePlan:
        """Work out what a restore would bring back (reads only)."""
        ...

    def apply_restore(
        self,
        plan: RestorePlan,
        *,
        hash: str,
        embedding: np.ndarray[Any, np.dtype[np.float32]] | None,
        terms: str,
        entities: Sequence[EntityRef],
        actor: str,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Write a planned restore, if the memory has not changed since planning."""
        ...

    def purge(self, *, memory_id: str | None = None, scope: Scope | None = None) -> int:
        """Erase memories (and their history and source messages) for good."""
        ...

    def history(self, memory_id: str) -> list[HistoryEvent]:
        """Every event of a memory, oldest first."""
        ...

    def export_rows(self) -> Iterator[dict[str, Any]]:
        """Every memory (deleted ones too) with its vector, sessions, links, history."""
        ...

    def import_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """Write exported rows back in one transaction; returns the count."""
        ...

    def count(self) -> int:
        """Number of memory rows (deleted ones included)."""
        ...

    def reset(self) -> None:
        """Erase everything the store holds."""
        ...

    def close(self) -> None:
        """Release connections and caches."""
        ...
