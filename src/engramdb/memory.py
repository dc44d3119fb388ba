"""``Memory``: the mem0-compatible synchronous face.

The face validates input, calls the core and the ports, and shapes results
as mem0 does (``{"results": [...]}`` lists of plain dicts). It holds no SQL
and no model code.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from engramdb.config import EngramConfig, parse_config
from engramdb.core.filters import Node, parse_filters, split_scope
from engramdb.core.text import content_hash
from engramdb.core.validate import (
    check_id,
    check_metadata,
    check_scope,
    check_text,
    check_threshold,
    check_top_k,
    parse_messages,
    parse_timestamp,
)
from engramdb.embedders import Embedder, make_embedder
from engramdb.errors import (
    ConfigError,
    ConflictError,
    ImportFormatError,
    MemoryNotFoundError,
    ScopeError,
    ValidationError,
)
from engramdb.nlp import extract_entities, index_terms
from engramdb.search import HybridRetriever
from engramdb.stores.base import EntityRef, HistoryEvent, MemoryRow, NewMemory, NewMessage, Scope
from engramdb.stores.sqlite import SQLiteStore

__all__ = ["EventCallback", "Memory"]

log = logging.getLogger("engramdb")

EventCallback = Callable[[dict[str, Any]], None]
"""Receives every history event as a dict (the same shape :meth:`Memory.history` returns)."""

EXPORT_FORMAT = 1
_warned_no_llm = False


def _item(row: MemoryRow) -> dict[str, Any]:
    """A stored memory in mem0's result shape (optional fields only when set)."""
    item: dict[str, Any] = {
        "id": row.id,
        "memory": row.text,
        "hash": row.hash,
        "metadata": row.metadata,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    for key in ("user_id", "agent_id", "run_id", "actor_id", "role", "attributed_to",
                "memory_type", "observed_at", "expires_at"):
        value = getattr(row, key)
        if value is not None:
            item[key] = value
    if row.run_ids:
        item["run_ids"] = [row.run_id, *row.run_ids] if row.run_id else list(row.run_ids)
    if row.agent_ids:
        item["agent_ids"] = [row.agent_id, *row.agent_ids] if row.agent_id else list(row.agent_ids)
    item["linked_memory_ids"] = list(row.linked_ids)
    return item


def _entities(text: str) -> list[EntityRef]:
    return [(e.name, e.normalized, e.type) for e in extract_entities(text)]


def _event_dict(event: HistoryEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "memory_id": event.memory_id,
        "event": event.event,
        "version": event.version,
        "old_memory": event.old_memory,
        "new_memory": event.new_memory,
        "old_metadata": event.old_metadata,
        "new_metadata": event.new_metadata,
        "actor": event.actor,
        "reason": event.reason,
        "created_at": event.created_at,
    }


class Memory:
    """Long-term memory for LLM agents on one SQLite file and a local embedding model.

    >>> m = Memory()                                  # ~/.engramdb/engram.db
    >>> m.add("I am vegetarian", user_id="alice")
    >>> m.search("what does alice eat?", user_id="alice")
    """

    def __init__(
        self,
        path: str | Path | None = None,
        config: EngramConfig | dict[str, Any] | None = None,
        *,
        on_event: EventCallback | Iterable[EventCallback] | None = None,
        embedder: Embedder | None = None,
        actor: str = "api",
    ) -> None:
        """Open (or create) a memory store.

        ``path`` is the SQLite file (overrides the config's); ``config`` is a
        mem0-shaped dict; ``on_event`` receives every history event as it is
        written; ``embedder`` replaces the configured one; ``actor`` is recorded
        in history as who made each change (``api``, ``cli``, …).
        """
        self.config = parse_config(config, path)
        if self.config.llm is not None:
            raise ConfigError(
                "LLM extraction is not available in this version of engramdb; remove the "
                "'llm' section (add() then stores messages verbatim)"
            )
        self.limits = self.config.limits
        self.actor = actor
        if on_event is None:
            self._subscribers: list[EventCallback] = []
        elif callable(on_event):
            self._subscribers = [on_event]
        else:
            self._subscribers = list(on_event)
        self.embedder: Embedder = embedder or make_embedder(
            self.config.embedder.provider, dict(self.config.embedder.config)
        )
        store_cfg = self.config.vector_store.config
        self.store = SQLiteStore(
            self.config.store_path(),
            busy_timeout_s=float(store_cfg.get("busy_timeout", 30.0)),
            max_cached_vectors=int(store_cfg.get("max_cached_vectors", 2_000_000)),
        )
        self._bound = False
        self._retriever = HybridRetriever(self.store, self.config.retrieval)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Memory:
        """Build from a mem0-shaped config dict (``vector_store``, ``embedder``, …)."""
        return cls(config=config)

    # -- plumbing ----------------------------------------------------------------------

    def _bind(self) -> None:
        # Deferred to the first call that embeds, so opening a store stays cheap
        # and a remote embedder is not contacted just to list memories.
        if not self._bound:
            self.store.bind_embedder(self.embedder.model, self.embedder.dim)
            self._bound = True

    def _embed(self, memories: list[NewMemory], skip: set[str]) -> None:
        todo = [m for m in memories if m.hash not in skip and m.embedding.size == 0]
        if todo:
            vectors = self.embedder.embed_documents([m.text for m in todo])
            for mem, vec in zip(todo, vectors, strict=True):
                mem.embedding = vec

    def _emit(self, events: Iterable[HistoryEvent | None]) -> None:
        for event in events:
            if event is None:
                continue
            payload = _event_dict(event)
            log.debug(
                "%s %s v%d by %s", event.event, event.memory_id, event.version, event.actor,
                extra={"engram_event": payload},
            )
            for callback in self._subscribers:
                try:
                    callback(payload)
                except Exception:
                    # The change is committed; a broken subscriber must not make the
                    # caller believe it failed.
                    log.exception("on_event subscriber %r raised", callback)

    def _scope_and_where(
        self,
        filters: dict[str, Any] | None,
        user_id: object,
        agent_id: object,
        run_id: object,
        what: str,
    ) -> tuple[Scope, Node | None]:
        from_filters, rest = split_scope(filters)
        ids: dict[str, object] = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
        for key, value in from_filters.items():
            if ids[key] is not None and ids[key] != value:
                raise ScopeError(
                    f"{key} is given twice with different values ({ids[key]!r} as an "
                    f"argument, {value!r} in filters)"
                )
            ids[key] = value
        scope = check_scope(ids["user_id"], ids["agent_id"], ids["run_id"], what=what)
        return scope, parse_filters(rest)

    def _get_row(self, memory_id: object, *, include_deleted: bool = False) -> MemoryRow:
        mid = self._check_memory_id(memory_id)
        row = self.store.get(mid, include_deleted=include_deleted)
        if row is None:
            raise MemoryNotFoundError(mid)
        return row

    @staticmethod
    def _check_memory_id(memory_id: object) -> str:
        mid = check_id("memory_id", memory_id)
        if mid is None:
            raise ValidationError("memory_id is required")
        return mid

    # -- the API ------------------------------------------------------------------------

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
    ) -> dict[str, Any]:
        """Remember what matters from ``messages``.

        Returns ``{"results": [{"id", "memory", "event"}]}``: ``ADD`` for a new
        memory, ``NONE`` for a text the owner (the user, else the agent, else the
        run) already has — nothing is stored twice; a repeat from a new run or
        agent attaches that session to the existing memory. Without an LLM,
        every non-system message is stored verbatim.
        """
        scope = check_scope(user_id, agent_id, run_id, what="add()")
        meta = check_metadata(metadata)
        msgs = parse_messages(messages, self.limits.max_text_chars, self.limits.max_messages)
        observed = parse_timestamp(timestamp)
        expires = parse_timestamp(expiration_date, "expiration_date")
        if memory_type is not None and memory_type != "procedural_memory":
            raise ValidationError(
                f"memory_type must be None or 'procedural_memory', got {memory_type!r}"
            )
        if memory_type == "procedural_memory":
            raise ConfigError(
                "procedural memories are written by an LLM; none is configured"
            )
        if prompt is not None and not isinstance(prompt, str):
            raise ValidationError("prompt must be a string")
        global _warned_no_llm
        if infer and not _warned_no_llm:
            _warned_no_llm = True
            log.info(
                "no LLM is configured, so add() stores messages verbatim instead of "
                "extracting facts; configure {'llm': {...}} to turn extraction on"
            )
        new: list[NewMemory] = []
        for i, msg in enumerate(msgs):
            text = msg.content.strip()
            if msg.role == "system" or not text:
                continue
            new.append(
                NewMemory(
                    id=str(uuid.uuid4()),
                    text=text,
                    hash=content_hash(text),
                    embedding=np.empty(0, dtype=np.float32),
                    terms=index_terms(text),
                    entities=_entities(text),
                    actor_id=msg.name,
                    role=msg.role,
                    metadata=meta,
                    observed_at=msg.timestamp or observed,
                    expires_at=expires,
                    source_messages=[i],
                )
            )
        self._bind()
        raw = [NewMessage(m.role, m.content, m.name, m.timestamp or observed) for m in msgs]
        # Embedding is most of the cost of an add: skip texts the owner already has.
        known = self.store.existing_hashes(scope.owner, [m.hash for m in new])
        try:
            self._embed(new, skip=known)
            outcomes = self.store.add(new, raw, scope, self.actor)
        except ConflictError:
            self._embed(new, skip=set())
            outcomes = self.store.add(new, raw, scope, self.actor)
        self._emit(o.history for o in outcomes)
        return {"results": [{"id": o.id, "memory": o.memory, "event": o.event} for o in outcomes]}

    def search(
        self,
        query: str,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int = 20,
        threshold: float | None = None,
        explain: bool = False,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """The memories of a scope most relevant to ``query``, best first.

        Scope ids may be given as arguments or inside ``filters``; at least one
        is required. Each result carries ``score`` in [0, 1]; ``threshold``
        drops results below it; ``explain=True`` adds the parts of the score.
        ``limit`` is accepted as an alias of ``top_k`` (older mem0 releases).
        """
        query = check_text(query, self.limits.max_text_chars, "query")
        k = check_top_k(limit if limit is not None else top_k)
        thr = check_threshold(threshold)
        scope, where = self._scope_and_where(filters, user_id, agent_id, run_id, "search()")
        self._bind()
        vec = self.embedder.embed_query(query)
        hits = self._retriever.search(scope, where, query, vec, k)
        results = []
        for hit in hits:
            if thr is not None and hit.score < thr:
                continue
            item = _item(hit.row)
            item["score"] = hit.score
            if explain:
                item["explain"] = hit.explain
            results.append(item)
        return {"results": results}

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """One memory by id, or ``None`` if there is none (or it was deleted)."""
        row = self.store.get(self._check_memory_id(memory_id))
        return None if row is None else _item(row)

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
    ) -> dict[str, Any]:
        """Memories of a scope, newest first; page with ``offset``."""
        k = check_top_k(limit if limit is not None else top_k)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError(f"offset must be a non-negative integer, got {offset!r}")
        scope, where = self._scope_and_where(filters, user_id, agent_id, run_id, "get_all()")
        rows = self.store.list(scope, where, limit=k, offset=offset)
        return {"results": [_item(r) for r in rows]}

    def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        data: str | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Change a memory's text and/or replace its metadata; history keeps the old.

        ``data`` is mem0's name for ``text``. Scope ids never change.
        """
        if data is not None:
            if text is not None and text != data:
                raise ValidationError("give the new text as text= or data=, not both")
            text = data
        if text is None and metadata is None:
            raise ValidationError("update() needs text and/or metadata")
        row = self._get_row(memory_id)
        new_meta = row.metadata if metadata is None else check_metadata(metadata)
        new_text = row.text if text is None else check_text(text, self.limits.max_text_chars).strip()
        embedding = None
        if new_text != row.text:
            self._bind()
            embedding = self.embedder.embed_documents([new_text])[0]
        new_row, event = self.store.update(
            row.id,
            text=new_text,
            hash=content_hash(new_text),
            embedding=embedding,
            terms=index_terms(new_text),
            entities=_entities(new_text),
            metadata=new_meta,
            actor=self.actor,
            reason=reason,
        )
        self._emit([event])
        return {"message": "Memory updated successfully!", **_item(new_row)}

    def delete(self, memory_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Soft-delete a memory: hidden everywhere, restorable with :meth:`restore`."""
        _, event = self.store.delete(self._check_memory_id(memory_id), actor=self.actor, reason=reason)
        self._emit([event])
        return {"message": "Memory deleted successfully!", "id": event.memory_id}

    def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Soft-delete every memory of one scope (at least one id required)."""
        scope = check_scope(user_id, agent_id, run_id, what="delete_all()")
        events = self.store.delete_scope(scope, actor=self.actor)
        self._emit(events)
        return {"message": "Memories deleted successfully!", "deleted": len(events)}

    def restore(self, memory_id: str, *, version: int | None = None) -> dict[str, Any]:
        """Undo a delete, or an update: back to the previous version or ``version=N``."""
        mid = self._check_memory_id(memory_id)
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ValidationError(f"version must be an integer, got {type(version).__name__}")
        plan = self.store.plan_restore(mid, version)
        current = self._get_row(mid, include_deleted=True)
        embedding = None
        if plan.text != current.text:
            self._bind()
            embedding = self.embedder.embed_documents([plan.text])[0]
        row, event = self.store.apply_restore(
            plan,
            hash=content_hash(plan.text),
            embedding=embedding,
            terms=index_terms(plan.text),
            entities=_entities(plan.text),
            actor=self.actor,
        )
        self._emit([event])
        return _item(row)

    def purge(
        self,
        memory_id: str | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Erase for good: one memory, or every memory of a scope, with its history
        and the raw messages it came from. Not undoable — for privacy requests.
        """
        if memory_id is not None:
            if user_id or agent_id or run_id:
                raise ValidationError("purge() takes a memory_id or scope ids, not both")
            count = self.store.purge(memory_id=self._check_memory_id(memory_id))
        else:
            scope = check_scope(user_id, agent_id, run_id, what="purge()")
            count = self.store.purge(scope=scope)
        log.info("purged %d memories", count)
        return {"message": "Memories purged.", "purged": count}

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """Every change of a memory, oldest first."""
        mid = self._check_memory_id(memory_id)
        events = self.store.history(mid)
        if not events and self.store.get(mid, include_deleted=True) is None:
            raise MemoryNotFoundError(mid)
        return [_event_dict(e) for e in events]

    def reset(self) -> None:
        """Erase everything in the store: every scope, all history. Not undoable."""
        self.store.reset()
        self._bound = False

    def close(self) -> None:
        """Release the database connections."""
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- export / import ------------------------------------------------------------------

    def export(self) -> Iterator[dict[str, Any]]:
        """Yield the JSONL records of the whole store: a header, then one per memory."""
        bound = self.store.bound_embedder()
        yield {
            "engramdb_export": EXPORT_FORMAT,
            "embedder": bound[0] if bound else None,
            "dim": bound[1] if bound else None,
        }
        for rec in self.store.export_rows():
            row: MemoryRow = rec["row"]
            item = _item(row)
            item.update(
                {
                    "version": row.version,
                    "deleted_at": row.deleted_at,
                    "run_ids": row.run_ids,
                    "agent_ids": row.agent_ids,
                    "embedding": base64.b64encode(rec["embedding"].tobytes()).decode("ascii"),
                    "history": [_event_dict(e) for e in rec["history"]],
                }
            )
            yield item

    def export_jsonl(self, fp: IO[str]) -> int:
        """Write :meth:`export` to a text file; returns the number of memories."""
        count = -1
        for record in self.export():
            fp.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
        return count

    def import_jsonl(self, fp: IO[str]) -> int:
        """Read an export back into this (empty) store, in one transaction.

        Vectors are reused when the export was made with the same embedder,
        re-computed otherwise. Any unreadable line aborts the whole import.
        """
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
        self._bind()
        same_model = header.get("embedder") == self.embedder.model
        rows: list[dict[str, Any]] = []
        for n, line in lines[1:]:
            rows.append(self._import_record(n, line, same_model))
        stale = [r for r in rows if r["embedding"] is None]
        if stale:
            vecs = self.embedder.embed_documents([r["memory"] for r in stale])
            for r, v in zip(stale, vecs, strict=True):
                r["embedding"] = v
        return self.store.import_rows(rows)

    def _import_record(self, n: int, line: str, same_model: bool) -> dict[str, Any]:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"line {n} is not JSON: {exc}") from None
        if not isinstance(rec, dict):
            raise ImportFormatError(f"line {n} must be a JSON object")
        try:
            check_id("id", rec.get("id"))
            text = check_text(rec.get("memory"), self.limits.max_text_chars)
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
        rec["entities"] = _entities(text)
        vector = None
        if same_model and isinstance(rec.get("embedding"), str):
            try:
                raw = base64.b64decode(rec["embedding"], validate=True)
                vector = np.frombuffer(raw, dtype="<f4")
            except ValueError as exc:
                raise ImportFormatError(f"line {n}: embedding is not base64: {exc}") from None
            if vector.shape != (self.embedder.dim,):
                raise ImportFormatError(
                    f"line {n}: embedding has {vector.size} dimensions, expected "
                    f"{self.embedder.dim}"
                )
        rec["embedding"] = vector
        return rec
