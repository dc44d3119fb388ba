"""LLM wrappers the benchmarks share: a disk cache of replies, and per-part totals.

:class:`CachedLLM` answers a repeated call (same model, messages, schema and
options) from disk, so a rerun of a benchmark repays nothing;
:class:`CountedLLM` is a view of one shared cache that keeps its own totals
(one per conversation, or per add).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engramdb.config import EngramConfig
from engramdb.errors import ConfigError
from engramdb.llms import LLM, Completion, Usage, llm_from_env, make_llm
from engramdb.llms.base import ClosingMixin

__all__ = ["CachedLLM", "CountedLLM", "build_llm", "cache_key", "load_config_file"]


def cache_key(model: str, payload: Mapping[str, Any]) -> str:
    """SHA-256 of ``model`` and ``payload`` as canonical JSON: the name of one cache entry."""
    text = json.dumps({"model": model, **payload}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CachedLLM(ClosingMixin):
    """An :class:`~engramdb.llms.LLM` that answers repeated calls from a disk cache.

    The key is the SHA-256 of the model name, the messages, the schema and
    the per-call options; the entry holds the reply text, usage, model,
    latency and mode, so a cached call reports what the real one cost. Failed
    calls are not cached. Entries are written atomically (a temporary file
    renamed), so parallel writers and interrupted runs leave no torn file.

    ``stats()`` counts every call (``calls``), those answered from the cache
    (``cache_hits``) and those sent to the wrapped LLM (``cache_misses``);
    tokens and latency are summed from the entries, hits included.
    """

    def __init__(self, llm: LLM, directory: str | Path) -> None:
        """Wrap ``llm``; entries live under ``directory``."""
        self.inner = llm
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._totals: dict[str, float] = dict.fromkeys(
            (
                "calls",
                "cache_hits",
                "cache_misses",
                "errors",
                "prompt_tokens",
                "completion_tokens",
                "latency_s",
            ),
            0,
        )

    @property
    def model(self) -> str:
        """The wrapped LLM's model name."""
        return self.inner.model

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def _lookup(self, key: str) -> Completion | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return Completion(
                text=str(data["text"]),
                usage=Usage(int(data["prompt_tokens"]), int(data["completion_tokens"])),
                model=str(data["model"]),
                latency_s=float(data["latency_s"]),
                mode=data["mode"],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _store(self, key: str, completion: Completion) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "text": completion.text,
            "prompt_tokens": completion.usage.prompt_tokens,
            "completion_tokens": completion.usage.completion_tokens,
            "model": completion.model,
            "latency_s": completion.latency_s,
            "mode": completion.mode,
        }
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fp:
            json.dump(data, fp, ensure_ascii=False)
        os.replace(tmp, path)

    def _count(self, completion: Completion | None, *, hit: bool) -> None:
        with self._lock:
            self._totals["calls"] += 1
            if completion is None:
                self._totals["errors"] += 1
                self._totals["cache_misses"] += 1
                return
            self._totals["cache_hits" if hit else "cache_misses"] += 1
            self._totals["prompt_tokens"] += completion.usage.prompt_tokens
            self._totals["completion_tokens"] += completion.usage.completion_tokens
            self._totals["latency_s"] += completion.latency_s

    def stats(self) -> dict[str, int | float]:
        """Running totals (see the class docstring)."""
        with self._lock:
            out: dict[str, int | float] = {
                k: (round(v, 3) if k == "latency_s" else int(v)) for k, v in self._totals.items()
            }
        out["total_tokens"] = int(out["prompt_tokens"]) + int(out["completion_tokens"])
        return out

    def key_of(
        self,
        messages: list[dict[str, Any]],
        schema: dict[str, Any] | None,
        schema_name: str,
        temperature: float | None,
        max_tokens: int | None,
    ) -> str:
        """The cache key of one call."""
        return cache_key(
            self.inner.model,
            {
                "messages": messages,
                "schema": schema,
                "schema_name": schema_name if schema is not None else None,
                "temperature": temperature,
                "max_tokens": max_tokens,
            },
        )

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """The cached reply, else the wrapped LLM's (then cached)."""
        return self.complete_ex(
            messages,
            schema=schema,
            schema_name=schema_name,
            temperature=temperature,
            max_tokens=max_tokens,
        )[0]

    def complete_ex(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> tuple[Completion, bool]:
        """Like :meth:`complete`; also says whether the reply came from the cache."""
        key = self.key_of(messages, schema, schema_name, temperature, max_tokens)
        found = self._lookup(key)
        if found is not None:
            self._count(found, hit=True)
            return found, True
        try:
            completion = self.inner.complete(
                messages,
                schema=schema,
                schema_name=schema_name,
                temperature=temperature,
                max_tokens=max_tokens,
            )
        except Exception:
            self._count(None, hit=False)
            raise
        self._store(key, completion)
        self._count(completion, hit=False)
        return completion, False

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Like :meth:`complete`, awaiting the wrapped LLM on a miss."""
        key = self.key_of(messages, schema, schema_name, temperature, max_tokens)
        found = await asyncio.to_thread(self._lookup, key)
        if found is not None:
            self._count(found, hit=True)
            return found
        try:
            completion = await self.inner.acomplete(
                messages,
                schema=schema,
                schema_name=schema_name,
                temperature=temperature,
                max_tokens=max_tokens,
            )
        except Exception:
            self._count(None, hit=False)
            raise
        await asyncio.to_thread(self._store, key, completion)
        self._count(completion, hit=False)
        return completion

    def close(self) -> None:
        """Close the wrapped LLM."""
        self.inner.close()

    async def aclose(self) -> None:
        """Close the wrapped LLM."""
        await self.inner.aclose()


class CountedLLM:
    """A view of a shared :class:`CachedLLM` with its own totals (one per conversation)."""

    def __init__(self, llm: CachedLLM) -> None:
        self._llm = llm
        self._lock = threading.Lock()
        self._calls = 0
        self._hits = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._latency_s = 0.0

    @property
    def model(self) -> str:
        """The shared LLM's model name."""
        return self._llm.model

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Answer through the shared cache, counting the call here."""
        completion, hit = self._llm.complete_ex(
            messages,
            schema=schema,
            schema_name=schema_name,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        with self._lock:
            self._calls += 1
            self._hits += int(hit)
            self._prompt_tokens += completion.usage.prompt_tokens
            self._completion_tokens += completion.usage.completion_tokens
            self._latency_s += completion.latency_s
        return completion

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Like :meth:`complete`, in a worker thread."""
        return await asyncio.to_thread(
            self.complete,
            messages,
            schema=schema,
            schema_name=schema_name,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    def close(self) -> None:
        """The shared LLM is closed by its owner."""

    async def aclose(self) -> None:
        """The shared LLM is closed by its owner."""

    def figures(self) -> dict[str, Any]:
        """Totals of this view: calls, cache hits, tokens and LLM seconds."""
        with self._lock:
            return {
                "llm_calls": self._calls,
                "cache_hits": self._hits,
                "prompt_tokens": self._prompt_tokens,
                "completion_tokens": self._completion_tokens,
                "llm_latency_s": round(self._latency_s, 3),
            }


def build_llm(config: EngramConfig, needs: str) -> LLM:
    """The config's LLM, else ``$ENGRAM_LLM``'s; ``needs`` says why, in the error if neither."""
    if config.llm is not None:
        return make_llm(config.llm.provider, dict(config.llm.config))
    llm = llm_from_env()
    if llm is None:
        raise ConfigError(
            f"{needs}: give --config FILE with an 'llm' section, or set "
            "ENGRAM_LLM=provider:model (e.g. openai:gpt-4.1-mini, ollama:llama3.2)"
        )
    return llm


def load_config_file(path: str | Path | None) -> dict[str, Any] | None:
    """Read a mem0-shaped JSON config file (``None`` passes through)."""
    if path is None:
        return None
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the config file {path} must hold a JSON object")
    return data
