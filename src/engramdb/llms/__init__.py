"""LLMs: OpenAI-compatible servers, Anthropic, and a scripted stand-in for tests.

:func:`make_llm` turns an ``llm`` config section (a provider name and a
dict of options, as in mem0) into an :class:`LLM`; :func:`llm_from_env`
builds one from ``ENGRAM_LLM`` (``provider:model``). Nothing here touches
the network until the first call, and the ``anthropic`` package is only
imported when an Anthropic LLM is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from engramdb.errors import ConfigError, UnknownProviderError
from engramdb.llms.anthropic import AnthropicLLM
from engramdb.llms.base import LLM, STRUCTURED_MODES, Completion, StructuredMode, Usage
from engramdb.llms.openai import OPENAI_FAMILY, OpenAICompatibleLLM
from engramdb.llms.scripted import ScriptedCall, ScriptedLLM, ScriptEntry

__all__ = [
    "ENV_VAR",
    "LLM",
    "STRUCTURED_MODES",
    "SUPPORTED_LLMS",
    "AnthropicLLM",
    "Completion",
    "OpenAICompatibleLLM",
    "ScriptEntry",
    "ScriptedCall",
    "ScriptedLLM",
    "StructuredMode",
    "Usage",
    "llm_from_env",
    "make_llm",
    "parse_llm_spec",
]

ENV_VAR = "ENGRAM_LLM"
"""Environment variable naming the LLM as ``provider:model``."""

SUPPORTED_LLMS: tuple[str, ...] = tuple(sorted((*OPENAI_FAMILY, "anthropic", "scripted")))
"""Provider names :func:`make_llm` accepts."""

# Spellings people (and mem0 configs) use for the same providers.
_ALIASES = {
    "llama_cpp": "llamacpp",
    "lm_studio": "lmstudio",
    "openai_structured": "openai",
    "together_ai": "together",
    "togetherai": "together",
}


def _normalise(provider: str) -> str:
    name = provider.strip().lower().replace("-", "_").replace(".", "_")
    return _ALIASES.get(name, name)


def _check_keys(provider: str, config: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    unknown = sorted(str(key) for key in config if key not in accepted)
    if unknown:
        raise ConfigError(
            f"unknown option(s) for llm provider {provider!r}: {', '.join(unknown)}; "
            f"accepted options: {', '.join(accepted)}"
        )


def parse_llm_spec(spec: str) -> tuple[str, str | None]:
    """Split ``provider:model`` (as in ``ENGRAM_LLM``) into its parts.

    Only the first colon separates, so Ollama tags survive
    (``ollama:llama3.2:3b`` is model ``llama3.2:3b``). A bare provider
    gives ``None`` for the model.

    Raises:
        ConfigError: the provider part is empty.
    """
    provider, sep, model = spec.strip().partition(":")
    if not provider.strip():
        raise ConfigError(
            f"cannot read LLM spec {spec!r}: expected provider:model, e.g. openai:gpt-4.1-mini "
            "or ollama:llama3.2"
        )
    return provider.strip(), (model.strip() or None) if sep else None


def make_llm(provider: str | None = None, config: Mapping[str, Any] | None = None) -> LLM:
    """Build the LLM for a provider name and its options.

    Args:
        provider: one of :data:`SUPPORTED_LLMS` (case-insensitive, ``-``
            and ``_`` alike); ``None`` reads ``ENGRAM_LLM``
            (``provider:model``), whose model the config's ``model`` overrides.
        config: the provider's options; see ``OpenAICompatibleLLM.CONFIG_KEYS``,
            ``AnthropicLLM.CONFIG_KEYS`` and ``ScriptedLLM.CONFIG_KEYS``.

    Raises:
        UnknownProviderError: the provider is not one engramdb ships.
        ConfigError: no provider and no ``ENGRAM_LLM``; an unknown option or
            bad value; a missing API key; the ``anthropic`` extra not installed.
    """
    options: dict[str, Any]
    if config is None:
        options = {}
    elif isinstance(config, Mapping):
        options = dict(config)
    else:
        raise ConfigError(f"llm config must be a dict of options, got {type(config).__name__}")
    if provider is None:
        spec = os.environ.get(ENV_VAR, "").strip()
        if not spec:
            raise ConfigError(
                "no LLM configured: pass a provider (e.g. make_llm('ollama', "
                "{'model': 'llama3.2'})) or set the ENGRAM_LLM environment variable to "
                "provider:model (e.g. openai:gpt-4.1-mini)"
            )
        provider, env_model = parse_llm_spec(spec)
        if env_model is not None:
            options.setdefault("model", env_model)
    elif not isinstance(provider, str):
        raise ConfigError(f"llm provider must be a string, got {type(provider).__name__}")

    name = _normalise(provider)
    if name in OPENAI_FAMILY:
        _check_keys(name, options, OpenAICompatibleLLM.CONFIG_KEYS)
        return OpenAICompatibleLLM.from_config(name, options)
    if name == "anthropic":
        _check_keys(name, options, AnthropicLLM.CONFIG_KEYS)
        return AnthropicLLM.from_config(options)
    if name == "scripted":
        _check_keys(name, options, ScriptedLLM.CONFIG_KEYS)
        return ScriptedLLM.from_config(options)
    raise UnknownProviderError("llm", provider, list(SUPPORTED_LLMS))


def llm_from_env() -> LLM | None:
    """Build the LLM ``ENGRAM_LLM`` names, or return ``None`` when it is unset or empty.

    Keys and base URLs come from the provider's usual variables
    (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``GROQ_API_KEY``, ...).
    """
    if not os.environ.get(ENV_VAR, "").strip():
        return None
    return make_llm(None, None)
