"""mem0 config dicts that name a part engramdb does not have, translated or refused.

A migrating user's ``Memory.from_config`` dict names mem0's parts: its
default vector store (Qdrant on a local path), FAISS or Chroma files, the
``huggingface`` embedder, a ``reranker`` block. engramdb has one embedded
store, one local model and an LLM-graded reranker, so:

- a vector store that mem0 keeps **in local files** (``qdrant``, ``faiss``,
  ``chroma`` with a ``path`` or nothing) becomes engramdb's embedded SQLite
  store, in ``<path>/<collection_name>.engramdb.sqlite`` when a path is
  given (else the default file); a store **on a server** (``host``, ``url``,
  a ``client``, a cloud key) is refused: a local file in its place would
  split the data of processes that shared that server. Use ``pgvector``;
- ``huggingface`` without a server becomes the local model (another model:
  the vectors are engramdb's own); with ``huggingface_base_url`` (a TEI
  server, OpenAI-compatible) it becomes the OpenAI-compatible embedder at
  that URL;
- ``reranker`` with ``llm_reranker`` becomes ``retrieval.rerank`` (the LLM
  grades the top candidates); another provider (Cohere, a cross-encoder) is
  not available and is dropped with a warning, so search runs unreranked.

Every substitution is logged at WARNING once per config, naming what was
replaced; nothing is translated silently. See docs/migrating-from-mem0.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engramdb.errors import ConfigError

__all__ = ["FILE_STORES", "translate"]

log = logging.getLogger("engramdb")

FILE_STORES = ("qdrant", "faiss", "chroma")
"""mem0 vector stores that can live in local files: engramdb's embedded store replaces them."""

_SERVER_KEYS = ("host", "port", "url", "client", "api_key", "cloud_url", "tenant", "database")
"""Options that put a mem0 store on a server (refused: see the module docstring)."""

_IGNORED_FILE_KEYS = (
    "embedding_model_dims",
    "on_disk",
    "distance_strategy",
    "normalize_L2",
    "collection_name",
    "path",
)


def _store(provider: str, config: dict[str, Any]) -> dict[str, Any]:
    remote = sorted(k for k in _SERVER_KEYS if config.get(k) not in (None, ""))
    if remote:
        raise ConfigError(
            f"engramdb has no {provider} backend, and this {provider} store is on a server "
            f"({', '.join(remote)}): a local file in its place would split the data of the "
            "processes sharing it. Use engramdb's PostgreSQL store (provider 'pgvector') for "
            "a shared store, or drop those options for the embedded SQLite store"
        )
    unknown = sorted(set(config) - set(_IGNORED_FILE_KEYS))
    if unknown:
        raise ConfigError(f"unknown {provider} vector_store option(s) {unknown}")
    out: dict[str, Any] = {}
    if config.get("path"):
        name = str(config.get("collection_name") or "mem0")
        out["path"] = str(Path(str(config["path"])).expanduser() / f"{name}.engramdb.sqlite")
    where = out.get("path", "the default file")
    log.warning(
        "vector_store %r: engramdb keeps memories in its embedded SQLite store (%s); "
        "what mem0 stored there is not read (docs/migrating-from-mem0.md)",
        provider,
        where,
    )
    return {"provider": "sqlite", "config": out}


def _embedder(config: dict[str, Any]) -> dict[str, Any]:
    base_url = config.get("huggingface_base_url")
    if base_url:
        out = {"base_url": base_url, "model": config.get("model") or "tei"}
        for key in ("api_key", "embedding_dims"):
            if config.get(key) is not None:
                out[key] = config[key]
        return {"provider": "openai", "config": out}
    if config.get("model"):
        log.warning(
            "embedder 'huggingface' (%s): engramdb embeds with its local model instead "
            "(multilingual-e5-small, offline; docs/embedders.md)",
            config["model"],
        )
    return {"provider": "local", "config": {}}


def _reranker(block: Any) -> dict[str, Any] | None:
    provider = block.get("provider") if isinstance(block, dict) else None
    if provider == "llm_reranker":
        if block.get("config"):
            log.warning(
                "reranker 'llm_reranker': its options are not used; engramdb's reranker "
                "grades with the configured llm (retrieval.rerank sets pool and weight)"
            )
        return {}
    log.warning(
        "reranker %r is not available in engramdb and is dropped: search returns the fused "
        "order (engramdb's reranker is LLM-graded: provider 'llm_reranker')",
        provider,
    )
    return None


def translate(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (a config dict) with mem0-only parts replaced by engramdb's, or ConfigError."""
    out = dict(raw)
    store = out.get("vector_store")
    if isinstance(store, dict) and str(store.get("provider", "")).lower() in FILE_STORES:
        out["vector_store"] = _store(
            str(store["provider"]).lower(), dict(store.get("config") or {})
        )
    embedder = out.get("embedder")
    if isinstance(embedder, dict) and str(embedder.get("provider", "")).lower() == "huggingface":
        out["embedder"] = _embedder(dict(embedder.get("config") or {}))
    if "reranker" in out:
        rerank = _reranker(out.pop("reranker"))
        if rerank is not None:
            retrieval = dict(out.get("retrieval") or {})
            retrieval.setdefault("rerank", rerank)
            out["retrieval"] = retrieval
    return out
