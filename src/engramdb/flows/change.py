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
from typing import Any, TypeVar

from engramdb._engine import EmbedDocuments, Flow, store_call
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
from engramdb.search import document_text
from engramdb.stores.base import KEEP, Keep, Scope, Store
from engramdb.stores.kernel.erasure import PLAN_ATTEMPTS, reindexed_terms

log = logging.getLogger("engramdb")

T = TypeVar("T")


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
        mid = self._memory_id(memory_id)
        row = self._seen((yield from store_call(Store.get, mid)), visible)
        if row is None:
            raise MemoryNotFoundError(mid)
        new_meta = row.metadata if metadata is None else check_metadata(metadata)
        new_text = (
            row.text if text is None else check_text(text, self.limits.max_text_chars).strip()
        )
        embedding = None
        if new_text != row.text:
            yield from self._bind()
            doc = document_text(new_text, row.actor_id, self.fusion)
            embedding = (yield EmbedDocuments([doc]))[0]
        new_row, event = yield from self._masked(
            store_call(
                Store.update,
                mid,
                text=new_text,
                hash=content_hash(new_text),
                embedding=embedding,
                terms=index_terms(new_text),
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
        """``Memory.delete``: soft delete (of a memory ``visible`` sees, when given)."""
        mid = self._memory_id(memory_id)
        if self.within is not None or visible is not None:
            row = self._seen((yield from store_call(Store.get, mid)), visible)
            if row is None:
                raise MemoryNotFoundError(mid)
        _, event = yield from store_call(
            Store.delete, mid, actor=actor or self.actor, reason=reason
        )
        yield from self._emit([event])
        return {"message": "Memory deleted successfully!", "id": mid}

    def delete_all(self, ids: dict[str, object]) -> Flow[dict[str, Any]]:
        """``Memory.delete_all``: soft-delete one scope."""
        ids = self._inside(ids)
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="delete_all()")
        events = yield from store_call(Store.delete_scope, scope, actor=self.actor)
        yield from self._emit(events)
        return {"message": "Memories deleted successfully!", "deleted": len(events)}

    def restore(self, memory_id: object, version: object) -> Flow[dict[str, Any]]:
        """``Memory.restore``: undo a delete or an update."""
        mid = self._memory_id(memory_id)
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ValidationError(f"version must be an integer, got {type(version).__name__}")
        if self.within is not None:
            yield from self._visible_by_id(mid)
        plan = yield from store_call(Store.plan_restore, mid, version)
        current = yield from store_call(Store.get, mid, include_deleted=True)
        embedding = None
        if current is not None and plan.text != current.text:
            yield from self._bind()
            doc = document_text(plan.text, current.actor_id, self.fusion)
            embedding = (yield EmbedDocuments([doc]))[0]
        row, event = yield from self._masked(
            store_call(
                Store.apply_restore,
                plan,
                hash=content_hash(plan.text),
                embedding=embedding,
                terms=index_terms(plan.text),
                entities=entities_of(plan.text),
                actor=self.actor,
            )
        )
        yield from self._emit([event])
        shown = yield from self._linkable([row])
        return item(row, shown)

    def purge(self, memory_id: object, ids: dict[str, object]) -> Flow[dict[str, Any]]:
        """``Memory.purge``: irreversible erasure."""
        if memory_id is not None:
            if any(v is not None for v in ids.values()):
                raise ValidationError("purge() takes a memory_id or scope ids, not both")
            mid = self._memory_id(memory_id)
            if self.within is not None:
                yield from self._visible_by_id(mid)
            count = yield from self._erase({"memory_id": mid})
        else:
            ids = self._inside(ids)
            scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="purge()")
            count = yield from self._erase({"scope": scope})
        log.info("purged %d memories", count)
        return {"message": "Memories purged.", "purged": count}

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
