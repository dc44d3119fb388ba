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
rows cannot be read as changes) and eviction by size, oldest use first.

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

__all__ = ["ScopeCache", "ScopeCaches"]

Key = tuple[str, str]
"""A primary scope id: ``(kind, value)``, e.g. ``("user_id", "alice")``."""


class ScopeCache:
    """The keyword index of one primary scope id; backends add how far it has read."""

    __slots__ = ("bm25",)

    def __init__(self) -> None:
        self.bm25 = BM25Index()

    def size(self) -> int:
        """What counts against the store's cache bound."""
        return len(self.bm25)

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
    every call here. ``max_size`` bounds the total :meth:`ScopeCache.size`;
    the least recently used caches go first, the last one always stays.
    """

    def __init__(self, max_size: int, *, epoch: str, lock: AbstractContextManager[Any]) -> None:
        self.max_size = max_size
        self.epoch = epoch
        self.lock = lock
        self.entries: OrderedDict[Key, C] = OrderedDict()

    def see(self, epoch: str) -> str:
        """Note an epoch read from the store; a newer one drops every cache. Returns the newest."""
        if int(epoch) > int(self.epoch):
            self.entries.clear()
            self.epoch = epoch
        return self.epoch

    def get(self, key: Key) -> C | None:
        """The cache of ``key``, if there is one."""
        return self.entries.get(key)

    def put(self, key: Key, cache: C) -> C:
        """Keep ``cache`` for ``key`` (replacing one in place, else as the newest)."""
        self.entries[key] = cache
        return cache

    def touch(self, key: Key) -> None:
        """Mark ``key``'s cache as just used."""
        self.entries.move_to_end(key)

    def evict(self) -> None:
        """Drop the least recently used caches while they hold more than ``max_size``."""
        total = sum(c.size() for c in self.entries.values())
        while total > self.max_size and len(self.entries) > 1:
            _, cache = self.entries.popitem(last=False)
            total -= cache.size()

    def clear(self) -> None:
        """Drop every cache."""
        self.entries.clear()
