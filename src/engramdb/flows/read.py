"""The read flows: search (hybrid retrieval and its levers) and the reads by id.

Owns :class:`ReadFlows`: ``search`` (candidates from the store, fusion,
the time / neighbour / entity-hop levers, query rewriting, the second
stage, supersession), ``get``, ``get_all``, ``history``, ``timeline``,
``source_messages`` and ``scope_counts``; also ``_hybrid``, which the
extraction flows use to find the memories related to new messages.

May call: :mod:`engramdb.flows.shared`, the effects, fusion
(:mod:`engramdb.search`), :mod:`engramdb.expand`, :mod:`engramdb.rewrite`,
:mod:`engramdb.rerank`, core and the store port. Never writes.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import date, datetime
from typing import Any

import numpy as np

from engramdb._engine import EmbedDocuments, EmbedQuery, Flow, store_call
from engramdb._time import utc_now
from engramdb.attributes import CURRENT, Asked, relations_of
from engramdb.core.filters import And, Cmp, Node, evaluate, parse_filters, split_scope
from engramdb.core.records import Candidate
from engramdb.core.validate import (
    check_scope,
    check_text,
    check_threshold,
    check_top_k,
    parse_timestamp,
)
from engramdb.errors import (
    LLMError,
    MemoryNotFoundError,
    ReplyFormatError,
    ScopeError,
    ValidationError,
)
from engramdb.expand import (
    asked_last,
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
from engramdb.flows.shared import (
    FlowState,
    _with_superseded,
    history_item,
    item,
    message_item,
    record_of,
)
from engramdb.nlp.facets import asked_work_facet
from engramdb.nlp.idioms import idiom_attributes
from engramdb.nlp.querytime import (
    Period,
    asks_collection,
    asks_present,
    asks_previous,
    asks_when,
    before_what,
    topic_words,
)
from engramdb.owner import owner_names, scope_owner
from engramdb.rewrite import looks_multipart, merge_hits, rewrite_query
from engramdb.search import (
    FusionConfig,
    Hit,
    QueryPlan,
    apply_recency,
    apply_rerank,
    before_unlinked,
    calibrate,
    document_text,
    fuse,
    latest_of_attribute,
    names_newer,
    newer_first,
    plan_query,
    query_embedding_text,
    query_names,
    rank_superseded,
    stale_below,
    subject_terms,
    when,
)
from engramdb.speakers import (
    SPEAKER_MESSAGES,
    SPEAKER_STAND_IN,
    name_free_query,
    opens_with_speaker,
    recent_speakers,
    speaker_candidates,
    speaker_terms,
)
from engramdb.stores.base import MemoryRow, Scope, Store

log = logging.getLogger("engramdb")


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


def _weighed(
    hits: list[Hit], config: FusionConfig, periods: Sequence[Period], asks_when: bool
) -> list[Hit]:
    """Fused hits with the query's time levers applied: the named periods, a "when" question."""
    if periods:
        hits = weigh_by_time(hits, periods, config)
    if asks_when:
        hits = weigh_when(hits, config)
    return hits


ORDER_DEPTH = 20
"""Hits a search orders (fusion, levers, supersession) before cutting to ``top_k``."""

HOLDERS = 100
"""Candidates the ``attribute_currency`` lever reads for the holders of an attribute."""

TOPIC_WORDS = 3
"""The most words past who and when (:func:`engramdb.nlp.querytime.topic_words`) a
question asking an attribute may have for the ``attribute_currency`` lever."""

CHAIN_PASSES = 4
"""Times the supersession order is settled again for superseders of pulled-in memories."""


def merge_deeper(head: list[Hit], deeper: list[Hit]) -> list[Hit]:
    """``head`` with the hits only ``deeper`` found merged in by score.

    Both lists come best first. ``head`` keeps its own order, and a hit of
    ``deeper`` goes before a hit of ``head`` only when it scores strictly more,
    so a tie keeps what the shallower pass settled (a superseder above what it
    replaced), and the first result changes only for a hit that outscores it.
    """
    known = {h.row.id for h in head}
    extra = (h for h in deeper if h.row.id not in known)
    return list(heapq.merge(head, extra, key=lambda h: -h.score))


def mem0_details(explain: dict[str, Any], score: float) -> dict[str, Any]:
    """``score_details``: engramdb's parts, and the same under mem0's key names.

    mem0's hybrid search explains a hit with ``semantic_score`` (the cosine),
    ``bm25_score`` (its normalised keyword score), ``entity_boost`` and
    ``final_score`` (the score returned); code written against mem0 reads those.
    """
    parts = explain.get("parts") or {}
    return {
        **explain,
        "semantic_score": explain.get("semantic", 0.0),
        "bm25_score": parts.get("bm25", 0.0),
        "entity_boost": explain.get("entity", 0.0),
        "final_score": score,
    }


class ReadFlows(FlowState):
    """Search and the reads by id."""

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
        self._may("read", "search()")
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
        # A question about a speaker of the scope embeds its text with "someone" for the name
        # (speakers.py): known before the vector is made, so that it is made once.
        spoken = (
            (yield from self._speakers(scope, text)) if self.fusion.speaker_names else frozenset()
        )
        # A question naming the scope's own person by its user_id ("Where does Dana
        # live?" in user_id="dana") asks what "the user" questions ask (owner.py).
        owned = (
            scope_owner(
                text,
                query_names(text, self.fusion),
                subject_terms(scope.user_id) - subject_terms(None),
            )
            if self.fusion.owner_names and not spoken and scope.user_id
            else frozenset()
        )
        said = (
            name_free_query(text, spoken, SPEAKER_STAND_IN)
            if spoken
            else name_free_query(text, owned)
            if owned
            else text
        )
        vec = yield EmbedQuery(query_embedding_text(said, self.fusion))
        subqueries = yield from self._rewrite(text)

        def ordered(
            depth: int, second: bool = rerank is not False
        ) -> Flow[tuple[list[Hit], dict[str, list[MemoryRow]]]]:
            return self._ordered(
                scope,
                where,
                text,
                vec,
                depth,
                subqueries=subqueries,
                rerank=second,
                include_expired=bool(show_expired) or at is not None,
                at=at,
                include_superseded=bool(include_superseded),
                spoken=spoken,
                owned=owned,
            )

        # The first ORDER_DEPTH hits are settled on ORDER_DEPTH hits whatever top_k
        # is (a superseder found below the cut still lifts over what it replaces).
        # A deeper top_k merges in what a deeper pass finds (not reranked: one LLM
        # call a search) where its scores put it: results stay sorted by score.
        hits, supers = yield from ordered(ORDER_DEPTH)
        if k > ORDER_DEPTH:
            deeper, more = yield from ordered(k, False)
            hits = merge_deeper(hits, deeper)
            supers = {**more, **supers}
        hits = [h for h in hits[:k] if thr is None or h.score >= thr]
        links: dict[str, list[MemoryRow]] = {}
        if expand_links:
            links, more = yield from self._expanded(
                hits,
                scope,
                where,
                at,
                include_expired=bool(show_expired) or at is not None,
                include_superseded=bool(include_superseded),
            )
            supers = {**more, **supers}
        found: list[tuple[MemoryRow, dict[str, Any]]] = []
        for hit in hits:
            out: dict[str, Any] = {
                "score": hit.score,
                "superseded_by": [r.id for r in supers.get(hit.row.id, ())],
            }
            if explain:
                out["score_details"] = mem0_details(hit.explain, hit.score)
            found.append((hit.row, out))
            for linked in links.get(hit.row.id, ()):
                # A linked memory carries the score of the hit that led to it.
                extra = {
                    "score": hit.score,
                    "superseded_by": [r.id for r in supers.get(linked.id, ())],
                    "linked_from": hit.row.id,
                }
                found.append((linked, extra))
        shown = yield from self._linkable([row for row, _ in found])
        return {"results": [{**item(row, shown), **extra} for row, extra in found]}

    def _expanded(
        self,
        hits: Sequence[Hit],
        scope: Scope,
        where: Node | None,
        at: str | None,
        *,
        include_expired: bool,
        include_superseded: bool,
    ) -> Flow[tuple[dict[str, list[MemoryRow]], dict[str, list[MemoryRow]]]]:
        """``expand_links``: each hit's linked memories that the search itself may return.

        A linked memory passes what a hit passes: the caller's scope, the
        filters, ``as_of`` (stated by then), expiry (unless shown) and, with
        ``include_superseded=False``, supersession; each memory comes once,
        after the first hit linking it. Returns the linked memories by hit id,
        and the superseders of those that have one.
        """
        moment = at or utc_now()
        seen = {h.row.id for h in hits}
        picked: dict[str, list[MemoryRow]] = {}
        for hit in hits:
            for linked_id in hit.row.linked_ids:
                if linked_id in seen:
                    continue
                seen.add(linked_id)
                row = self._seen((yield from store_call(Store.get, linked_id)), scope)
                if row is None or (where is not None and not evaluate(where, record_of(row))):
                    continue
                if not include_expired and not holds_at(row, moment):
                    continue
                picked.setdefault(hit.row.id, []).append(row)
        rows = [row for group in picked.values() for row in group]
        supers = (yield from self._superseders(rows, scope, at)) if rows else {}
        if not include_superseded:
            picked = {
                hit_id: [row for row in group if row.id not in supers]
                for hit_id, group in picked.items()
            }
        return picked, supers

    def get(self, memory_id: object) -> Flow[dict[str, Any] | None]:
        """``Memory.get``."""
        self._may("read", "get()")
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
        self._may("read", "get_all()")
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
        self._may("read", "history()")
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

    def timeline(self, memory_id: object, limit: int = 100) -> Flow[list[dict[str, Any]]]:
        """A memory and every memory linked to it (transitively), by observation time."""
        self._may("read", "timeline()")
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
        self._may("read", "source_messages()")
        mid = self._memory_id(memory_id)
        yield from self._visible_by_id(mid)
        found = yield from store_call(Store.source_messages, mid, self.within)
        return [message_item(m) for m in found]

    def scope_counts(self) -> Flow[dict[str, Any]]:
        """Counts of the memories the view sees (the whole store unbound), from the store."""
        self._may("read", "scope_counts()")
        counts = yield from store_call(Store.scope_counts, self.within)
        return asdict(counts)

    # -- steps of the reads -----------------------------------------------------------------

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

    def _chains(
        self,
        hits: list[Hit],
        scope: Scope,
        at: str | None,
        *,
        include_superseded: bool,
        pull: Callable[[MemoryRow], bool],
        previous: bool,
        before: frozenset[str] = frozenset(),
    ) -> Flow[tuple[list[Hit], dict[str, list[MemoryRow]]]]:
        """Hits ordered by their supersession chains, and every superseder read.

        ``previous``: the question asks for the replaced version; so does one
        ending "before <what>" (``before``: its terms) when a memory that
        replaced another says what (:func:`~engramdb.search.names_newer`).

        A superseder pulled in for a hit may itself be superseded (single →
        dating → engaged → married): its own superseders are read and the
        order settled again, until a pass pulls in nothing new (at most
        ``CHAIN_PASSES``), so the latest version of a chain is the one that
        rises, whichever version matched. Superseders come from the search's
        own scope: a run-scoped search never pulls in another run's memory.
        """
        supers = yield from self._superseders([h.row for h in hits], scope, at)
        asked = {h.row.id for h in hits}
        ranked = hits
        for _ in range(CHAIN_PASSES):
            ranked = rank_superseded(
                [Hit(h.row, h.score, dict(h.explain)) for h in hits],
                supers,
                include_superseded=include_superseded,
                pull=pull,
                previous=previous or names_newer(before, supers),
            )
            unread = [h.row for h in ranked if h.row.id not in asked]
            if not unread:
                break
            asked.update(r.id for r in unread)
            more = yield from self._superseders(unread, scope, at)
            if not more:
                break
            supers.update(more)
        return ranked, supers

    def _attribute_currency(
        self,
        scope: Scope,
        where: Node | None,
        text: str,
        vec: Any,
        hits: list[Hit],
        *,
        include_expired: bool,
    ) -> Flow[list[Hit]]:
        """The ``attribute_currency`` lever: the latest statement of the asked attribute first.

        The question's attribute terms are those fusion searched (every hit's
        ``explain["attributes"]``) that hold one value at a time
        (:data:`engramdb.attributes.CURRENT`). Its subject is the speaker it names (the
        ``actor_id`` of the hits its names matched, the most frequent), else
        the scope's own person. One candidate read with only the attribute terms
        as keywords, within that speaker's memories, finds the holders: the
        candidates with a keyword score.
        """
        asked = [a for a in (hits[0].explain.get("attributes", ()) if hits else ()) if a in CURRENT]
        if not asked or asks_collection(text):
            return hits
        actors = [h.row.actor_id for h in hits if h.explain.get("actor") and h.row.actor_id]
        owners = frozenset(hits[0].explain.get("owner", ()))
        topic = topic_words(text, [*actors, *owners, "user"])
        if len(topic) > TOPIC_WORDS:
            return hits  # a specific question, not one about an attribute
        narrowed = where
        if actors:
            speaker = max(set(actors), key=lambda a: (actors.count(a), a))
            said = Cmp("actor_id", "eq", speaker)
            narrowed = said if where is None else And((where, said))
        plan = QueryPlan(terms=list(asked), entities=[])
        found = yield from self._candidates(
            scope, narrowed, vec, plan, max(self.fusion.pool, HOLDERS), include_expired
        )
        holders = [c for c in found if c.bm25 > 0]
        names = plan_query(text, self.fusion, subject_terms(scope.user_id)).names
        return latest_of_attribute(
            hits,
            holders,
            asked,
            previous=asks_previous(text),
            names=names,
            owners=owners,
            before=before_what(text),
            topic=topic,
            work_facet=asked_work_facet(text),
        )

    def _newer_first(self, hits: list[Hit]) -> Flow[list[Hit]]:
        """The present-tense lever (``FusionConfig.present_alike_cosine``) on the first hits."""
        cfg = self.fusion
        head, tail = hits[: cfg.present_alike_hits], hits[cfg.present_alike_hits :]
        texts = [document_text(h.row.text, h.row.actor_id, cfg) for h in head]
        vectors = np.asarray((yield EmbedDocuments(texts)), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return newer_first(head, vectors, cfg.present_alike_cosine) + tail

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

    def _ordered(
        self,
        scope: Scope,
        where: Node | None,
        text: str,
        vec: Any,
        depth: int,
        *,
        subqueries: Sequence[tuple[str, Any]],
        rerank: bool,
        include_expired: bool,
        at: str | None,
        include_superseded: bool,
        spoken: frozenset[str] = frozenset(),
        owned: frozenset[str] = frozenset(),
    ) -> Flow[tuple[list[Hit], dict[str, list[MemoryRow]]]]:
        """``depth`` hits in their final order (fusion, levers, chains), and their superseders.

        ``spoken``: the speakers the question names (:meth:`_speakers`);
        ``owned``: the scope's own person it names (``owner.scope_owner``); ``vec``
        is then the vector of its name-free text.
        """
        hits = yield from self._hybrid(
            scope,
            where,
            text,
            vec,
            depth,
            subqueries=subqueries,
            rerank=rerank,
            include_expired=include_expired,
            now=at,
            spoken=spoken,
            owned=owned,
        )
        # Read the question's tense only for a lever that uses it (both off by default).
        present = (
            self.fusion.present_recency_weight > 0 or self.fusion.present_alike_cosine > 0
        ) and asks_present(text)
        hits = apply_recency(hits, self.fusion, at or utc_now(), present=present)
        before = before_what(text)
        if self.fusion.attribute_currency and (
            asks_present(text)
            or asks_previous(text)
            or before
            or (at is not None and not asks_when(text))
        ):
            hits = yield from self._attribute_currency(
                scope, where, text, vec, hits, include_expired=include_expired
            )
        hits, supers = yield from self._chains(
            hits,
            scope,
            at,
            include_superseded=include_superseded,
            pull=lambda row: where is None or evaluate(where, record_of(row)),
            previous=asks_previous(text),
            before=before,
        )
        if before and not names_newer(before, supers):
            hits = before_unlinked(hits, before)
        if (
            supers
            and self.fusion.superseded_factor < 1
            and asks_present(text)
            and not asks_collection(text)
        ):
            # What holds now: a replaced memory no longer answers (search.py). A question
            # of what has piled up ("Which cities has Maya lived in?") asks for it too.
            hits = stale_below(hits, supers, self.fusion.superseded_factor)
        if present and self.fusion.present_alike_cosine > 0 and len(hits) > 1:
            hits = yield from self._newer_first(hits)
        return hits, supers

    def _speakers(self, scope: Scope, query: str) -> Flow[frozenset[str]]:
        """The speakers of the scope that ``query`` names (:func:`recent_speakers`)."""
        names = query_names(query, self.fusion)
        if not names:
            return frozenset()
        messages = yield from store_call(Store.recent_messages, scope, SPEAKER_MESSAGES)
        return recent_speakers(names, messages)

    def _plan(self, query: str, subject: frozenset[str], vec: Any) -> QueryPlan:
        """The query's plan (search.py), with the attribute terms its vector asks about."""
        cfg = self.fusion
        plan = plan_query(query, cfg, subject)
        # A one-word query ("Fandango4471") is a look-up, not a personal question.
        if not self.attributes_on or len(query.split()) < 2:
            return plan
        model = self._attribute_model()
        # An idiom says what the vector misses ("get around in" asks about a vehicle,
        # nlp/idioms.py): the attributes it names replace the vector's reading.
        shares = model.idiom_shares(idiom_attributes(query)) if cfg.attribute_idioms else None
        if shares is None:
            shares = model.shares(vec)
        if cfg.attribute_weight > 0:
            plan = replace(plan, attributes=Asked(model, shares))
        if cfg.bm25_weight > 0:
            attrs = model.terms_at(shares, cfg.attribute_gate)
            if attrs:
                plan = replace(
                    plan,
                    terms=[*plan.terms, *attrs],
                    relations=plan.relations | relations_of(attrs),
                    personal=True,
                )
        return plan

    def _candidates(
        self,
        scope: Scope,
        where: Node | None,
        vec: Any,
        plan: QueryPlan,
        n: int,
        include_expired: bool,
    ) -> Flow[list[Candidate]]:
        """The store's ``n``-wide candidates for one reading of the query (``vec``, ``plan``)."""
        found: list[Candidate] = yield from store_call(
            Store.candidates,
            scope,
            where,
            vec,
            plan.terms,
            plan.entities,
            n,
            include_expired=include_expired,
            stat_terms=plan.attributes.stat_terms() if plan.attributes is not None else (),
            vectors=plan.attributes is not None,
        )
        return found

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
        spoken: frozenset[str] = frozenset(),
        owned: frozenset[str] = frozenset(),
    ) -> Flow[list[Hit]]:
        """Candidates from every signal, fused (search.py); reranked if configured.

        ``now`` (the search's ``as_of``, else the present) resolves relative
        times of the query for the time lever. ``subqueries`` (text, vector)
        from the query-rewrite lever are searched too and merged (rewrite.py).
        ``owned``: the scope's own person the query names by the ``user_id``
        (``vec`` is already the name-free question's), searched as the owner.
        """
        cfg = self.fusion
        subject = subject_terms(scope.user_id)
        second = cfg.rerank if rerank else None
        want = max(k, second.pool) if second is not None else k
        n = max(cfg.pool, want)
        if spoken:
            # The query names a speaker of the scope: the name says who, not what
            # (speakers.py); ``vec`` is the name-free question's. Without the name in
            # the vector, a fact that opens with another person is told apart as
            # someone else's (``other_subject_factor``).
            plan = replace(self._plan(query, subject | speaker_terms(spoken), vec), speakers=spoken)
            candidates = yield from self._candidates(scope, where, vec, plan, n, include_expired)
            if opens_with_speaker(candidates, spoken):
                # Facts about the speaker by name: the whole question tells hers apart.
                whole_vec = yield EmbedQuery(query_embedding_text(query, cfg))
                whole_plan = self._plan(query, subject, whole_vec)
                whole = yield from self._candidates(
                    scope, where, whole_vec, whole_plan, n, include_expired
                )
                candidates = speaker_candidates(whole, candidates, spoken)
        elif not owned:
            plan = self._plan(query, subject, vec)
            candidates = yield from self._candidates(scope, where, vec, plan, n, include_expired)
        # The store's own person: named by the user id (``owned``; ``vec`` is already
        # the name-free question's), else read from the first candidates (owner.py).
        owners = owned or (
            owner_names(plan.names, candidates, query) if cfg.owner_names and not spoken else None
        )
        if owners:
            # Searched without the name, as keyword, entity key and in the vector.
            if not owned:
                vec = yield EmbedQuery(query_embedding_text(name_free_query(query, owners), cfg))
            plan = self._plan(query, subject | speaker_terms(owners), vec)
            plan = replace(plan, owners=owners, personal=True)
            candidates = yield from self._candidates(scope, where, vec, plan, n, include_expired)
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
        # A turn that asks has lent to its reply above; it answers less often than a
        # turn that states with the same score (expand.py).
        hits = asked_last(hits, cfg)
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
            sub_plan = plan_query(sub, cfg, subject_terms(scope.user_id))
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
