"""The in-process caches of a store: one per primary scope id, dropped on a new epoch.

Each process keeps, per primary scope id (the ``user_id`` of a query if it
has one, else its ``agent_id``, else its ``run_id``), the indexes a search
ranks with: a :class:`~engramdb.core.bm25.BM25Index` always, and a
:class:`~engramdb.core.vectors.VectorIndex` where the backend searches
vectors in process (SQLite; PostgreSQL searches them in the database).

What is alike in every backend lives here: the cache record and how rows
read by a catch-up are applied to it (:class:`ScopeCache`), and the table of
caches (:class:`ScopeCaches`): its lock, the epoch it has seen (purge and
reset bump the stored epoch; a newer one drops every cache, since erased
rows cannot be read as changes) and eviction by bytes, least recently used
first.

The bound is on bytes, across every scope a process has searched
(``cache_bytes`` in the store config, :data:`DEFAULT_CACHE_BYTES`): a server
for many tenants holds the caches of the tenants it served last, not of
every tenant since it started. The bytes are an estimate each cache gives of
itself (:meth:`ScopeCache.nbytes`): the numpy arrays it holds exactly, and
the Python dicts, strings and arrays by their counts times a measured size.
Eviction never changes results: a scope's next search rebuilds its cache
from the store, as after a restart.

What differs stays in the backend, on purpose: the catch-up query (SQLite
reads rows by ``meta.seq``, PostgreSQL by transaction id against the
snapshot the cache last read at) and how concurrent catch-ups of one scope
meet (SQLite serialises them on the cache's own lock; PostgreSQL holds no
lock across the query and applies its rows only if the cache has not moved).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from engramdb.core.bm25 import BM25Index

__all__ = ["DEFAULT_CACHE_BYTES", "ScopeCache", "ScopeCaches"]

DEFAULT_CACHE_BYTES = 256 << 20
"""Default bound on the bytes of a store's per-scope caches, per process (256 MiB)."""

Key = tuple[str, str]
"""A primary scope id: ``(kind, value)``, e.g. ``("user_id", "alice")``."""


class ScopeCache:
    """The keyword index of one primary scope id; backends add how far it has read."""

    __slots__ = ("bm25",)

    OVERHEAD = 2_048
    """Bytes of the objects every cache has whatever it holds (its record, index objects, locks)."""

    def __init__(self) -> None:
        self.bm25 = BM25Index()

    def size(self) -> int:
        """Documents held: what counts against the store's bound on documents."""
        return len(self.bm25)

    def nbytes(self) -> int:
        """Bytes this cache holds (an estimate): what counts against ``cache_bytes``."""
        return self.OVERHEAD + self.bm25.nbytes

    def apply(self, dead: Sequence[int], live: Sequence[int], terms: Sequence[list[str]]) -> None:
        """Apply a catch-up: ``dead`` rows (deleted) go, ``live`` rows (with ``terms``) come."""
        if dead:
            self.bm25.remove(dead)
        if live:
            self.bm25.add(live, terms)


C = TypeVar("C", bound=ScopeCache)


class ScopeCaches(Generic[C]):
    """The caches of one store object, by primary scope id, with the epoch they belong to.

    ``lock`` guards the table and the epoch only, never I/O: hold it around
    every call here. Two bounds, on the totals over every cache: ``max_bytes``
    on :meth:`ScopeCache.nbytes` and ``max_size`` on :meth:`ScopeCache.size`
    (documents). Each cache's figures are those last given to :meth:`put` or
    :meth:`account`; :meth:`evict` drops the least recently used caches until
    both totals are within their bounds. The most recently used cache always
    stays, so one scope larger than the bound is still served from memory.
    """

    def __init__(
        self,
        max_size: int,
        *,
        epoch: str,
        lock: AbstractContextManager[Any],
        max_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if max_bytes < 0 or max_size < 0:
            raise ValueError(f"cache bounds must be >= 0; got {max_bytes} bytes, {max_size} docs")
        self.max_size = max_size
        self.max_bytes = max_bytes
        self.epoch = epoch
        self.lock = lock
        self.entries: OrderedDict[Key, C] = OrderedDict()
        self._figures: dict[Key, tuple[int, int]] = {}
        self.total_bytes = 0
        """The accounted bytes of every cache held (what ``max_bytes`` bounds)."""
        self.total_size = 0
        """The accounted documents of every cache held (what ``max_size`` bounds)."""
        self.evictions = 0
        """Caches dropped for the bounds so far (a figure for tests and benchmarks)."""

    def see(self, epoch: str) -> str:
        """Note an epoch read from the store; a newer one drops every cache. Returns the newest."""
        if int(epoch) > int(self.epoch):
            self.clear()
            self.epoch = epoch
        return self.epoch

    def get(self, key: Key) -> C | None:
        """The cache of ``key``, if there is one."""
        return self.entries.get(key)

    def put(self, key: Key, cache: C) -> C:
        """Keep ``cache`` for ``key`` (replacing one in place, else as the newest), accounted."""
        self.entries[key] = cache
        self._set(key, cache.nbytes(), cache.size())
        return cache

    def account(self, key: Key, cache: C, nbytes: int, size: int) -> None:
        """Record the figures of ``cache`` (measured outside the lock) if it is ``key``'s."""
        if self.entries.get(key) is cache:
            self._set(key, nbytes, size)

    def _set(self, key: Key, nbytes: int, size: int) -> None:
        old_bytes, old_size = self._figures.get(key, (0, 0))
        self._figures[key] = (nbytes, size)
        self.total_bytes += nbytes - old_bytes
        self.total_size += size - old_size

    def touch(self, key: Key) -> None:
        """Mark ``key``'s cache as just used."""
        self.entries.move_to_end(key)

    def over(self) -> bool:
        """Whether the caches hold more than a bound allows."""
        return self.total_bytes > self.max_bytes or self.total_size > self.max_size

    def evict(self) -> None:
        """Drop the least recently used caches while the totals exceed a bound; one stays."""
        while self.over() and len(self.entries) > 1:
            key, _ = self.entries.popitem(last=False)
            nbytes, size = self._figures.pop(key, (0, 0))
            self.total_bytes -= nbytes
            self.total_size -= size
            self.evictions += 1

    def clear(self) -> None:
        """Drop every cache."""
        self.entries.clear()
        self._figures.clear()
        self.total_bytes = self.total_size = 0
