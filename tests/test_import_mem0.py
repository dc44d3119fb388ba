"""`engram import mem0` and engramdb.importers.mem0, on stores written by a real mem0ai.

A session fixture runs tests/mem0_writer.py in mem0's own virtual environment
(`.ci/mem0-venv` makes it; `$ENGRAM_MEM0_PYTHON` names another python): mem0ai
2.2.1 writes a local Qdrant folder, a FAISS folder and a pgvector table (on the
tests' PostgreSQL server), each with its SQLite history, through its public API,
with its embedder and LLM pointed at the OpenAI-wire server on 127.0.0.1. The
tests compare what engramdb imports with what that mem0 itself reported
(``get`` and ``history``), never with a hand-made imitation of its files.

Without the mem0 venv these tests skip, saying so; CI makes the venv and sets
`$ENGRAM_MEM0_PYTHON`, so there they run.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from engramdb import Memory
from engramdb.cli import app
from engramdb.embedders import LocalEmbedder, OpenAIEmbedder
from engramdb.errors import EngramError, ImportFormatError
from engramdb.importers.mem0 import (
    Mem0ImportError,
    Mem0ImportReport,
    Mem0Store,
    import_mem0,
    read_flat_index,
)
from engramdb.search import document_text
from engramdb_bench._wire import RecordedRequest, Reply, WireServer

ROOT = Path(__file__).resolve().parents[1]
WRITER = ROOT / "tests" / "mem0_writer.py"
PYTHON_ENV = "ENGRAM_MEM0_PYTHON"
DIMS = 384  # the local model's: --keep-vectors is possible
ISO_UTC = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$"

runner = CliRunner(env={"ENGRAM_DB": None, "MEM0_DIR": None})


def mem0_python() -> Path:
    """The mem0 venv's python; skip (no venv) or fail (a named one is missing)."""
    named = os.environ.get(PYTHON_ENV)
    if named:
        if not Path(named).is_file():
            pytest.fail(f"${PYTHON_ENV} names {named}, which does not exist")
        return Path(named)
    default = ROOT / ".mem0-venv" / "bin" / "python"
    if not default.is_file():
        pytest.skip(
            f"no mem0 virtual environment: run .ci/mem0-venv (makes {default}) "
            f"or set ${PYTHON_ENV} to a python with mem0ai installed"
        )
    return default


# -- mem0's embedder: deterministic vectors from the wire server ------------------------------


def fake_vector(text: str, dims: int) -> list[float]:
    """What mem0's embedder gets for ``text``: not a real model (so kept vs re-embedded differ)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return [float(x) for x in np.random.default_rng(seed).standard_normal(dims)]


def unit(vector: list[float]) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    return v / np.linalg.norm(v)


PROCEDURE = "Greet the customer first, then ask what they need."


def _handler(request: RecordedRequest) -> Reply | None:
    path = request.path.rstrip("/")
    if path.endswith("/embeddings"):
        body = request.json
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dims = body.get("dimensions") or DIMS
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, dims)}
            for i, t in enumerate(texts)
        ]
        return Reply(
            body={
                "object": "list",
                "model": body["model"],
                "data": data,
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        )
    if path.endswith("/chat/completions"):
        return Reply(content=PROCEDURE)  # mem0's procedural-memory summary
    return None


@pytest.fixture(scope="session")
def wire() -> Iterator[WireServer]:
    server = WireServer()
    server.handler = _handler
    server.start()
    yield server
    server.stop()
    assert not server.errors, server.errors
    # mem0 spoke to nothing but its embedder and LLM on 127.0.0.1.
    paths = {(r.method, r.path.rstrip("/")) for r in server.requests}
    assert paths <= {("POST", "/v1/embeddings"), ("POST", "/v1/chat/completions")}, paths


def write_stores(base: Path, wire: WireServer, stores: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the writer in mem0's venv; returns mem0's own report of what it stored."""
    python = mem0_python()
    spec, out = base / "spec.json", base / "mem0-report.json"
    spec.write_text(json.dumps({"base_url": wire.base_url, "stores": stores}), encoding="utf-8")
    env = {
        **os.environ,
        "MEM0_TELEMETRY": "False",
        "MEM0_DIR": str(base / "mem0-home"),
        "HOME": str(base / "home"),
        # Every address but the wire server's goes to a proxy that does not exist.
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
        "OPENAI_API_KEY": "sk-test",
    }
    result = subprocess.run(
        [str(python), str(WRITER), str(spec), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"mem0 writer failed:\n{result.stdout}\n{result.stderr}"
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def _local(base: Path, kind: str, workload: str = "full", dims: int = DIMS) -> dict[str, Any]:
    return {
        "name": f"{kind}-{workload}-{dims}",
        "provider": kind,
        "config": {
            "collection_name": "mem0",
            "path": str(base / f"{kind}-{workload}-{dims}"),
            "embedding_model_dims": dims,
        },
        "history_db": str(base / f"{kind}-{workload}-{dims}.history.db"),
        "dims": dims,
        "workload": workload,
    }


class Written:
    """One mem0 store the writer made: where it is and what mem0 says it holds."""

    def __init__(self, store: Mem0Store, history_db: Path, report: dict[str, Any]) -> None:
        self.store = store
        self.history_db = history_db
        self.report = report
        repeats = set(report["repeats"])
        self.expected = [m for m in report["memories"] if m["id"] not in repeats]

    def by_text(self, text: str) -> dict[str, Any]:
        return next(m for m in self.expected if m["memory"] == text)


@pytest.fixture(scope="session")
def local_stores(tmp_path_factory: pytest.TempPathFactory, wire: WireServer) -> dict[str, Written]:
    base = tmp_path_factory.mktemp("mem0-local")
    specs = [_local(base, "qdrant"), _local(base, "faiss"), _local(base, "qdrant", "mini", 64)]
    report = write_stores(base, wire, specs)
    return {
        s["name"]: Written(
            Mem0Store(s["provider"], s["config"]["path"]), Path(s["history_db"]), report[s["name"]]
        )
        for s in specs
    }


@pytest.fixture(scope="session")
def pg_store(tmp_path_factory: pytest.TempPathFactory, wire: WireServer, pg_server: Any) -> Any:
    import psycopg

    base = tmp_path_factory.mktemp("mem0-pg")
    table = f"mem0_{uuid.uuid4().hex[:10]}"
    spec = {
        "name": "pgvector",
        "provider": "pgvector",
        "config": {
            "collection_name": table,
            "connection_string": pg_server.url,
            "embedding_model_dims": DIMS,
            "hnsw": False,
            "diskann": False,
        },
        "history_db": str(base / "history.db"),
        "dims": DIMS,
        "workload": "full",
    }
    try:
        report = write_stores(base, wire, [spec])
        yield Written(
            Mem0Store("pgvector", pg_server.url, table), base / "history.db", report["pgvector"]
        )
    finally:
        with psycopg.connect(pg_server.url, autocommit=True) as con:
            for name in (table, f"{table}_entities"):
                con.execute(f'DROP TABLE IF EXISTS "{name}"')


@pytest.fixture(params=["qdrant", "faiss", "pgvector"])
def written(request: pytest.FixtureRequest) -> Written:
    """Each full mem0 store in turn."""
    if request.param == "pgvector":
        store: Written = request.getfixturevalue("pg_store")
        return store
    stores: dict[str, Written] = request.getfixturevalue("local_stores")
    return stores[f"{request.param}-full-{DIMS}"]


@pytest.fixture
def qdrant(local_stores: dict[str, Written]) -> Written:
    return local_stores[f"qdrant-full-{DIMS}"]


@pytest.fixture
def faiss(local_stores: dict[str, Written]) -> Written:
    return local_stores[f"faiss-full-{DIMS}"]


def exported(m: Memory) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in list(m.export_records())[1:]}


def vector_of(record: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(record["embedding"]), dtype="<f4")


def same_instant(ours: str, theirs: str) -> bool:
    return datetime.fromisoformat(ours) == datetime.fromisoformat(theirs)


# -- what is imported ---------------------------------------------------------------------------


def test_memories_come_over_with_ids_scopes_metadata_times_and_history(
    mem: Memory, written: Written
) -> None:
    report = import_mem0(mem, written.store, history_db=written.history_db)
    facts = written.report

    assert report.memories == len(written.expected) == len(facts["memories"]) - 1
    assert [s.id for s in report.skipped] == facts["repeats"]
    assert facts["first_of_repeat"][0] in report.skipped[0].reason
    assert report.history_not_imported == 1 and report.vectors == "re-embedded"
    assert report.history_events == sum(len(facts["history"][m["id"]]) for m in written.expected)

    for theirs in written.expected:
        ours = mem.get(theirs["id"])
        assert ours is not None, theirs
        assert ours["memory"] == theirs["memory"]
        for key in ("user_id", "agent_id", "run_id", "actor_id", "role", "expiration_date"):
            assert ours.get(key) == theirs.get(key), (key, theirs)
        # mem0 lists memory_type among the metadata; in engramdb it is a field.
        metadata = dict(theirs.get("metadata") or {})
        assert ours.get("memory_type") == metadata.pop("memory_type", None)
        assert ours["metadata"] == metadata
        for key in ("created_at", "updated_at"):
            assert same_instant(ours[key], theirs[key]), (key, ours[key], theirs[key])
            assert re.match(ISO_UTC, ours[key]), ours[key]

        events = mem.history(theirs["id"])
        mem0_events = facts["history"][theirs["id"]]
        assert [(e["event"], e["old_memory"], e["new_memory"]) for e in events] == [
            (e["event"], e["old_memory"], e["new_memory"]) for e in mem0_events
        ]
        assert [e["version"] for e in events] == list(range(1, len(events) + 1))
        for e, m0 in zip(events, mem0_events, strict=True):
            when = m0["created_at"] if m0["event"] == "ADD" else m0["updated_at"]
            assert same_instant(e["created_at"], when)
            assert e["actor"] == "import" and e["reason"] == "from mem0's history"

    # The exact repeat mem0 stored twice and the memory it deleted are not here.
    for gone in (*facts["repeats"], *facts["deleted"]):
        assert mem.get(gone) is None
        assert mem.history(gone) == []


def test_times_with_an_offset_become_utc(qdrant: Written, db_path: Path, embedder: Any) -> None:
    with Memory(db_path, embedder=embedder) as m:
        import_mem0(m, qdrant.store, history_db=qdrant.history_db)
        bob = qdrant.by_text("Bob prefers window seats")
        assert bob["created_at"] == "2024-03-01T09:30:00-08:00"  # as mem0 stored it
        ours = m.get(bob["id"])
        assert ours is not None
        assert ours["created_at"] == "2024-03-01T17:30:00.000000+00:00"
        assert m.history(bob["id"])[0]["created_at"] == "2024-03-01T17:30:00.000000+00:00"


def test_the_imported_history_restores_old_versions(
    qdrant: Written, db_path: Path, embedder: Any
) -> None:
    with Memory(db_path, embedder=embedder) as m:
        import_mem0(m, qdrant.store, history_db=qdrant.history_db)
        porto = qdrant.by_text("I live in Porto")
        assert [e["event"] for e in m.history(porto["id"])] == ["ADD", "UPDATE", "UPDATE"]
        restored = m.restore(porto["id"], version=1)
        assert restored["memory"] == "I live in Lisbon"
        # mem0's history holds text only: the metadata stays as it is now.
        assert restored["metadata"] == {"topic": "home", "rank": 3, "tags": ["city", "pt"]}
        # The restored text is what the indexes hold now: its words find it first.
        hits = m.search("does alice live in Lisbon?", user_id="alice", top_k=3)["results"]
        assert hits[0]["id"] == porto["id"]
        assert hits[0]["memory"] == "I live in Lisbon"


def test_vectors_are_embedded_again_by_default(
    written: Written, db_path: Path, embedder: LocalEmbedder
) -> None:
    with Memory(db_path, embedder=embedder) as m:
        import_mem0(m, written.store, history_db=written.history_db)
        records = exported(m)
        texts = [
            document_text(r["memory"], r.get("actor_id"), m.config.retrieval)
            for r in records.values()
        ]
        expected = embedder.embed_documents(texts)
        for record, want in zip(records.values(), expected, strict=True):
            np.testing.assert_allclose(vector_of(record), want, atol=1e-5)
        assert m.store.bound_embedder() == (embedder.model, embedder.dim)
        hits = m.search("Does she eat meat?", user_id="alice", top_k=3)["results"]
        assert "I am vegetarian" in [h["memory"] for h in hits]


def test_keep_vectors_keeps_mem0_s_own(
    written: Written, db_path: Path, embedder: LocalEmbedder
) -> None:
    with Memory(db_path, embedder=embedder) as m:
        report = import_mem0(m, written.store, history_db=written.history_db, keep_vectors=True)
        assert report.vectors == "kept"
        for record in exported(m).values():
            # mem0 embedded the text itself (no speaker prefix), current version.
            want = unit(fake_vector(record["memory"], DIMS))
            np.testing.assert_allclose(vector_of(record), want, atol=1e-6)


def test_without_history_each_memory_gets_one_add(
    faiss: Written, db_path: Path, embedder: Any
) -> None:
    with Memory(db_path, embedder=embedder) as m:
        report = import_mem0(m, faiss.store)
        assert report.history_db is None and report.history_not_imported == 0
        assert report.history_events == report.memories
        porto = faiss.by_text("I live in Porto")
        (only,) = m.history(porto["id"])
        assert (only["event"], only["new_memory"], only["version"]) == ("ADD", "I live in Porto", 1)
        assert only["reason"] == "from mem0; its history has no record of this change"


def test_dry_run_checks_everything_and_writes_nothing(
    qdrant: Written, db_path: Path, embedder: Any
) -> None:
    with Memory(db_path, embedder=embedder) as m:
        report = import_mem0(m, qdrant.store, history_db=qdrant.history_db, dry_run=True)
        assert report.dry_run and report.vectors == "not computed"
        assert report.memories == len(qdrant.expected)
        assert m.store.count() == 0 and m.store.bound_embedder() is None
        kept = import_mem0(m, qdrant.store, dry_run=True, keep_vectors=True)
        assert kept.vectors == "kept" and m.store.count() == 0
        real = import_mem0(m, qdrant.store, history_db=qdrant.history_db)
        assert (real.memories, real.history_events) == (report.memories, report.history_events)


# -- refusals, and nothing written when the import fails ------------------------------------------


def test_keep_vectors_refuses_another_dimension(
    local_stores: dict[str, Written], db_path: Path, embedder: Any
) -> None:
    small = local_stores["qdrant-mini-64"]
    with Memory(db_path, embedder=embedder) as m:
        with pytest.raises(Mem0ImportError, match=r"64 dimensions .* makes 384"):
            import_mem0(m, small.store, keep_vectors=True)
        assert m.store.count() == 0
        assert import_mem0(m, small.store, history_db=small.history_db).memories == 2


def test_a_failure_while_writing_leaves_the_store_unchanged(mem: Memory, qdrant: Written) -> None:
    # A memory engramdb already has: the import repeats its text in the same scope,
    # which the write refuses after some rows are in; the transaction takes them back.
    mem.add("Refunds take five business days", agent_id="support-bot", infer=False)
    before = exported(mem)
    with pytest.raises(ImportFormatError, match="repeats the text of another live memory"):
        import_mem0(mem, qdrant.store, history_db=qdrant.history_db)
    assert exported(mem) == before
    assert mem.store.count() == 1


def test_importing_twice_is_refused_before_any_embedding(
    qdrant: Written, db_path: Path, embedder: Any
) -> None:
    with Memory(db_path, embedder=embedder) as m:
        import_mem0(m, qdrant.store, history_db=qdrant.history_db)
        before = exported(m)
        calls: list[int] = []
        with pytest.raises(Mem0ImportError, match="already in this engramdb store"):
            import_mem0(m, qdrant.store, on_progress=lambda *a: calls.append(1))
        assert calls == [] and exported(m) == before


def test_a_store_of_another_embedder_is_refused(
    qdrant: Written, db_path: Path, embedder: Any, wire: WireServer
) -> None:
    other = OpenAIEmbedder(model="other-model", base_url=wire.base_url, api_key="sk-test")
    with Memory(db_path, embedder=other) as m:
        m.add("something else entirely", user_id="zoe", infer=False)
    with Memory(db_path, embedder=embedder) as m:
        with pytest.raises(EngramError, match=r"made by 'openai-compatible/other"):
            import_mem0(m, qdrant.store)
        assert m.store.count() == 1
    other.close()


def test_a_payload_without_data_fails_the_import_or_is_skipped(
    faiss: Written, tmp_path: Path, embedder: Any
) -> None:
    # mem0's own FAISS files, with the text taken out of one payload.
    folder = tmp_path / "faiss"
    shutil.copytree(Path(faiss.store.location), folder)
    docstore_file = folder / "mem0.json"
    data = json.loads(docstore_file.read_text(encoding="utf-8"))
    broken = faiss.by_text("Refunds take five business days")["id"]
    del data["docstore"][broken]["data"]
    docstore_file.write_text(json.dumps(data), encoding="utf-8")
    store = Mem0Store("faiss", str(folder))

    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        with pytest.raises(Mem0ImportError, match=f"first: {broken}: its payload has no 'data'"):
            import_mem0(m, store)
        assert m.store.count() == 0
        report = import_mem0(m, store, skip_invalid=True)
        assert report.memories == len(faiss.expected) - 1
        assert any(s.id == broken and "no 'data'" in s.reason for s in report.skipped)
        assert m.get(broken) is None


def test_legacy_pickled_docstore_is_read_and_cannot_run_code(
    faiss: Written, tmp_path: Path, embedder: Any
) -> None:
    # mem0 before 2.2 pickled (docstore, index_to_id) into <collection>.pkl.
    folder = tmp_path / "faiss"
    shutil.copytree(Path(faiss.store.location), folder)
    data = json.loads((folder / "mem0.json").read_text(encoding="utf-8"))
    (folder / "mem0.json").unlink()
    index_to_id = {int(k): v for k, v in data["index_to_id"].items()}
    (folder / "mem0.pkl").write_bytes(pickle.dumps((data["docstore"], index_to_id)))
    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        report = import_mem0(m, Mem0Store("faiss", str(folder)), keep_vectors=True)
        assert report.memories == len(faiss.expected)

    class Evil:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    (folder / "mem0.pkl").write_bytes(pickle.dumps(({"x": {"data": Evil()}}, {0: "x"})))
    with (
        Memory(tmp_path / "b.db", embedder=embedder) as m,
        pytest.raises(Mem0ImportError, match="refused to load"),
    ):
        import_mem0(m, Mem0Store("faiss", str(folder)))
    assert not (tmp_path / "pwned").exists()


def test_flat_index_reader_matches_mem0_s_vectors(faiss: Written) -> None:
    folder = Path(faiss.store.location)
    matrix = read_flat_index(folder / "mem0.faiss")
    data = json.loads((folder / "mem0.json").read_text(encoding="utf-8"))
    assert matrix.shape == (len(data["index_to_id"]), DIMS)
    for position, memory_id in data["index_to_id"].items():
        text = data["docstore"][memory_id]["data"]
        np.testing.assert_allclose(matrix[int(position)], fake_vector(text, DIMS), rtol=1e-6)
    broken = folder.parent / "broken.faiss"
    broken.write_bytes((folder / "mem0.faiss").read_bytes()[:-4])
    with pytest.raises(Mem0ImportError, match="damaged"):
        read_flat_index(broken)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda w, t: Mem0Store("qdrant", str(t / "nowhere")), "does not exist"),
        (lambda w, t: Mem0Store("qdrant", str(t)), "not a local Qdrant folder"),
        (
            lambda w, t: Mem0Store("qdrant", w["qdrant"].store.location, "nope"),
            r"has no collection 'nope' \(it has: mem0\)",
        ),
        (lambda w, t: Mem0Store("faiss", str(t / "nowhere")), "does not exist"),
        (
            lambda w, t: Mem0Store("faiss", w["faiss"].store.location, "nope"),
            r"no docstore nope.json or nope.pkl \(collections there: mem0\)",
        ),
        (lambda w, t: Mem0Store("pgvector", "postgresql://u@127.0.0.1:9/db"), "cannot connect"),
    ],
    ids=[
        "qdrant-missing",
        "qdrant-not",
        "qdrant-collection",
        "faiss-missing",
        "faiss-collection",
        "pg-connect",
    ],
)
def test_stores_that_cannot_be_read_are_refused_clearly(
    make: Any, message: str, qdrant: Written, faiss: Written, tmp_path: Path, embedder: Any
) -> None:
    store = make({"qdrant": qdrant, "faiss": faiss}, tmp_path)
    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        with pytest.raises(Mem0ImportError, match=message):
            import_mem0(m, store)
        assert m.store.count() == 0
    assert not (tmp_path / "nowhere").exists()  # nothing created on the way


def test_a_missing_pgvector_table_is_refused(
    pg_store: Written, db_path: Path, embedder: Any
) -> None:
    with (
        Memory(db_path, embedder=embedder) as m,
        pytest.raises(Mem0ImportError, match="no table 'nope'"),
    ):
        import_mem0(m, Mem0Store("pgvector", pg_store.store.location, "nope"))


def test_a_qdrant_folder_open_elsewhere_is_refused(
    qdrant: Written, db_path: Path, embedder: Any
) -> None:
    from qdrant_client import QdrantClient

    holder = QdrantClient(path=qdrant.store.location)  # as a running mem0 would
    try:
        with (
            Memory(db_path, embedder=embedder) as m,
            pytest.raises(Mem0ImportError, match="open in another process"),
        ):
            import_mem0(m, qdrant.store)
    finally:
        holder.close()


def test_history_files_that_cannot_be_read_are_refused(
    qdrant: Written, tmp_path: Path, embedder: Any
) -> None:
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("not a database at all, just some text" * 100, encoding="utf-8")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE memories (id TEXT)")
    odd = tmp_path / "odd.db"
    with sqlite3.connect(odd) as con:
        con.execute("CREATE TABLE history (id TEXT, what TEXT)")
    cases = [
        (tmp_path / "missing.db", "does not exist"),
        (not_sqlite, "cannot read mem0 history file"),
        (other, "has no history table"),
        (odd, "not mem0's"),
    ]
    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        for path, message in cases:
            with pytest.raises(Mem0ImportError, match=message):
                import_mem0(m, qdrant.store, history_db=path)
        assert m.store.count() == 0
    assert not (tmp_path / "missing.db").exists()


def test_a_view_cannot_import(qdrant: Written, db_path: Path, embedder: Any) -> None:
    with Memory(db_path, embedder=embedder) as m, pytest.raises(EngramError, match="scoped view"):
        import_mem0(m.scoped(user_id="alice"), qdrant.store)


# -- the command ---------------------------------------------------------------------------------


def cli(db: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, ["--db", str(db), *args], prog_name="engram", env=env)


def test_engram_import_mem0(qdrant: Written, faiss: Written, tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    q = qdrant.store.location
    result = cli(
        db, "import", "mem0", "--qdrant-path", q, "--history-db", str(qdrant.history_db), "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["memories"] == len(qdrant.expected) and not report["dry_run"]
    assert report["skipped"][0]["id"] == qdrant.report["repeats"][0]
    assert report["history_db"] == str(qdrant.history_db)

    human = cli(
        tmp_path / "f.db", "import", "mem0", "--faiss-path", faiss.store.location, "--dry-run"
    )
    assert human.exit_code == 0, human.output
    assert f"Would import {len(faiss.expected)} memories" in human.stdout
    assert "engramdb keeps one copy of a text per scope" in human.stdout
    assert "Dry run: nothing was written." in human.stderr
    assert "no mem0 history was read" in human.stderr

    # mem0's default history file, found through $MEM0_DIR as mem0 finds it.
    home = tmp_path / "mem0-home"
    home.mkdir()
    shutil.copy(qdrant.history_db, home / "history.db")
    found = cli(
        tmp_path / "g.db",
        "import",
        "mem0",
        "--qdrant-path",
        q,
        "--json",
        env={"MEM0_DIR": str(home)},
    )
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["history_db"] == str(home / "history.db")
    assert "Reading mem0's history from" in found.stderr


def test_engram_import_mem0_errors(qdrant: Written, tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    for args in (
        [],
        ["--qdrant-path", qdrant.store.location, "--faiss-path", qdrant.store.location],
        ["--qdrant-path", qdrant.store.location, "--history-db", "x.db", "--no-history"],
    ):
        assert cli(db, "import", "mem0", *args).exit_code == 2
    again = cli(db, "import", "mem0", "--qdrant-path", qdrant.store.location, "--no-history")
    assert again.exit_code == 0, again.output
    refused = cli(db, "import", "mem0", "--qdrant-path", qdrant.store.location, "--no-history")
    assert refused.exit_code == 1
    assert "already in this engramdb store" in refused.stderr and "Traceback" not in refused.output
    missing = cli(
        tmp_path / "x.db", "import", "mem0", "--faiss-path", str(tmp_path), "--collection", "nope"
    )
    assert missing.exit_code == 1 and "no docstore nope.json" in missing.stderr


def test_engram_import_file_still_reads_exports(tmp_path: Path, embedder: Any) -> None:
    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        m.add("I keep bees", user_id="dan", infer=False)
        buf = io.StringIO()
        m.export_jsonl(buf)
    dump = tmp_path / "dump.jsonl"
    dump.write_text(buf.getvalue(), encoding="utf-8")
    for i, form in enumerate((["import", str(dump)], ["import", "file", str(dump)])):
        result = cli(tmp_path / f"b{i}.db", *form, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == 1
    help_text = runner.invoke(app, ["import", "--help"]).stdout
    assert "engram import FILE" in help_text and "mem0" in help_text


def test_report_is_json_ready(qdrant: Written, db_path: Path, embedder: Any) -> None:
    with Memory(db_path, embedder=embedder) as m:
        report = import_mem0(m, qdrant.store, history_db=qdrant.history_db, dry_run=True)
    assert isinstance(report, Mem0ImportReport)
    assert json.loads(json.dumps(report.as_dict()))["source"].startswith("mem0 qdrant store")


def test_without_qdrant_client_the_error_says_what_to_install(
    qdrant: Written, db_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "qdrant_client", None)  # as if not installed
    with (
        Memory(db_path, embedder=embedder) as m,
        pytest.raises(Mem0ImportError, match=re.escape("pip install 'engramdb[mem0-import]'")),
    ):
        import_mem0(m, qdrant.store)


def test_history_of_older_mem0_releases_is_read(
    qdrant: Written, tmp_path: Path, embedder: Any
) -> None:
    # mem0's own history file, with the column names its first releases used.
    old = tmp_path / "history.db"
    shutil.copy(qdrant.history_db, old)
    with sqlite3.connect(old) as con:
        for new, before in (
            ("old_memory", "prev_value"),
            ("new_memory", "new_value"),
            ("created_at", "timestamp"),
        ):
            con.execute(f"ALTER TABLE history RENAME COLUMN {new} TO {before}")
        con.execute("ALTER TABLE history DROP COLUMN updated_at")
    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        report = import_mem0(m, qdrant.store, history_db=old)
        porto = qdrant.by_text("I live in Porto")
        events = m.history(porto["id"])
        assert [(e["event"], e["new_memory"]) for e in events] == [
            ("ADD", "I live in Lisbon"),
            ("UPDATE", "I live in Porto"),
            ("UPDATE", "I live in Porto"),
        ]
        assert report.history_not_imported == 1


def test_a_history_that_does_not_match_the_store_is_completed() -> None:
    # What the planner does with histories mem0 itself does not write: one without
    # its ADD (rows lost), one that stops before the stored text, a DELETE of a live memory.
    from engramdb.importers.mem0 import Mem0Event, _history

    def ev(kind: str, old: str | None, new: str | None) -> Mem0Event:
        return Mem0Event("m", kind, old, new, "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z")

    created, updated = "2024-01-01T00:00:00.000000+00:00", "2024-01-03T00:00:00.000000+00:00"
    no_add = _history("c", created, updated, {}, None, [ev("UPDATE", "a", "b")])
    assert [(e["event"], e["version"], e["new_memory"]) for e in no_add] == [
        ("ADD", 1, "a"),
        ("UPDATE", 2, "b"),
        ("UPDATE", 3, "c"),
    ]
    assert no_add[0]["reason"] == no_add[2]["reason"] != no_add[1]["reason"]
    assert no_add[1]["created_at"] == "2024-01-02T00:00:00.000000+00:00"
    deleted = _history(
        "a", created, updated, {}, None, [ev("ADD", None, "a"), ev("DELETE", "a", None)]
    )
    assert [e["event"] for e in deleted] == ["ADD"]
