from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engramdb import Memory
from engramdb.embedders import LocalEmbedder


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real local model, loaded once per test process."""
    return LocalEmbedder()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "engram.db"


@pytest.fixture
def mem(db_path: Path, embedder: LocalEmbedder) -> Iterator[Memory]:
    with Memory(db_path, embedder=embedder) as m:
        yield m


# The local OpenAI-wire server (a real HTTP server on 127.0.0.1) as a fixture.
from openai_wire import openai_server  # noqa: E402, F401
