"""The embedded store: one SQLite file in WAL mode.

Concurrency model: every thread gets its own connection; every write opens
with ``BEGIN IMMEDIATE`` so the write lock is taken up front and waits out
other writers through ``busy_timeout`` (a deferred transaction that later
upgrades its lock fails with "database is locked" instead of waiting).
Several processes may share the file the same way.

Keyword terms are ranked over postings kept in the file (``_keywords``).
Vectors live in the file (float32 BLOBs) and are searched through in-memory
:class:`~engramdb.core.vectors.VectorIndex` caches, one per primary scope id;
a scope of 20,000 memories or more through a
:class:`~engramdb.core.vectors.CompactVectorIndex` over the int8 codes and
projections the file keeps (``_vectors``).
A store-wide change counter (``meta.seq``, bumped by every write and copied
into each changed row) lets a cache catch up with writes from any process by
reading only the rows changed since it last looked; a purge or reset bumps
``meta.epoch`` and drops every cache.

The store is one class assembled from its parts: ``_base`` (connections,
transactions, schema, binding, rows), ``_writes``, ``_erasure``, ``_reads``
(by id, lists, counts, messages, export), ``_search`` (the search and its
caches), ``_neighbours``, ``_entity_hop`` and ``_entities`` (a scope's
entities); the logic both backends share lives in :mod:`engramdb.stores.kernel`.
"""

from __future__ import annotations

from engramdb.stores.sqlite._entities import _Entities
from engramdb.stores.sqlite._entity_hop import _EntityHop
from engramdb.stores.sqlite._erasure import _Erasure
from engramdb.stores.sqlite._neighbours import _Neighbours
from engramdb.stores.sqlite._reads import _Reads
from engramdb.stores.sqlite._search import _Search
from engramdb.stores.sqlite._writes import _Writes

__all__ = ["SQLiteStore"]


class SQLiteStore(_Writes, _Erasure, _Neighbours, _EntityHop, _Entities, _Reads, _Search):
    """A :class:`~engramdb.stores.base.Store` on one SQLite file.

    Args:
        path: the database file (created, with its folder, if missing).
        busy_timeout_s: how long a writer waits for another's lock.
        max_cached_vectors: bound on the vectors of the per-scope caches.
        cache_bytes: bound on the bytes of the per-scope caches (vector and
            keyword indexes, row memos) over every scope, least recently used
            out first; default 256 MiB (docs/vector-index.md).
        keyword_index: where BM25 ranks: ``"database"`` (default) over the
            postings in the file (schema version 5, ``_keywords``), or
            ``"process"``, a per-process index of each scope's terms (the
            ranking before; kept to compare).
    """
