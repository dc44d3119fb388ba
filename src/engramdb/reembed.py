"""Moving a store to another embedding model: :meth:`Memory.reembed <engramdb.Memory.reembed>`.

A store is bound to the embedder that wrote its vectors (``model``, ``dim``)
and refuses any other (:class:`~engramdb.errors.EmbedderMismatchError`),
because vectors of two models are not comparable. Re-embedding moves it, in
place, to the memory's configured embedder: every stored memory (deleted
ones too, so that a restore keeps working; every user, agent and run) gets a
vector from the new model, and the store is bound to the new model.
``engram reembed`` is its command-line face.

How it stays all-or-nothing:

1. The store's *change mark* is read (:meth:`Store.change_mark`: SQLite's
   ``meta.seq``, PostgreSQL's snapshot), then every memory is read in pages
   (:meth:`Store.embedding_sources`) and embedded with the new model, the
   vectors kept in memory. Nothing is written meanwhile: the store stays on
   the old model, searchable and writable as before. An error or an
   interruption here leaves it exactly as it was.
2. One call, one transaction (:meth:`Store.rebind_embedder`) swaps them in:
   under the store's write lock (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's
   exclusive binding lock, which every vector write shares), it checks that
   the store is still bound to the old model and that no memory was written
   since the mark; then it replaces every vector, binds the new model and
   drops or rebuilds what is derived from the vectors (SQLite's epoch, which
   drops the vector caches of every process; PostgreSQL's HNSW index and,
   when the dimension changes, the column's type).
3. A memory written meanwhile (by a process still on the old model: its
   vector is of the old model, or of an older text) makes the swap write
   nothing and hand it back instead, with a new mark; it is embedded again
   and the swap retried, at most :data:`MAX_ROUNDS` times (then
   :class:`~engramdb.errors.ConflictError`, the store still on the old
   model). After the swap, a process still configured with the old model is
   refused on its next write or search, as after any change of binding.

The cost: the new vectors of the whole store are held in memory until the
swap, ``4 * dim`` bytes each (1.5 GB for a million memories at 384
dimensions), plus the texts of one page.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from engramdb._engine import EmbedDocuments, Flow, store_call
from engramdb.errors import ConflictError, EmbedderError, ValidationError
from engramdb.search import FusionConfig, document_text
from engramdb.stores.base import EmbeddingSource, Store

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_ROUNDS",
    "PHASES",
    "ProgressCallback",
    "ReembedReport",
    "ReembedStatus",
    "reembed_flow",
]

DEFAULT_BATCH_SIZE = 256
"""Memories read and embedded per batch."""

MAX_ROUNDS = 10
"""Attempts of the swap; each one after the first re-embeds what was written meanwhile."""

PHASES = ("embed", "catch_up", "write")
"""The phases :data:`ProgressCallback` is called with: embedding every memory,
embedding again what was written meanwhile, and the swap transaction."""

ProgressCallback = Callable[[str, int, int | None], None]
"""``progress(phase, done, total)`` as each phase of :data:`PHASES` advances.

``embed`` counts memories (``total`` is the count when it started; memories
added meanwhile may take ``done`` past it, and ``total`` with it);
``catch_up`` counts the memories of the current round; ``write`` is ``0`` of
``1`` when the swap starts and ``1`` of ``1`` when it has committed.
"""

ReembedStatus = Literal["reembedded", "would_reembed", "already_bound", "unbound"]


@dataclass
class ReembedReport:
    """What :meth:`Memory.reembed <engramdb.Memory.reembed>` did; :meth:`to_dict` for JSON."""

    status: ReembedStatus
    """``reembedded``; ``would_reembed`` (dry run, nothing written); ``already_bound``
    (the store is bound to the configured embedder: nothing to do); ``unbound``
    (no vectors stored yet: the configured embedder is bound on first use)."""
    count: int
    """Memories re-embedded (deleted ones included), or that would be."""
    old_model: str | None
    old_dim: int | None
    new_model: str
    new_dim: int
    dry_run: bool = False
    rounds: int = 0
    """Swap attempts (1 when nothing was written during the re-embedding)."""
    caught_up: int = 0
    """Memories written during the re-embedding, embedded again before the swap."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-ready data."""
        return asdict(self)


def _silent(phase: str, done: int, total: int | None) -> None:
    """The progress callback when none is given."""


def reembed_flow(
    model: str,
    dim: int,
    fusion: FusionConfig,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
) -> Flow[ReembedReport]:
    """The re-embedding of the whole store with the embedder ``(model, dim)``, as a flow.

    Driven by ``Memory.reembed`` (blocking) and ``AsyncMemory.reembed``; see the
    module docstring for the design. ``fusion`` says what is embedded for a
    memory (its speaker before the text, as when it was added).
    """
    started = time.monotonic()
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValidationError(f"batch_size must be a positive integer, got {batch_size!r}")
    tick = progress or _silent
    new = (model, dim)
    bound = yield from store_call(Store.bound_embedder)
    total = yield from store_call(Store.count)
    report = ReembedReport(
        status="reembedded",
        count=total,
        old_model=bound[0] if bound else None,
        old_dim=bound[1] if bound else None,
        new_model=model,
        new_dim=dim,
        dry_run=dry_run,
    )
    if bound is None or tuple(bound) == new:
        report.status = "unbound" if bound is None else "already_bound"
        report.count = 0
    elif dry_run:
        report.status = "would_reembed"
    else:
        old = (bound[0], bound[1])
        mark = yield from store_call(Store.change_mark)
        vectors: dict[int, np.ndarray[Any, np.dtype[np.float32]]] = {}
        after = 0
        tick("embed", 0, total)
        while True:
            page = yield from store_call(Store.embedding_sources, after, batch_size)
            if not page:
                break
            yield from _embed(page, vectors, dim, fusion)
            after = page[-1].key
            tick("embed", len(vectors), max(total, len(vectors)))
        for round_ in range(1, MAX_ROUNDS + 1):
            tick("write", 0, 1)
            outcome = yield from store_call(Store.rebind_embedder, old, new, vectors, mark)
            report.rounds = round_
            if outcome.done:
                tick("write", 1, 1)
                report.count = outcome.written
                break
            # Written since the mark, by a process still on the old model: again.
            stale = outcome.stale
            report.caught_up += len(stale)
            tick("catch_up", 0, len(stale))
            for start in range(0, len(stale), batch_size):
                yield from _embed(stale[start : start + batch_size], vectors, dim, fusion)
                tick("catch_up", min(start + batch_size, len(stale)), len(stale))
            mark = outcome.mark
        else:
            raise ConflictError(
                f"memories kept being written during the re-embedding ({MAX_ROUNDS} attempts "
                f"to swap the vectors); nothing was changed, the store is still on "
                f"{old[0]!r}. Run it again when fewer writers are busy, or stop them"
            )
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _embed(
    sources: Sequence[EmbeddingSource],
    vectors: dict[int, np.ndarray[Any, np.dtype[np.float32]]],
    dim: int,
    fusion: FusionConfig,
) -> Flow[None]:
    """Embed ``sources`` as their memories were embedded when added; into ``vectors``."""
    got = yield EmbedDocuments([document_text(s.text, s.actor_id, fusion) for s in sources])
    batch = np.asarray(got, dtype=np.float32)
    if batch.shape != (len(sources), dim):
        raise EmbedderError(
            f"the embedder returned vectors of shape {batch.shape} for {len(sources)} texts, "
            f"expected ({len(sources)}, {dim}); nothing was changed"
        )
    for source, vec in zip(sources, batch, strict=True):
        vectors[source.key] = vec
