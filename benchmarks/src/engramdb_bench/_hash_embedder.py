"""BENCHMARK AND TESTS ONLY: an embedder that makes embedding free.

A unit vector drawn from a hash of the text: no model and no meaning, so what a
benchmark measures is the store and the server, not a model. A store filled with
it records the name ``bench-hash-<dim>`` and opens with it only.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

__all__ = ["HashEmbedder"]


class HashEmbedder:
    """BENCHMARK AND TESTS ONLY: a unit vector drawn from a hash of the text (no meaning)."""

    def __init__(self, dim: int = 32) -> None:
        """Vectors of ``dim`` floats (384 weighs as much as the local model's)."""
        self._dim = dim

    @property
    def model(self) -> str:
        """Not a real model's name: a store filled with it opens with it only."""
        return f"bench-hash-{self._dim}"

    @property
    def dim(self) -> int:
        """Length of every vector."""
        return self._dim

    def _one(self, text: str) -> npt.NDArray[np.float32]:
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
        vec = np.random.default_rng(seed).standard_normal(self._dim).astype(np.float32)
        out: npt.NDArray[np.float32] = vec / np.float32(np.linalg.norm(vec))
        return out

    def embed_documents(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """One vector per text."""
        if not texts:
            return np.empty((0, self._dim), dtype=np.float32)
        return np.stack([self._one(t) for t in texts])

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """The vector of the query text."""
        return self._one(text)
