"""``Memory`` and ``AsyncMemory``: the mem0-compatible faces.

Both are thin: each method builds a flow from :class:`engramdb.flows.Operations`
(where validation and the pipeline live, once) and drives it — ``Memory``
with blocking calls, ``AsyncMemory`` without blocking the event loop. Results
are plain dicts in mem0's shapes.

``Memory`` lives here, ``AsyncMemory`` in :mod:`engramdb.memory_async` (and is
imported from here too), and what the two share in :mod:`engramdb._face`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from engramdb._engine import (
    Complete,
    Effect,
    EmbedDocuments,
    EmbedQuery,
    Emit,
    Flow,
    StoreCall,
    run_sync,
)
from engramdb._face import BaseMemory, EventCallback, scope_ids, text_or_data
from engramdb.errors import EmbedderMismatchError
from engramdb.maintain import MaintenanceReport, maintain
from engramdb.memory_async import AsyncMemory
from engramdb.reembed import DEFAULT_BATCH_SIZE, ProgressCallback, ReembedReport, reembed_flow
from engramdb.retag import DEFAULT_BATCH_SIZE as RETAG_BATCH
from engramdb.retag import RetagReport, reindex_attributes_flow
from engramdb.stores.base import KEEP
from engramdb.stores.kernel.rebind import REEMBED_HINT
from engramdb.stores.routing import replica_reads

__all__ = ["AsyncMemory", "EventCallback", "Memory"]


class Memory(BaseMemory):
    """Long-term memory for LLM agents on one SQLite file and a local embedding model.

    >>> m = Memory()                                  # ~/.engramdb/engram.db
    >>> m.add("I am vegetarian", user_id="alice")
    >>> m.search("what does alice eat?", user_id="alice")
    """

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Memory:
        """Build from a mem0-shaped config dict (``vector_store``, ``embedder``, ``llm``, …)."""
        return cls(config=config)

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, StoreCall):
            return getattr(self.store, effect.method)(*effect.args, **effect.kwargs)
        if isinstance(effect, EmbedDocuments):
            return self.embedder.embed_documents(list(effect.texts))
        if isinstance(effect, EmbedQuery):
            return self.query_cache.embed(self.embedder, effect.text)
        if isinstance(effect, Complete):
            return self._need_llm().complete(
                effect.messages,
                schema=effect.schema,
                schema_name=effect.schema_name,
                max_tokens=effect.max_tokens,
            )
        if isinstance(effect, Emit):
            self._notify(effect.events)
            return None
        raise TypeError(f"unknown effect {effect!r}")

    def _run(self, flow: Flow[Any]) -> Any:
        return run_sync(flow, self._perform)

    def _read(self, flow: Flow[Any]) -> Any:
        # A call that only reads: a store with a read replica may serve it there.
        with replica_reads():
            return run_sync(flow, self._perform)

    def add(
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
        """Remember what matters from ``messages``.

        Returns ``{"results": [{"id", "memory", "event"}]}``: ``ADD`` for a new
        memory, ``NONE`` for a text the call can already see (its user and
        agent, across runs) — nothing is stored twice there; a repeat from a
        new run attaches that run to the existing memory. With an LLM
        configured and ``infer=True``, one LLM call extracts self-contained
        memories (see docs/extraction.md); otherwise every non-system message
        is stored verbatim. ``links={memory_id: kind}`` links what a verbatim
        add stores to memories the scope sees, with a kind of ``related``,
        ``updates``, ``contradicts`` or ``follows_up`` (``updates`` and
        ``contradicts`` make the linked memory *superseded*: see
        docs/retrieval.md).
        """
        result: dict[str, Any] = self._run(
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

    def search(
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
        """The memories of a scope most relevant to ``query``, best first.

        Scope ids may be given as arguments or inside ``filters``; at least one
        is required. Each result carries ``score`` in [0, 1]; ``threshold``
        drops results below it; ``explain=True`` adds the parts of the score
        (``score_details``); ``expand_links=True`` adds the memories linked to
        each hit right after it (with ``linked_from``), those the search itself
        may return (scope, filters, ``as_of``, expiry, ``include_superseded``).
        ``limit`` is an alias of ``top_k``. ``rerank=False`` skips a configured reranker for this
        call (``None``, the default: the configuration decides; ``True``
        without a reranker configured: the fused order, as mem0).
        ``show_expired=True`` includes memories past their expiration date.

        Each result carries ``superseded_by``: the ids of newer memories the
        scope sees that ``update`` or ``contradict`` it (``[]`` when none). A
        superseded memory ranks right below what superseded it, which is
        pulled into the results when the search did not find it;
        ``include_superseded=False`` drops superseded memories instead.
        ``as_of`` (a date, datetime or ISO-8601 text; a plain date means the
        end of that day) answers as of then: only memories stated by then and
        not yet expired then, superseded only by what had been stated by then.
        See docs/retrieval.md.
        """
        result: dict[str, Any] = self._read(
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

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """One memory by id, or ``None`` if there is none (or it was deleted)."""
        result: dict[str, Any] | None = self._read(self._ops.get(memory_id))
        return result

    def get_all(
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
        """Memories of a scope, newest first; page with ``offset``.

        ``show_expired=True`` includes memories past their expiration date.
        """
        result: dict[str, Any] = self._read(
            self._ops.get_all(
                filters=filters,
                top_k=limit if limit is not None else top_k,
                offset=offset,
                ids=scope_ids(user_id, agent_id, run_id),
                show_expired=show_expired,
            )
        )
        return result

    def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        expiration_date: object = KEEP,
        *,
        data: str | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Change a memory's text, metadata and/or expiry; history keeps the old.

        ``data`` is mem0's name for ``text``. ``expiration_date`` as in
        :meth:`add` (a plain date is shown through that day), ``None`` to
        clear it; like every change it is in the history and :meth:`restore`
        brings the old one back. Scope ids never change.
        """
        result: dict[str, Any] = self._run(
            self._ops.update(
                memory_id,
                text=text_or_data(text, data),
                metadata=metadata,
                reason=reason,
                expiration_date=expiration_date,
            )
        )
        return result

    def delete(self, memory_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Soft-delete a memory: hidden everywhere, restorable with :meth:`restore`."""
        result: dict[str, Any] = self._run(self._ops.delete(memory_id, reason=reason))
        return result

    def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Soft-delete every memory of one scope (at least one id required)."""
        result: dict[str, Any] = self._run(
            self._ops.delete_all(scope_ids(user_id, agent_id, run_id))
        )
        return result

    def restore(self, memory_id: str, *, version: int | None = None) -> dict[str, Any]:
        """Undo a delete, or an update: back to the previous version or ``version=N``."""
        result: dict[str, Any] = self._run(self._ops.restore(memory_id, version))
        return result

    def purge(
        self,
        memory_id: str | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Erase for good: one memory, or a scope, with history and source messages.

        Not undoable — meant for privacy requests. ``dry_run=True`` erases
        nothing and reports what would go (memory ids, messages, failure
        records, entities) and, through a view, what would only be detached
        or left alone.
        """
        ids = scope_ids(user_id, agent_id, run_id)
        flow = self._ops.plan_purge(memory_id, ids) if dry_run else self._ops.purge(memory_id, ids)
        result: dict[str, Any] = self._run(flow)
        return result

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """Every change of a memory, oldest first."""
        result: list[dict[str, Any]] = self._read(self._ops.history(memory_id))
        return result

    def timeline(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory and its linked memories (transitively), ordered by observation time.

        "What did I like before, what do I like now": a changed preference is a
        new memory linked to the old one, so both show, oldest first.
        """
        result: list[dict[str, Any]] = self._read(self._ops.timeline(memory_id))
        return result

    def check_embedder(self, purpose: str) -> None:
        """Refuse work that needs the store's vectors when this memory's embedder made none.

        Raises :class:`EmbedderMismatchError` (naming ``purpose``) when the store is
        bound to another model or dimension; a store with no vectors yet passes.
        """
        bound = self.store.bound_embedder()
        mine = (self.embedder.model, self.embedder.dim)
        if bound is not None and tuple(bound) != mine:
            raise EmbedderMismatchError(
                f"the store's vectors were made by {bound[0]!r} (dim {bound[1]}), not by "
                f"this memory's embedder {mine[0]!r} (dim {mine[1]}): {purpose}; "
                f"{REEMBED_HINT}"
            )

    def maintain(self, **options: Any) -> MaintenanceReport:
        """Run the upkeep jobs: expire, near-duplicate clusters, merges, derived supersessions.

        The options and the report are those of :func:`engramdb.maintain.maintain`
        (``user_id``/``agent_id``/``run_id``, ``expire``, ``duplicates``, ``merge``,
        ``dry_run``, ``cosine``, ``text_similarity``, ``progress``,
        ``supersessions``, ``apply``, ``threshold``, ``undo``); see
        docs/maintenance.md. Every change is its own history event, actor ``system``.
        """
        return maintain(self, **options)

    def reembed(
        self,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dry_run: bool = False,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport:
        """Move the store to this memory's embedder: re-embed every memory, then rebind.

        For a store bound to another model (which every search and add
        refuses with :class:`EmbedderMismatchError`): every stored memory,
        deleted ones too and of every user, agent and run, is embedded again
        with this memory's embedder, ``batch_size`` at a time, and then all
        vectors and the binding are swapped in one transaction. Until that
        commit the store stays fully on the old model; an error or an
        interruption before it changes nothing. Memories written meanwhile
        by a process on the old model are embedded again before the swap.
        ``dry_run=True`` reports what would be done and writes nothing; a
        store already bound to this embedder (or not bound yet) is left as
        it is. ``progress(phase, done, total)`` follows
        :data:`engramdb.reembed.PHASES`. The new vectors are held in memory
        until the swap (``4 * dim`` bytes a memory). See :mod:`engramdb.reembed`.
        """
        self._whole_store("reembed()")
        with self._reembedding(dry_run):
            report: ReembedReport = self._run(
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

    def reindex_attributes(
        self, *, batch_size: int = RETAG_BATCH, dry_run: bool = False
    ) -> RetagReport:
        """Read every stored memory's attribute terms again with the shipped classifier.

        Run it once after upgrading engramdb to a release with a retrained
        classifier (``engramdb.attributes.VERSION``): memories stored before keep
        the old classifier's reading until then. No embedding: each memory's
        stored vector is read again, ``batch_size`` at a time, and its attribute
        terms rewritten where they differ, one transaction a page (stopping
        half-way leaves every memory valid: run it again to finish). A memory
        written meanwhile keeps its own terms. ``dry_run=True`` counts and writes
        nothing. See :mod:`engramdb.retag`.
        """
        self._whole_store("reindex_attributes()")
        report: RetagReport = self._run(
            reindex_attributes_flow(self.config.retrieval, batch_size=batch_size, dry_run=dry_run)
        )
        return report

    def source_messages(self, memory_id: str) -> list[dict[str, Any]]:
        """The raw conversation messages a memory was made from, oldest first.

        engramdb keeps the messages of every ``add`` beside the memories made
        from them (mem0 has no such read). Each is ``{"id", "role", "content",
        "name", "observed_at"}``; a repeat's messages count too, since they said
        the same. A deleted memory keeps its messages until purged. A view
        (:meth:`scoped`) sees only the messages of its own scope, and a memory
        it cannot see raises :class:`MemoryNotFoundError`, like an unknown id.
        """
        result: list[dict[str, Any]] = self._read(self._ops.source_messages(memory_id))
        return result

    def scope_counts(self) -> dict[str, Any]:
        """How many memories this memory (a view: its scope) holds, counted by the store.

        ``{"live", "expired", "deleted", "users", "agents", "runs", "per_day"}``:
        the first three count memories neither deleted nor expired, expired
        ones and deleted ones; ``users``, ``agents`` and ``runs`` map each id to
        its live memories (a memory seen in several runs counts in each);
        ``per_day`` maps each UTC day (``YYYY-MM-DD`` of ``created_at``) to the
        memories added that day, deleted ones too. One aggregate query, not a
        scan in Python; mem0 has no equivalent.
        """
        result: dict[str, Any] = self._read(self._ops.scope_counts())
        return result

    def count(
        self,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        show_expired: bool = False,
        limit: int | None = None,
    ) -> int:
        """How many memories :meth:`get_all` would list with these arguments, counted by the store.

        ``limit``: stop counting there (the answer is then ``limit``: that many
        or more), so counting a huge scope reads at most ``limit`` rows. One
        query, no memory read into Python; mem0 has no equivalent.
        """
        result: int = self._read(
            self._ops.count(
                filters=filters,
                ids=scope_ids(user_id, agent_id, run_id),
                show_expired=show_expired,
                limit=limit,
            )
        )
        return result

    def entities(
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
        """The entities the memories of a scope mention, most mentioned first.

        The people, places, organisations, dates, numbers and things the store
        found in each memory's text when it wrote it (rules, no model): what
        links memories in search's entity channel. ``{"results": [...],
        "total": n}``: each result ``{"key", "name", "type", "memory_count"}``
        (``key`` the normalised name, ``memory_count`` the live memories of the
        scope that mention it) and, with ``newest=n`` (up to 20), ``"newest"``:
        the newest ``n`` of those memories, as :meth:`get_all` shows them;
        ``total`` counts every entity that matches. ``contains`` keeps the
        entities whose name contains it (any case), ``entity_type`` one of
        ``PERSON``, ``PLACE``, ``ORG``, ``DATE``, ``NUMBER``, ``THING``; page
        with ``top_k`` and ``offset``. A view (:meth:`scoped`) sees its own
        scope's only. One aggregate query; mem0 has no equivalent.
        """
        result: dict[str, Any] = self._read(
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

    def entity_memories(
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
        """The memories of a scope that mention one entity, newest stored first.

        ``entity`` is a ``key`` :meth:`entities` lists, or a name as written
        ("the Eiffel Tower" finds ``eiffel tower``). ``{"entity": {...} or
        None, "results": [...]}``: the entity as :meth:`entities` lists it
        (``None`` when no live memory of the scope mentions it) and one page
        of its memories, as :meth:`get_all` shows them.
        """
        result: dict[str, Any] = self._read(
            self._ops.entity_memories(
                entity,
                ids=scope_ids(user_id, agent_id, run_id),
                top_k=top_k,
                offset=offset,
                show_expired=show_expired,
            )
        )
        return result

    def failures(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        include_resolved: bool = False,
    ) -> list[dict[str, Any]]:
        """Extractions of a scope whose LLM reply was unusable (their messages were kept).

        Newest first, each ``{"id", "error", "created_at", "resolved_at",
        "messages", "reply"}``: ``messages`` counts the kept messages and
        ``reply`` is the last unusable reply, verbatim (``None`` when the LLM
        gave none: unreachable, timed out).
        """
        result: list[dict[str, Any]] = self._read(
            self._ops.failures(scope_ids(user_id, agent_id, run_id), include_resolved)
        )
        return result

    def retry_extraction(self, failure_id: int) -> dict[str, Any]:
        """Run extraction again on the messages of a failed add (see :meth:`failures`)."""
        result: dict[str, Any] = self._run(self._ops.retry_extraction(failure_id))
        return result

    def import_jsonl(self, fp: IO[str]) -> int:
        """Read an export back into this (empty) store, in one transaction.

        Vectors are reused when the export was made with the same embedder,
        re-computed otherwise. Any unreadable line aborts the whole import.
        """
        self._whole_store("import_jsonl()")
        _, rows = self._read_import(fp)
        self._run(self._ops._bind())
        self._embed_stale(rows)
        return self.store.import_rows(rows)

    def export(self) -> Iterator[dict[str, Any]]:
        """Yield the JSONL records of the store: a header, then one per memory."""
        return self.export_records()

    def export_jsonl(self, fp: IO[str]) -> int:
        """Write :meth:`export` to a text file; returns the number of memories."""
        return self._write_jsonl(fp)

    def reset(self) -> None:
        """Erase everything in the store: every scope, all history. Not undoable."""
        self._whole_store("reset()")
        self.store.reset()
        self._ops.unbind()

    def ping(self, timeout: float | None = None) -> None:
        """Check that the store answers (a readiness probe); returns None if it does.

        Raises :class:`~engramdb.errors.StoreUnavailableError` when the
        database cannot be reached within ``timeout`` seconds (the store's
        ``unavailable_timeout`` when None), :class:`~engramdb.errors.StoreError`
        for another failure.
        """
        self.store.ping(timeout)

    def close(self) -> None:
        """Release the database connections and the LLM's and embedder's HTTP connections.

        A view's close does nothing; an embedder passed in is the caller's to close.
        """
        if self._is_view:
            return
        self.store.close()
        if self.llm is not None:
            self.llm.close()
        self._close_embedder()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
