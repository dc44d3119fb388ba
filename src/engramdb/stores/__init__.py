"""Storage backends behind one :class:`~engramdb.stores.base.Store` protocol.

:func:`make_store` turns the ``vector_store`` config section into a store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from engramdb.errors import ConfigError, UnknownProviderError
from engramdb.stores.base import AsyncStore, Store
from engramdb.stores.kernel.caches import DEFAULT_CACHE_BYTES

if TYPE_CHECKING:
    from engramdb.stores.postgres import AsyncPostgresStore, PostgresStore
    from engramdb.stores.sqlite import SQLiteStore

    def _backends_implement_the_protocols(
        sqlite: SQLiteStore, pg: PostgresStore, apg: AsyncPostgresStore
    ) -> tuple[Store, Store, AsyncStore]:
        # mypy checks each backend against its protocol here, method by method.
        return sqlite, pg, apg


__all__ = [
    "POSTGRES_OPTIONS",
    "POSTGRES_PROVIDERS",
    "SQLITE_OPTIONS",
    "STORE_URL_ENV",
    "SUPPORTED_STORES",
    "AsyncStore",
    "Store",
    "check_store_config",
    "make_store",
    "store_from_env",
]

POSTGRES_PROVIDERS: tuple[str, ...] = ("pgvector", "postgres", "postgresql")
"""Names of the PostgreSQL store: mem0's ``pgvector`` and the plain ones."""

SUPPORTED_STORES: tuple[str, ...] = ("sqlite", *POSTGRES_PROVIDERS)
"""Provider names :func:`make_store` accepts."""

SQLITE_OPTIONS = (
    "path",
    "db_path",
    "busy_timeout",
    "max_cached_vectors",
    "cache_bytes",
    "keyword_index",
)

POSTGRES_OPTIONS = (
    # where: a URL / libpq string, or mem0's separate keys
    "url",
    "connection_string",
    "dbname",
    "user",
    "password",
    "host",
    "port",
    "sslmode",
    # mem0's table name: here the PostgreSQL schema that holds the tables
    "collection_name",
    "schema",
    # pool and search settings
    "min_size",
    "max_size",
    "pool_timeout",
    "unavailable_timeout",
    "max_cached_docs",
    "cache_bytes",
    "ef_search",
    "keyword_index",
    # a read replica (hot standby): reads of calls that only read go there
    "read_url",
    "read_wait",
    "read_retry",
    # mem0 pgvector keys accepted and ignored (the dimension comes from the embedder;
    # the HNSW index is always built)
    "embedding_model_dims",
    "diskann",
    "hnsw",
)

STORE_URL_ENV = "ENGRAM_STORE_URL"
"""A ``postgresql://`` URL here selects the PostgreSQL store when no vector_store is configured."""


def _check_keys(provider: str, config: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise ConfigError(
            f"unknown {provider} vector_store option(s) {unknown}; accepted: " + ", ".join(accepted)
        )


def _check_counts(provider: str, config: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Refuse a count option (and ``cache_bytes``) that is not a non-negative integer."""
    for key in keys:
        value = config.get(key)
        if key in config and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(
                f"{provider} option {key} must be a non-negative integer; got {value!r}"
            )
    value = config.get("cache_bytes")
    if "cache_bytes" in config and (
        isinstance(value, bool) or not isinstance(value, int) or value < 0
    ):
        raise ConfigError(
            f"{provider} option cache_bytes must be a non-negative integer (bytes: the bound on "
            f"the per-scope caches of one process, e.g. {DEFAULT_CACHE_BYTES} for 256 MiB); "
            f"got {value!r}"
        )


def check_store_config(provider: str, config: Mapping[str, Any]) -> None:
    """Refuse unknown providers and unknown options before anything is opened."""
    if provider not in SUPPORTED_STORES:
        raise UnknownProviderError("vector_store", provider, list(SUPPORTED_STORES))
    if provider in POSTGRES_PROVIDERS:
        _check_keys(provider, config, POSTGRES_OPTIONS)
        if "schema" in config and "collection_name" in config:
            raise ConfigError("give the PostgreSQL schema as collection_name or schema, not both")
        if config.get("keyword_index", "database") not in ("database", "process"):
            raise ConfigError(
                "postgres option keyword_index must be 'database' (BM25 in SQL) or 'process' "
                f"(a per-process cache of each scope's terms); got {config['keyword_index']!r}"
            )
        _check_counts(provider, config, ("min_size", "max_size", "max_cached_docs", "ef_search"))
        patience = config.get("unavailable_timeout")
        if patience is not None and (
            isinstance(patience, bool) or not isinstance(patience, int | float) or patience <= 0
        ):
            raise ConfigError(
                f"{provider} option unavailable_timeout must be a positive number of seconds"
            )
        _check_replica(provider, config)
        return
    _check_keys(provider, config, SQLITE_OPTIONS)
    if config.get("keyword_index", "database") not in ("database", "process"):
        raise ConfigError(
            "sqlite option keyword_index must be 'database' (BM25 over postings in the file) "
            "or 'process' (a per-process cache of each scope's terms); "
            f"got {config['keyword_index']!r}"
        )
    _check_counts(provider, config, ("max_cached_vectors",))


def _check_replica(provider: str, config: Mapping[str, Any]) -> None:
    """Refuse a ``read_url`` that is no PostgreSQL connection string, and bad read timings."""
    for key, what in (("read_wait", "a non-negative"), ("read_retry", "a positive")):
        if key not in config:
            continue
        value = config[key]
        number = not isinstance(value, bool) and isinstance(value, int | float)
        if not number or not (value > 0 or (value == 0 and key == "read_wait")):
            raise ConfigError(
                f"{provider} option {key} must be {what} number of seconds; got {value!r}"
            )
        if "read_url" not in config:
            raise ConfigError(f"{provider} option {key} needs read_url (the read replica)")
    if "read_url" not in config:
        return
    url = config["read_url"]
    hint = (
        "a postgresql:// URL or a libpq key=value string naming a hot standby of the store's "
        "database, e.g. postgresql://engram@replica.internal:5432/app"
    )
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{provider} option read_url must be {hint}; got {url!r}")
    scheme = urlsplit(url).scheme if "://" in url else ""
    if "://" in url and scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"{provider} option read_url must be {hint}; got the scheme {scheme!r}")
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # pragma: no cover - the store itself says what is missing
        return
    try:
        conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: not a connection string
        raise ConfigError(f"{provider} option read_url must be {hint} ({exc})") from exc


def store_from_env() -> tuple[str, dict[str, Any]] | None:
    """The ``vector_store`` section ``$ENGRAM_STORE_URL`` stands for, if it is set."""
    url = os.environ.get(STORE_URL_ENV, "").strip()
    if not url:
        return None
    scheme = urlsplit(url).scheme
    if scheme in ("postgresql", "postgres"):
        return "postgres", {"url": url}
    raise ConfigError(
        f"{STORE_URL_ENV} must be a postgresql:// URL (got scheme {scheme!r}); unset it to use "
        "the SQLite file"
    )


def _postgres_conninfo(config: Mapping[str, Any]) -> str:
    url = config.get("url") or config.get("connection_string")
    if url:
        return str(url)
    from psycopg.conninfo import make_conninfo

    parts = {
        key: config[key]
        for key in ("dbname", "user", "password", "host", "port", "sslmode")
        if config.get(key) is not None
    }
    if not parts:
        raise ConfigError(
            "the PostgreSQL store needs a url (postgresql://user:pass@host:5432/db), a "
            "connection_string, or dbname/user/password/host/port"
        )
    return make_conninfo(**{k: str(v) for k, v in parts.items()})


def make_store(provider: str, config: Mapping[str, Any], default_path: Path) -> Store:
    """Open the store a ``vector_store`` section describes."""
    check_store_config(provider, config)
    if provider in POSTGRES_PROVIDERS:
        try:
            from engramdb.stores.postgres import DEFAULT_SCHEMA, PostgresStore
        except ImportError as exc:
            raise ConfigError(str(exc)) from exc

        store = PostgresStore(
            _postgres_conninfo(config),
            schema=str(config.get("collection_name") or config.get("schema") or DEFAULT_SCHEMA),
            min_size=int(config.get("min_size", 1)),
            max_size=int(config.get("max_size", 10)),
            timeout=float(config.get("pool_timeout", 30.0)),
            max_cached_docs=int(config.get("max_cached_docs", 2_000_000)),
            ef_search=int(config.get("ef_search", 200)),
            unavailable_timeout=float(config.get("unavailable_timeout", 5.0)),
            read_url=config.get("read_url"),
            read_wait=float(config.get("read_wait", 0.2)),
            read_retry=float(config.get("read_retry", 5.0)),
        )
        # The bound on the bytes of the keyword caches, over every scope (per process).
        store.flows.caches.max_bytes = int(config.get("cache_bytes", DEFAULT_CACHE_BYTES))
        store.flows.keyword_index = config.get("keyword_index", "database")
        return store
    from engramdb.stores.sqlite import SQLiteStore

    path = config.get("path") or config.get("db_path") or default_path
    return SQLiteStore(
        Path(path).expanduser(),
        busy_timeout_s=float(config.get("busy_timeout", 30.0)),
        max_cached_vectors=int(config.get("max_cached_vectors", 2_000_000)),
        cache_bytes=int(config.get("cache_bytes", DEFAULT_CACHE_BYTES)),
        keyword_index=str(config.get("keyword_index", "database")),
    )
