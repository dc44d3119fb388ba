"""Second-stage retrieval levers on fused hits: time, session neighbours, entity hop, diversity.

All run after :func:`engramdb.search.fuse`, on fused scores (before the
calibration); when off they cost nothing. Session neighbours are on by
default (``FusionConfig.neighbour_hits = 2``), the others off
(``time_weight = 0``, ``entity_hop_hits = 0``, ``session_decay = 1``).
docs/retrieval.md ("Retrieval levers") has the held-out figures.

- :func:`weigh_by_time`: when the query names a period, the hits observed
  outside it are discounted.

- :func:`lend_to_neighbours`: the best hits lend a share of their score to
  the memories stored next to them in the same conversation session.
- :func:`lend_through_entities`: the best hits lend a share of their score to
  the memories that share one of their (specific) entities.
- :func:`diversify`: a greedy re-rank that discounts each further result of
  a session already represented.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from engramdb.core.records import MemoryRow
from engramdb.nlp.querytime import Period, asks_when, mentions_time, query_periods
from engramdb.search import FusionConfig, Hit, ScoreCalibration, asks, when

__all__ = [
    "asked_last",
    "diversify",
    "entity_hop_on",
    "is_message",
    "lend_through_entities",
    "lend_to_neighbours",
    "named_periods",
    "neighbour_span",
    "neighbours_on",
    "same_actor",
    "session_key",
    "weigh_by_time",
    "weigh_when",
    "when_asked",
]


def is_message(row: MemoryRow) -> bool:
    """Whether a memory is a stored conversation message (``add(infer=False)``).

    Messages have a role and no ``attributed_to``, which every extracted
    memory carries. Only messages lend to and borrow from their neighbours:
    an answer is often in the turn beside the one that matches the question,
    while an extracted memory is self-contained by design, and the memory
    stored beside it says nothing about it (measured: the lever moved the
    LoCoMo facts figures by noise, and on small stores of facts it put an
    unrelated fact above the relevant one).
    """
    return row.role is not None and row.attributed_to is None


def same_conversation(a: MemoryRow, b: MemoryRow, hours: float) -> bool:
    """Whether two stored messages were one conversation: the same ``add``, or one run.

    Neighbours and borrowed context words are conversation devices: the turn
    beside a matching turn often holds the answer. Facts an application
    stores one ``add`` at a time are not a conversation, and the fact stored
    before another says nothing about it (measured: on one-fact-per-add
    stores, lending put an unrelated fact above the answer in 62 of 150
    questions). So two messages are one conversation when they were stored by
    the same call (the same ``created_at``: one transaction) or share a
    ``run_id`` and were said within ``hours`` of each other.
    """
    if a.created_at == b.created_at:
        return True
    if a.run_id is None or a.run_id != b.run_id:
        return False
    gap = hours_apart(when(a), when(b))
    return gap is not None and gap <= hours


def hours_apart(first: str, second: str) -> float | None:
    """Hours between two ISO instants, either order; ``None`` when one does not parse."""
    try:
        delta = dt.datetime.fromisoformat(second) - dt.datetime.fromisoformat(first)
    except ValueError:
        return None
    return abs(delta.total_seconds()) / 3600.0


def neighbours_on(config: FusionConfig) -> bool:
    """Whether session-neighbour expansion runs."""
    return config.neighbour_hits > 0


def entity_hop_on(config: FusionConfig) -> bool:
    """Whether the entity second hop runs."""
    return config.entity_hop_hits > 0


def session_key(row: MemoryRow) -> tuple[str | None, str | None, str | None]:
    """The conversation session of a memory: its own user, agent and run ids."""
    return (row.user_id, row.agent_id, row.run_id)


def _sort_key(hit: Hit) -> tuple[float, float, int, str]:
    # Two neighbours lent the same score by one hit (the turns before and after it)
    # tie on everything but their offset: they keep the order they were said in, not
    # that of their random ids, so a search's order is the same in every store.
    offset = hit.explain.get("offset")
    return (
        -hit.score,
        -float(hit.explain.get("semantic", 0.0)),
        offset if isinstance(offset, int) else 0,
        hit.row.id,
    )


def _scaled(hit: Hit, factor: float, extra: Mapping[str, object]) -> Hit:
    explain = dict(hit.explain)
    if "relative" in explain:
        explain["relative"] = explain["relative"] * factor
    explain["fusion"] = hit.score * factor
    explain.update(extra)
    return Hit(hit.row, hit.score * factor, explain)


_EXACT_COSINE: float = ScoreCalibration.model_fields["exact_cosine"].default


def asked_last(hits: Sequence[Hit], config: FusionConfig) -> list[Hit]:
    """``hits`` with each one that asks a question scaled by ``question_factor``, re-sorted.

    A turn that ends in a question mark (:func:`engramdb.search.asks`) states
    nothing, though its words and vector are near every question on its topic.
    Called after the lenders, so such a turn has already lent its full score to
    the reply beside it ("What are their names?" to "Luna and Oliver"), and after
    the calibration curve, so the factor scales a probability;
    ``explain["question"]`` holds the factor on the hits it scaled. A turn the
    query repeats (its cosine reaches ``calibration.exact_cosine``) is what the
    query looks up, and keeps its score.
    """
    factor = config.question_factor
    if factor >= 1:
        return list(hits)
    cal = config.calibration
    exact = cal.exact_cosine if cal is not None else _EXACT_COSINE
    out = [
        Hit(h.row, h.score * factor, {**h.explain, "question": factor})
        if asks(h.row.text) and float(h.explain.get("semantic", 0.0)) < exact
        else h
        for h in hits
    ]
    return sorted(out, key=_sort_key)


def lend_to_neighbours(
    hits: Sequence[Hit],
    neighbours: Mapping[str, Sequence[tuple[int, MemoryRow]]],
    config: FusionConfig,
) -> list[Hit]:
    """``hits`` with the neighbours of the best ``neighbour_hits`` lifted or added, re-sorted.

    ``hits`` are fused hits, best first; ``neighbours`` maps a hit's id to
    ``(offset, row)`` pairs (``Store.neighbours``). A neighbour at offset
    ``d`` of a hit scoring ``s`` is lent ``s * neighbour_share *
    neighbour_decay ** (|d| - 1)``; it keeps the larger of its own score and
    the best lent one (``explain["neighbour_of"]`` names the hit when the
    lent one wins). A neighbour that is not among ``hits`` joins with the lent
    score (its ``semantic`` is unknown: 0 in ``explain``). Scores stay in [0, 1].
    """
    out: dict[str, Hit] = {h.row.id: h for h in hits}
    for anchor in list(hits)[: config.neighbour_hits]:
        if not is_message(anchor.row):
            continue
        near = [
            (offset, row)
            for offset, row in neighbours.get(anchor.row.id, ())
            if is_message(row)
            and same_conversation(anchor.row, row, config.conversation_window_hours)
        ]
        if config.neighbour_actor == "same":
            near = same_actor(anchor.row, near, config.neighbour_span)
        for offset, row in near:
            share = config.neighbour_share * config.neighbour_decay ** (abs(offset) - 1)
            extra = {"neighbour_of": anchor.row.id, "offset": offset, "share": share}
            _lend(out, anchor, row, share, extra)
    return sorted(out.values(), key=_sort_key)


def _lend(
    out: dict[str, Hit], anchor: Hit, row: MemoryRow, share: float, extra: Mapping[str, object]
) -> None:
    """Lend ``share`` of ``anchor``'s score to ``row`` in ``out`` (by id).

    A memory that was no hit joins with the lent score (its ``semantic`` is
    unknown: 0 in ``explain``); a hit keeps the larger of its own score and
    the lent one (``explain["own"]`` keeps its own when the lent one wins).
    """
    lent = anchor.score * share
    relative = anchor.explain.get("relative")
    current = out.get(row.id)
    if current is None:
        base = Hit(
            row,
            anchor.score,
            {
                "semantic": 0.0,
                "bm25": 0.0,
                **({"relative": relative} if relative is not None else {}),
                "speaker_named": bool(anchor.explain.get("speaker_named")),
                "method": anchor.explain.get("method"),
            },
        )
        out[row.id] = _scaled(base, share, extra)
    elif lent > current.score:
        explain = {**current.explain, **extra, "fusion": lent, "own": current.score}
        if relative is not None:
            explain["relative"] = relative * share
        out[row.id] = Hit(current.row, lent, explain)


def lend_through_entities(
    hits: Sequence[Hit],
    anchors: Sequence[Hit],
    links: Mapping[str, Sequence[tuple[MemoryRow, Sequence[tuple[str, int]]]]],
    config: FusionConfig,
) -> list[Hit]:
    """``hits`` with the memories sharing an entity with ``anchors`` lifted or added, re-sorted.

    ``links`` maps an anchor's id to the memories sharing one of its
    entities, each with the shared ``(entity, degree)`` pairs
    (``Store.entity_hop``). A memory linked to an anchor scoring ``s`` is
    lent ``s * entity_hop_share`` (the degree only decides which entities
    count: scaled by ``1 / log2(1 + degree)`` as in the entity part, a lent
    score never reached LoCoMo's top 20); it keeps the larger of its own score and the best lent one
    (``explain["entity_hop_of"]`` names the anchor and ``hop_entities`` the
    entities when the lent one wins). A memory that is not among ``hits``
    joins with the lent score. Scores stay in [0, 1].
    """
    out: dict[str, Hit] = {h.row.id: h for h in hits}
    for anchor in anchors:
        for row, shared in links.get(anchor.row.id, ()):
            share = config.entity_hop_share
            extra = {
                "entity_hop_of": anchor.row.id,
                "hop_entities": [name for name, _ in shared],
                "share": share,
            }
            _lend(out, anchor, row, share, extra)
    return sorted(out.values(), key=_sort_key)


def named_periods(query: str, config: FusionConfig, now: str) -> list[Period]:
    """The periods ``query`` names (none when the time lever is off); relative to ``now``."""
    if config.time_weight <= 0:
        return []
    try:
        today = dt.datetime.fromisoformat(now).date()
    except ValueError:
        today = dt.datetime.now(dt.UTC).date()
    return query_periods(query, today)


def _observed_day(row: MemoryRow) -> dt.date | None:
    try:
        return dt.date.fromisoformat(when(row)[:10])
    except ValueError:
        return None


def weigh_by_time(
    hits: Sequence[Hit], periods: Sequence[Period], config: FusionConfig
) -> list[Hit]:
    """``hits`` with those observed outside every period discounted, re-sorted.

    A hit is inside when its day (:func:`engramdb.search.when`) is within a
    period widened by ``time_slack_days`` each side; the others are
    multiplied by ``1 - time_weight`` (``explain["time_factor"]``). ``hits``
    as they are when there is no period or no hit is inside one.
    """
    if not periods or config.time_weight <= 0 or not hits:
        return list(hits)
    slack = dt.timedelta(days=config.time_slack_days)
    windows = [(start - slack, end + slack) for start, end in periods]
    inside = []
    for hit in hits:
        day = _observed_day(hit.row)
        inside.append(day is not None and any(lo <= day < hi for lo, hi in windows))
    return _discount(hits, inside, 1.0 - config.time_weight, "time_factor")


def when_asked(query: str, config: FusionConfig) -> bool:
    """Whether the "when" lever applies to ``query`` (never when it is off)."""
    return config.when_weight > 0 and asks_when(query)


def weigh_when(hits: Sequence[Hit], config: FusionConfig) -> list[Hit]:
    """``hits`` with those whose text says no time discounted, re-sorted.

    For a query that asks when: a hit whose text does not
    :func:`~engramdb.nlp.querytime.mentions_time` is multiplied by ``1 -
    when_weight`` (``explain["when_factor"]``); ``hits`` as they are when
    none mentions a time.
    """
    if config.when_weight <= 0 or not hits:
        return list(hits)
    timed = [mentions_time(h.row.text) for h in hits]
    return _discount(hits, timed, 1.0 - config.when_weight, "when_factor")


def _discount(hits: Sequence[Hit], kept: Sequence[bool], factor: float, name: str) -> list[Hit]:
    """The hits not ``kept`` scaled by ``factor`` (``explain[name]``), re-sorted.

    ``hits`` as they are when none is kept: the signal says nothing about them.
    """
    if not any(kept):
        return list(hits)
    out = [
        hit if ok else _scaled(hit, factor, {name: factor})
        for hit, ok in zip(hits, kept, strict=True)
    ]
    return sorted(out, key=_sort_key)


def neighbour_span(config: FusionConfig) -> int:
    """How many memories each side the store is asked for (twice the span for ``"same"``)."""
    return config.neighbour_span * (2 if config.neighbour_actor == "same" else 1)


def same_actor(
    anchor: MemoryRow, near: Sequence[tuple[int, MemoryRow]], span: int
) -> list[tuple[int, MemoryRow]]:
    """The neighbours by ``anchor``'s own actor, offsets renumbered among them, ``span`` a side."""
    out: list[tuple[int, MemoryRow]] = []
    steps = {-1: 0, 1: 0}
    for offset, row in near:
        if row.actor_id != anchor.actor_id:
            continue
        side = -1 if offset < 0 else 1
        if steps[side] < span:
            steps[side] += 1
            out.append((side * steps[side], row))
    return out


def diversify(hits: Sequence[Hit], config: FusionConfig, limit: int) -> list[Hit]:
    """The best ``limit`` of ``hits`` re-ranked greedily with a per-session discount.

    At each step the hit with the best ``score * session_decay ** n`` is
    taken, ``n`` being how many hits of its session (:func:`session_key`)
    were taken before; its score becomes that product (``explain`` keeps
    ``session_factor``). ``hits`` as they are (cut to ``limit``) when
    ``session_decay`` is 1.
    """
    decay = config.session_decay
    if decay >= 1.0 or len(hits) <= 1:
        return list(hits[:limit])
    remaining = list(hits)
    taken: dict[tuple[str | None, str | None, str | None], int] = {}
    out: list[Hit] = []
    while remaining and len(out) < limit:
        best_i, best_value = 0, -1.0
        for i, hit in enumerate(remaining):
            # A hit's discounted score never exceeds its own: once the next
            # own score is below the best so far, nothing after it can win.
            if hit.score <= best_value:
                break
            value = hit.score * decay ** taken.get(session_key(hit.row), 0)
            if value > best_value:
                best_i, best_value = i, value
        hit = remaining.pop(best_i)
        key = session_key(hit.row)
        n = taken.get(key, 0)
        taken[key] = n + 1
        factor = decay**n
        out.append(hit if n == 0 else _scaled(hit, factor, {"session_factor": factor}))
    return out
