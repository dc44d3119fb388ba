"""The extraction flows: what the LLM makes of new messages, and the store write.

Owns :class:`ExtractionFlows`: the additive pass (one call, memories
linked to related ones), the procedural summary, the legacy two-call
consolidation (facts, then ADD / UPDATE / DELETE / NONE over shown ids),
the reply budget and retry of each LLM call, the keeping of failed
extractions, and ``_store`` (embed what is new, then one store write of
memories and messages, with dedup and attach decided by the store).

May call: :mod:`engramdb.flows.shared`, :mod:`engramdb.flows.read` (the
related memories, by hybrid search), :mod:`engramdb.flows.change` (the
consolidation's updates and deletes), the effects, :mod:`engramdb.extract`
(prompts and parsing), fusion's document text and terms, core, nlp and
the store port.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from engramdb._engine import Complete, EmbedDocuments, EmbedQuery, Flow, store_call
from engramdb.core.text import content_hash
from engramdb.errors import (
    AccessDeniedError,
    ConflictError,
    DuplicateMemoryError,
    ExtractionError,
    LLMError,
    MemoryNotFoundError,
    ReplyFormatError,
)
from engramdb.extract import (
    ADDITIVE_SCHEMA,
    FACTS_SCHEMA,
    PROCEDURAL_SCHEMA,
    UPDATE_SCHEMA,
    AdditiveContext,
    ChatMessage,
    KnownMemory,
    build_additive_prompt,
    build_fact_prompt,
    build_procedural_prompt,
    build_update_prompt,
    observation_date,
    parse_additive,
    parse_facts,
    parse_procedural,
    parse_update,
    retry_messages,
)
from engramdb.flows.change import ChangeFlows
from engramdb.flows.read import ReadFlows
from engramdb.flows.shared import Prepared, entities_of
from engramdb.nlp import document_terms
from engramdb.nlp.terms import with_attribute_terms
from engramdb.search import document_text, when
from engramdb.stores.base import AddOutcome, MemoryRow, NewMemory, Scope, Store

log = logging.getLogger("engramdb")

T = TypeVar("T")

CHAIN_STEPS = 8
"""Versions followed at most from a related memory to the latest of its chain."""

REPLY_BASE_TOKENS = 256
"""Reply tokens every extraction call may use whatever its material (see ``_budget``)."""


_EMPTY = np.empty(0, dtype=np.float32)
"""A memory's vector before it is computed (or when the store holds it already)."""


class ExtractionFlows(ReadFlows, ChangeFlows):
    """The LLM's extraction passes and the write every add ends in."""

    def _additive(
        self,
        prep: Prepared,
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

    def _procedural(self, prep: Prepared, prompt: object) -> Flow[dict[str, Any]]:
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

    def _consolidate(self, prep: Prepared, prompt: object) -> Flow[dict[str, Any]]:
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
                    done = yield from self.delete(
                        op.memory_id, actor="llm", reason="consolidation", visible=visible
                    )
                    if done["message"].startswith("Memory detached"):
                        # Another scope's memory, seen through an attached session:
                        # the session was detached, the memory itself stays.
                        continue
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
            except (
                MemoryNotFoundError,
                DuplicateMemoryError,
                ConflictError,
                AccessDeniedError,
            ) as exc:
                log.warning("consolidation: skipped %s of %s: %s", op.event, op.memory_id, exc)
        return {"results": results}

    def _related(self, scope: Scope, text: str, k: int) -> Flow[list[MemoryRow]]:
        """Existing memories of the scope most related to ``text`` (hybrid search).

        Each related memory that was replaced is followed by the latest version
        of its chain (what superseded it, and what superseded that): a change
        can only be linked to a memory the request shows, and it must be linked
        to the version that holds now (Austin shown, Melbourne not, and Gdansk
        could not supersede Melbourne).
        """
        if k <= 0 or not text.strip():
            return []
        yield from self._bind()
        vec = yield EmbedQuery(text[: self.limits.max_text_chars])
        hits = yield from self._hybrid(scope, None, text, vec, k)
        rows = [h.row for h in hits]
        seen = {r.id for r in rows}
        supers = yield from self._superseders(rows, scope)
        out: list[MemoryRow] = []
        for row in rows:
            out.append(row)
            chain = supers.get(row.id, [])
            for _ in range(CHAIN_STEPS):
                if not chain:
                    break
                newest = max(chain, key=when)
                if newest.id in seen:
                    break
                seen.add(newest.id)
                out.append(newest)
                more = yield from self._superseders([newest], scope)
                chain = more.get(newest.id, [])
        return out

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

    def _extract(self, prep: Prepared, ask: Flow[T], failure_id: int | None) -> Flow[T]:
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

    # -- the write --------------------------------------------------------------------------

    def _store(
        self,
        memories: list[NewMemory],
        prep: Prepared,
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

    def _embed_new(self, memories: Sequence[NewMemory], skip: set[str]) -> Flow[None]:
        todo = [m for m in memories if m.hash not in skip and m.embedding.size == 0]
        if todo:
            vectors = yield EmbedDocuments(
                [document_text(m.text, m.actor_id, self.fusion) for m in todo]
            )
            for mem, vec in zip(todo, vectors, strict=True):
                mem.embedding = vec
            attrs = self._attribute_terms([m.embedding for m in todo])
            for mem, extra in zip(todo, attrs, strict=True):
                mem.terms = with_attribute_terms(mem.terms, extra)

    def _new_memory(
        self, text: str, prep: Prepared, *, context: Sequence[str] = (), **fields: Any
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
