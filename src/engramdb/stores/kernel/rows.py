"""Stored columns to records: one column list and one conversion for every backend.

A backend selects :data:`MEMORY_COLUMNS` (over the alias ``m``) or
:data:`HISTORY_COLUMNS` in this order and hands each raw row to
:func:`memory_row` or :func:`history_event` with its
:class:`ValueConverters`: how its driver returns a timestamp (SQLite: ISO
text already; PostgreSQL: a ``datetime``) and a JSON document (SQLite: text;
PostgreSQL: already decoded). Nothing else about a row differs between
backends, so nothing else is written per backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engramdb.core.records import INCOMING_KIND, HistoryEvent, MemoryRow, ScopeCounts

__all__ = [
    "HISTORY_COLUMNS",
    "ISO_TEXT",
    "MEMORY_COLUMNS",
    "ValueConverters",
    "chunks",
    "fold_links",
    "history_event",
    "iso_stamp",
    "link_label",
    "memory_columns",
    "memory_row",
    "scope_counts",
]

_MEMORY = (
    "rowid",
    "id",
    "text",
    "hash",
    "user_id",
    "agent_id",
    "run_id",
    "actor_id",
    "role",
    "attributed_to",
    "memory_type",
    "metadata",
    "created_at",
    "updated_at",
    "observed_at",
    "expires_at",
    "deleted_at",
    "version",
)

MEMORY_COLUMNS = len(_MEMORY)
"""How many columns :func:`memory_columns` selects; a query's extra columns follow them."""

HISTORY_COLUMNS = (
    "rowid, memory_id, event, version, old_memory, new_memory, old_metadata, new_metadata, "
    "actor, reason, created_at, old_expires_at, new_expires_at"
)
"""The columns of the history table that :func:`history_event` reads, in its order."""


def memory_columns(alias: str = "m") -> str:
    """The memory columns :func:`memory_row` reads, in its order, over ``alias``."""
    return ", ".join(f"{alias}.{name}" for name in _MEMORY)


@dataclass(frozen=True)
class ValueConverters:
    """How one backend's driver returns the values that are not plain text or numbers."""

    stamp: Callable[[Any], str | None]
    """A stored timestamp (or NULL) as ISO-8601 text (or None)."""
    document: Callable[[Any], dict[str, Any] | None]
    """A stored JSON document (or NULL) as a dict (or None)."""


def _text_json(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    # Most memories have no metadata: skip the decoder for them.
    return {} if value == "{}" else json.loads(value)


def _same(value: Any) -> Any:
    return value


def iso_stamp(moment: datetime | None) -> str | None:
    """A driver's ``datetime`` as the text every backend returns: UTC, microseconds, "+00:00"."""
    return None if moment is None else moment.astimezone(UTC).isoformat(timespec="microseconds")


ISO_TEXT = ValueConverters(stamp=_same, document=_text_json)
"""A driver that returns timestamps as ISO text and JSON as text (SQLite)."""


def memory_row(
    r: Sequence[Any],
    values: ValueConverters,
    *,
    run_ids: Sequence[str] = (),
    agent_ids: Sequence[str] = (),
    linked_ids: Sequence[str] = (),
    link_kinds: dict[str, str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> MemoryRow:
    """A :class:`MemoryRow` from the first :data:`MEMORY_COLUMNS` values of ``r``.

    ``metadata``: the row's metadata already decoded (the record keeps this
    dict); by default it is read from the row.
    """
    return MemoryRow(
        id=r[1],
        text=r[2],
        hash=r[3],
        user_id=r[4],
        agent_id=r[5],
        run_id=r[6],
        actor_id=r[7],
        role=r[8],
        attributed_to=r[9],
        memory_type=r[10],
        metadata=(values.document(r[11]) or {}) if metadata is None else metadata,
        created_at=values.stamp(r[12]) or "",
        updated_at=values.stamp(r[13]) or "",
        observed_at=values.stamp(r[14]),
        expires_at=values.stamp(r[15]),
        deleted_at=values.stamp(r[16]),
        version=r[17],
        run_ids=list(run_ids),
        agent_ids=list(agent_ids),
        linked_ids=list(linked_ids),
        link_kinds=dict(link_kinds or {}),
    )


_LABEL_RANK = {
    "updated_by": 0,
    "contradicted_by": 1,
    "derived_updated_by": 2,
    "updates": 3,
    "contradicts": 4,
    "derived_update": 5,
    "followed_up_by": 6,
    "follows_up": 7,
    "related": 8,
}


def link_label(outgoing: bool, kind: str) -> str:
    """A stored link's kind as read from one end.

    The kind itself from the memory that links, :data:`INCOMING_KIND` from the
    memory linked to; an unknown kind reads ``related``.
    """
    if kind not in INCOMING_KIND:
        return "related"
    return kind if outgoing else INCOMING_KIND[kind]


def fold_links(labelled: Iterable[tuple[str, str]]) -> tuple[list[str], dict[str, str]]:
    """``(other id, label)`` pairs into ``linked_ids`` (sorted, unique) and ``link_kinds``.

    Two memories may be linked more than once (both ways, or by two kinds); the
    label kept is the one that says most: being superseded first, ``related`` last.
    ``related`` labels are left out of the dict (a missing id reads as ``related``).
    """
    kinds: dict[str, str] = {}
    for other, label in labelled:
        old = kinds.get(other)
        if old is None or _LABEL_RANK.get(label, 8) < _LABEL_RANK.get(old, 8):
            kinds[other] = label
    ids = sorted(kinds)
    return ids, {i: k for i, k in kinds.items() if k != "related"}


def history_event(r: Sequence[Any], values: ValueConverters) -> HistoryEvent:
    """A :class:`HistoryEvent` from a row of :data:`HISTORY_COLUMNS`."""
    return HistoryEvent(
        id=int(r[0]),
        memory_id=r[1],
        event=r[2],
        version=r[3],
        old_memory=r[4],
        new_memory=r[5],
        old_metadata=values.document(r[6]),
        new_metadata=values.document(r[7]),
        actor=r[8],
        reason=r[9],
        created_at=values.stamp(r[10]) or "",
        old_expires_at=values.stamp(r[11]),
        new_expires_at=values.stamp(r[12]),
    )


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``size`` (statements have a bound on parameters)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def scope_counts(rows: Iterable[Sequence[Any]]) -> ScopeCounts:
    """The rows of :func:`~engramdb.stores.kernel.sql.scope_counts_query` as a record."""
    out = ScopeCounts()
    per_day: dict[str, int] = {}

    def bump(target: dict[str, int], key: Any, n: int) -> None:
        if key is not None and n:
            target[str(key)] = target.get(str(key), 0) + n

    for tag, a, b, c, n0, n1, n2 in rows:
        live, tag = int(n0), int(tag)
        if tag == 0:
            out.live += live
            out.expired += int(n1)
            out.deleted += int(n2)
            bump(out.users, a, live)
            bump(out.agents, b, live)
            bump(out.runs, c, live)
        elif tag == 1:
            bump(per_day, a, live)
        else:
            bump(out.agents if a == "agent_id" else out.runs, b, live)
    out.per_day = dict(sorted(per_day.items()))
    return out
