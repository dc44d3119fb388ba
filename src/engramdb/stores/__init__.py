"""Storage backends behind one :class:`~engramdb.stores.base.Store` protocol.

:func:`make_store` turns the ``vector_store`` config section into a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engramdb.errors import ConfigError, UnknownProviderError
from engramdb.stores.base import Store

__all__ = ["SQLITE_OPTIONS", "SUPPORTED_STORES", "Store", "make_store"]

SUPPORTED_STORES: tuple[str, ...] = ("sqlite",)
"""Provider names :func:`make_store` accepts."""

SQLITE_OPTIONS = ("path", "db_path", "busy_timeout", "max_cached_vectors")


def _check_keys(provider: str, config: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise ConfigError(
            f"unknown {provider} vector_store option(s) {unknown}; accepted: " + ", ".join(accepted)
        )


def check_store_config(provider: str, config: Mapping[str, Any]) -> None:
    """Refuse unknown providers and unknown options before anything is opened."""
    if provider not in SUPPORTED_STORES:
        raise UnknownProviderError("vector_store", provider, list(SUPPORTED_STORES))
    _check_keys(provider, config, SQLITE_OPTIONS)


def make_store(provider: str, config: Mapping[str, Any], default_path: Path) -> Store:
    """Open the store a ``vector_store`` section describes."""
    check_store_config(provider, config)
    from engramdb.stores.sqlite import SQLiteStore

    path = config.get("path") or config.get("db_path") or default_path
    return SQLiteStore(
        Path(path).expanduser(),
        busy_timeout_s=float(config.get("busy_timeout", 30.0)),
        max_cached_vectors=int(config.get("max_cached_vectors", 2_000_000)),
    )
