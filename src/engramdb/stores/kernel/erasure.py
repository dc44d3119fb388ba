"""Erasure planning: what a purge removes or rewrites, decided once for every backend.

A purge names memories (one id, or a scope). Everything derived from them
can name where it came from — vectors and keyword rows by memory, raw
messages through ``memory_sources``, borrowed keyword terms through
``memory_context``, kept extraction failures through ``failure_messages``,
entities through ``memory_entities`` — so a backend reads those provenance
rows (:class:`ErasureFacts`, a superset of what may go) and
:func:`plan_erasure` decides, with no SQL and no I/O, what the purge
removes (:class:`ErasurePlan`). The flow then recomputes the keyword terms
of the memories whose context terms borrowed words from an erased message
(:func:`reindexed_terms`), and the backend executes the plan in one write
transaction. The backend re-reads the facts inside that transaction and
refuses a plan that no longer matches (``ConflictError``), so a write that
came between the plan and the purge is never half-erased.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from engramdb.core.records import Scope
from engramdb.errors import ConflictError
from engramdb.nlp import document_terms, index_terms
from engramdb.nlp.terms import split_attribute_terms, with_attribute_terms

__all__ = [
    "DERIVED_ROWS",
    "PLAN_ATTEMPTS",
    "ErasureFacts",
    "ErasurePlan",
    "NeighbourFacts",
    "Reindex",
    "check_terms",
    "owner_columns",
    "plan_erasure",
    "purge_with",
    "reindexed_terms",
]

PLAN_ATTEMPTS = 5
"""Plans a purge makes before giving up when writes keep changing what it covers."""


DERIVED_ROWS: tuple[tuple[str, str], ...] = (
    ("memory_entities", "memory_rowid"),
    ("memory_sources", "memory_rowid"),
    ("memory_context", "memory_rowid"),
    ("memory_scope", "memory_rowid"),
    ("memory_links", "from_rowid"),
    ("memory_links", "to_rowid"),
)
"""The tables (and their column naming a memory's rowid) holding rows derived from a
memory, which a purge deletes with it in every backend; a backend adds its own
(SQLite: its vector and FTS tables) before the ``memories`` row itself."""


def owner_columns(owner: str) -> list[tuple[str, str | None]]:
    """The column conditions that select an owner's rows: ``(column, value or None)``.

    ``user:alice`` is ``user_id = 'alice'``; ``agent:coach`` is ``user_id IS NULL
    AND agent_id = 'coach'``; ``run:r1`` also needs ``agent_id IS NULL``. A
    per-id purge that takes an owner's last memory also takes the owner's
    raw messages and extraction failures that no memory refers to any more,
    selected with these conditions, so purging every memory one id at a time
    ends where a purge of the owner's scope does.
    """
    kind, _, value = owner.partition(":")
    order = ("user_id", "agent_id", "run_id")
    column = {"user": "user_id", "agent": "agent_id", "run": "run_id"}.get(kind)
    if column is None or not value:
        raise ValueError(f"not an owner: {owner!r}")
    out: list[tuple[str, str | None]] = [(c, None) for c in order[: order.index(column)]]
    out.append((column, value))
    return out


@dataclass
class NeighbourFacts:
    """A memory whose keyword terms borrow words from one of the candidate messages."""

    rowid: int
    text: str
    terms: str
    """The keyword terms stored now."""
    context: list[tuple[int, str]]
    """Every message it borrows from, as ``(message rowid, content)`` in rowid order."""


@dataclass
class ErasureFacts:
    """What a backend reads for a purge: the provenance around the named memories.

    The message, failure and neighbour lists may hold more than will go;
    :func:`plan_erasure` decides.
    """

    memories: list[tuple[int, str, str]]
    """``(rowid, public id, owner)`` of every memory the purge names."""
    scope_messages: list[int] = field(default_factory=list)
    """Raw messages stored under the purged scope (a scope purge), or under the owner
    of a memory purged by id when no other memory of that owner remains."""
    scope_failures: list[int] = field(default_factory=list)
    """Extraction failures recorded under the purged scope, or under the owner of the
    last memory of that owner purged by id (see :func:`owner_columns`)."""
    sources: list[tuple[int, int]] = field(default_factory=list)
    """``(memory rowid, message rowid)`` source pairs of the named memories and of
    every message of :attr:`failure_messages`."""
    failure_messages: list[tuple[int, int]] = field(default_factory=list)
    """``(failure rowid, message rowid)`` of the scope's failures and of every failure
    that kept a source message of a named memory."""
    neighbours: list[NeighbourFacts] = field(default_factory=list)
    """Memories not named that borrow words from a candidate message."""
    entity_links: list[tuple[int, int]] = field(default_factory=list)
    """``(entity rowid, memory rowid)`` of every link of an entity a named memory links."""
    orphan_entities: list[int] = field(default_factory=list)
    """Entities of the named memories' owners that no memory links (left by updates)."""


@dataclass(frozen=True)
class Reindex:
    """A memory to keep whose keyword terms must be recomputed without erased words."""

    rowid: int
    text: str
    terms: str
    """Its terms now."""
    context: tuple[str, ...]
    """The contents of every message it borrowed words from."""
    kept: tuple[str, ...]
    """The contents of those messages that stay."""


@dataclass(frozen=True)
class ErasurePlan:
    """Everything one purge removes or rewrites; a backend only executes it."""

    memory_id: str | None
    scope: Scope | None
    memory_rowids: tuple[int, ...]
    """Memories erased, with their vectors, keyword rows, sessions, links, entity
    links, sources and context rows."""
    memory_ids: tuple[str, ...]
    """Their public ids: the history rows of these ids are erased."""
    owners: tuple[str, ...]
    """Owners whose writers the purge excludes while it runs (sorted: lock order)."""
    messages: tuple[int, ...]
    """Raw messages erased (and every source, context and failure row naming them)."""
    failures: tuple[int, ...]
    """Extraction failures erased: their error and reply may quote the messages."""
    entities: tuple[int, ...]
    """Entities erased: no memory that stays links them."""
    reindex: tuple[Reindex, ...]
    """Memories that stay, whose keyword terms borrowed from erased messages."""

    @property
    def touched(self) -> bool:
        """Whether executing the plan changes anything at all."""
        return bool(
            self.memory_rowids or self.messages or self.failures or self.entities or self.reindex
        )


def plan_erasure(
    facts: ErasureFacts, *, memory_id: str | None = None, scope: Scope | None = None
) -> ErasurePlan:
    """Decide what a purge removes, from the provenance a backend read.

    - the named memories, and their history;
    - their source messages, and (scope purge) every message of the scope;
    - every extraction failure of the scope or that kept one of those
      messages, with its own kept messages unless a memory that stays was
      made from them;
    - every entity that only erased memories link, and the owners' unlinked
      entities;
    - for each memory that stays and borrowed keyword terms from an erased
      message: a re-index over the messages it keeps borrowing from.
    """
    targets = {rowid for rowid, _, _ in facts.memories}
    direct = {msg for mem, msg in facts.sources if mem in targets}
    direct.update(facts.scope_messages)
    kept_by: dict[int, set[int]] = defaultdict(set)
    for failure, msg in facts.failure_messages:
        kept_by[failure].add(msg)
    failures = set(facts.scope_failures)
    failures.update(f for f, msgs in kept_by.items() if msgs & direct)
    users: dict[int, set[int]] = defaultdict(set)
    for mem, msg in facts.sources:
        users[msg].add(mem)
    erased = set(direct)
    for failure in failures:
        # A failure's kept messages exist for a retry that the purge makes
        # impossible; they go unless a memory that stays was made from them.
        erased.update(m for m in kept_by.get(failure, ()) if users.get(m, set()) <= targets)
    reindex = []
    for n in sorted(facts.neighbours, key=lambda n: n.rowid):
        if n.rowid in targets or not any(m in erased for m, _ in n.context):
            continue
        reindex.append(
            Reindex(
                rowid=n.rowid,
                text=n.text,
                terms=n.terms,
                context=tuple(c for _, c in n.context),
                kept=tuple(c for m, c in n.context if m not in erased),
            )
        )
    linked: dict[int, set[int]] = defaultdict(set)
    for entity, mem in facts.entity_links:
        linked[entity].add(mem)
    entities = {e for e, mems in linked.items() if mems <= targets}
    entities.update(facts.orphan_entities)
    return ErasurePlan(
        memory_id=memory_id,
        scope=scope,
        memory_rowids=tuple(sorted(targets)),
        memory_ids=tuple(sorted({mid for _, mid, _ in facts.memories})),
        owners=tuple(sorted({owner for _, _, owner in facts.memories})),
        messages=tuple(sorted(erased)),
        failures=tuple(sorted(failures)),
        entities=tuple(sorted(entities)),
        reindex=tuple(reindex),
    )


def reindexed_terms(plan: ErasurePlan) -> dict[int, str]:
    """The new keyword terms of every memory the plan re-indexes, by rowid.

    A memory keeps its own terms and those of the context messages that
    stay. If its stored terms are not what its text and its context give
    (an update or restore rebuilt them from the text alone), it gets the
    terms of its text alone, which is what it had.
    """
    out: dict[int, str] = {}
    for r in plan.reindex:
        # Attribute terms come from the memory's vector, not its words: they stay.
        words, attrs = split_attribute_terms(r.terms)
        if words == document_terms(r.text, r.context):
            out[r.rowid] = with_attribute_terms(document_terms(r.text, r.kept), attrs)
        else:
            out[r.rowid] = with_attribute_terms(index_terms(r.text), attrs)
    return out


def check_terms(plan: ErasurePlan, terms: Mapping[int, str]) -> None:
    """Refuse terms that do not cover exactly the memories the plan re-indexes."""
    want = {r.rowid for r in plan.reindex}
    if set(terms) != want:
        raise ValueError(
            f"the purge needs new keyword terms for memories {sorted(want)}, got {sorted(terms)}"
        )


class _Purging(Protocol):
    def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> ErasurePlan: ...

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int: ...


def purge_with(store: _Purging, *, memory_id: str | None, scope: Scope | None) -> int:
    """Plan, re-index and execute a purge on a blocking store (``Store.purge``).

    ``Memory.purge`` runs the same three steps as a flow (``purge`` in ``flows/change.py``).
    """
    for _ in range(PLAN_ATTEMPTS - 1):
        plan = store.plan_purge(memory_id=memory_id, scope=scope)
        try:
            return store.apply_purge(plan, reindexed_terms(plan))
        except ConflictError:
            continue
    plan = store.plan_purge(memory_id=memory_id, scope=scope)
    return store.apply_purge(plan, reindexed_terms(plan))
