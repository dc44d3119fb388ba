"""The store port: the protocols every backend implements, and the records that cross it.

The records themselves live in :mod:`engramdb.core.records` and are
re-exported here, so a backend needs one import.

A backend owns persistence and transactions; it never decides *what* to
remember (the core does) and never scores fusion (the retrieval layer does).
Every method that writes is one transaction: all of it lands or none of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from engramdb.core.filters import Node
from engramdb.core.records import (
    KEEP,
    AddOutcome,
    Candidate,
    EmbeddingSource,
    EntityCount,
    EntityRef,
    HistoryEvent,
    Keep,
    LinkChange,
    MemoryRow,
    NewMemory,
    NewMessage,
    Rebinding,
    RestorePlan,
    Scope,
    ScopeCounts,
    TermChange,
    TermSource,
    visible_scope,
)
from engramdb.stores.kernel.erasure import ErasurePlan

__all__ = [
    "KEEP",
    "AddOutcome",
    "AsyncStore",
    "Candidate",
    "EmbeddingSource",
    "EntityCount",
    "EntityRef",
    "HistoryEvent",
    "Keep",
    "LinkChange",
    "MemoryRow",
    "NewMemory",
    "NewMessage",
    "Rebinding",
    "RestorePlan",
    "Scope",
    "ScopeCounts",
    "Store",
    "TermChange",
    "TermSource",
    "visible_scope",
]


class Store(Protocol):
    """Persistence of memories, vectors, index rows, links, messages and history."""

    def bind_embedder(self, model: str, dim: int) -> None:
        """Record the embedder on first use; refuse a different one afterwards."""
        ...

    def bound_embedder(self) -> tuple[str, int] | None:
        """The ``(model, dim)`` recorded in the store, if any."""
        ...

    def change_mark(self) -> str:
        """An opaque mark of the writes committed so far, for :meth:`rebind_embedder`.

        Any memory written after the mark (added, changed, deleted, restored,
        attached to a session) is *stale* for a rebinding given this mark.
        """
        ...

    def embedding_sources(self, after: int, limit: int) -> list[EmbeddingSource]:
        """Up to ``limit`` memories with ``key > after``, in key order: what each vector is of.

        Every memory of the store: deleted ones too (an undelete keeps the
        vector), of every user, agent and run. A re-embedding pages through
        the store with the last key of each page; each page is its own read.
        """
        ...

    def term_sources(self, after: int, limit: int) -> list[TermSource]:
        """Up to ``limit`` memories with ``key > after``, in key order: their terms and vector.

        Every memory of the store, deleted ones too, as :meth:`embedding_sources`
        pages; what re-reading the attribute terms (``Memory.reindex_attributes``)
        reads. Each page is its own read.
        """
        ...

    def attribute_terms_version(self) -> str | None:
        """The classifier whose reading the stored attribute terms hold (None: unknown).

        Recorded by :meth:`record_attribute_terms_version`; an import forgets it
        (the imported terms are of the exporting store's classifier).
        """
        ...

    def record_attribute_terms_version(self, version: str | None) -> None:
        """Record which classifier's reading the stored attribute terms hold (None: forget)."""
        ...

    def retag(self, changes: Sequence[TermChange]) -> int:
        """Give memories new keyword terms, in one transaction; returns how many changed.

        A change applies only where the memory's terms are still ``old`` (a
        write since the caller read them wrote terms of its own, which stay).
        The keyword index follows in the same transaction, and every process's
        caches see the rows changed.
        """
        ...

    def rebind_embedder(
        self,
        old: tuple[str, int],
        new: tuple[str, int],
        vectors: Mapping[int, np.ndarray[Any, np.dtype[np.float32]]],
        since: str,
    ) -> Rebinding:
        """Replace every vector by ``vectors`` and bind ``new``, in one transaction.

        ``vectors`` maps each memory's key (:class:`EmbeddingSource`) to its
        vector by the ``new`` embedder. Under the store's write lock, which no
        vector write of any process can pass, the store must still be bound
        to ``old`` (:class:`EmbedderMismatchError` otherwise). If a memory was
        written since ``since`` (a :meth:`change_mark`) or has no vector in
        ``vectors``, nothing is written: the result lists those memories
        (``stale``) with a new mark, to embed them and call again. Otherwise
        every vector is replaced and the binding becomes ``new``; whatever is
        derived from the vectors (caches, indexes, the column's dimension) is
        dropped or rebuilt in the same transaction, and this store object is
        bound to ``new``.
        """
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

    def detach_session(
        self,
        memory_id: str,
        sessions: Sequence[tuple[str, str]],
        actor: str,
        reason: str | None = None,
    ) -> HistoryEvent | None:
        """Detach attached ``(kind, value)`` sessions from a memory (deleted ones too).

        The memory stays for its owner; a DETACH event records what went.
        None if none of the sessions was attached.
        """
        ...

    def link(self, links: Sequence[LinkChange], actor: str) -> list[HistoryEvent]:
        """Link existing memories, all in one transaction; returns the events written.

        Each link joins two memories of one owner that are not deleted
        (:class:`MemoryNotFoundError` or :class:`ValidationError` otherwise, and
        nothing of the call is written). A link already there is left alone (no
        event). Each new link writes a ``LINK`` event on both memories
        (:func:`~engramdb.stores.kernel.history.link_events`); neither memory's
        version, text, metadata nor ``updated_at`` changes.
        """
        ...

    def unlink(self, links: Sequence[LinkChange], actor: str) -> list[HistoryEvent]:
        """Remove links, all in one transaction; returns the ``UNLINK`` events written.

        The exact inverse of :meth:`link`: the link rows go, an ``UNLINK`` event
        lands on each memory (deleted ones too); a link that is not there is
        skipped (no event), a memory that does not exist raises
        :class:`MemoryNotFoundError` and nothing is written.
        """
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
        """Recorded extraction failures of a scope, newest first.

        Each ``{"id", "error", "created_at", "resolved_at", "messages", "reply"}``:
        ``messages`` is how many were kept, ``reply`` the unusable LLM reply
        (``None`` when there was none, e.g. the LLM was unreachable).
        """
        ...

    def recent_messages(self, scope: Scope, limit: int) -> list[NewMessage]:
        """The last ``limit`` raw messages of a scope, oldest first."""
        ...

    def source_messages(self, memory_id: str, visible: Scope | None = None) -> list[NewMessage]:
        """The stored messages a memory was made from (``memory_sources``), oldest first.

        Each with its ``rowid``. Only messages ``visible`` may read: every id it
        sets is the message's own (a message belongs to the scope of its add);
        ``None`` reads every one. The caller checks that it may see the memory
        itself; an unknown id has no messages.
        """
        ...

    def scope_counts(self, visible: Scope | None = None) -> ScopeCounts:
        """Count the memories ``visible`` sees (``None``: the whole store) in the database.

        Live, expired and deleted memories; live memories per user, agent and
        run (attached sessions count); memories added per UTC day. See
        :class:`ScopeCounts`.
        """
        ...

    def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` a live memory that ``visible`` sees already has."""
        ...

    def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """One memory by public id, or ``None``."""
        ...

    def list_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> list[MemoryRow]:
        """Live memories of a scope, newest first (ties by insertion order)."""
        ...

    def count_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int | None = None,
        include_expired: bool = False,
    ) -> int:
        """How many memories :meth:`list_memories` would list with no limit.

        ``limit``: stop counting there (the answer is then ``limit``: that many
        or more), so a count of a huge scope costs no more than ``limit`` rows.
        """
        ...

    def entities(
        self,
        scope: Scope,
        *,
        limit: int,
        offset: int = 0,
        entity_type: str | None = None,
        contains: str | None = None,
        sample: int = 0,
        include_expired: bool = False,
    ) -> tuple[list[EntityCount], int]:
        """The entities the scope's live memories mention, and how many there are.

        The memories are those :meth:`list_memories` lists (deleted ones never,
        expired ones only with ``include_expired``); each entity once per
        normalised name (``key``), with ``degree`` the number of those memories
        that mention it. Most mentioned first, then by key; ``limit`` and
        ``offset`` page through them, and the count is of every entity that
        matches. ``entity_type`` keeps one type, ``contains`` the entities
        whose key or lower-cased name contains it (pass it case-folded).
        ``sample``: also the newest ``sample`` memories of each entity listed
        (in :attr:`EntityCount.sample`, as :meth:`entity_memories` orders them).
        """
        ...

    def entity_memories(
        self,
        scope: Scope,
        key: str,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> tuple[EntityCount | None, list[MemoryRow]]:
        """The entity ``key`` in the scope, and a page of its memories, newest stored first.

        The entity as :meth:`entities` counts it (``None``, and no memories,
        when no live memory of the scope mentions it); its memories in the
        store's insertion order, newest first (the order of ``created_at`` for
        memories added, not imported).
        """
        ...

    def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
        *,
        include_expired: bool = False,
    ) -> list[tuple[MemoryRow, float]]:
        """The ``k`` live memories of the scope most similar to ``query`` (cosine)."""
        ...

    def neighbours(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        span: int,
        *,
        include_expired: bool = False,
    ) -> dict[str, list[tuple[int, MemoryRow]]]:
        """For each of ``memory_ids``: up to ``span`` memories each side of it, nearest first.

        A neighbour has the memory's own ``user_id``, ``agent_id`` and ``run_id``
        (the same conversation session) and is live, in ``scope`` and matches
        ``where``. Order: insertion (``created_at``, then the store's row
        order); each comes with its offset, ``-1, +1, -2, +2, ...``. An unknown
        id has no entry. Used by the neighbour expansion of search.
        """
        ...

    def entity_hop(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        max_degree: int,
        *,
        include_expired: bool = False,
    ) -> dict[str, list[tuple[MemoryRow, list[tuple[str, int]]]]]:
        """For each of ``memory_ids``: the memories sharing one of its entities, by row order.

        Only entities linked to at most ``max_degree`` memories that are live,
        in ``scope`` and match ``where`` count (the degree is that count); each
        memory listed is such a memory, never the anchor itself, and comes with
        the shared entities as ``(normalised name, degree)``, sorted. An unknown
        id, or one that shares no such entity, has no entry. Used by the entity
        second hop of search.
        """
        ...

    def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
        *,
        include_expired: bool = False,
        stat_terms: Sequence[str] = (),
        vectors: bool = False,
    ) -> list[Candidate]:
        """Candidates for a query: the vector top ``n``, the BM25 top ``n``, entity links.

        Only live memories in scope; the memories linked to the query's
        (normalised) entities are included. Each carries the scope's keyword
        statistics of ``stat_terms`` (terms that do not rank: the attribute
        terms fusion weighs) and, with ``vectors``, its stored vector.
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
        expires_at: str | Keep | None = KEEP,
    ) -> tuple[MemoryRow, HistoryEvent]:
        """Change text, metadata and/or expiry (``KEEP``: unchanged); writes an UPDATE event."""
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

    def ping(self, timeout: float | None = None) -> None:
        """Check that the backend answers; raises StoreError (or StoreUnavailableError) if not.

        ``timeout`` bounds the wait for a server that cannot be reached (the
        store's own deadline when None); a file store ignores it.
        """
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

    async def change_mark(self) -> str:
        """See :meth:`Store.change_mark`."""
        ...

    async def embedding_sources(self, after: int, limit: int) -> list[EmbeddingSource]:
        """See :meth:`Store.embedding_sources`."""
        ...

    async def term_sources(self, after: int, limit: int) -> list[TermSource]:
        """See :meth:`Store.term_sources`."""
        ...

    async def attribute_terms_version(self) -> str | None:
        """See :meth:`Store.attribute_terms_version`."""
        ...

    async def record_attribute_terms_version(self, version: str | None) -> None:
        """See :meth:`Store.record_attribute_terms_version`."""
        ...

    async def retag(self, changes: Sequence[TermChange]) -> int:
        """See :meth:`Store.retag`."""
        ...

    async def rebind_embedder(
        self,
        old: tuple[str, int],
        new: tuple[str, int],
        vectors: Mapping[int, np.ndarray[Any, np.dtype[np.float32]]],
        since: str,
    ) -> Rebinding:
        """See :meth:`Store.rebind_embedder`."""
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

    async def detach_session(
        self,
        memory_id: str,
        sessions: Sequence[tuple[str, str]],
        actor: str,
        reason: str | None = None,
    ) -> HistoryEvent | None:
        """See :meth:`Store.detach_session`."""
        ...

    async def link(self, links: Sequence[LinkChange], actor: str) -> list[HistoryEvent]:
        """See :meth:`Store.link`."""
        ...

    async def unlink(self, links: Sequence[LinkChange], actor: str) -> list[HistoryEvent]:
        """See :meth:`Store.unlink`."""
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

    async def source_messages(
        self, memory_id: str, visible: Scope | None = None
    ) -> list[NewMessage]:
        """See :meth:`Store.source_messages`."""
        ...

    async def scope_counts(self, visible: Scope | None = None) -> ScopeCounts:
        """See :meth:`Store.scope_counts`."""
        ...

    async def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> set[str]:
        """See :meth:`Store.existing_hashes`."""
        ...

    async def get(self, memory_id: str, *, include_deleted: bool = False) -> MemoryRow | None:
        """See :meth:`Store.get`."""
        ...

    async def list_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> list[MemoryRow]:
        """See :meth:`Store.list_memories`."""
        ...

    async def count_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int | None = None,
        include_expired: bool = False,
    ) -> int:
        """See :meth:`Store.count_memories`."""
        ...

    async def entities(
        self,
        scope: Scope,
        *,
        limit: int,
        offset: int = 0,
        entity_type: str | None = None,
        contains: str | None = None,
        sample: int = 0,
        include_expired: bool = False,
    ) -> tuple[list[EntityCount], int]:
        """See :meth:`Store.entities`."""
        ...

    async def entity_memories(
        self,
        scope: Scope,
        key: str,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> tuple[EntityCount | None, list[MemoryRow]]:
        """See :meth:`Store.entity_memories`."""
        ...

    async def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
        *,
        include_expired: bool = False,
    ) -> list[tuple[MemoryRow, float]]:
        """See :meth:`Store.vector_search`."""
        ...

    async def neighbours(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        span: int,
        *,
        include_expired: bool = False,
    ) -> dict[str, list[tuple[int, MemoryRow]]]:
        """See :meth:`Store.neighbours`."""
        ...

    async def entity_hop(
        self,
        scope: Scope,
        where: Node | None,
        memory_ids: Sequence[str],
        max_degree: int,
        *,
        include_expired: bool = False,
    ) -> dict[str, list[tuple[MemoryRow, list[tuple[str, int]]]]]:
        """See :meth:`Store.entity_hop`."""
        ...

    async def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
        *,
        include_expired: bool = False,
        stat_terms: Sequence[str] = (),
        vectors: bool = False,
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
        expires_at: str | Keep | None = KEEP,
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

    async def ping(self, timeout: float | None = None) -> None:
        """See :meth:`Store.ping`."""
        ...

    async def reset(self) -> None:
        """See :meth:`Store.reset`."""
        ...

    async def close(self) -> None:
        """See :meth:`Store.close`."""
        ...
