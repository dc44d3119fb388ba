"""What every flow needs: the base state, scope checks and result shaping.

Owns :class:`FlowState` (configuration, the caller's actor and bound scope,
the embedder binding, and the visibility checks every flow makes:
``_inside``, ``_visible``, ``_seen``, ``_visible_by_id``, ``_linkable``), the
validated add (:class:`Prepared`) and the helpers that shape stored rows
into mem0's results (``item``, ``event_dict``, ``history_item``, ...).

May call: the effects (:mod:`engramdb._engine`), core (validation, filters,
records, text), the store port (``stores.base``) and nlp; never another
flow module (they all build on this one).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from engramdb._engine import Emit, Flow, store_call
from engramdb.attributes import FITTED_FOR, VERSION, AttributeModel
from engramdb.config import EngramConfig, ExtractionConfig
from engramdb.core.access import FULL_ACCESS, Access, Holding, holding
from engramdb.core.filters import CORE_FIELDS
from engramdb.core.validate import check_id, parse_timestamp
from engramdb.errors import (
    AccessDeniedError,
    MemoryNotFoundError,
    ScopeError,
    StoreError,
    ValidationError,
)
from engramdb.extract import ChatMessage, additive_variant
from engramdb.nlp import extract_entities
from engramdb.rerank import LLMReranker, Reranker
from engramdb.stores.base import (
    EntityRef,
    HistoryEvent,
    MemoryRow,
    NewMessage,
    Scope,
    Store,
    visible_scope,
)

_ITEM_FIELDS = (
    "user_id",
    "agent_id",
    "run_id",
    "actor_id",
    "role",
    "attributed_to",
    "memory_type",
    "observed_at",
    "expires_at",
)

log = logging.getLogger("engramdb")


def expiration_date(expires_at: str) -> str:
    """mem0's ``expiration_date`` (the last day a memory is shown, UTC) of an expiry time.

    A memory is shown while ``now < expires_at``; a date-only expiry ``D``
    is stored as the start of the next day, so the day shown is ``D`` again.
    """
    moment = datetime.fromisoformat(expires_at) - timedelta(microseconds=1)
    return moment.date().isoformat()


def expires_at_of(value: object) -> str | None:
    """``expires_at`` of an ``expiration_date``: a plain date is shown through that day.

    mem0's expiration dates are ``YYYY-MM-DD``, inclusive, in UTC: a memory
    set to expire on 2030-01-31 is shown all through that day. A time (a
    datetime, ISO text with a time, epoch seconds) is taken as the moment.
    """
    day: date | None = None
    if isinstance(value, date) and not isinstance(value, datetime):
        day = value
    elif isinstance(value, str) and len(value.strip()) == 10:
        with contextlib.suppress(ValueError):
            day = date.fromisoformat(value.strip())
    if day is not None:
        return parse_timestamp(day + timedelta(days=1), "expiration_date")
    return parse_timestamp(value, "expiration_date")


def _with_superseded(out: dict[str, Any], supers: dict[str, list[MemoryRow]]) -> dict[str, Any]:
    """An item with ``superseded_by`` added when something supersedes it."""
    found = supers.get(out["id"])
    if found:
        out["superseded_by"] = [r.id for r in found]
    return out


def record_of(row: MemoryRow) -> dict[str, Any]:
    """A row as :func:`~engramdb.core.filters.evaluate` reads it."""
    return {
        **{f: getattr(row, f) for f in CORE_FIELDS if f not in ("agent_id", "run_id")},
        "agent_id": row.agent_id,
        "run_id": row.run_id,
        "memory": row.text,
        "metadata": row.metadata,
        "run_ids": set(row.run_ids),
        "agent_ids": set(row.agent_ids),
    }


def own_copy(metadata: dict[str, Any]) -> dict[str, Any]:
    """The caller's own copy of a record's metadata.

    Records may be shared (a search's rows come from the store's row memo),
    so what leaves the library is copied: a shallow copy when every value is
    plain, a deep one when a value holds a list or an object.
    """
    if any(isinstance(v, dict | list) for v in metadata.values()):
        return copy.deepcopy(metadata)
    return dict(metadata)


def item(row: MemoryRow, linkable: set[str] | None = None) -> dict[str, Any]:
    """A stored memory in mem0's result shape (optional fields only when set).

    ``linkable``: the linked ids the caller may see (``None``: all).
    """
    out: dict[str, Any] = {
        "id": row.id,
        "memory": row.text,
        "hash": row.hash,
        "metadata": own_copy(row.metadata),
        "score": None,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    for key in _ITEM_FIELDS:
        value = getattr(row, key)
        if value is not None:
            out[key] = value
    # mem0's results always carry expiration_date (None when the memory never expires).
    out["expiration_date"] = expiration_date(row.expires_at) if row.expires_at is not None else None
    if row.run_ids:
        out["run_ids"] = [row.run_id, *row.run_ids] if row.run_id else list(row.run_ids)
    if row.agent_ids:
        out["agent_ids"] = [row.agent_id, *row.agent_ids] if row.agent_id else list(row.agent_ids)
    out["linked_memory_ids"] = [i for i in row.linked_ids if linkable is None or i in linkable]
    kinds = {i: k for i, k in row.link_kinds.items() if linkable is None or i in linkable}
    if kinds:
        out["link_kinds"] = kinds
    return out


def event_dict(event: HistoryEvent) -> dict[str, Any]:
    """A history event as subscribers (``on_event``) and exports see it."""
    return {
        "id": event.id,
        "memory_id": event.memory_id,
        "event": event.event,
        "version": event.version,
        "old_memory": event.old_memory,
        "new_memory": event.new_memory,
        "old_metadata": event.old_metadata,
        "new_metadata": event.new_metadata,
        "actor": event.actor,
        "reason": event.reason,
        "created_at": event.created_at,
        "old_expires_at": event.old_expires_at,
        "new_expires_at": event.new_expires_at,
    }


def message_item(message: NewMessage) -> dict[str, Any]:
    """A stored raw message as the API returns it: ``id``, ``role``, ``content``, ..."""
    return {
        "id": message.rowid,
        "role": message.role,
        "content": message.content,
        "name": message.name,
        "observed_at": message.observed_at,
    }


def history_item(event: HistoryEvent, row: MemoryRow | None) -> dict[str, Any]:
    """A history event as :meth:`Memory.history` returns it: mem0's keys, then ours.

    mem0's ``id`` is a string, ``updated_at`` the time of a change (None for
    the ADD), ``is_deleted`` whether the event deleted the memory, and
    ``actor_id`` / ``role`` those of the memory; ``version``, the metadata
    before and after, ``actor`` (api, llm, cli, ...) and ``reason`` are ours.
    """
    out = event_dict(event)
    out["id"] = str(event.id)
    out["updated_at"] = None if event.event == "ADD" else event.created_at
    out["is_deleted"] = event.event == "DELETE"
    out["actor_id"] = row.actor_id if row is not None else None
    out["role"] = row.role if row is not None else None
    return out


def entities_of(text: str) -> list[EntityRef]:
    """Entity mentions of a text, as the store links them."""
    return [(e.name, e.normalized, e.type) for e in extract_entities(text)]


@dataclass
class Prepared:
    """A validated add() call."""

    scope: Scope
    metadata: dict[str, Any]
    messages: list[NewMessage]
    chat: list[ChatMessage]
    observed: str
    expires: str | None
    images: list[tuple[int, str]]


class FlowState:
    """The configuration and caller state every flow reads, and the checks they share."""

    def __init__(
        self,
        config: EngramConfig,
        *,
        embedder_model: str,
        embedder_dim: int,
        has_llm: bool,
        actor: str,
        llm_provider: str | None = None,
    ) -> None:
        """Flows for ``config``; ``has_llm`` says whether ``Complete`` effects can run.

        ``llm_provider`` (the LLM's provider name, when it has one) picks the
        additive prompt when ``extraction.prompt`` is ``auto``.
        """
        self.config = config
        self.limits = config.limits
        self.extraction: ExtractionConfig = config.extraction
        self.additive_variant = additive_variant(config.extraction.prompt, llm_provider)
        self.fusion = config.retrieval
        self.embedder_model = embedder_model
        self.embedder_dim = embedder_dim
        self.has_llm = has_llm
        self.actor = actor
        self._bound = False
        self._warned_no_llm = False
        self.within: Scope | None = None
        """The scope a bound caller (a scoped view, a server key) may never leave."""
        self.access: Access = FULL_ACCESS
        """What the caller may do: capabilities and granted users (``core/access.py``)."""
        rerank = config.retrieval.rerank
        self.reranker: Reranker | None = (
            LLMReranker(rerank.max_chars) if rerank is not None and has_llm else None
        )
        """The second stage of search; set by the face when a reranker is given."""

    # -- shared steps -------------------------------------------------------------------

    def _bind(self) -> Flow[None]:
        # Deferred to the first call that embeds: opening a store stays cheap and
        # reading needs no embedder.
        if not self._bound:
            yield from store_call(Store.bind_embedder, self.embedder_model, self.embedder_dim)
            self._bound = True
            yield from self._check_attribute_terms()

    def _check_attribute_terms(self) -> Flow[None]:
        """Say once when the stored attribute terms are another classifier's reading.

        An empty store records this release's classifier; a store whose record
        is another one's, or that has none (written before the record existed,
        or imported), gets a warning naming ``engram reindex-attributes``.
        """
        if not self.attributes_on:
            return
        recorded = yield from store_call(Store.attribute_terms_version)
        if recorded == VERSION:
            return
        if recorded is None:
            stored = yield from store_call(Store.count)
            if stored == 0:
                try:
                    yield from store_call(Store.record_attribute_terms_version, VERSION)
                except StoreError as exc:
                    # Advisory: it never fails the call that embeds (the next one tries).
                    log.debug("could not record the attribute classifier: %s", exc)
                    self._bound = False
                return
        log.warning(
            "the stored attribute terms were read by %s; this release reads them with %s. "
            "Run `engram reindex-attributes` (Memory.reindex_attributes()) once to read them "
            "again: until then questions about a person's attributes may miss memories",
            recorded or "an earlier classifier",
            VERSION,
        )

    @staticmethod
    def _attribute_model() -> AttributeModel:
        # The shipped classifier, read once per process (attributes.py).
        return AttributeModel.shipped()

    @property
    def attributes_on(self) -> bool:
        """Whether attribute terms are indexed and asked (``attribute_gate``, attributes.py).

        The shipped classifier reads the default embedder's vectors
        (:data:`~engramdb.attributes.FITTED_FOR`): with another embedder the
        lever is off whatever the config says.
        """
        return self.fusion.attribute_gate > 0 and self.embedder_model in FITTED_FOR

    def _attribute_terms(self, vectors: Sequence[Any]) -> list[str]:
        """The attribute terms of each memory vector (empty strings with the lever off)."""
        if not self.attributes_on:
            return ["" for _ in vectors]
        model = self._attribute_model()
        share = self.fusion.attribute_share
        return [" ".join(model.leaning(v, share)) for v in vectors]

    def unbind(self) -> None:
        """Forget the embedder binding (after a reset erased it)."""
        self._bound = False

    def _emit(self, events: Sequence[HistoryEvent | None]) -> Flow[None]:
        real = [e for e in events if e is not None]
        if real:
            yield Emit(real)

    @staticmethod
    def _memory_id(memory_id: object) -> str:
        mid = check_id("memory_id", memory_id)
        if mid is None:
            raise ValidationError("memory_id is required")
        return mid

    def _may(self, capability: str, what: str) -> None:
        """Refuse (AccessDeniedError) a call whose caller lacks ``capability``."""
        self.access.require(capability, what)

    def _holding(self, row: MemoryRow) -> Holding:
        """Whether the caller owns a memory it sees, or holds it by attachment or as foreign."""
        return holding(row, self.within, self.access)

    def _owned(self, row: MemoryRow, what: str) -> None:
        """Refuse a change to a memory the caller sees but does not own (core/access.py)."""
        how = self._holding(row)
        if how == "attached":
            raise AccessDeniedError(
                f"{what}: memory {row.id} belongs to another scope; this view (key) sees it "
                "only because its session was attached to it. Deleting it detaches the session"
            )
        if how == "foreign":
            raise AccessDeniedError(
                f"{what}: memory {row.id} is about a user this view (key) was not granted"
            )

    def _inside(self, ids: dict[str, object]) -> dict[str, object]:
        """The ids of a call with the bound ids merged in; naming another value is refused.

        A caller not bound to a user may name only the users it was granted
        (AccessDeniedError otherwise).
        """
        user = ids.get("user_id")
        if self.within is None or self.within.user_id is None:
            # A bound user is merged below (naming another is a ScopeError).
            self.access.check_user(user if isinstance(user, str) else None, None, "the call")
        if self.within is None:
            return ids
        merged = dict(ids)
        for kind, value in self.within.items():
            given = merged.get(kind)
            if given is not None and given != value:
                raise ScopeError(
                    f"this memory is bound to {kind}={value!r}; the call names "
                    f"{kind}={given!r}. Leave {kind} out or use a view of that scope"
                )
            merged[kind] = value
        return merged

    def _visible(self, scope: Scope) -> Scope:
        """What a call with ``scope`` may see through any path (see ``visible_scope``)."""
        return visible_scope(scope, self.within)

    def _seen(self, row: MemoryRow | None, visible: Scope | None = None) -> MemoryRow | None:
        """``row`` if the caller may see it, else ``None`` (an invisible id is a missing id)."""
        if row is None:
            return None
        for scope in (self.within, visible):
            if scope is not None and not scope.sees(row):
                return None
        return row

    def _visible_by_id(self, memory_id: str) -> Flow[MemoryRow]:
        """A memory the caller may see, deleted ones included; else MemoryNotFoundError."""
        row = yield from store_call(Store.get, memory_id, include_deleted=True)
        seen = self._seen(row)
        if seen is None:
            raise MemoryNotFoundError(memory_id)
        return seen

    def _linkable(self, rows: Sequence[MemoryRow]) -> Flow[set[str] | None]:
        """The linked ids of ``rows`` a bound caller may see; ``None``: all of them.

        A link between two memories is stored once and read from both ends, so
        a memory the caller sees may be linked to one it may not (the user
        linked her own secret to her coach's memory): that id stays hidden.
        """
        if self.within is None:
            return None
        linked = [i for r in rows for i in r.linked_ids]
        if not linked:
            return set()
        found = yield from store_call(Store.visible_ids, self.within, linked)
        return found
