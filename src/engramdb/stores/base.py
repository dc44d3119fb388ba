"""The store port: records that cross it, and the protocol every backend implements.

A backend owns persistence and transactions; it never decides *what* to
remember (the core does) and never scores fusion (the retrieval layer does).
Every method that writes is one transaction: all of it lands or none of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from engramdb.core.filters import Node

if TYPE_CHECKING:  # _erasure imports this module
    from engramdb.stores._erasure import ErasurePlan

__all__ = [
    "AddOutcome",
    "AsyncStore",
    "Candidate",
    "EntityRef",
    "HistoryEvent",
    "MemoryRow",
    "NewMemory",
    "NewMessage",
    "RestorePlan",
    "Scope",
    "Store",
    "visible_scope",
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
        """The top-level owner: the user when given, else the agent, else the run.

        Entities are shared per owner, and a purge locks per owner; exact
        repeats are dropped per :attr:`partition`, which is finer.
        """
        if self.user_id is not None:
            return f"user:{self.user_id}"
        if self.agent_id is not None:
            return f"agent:{self.agent_id}"
        if self.run_id is not None:
            return f"run:{self.run_id}"
        raise ValueError("a scope needs user_id, agent_id or run_id")

    @property
    def partition(self) -> str:
        """Dedup key of a *visible* scope: every id that is set, length-prefixed.

        Exact repeats are dropped among the live memories of one partition,
        the visible scope they were written from (see
        :func:`engramdb._ops.visible_scope`), so a repeat never matches a
        memory its caller cannot see. The length prefixes make the key
        unambiguous whatever characters the ids hold; the SQL migrations
        compute the same key.
        """
        parts = [
            f"{tag}{len(value)}:{value}"
            for tag, value in (("u", self.user_id), ("a", self.agent_id), ("r", self.run_id))
            if value is not None
        ]
        if not parts:
            raise ValueError("a scope needs user_id, agent_id or run_id")
        return "".join(parts)

    def sees(self, row: MemoryRow) -> bool:
        """Whether ``row`` lies in this scope: every id matches (attached sessions count)."""
        if self.user_id is not None and row.user_id != self.user_id:
            return False
        if self.agent_id is not None and self.agent_id not in (row.agent_id, *row.agent_ids):
            return False
        return self.run_id is None or self.run_id in (row.run_id, *row.run_ids)

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


def visible_scope(scope: Scope, bound: Scope | None = None) -> Scope:
    """The memories a call with ``scope`` may see (and dedup, link, change) through any path.

    A user's or agent's memories are split by who may see them: a call named
    ``{user_id: alice, agent_id: coach}`` sees alice's memories *with coach*
    (as primary agent or attached), not alice's agent-less ones nor another
    agent's. A run is a session, not a wall: its memories stay visible to the
    next run of the same user/agent (that is how a fact seen again in a new
    session attaches that session instead of being stored twice), unless the
    caller is ``bound`` to the run (a key for one run sees that run only), or
    the scope names nothing but a run. ``scope`` must already lie inside
    ``bound`` (the faces merge the bound ids in first).
    """
    if scope.user_id is None and scope.agent_id is None:
        return scope
    run = bound.run_id if bound is not None else None
    return Scope(scope.user_id, scope.agent_id, run)


@dataclass
class NewMessage:
    """A raw conversation message to keep beside the memories made from it."""

    role: str
    content: str
    name: str | None = None
    observed_at: str | None = None
    rowid: int | None = field(default=None, compare=False)
    """The stored message's id when the store hands it back (``recent_messages``), so a
    memory can name the messages it borrows words from; ``None`` for a new message."""


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
    context_messages: list[int] = field(default_factory=list)
    """Indexes into the add's ``messages`` whose words ``terms`` also holds (a verbatim
    turn indexes the message before it): recorded, so a purge of those messages can
    re-index this memory."""
    context_rowids: list[int] = field(default_factory=list)
    """Stored messages (:attr:`NewMessage.rowid`) whose words ``terms`` also holds."""


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
        visible: Scope | None = None,
    ) -> list[AddOutcome]:
        """Store messages and memories in one transaction; repeats become NONE.

        A repeat is a live memory with the same hash that ``visible`` (the
        caller's visible scope; :func:`visible_scope` of ``scope`` when not
        given) sees, preferably one of its own partition: it gets the scope's
        run attached instead of a second copy. Anything else is stored anew in
        the partition of ``visible``, so a caller never dedups against (and
        so never learns of) a memory it cannot see.
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

    def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` a live memory that ``visible`` sees already has."""
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
        """Erase memories for good: :meth:`plan_purge`, re-index, :meth:`apply_purge`."""
        ...

    def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> ErasurePlan:
        """Read the provenance of what a purge names and plan it (reads only).

        Raises MemoryNotFoundError for an unknown ``memory_id``.
        """
        ...

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """Execute a plan in one transaction; ``terms`` re-index its neighbours.

        Raises ConflictError (nothing written) if a write since planning changed
        what the purge covers. Afterwards no copy of the erased text is left
        where the backend can reach (see each backend). Returns the number of
        memories erased.
        """
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

    def visible_ids(self, scope: Scope, memory_ids: Sequence[str]) -> set[str]:
        """Which of ``memory_ids`` are memories ``scope`` sees (deleted ones included)."""
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


class AsyncStore(Protocol):
    """:class:`Store` for asyncio: the same methods, with the same arguments, as coroutines.

    ``export_rows`` is an async iterator. A backend with native async I/O
    (PostgreSQL's ``async_store()``) implements it; ``AsyncMemory`` runs a
    :class:`Store` without one in worker threads. ``tests/test_store_contract.py``
    checks that the two protocols name the same methods and parameters.
    """

    async def bind_embedder(self, model: str, dim: int) -> None:
        """See :meth:`Store.bind_embedder`."""
        ...

    async def bound_embedder(self) -> tuple[str, int] | None:
        """See :meth:`Store.bound_embedder`."""
        ...

    async def add(
        self,
        memories: Sequence[NewMemory],
        messages: Sequence[NewMessage],
        scope: Scope,
        actor: str,
        *,
        source_rowids: Sequence[int] = (),
        resolve_failure: int | None = None,
        visible: Scope | None = None,
    ) -> list[AddOutcome]:
        """See :meth:`Store.add`."""
        ...

    async def attach_session(self, memory_id: str, scope: Scope, actor: str) -> HistoryEvent | None:
        """See :meth:`Store.attach_session`."""
        ...

    async def keep_failed(
        self, scope: Scope, messages: Sequence[NewMessage], error: str, reply: str | None
    ) -> int:
        """See :meth:`Store.keep_failed`."""
        ...

    async def failure(
        self, failure_id: int
    ) -> tuple[Scope, list[tuple[int, NewMessage]], bool] | None:
        """See :meth:`Store.failure`."""
        ...

    async def failures(
        self, scope: Scope, *, include_resolved: bool = False
    ) -> list[dict[str, Any]]:
        """See :meth:`Store.failures`."""
        ...

    async def recent_messages(self, scope: Scope, limit: int) -> list[NewMessage]:
        """See :meth:`Store.recent_messages`."""
        ...

    async def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> set[str]:
        """See :meth:`Store.existing_hashes`."""
        ...

    async def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """See :meth:`Store.get`."""
        ...

    async def list_memories(
        self, scope: Scope, where: Node | None, *, limit: int, offset: int = 0
    ) -> list[MemoryRow]:
        """See :meth:`Store.list_memories`."""
        ...

    async def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[tuple[MemoryRow, float]]:
        """See :meth:`Store.vector_search`."""
        ...

    async def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
    ) -> list[Candidate]:
        """See :meth:`Store.candidates`."""
        ...

    async def update(
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
        """See :meth:`Store.update`."""
        ...

    async def delete(
        self, memory_id: str, *, actor: str, reason: str | None = None
    ) -> tuple[MemoryRow, HistoryEvent]:
        """See :meth:`Store.delete`."""
        ...

    async def delete_scope(self, scope: Scope, *, actor: str) -> list[HistoryEvent]:
        """See :meth:`Store.delete_scope`."""
        ...

    async def plan_restore(self, memory_id: str, version: int | None) -> RestorePlan:
        """See :meth:`Store.plan_restore`."""
        ...

    async def apply_restore(
        self,
        plan: RestorePlan,
        *,
        hash: str,
        embedding: np.ndarray[Any, np.dtype[np.float32]] | None,
        terms: str,
        entities: Sequence[EntityRef],
        actor: str,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """See :meth:`Store.apply_restore`."""
        ...

    async def purge(self, *, memory_id: str | None = None, scope: Scope | None = None) -> int:
        """See :meth:`Store.purge`."""
        ...

    async def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> ErasurePlan:
        """See :meth:`Store.plan_purge`."""
        ...

    async def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """See :meth:`Store.apply_purge`."""
        ...

    async def history(self, memory_id: str) -> list[HistoryEvent]:
        """See :meth:`Store.history`."""
        ...

    def export_rows(self) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`Store.export_rows`."""
        ...

    async def import_rows(self, rows: Sequence[dict[str, Any]]) -> int:
        """See :meth:`Store.import_rows`."""
        ...

    async def visible_ids(self, scope: Scope, memory_ids: Sequence[str]) -> set[str]:
        """See :meth:`Store.visible_ids`."""
        ...

    async def count(self) -> int:
        """See :meth:`Store.count`."""
        ...

    async def reset(self) -> None:
        """See :meth:`Store.reset`."""
        ...

    async def close(self) -> None:
        """See :meth:`Store.close`."""
        ...
