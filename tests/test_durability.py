"""Crash safety and multi-process writers on one SQLite file."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engramdb import Memory
from engramdb.embedders import LocalEmbedder

WRITER = str(Path(__file__).with_name("_writer.py"))


def check_consistent(db: Path) -> int:
    """Every memory has its vector, keyword row and ADD event; nothing dangles."""
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        q = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        n = q("SELECT count(*) FROM memories")
        assert (
            q(
                "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v "
                "ON v.memory_rowid = m.rowid WHERE v.memory_rowid IS NULL"
            )
            == 0
        )
        assert q("SELECT count(*) FROM memory_vectors") == n
        assert q("SELECT count(*) FROM memory_fts") == n
        assert (
            q(
                "SELECT count(*) FROM memories m WHERE NOT EXISTS (SELECT 1 FROM memory_fts f "
                "WHERE f.rowid = m.rowid)"
            )
            == 0
        )
        assert (
            q(
                "SELECT count(*) FROM memories m WHERE NOT EXISTS (SELECT 1 FROM history h "
                "WHERE h.memory_id = m.id AND h.event = 'ADD')"
            )
            == 0
        )
        # an update is one transaction: the row's version matches its last event
        assert (
            q(
                "SELECT count(*) FROM memories m WHERE m.version != (SELECT max(version) "
                "FROM history h WHERE h.memory_id = m.id)"
            )
            == 0
        )
        assert (
            q(
                "SELECT count(*) FROM memories m WHERE (m.deleted_at IS NOT NULL) != "
                "((SELECT event FROM history h WHERE h.memory_id = m.id AND h.event IN "
                "('ADD', 'DELETE', 'RESTORE') ORDER BY rowid DESC LIMIT 1) = 'DELETE')"
            )
            == 0
        )
        assert (
            q(
                "SELECT count(*) FROM history h WHERE NOT EXISTS (SELECT 1 FROM memories m "
                "WHERE m.id = h.memory_id)"
            )
            == 0
        )
        assert (
            q(
                "SELECT count(*) FROM (SELECT owner, hash FROM memories WHERE deleted_at IS "
                "NULL GROUP BY 1, 2 HAVING count(*) > 1)"
            )
            == 0
        )
        return int(n)
    finally:
        con.close()


@pytest.mark.slow
def test_sigkill_at_random_points_leaves_no_partial_writes(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random(7)
    kills = 0
    grew = []
    for round_ in range(25):
        proc = subprocess.Popen(
            [sys.executable, WRITER, str(db), "crash", str(round_), "100000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # wait until the child is writing (its start may be slow under load), then
        # kill it at a random point of its write loop
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n", proc.stderr.read().decode()  # type: ignore[union-attr]
        time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (-signal.SIGKILL, 0), err.decode()
        grew.append(check_consistent(db))
    assert kills >= 20
    assert grew[-1] > 0
    # and the store opens and works through the API afterwards
    with Memory(db, embedder=embedder) as m:
        hits = m.search("cat", user_id="user0", top_k=3)["results"]
        assert hits and all(h["user_id"] == "user0" for h in hits)
        m.add("still writable after 25 crashes", user_id="user0")
    check_consistent(db)


@pytest.mark.slow
def test_four_processes_add_to_one_file(tmp_path: Path, embedder: LocalEmbedder) -> None:
    db = tmp_path / "multi.db"
    Memory(db, embedder=embedder).close()  # created up front: the race is on writes
    procs = [
        subprocess.Popen(
            [sys.executable, WRITER, str(db), "concurrent", str(p), "250"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for p in range(4)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        assert b"locked" not in err
        outputs.append(json.loads(out))
    results = [r for out in outputs for r in out]
    assert len(results) == 1000
    by_text: dict[str, set[str]] = {}
    for r in results:
        by_text.setdefault(r["memory"], set()).add(r["id"])
    # each distinct text got exactly one id, whichever process stored it first
    assert all(len(ids) == 1 for ids in by_text.values())
    check_consistent(db)
    with Memory(db, embedder=embedder) as m:
        stored = m.get_all(user_id="shared", top_k=10_000)["results"]
        assert sorted(i["memory"] for i in stored) == sorted(by_text)
        for item in stored:
            procs_seen = {r["id"] for r in results if r["memory"] == item["memory"]}
            assert procs_seen == {item["id"]}
