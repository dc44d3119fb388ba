"""Retrieval: turns a query into scored memories. The seam hybrid retrieval replaces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from engramdb.core.filters import Node
from engramdb.stores.base import MemoryRow, Scope, Store

__all__ = ["Hit", "Retriever", "SemanticRetriever"]


@dataclass
class Hit:
    """One search result: the memory, its final score in [0, 1], and how it was made."""

    row: MemoryRow
    score: float
    explain: dict[str, Any] = field(default_factory=dict)


class Retriever(Protocol):
    """Finds and scores the memories of a scope for a query."""

    def search(
        self,
        scope: Scope,
        where: Node | None,
        query: str,
        query_vector: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[Hit]:
        """The best ``k`` hits, best first."""
        ...


class SemanticRetriever:
    """Vector similarity alone; the score is the cosine similarity clipped to [0, 1]."""

    def __init__(self, store: Store) -> None:
        """Search ``store``'s vectors."""
        self.store = store

    def search(
        self,
        scope: Scope,
        where: Node | None,
        query: str,
        query_vector: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[Hit]:
        """The best ``k`` hits, best first."""
        hits = []
        for rank, (row, cosine) in enumerate(self.store.vector_search(scope, where, query_vector, k)):
            score = min(1.0, max(0.0, cosine))
            hits.append(
                Hit(row, score, {"semantic": cosine, "rank": {"semantic": rank + 1}, "fusion": score})
            )
        return hits
