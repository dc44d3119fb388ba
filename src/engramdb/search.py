"""Retrieval: candidates from every signal, one fusion score.

The store gathers candidates (the union of the vector top-n, the BM25 top-n
and the memories linked to the query's entities) with every signal's raw
value; this module turns them into one score in [0, 1]. Fusion lives here,
once, never in a backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from engramdb.core.filters import Node
from engramdb.nlp import extract_entities, query_terms
from engramdb.stores.base import Candidate, MemoryRow, Scope, Store

__all__ = [
    "DENSE_ONLY",
    "HYBRID_RRF",
    "HYBRID_WEIGHTED",
    "KEYWORD_ONLY",
    "FusionConfig",
    "Hit",
    "HybridRetriever",
    "Retriever",
    "fuse",
]


class FusionConfig(BaseModel):
    """How the signals are fused. Immutable; the presets below are instances.

    ``rrf``: reciprocal-rank fusion, ``sum_i w_i / (rrf_k + rank_i)``
    divided by its largest possible value, so 1.0 means first in every list.
    ``weighted``: ``w_sem * sem + w_bm25 * bm + w_entity * ent`` over
    normalised parts: ``sem`` maps cosine linearly from ``cosine_floor`` (0)
    to 1 (1), ``bm = bm25 / (bm25 + bm25_half)``, ``ent`` sums
    ``1 / log2(1 + degree)`` over matched entities, capped at 1, so an
    entity linked to very many memories adds little.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["rrf", "weighted"] = "rrf"
    semantic_weight: float = Field(default=1.0, ge=0)
    bm25_weight: float = Field(default=1.0, ge=0)
    entity_weight: float = Field(default=0.5, ge=0)
    rrf_k: float = Field(default=60.0, gt=0)
    cosine_floor: float = Field(default=0.7, ge=-1, lt=1)
    bm25_half: float = Field(default=5.0, gt=0)
    pool: int = Field(default=50, ge=1)
    """Candidates taken from each ranked signal (at least ``top_k``)."""


HYBRID_RRF = FusionConfig()
HYBRID_WEIGHTED = FusionConfig(
    method="weighted", semantic_weight=0.6, bm25_weight=0.3, entity_weight=0.1
)
DENSE_ONLY = FusionConfig(bm25_weight=0.0, entity_weight=0.0)
KEYWORD_ONLY = FusionConfig(semantic_weight=0.0, entity_weight=0.0)


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


def _entity_strength(entities: list[tuple[str, int]]) -> float:
    return min(1.0, sum(1.0 / math.log2(1 + max(degree, 1)) for _, degree in entities))


def _ranks(values: dict[int, float]) -> dict[int, int]:
    """1-based ranks by descending value (ties by position); zeros get no rank."""
    order = sorted((i for i, v in values.items() if v > 0), key=lambda i: (-values[i], i))
    return {i: r + 1 for r, i in enumerate(order)}


def fuse(candidates: list[Candidate], config: FusionConfig) -> list[Hit]:
    """Score and sort candidates; every hit's ``explain`` holds each part."""
    sem = {i: c.semantic for i, c in enumerate(candidates)}
    # Cosines can be <= 0; shift so every candidate has a semantic rank.
    sem_ranks = _ranks({i: v + 2.0 for i, v in sem.items()})
    bm_ranks = _ranks({i: c.bm25 for i, c in enumerate(candidates)})
    ent = {i: _entity_strength(c.entities) for i, c in enumerate(candidates)}
    ent_ranks = _ranks(ent)
    w_s, w_b, w_e = config.semantic_weight, config.bm25_weight, config.entity_weight
    total = (w_s + w_b + w_e) or 1.0
    hits = []
    for i, cand in enumerate(candidates):
        sem_part = min(
            1.0, max(0.0, (cand.semantic - config.cosine_floor) / (1.0 - config.cosine_floor))
        )
        bm_part = cand.bm25 / (cand.bm25 + config.bm25_half)
        if config.method == "rrf":
            best = 1.0 / (config.rrf_k + 1)
            raw = sum(
                w / (config.rrf_k + ranks[i])
                for w, ranks in ((w_s, sem_ranks), (w_b, bm_ranks), (w_e, ent_ranks))
                if i in ranks
            )
            score = raw / (total * best)
        else:
            score = (w_s * sem_part + w_b * bm_part + w_e * ent[i]) / total
        score = min(1.0, max(0.0, score))
        hits.append(
            Hit(
                cand.row,
                score,
                {
                    "semantic": cand.semantic,
                    "bm25": cand.bm25,
                    "entity": ent[i],
                    "entities": [name for name, _ in cand.entities],
                    "fusion": score,
                    "method": config.method,
                    "rank": {
                        "semantic": cand.semantic_rank,
                        "bm25": cand.bm25_rank,
                        "entity": ent_ranks.get(i),
                    },
                },
            )
        )
    hits.sort(key=lambda h: (-h.score, -h.explain["semantic"], h.row.id))
    return hits


class HybridRetriever:
    """Semantic + BM25 + entity candidates, fused by one :class:`FusionConfig`."""

    def __init__(self, store: Store, config: FusionConfig = HYBRID_RRF) -> None:
        """Search ``store`` with the given fusion settings."""
        self.store = store
        self.config = config

    def search(
        self,
        scope: Scope,
        where: Node | None,
        query: str,
        query_vector: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
    ) -> list[Hit]:
        """The best ``k`` hits, best first."""
        terms = query_terms(query) if self.config.bm25_weight > 0 else []
        entities = (
            sorted({e.normalized for e in extract_entities(query)})
            if self.config.entity_weight > 0
            else []
        )
        pool = max(self.config.pool, k)
        candidates = self.store.candidates(scope, where, query_vector, terms, entities, pool)
        return fuse(candidates, self.config)[:k]
