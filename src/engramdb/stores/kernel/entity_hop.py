"""What both backends share for ``Store.entity_hop``: assembling the shared-entity links."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from engramdb.core.records import MemoryRow

__all__ = ["EntityHop", "assemble", "small_entities", "unique"]

EntityHop = dict[str, list[tuple[MemoryRow, list[tuple[str, int]]]]]
"""Per anchor id: the memories sharing an entity with it, each with ``(entity, degree)``."""


def small_entities(degrees: Mapping[int, int], max_degree: int) -> list[int]:
    """The entity row ids linked to at least one and at most ``max_degree`` visible memories."""
    return sorted(e for e, d in degrees.items() if 0 < d <= max_degree)


def assemble(
    anchors: Iterable[tuple[str, int, int, str]],
    degrees: Mapping[int, int],
    links: Iterable[tuple[int, int]],
    rows: Mapping[int, MemoryRow],
    max_degree: int,
) -> EntityHop:
    """The answer of ``Store.entity_hop`` from what the backend read.

    ``anchors``: ``(anchor id, anchor row id, entity row id, entity key)`` for
    every entity of every anchor; ``degrees``: entity row id -> visible
    memories linked to it; ``links``: ``(memory row id, entity row id)`` of the
    visible memories linked to the entities kept; ``rows``: those memories by
    row id. An anchor never lists itself and has no entry when nothing shares
    an entity kept with it; memories are in row id order, their entities by key.
    """
    by_entity: dict[int, list[int]] = {}
    for memory, entity in links:
        by_entity.setdefault(int(entity), []).append(int(memory))
    names: dict[int, str] = {}
    mine: dict[str, tuple[int, list[int]]] = {}
    for anchor_id, anchor_rowid, entity, name in anchors:
        names[int(entity)] = name
        entry = mine.setdefault(anchor_id, (int(anchor_rowid), []))
        if 0 < degrees.get(int(entity), 0) <= max_degree:
            entry[1].append(int(entity))
    out: EntityHop = {}
    for anchor_id, (anchor_rowid, entities) in mine.items():
        shared: dict[int, list[tuple[str, int]]] = {}
        for entity in entities:
            for memory in by_entity.get(entity, ()):
                if memory != anchor_rowid and memory in rows:
                    shared.setdefault(memory, []).append((names[entity], degrees[entity]))
        if shared:
            out[anchor_id] = [(rows[m], sorted(shared[m])) for m in sorted(shared)]
    return out


def unique(ids: Sequence[str]) -> list[str]:
    """``ids`` without repeats, in order."""
    return list(dict.fromkeys(ids))
