"""The change flows: update, delete, delete_all, restore, purge (erasure).

Owns :class:`ChangeFlows`: every change to stored memories the API makes
(the consolidation pass of :mod:`engramdb.flows.extraction` changes
memories through ``update`` and ``delete`` too, as actor ``llm``), each
with its history event, and the plan / re-index / apply loop of erasure.

May call: :mod:`engramdb.flows.shared`, the effects, core (validation,
text), nlp, fusion's ``document_text``, the store port and the store
kernel's erasure planning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from engramdb._engine import EmbedDocuments, Flow, store_call
from engramdb.core.access import attachment_of
from engramdb.core.text import content_hash
from engramdb.core.validate import check_metadata, check_scope, check_text
from engramdb.errors import (
    ConflictError,
    DuplicateMemoryError,
    MemoryNotFoundError,
    ValidationError,
)
from engramdb.flows.shared import FlowState, entities_of, expires_at_of, item
from engramdb.nlp import index_terms
from engramdb.nlp.terms import with_attribute_terms
from engramdb.search import document_text
from engramdb.stores.base import KEEP, Keep, MemoryRow, Scope, Store
from engramdb.stores.kernel.erasure import PLAN_ATTEMPTS, ErasurePlan, reindexed_terms

log = logging.getLogger("engramdb")

T = TypeVar("T")

_EVERY = 1 << 62
"""A limit that lists a whole scope."""


def _dry(
    purged: list[str], detached: list[str], kept: list[str], plan: ErasurePlan | None = None
) -> dict[str, Any]:
    """A purge dry run's report: what goes, what is only detached, what stays."""
    out: dict[str, Any] = {
        "dry_run": True,
        "purged": len(purged),
        "memory_ids": sorted(purged),
        "detached_ids": sorted(detached),
        "kept_ids": sorted(kept),
    }
    if plan is not None:
        out["messages"] = len(plan.messages)
        out["failures"] = len(plan.failures)
        out["entities"] = len(plan.entities)
        out["reindexed"] = len(plan.reindex)
    return out


class ChangeFlows(FlowState):
    """Changes to stored memories, each reversible but ``purge``."""

    def update(
        self,
        memory_id: object,
        *,
        text: object = None,
        metadata: object = None,
        actor: str | None = None,
        reason: str | None = None,
        visible: Scope | None = None,
        expiration_date: object = KEEP,
    ) -> Flow[dict[str, Any]]:
        """``Memory.update``: new text, metadata and/or expiry, history keeps the old.

        ``visible`` narrows further what may be changed (consolidation passes
        the scope its LLM was shown).
        """
        if text is None and metadata is None and expiration_date is KEEP:
            raise ValidationError("update() needs text, metadata and/or expiration_date")
        expires: str | Keep | None = (
            KEEP if expiration_date is KEEP else expires_at_of(expiration_date)
        )
        self._may("write", "update()")
        mid = self._memory_id(memory_id)
        row = self._seen((yield from store_call(Store.get, mid)), visible)
        if row is None:
            raise MemoryNotFoundError(mid)
        self._owned(row, "update()")
        new_meta = row.metadata if metadata is None else check_metadata(metadata)
        new_text = (
            row.text if text is None else check_text(text, self.limits.max_text_chars).strip()
        )
        embedding = None
        if new_text != row.text or self.attributes_on:
            # A new text needs its vector; the same text too for its attribute terms.
            yield from self._bind()
            doc = document_text(new_text, row.actor_id, self.fusion)
            embedding = (yield EmbedDocuments([doc]))[0]
        attrs = self._attribute_terms([embedding] if embedding is not None else [])
        new_row, event = yield from self._masked(
            store_call(
                Store.update,
                mid,
                text=new_text,
                hash=content_hash(new_text),
                embedding=embedding,
                terms=with_attribute_terms(index_terms(new_text), attrs[0] if attrs else ""),
                entities=entities_of(new_text),
                metadata=new_meta,
                actor=actor or self.actor,
                reason=reason,
                expires_at=expires,
            )
        )
        yield from self._emit([event])
        shown = yield from self._linkable([new_row])
        return {"message": "Memory updated successfully!", **item(new_row, shown)}

    def delete(
        self,
        memory_id: object,
        *,
        actor: str | None = None,
        reason: str | None = None,
        visible: Scope | None = None,
    ) -> Flow[dict[str, Any]]:
        """``Memory.delete``: soft delete (of a memory ``visible`` sees, when given).

        A view that sees the memory only through an attached session detaches
        that session instead (a DETACH event); the memory stays for its owner.
        """
        self._may("delete", "delete()")
        mid = self._memory_id(memory_id)
        if self.within is not None or visible is not None or not self._unrestricted:
            row = self._seen((yield from store_call(Store.get, mid)), visible)
            if row is None:
                raise MemoryNotFoundError(mid)
            if self._holding(row) == "attached":
                yield from self._detach(row, actor or self.actor, reason)
                return {"message": "Memory detached from this scope.", "id": mid}
            self._owned(row, "delete()")
        _, event = yield from store_call(
            Store.delete, mid, actor=actor or self.actor, reason=reason
        )
        yield from self._emit([event])
        return {"message": "Memory deleted successfully!", "id": mid}

    def delete_all(self, ids: dict[str, object]) -> Flow[dict[str, Any]]:
        """``Memory.delete_all``: soft-delete one scope.

        Through a view, memories of the scope it does not own are left alone:
        those it holds by attachment are detached, those about users it was
        not granted are skipped.
        """
        self._may("delete", "delete_all()")
        ids = self._inside(ids)
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="delete_all()")
        if self._unrestricted:
            events = yield from store_call(Store.delete_scope, scope, actor=self.actor)
            yield from self._emit(events)
            return {"message": "Memories deleted successfully!", "deleted": len(events)}
        rows = yield from store_call(
            Store.list_memories, scope, None, limit=_EVERY, include_expired=True
        )
        deleted = 0
        for row in rows:
            how = self._holding(row)
            if how == "attached":
                yield from self._detach(row, self.actor, "delete_all")
            elif how == "owned":
                _, event = yield from store_call(
                    Store.delete, row.id, actor=self.actor, reason="delete_all"
                )
                yield from self._emit([event])
                deleted += 1
        return {"message": "Memories deleted successfully!", "deleted": deleted}

    @property
    def _unrestricted(self) -> bool:
        """Whether no view limits what the caller owns (the library, an admin key)."""
        return self.within is None and self.access.users is None

    def _detach(self, row: MemoryRow, actor: str, reason: str | None) -> Flow[None]:
        """Take the caller's attached sessions off ``row`` (which its owner keeps)."""
        assert self.within is not None
        event = yield from store_call(
            Store.detach_session, row.id, attachment_of(row, self.within), actor, reason
        )
        yield from self._emit([event])

    def restore(self, memory_id: object, version: object) -> Flow[dict[str, Any]]:
        """``Memory.restore``: undo a delete or an update."""
        self._may("write", "restore()")
        mid = self._memory_id(memory_id)
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ValidationError(f"version must be an integer, got {type(version).__name__}")
        if self.within is not None or not self._unrestricted:
            self._owned((yield from self._visible_by_id(mid)), "restore()")
        plan = yield from store_call(Store.plan_restore, mid, version)
        current = yield from store_call(Store.get, mid, include_deleted=True)
        embedding = None
        if current is not None and (plan.text != current.text or self.attributes_on):
            yield from self._bind()
            doc = document_text(plan.text, current.actor_id, self.fusion)
            embedding = (yield EmbedDocuments([doc]))[0]
        attrs = self._attribute_terms([embedding] if embedding is not None else [])
        row, event = yield from self._masked(
            store_call(
                Store.apply_restore,
                plan,
                hash=content_hash(plan.text),
                embedding=embedding,
                terms=with_attribute_terms(index_terms(plan.text), attrs[0] if attrs else ""),
                entities=entities_of(plan.text),
                actor=self.actor,
            )
        )
        yield from self._emit([event])
        shown = yield from self._linkable([row])
        return item(row, shown)

    def purge(self, memory_id: object, ids: dict[str, object]) -> Flow[dict[str, Any]]:
        """``Memory.purge``: irreversible erasure.

        Through a view, only memories it owns are erased: one it holds by
        attachment is detached instead (its owner keeps it), one about a user
        it was not granted is left alone. A scope the view owns entirely is
        erased in one transaction, with its messages and failure records.
        """
        self._may("purge", "purge()")
        detached = 0
        if memory_id is not None:
            if any(v is not None for v in ids.values()):
                raise ValidationError("purge() takes a memory_id or scope ids, not both")
            mid = self._memory_id(memory_id)
            if self.within is not None or not self._unrestricted:
                row = yield from self._visible_by_id(mid)
                if self._holding(row) == "attached":
                    yield from self._detach(row, self.actor, "purge")
                    return {
                        "message": "Memory detached from this scope.",
                        "purged": 0,
                        "detached": 1,
                    }
                self._owned(row, "purge()")
            count = yield from self._erase({"memory_id": mid})
        else:
            ids = self._inside(ids)
            scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="purge()")
            count, detached = yield from self._erase_scope(scope)
        log.info("purged %d memories", count)
        out: dict[str, Any] = {"message": "Memories purged.", "purged": count}
        if detached:
            out["detached"] = detached
        return out

    def plan_purge(self, memory_id: object, ids: dict[str, object]) -> Flow[dict[str, Any]]:
        """What ``purge`` with the same arguments would erase, erasing nothing (a dry run)."""
        self._may("purge", "purge()")
        if memory_id is not None:
            if any(v is not None for v in ids.values()):
                raise ValidationError("purge() takes a memory_id or scope ids, not both")
            mid = self._memory_id(memory_id)
            row = yield from self._visible_by_id(mid)
            how = self._holding(row)
            if how == "attached":
                return _dry([], [row.id], [])
            self._owned(row, "purge()")
            plan = yield from store_call(Store.plan_purge, memory_id=mid)
            return _dry(list(plan.memory_ids), [], [], plan)
        ids = self._inside(ids)
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="purge()")
        plan = yield from store_call(Store.plan_purge, scope=scope)
        owned, attached, foreign = yield from self._partition(plan.memory_ids)
        if not attached and not foreign:
            return _dry(owned, [], [], plan)
        return _dry(owned, attached, foreign)

    def _partition(self, memory_ids: Sequence[str]) -> Flow[tuple[list[str], list[str], list[str]]]:
        """Split memory ids into those the caller owns, holds by attachment, or not at all."""
        owned: list[str] = []
        attached: list[str] = []
        foreign: list[str] = []
        if self._unrestricted:
            return list(memory_ids), attached, foreign
        for mid in memory_ids:
            row = self._seen((yield from store_call(Store.get, mid, include_deleted=True)))
            how = "foreign" if row is None else self._holding(row)
            {"owned": owned, "attached": attached, "foreign": foreign}[how].append(mid)
        return owned, attached, foreign

    def _erase_scope(self, scope: Scope) -> Flow[tuple[int, int]]:
        """Purge a scope through the caller's view: ``(purged, detached)``."""
        if self._unrestricted:
            count = yield from self._erase({"scope": scope})
            return count, 0
        plan = yield from store_call(Store.plan_purge, scope=scope)
        owned, attached, foreign = yield from self._partition(plan.memory_ids)
        if not attached and not foreign:
            count = yield from self._erase({"scope": scope})
            return count, 0
        # Others hold part of this scope: erase what is the caller's own, one
        # memory at a time (each its own transaction), and detach the rest.
        count = 0
        for mid in owned:
            count += yield from self._erase({"memory_id": mid})
        for mid in attached:
            row = yield from store_call(Store.get, mid, include_deleted=True)
            if row is not None:
                yield from self._detach(row, self.actor, "purge")
        return count, len(attached)

    def _erase(self, target: dict[str, Any]) -> Flow[int]:
        """Plan (a store read), re-index the neighbours (here), execute (one write).

        Re-indexing needs the lemmatiser, which lives above the stores, so the
        plan comes back to the flow for the new terms. A write between plan and
        execution makes the store refuse the plan; it is planned again.
        """
        for attempt in range(PLAN_ATTEMPTS):
            plan = yield from store_call(Store.plan_purge, **target)
            try:
                count = yield from store_call(Store.apply_purge, plan, reindexed_terms(plan))
            except ConflictError:
                if attempt == PLAN_ATTEMPTS - 1:
                    raise
                continue
            return count
        raise AssertionError("unreachable")

    def _masked(self, change: Flow[T]) -> Flow[T]:
        """A content change whose DuplicateMemoryError names no memory the caller cannot see."""
        try:
            return (yield from change)
        except DuplicateMemoryError as exc:
            if self.within is None or exc.existing_id is None:
                raise
            other = self._seen((yield from store_call(Store.get, exc.existing_id)))
            if other is not None:
                raise
            # Only reachable from memories attached to an agent before schema v2.
            raise DuplicateMemoryError(exc.memory_id, None) from None
