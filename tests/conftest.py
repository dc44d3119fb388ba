from __future__ import annotations

import os

# On a busy 2-core machine, OpenBLAS threads wait for a core and turn millisecond
# products into tens of milliseconds; the tests measure behaviour, not BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from engramdb import Memory
from engramdb.embedders import LocalEmbedder

# The LoCoMo benchmarks read their data from --data or $ENGRAM_LOCOMO only (it is
# CC BY-NC 4.0 and never shipped). The checkout, like CI's clone, has shared/ beside
# it with a dev file: the tests use that one unless the environment names another.
_LOCOMO_DEV = Path(__file__).resolve().parents[2] / "shared/data/locomo/locomo-dev.json"
if not os.environ.get("ENGRAM_LOCOMO") and _LOCOMO_DEV.is_file():
    os.environ["ENGRAM_LOCOMO"] = str(_LOCOMO_DEV)


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real local model, loaded once per test process."""
    return LocalEmbedder()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "engram.db"


@pytest.fixture(params=["sqlite", "postgres"])
def mem(request: pytest.FixtureRequest, db_path: Path, embedder: LocalEmbedder) -> Iterator[Memory]:
    """A Memory on each backend: SQLite in a temporary file, PostgreSQL in a fresh schema."""
    with _mem_on(request, db_path, embedder) as m:
        yield m


# The local OpenAI-wire server (a real HTTP server on 127.0.0.1) as a fixture.
from openai_wire import openai_server  # noqa: E402, F401

# -- PostgreSQL (tests/pg.py): one server per test session, one schema per test -------------
from pg import PgServer, start_server  # noqa: E402

BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A real PostgreSQL + pgvector server; if none can be had, the tests fail."""
    server = start_server()
    yield server
    server.stop()


def _no_older_snapshots(url: str, timeout: float = 5.0) -> None:
    """Wait until no other session of the server holds a snapshot (at most ``timeout``).

    VACUUM keeps a dead row version that an older snapshot may still read
    (docs/postgres.md, "What may remain"), and the purge tests check that none
    is left: a test starts once what ran before it (a pool still closing, an
    autovacuum ANALYZE) has let go. A fresh-clone CI run once failed a purge
    test on exactly that.
    """
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as con:
        while time.monotonic() < deadline:
            row = con.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL"
            ).fetchone()
            if row is None or row[0] == 0:
                return
            time.sleep(0.05)


@pytest.fixture
def pg_config(pg_server: PgServer) -> Iterator[dict[str, object]]:
    """The PostgreSQL store config of a fresh schema, dropped after the test."""
    _no_older_snapshots(pg_server.url)
    with pg_server.schema() as config:
        yield config


def _mem_on(request: pytest.FixtureRequest, db_path: Path, embedder: LocalEmbedder) -> Memory:
    if request.param == "sqlite":
        return Memory(db_path, embedder=embedder)
    config = request.getfixturevalue("pg_config")
    return Memory(
        config={"vector_store": {"provider": "postgres", "config": config}}, embedder=embedder
    )


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend a test runs on (tests using ``mem`` or ``store`` run on each)."""
    return str(request.param)


# -- A real local LLM (tests/llama.py): llama.cpp's server with a pinned 1.5B model ----------
from llama import LlamaServer, llama_paths, start_llama  # noqa: E402


@pytest.fixture(scope="module")
def real_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-server on loopback with the model ``.ci/llm-setup`` assembled.

    Skips when ``ENGRAM_LLAMA_SERVER`` / ``ENGRAM_LLAMA_MODEL`` are not set
    (run ``eval "$(.ci/llm-setup)"`` first); under CI it fails instead.
    """
    paths = llama_paths()
    if paths is None:
        reason = (
            'no local LLM: run `eval "$(.ci/llm-setup)"` to build llama-server and assemble '
            "the model (ENGRAM_LLAMA_SERVER, ENGRAM_LLAMA_MODEL)"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with start_llama(*paths, tmp_path_factory.mktemp("llama") / "server.log") as server:
        yield server
