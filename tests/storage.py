"""Looking under a store, whichever backend it is: raw row counts and leftover text."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg

from engramdb.stores.postgres import PostgresStore
from engramdb.stores.sqlite import SQLiteStore
from engramdb_bench._probes import storage_hits, variants

__all__ = ["holds_any", "holds_text", "raw_count", "variants"]


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


def holds_text(store: Any, needle: str) -> bool:
    """Whether the store still holds ``needle`` (exactly as given) anywhere.

    SQLite: in the raw bytes of the file and its WAL (free pages included).
    PostgreSQL: in any live row of the store's tables (every column, as text)
    and in any tuple, live or dead, of their pages (``pageinspect``).
    """
    return holds_any(store, [needle])


def holds_any(store: Any, needles: list[str]) -> list[str]:
    """Where the store still holds any of ``needles``; empty when nowhere.

    Pass :func:`variants` of a secret to look for every case variant, token
    and lemma of it (see engramdb_bench._probes.storage_hits).
    """
    hits = storage_hits(store, needles)
    # A note (pageinspect missing) is not a finding, but the tests need the check.
    assert not [h for h in hits if h.startswith("(")], hits
    return hits
