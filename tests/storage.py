"""Looking under a store, whichever backend it is: raw row counts and leftover text."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg

from engramdb.stores.postgres import PostgresStore
from engramdb.stores.sqlite import SQLiteStore


def raw_count(store: Any, table: str) -> int:
    """Rows of one table, read directly (not through the store's API)."""
    if isinstance(store, SQLiteStore):
        con = sqlite3.connect(store.path)
        try:
            return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        finally:
            con.close()
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.settings.url) as con:
        row = con.execute(f'SELECT count(*) FROM "{store.schema}".{table}').fetchone()
        assert row is not None
        return int(row[0])


def _file_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        data += wal.read_bytes()
    return data


def holds_text(store: Any, needle: str) -> bool:
    """Whether the store still holds ``needle`` anywhere.

    SQLite: in the raw bytes of the file and its WAL (free pages included).
    PostgreSQL: in any row of any of the store's tables (every column, as text);
    dead row versions until VACUUM are PostgreSQL's business (docs/postgres.md).
    """
    if isinstance(store, SQLiteStore):
        return needle.encode() in _file_bytes(store.path)
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.settings.url) as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (store.schema,),
            )
        ]
        assert "memories" in tables
        for table in tables:
            row = con.execute(
                f'SELECT count(*) FROM "{store.schema}".{table} t WHERE strpos(t::text, %s) > 0',
                (needle,),
            ).fetchone()
            assert row is not None
            if row[0]:
                return True
    return False
