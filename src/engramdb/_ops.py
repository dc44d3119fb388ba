"""Every operation of the API, written once as a flow of effects.

:class:`Operations` holds configuration only (no connection, no client,
no model): its methods are generators that validate input, yield effects
(:mod:`engramdb._engine`) for the I/O, and return mem0-shaped results.
``Memory`` drives them synchronously, ``AsyncMemory`` asynchronously.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

import numpy as np

from engramdb._engine import Complete, EmbedDocuments, EmbedQuery, Emit, Flow, store_call
from engramdb._time import utc_now
from engramdb.config import EngramConfig, ExtractionConfig
from engramdb.core.filters import CORE_FIELDS, And, Node, evaluate, parse_filters, split_scope
from engramdb.core.records import LINK_KINDS, Candidate
from engramdb.core.text import content_hash
from engramdb.core.validate import (
    check_id,
    check_metadata,
    check_scope,
    check_text,
    check_threshold,
    check_top_k,
    parse_messages,
    parse_timestamp,
)
from engramdb.errors import (
    ConfigError,
    ConflictError,
    DuplicateMemoryError,
    ExtractionError,
    LLMError,
    MemoryNotFoundError,
    ReplyFormatError,
    ScopeError,
    ValidationError,
)
from engramdb.expand import (
    diversify,
    entity_hop_on,
    is_message,
    lend_through_entities,
    lend_to_neighbours,
    named_periods,
    neighbour_span,
    neighbours_on,
    weigh_by_time,
    weigh_when,
    when_asked,
)
from engramdb.extract import (
    ADDITIVE_SCHEMA,
    FACTS_SCHEMA,
    PROCEDURAL_SCHEMA,
    UPDATE_SCHEMA,
    AdditiveContext,
    ChatMessage,
    KnownMemory,
    additive_variant,
    build_additive_prompt,
    build_fact_prompt,
    build_procedural_prompt,
    build_update_prompt,
    image_parts,
    observation_date,
    parse_additive,
    parse_description,
    parse_facts,
    parse_procedural,
    parse_update,
    retry_messages,
    vision_prompt,
)
from engramdb.nlp import extract_entities, index_terms
from engramdb.nlp.querytime import Period
from engramdb.rerank import LLMReranker, Reranker
from engramdb.rewrite import looks_multipart, merge_hits, rewrite_query
from engramdb.search import (
    FusionConfig,
    Hit,
    QueryPlan,
    apply_recency,
    apply_rerank,
    calibrate,
    document_terms,
    document_text,
    fuse,
    plan_query,
    rank_superseded,
    when,
)
from engramdb.stores.base import (
    KEEP,
    AddOutcome,
    EntityRef,
    HistoryEvent,
    Keep,
    MemoryRow,
    NewMemory,
    NewMessage,
    Scope,
    Store,
    visible_scope,
)
from engramdb.stores.kernel.erasure import PLAN_ATTEMPTS, reindexed_terms

__all__ = [
    "Operations",
    "event_dict",
    "expiration_date",
    "history_item",
    "item",
    "message_item",
]

log = logging.getLogger("engramdb")

T = TypeVar("T")

REPLY_BASE_TOKENS = 256
"""Reply tokens every extraction call may use whatever its material (see ``_budget``)."""

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


def expiration_date(expires_at: str) -> str:
    """mem0's ``expiration_date`` (the last day a memory is shown, UTC) of an expiry time.

    A memory is shown while ``now < expires_at``; a date-only expiry ``D``
    is stored as the start of the next day, so the day shown is ``D`` again.
    """
    moment = datetime.fromisoformat(expires_at) - timedelta(microseconds=1)
    return moment.date().isoformat()


def _expiry(value: object) -> str | None:
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


def as_of_stamp(value: object) -> str | None:
    """``search(as_of=...)`` as an ISO UTC instant; a plain date is the end of that day."""
    if value is None:
        return None
    day: date | None = None
    if isinstance(value, date) and not isinstance(value, datetime):
        day = value
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            day = date.fromisoformat(value.strip())
    if day is not None:
        return f"{day.isoformat()}T23:59:59.999999+00:00"
    stamp = parse_timestamp(value, "as_of")
    assert stamp is not None
    return stamp


def as_of_filter(at: str) -> Node:
    """Memories that were stated by ``at`` and had not expired by then."""
    node = parse_filters(
        {
            "OR": [{"observed_at": {"lte": at}}, {"observed_at": None, "created_at": {"lte": at}}],
            "AND": [{"OR": [{"expires_at": None}, {"expires_at": {"gt": at}}]}],
        }
    )
    assert node is not None
    return node


def holds_at(row: MemoryRow, moment: str) -> bool:
    """Whether a memory was stated by ``moment`` and had not expired by then."""
    return when(row) <= moment and (row.expires_at is None or row.expires_at > moment)


def record_of(row: MemoryRow) -> dict[str, Any]:
    """A row as :func:`~engramdb.core.filters.evaluate` reads it."""
    return {
        **{f: getattr(row, f) for f in CORE_FIELDS if f not in ("agent_id", "run_id")},
        "agent_id": row.agent_id,
        "run_id": row.run_id,
        "metadata": row.metadata,
        "run_ids": set(row.run_ids),
        "agent_ids": set(row.agent_ids),
    }


def _check_links(links: object) -> dict[str, str]:
    """``add(links=...)``: ``{memory id: kind}`` with kinds of :data:`LINK_KINDS`."""
    if links is None:
        return {}
    if not isinstance(links, dict):
        raise ValidationError(
            f"links must be a dict of memory id to link kind, got {type(links).__name__}"
        )
    if len(links) > MAX_GIVEN_LINKS:
        raise ValidationError(f"links names {len(links)} memories; at most {MAX_GIVEN_LINKS}")
    out: dict[str, str] = {}
    for target, kind in links.items():
        if not isinstance(target, str) or not target.strip():
            raise ValidationError(f"links: a memory id must be a non-empty string, got {target!r}")
        if kind not in LINK_KINDS:
            raise ValidationError(
                f"links: the kind of {target!r} must be one of {', '.join(LINK_KINDS)}, "
                f"got {kind!r}"
            )
        out[target] = kind
    return out


def _weighed(
    hits: list[Hit], config: FusionConfig, periods: Sequence[Period], asks_when: bool
) -> list[Hit]:
    """Fused hits with the query's time levers applied: the named periods, a "when" question."""
    if periods:
        hits = weigh_by_time(hits, periods, config)
    if asks_when:
        hits = weigh_when(hits, config)
    return hits


MAX_GIVEN_LINKS = 100
"""Links one ``add(links=...)`` may name."""


def item(row: MemoryRow, linkable: set[str] | None = None) -> dict[str, Any]:
    """A stored memory in mem0's result shape (optional fields only when set).

    ``linkable``: the linked ids the caller may see (``None``: all).
    """
    out: dict[str, Any] = {
        "id": row.id,
        "memory": row.text,
        "hash": row.hash,
        "metadata": row.metadata,
        "score": None,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    for key in _ITEM_FIELDS:
        value = getattr(row, key)
        if value is not None:
            out[key] = value
    if row.expires_at is not None:
        out["expiration_date"] = expiration_date(row.expires_at)
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
class _Prepared:
    """A validated add() call."""

    scope: Scope
    metadata: dict[str, Any]
    messages: list[NewMessage]
    chat: list[ChatMessage]
    observed: str
    expires: str | None
    images: list[tuple[int, str]]


class Operations:
    """The flows behind every API method, parameterised by configuration only."""

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

    def _inside(self, ids: dict[str, object]) -> dict[str, object]:
        """The ids of a call with the bound ids merged in; naming another value is refused."""
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

    def _scope_and_where(
        self,
        filters: dict[str, Any] | None,
        ids: dict[str, object],
        what: str,
    ) -> tuple[Scope, Node | None]:
        ids = self._inside(ids)
        from_filters, rest = split_scope(filters)
        for key, value in from_filters.items():
            if ids[key] is not None and ids[key] != value:
                raise ScopeError(
                    f"{key} is given twice with different values ({ids[key]!r} as an "
                    f"argument, {value!r} in filters)"
                )
            ids[key] = value
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what=what)
        return scope, parse_filters(rest)

    def _embed_new(self, memories: Sequence[NewMemory], skip: set[str]) -> Flow[None]:
        todo = [m for m in memories if m.hash not in skip and m.embedding.size == 0]
        if todo:
            vectors = yield EmbedDocuments(
                [document_text(m.text, m.actor_id, self.fusion) for m in todo]
            )
            for mem, vec in zip(todo, vectors, strict=True):
                mem.embedding = vec

    def _store(
        self,
        memories: list[NewMemory],
        prep: _Prepared,
        *,
        source_rowids: Sequence[int] = (),
        resolve_failure: int | None = None,
        store_messages: bool = True,
    ) -> Flow[list[AddOutcome]]:
        """Embed what is new and write memories + messages in one transaction."""
        yield from self._bind()
        visible = self._visible(prep.scope)
        # Embedding is most of the cost of an add: skip texts already stored where
        # the caller can see them (and only there: anything else reveals nothing).
        known = yield from store_call(Store.existing_hashes, visible, [m.hash for m in memories])
        messages = prep.messages if store_messages else []

        def write() -> Flow[list[AddOutcome]]:
            return store_call(
                Store.add,
                memories,
                messages,
                prep.scope,
                self.actor,
                source_rowids=source_rowids,
                resolve_failure=resolve_failure,
                visible=visible,
            )

        try:
            yield from self._embed_new(memories, known)
            outcomes = yield from write()
        except ConflictError:
            # A known text was deleted meanwhile: it needs its vector after all.
            yield from self._embed_new(memories, set())
            outcomes = yield from write()
        yield from self._emit([o.history for o in outcomes])
        return list(outcomes)

    def _new_memory(
        self, text: str, prep: _Prepared, *, context: Sequence[str] = (), **fields: Any
    ) -> NewMemory:
        return NewMemory(
            id=str(uuid.uuid4()),
            text=text,
            hash=content_hash(text),
            embedding=_EMPTY,
            terms=document_terms(text, context),
            entities=entities_of(text),
            metadata=prep.metadata,
            expires_at=prep.expires,
            **fields,
        )

    # -- add ------------------------------------------------------------------------------

    def _prepare(
        self,
        messages: object,
        ids: dict[str, object],
        metadata: object,
        timestamp: object,
        expiration_date: object,
    ) -> _Prepared:
        ids = self._inside(ids)
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="add()")
        meta = check_metadata(metadata)
        msgs = parse_messages(messages, self.limits.max_text_chars, self.limits.max_messages)
        observed = parse_timestamp(timestamp) or utc_now()
        expires = _expiry(expiration_date)
        images: list[tuple[int, str]] = []
        if isinstance(messages, list | tuple):
            for i, raw in enumerate(messages):
                if isinstance(raw, dict):
                    images.extend((i, url) for url in image_parts(raw.get("content")))
        elif isinstance(messages, dict):
            images.extend((0, url) for url in image_parts(messages.get("content")))
        return _Prepared(
            scope=scope,
            metadata=meta,
            messages=[NewMessage(m.role, m.content, m.name, m.timestamp or observed) for m in msgs],
            chat=[ChatMessage(m.role, m.content, m.name, m.timestamp or observed) for m in msgs],
            observed=observed,
            expires=expires,
            images=images,
        )

    def add(
        self,
        messages: object,
        *,
        ids: dict[str, object],
        metadata: object,
        infer: bool,
        timestamp: object,
        expiration_date: object,
        memory_type: object,
        prompt: object,
        links: object = None,
    ) -> Flow[dict[str, Any]]:
        """``Memory.add``: extraction by the LLM when there is one, verbatim otherwise."""
        prep = self._prepare(messages, ids, metadata, timestamp, expiration_date)
        given_links = _check_links(links)
        if memory_type not in (None, "procedural_memory"):
            raise ValidationError(
                f"memory_type must be None or 'procedural_memory', got {memory_type!r}"
            )
        if prompt is not None and not isinstance(prompt, str):
            raise ValidationError("prompt must be a string")
        if memory_type == "procedural_memory":
            if not self.has_llm:
                raise ConfigError(
                    "procedural memories are written by an LLM; configure one "
                    "({'llm': {...}} or ENGRAM_LLM)"
                )
            if prep.scope.agent_id is None:
                raise ScopeError("a procedural memory belongs to an agent: pass agent_id")
        use_llm = bool(infer) and self.has_llm
        if given_links and (use_llm or memory_type is not None):
            raise ValidationError(
                "links= applies to what add() stores verbatim (infer=False); with "
                "extraction the LLM links what it extracts"
            )
        if given_links:
            yield from self._check_link_targets(prep.scope, given_links)
        if infer and not self.has_llm and not self._warned_no_llm:
            self._warned_no_llm = True
            log.info(
                "no LLM is configured, so add() stores messages verbatim instead of "
                "extracting facts; configure {'llm': {...}} or ENGRAM_LLM to turn it on"
            )
        if prep.images:
            yield from self._describe_images(prep, use_llm)
        if memory_type == "procedural_memory":
            return (yield from self._procedural(prep, prompt))
        if not use_llm:
            return (yield from self._verbatim(prep, given_links))
        if self.extraction.mode == "consolidate":
            return (yield from self._consolidate(prep, prompt))
        return (yield from self._additive(prep, prompt))

    def _view_of(self, row: MemoryRow) -> Scope:
        """The scope a read by id judges supersession in.

        The row's own user (else agent, else run), within the caller's view.
        """
        own = (
            Scope(user_id=row.user_id)
            if row.user_id
            else Scope(agent_id=row.agent_id)
            if row.agent_id
            else Scope(run_id=row.run_id)
        )
        return self._visible(own)

    def _superseders(
        self, rows: Sequence[MemoryRow], visible: Scope, at: str | None = None
    ) -> Flow[dict[str, list[MemoryRow]]]:
        """The memories that supersede each of ``rows`` (only rows that have one).

        A memory is superseded by one that links to it with a kind of
        :data:`SUPERSEDING_KINDS`, is not deleted, is seen by ``visible`` (and
        the caller's view), was stated no earlier than it and holds at ``at``
        (stated by then and not expired then; ``None``: now). Derived here on
        every read, never stored.
        """
        moment = at or utc_now()
        cache: dict[str, MemoryRow | None] = {}
        out: dict[str, list[MemoryRow]] = {}
        for row in rows:
            for other_id in row.superseder_ids:
                if other_id not in cache:
                    got = yield from store_call(Store.get, other_id)
                    cache[other_id] = self._seen(got, visible)
                other = cache[other_id]
                if other is None or not holds_at(other, moment) or when(other) < when(row):
                    continue
                out.setdefault(row.id, []).append(other)
        return out

    def _check_link_targets(self, scope: Scope, links: dict[str, str]) -> Flow[None]:
        """Refuse links to memories the add's scope cannot see (or that do not exist).

        One error for both, so a link cannot probe whether someone else's id exists.
        """
        visible = self._visible(scope)
        hidden = []
        for target in links:
            row = self._seen((yield from store_call(Store.get, target)), visible)
            if row is None:
                hidden.append(target)
        if hidden:
            raise ValidationError(
                f"links= names {len(hidden)} memories this scope cannot see or that do not "
                f"exist (first: {hidden[0]!r}); nothing was stored"
            )

    def _verbatim(
        self, prep: _Prepared, links: dict[str, str] | None = None
    ) -> Flow[dict[str, Any]]:
        # A chat message is often an answer whose subject was named just before it
        # ("How long have you had them?" / "Three years!"): the words of the
        # preceding messages of the conversation are indexed with it (keyword
        # search only; its text and vector stay its own). See docs/retrieval.md.
        # Each memory records which messages it borrowed words from (a stored
        # message by rowid, one of this add by index), so purging a message can
        # re-index it (stores/kernel/erasure.py).
        window = self.fusion.context_messages
        for attempt in range(2):
            said: list[tuple[str, int | None, int | None]] = []  # (content, rowid, index)
            if window:
                earlier = yield from store_call(Store.recent_messages, prep.scope, window)
                said = [(m.content, m.rowid, None) for m in earlier if m.role != "system"]
            new = []
            for i, msg in enumerate(prep.messages):
                if msg.role == "system" or not msg.content.strip():
                    continue
                context = said[-window:] if window else []
                new.append(
                    self._new_memory(
                        msg.content.strip(),
                        prep,
                        actor_id=msg.name,
                        role=msg.role,
                        observed_at=msg.observed_at,
                        source_messages=[i],
                        context=[c for c, _, _ in context],
                        context_rowids=[r for _, r, _ in context if r is not None],
                        context_messages=[j for _, _, j in context if j is not None],
                        links=list(links or {}),
                        link_kinds=dict(links or {}),
                    )
                )
                said.append((msg.content, None, i))
            try:
                outcomes = yield from self._store(new, prep)
            except ConflictError:
                # A context message was purged between our read and the write: its
                # words must not be indexed. Read the conversation again, once.
                if attempt:
                    raise
                continue
            return {
                "results": [
                    {
                        "id": o.id,
                        "memory": o.memory,
                        "event": o.event,
                        "actor_id": m.actor_id,
                        "role": m.role,
                    }
                    for o, m in zip(outcomes, new, strict=True)
                ]
            }
        raise AssertionError("unreachable")

    def _describe_images(self, prep: _Prepared, use_llm: bool) -> Flow[None]:
        if not (use_llm and self.extraction.vision):
            log.warning(
                "dropped %d image(s) from the messages: describing images needs an LLM "
                "with extraction.vision enabled",
                len(prep.images),
            )
            return
        for index, url in prep.images:
            try:
                completion = yield Complete(vision_prompt(url))
                description = parse_description(completion.text)
            except (LLMError, ReplyFormatError) as exc:
                log.warning("could not describe an image of message %d: %s", index, exc)
                continue
            if index < len(prep.messages):
                note = f"[shares an image: {description}]"
                msg = prep.messages[index]
                msg.content = f"{msg.content}\n{note}".strip()
                old = prep.chat[index]
                prep.chat[index] = ChatMessage(old.role, msg.content, old.name, old.timestamp)

    def _budget(self, material: str) -> int | None:
        """The reply-token cap of one extraction call whose material is ``material``.

        A reply restates at most its material (about four characters a
        token), so a model that loops is stopped long before
        ``extraction.max_reply_tokens`` when the messages are short.
        """
        cap = self.extraction.max_reply_tokens
        if cap is None:
            return None
        return min(cap, REPLY_BASE_TOKENS + len(material) // 2)

    def _ask(
        self,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        name: str,
        parse: Callable[[str], T],
        cap: int | None,
    ) -> Flow[T]:
        """One LLM call, and one retry showing the error if the reply is unusable.

        ``cap`` bounds each reply's tokens (see :meth:`_budget`).
        """
        completion = yield Complete(messages, schema, name, cap)
        try:
            return parse(completion.text)
        except ReplyFormatError as err:
            log.warning("unusable %s reply from the LLM (%s); retrying once", name, err)
            again = yield Complete(
                retry_messages(messages, completion.text, err), schema, name, cap
            )
            try:
                return parse(again.text)
            except ReplyFormatError as final:
                final.reply = again.text  # kept with the failure (keep_failed)
                raise

    def _extract(self, prep: _Prepared, ask: Flow[T], failure_id: int | None) -> Flow[T]:
        """Run an extraction call; on failure keep the messages and raise ExtractionError."""
        try:
            return (yield from ask)
        except (ReplyFormatError, LLMError) as exc:
            if failure_id is None:
                failure_id = yield from store_call(
                    Store.keep_failed,
                    prep.scope,
                    prep.messages,
                    f"{type(exc).__name__}: {exc}",
                    exc.reply if isinstance(exc, ReplyFormatError) else None,
                )
            assert failure_id is not None
            raise ExtractionError(str(exc), failure_id, len(prep.messages)) from exc

    def _related(self, scope: Scope, text: str, k: int) -> Flow[list[MemoryRow]]:
        """Existing memories of the scope most related to ``text`` (hybrid search)."""
        if k <= 0 or not text.strip():
            return []
        yield from self._bind()
        vec = yield EmbedQuery(text[: self.limits.max_text_chars])
        hits = yield from self._hybrid(scope, None, text, vec, k)
        return [h.row for h in hits]

    def _rewrite(self, query: str) -> Flow[list[tuple[str, Any]]]:
        """The query-rewrite lever: the LLM's sub-queries and their vectors (none when off).

        One ``Complete``, then one ``EmbedQuery`` per sub-query. Any LLM error or
        unusable reply logs a warning and returns none: the search runs as without it.
        """
        cfg = self.fusion.query_rewrite
        if cfg is None or not self.has_llm:
            return []
        if cfg.only_multipart and not looks_multipart(query):
            return []
        try:
            texts = yield from rewrite_query(query, cfg)
        except (LLMError, ReplyFormatError) as exc:
            log.warning("query rewriting failed, searching the question alone: %s", exc)
            return []
        out: list[tuple[str, Any]] = []
        for sub in texts:
            sub_vec = yield EmbedQuery(sub)
            out.append((sub, sub_vec))
        return out

    def _hybrid(
        self,
        scope: Scope,
        where: Node | None,
        query: str,
        vec: Any,
        k: int,
        *,
        subqueries: Sequence[tuple[str, Any]] = (),
        rerank: bool = False,
        include_expired: bool = False,
        now: str | None = None,
    ) -> Flow[list[Hit]]:
        """Candidates from every signal, fused (search.py); reranked if configured.

        ``now`` (the search's ``as_of``, else the present) resolves relative
        times of the query for the time lever. ``subqueries`` (text, vector)
        from the query-rewrite lever are searched too and merged (rewrite.py).
        """
        cfg = self.fusion
        plan = plan_query(query, cfg)
        second = cfg.rerank if rerank else None
        want = max(k, second.pool) if second is not None else k
        candidates = yield from store_call(
            Store.candidates,
            scope,
            where,
            vec,
            plan.terms,
            plan.entities,
            max(cfg.pool, want),
            include_expired=include_expired,
        )
        periods = named_periods(query, cfg, now or utc_now())
        asked = when_asked(query, cfg)
        if subqueries:
            hits = yield from self._merged(
                scope,
                where,
                [(candidates, plan)],
                subqueries,
                want,
                periods,
                asks_when=asked,
                include_expired=include_expired,
            )
        elif (
            neighbours_on(cfg) or entity_hop_on(cfg) or periods or asked or cfg.session_decay < 1.0
        ):
            hits = yield from self._second_stage(
                scope,
                where,
                candidates,
                plan,
                want,
                periods,
                asks_when=asked,
                include_expired=include_expired,
            )
        else:
            hits = fuse(candidates, cfg, plan, limit=want)
        # The fused order stands; the score is read from it (search.py), before a
        # reranker blends its grades in on the same scale.
        hits = calibrate(hits, cfg)
        if subqueries:
            # Merged hits carry each its own query's calibration: keep the order monotone.
            hits.sort(key=lambda h: -h.score)
        if second is not None and self.reranker is not None and len(hits) > 1:
            try:
                grades = yield from self.reranker.rerank(query, [h.row.text for h in hits])
            except (LLMError, ReplyFormatError) as exc:
                log.warning("reranking failed, keeping the fused order: %s", exc)
            else:
                hits = apply_rerank(hits, grades, second.weight)
        return hits[:k]

    def _merged(
        self,
        scope: Scope,
        where: Node | None,
        first: list[tuple[list[Candidate], QueryPlan]],
        subqueries: Sequence[tuple[str, Any]],
        want: int,
        periods: Sequence[Period] = (),
        *,
        asks_when: bool = False,
        include_expired: bool,
    ) -> Flow[list[Hit]]:
        """The query and its sub-queries, each fused (and time-weighed), merged, then lent.

        The time and "when" levers read the original question; the lenders and
        diversity run once, on the merged ranking.
        """
        cfg = self.fusion
        rewrite = cfg.query_rewrite
        weight = rewrite.weight if rewrite is not None else 1.0
        searched = list(first)
        for sub, sub_vec in subqueries:
            sub_plan = plan_query(sub, cfg)
            sub_cands = yield from store_call(
                Store.candidates,
                scope,
                where,
                sub_vec,
                sub_plan.terms,
                sub_plan.entities,
                max(cfg.pool, want),
                include_expired=include_expired,
            )
            searched.append((sub_cands, sub_plan))
        lists = []
        for cands, one_plan in searched:
            lists.append(_weighed(fuse(cands, cfg, one_plan), cfg, periods, asks_when))
        merged = merge_hits(lists, weight)
        return (yield from self._lend(scope, where, merged, want, include_expired=include_expired))

    def _second_stage(
        self,
        scope: Scope,
        where: Node | None,
        candidates: list[Candidate],
        plan: QueryPlan,
        want: int,
        periods: Sequence[Period] = (),
        *,
        asks_when: bool = False,
        include_expired: bool,
    ) -> Flow[list[Hit]]:
        """Fused hits with the levers of expand.py (time, "when", neighbours, hop, diversity)."""
        cfg = self.fusion
        # Lending only raises scores, so a candidate below the first ``want`` stays
        # below them unless a hit lends to it (then it joins with the lent score, the
        # larger one): the first ``want`` suffice. The time and session discounts lower
        # scores, so with either every candidate is scored.
        whole = cfg.session_decay < 1.0 or bool(periods) or asks_when
        hits = _weighed(
            fuse(candidates, cfg, plan, limit=None if whole else want), cfg, periods, asks_when
        )
        return (yield from self._lend(scope, where, hits, want, include_expired=include_expired))

    def _lend(
        self,
        scope: Scope,
        where: Node | None,
        hits: list[Hit],
        want: int,
        *,
        include_expired: bool,
    ) -> Flow[list[Hit]]:
        """Session neighbours, the entity hop and diversity on a fused ranking."""
        cfg = self.fusion
        # Both lenders take their anchors from the same (fused, time-weighed) ranking.
        fused = list(hits)
        anchors = [h.row.id for h in fused[: cfg.neighbour_hits] if is_message(h.row)]
        if neighbours_on(cfg) and anchors:
            near = yield from store_call(
                Store.neighbours,
                scope,
                where,
                anchors,
                neighbour_span(cfg),
                include_expired=include_expired,
            )
            hits = lend_to_neighbours(hits, near, cfg)
        if entity_hop_on(cfg) and fused:
            hop_anchors = fused[: cfg.entity_hop_hits]
            links = yield from store_call(
                Store.entity_hop,
                scope,
                where,
                [h.row.id for h in hop_anchors],
                cfg.entity_hop_max_degree,
                include_expired=include_expired,
            )
            hits = lend_through_entities(hits, hop_anchors, links, cfg)
        return diversify(hits, cfg, want)

    def _additive(
        self,
        prep: _Prepared,
        prompt: object,
        *,
        failure_id: int | None = None,
        source_rowids: Sequence[int] = (),
    ) -> Flow[dict[str, Any]]:
        cfg = self.extraction
        scope = prep.scope
        recent_messages = yield from store_call(Store.recent_messages, scope, cfg.recent_messages)
        if source_rowids:
            # A retry: the failed call's messages are already the newest stored ones.
            recent_messages = recent_messages[: max(0, len(recent_messages) - len(prep.messages))]
        # Known memories come from the caller's visible scope, across its runs: a
        # new session must see what earlier ones learnt to skip repeats and to link
        # a changed preference. Never wider: what the LLM is shown, it may repeat.
        visible = self._visible(scope)
        recent_rows = yield from store_call(
            Store.list_memories, visible, None, limit=cfg.recent_memories
        )
        new_chat = [m for m in prep.chat if m.role != "system"]
        said = "\n".join(m.content for m in new_chat)
        related = yield from self._related(visible, said, cfg.related_for(len(new_chat)))
        shown = {r.id for r in recent_rows} | {r.id for r in related}
        ctx = AdditiveContext(
            new_messages=new_chat,
            recent_messages=[
                ChatMessage(m.role, m.content, m.name, m.observed_at) for m in recent_messages
            ],
            recent_memories=[KnownMemory(r.id, r.text, r.observed_at) for r in recent_rows],
            related_memories=[KnownMemory(r.id, r.text, r.observed_at) for r in related],
            observation_date=observation_date(new_chat, prep.observed),
            custom_instructions=prompt if isinstance(prompt, str) else cfg.custom_instructions,
            includes=cfg.includes,
            excludes=cfg.excludes,
        )
        messages, ids = build_additive_prompt(
            ctx, variant=self.additive_variant, time_hints=cfg.time_hints
        )
        outcome = yield from self._extract(
            prep,
            self._ask(
                messages,
                ADDITIVE_SCHEMA,
                "memories",
                lambda text: parse_additive(text, ids, max_chars=self.limits.max_text_chars),
                self._budget(said),
            ),
            failure_id,
        )
        for warning in outcome.warnings:
            log.warning("extraction: %s", warning)
        sources = list(range(len(prep.messages) if not source_rowids else len(source_rowids)))
        # The speaker of a role, when one person spoke in it; with two users in the
        # messages (a group chat) an "attributed_to: user" fact names no one for sure.
        names: dict[str, set[str]] = {}
        for m in prep.messages:
            if m.name:
                names.setdefault(m.role, set()).add(m.name)
        speakers = {role: next(iter(n)) for role, n in names.items() if len(n) == 1}
        new = [
            self._new_memory(
                e.text,
                prep,
                role=e.attributed_to,
                attributed_to=e.attributed_to,
                actor_id=speakers.get(e.attributed_to),
                observed_at=prep.observed,
                source_messages=sources,
                # The id map only resolves ids that were shown; keep the rule here too.
                links=[i for i in e.linked_ids if i in shown],
                link_kinds={i: e.link_kind for i in e.linked_ids if i in shown},
            )
            for e in outcome.items
        ]
        outcomes = yield from self._store(
            new,
            prep,
            source_rowids=source_rowids,
            resolve_failure=failure_id,
            store_messages=not source_rowids,
        )
        return {"results": [{"id": o.id, "memory": o.memory, "event": o.event} for o in outcomes]}

    def _procedural(self, prep: _Prepared, prompt: object) -> Flow[dict[str, Any]]:
        messages = build_procedural_prompt(
            prep.chat,
            observation_date(prep.chat, prep.observed),
            prompt if isinstance(prompt, str) else self.extraction.custom_instructions,
            time_hints=self.extraction.time_hints,
        )
        summary = yield from self._extract(
            prep,
            self._ask(
                messages,
                PROCEDURAL_SCHEMA,
                "procedural",
                lambda text: parse_procedural(text, max_chars=self.limits.max_text_chars),
                self._budget("\n".join(m.content for m in prep.chat)),
            ),
            None,
        )
        new = [
            self._new_memory(
                summary,
                prep,
                role="assistant",
                attributed_to="assistant",
                memory_type="procedural_memory",
                observed_at=prep.observed,
                source_messages=list(range(len(prep.messages))),
            )
        ]
        outcomes = yield from self._store(new, prep)
        return {"results": [{"id": o.id, "memory": o.memory, "event": o.event} for o in outcomes]}

    def _consolidate(self, prep: _Prepared, prompt: object) -> Flow[dict[str, Any]]:
        """The legacy two-call mode: facts, then ADD/UPDATE/DELETE/NONE over known ids.

        Every change goes through the same path as the explicit API (history,
        re-embedding, soft delete) with actor ``llm``, so each is reversible.
        """
        cfg = self.extraction
        day = observation_date(prep.chat, prep.observed)
        facts = yield from self._extract(
            prep,
            self._ask(
                build_fact_prompt(
                    prep.chat,
                    day,
                    prompt if isinstance(prompt, str) else cfg.custom_instructions,
                    cfg.includes,
                    cfg.excludes,
                    time_hints=cfg.time_hints,
                ),
                FACTS_SCHEMA,
                "facts",
                lambda text: parse_facts(text, max_chars=self.limits.max_text_chars),
                self._budget("\n".join(m.content for m in prep.chat)),
            ),
            None,
        )
        visible = self._visible(prep.scope)
        existing: dict[str, MemoryRow] = {}
        for fact in facts.items:
            for row in (yield from self._related(visible, fact, 5)):
                existing.setdefault(row.id, row)
        known = [KnownMemory(r.id, r.text, r.observed_at) for r in existing.values()]
        messages, ids = build_update_prompt(facts.items, known, day)
        ops = yield from self._extract(
            prep,
            self._ask(
                messages,
                UPDATE_SCHEMA,
                "memory",
                lambda text: parse_update(text, ids, max_chars=self.limits.max_text_chars),
                # Each known memory may come back quoted and rewritten: twice its text.
                self._budget("\n".join([*facts.items, *(k.text for k in known)]) * 2),
            ),
            None,
        )
        for warning in ops.warnings:
            log.warning("consolidation: %s", warning)
        adds = [
            self._new_memory(
                op.text,
                prep,
                role="user",
                attributed_to="user",
                observed_at=prep.observed,
                source_messages=list(range(len(prep.messages))),
            )
            for op in ops.items
            if op.event == "ADD" and op.text
        ]
        # The messages and the new memories go in first, in one transaction.
        outcomes = yield from self._store(adds, prep)
        results = [{"id": o.id, "memory": o.memory, "event": o.event} for o in outcomes]
        for op in ops.items:
            if op.memory_id is None or op.event == "ADD":
                continue
            if op.memory_id not in existing:
                # The id map resolves only shown ids; an id from anywhere else is
                # dropped before it can touch (or reveal) a memory.
                log.warning("consolidation: skipped %s of an id it was not shown", op.event)
                continue
            try:
                if op.event == "UPDATE" and op.text:
                    before = existing[op.memory_id].text
                    changed = yield from self.update(
                        op.memory_id,
                        text=op.text,
                        actor="llm",
                        reason="consolidation",
                        visible=visible,
                    )
                    results.append(
                        {
                            "id": op.memory_id,
                            "memory": changed["memory"],
                            "event": "UPDATE",
                            "previous_memory": before,
                        }
                    )
                elif op.event == "DELETE":
                    yield from self.delete(
                        op.memory_id, actor="llm", reason="consolidation", visible=visible
                    )
                    results.append(
                        {
                            "id": op.memory_id,
                            "memory": existing[op.memory_id].text,
                            "event": "DELETE",
                        }
                    )
                elif op.event == "NONE":
                    current = yield from store_call(Store.get, op.memory_id)
                    if self._seen(current, visible) is None:
                        raise MemoryNotFoundError(op.memory_id)
                    event = yield from store_call(
                        Store.attach_session, op.memory_id, prep.scope, "llm"
                    )
                    yield from self._emit([event])
                    results.append(
                        {"id": op.memory_id, "memory": existing[op.memory_id].text, "event": "NONE"}
                    )
            except (MemoryNotFoundError, DuplicateMemoryError, ConflictError) as exc:
                log.warning("consolidation: skipped %s of %s: %s", op.event, op.memory_id, exc)
        return {"results": results}

    def retry_extraction(self, failure_id: object) -> Flow[dict[str, Any]]:
        """Run extraction again on the messages a failed add() kept."""
        if isinstance(failure_id, bool) or not isinstance(failure_id, int):
            raise ValidationError(f"failure_id must be an integer, got {failure_id!r}")
        if not self.has_llm:
            raise ConfigError("retrying extraction needs an LLM; none is configured")
        found = yield from store_call(Store.failure, failure_id)
        if found is None:
            raise ValidationError(f"no extraction failure with id {failure_id}")
        scope, stored, resolved = found
        if self.within is not None and not _scope_inside(scope, self.within):
            raise ValidationError(f"no extraction failure with id {failure_id}")
        if resolved:
            raise ValidationError(f"extraction failure {failure_id} was already resolved")
        msgs = [m for _, m in stored]
        prep = _Prepared(
            scope=scope,
            metadata={},
            messages=msgs,
            chat=[ChatMessage(m.role, m.content, m.name, m.observed_at) for m in msgs],
            observed=max((m.observed_at for m in msgs if m.observed_at), default=utc_now()),
            expires=None,
            images=[],
        )
        return (
            yield from self._additive(
                prep, None, failure_id=failure_id, source_rowids=[r for r, _ in stored]
            )
        )

    def failures(
        self, ids: dict[str, object], include_resolved: bool
    ) -> Flow[list[dict[str, Any]]]:
        """Recorded extraction failures of a scope."""
        ids = self._inside(ids)
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="failures()")
        found = yield from store_call(Store.failures, scope, include_resolved=include_resolved)
        return found

    # -- reads ------------------------------------------------------------------------------

    def search(
        self,
        query: object,
        *,
        filters: dict[str, Any] | None,
        top_k: object,
        threshold: object,
        explain: bool,
        ids: dict[str, object],
        expand_links: bool = False,
        rerank: bool | None = None,
        show_expired: bool = False,
        as_of: object = None,
        include_superseded: bool = True,
    ) -> Flow[dict[str, Any]]:
        """``Memory.search``."""
        text = check_text(query, self.limits.max_text_chars, "query")
        k = check_top_k(top_k)
        thr = check_threshold(threshold)
        scope, where = self._scope_and_where(filters, ids, "search()")
        at = as_of_stamp(as_of)
        if at is not None:
            # What held then: stated by then, and not yet expired then (an expired
            # memory may have held at that date, so expiry is judged at ``at``).
            then = as_of_filter(at)
            where = then if where is None else And((where, then))
        if rerank and (self.fusion.rerank is None or self.reranker is None):
            log.debug("search(rerank=True): no reranker is configured; fused order kept")
        yield from self._bind()
        vec = yield EmbedQuery(text)
        subqueries = yield from self._rewrite(text)
        hits = yield from self._hybrid(
            scope,
            where,
            text,
            vec,
            k,
            subqueries=subqueries,
            rerank=rerank is not False,
            include_expired=bool(show_expired) or at is not None,
            now=at,
        )
        hits = apply_recency(hits, self.fusion, at or utc_now())
        # Superseders come from the search's own scope: a run-scoped search never
        # pulls in (or is told about) another run's memory.
        supers = yield from self._superseders([h.row for h in hits], scope, at)
        hits = rank_superseded(
            hits,
            supers,
            include_superseded=bool(include_superseded),
            pull=lambda row: where is None or evaluate(where, record_of(row)),
        )[:k]
        if any(h.row.id not in supers and h.row.superseder_ids for h in hits):
            # A pulled-in memory may itself be superseded: read those too.
            more = yield from self._superseders(
                [h.row for h in hits if h.row.id not in supers], scope, at
            )
            supers.update(more)
        found: list[tuple[MemoryRow, dict[str, Any]]] = []
        seen = {h.row.id for h in hits}
        for hit in hits:
            score = hit.score
            if thr is not None and score < thr:
                continue
            out: dict[str, Any] = {
                "score": score,
                "superseded_by": [r.id for r in supers.get(hit.row.id, ())],
            }
            if explain:
                out["score_details"] = hit.explain
            found.append((hit.row, out))
            if expand_links:
                for linked_id in hit.row.linked_ids:
                    if linked_id in seen:
                        continue
                    seen.add(linked_id)
                    linked = self._seen((yield from store_call(Store.get, linked_id)), scope)
                    if linked is not None:
                        found.append((linked, {"score": score, "linked_from": hit.row.id}))
        shown = yield from self._linkable([row for row, _ in found])
        return {"results": [{**item(row, shown), **extra} for row, extra in found]}

    def get(self, memory_id: object) -> Flow[dict[str, Any] | None]:
        """``Memory.get``."""
        row = self._seen((yield from store_call(Store.get, self._memory_id(memory_id))))
        if row is None:
            return None
        shown = yield from self._linkable([row])
        supers = yield from self._superseders([row], self._view_of(row))
        return _with_superseded(item(row, shown), supers)

    def get_all(
        self,
        *,
        filters: dict[str, Any] | None,
        top_k: object,
        offset: object,
        ids: dict[str, object],
        show_expired: bool = False,
    ) -> Flow[dict[str, Any]]:
        """``Memory.get_all``."""
        k = check_top_k(top_k)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError(f"offset must be a non-negative integer, got {offset!r}")
        scope, where = self._scope_and_where(filters, ids, "get_all()")
        rows = yield from store_call(
            Store.list_memories,
            scope,
            where,
            limit=k,
            offset=offset,
            include_expired=bool(show_expired),
        )
        shown = yield from self._linkable(rows)
        supers = yield from self._superseders(rows, scope)
        return {"results": [_with_superseded(item(r, shown), supers) for r in rows]}

    def history(self, memory_id: object) -> Flow[list[dict[str, Any]]]:
        """``Memory.history``: ``[]`` for an id with no history (as mem0), or one not visible."""
        mid = self._memory_id(memory_id)
        if self.within is not None:
            try:
                yield from self._visible_by_id(mid)
            except MemoryNotFoundError:
                return []
        events = yield from store_call(Store.history, mid)
        if not events:
            return []
        row = yield from store_call(Store.get, mid, include_deleted=True)
        return [history_item(e, row) for e in events]

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

    def _visible_by_id(self, memory_id: str) -> Flow[MemoryRow]:
        """A memory the caller may see, deleted ones included; else MemoryNotFoundError."""
        row = yield from store_call(Store.get, memory_id, include_deleted=True)
        seen = self._seen(row)
        if seen is None:
            raise MemoryNotFoundError(memory_id)
        return seen

    def timeline(self, memory_id: object, limit: int = 100) -> Flow[list[dict[str, Any]]]:
        """A memory and every memory linked to it (transitively), by observation time."""
        mid = self._memory_id(memory_id)
        start = self._seen((yield from store_call(Store.get, mid)))
        if start is None:
            raise MemoryNotFoundError(mid)
        # Links never lead a bound caller out of its scope (``_seen`` checks each).
        found = {start.id: start}
        frontier = [start]
        while frontier and len(found) < limit:
            row = frontier.pop()
            for linked_id in row.linked_ids:
                if linked_id in found:
                    continue
                linked = self._seen((yield from store_call(Store.get, linked_id)))
                if linked is not None:
                    found[linked.id] = linked
                    frontier.append(linked)
        ordered = sorted(
            found.values(), key=lambda r: (r.observed_at or r.created_at, r.created_at)
        )
        shown = yield from self._linkable(ordered)
        supers = yield from self._superseders(ordered, self._view_of(start))
        return [_with_superseded(item(r, shown), supers) for r in ordered]

    def source_messages(self, memory_id: object) -> Flow[list[dict[str, Any]]]:
        """The raw messages a memory was made from, oldest first (deleted memories too).

        A memory outside the view is a missing one (``MemoryNotFoundError``);
        of a memory the view sees, only the messages of scopes it sees (a
        repeat's messages from a wider conversation stay hidden).
        """
        mid = self._memory_id(memory_id)
        yield from self._visible_by_id(mid)
        found = yield from store_call(Store.source_messages, mid, self.within)
        return [message_item(m) for m in found]

    def scope_counts(self) -> Flow[dict[str, Any]]:
        """Counts of the memories the view sees (the whole store unbound), from the store."""
        counts = yield from store_call(Store.scope_counts, self.within)
        return asdict(counts)

    # -- changes ----------------------------------------------------------------------------

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
        expires: str | Keep | None = KEEP if expiration_date is KEEP else _expiry(expiration_date)
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


def _scope_inside(scope: Scope, bound: Scope) -> bool:
    """Whether every id ``bound`` sets is set to the same value in ``scope``."""
    return all(getattr(scope, kind) == value for kind, value in bound.items())


_EMPTY = np.empty(0, dtype=np.float32)
"""A memory's vector before it is computed (or when the store holds it already)."""
