"""``AsyncMemory``: the mem0-compatible face for asyncio.

Every method drives the same flow as :class:`engramdb.Memory` (from
:class:`engramdb.flows.Operations`) without blocking the event loop: LLM
calls are native async, the SQLite store and the local model run in worker
threads, a store with an async face (PostgreSQL) is awaited directly.
Imported from :mod:`engramdb.memory` too; shares :mod:`engramdb._face`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import IO, Any, Self

from engramdb._engine import (
    Complete,
    Effect,
    EmbedDocuments,
    EmbedQuery,
    Emit,
    Flow,
    StoreCall,
    run_async,
)
from engramdb._face import BaseMemory, scope_ids, text_or_data
from engramdb.core.access import Access
from engramdb.reembed import DEFAULT_BATCH_SIZE, ProgressCallback, ReembedReport, reembed_flow
from engramdb.retag import DEFAULT_BATCH_SIZE as RETAG_BATCH
from engramdb.retag import RetagReport, reindex_attributes_flow
from engramdb.stores.base import KEEP, AsyncStore
from engramdb.stores.routing import replica_reads

__all__ = ["AsyncMemory"]


class AsyncMemory(BaseMemory):
    """The same API as :class:`Memory`, for asyncio.

    LLM calls are native async; the SQLite store and the CPU-bound local model
    run in worker threads, so the event loop is never blocked. Many ``add()``
    calls can wait on the LLM at once.
    """

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> AsyncMemory:
        """Build from a mem0-shaped config dict."""
        return cls(config=config)

    def scoped(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        access: Access | None = None,
    ) -> Self:
        """See :meth:`Memory.scoped`; the view shares this object's async store too."""
        self._native_store()
        return super().scoped(user_id=user_id, agent_id=agent_id, run_id=run_id, access=access)

    def limited(self, access: Access) -> Self:
        """See :meth:`Memory.limited`; the view shares this object's async store too."""
        self._native_store()
        return super().limited(access)

    def acting_as(self, actor: str) -> Self:
        """See :meth:`Memory.acting_as`; the copy shares this object's async store too."""
        self._native_store()
        return super().acting_as(actor)

    def _native_store(self) -> AsyncStore | None:
        # A store with native async (PostgreSQL: ``async_store()``) is awaited;
        # others run in a worker thread.
        if not hasattr(self, "_astore"):
            make = getattr(self.store, "async_store", None)
            self._astore: AsyncStore | None = make() if make is not None else None
        return self._astore

    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, StoreCall):
            native = self._native_store()
            if native is not None:
                return await getattr(native, effect.method)(*effect.args, **effect.kwargs)
            method = getattr(self.store, effect.method)
            return await asyncio.to_thread(method, *effect.args, **effect.kwargs)
        if isinstance(effect, EmbedDocuments):
            return await asyncio.to_thread(self.embedder.embed_documents, list(effect.texts))
        if isinstance(effect, EmbedQuery):
            cached = self.query_cache.get(effect.text)
            if cached is not None:
                return cached
            vec = await asyncio.to_thread(self.embedder.embed_query, effect.text)
            return self.query_cache.put(effect.text, vec)
        if isinstance(effect, Complete):
            return await self._need_llm().acomplete(
                effect.messages,
                schema=effect.schema,
                schema_name=effect.schema_name,
                max_tokens=effect.max_tokens,
            )
        if isinstance(effect, Emit):
            self._notify(effect.events)
            return None
        raise TypeError(f"unknown effect {effect!r}")

    async def _run(self, flow: Flow[Any]) -> Any:
        return await run_async(flow, self._perform)

    async def _read(self, flow: Flow[Any]) -> Any:
        # A call that only reads: a store with a read replica may serve it there.
        with replica_reads():
            return await run_async(flow, self._perform)

    async def add(
        self,
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
        links: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """See :meth:`Memory.add`."""
        result: dict[str, Any] = await self._run(
            self._ops.add(
                messages,
                ids=scope_ids(user_id, agent_id, run_id),
                metadata=metadata,
                infer=infer,
                timestamp=timestamp,
                expiration_date=expiration_date,
                memory_type=memory_type,
                prompt=prompt,
                links=links,
            )
        )
        return result

    async def search(
        self,
        query: str,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int = 20,
        threshold: float | None = None,
        explain: bool = False,
        expand_links: bool = False,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        rerank: bool | None = None,
        show_expired: bool = False,
        as_of: object = None,
        include_superseded: bool = True,
    ) -> dict[str, Any]:
        """See :meth:`Memory.search`."""
        result: dict[str, Any] = await self._read(
            self._ops.search(
                query,
                filters=filters,
                top_k=limit if limit is not None else top_k,
                threshold=threshold,
                explain=explain,
                ids=scope_ids(user_id, agent_id, run_id),
                expand_links=expand_links,
                rerank=rerank,
                show_expired=show_expired,
                as_of=as_of,
                include_superseded=include_superseded,
            )
        )
        return result

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        """See :meth:`Memory.get`."""
        result: dict[str, Any] | None = await self._read(self._ops.get(memory_id))
        return result

    async def get_all(
        self,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int = 100,
        offset: int = 0,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        show_expired: bool = False,
    ) -> dict[str, Any]:
        """See :meth:`Memory.get_all`."""
        result: dict[str, Any] = await self._read(
            self._ops.get_all(
                filters=filters,
                top_k=limit if limit is not None else top_k,
                offset=offset,
                ids=scope_ids(user_id, agent_id, run_id),
                show_expired=show_expired,
            )
        )
        return result

    async def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        expiration_date: object = KEEP,
        *,
        data: str | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """See :meth:`Memory.update`."""
        result: dict[str, Any] = await self._run(
            self._ops.update(
                memory_id,
                text=text_or_data(text, data),
                metadata=metadata,
                reason=reason,
                expiration_date=expiration_date,
            )
        )
        return result

    async def delete(self, memory_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """See :meth:`Memory.delete`."""
        result: dict[str, Any] = await self._run(self._ops.delete(memory_id, reason=reason))
        return result

    async def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """See :meth:`Memory.delete_all`."""
        result: dict[str, Any] = await self._run(
            self._ops.delete_all(scope_ids(user_id, agent_id, run_id))
        )
        return result

    async def restore(self, memory_id: str, *, version: int | None = None) -> dict[str, Any]:
        """See :meth:`Memory.restore`."""
        result: dict[str, Any] = await self._run(self._ops.restore(memory_id, version))
        return result

    async def purge(
        self,
        memory_id: str | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """See :meth:`Memory.purge`."""
        ids = scope_ids(user_id, agent_id, run_id)
        flow = self._ops.plan_purge(memory_id, ids) if dry_run else self._ops.purge(memory_id, ids)
        result: dict[str, Any] = await self._run(flow)
        return result

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        """See :meth:`Memory.history`."""
        result: list[dict[str, Any]] = await self._read(self._ops.history(memory_id))
        return result

    async def timeline(self, memory_id: str) -> list[dict[str, Any]]:
        """See :meth:`Memory.timeline`."""
        result: list[dict[str, Any]] = await self._read(self._ops.timeline(memory_id))
        return result

    async def source_messages(self, memory_id: str) -> list[dict[str, Any]]:
        """See :meth:`Memory.source_messages`."""
        result: list[dict[str, Any]] = await self._read(self._ops.source_messages(memory_id))
        return result

    async def scope_counts(self) -> dict[str, Any]:
        """See :meth:`Memory.scope_counts`."""
        result: dict[str, Any] = await self._read(self._ops.scope_counts())
        return result

    async def count(
        self,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        show_expired: bool = False,
        limit: int | None = None,
    ) -> int:
        """See :meth:`Memory.count`."""
        result: int = await self._read(
            self._ops.count(
                filters=filters,
                ids=scope_ids(user_id, agent_id, run_id),
                show_expired=show_expired,
                limit=limit,
            )
        )
        return result

    async def entities(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        contains: str | None = None,
        entity_type: str | None = None,
        top_k: int = 50,
        offset: int = 0,
        newest: int = 0,
        show_expired: bool = False,
    ) -> dict[str, Any]:
        """See :meth:`Memory.entities`."""
        result: dict[str, Any] = await self._read(
            self._ops.entities(
                ids=scope_ids(user_id, agent_id, run_id),
                contains=contains,
                entity_type=entity_type,
                top_k=top_k,
                offset=offset,
                newest=newest,
                show_expired=show_expired,
            )
        )
        return result

    async def entity_memories(
        self,
        entity: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        top_k: int = 50,
        offset: int = 0,
        show_expired: bool = False,
    ) -> dict[str, Any]:
        """See :meth:`Memory.entity_memories`."""
        result: dict[str, Any] = await self._read(
            self._ops.entity_memories(
                entity,
                ids=scope_ids(user_id, agent_id, run_id),
                top_k=top_k,
                offset=offset,
                show_expired=show_expired,
            )
        )
        return result

    async def failures(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        include_resolved: bool = False,
    ) -> list[dict[str, Any]]:
        """See :meth:`Memory.failures`."""
        result: list[dict[str, Any]] = await self._read(
            self._ops.failures(scope_ids(user_id, agent_id, run_id), include_resolved)
        )
        return result

    async def retry_extraction(self, failure_id: int) -> dict[str, Any]:
        """See :meth:`Memory.retry_extraction`."""
        result: dict[str, Any] = await self._run(self._ops.retry_extraction(failure_id))
        return result

    async def reembed(
        self,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dry_run: bool = False,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport:
        """See :meth:`Memory.reembed`; embedding and the store calls leave the loop free."""
        self._whole_store("reembed()")
        with self._reembedding(dry_run):
            report: ReembedReport = await self._run(
                reembed_flow(
                    self.embedder.model,
                    self.embedder.dim,
                    self.config.retrieval,
                    batch_size=batch_size,
                    dry_run=dry_run,
                    progress=progress,
                )
            )
        return report

    async def reindex_attributes(
        self, *, batch_size: int = RETAG_BATCH, dry_run: bool = False
    ) -> RetagReport:
        """See :meth:`Memory.reindex_attributes`; the store calls leave the loop free."""
        self._whole_store("reindex_attributes()")
        report: RetagReport = await self._run(
            reindex_attributes_flow(self.config.retrieval, batch_size=batch_size, dry_run=dry_run)
        )
        return report

    async def export(self, batch: int = 256) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`Memory.export`; the store is read in a worker thread, ``batch`` at a time."""
        records = self.export_records()
        while True:
            chunk = await asyncio.to_thread(lambda: list(itertools.islice(records, batch)))
            if not chunk:
                return
            for record in chunk:
                yield record

    async def export_jsonl(self, fp: IO[str]) -> int:
        """See :meth:`Memory.export_jsonl` (the whole write runs in a worker thread)."""
        return await asyncio.to_thread(self._write_jsonl, fp)

    async def import_jsonl(self, fp: IO[str]) -> int:
        """See :meth:`Memory.import_jsonl`; reading, embedding and writing leave the loop free."""
        self._whole_store("import_jsonl()")
        _, rows = await asyncio.to_thread(self._read_import, fp)
        await self._run(self._ops._bind())
        await asyncio.to_thread(self._embed_stale, rows)
        native = self._native_store()
        if native is not None:
            count: int = await native.import_rows(rows)
            return count
        return await asyncio.to_thread(self.store.import_rows, rows)

    async def reset(self) -> None:
        """See :meth:`Memory.reset`."""
        self._whole_store("reset()")
        native = self._native_store()
        if native is not None:
            await native.reset()
        else:
            await asyncio.to_thread(self.store.reset)
        self._ops.unbind()

    async def ping(self, timeout: float | None = None) -> None:
        """See :meth:`Memory.ping`; a native async store is awaited, another runs in a thread."""
        native = self._native_store()
        if native is not None:
            await native.ping(timeout)
        else:
            await asyncio.to_thread(self.store.ping, timeout)

    async def close(self) -> None:
        """Release the database connections and the LLM's and embedder's HTTP connections.

        A view's close does nothing; an embedder passed in is the caller's to close.
        """
        if self._is_view:
            return
        native = getattr(self, "_astore", None)
        if native is not None:
            await native.close()
        self.store.close()
        if self.llm is not None:
            await self.llm.aclose()
        self._close_embedder()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
