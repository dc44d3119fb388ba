"""Configuration: mem0's dict shape where it overlaps, validated once, immutable after."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from engramdb._mem0_config import translate
from engramdb.errors import ConfigError
from engramdb.search import FusionConfig
from engramdb.stores import check_store_config

__all__ = [
    "EngramConfig",
    "ExtractionConfig",
    "Limits",
    "ProviderConfig",
    "default_home",
    "parse_config",
]


def default_home() -> Path:
    """``$ENGRAM_HOME`` or ``~/.engramdb``: where the default database lives."""
    return Path(os.environ.get("ENGRAM_HOME") or Path.home() / ".engramdb").expanduser()


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderConfig(_Frozen):
    """``{"provider": name, "config": {...}}`` as in mem0."""

    provider: str
    config: dict[str, Any] = Field(default_factory=dict)


class Limits(_Frozen):
    """Input limits; a call over them raises instead of storing anything."""

    max_text_chars: int = Field(default=20_000, gt=0)
    """Longest memory text or message content, in characters."""
    max_messages: int = Field(default=500, gt=0)
    """Most messages in one ``add()`` call."""


RELATED_CAP = 60
"""The most related memories ``related_per_message`` alone asks for in one add."""


class ExtractionConfig(_Frozen):
    """How ``add(infer=True)`` turns messages into memories when an LLM is configured."""

    mode: Literal["additive", "consolidate"] = "additive"
    """``additive`` (one LLM call, only adds and links) or ``consolidate`` (the
    legacy two-call ADD/UPDATE/DELETE/NONE mode; every change reversible)."""
    custom_instructions: str | None = None
    """Extra guidance for extraction (``add(prompt=...)`` overrides it per call)."""
    includes: str | None = None
    """What to focus on (e.g. "food preferences, travel plans")."""
    excludes: str | None = None
    """What never to store (e.g. "health data")."""
    vision: bool = False
    """Describe images in messages with the (vision-capable) LLM instead of dropping them."""
    recent_messages: int = Field(default=20, ge=0, le=200)
    """Last stored messages of the scope shown as context."""
    recent_memories: int = Field(default=20, ge=0, le=200)
    """Newest memories of the scope shown as context."""
    related_memories: int = Field(default=15, ge=0, le=200)
    """Memories most related to the new messages (hybrid search) shown as context:
    at least this many, more for a long add (``related_per_message``)."""
    related_per_message: int = Field(default=4, ge=0, le=20)
    """An add of ``n`` new messages shows ``max(related_memories,
    min(related_per_message * n, 60))`` related memories: ten messages touch
    more topics than one, and a change can only be linked to a memory the
    request shows (docs/extraction.md). 0 keeps ``related_memories`` fixed."""

    def related_for(self, messages: int) -> int:
        """How many related memories an add of ``messages`` new messages shows."""
        scaled = min(self.related_per_message * messages, RELATED_CAP)
        return max(self.related_memories, scaled)

    prompt: Literal["auto", "standard", "compact"] = "auto"
    """The additive prompt: ``standard`` (full rules, for hosted models),
    ``compact`` (short rules and a worked example as a chat turn: what small
    local models follow), or ``auto``: ``compact`` for the local servers
    (``llamacpp``, ``ollama``, ``lmstudio``), else ``standard``."""
    time_hints: bool = True
    """Show each relative time in the messages with its date ("yesterday
    [2023-05-07]"), so the model only has to copy it (English phrases)."""
    max_reply_tokens: int | None = Field(default=2048, ge=16)
    """Cap on each extraction reply: a model that loops stops here, and the
    reply fails as cut JSON with the messages kept. Reasoning models count
    their thinking too: raise it for them. ``None``: the LLM's own setting."""


class EngramConfig(_Frozen):
    """The whole configuration of a :class:`~engramdb.Memory`."""

    vector_store: ProviderConfig = ProviderConfig(provider="sqlite")
    embedder: ProviderConfig = ProviderConfig(provider="local")
    llm: ProviderConfig | None = None
    limits: Limits = Limits()
    extraction: ExtractionConfig = ExtractionConfig()
    retrieval: FusionConfig = FusionConfig()
    """How search fuses its signals (see :class:`engramdb.search.FusionConfig`)."""
    query_cache: int = Field(default=1024, ge=0, le=1_000_000)
    """Search queries whose embedding is kept in memory (least recently used out;
    about 1.5 KB each with the local model); 0 turns the cache off."""
    version: str | None = None
    """Accepted for mem0 compatibility; ignored."""
    history_db_path: str | None = None
    """Accepted for mem0 compatibility; history lives in the store itself."""


def parse_config(
    config: EngramConfig | dict[str, Any] | None, path: str | Path | None
) -> EngramConfig:
    """Validate a mem0-shaped config dict; ``path`` overrides the store's path."""
    if isinstance(config, EngramConfig):
        cfg = config
    else:
        raw = dict(config or {})
        # mem0's name for steering extraction; ours are instructions added to our
        # prompt, not a replacement of it (see docs/extraction.md).
        legacy = raw.pop("custom_fact_extraction_prompt", None)
        for key in ("custom_instructions",):
            if key in raw:
                legacy = raw.pop(key)
        if legacy is not None:
            extraction = dict(raw.get("extraction") or {})
            extraction.setdefault("custom_instructions", legacy)
            raw["extraction"] = extraction
        raw = translate(raw)
        try:
            cfg = EngramConfig.model_validate(raw)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"invalid configuration: {problems}") from None
    check_store_config(cfg.vector_store.provider, cfg.vector_store.config)
    if path is not None:
        cfg = cfg.model_copy(
            update={
                "vector_store": ProviderConfig(
                    provider="sqlite", config={**cfg.vector_store.config, "path": str(path)}
                )
            }
        )
    return cfg
