"""Import of exported rows: what each row writes and how an import refuses, for every backend.

``Memory.import_jsonl`` validates the export's lines and computes hashes,
terms, entities and (when the models differ) vectors; the store writes the
rows back in one transaction. :func:`imported` reads one row into the
values a backend inserts (:class:`ImportedMemory`); :func:`clash_error` and
:func:`repeat_error` are the two refusals (an id that exists already, a
text that repeats another live memory of its partition). Links are written
after every row, since a row may link to one imported after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engramdb.core.records import (
    DERIVED_KINDS,
    LINK_KINDS,
    EntityRef,
    HistoryEvent,
    Scope,
    visible_scope,
)
from engramdb.errors import ImportFormatError

__all__ = ["ImportedMemory", "clash_error", "imported", "repeat_error"]


@dataclass
class ImportedMemory:
    """One exported memory as a backend writes it back."""

    id: str
    text: str
    hash: str
    scope: Scope
    partition: str
    """The partition of the row's own scope (see :attr:`Scope.partition`)."""
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
    terms: str
    embedding: Any
    """The vector as ``import_jsonl`` decoded or computed it (array-like float32)."""
    entities: list[EntityRef]
    sessions: list[tuple[str, list[str]]]
    """Attached sessions: ``("run_id", [...])`` then ``("agent_id", [...])``."""
    history: list[HistoryEvent]
    links: list[str]
    """Public ids of the memories it links to (written once every row is in)."""
    link_kinds: dict[str, str] = field(default_factory=dict)
    """The kind of each outgoing link of ``links`` that is not ``related`` (the export's
    ``link_kinds`` read from this memory's side; incoming labels are written by the
    other end's row)."""

    @property
    def owner(self) -> str:
        """The owner key of its scope (entities and purge's lock are per owner)."""
        return self.scope.owner


def imported(r: dict[str, Any]) -> ImportedMemory:
    """The values an exported row (as ``import_jsonl`` prepared it) writes back."""
    scope = Scope(r.get("user_id"), r.get("agent_id"), r.get("run_id"))
    return ImportedMemory(
        id=r["id"],
        text=r["memory"],
        hash=r["hash"],
        scope=scope,
        partition=visible_scope(scope).partition,
        actor_id=r.get("actor_id"),
        role=r.get("role"),
        attributed_to=r.get("attributed_to"),
        memory_type=r.get("memory_type"),
        metadata=r.get("metadata") or {},
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        observed_at=r.get("observed_at"),
        expires_at=r.get("expires_at"),
        deleted_at=r.get("deleted_at"),
        version=int(r.get("version", 1)),
        terms=r["terms"],
        embedding=r["embedding"],
        entities=list(r.get("entities", [])),
        sessions=[(kind, list(r.get(f"{kind}s", []))) for kind in ("run_id", "agent_id")],
        history=[
            HistoryEvent(
                memory_id=r["id"],
                event=h["event"],
                version=int(h.get("version", 1)),
                old_memory=h.get("old_memory"),
                new_memory=h.get("new_memory"),
                old_metadata=h.get("old_metadata"),
                new_metadata=h.get("new_metadata"),
                actor=h.get("actor", "import"),
                reason=h.get("reason"),
                created_at=h["created_at"],
                # Exports from before schema v3 hold no expiry in history: it could
                # not change after the add then, so every event had the memory's own.
                old_expires_at=h.get("old_expires_at", r.get("expires_at")),
                new_expires_at=h.get("new_expires_at", r.get("expires_at")),
            )
            for h in r.get("history", [])
        ],
        links=list(r.get("linked_memory_ids", [])),
        link_kinds={
            str(k): str(v)
            for k, v in (r.get("link_kinds") or {}).items()
            if v in LINK_KINDS or v in DERIVED_KINDS
        },
    )


def clash_error(clash: list[str]) -> ImportFormatError:
    """The refusal of an import some of whose ids exist already (``clash``: those ids)."""
    return ImportFormatError(
        f"{len(clash)} memories of the import already exist (first: {clash[0]!r}); "
        "import into an empty store, or purge them first; nothing was imported"
    )


def repeat_error(row: ImportedMemory) -> ImportFormatError:
    """The refusal of a row whose text repeats another live memory of its partition."""
    return ImportFormatError(
        f"memory {row.id!r} repeats the text of another live memory of the "
        f"same scope ({row.owner}); nothing was imported"
    )
