"""The add flows: what enters memory, verbatim or through extraction.

Owns :class:`WriteFlows`: ``add`` (validation, images, given links, and
the choice of verbatim storage, the procedural summary, consolidation or
the additive pass), the verbatim path with its conversation context,
``retry_extraction`` and ``failures``.

May call: :mod:`engramdb.flows.shared`, :mod:`engramdb.flows.extraction`
(the LLM passes and the store write), the effects, :mod:`engramdb.extract`
(image parts, vision prompt, description parsing), core and the store port.
"""

from __future__ import annotations

import logging
from typing import Any

from engramdb._engine import Complete, Flow, store_call
from engramdb._time import utc_now
from engramdb.core.records import LINK_KINDS
from engramdb.core.validate import check_metadata, check_scope, parse_messages, parse_timestamp
from engramdb.errors import (
    ConfigError,
    ConflictError,
    LLMError,
    ReplyFormatError,
    ScopeError,
    ValidationError,
)
from engramdb.expand import hours_apart
from engramdb.extract import ChatMessage, image_parts, parse_description, vision_prompt
from engramdb.flows.extraction import ExtractionFlows
from engramdb.flows.shared import Prepared, expires_at_of
from engramdb.stores.base import NewMessage, Scope, Store

log = logging.getLogger("engramdb")


MAX_GIVEN_LINKS = 100
"""Links one ``add(links=...)`` may name."""


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


def _scope_inside(scope: Scope, bound: Scope) -> bool:
    """Whether every id ``bound`` sets is set to the same value in ``scope``."""
    return all(getattr(scope, kind) == value for kind, value in bound.items())


class WriteFlows(ExtractionFlows):
    """``add`` and the recovery of failed extractions."""

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
        self._may("write", "add()")
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

    def _prepare(
        self,
        messages: object,
        ids: dict[str, object],
        metadata: object,
        timestamp: object,
        expiration_date: object,
    ) -> Prepared:
        ids = self._inside(ids)
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="add()")
        meta = check_metadata(metadata)
        msgs = parse_messages(messages, self.limits.max_text_chars, self.limits.max_messages)
        observed = parse_timestamp(timestamp) or utc_now()
        expires = expires_at_of(expiration_date)
        images: list[tuple[int, str]] = []
        if isinstance(messages, list | tuple):
            for i, raw in enumerate(messages):
                if isinstance(raw, dict):
                    images.extend((i, url) for url in image_parts(raw.get("content")))
        elif isinstance(messages, dict):
            images.extend((0, url) for url in image_parts(messages.get("content")))
        return Prepared(
            scope=scope,
            metadata=meta,
            messages=[NewMessage(m.role, m.content, m.name, m.timestamp or observed) for m in msgs],
            chat=[ChatMessage(m.role, m.content, m.name, m.timestamp or observed) for m in msgs],
            observed=observed,
            expires=expires,
            images=images,
        )

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
        self, prep: Prepared, links: dict[str, str] | None = None
    ) -> Flow[dict[str, Any]]:
        # A chat message is often an answer whose subject was named just before it
        # ("How long have you had them?" / "Three years!"): the words of the
        # preceding messages of the conversation are indexed with it (keyword
        # search only; its text and vector stay its own). See docs/retrieval.md.
        # Each memory records which messages it borrowed words from (a stored
        # message by rowid, one of this add by index), so purging a message can
        # re-index it (stores/kernel/erasure.py).
        # Only messages of the same conversation lend words (expand.same_conversation):
        # this add's own, or stored ones of the same run said within the window.
        window = self.fusion.context_messages
        for attempt in range(2):
            said: list[tuple[str, int | None, int | None]] = []  # (content, rowid, index)
            if window and prep.scope.run_id is not None:
                earlier = yield from store_call(Store.recent_messages, prep.scope, window)
                first = next((m.observed_at for m in prep.messages if m.observed_at), None)
                said = [
                    (m.content, m.rowid, None)
                    for m in earlier
                    if m.role != "system"
                    and _near(m.observed_at, first, self.fusion.conversation_window_hours)
                ]
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

    def _describe_images(self, prep: Prepared, use_llm: bool) -> Flow[None]:
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

    def retry_extraction(self, failure_id: object) -> Flow[dict[str, Any]]:
        """Run extraction again on the messages a failed add() kept."""
        self._may("write", "retry_extraction()")
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
        prep = Prepared(
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
        self._may("read", "failures()")
        ids = self._inside(ids)
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="failures()")
        found = yield from store_call(Store.failures, scope, include_resolved=include_resolved)
        return found


def _near(said: str | None, now: str | None, hours: float) -> bool:
    """Whether a stored message was said within ``hours`` of the new ones (unknown: yes)."""
    if said is None or now is None:
        return True
    gap = hours_apart(said, now)
    return gap is None or gap <= hours
