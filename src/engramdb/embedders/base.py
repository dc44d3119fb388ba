"""The embedder port: turns texts into unit-length float32 vectors."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "QueryCache", "Vector", "Vectors"]

Vector = npt.NDArray[np.float32]
"""One embedding, shape ``(dim,)``, L2-normalised."""

Vectors = npt.NDArray[np.float32]
"""A batch of embeddings, shape ``(n, dim)``, each row L2-normalised."""


@runtime_checkable
class Embedder(Protocol):
    """What the core needs from an embedding model.

    ``model`` and ``dim`` are written into the store on first use; a store
    refuses an embedder whose ``model`` or ``dim`` differ, because vectors
    from two models are not comparable.
    """

    @property
    def model(self) -> str:
        """A stable identifier of the model (provider and name)."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    def embed_documents(self, texts: list[str]) -> Vectors:
        """Embed texts to be stored (``passage`` side for asymmetric models)."""
        ...

    def embed_query(self, text: str) -> Vector:
        """Embed a search query (``query`` side for asymmetric models)."""
        ...


class QueryCache:
    """The embeddings of recent search queries, least recently used out first.

    An embedder is deterministic, so a query asked again (an agent asking
    the same thing each turn, a UI refreshing a search) needs no second
    model call. Thread-safe; the cached vectors are read-only, so no caller
    can change what the next one gets. ``size=0`` turns it off.
    """

    def __init__(self, size: int = 1024) -> None:
        """Hold at most ``size`` query vectors."""
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, embedder: Embedder, text: str) -> Vector:
        """``embedder.embed_query(text)``, from the cache when it holds it."""
        found = self.get(text)
        if found is not None:
            return found
        return self.put(text, embedder.embed_query(text))

    def get(self, text: str) -> Vector | None:
        """The cached vector of ``text`` (now the most recently used), or None."""
        with self._lock:
            vec = self._entries.get(text)
            if vec is None:
                self.misses += 1
                return None
            self._entries.move_to_end(text)
            self.hits += 1
            return vec

    def put(self, text: str, vec: Vector) -> Vector:
        """Keep ``vec`` as the vector of ``text``; returns it, read-only."""
        vec = np.array(vec, dtype=np.float32)
        vec.setflags(write=False)
        if self.size <= 0:
            return vec
        with self._lock:
            self._entries[text] = vec
            self._entries.move_to_end(text)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return vec

    def __len__(self) -> int:
        return len(self._entries)
