"""The web UI's entities: the names, places, dates ... a scope's memories mention.

The store links each memory to the entities of its text when it writes it
(:func:`engramdb.flows.entities_of`: rules, no model); that table has no read
of its own in the store's interface yet (only the search's entity channel and
its second hop read it). So the UI finds them the same way the store did: it
reads the scope's newest :data:`ENTITY_SCAN` live memories through
:class:`~engramdb.server.service.MemoryService` — the caller's tenancy rules,
as every other page, in one read — and runs :func:`entities_of` on each text it has not
seen before (texts are remembered by their hash, so a refresh only reads the
new ones). Same function, same text: the same entities as the store's links.

The index of a scope is cached for a few seconds, then refreshed in the
background while the cached one is shown (as the counts are); a change made
in the UI drops it. Every request still asks the service for one memory of
the scope first, so a key that may not read the scope is refused (403) and a
revoked one is signed out, cache or not.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio.to_thread

from engramdb.flows import entities_of
from engramdb.server.service import MemoryService, ServerLimits
from engramdb.server.tenancy import SCOPE_KINDS, Caller

__all__ = ["ENTITY_SCAN", "ENTITY_TYPES", "Entities", "EntityIndex"]

ENTITY_SCAN = 2000
"""The newest live memories of a scope whose entities are listed."""
ENTITY_TYPES = ("PERSON", "PLACE", "ORG", "DATE", "NUMBER", "THING")
"""The kinds of entity the rules tell apart (:mod:`engramdb.nlp.entities`)."""
_TTL_S = 5.0
_TEXTS = 200_000
_SCOPES = 64

_Key = tuple[Any, ...]


@dataclass
class Entities:
    """The entities of a scope's newest memories."""

    entities: list[dict[str, Any]] = field(default_factory=list)
    """``{"key", "name", "type", "ids"}``, most memories first: ``key`` is the
    normalised name (what links memories), ``ids`` the memories, newest first."""
    by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    memories: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The memories read (id, text, dates, scope ids), by id."""
    scanned: int = 0
    capped: bool = False
    """More memories than :data:`ENTITY_SCAN` exist: only the newest were read."""


def _scope(ids: Mapping[str, str | None]) -> dict[str, Any]:
    return {k: ids.get(k) for k in SCOPE_KINDS}


class EntityIndex:
    """Entities per scope, cached a few seconds; see the module doc."""

    def __init__(self, scan: int = ENTITY_SCAN, ttl_s: float = _TTL_S) -> None:
        """An empty index reading at most ``scan`` memories of a scope."""
        self.scan = scan
        self.ttl_s = ttl_s
        self._texts: OrderedDict[str, list[tuple[str, str, str]]] = OrderedDict()
        self._built: OrderedDict[_Key, tuple[float, Entities]] = OrderedDict()
        self._refreshing: set[_Key] = set()
        self._tasks: set[asyncio.Task[Entities]] = set()
        self._lock = threading.Lock()

    def limits(self, limits: ServerLimits) -> ServerLimits:
        """``limits`` for the service this index reads through: one list of ``scan + 1``."""
        return replace(limits, max_top_k=max(limits.max_top_k, self.scan + 1))

    def forget(self) -> None:
        """Drop every cached scope (after a change): the next page reads again."""
        self._built.clear()

    async def of(
        self, service: MemoryService, caller: Caller, scope: Mapping[str, str | None]
    ) -> Entities:
        """The entities of ``scope`` as ``caller`` may see them.

        Raises what the service raises for the scope (403 for another
        tenant's, a missing capability).
        """
        ids = {k: scope.get(k) for k in SCOPE_KINDS}
        # The tenancy check, every time: the cache is shared by callers of one scope.
        await service.list_memories(caller, **_scope(ids), top_k=1)
        key: _Key = (tuple(sorted(caller.bound.items())), caller.access, tuple(sorted(ids.items())))
        cached = self._built.get(key)
        now = time.monotonic()
        if cached is not None:
            self._built.move_to_end(key)
            if now - cached[0] >= self.ttl_s and key not in self._refreshing:
                self._refreshing.add(key)
                task = asyncio.get_running_loop().create_task(
                    self._build(key, service, caller, ids)
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return cached[1]
        return await self._build(key, service, caller, ids)

    async def _build(
        self, key: _Key, service: MemoryService, caller: Caller, ids: dict[str, str | None]
    ) -> Entities:
        try:
            # One read of the newest memories (the service must allow top_k = scan + 1:
            # see :meth:`EntityIndex.limits`); hydrating rows is the cost, not the query.
            page = await service.list_memories(caller, **_scope(ids), top_k=self.scan + 1)
            rows: list[dict[str, Any]] = page["results"][: self.scan]
            capped = len(page["results"]) > self.scan
            built = await anyio.to_thread.run_sync(self._assemble, rows, capped)
        finally:
            self._refreshing.discard(key)
        self._built[key] = (time.monotonic(), built)
        while len(self._built) > _SCOPES:
            self._built.popitem(last=False)
        return built

    def _entities_of(self, row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        text = str(row.get("memory") or "")
        digest = str(row.get("hash") or text)
        found = self._texts.get(digest)
        if found is None:
            found = [(n, k, t or "THING") for n, k, t in entities_of(text)]
            self._texts[digest] = found
            while len(self._texts) > _TEXTS:
                self._texts.popitem(last=False)
        return found

    def _assemble(self, rows: list[dict[str, Any]], capped: bool) -> Entities:
        with self._lock:  # one build at a time touches the text cache
            return self._assemble_locked(rows, capped)

    def _assemble_locked(self, rows: list[dict[str, Any]], capped: bool) -> Entities:
        out = Entities(scanned=len(rows), capped=capped)
        for row in rows:  # newest first
            out.memories[row["id"]] = {
                k: row.get(k) for k in ("id", "memory", "created_at", "user_id", "agent_id")
            }
            for name, normalized, kind in self._entities_of(row):
                entity = out.by_key.get(normalized)
                if entity is None:
                    entity = {"key": normalized, "name": name, "type": kind, "ids": []}
                    out.by_key[normalized] = entity
                if row["id"] not in entity["ids"][-1:]:
                    entity["ids"].append(row["id"])
        out.entities = sorted(
            out.by_key.values(), key=lambda e: (-len(e["ids"]), e["name"].casefold())
        )
        return out
