"""The guarded, asynchronous facade both servers (REST and MCP) call.

Each method checks the caller's scope (:mod:`engramdb.server.tenancy`) and
the server's limits, then makes exactly one call on the library's
:class:`~engramdb.AsyncMemory` — or on a :class:`~engramdb.Memory` in a worker
thread, whichever the server was given. Validation of values stays in the
library; this layer only adds what a shared, multi-tenant server needs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from engramdb.errors import EngramError, MemoryNotFoundError, ValidationError
from engramdb.memory import AsyncMemory, Memory
from engramdb.server import activity
from engramdb.server.tenancy import AdminRequiredError, Caller, record_in_scope, resolve_scope
from engramdb.stores.base import KEEP

__all__ = ["LimitExceededError", "MemoryService", "ServerLimits"]


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask of a server, beyond the library's own limits."""

    max_body_bytes: int = 1_048_576
    """Largest request body, checked before it is read (HTTP 413)."""
    max_top_k: int = 200
    """Most results one search or list may ask for."""
    max_messages: int = 100
    """Most messages in one add."""
    max_offset: int = 1_000_000
    """Deepest page a list may ask for."""


class LimitExceededError(EngramError):
    """A request asks for more than the server's limits allow (HTTP 422)."""


_OPERATION = {"get_all": "list", "scope_counts": "counts", "entity_memories": "entity"}
"""The activity log's name of a library call, where it differs."""
_BY_ID = frozenset(
    {"get", "update", "delete", "restore", "history", "timeline", "source_messages"}
    | {"retry_extraction"}
)
"""Library calls whose first argument is a memory (or failure) id."""


def _ids(user_id: str | None, agent_id: str | None, run_id: str | None) -> dict[str, str | None]:
    return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}


class MemoryService:
    """Scoped, limited access to one memory store for many callers."""

    def __init__(self, memory: AsyncMemory | Memory, limits: ServerLimits | None = None) -> None:
        """Serve ``memory``: an :class:`AsyncMemory`, or a :class:`Memory` run in threads."""
        self.memory = memory
        self.limits = limits or ServerLimits()

    @property
    def engine(self) -> str:
        """``"async"`` (AsyncMemory) or ``"sync"`` (Memory in worker threads)."""
        return "async" if isinstance(self.memory, AsyncMemory) else "sync"

    def _for(self, caller: Caller) -> AsyncMemory | Memory:
        """The memory as ``caller`` may use it: the whole store for an admin, else a view.

        The view (:meth:`Memory.scoped`) enforces the key's scope in the flows
        themselves — by-id calls, extraction context, dedup, links,
        consolidation, timeline — so this layer never reads the store directly.
        """
        if caller.unrestricted:
            return self.memory
        if not caller.bound:
            return self.memory.limited(access=caller.access)
        return self.memory.scoped(**caller.bound, access=caller.access)

    async def ready(self, timeout: float) -> None:
        """Check that the store answers within ``timeout`` seconds (``/readyz``); raises if not."""
        if isinstance(self.memory, AsyncMemory):
            await self.memory.ping(timeout)
        else:
            await anyio.to_thread.run_sync(self.memory.ping, timeout)

    async def _call(self, caller: Caller, name: str, *args: Any, **kwargs: Any) -> Any:
        by_id = name in _BY_ID or (name == "purge" and bool(args))
        activity.note(
            _OPERATION.get(name, name),
            scope=kwargs if not by_id else caller.bound,
            target=args[0] if by_id else None,
        )
        method = getattr(self._for(caller), name)
        if isinstance(self.memory, AsyncMemory):
            result = await method(*args, **kwargs)
        else:
            result = await anyio.to_thread.run_sync(functools.partial(method, *args, **kwargs))
        if by_id and isinstance(result, dict) and any(result.get(k) for k in activity.SCOPE_KINDS):
            activity.note(_OPERATION.get(name, name), scope=result)
        return result

    def _top_k(self, top_k: int | None, default: int) -> int:
        """The caller's top_k within the limit; left out, the library's default (capped)."""
        if top_k is None:
            return min(default, self.limits.max_top_k)
        if top_k > self.limits.max_top_k:
            raise LimitExceededError(
                f"top_k is {top_k}; this server returns at most {self.limits.max_top_k} "
                "results per request (page lists with offset)"
            )
        return top_k

    # -- memories of a scope ------------------------------------------------------------

    async def add(
        self,
        caller: Caller,
        messages: str | dict[str, Any] | list[dict[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        infer: bool = True,
        timestamp: object = None,
        expiration_date: object = None,
        memory_type: str | None = None,
        prompt: str | None = None,
        links: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """``Memory.add`` within the caller's scope."""
        if isinstance(messages, list) and len(messages) > self.limits.max_messages:
            raise LimitExceededError(
                f"{len(messages)} messages in one add; this server takes at most "
                f"{self.limits.max_messages}: split the conversation into several adds"
            )
        activity.note("add")  # named even when the scope is refused
        scope, _ = resolve_scope(caller, _ids(user_id, agent_id, run_id))
        result: dict[str, Any] = await self._call(
            caller,
            "add",
            messages,
            **scope,
            metadata=metadata,
            infer=infer,
            timestamp=timestamp,
            expiration_date=expiration_date,
            memory_type=memory_type,
            prompt=prompt,
            links=dict(links) if links is not None else None,
        )
        return result

    async def search(
        self,
        caller: Caller,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        threshold: float | None = None,
        explain: bool = False,
        expand_links: bool = False,
        show_expired: bool = False,
        rerank: bool | None = None,
        as_of: str | None = None,
        include_superseded: bool = True,
    ) -> dict[str, Any]:
        """``Memory.search`` within the caller's scope."""
        k = self._top_k(top_k, 20)
        activity.note("search")  # named even when the scope is refused
        scope, rest = resolve_scope(caller, _ids(user_id, agent_id, run_id), filters)
        result: dict[str, Any] = await self._call(
            caller,
            "search",
            query,
            **scope,
            filters=rest,
            top_k=k,
            threshold=threshold,
            explain=explain,
            expand_links=expand_links,
            show_expired=show_expired,
            rerank=rerank,
            as_of=as_of,
            include_superseded=include_superseded,
        )
        return result

    async def list_memories(
        self,
        caller: Caller,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        offset: int = 0,
        show_expired: bool = False,
    ) -> dict[str, Any]:
        """``Memory.get_all`` within the caller's scope (``top_k`` default 100, capped)."""
        k = self._top_k(top_k, 100)
        if offset > self.limits.max_offset:
            raise LimitExceededError(
                f"offset is {offset}; this server pages at most {self.limits.max_offset} deep "
                "(narrow the list with filters instead)"
            )
        activity.note("list")  # named even when the scope is refused
        scope, rest = resolve_scope(caller, _ids(user_id, agent_id, run_id), filters)
        result: dict[str, Any] = await self._call(
            caller,
            "get_all",
            **scope,
            filters=rest,
            top_k=k,
            offset=offset,
            show_expired=show_expired,
        )
        return result

    async def count(
        self,
        caller: Caller,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
        show_expired: bool = False,
        limit: int | None = None,
    ) -> int:
        """``Memory.count`` within the caller's scope: how many :meth:`list_memories` lists."""
        activity.note("count")  # named even when the scope is refused
        scope, rest = resolve_scope(caller, _ids(user_id, agent_id, run_id), filters)
        result: int = await self._call(
            caller, "count", **scope, filters=rest, show_expired=show_expired, limit=limit
        )
        return result

    async def entities(
        self,
        caller: Caller,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        contains: str | None = None,
        entity_type: str | None = None,
        top_k: int | None = None,
        offset: int = 0,
        newest: int = 0,
    ) -> dict[str, Any]:
        """``Memory.entities`` within the caller's scope (``top_k`` default 50, capped)."""
        k = self._top_k(top_k, 50)
        activity.note("entities")  # named even when the scope is refused
        scope, _ = resolve_scope(caller, _ids(user_id, agent_id, run_id))
        result: dict[str, Any] = await self._call(
            caller,
            "entities",
            **scope,
            contains=contains,
            entity_type=entity_type,
            top_k=k,
            offset=offset,
            newest=newest,
        )
        return result

    async def entity_memories(
        self,
        caller: Caller,
        entity: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        top_k: int | None = None,
        offset: int = 0,
    ) -> dict[str, Any]:
        """``Memory.entity_memories`` within the caller's scope (``top_k`` default 50, capped)."""
        k = self._top_k(top_k, 50)
        if offset > self.limits.max_offset:
            raise LimitExceededError(
                f"offset is {offset}; this server pages at most {self.limits.max_offset} deep"
            )
        activity.note("entity")  # named even when the scope is refused
        scope, _ = resolve_scope(caller, _ids(user_id, agent_id, run_id))
        result: dict[str, Any] = await self._call(
            caller, "entity_memories", entity, **scope, top_k=k, offset=offset
        )
        return result

    async def delete_all(
        self,
        caller: Caller,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """``Memory.delete_all``: the request must name the scope, which must be the caller's."""
        activity.note("delete_all")  # named even when the scope is refused
        scope, _ = resolve_scope(caller, _ids(user_id, agent_id, run_id), require_named=True)
        result: dict[str, Any] = await self._call(caller, "delete_all", **scope)
        return result

    async def purge(
        self,
        caller: Caller,
        memory_id: str | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """``Memory.purge`` of one owned memory, or of a named scope of the caller."""
        if memory_id is not None:
            if any(v is not None for v in (user_id, agent_id, run_id)):
                raise ValidationError("purge takes a memory_id or scope ids, not both")
            result: dict[str, Any] = await self._call(caller, "purge", memory_id, dry_run=dry_run)
            return result
        activity.note("purge")  # named even when the scope is refused
        scope, _ = resolve_scope(caller, _ids(user_id, agent_id, run_id), require_named=True)
        result = await self._call(caller, "purge", **scope, dry_run=dry_run)
        return result

    def export_lines(
        self,
        caller: Caller,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Iterator[str]:
        """JSONL lines of ``Memory.export``, keeping only the memories of the caller's scope.

        An admin without scope ids gets the whole store. Blocking: iterate it
        in a worker thread.
        """
        ids = _ids(user_id, agent_id, run_id)
        activity.note("export")
        if caller.admin and not any(ids.values()):
            scope: Mapping[str, str | None] = {}
        else:
            scope, _ = resolve_scope(caller, ids)
        activity.note("export", scope=scope)
        records = self._for(caller).export_records()
        header = next(records)
        yield json.dumps(header, ensure_ascii=False) + "\n"
        for record in records:
            if record_in_scope(record, scope):
                yield json.dumps(record, ensure_ascii=False) + "\n"

    # -- one memory, by id ----------------------------------------------------------------

    async def get(self, caller: Caller, memory_id: str) -> dict[str, Any]:
        """``Memory.get`` of an owned memory; ``MemoryNotFoundError`` instead of ``None``."""
        found: dict[str, Any] | None = await self._call(caller, "get", memory_id)
        if found is None:
            raise MemoryNotFoundError(memory_id)
        return found

    async def update(
        self,
        caller: Caller,
        memory_id: str,
        *,
        text: str | None = None,
        data: str | None = None,
        metadata: dict[str, Any] | None = None,
        reason: str | None = None,
        expiration_date: object = KEEP,
    ) -> dict[str, Any]:
        """``Memory.update`` of an owned memory (``data`` is mem0's name for ``text``)."""
        result: dict[str, Any] = await self._call(
            caller,
            "update",
            memory_id,
            text=text,
            metadata=metadata,
            data=data,
            reason=reason,
            expiration_date=expiration_date,
        )
        return result

    async def delete(
        self, caller: Caller, memory_id: str, *, reason: str | None = None
    ) -> dict[str, Any]:
        """``Memory.delete`` of an owned memory."""
        result: dict[str, Any] = await self._call(caller, "delete", memory_id, reason=reason)
        return result

    async def restore(
        self, caller: Caller, memory_id: str, *, version: int | None = None
    ) -> dict[str, Any]:
        """``Memory.restore`` of an owned memory."""
        result: dict[str, Any] = await self._call(caller, "restore", memory_id, version=version)
        return result

    async def history(self, caller: Caller, memory_id: str) -> list[dict[str, Any]]:
        """``Memory.history`` of an owned memory; ``MemoryNotFoundError`` instead of ``[]``.

        The library answers ``[]`` (as mem0) for an id that has no history or
        lies outside the caller's scope; every stored memory has at least its
        ``ADD``, so an empty history is an unknown id, reported like ``get``.
        """
        result: list[dict[str, Any]] = await self._call(caller, "history", memory_id)
        if not result:
            raise MemoryNotFoundError(memory_id)
        return result

    async def timeline(self, caller: Caller, memory_id: str) -> list[dict[str, Any]]:
        """``Memory.timeline`` of an owned memory: it and its linked memories, by time."""
        result: list[dict[str, Any]] = await self._call(caller, "timeline", memory_id)
        return result

    async def source_messages(self, caller: Caller, memory_id: str) -> list[dict[str, Any]]:
        """``Memory.source_messages`` of an owned memory: only messages of the caller's scope."""
        result: list[dict[str, Any]] = await self._call(caller, "source_messages", memory_id)
        return result

    # -- extraction failures ----------------------------------------------------------------

    async def failures(
        self,
        caller: Caller,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        include_resolved: bool = False,
    ) -> list[dict[str, Any]]:
        """``Memory.failures`` of a scope within the caller's (a bound key's by default)."""
        activity.note("failures")  # named even when the scope is refused
        scope, _ = resolve_scope(caller, _ids(user_id, agent_id, run_id))
        result: list[dict[str, Any]] = await self._call(
            caller, "failures", **scope, include_resolved=include_resolved
        )
        return result

    async def retry_extraction(self, caller: Caller, failure_id: int) -> dict[str, Any]:
        """``Memory.retry_extraction`` of a failure in the caller's scope.

        A failure of another scope is reported like an unknown id.
        """
        result: dict[str, Any] = await self._call(caller, "retry_extraction", failure_id)
        return result

    # -- what a scope holds -----------------------------------------------------------------

    async def catalog(self, caller: Caller) -> dict[str, Any]:
        """Counts of the memories the caller may see: per scope id, per day, by state.

        ``Memory.scope_counts`` of the caller's view (one aggregate query in the
        store): ``{"live", "expired", "deleted", "users", "agents", "runs",
        "per_day"}``; the three maps of ids count live memories, ``per_day``
        every memory added (``YYYY-MM-DD`` of ``created_at``, UTC). A bound key
        counts its own scope only; an admin, the whole store.
        """
        result: dict[str, Any] = await self._call(caller, "scope_counts")
        return result

    # -- the whole store ------------------------------------------------------------------

    async def reset(self, caller: Caller) -> None:
        """``Memory.reset``: erase every scope. Only for a caller holding an admin API key.

        Not even a keyless server's callers (every one an admin, on loopback)
        may: a reset cannot be undone, so it takes a key made for it
        (``engram keys create --admin``).

        Raises:
            AdminRequiredError: the caller is bound to a scope, or came without a key.
        """
        activity.note("reset")
        if not caller.admin or "purge" not in caller.access.can:
            raise AdminRequiredError(
                "a reset erases every scope of the store: it needs an admin API key with the "
                f"purge capability, and {caller.describe()} is bound to a scope or lacks it"
            )
        if caller.key_id is None:
            raise AdminRequiredError(
                "a reset erases every scope of the store and cannot be undone: it needs an "
                "admin API key (create one with `engram keys create --admin`), even on a "
                "server without keys"
            )
        if isinstance(self.memory, AsyncMemory):
            await self.memory.reset()
        else:
            await anyio.to_thread.run_sync(self.memory.reset)
