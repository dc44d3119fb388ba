"""The records that cross the store port: scopes, memories, messages, events (and hits).

Plain data, no I/O. They live in the core because the core builds and reads
them (validation makes scopes, retrieval fuses candidates, the flows decide
what to store); :mod:`engramdb.stores.base` re-exports them beside the
protocols a backend implements.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = [
    "DERIVED_KINDS",
    "INCOMING_KIND",
    "KEEP",
    "LINK_KINDS",
    "SUPERSEDING_KINDS",
    "AddOutcome",
    "Candidate",
    "EmbeddingSource",
    "EntityCount",
    "EntityRef",
    "HistoryEvent",
    "Hit",
    "Keep",
    "LinkChange",
    "LinkKind",
    "MemoryRow",
    "NewMemory",
    "NewMessage",
    "Rebinding",
    "RestorePlan",
    "Scope",
    "ScopeCounts",
    "ScopeKind",
    "TermChange",
    "TermSource",
    "TermStats",
    "visible_scope",
]

ScopeKind = Literal["user_id", "agent_id", "run_id"]


class Keep(enum.Enum):
    """The type of :data:`KEEP`."""

    KEEP = "keep"


KEEP = Keep.KEEP
"""``Store.update(expires_at=KEEP)``: leave the memory's expiry as it is."""

EntityRef = tuple[str, str, str]
"""An entity mention: ``(name, normalized, type)``."""

LinkKind = Literal["related", "updates", "contradicts", "follows_up"]

LINK_KINDS: tuple[LinkKind, ...] = ("related", "updates", "contradicts", "follows_up")
"""What a link from a new memory to an existing one says (stored in ``memory_links.kind``):
``updates`` the new one replaces it (a changed preference, a move), ``contradicts`` the
two cannot both hold, ``follows_up`` a later event of the same story, ``related``
anything else (and every link stored before link kinds existed)."""

DERIVED_KINDS: tuple[str, ...] = ("derived_update",)
"""Link kinds no caller writes through ``add``: ``derived_update`` is a supersession
that ``engram maintain`` derived without an LLM (same subject and attribute, a newer
value; :mod:`engramdb.derived`), written with :meth:`Store.link` and taken back with
:meth:`Store.unlink`, each a ``LINK`` / ``UNLINK`` history event."""

SUPERSEDING_KINDS: frozenset[str] = frozenset({"updates", "contradicts", "derived_update"})
"""The kinds that make the older end of a link *superseded* when the newer end is
live and visible (derived at read time, never stored)."""

INCOMING_KIND: dict[str, str] = {
    "related": "related",
    "updates": "updated_by",
    "contradicts": "contradicted_by",
    "follows_up": "followed_up_by",
    "derived_update": "derived_updated_by",
}
"""How a link reads from its target's side: the label of an incoming link."""


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
        :func:`engramdb.stores.base.visible_scope`), so a repeat never matches a
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
    link_kinds: dict[str, str] = field(default_factory=dict)
    """The kind (:data:`LINK_KINDS`) of each of ``links``; a missing id is ``related``."""
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
    """Memories linked to this one, either way, by id."""
    link_kinds: dict[str, str] = field(default_factory=dict)
    """The link with each of ``linked_ids`` read from this memory's side: an outgoing
    kind (``updates``, ...) or an incoming label (:data:`INCOMING_KIND`: ``updated_by``,
    ...). Ids linked only by ``related`` links may be missing (``related``)."""

    @property
    def superseder_ids(self) -> list[str]:
        """Memories that link to this one with a superseding kind.

        Not yet checked for being live, newer or visible: the flows decide whether
        this memory is superseded.
        """
        return [
            i
            for i, kind in self.link_kinds.items()
            if kind in ("updated_by", "contradicted_by", "derived_updated_by")
        ]


@dataclass(frozen=True)
class LinkChange:
    """One link between two existing memories, for :meth:`Store.link` / :meth:`Store.unlink`.

    ``from_id`` is the memory whose link it is (the newer one of a supersession),
    ``to_id`` the memory it points at; both must be of one owner. ``reason`` is
    kept in the ``LINK`` / ``UNLINK`` history events of both memories.
    """

    from_id: str
    to_id: str
    kind: str
    reason: str | None = None


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
    old_expires_at: str | None = None
    """The memory's expiry before the event (UPDATE, RESTORE, DELETE)."""
    new_expires_at: str | None = None
    """The memory's expiry after the event: what restoring this version brings back."""


@dataclass
class AddOutcome:
    """What happened to one memory of an add: stored (ADD) or already there (NONE)."""

    id: str
    memory: str
    event: Literal["ADD", "NONE"]
    history: HistoryEvent | None


@dataclass(frozen=True)
class TermStats:
    """How many documents a scope's keyword statistics count, and how many hold each term.

    BM25's statistics for terms a search asks about without ranking by them
    (the attribute terms the fusion's attribute part weighs: attributes.py).
    """

    live: int
    """Documents the statistics count."""
    df: Mapping[str, int]
    """Documents holding each term (a term no document holds is absent)."""


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
    bm25_best: float = 0.0
    """What a memory holding exactly the query's words would score in this scope
    (the same for every candidate of a search; the scale of ``bm25``)."""
    term_stats: TermStats | None = None
    """The scope's statistics of the search's ``stat_terms`` (the same for every
    candidate of a search); None when it asked none."""
    vector: np.ndarray[Any, np.dtype[np.float32]] | None = None
    """The memory's stored vector, when the backend read it: what
    fusion reads the memory's attributes from (:mod:`engramdb.attributes`)."""


@dataclass
class Hit:
    """One search result: the memory, its final score in [0, 1], and how it was made.

    Fusion (:mod:`engramdb.search`) makes hits from candidates; it lives here,
    beside :class:`Candidate`, so the query rewrite (:mod:`engramdb.rewrite`),
    which search configures, can merge hits without importing search.
    """

    row: MemoryRow
    score: float
    explain: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScopeCounts:
    """How many memories a scope holds, counted by the store (``Store.scope_counts``).

    ``users``, ``agents`` and ``runs`` count the *live* memories (not deleted,
    not expired) per id; a memory counts under its own agent and run and under
    every session attached to it. ``per_day`` counts every memory added per UTC
    day of ``created_at`` (``YYYY-MM-DD``), deleted and expired ones too.
    """

    live: int = 0
    """Memories neither deleted nor expired: what a listing shows."""
    expired: int = 0
    """Memories not deleted whose ``expires_at`` has passed."""
    deleted: int = 0
    """Soft-deleted memories (restorable)."""
    users: dict[str, int] = field(default_factory=dict)
    agents: dict[str, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    per_day: dict[str, int] = field(default_factory=dict)
    """Ordered by day."""


@dataclass
class EntityCount:
    """An entity the memories of a scope mention (``Store.entities``).

    The store keeps one entity per owner and normalised name; a scope that
    spans owners (an agent that served several users) shows each name once.
    """

    key: str
    """The normalised name (:func:`engramdb.nlp.entities.normalize_entity`): what links
    memories."""
    name: str
    """The name as first written."""
    type: str | None
    """``PERSON``, ``PLACE``, ``ORG``, ``DATE``, ``NUMBER``, ``THING`` (or ``None``)."""
    degree: int
    """The scope's live memories (not deleted, not expired) that mention it."""
    sample: list[MemoryRow] = field(default_factory=list)
    """The newest of those memories, when asked for (``Store.entities(sample=n)``)."""


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
    expires_at: str | None = None
    """The expiry that comes back with it."""


@dataclass(frozen=True)
class EmbeddingSource:
    """What one stored memory's vector is made from, for ``Store.embedding_sources``.

    ``key`` is the store's internal row key (not the public id): the order of
    a full scan and the key of ``Store.rebind_embedder``'s vectors.
    """

    key: int
    text: str
    actor_id: str | None
    """The speaker, embedded before the text when ``retrieval.embed_actor`` is on."""


@dataclass(frozen=True)
class TermSource:
    """One stored memory's keyword terms and vector, for ``Store.term_sources``.

    ``key`` is the store's internal row key, as :class:`EmbeddingSource`'s;
    ``vector`` is ``None`` for a memory stored without one.
    """

    key: int
    terms: str
    vector: Any


@dataclass(frozen=True)
class TermChange:
    """New keyword terms for one memory (``Store.retag``): applied only over ``old``."""

    key: int
    old: str
    new: str


@dataclass
class Rebinding:
    """What :meth:`Store.rebind_embedder` did.

    ``done``: every vector was replaced and the store bound to the new
    embedder, in one transaction (``written`` vectors). Otherwise nothing
    was written: ``stale`` lists the memories written since the caller's mark
    (or that it has no vector for), and ``mark`` is the mark to pass with
    their new vectors in the next attempt.
    """

    done: bool
    written: int = 0
    stale: list[EmbeddingSource] = field(default_factory=list)
    mark: str = ""
