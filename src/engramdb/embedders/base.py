"""The embedder port: turns texts into unit-length float32 vectors."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "Vector", "Vectors"]

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
