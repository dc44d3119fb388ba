"""The browsing reads: a scope's entities, an entity's memories, a count of a list.

Owns :class:`BrowseFlows`: ``entities`` (the entities a scope's memories
mention, most mentioned first, with the newest memories of each),
``entity_memories`` (the memories that mention one) and ``count`` (how many
memories ``get_all`` would list). What a dashboard needs to page through a
large scope without reading it: each is one store read, the scope and the
caller's view checked as ``get_all`` checks them.

May call: :mod:`engramdb.flows.read` (the scope of a call, items), core, the
entity rules (:mod:`engramdb.nlp.entities`) and the store port. Never writes.
"""

from __future__ import annotations

from typing import Any

from engramdb._engine import Flow, store_call
from engramdb.core.records import EntityCount
from engramdb.core.validate import check_top_k
from engramdb.errors import ValidationError
from engramdb.flows.read import ReadFlows
from engramdb.flows.shared import _with_superseded, item
from engramdb.nlp.entities import normalize_entity
from engramdb.stores.base import MemoryRow, Store

__all__ = ["ENTITY_TYPES", "BrowseFlows"]

ENTITY_TYPES = ("PERSON", "PLACE", "ORG", "DATE", "NUMBER", "THING")
"""The kinds of entity the rules tell apart (:mod:`engramdb.nlp.entities`)."""
MAX_SAMPLE = 20
"""Most memories ``entities(newest=...)`` shows of each entity."""


def _offset(offset: object) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError(f"offset must be a non-negative integer, got {offset!r}")
    return offset


def _text(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string, got {type(value).__name__}")
    return value.strip() or None


class BrowseFlows(ReadFlows):
    """``entities``, ``entity_memories`` and ``count``; see the module doc."""

    def entities(
        self,
        *,
        ids: dict[str, object],
        contains: object = None,
        entity_type: object = None,
        top_k: object = 50,
        offset: object = 0,
        newest: object = 0,
        show_expired: bool = False,
    ) -> Flow[dict[str, Any]]:
        """``Memory.entities``."""
        self._may("read", "entities()")
        k = check_top_k(top_k)
        start = _offset(offset)
        if isinstance(newest, bool) or not isinstance(newest, int) or not 0 <= newest <= MAX_SAMPLE:
            raise ValidationError(
                f"newest must be an integer from 0 to {MAX_SAMPLE}, got {newest!r}"
            )
        kind = _text(entity_type, "entity_type")
        if kind is not None and kind.upper() not in ENTITY_TYPES:
            raise ValidationError(
                f"entity_type must be one of {', '.join(ENTITY_TYPES)}, got {entity_type!r}"
            )
        part = _text(contains, "contains")
        scope, _ = self._scope_and_where(None, ids, "entities()")
        found, total = yield from store_call(
            Store.entities,
            scope,
            limit=k,
            offset=start,
            entity_type=kind.upper() if kind is not None else None,
            contains=part.casefold() if part is not None else None,
            sample=newest,
            include_expired=bool(show_expired),
        )
        shown = yield from self._linkable([r for e in found for r in e.sample])
        return {
            "results": [
                _entity(e, [item(r, shown) for r in e.sample] if newest else None) for e in found
            ],
            "total": total,
        }

    def entity_memories(
        self,
        entity: object,
        *,
        ids: dict[str, object],
        top_k: object = 50,
        offset: object = 0,
        show_expired: bool = False,
    ) -> Flow[dict[str, Any]]:
        """``Memory.entity_memories``."""
        self._may("read", "entity_memories()")
        key = _text(entity, "entity")
        if key is None:
            raise ValidationError("entity is required: a key entities() lists, or a name")
        k = check_top_k(top_k)
        start = _offset(offset)
        scope, _ = self._scope_and_where(None, ids, "entity_memories()")
        found: tuple[EntityCount | None, list[MemoryRow]] = (None, [])
        for candidate in dict.fromkeys((key, normalize_entity(key))):
            found = yield from store_call(
                Store.entity_memories,
                scope,
                candidate,
                limit=k,
                offset=start,
                include_expired=bool(show_expired),
            )
            if found[0] is not None:
                break
        counted, rows = found
        shown = yield from self._linkable(rows)
        supers = yield from self._superseders(rows, scope)
        return {
            "entity": _entity(counted) if counted is not None else None,
            "results": [_with_superseded(item(r, shown), supers) for r in rows],
        }

    def count(
        self,
        *,
        filters: dict[str, Any] | None,
        ids: dict[str, object],
        show_expired: bool = False,
        limit: object = None,
    ) -> Flow[int]:
        """``Memory.count``."""
        self._may("read", "count()")
        bound = None if limit is None else check_top_k(limit, "limit")
        scope, where = self._scope_and_where(filters, ids, "count()")
        counted: int = yield from store_call(
            Store.count_memories, scope, where, limit=bound, include_expired=bool(show_expired)
        )
        return counted


def _entity(entity: EntityCount, newest: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": entity.key,
        "name": entity.name,
        "type": entity.type,
        "memory_count": entity.degree,
    }
    if newest is not None:
        out["newest"] = newest
    return out
