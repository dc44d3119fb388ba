"""Real servers on free 127.0.0.1 ports, for tests.

:func:`live` is :mod:`engramdb_bench._serving`'s uvicorn server in a
background thread, shared with the benchmarks; :func:`engram_serve` starts
the ``engram serve`` command itself in a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engramdb import AsyncMemory, Memory
from engramdb.server import KeyStore, create_app
from engramdb_bench._serving import LiveServer, free_port, live

__all__ = ["LiveServer", "Stack", "engram_serve", "live", "server_stack"]


@dataclass
class Stack:
    """A live server over one Memory with its key store; ``header`` is how clients send keys."""

    url: str
    keys: KeyStore
    memory: AsyncMemory | Memory
    header: str = "bearer"

    def client(self, key: str | None = None, *, header: str | None = None) -> httpx.Client:
        """An HTTP client of the server sending ``key`` as ``Bearer`` or ``X-API-Key``."""
        headers = {}
        if key is not None:
            headers = (
                {"Authorization": f"Bearer {key}"}
                if (header or self.header) == "bearer"
                else {"X-API-Key": key}
            )
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def user_key(self, user_id: str, agent_id: str | None = None, run_id: str | None = None) -> str:
        """A new key bound to the scope."""
        return self.keys.create(user_id=user_id, agent_id=agent_id, run_id=run_id).key


@contextlib.contextmanager
def server_stack(
    engine: str, folder: Path, embedder: Any, *, header: str = "bearer", **app: Any
) -> Iterator[Stack]:
    """A server on ``AsyncMemory`` (``engine="async"``) or ``Memory`` in worker threads.

    Every request needs a key (an admin key is made first); ``app`` goes to
    :func:`~engramdb.server.create_app` (``limits``, ``compat``, ...).
    """
    cls = AsyncMemory if engine == "async" else Memory
    memory = cls(folder / "engram.db", embedder=embedder, llm=None, actor="server")
    keys = KeyStore(folder / "keys.db")
    keys.create(admin=True, name="bootstrap")  # from here on every request needs a key
    with live(create_app(memory, keys=keys, close_memory=True, **app)) as server:
        yield Stack(server.url, keys, memory, header)
    keys.close()


@contextlib.contextmanager
def engram_serve(tmp_path: Path, *options: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Run ``engram --db tmp/e.db serve --keys-db tmp/keys.db OPTIONS --json`` until exit.

    Yields the base URL (once ``/healthz`` answers) and a dict that holds,
    after the block, the command's JSON line (``info``).
    """
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engramdb.cli",
            "--db",
            str(tmp_path / "e.db"),
            "serve",
            "--port",
            str(port),
            "--keys-db",
            str(tmp_path / "keys.db"),
            *options,
            "--json",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ENGRAM_LLM": ""},
    )
    result: dict[str, Any] = {}
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url, result
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=30)
    result["info"] = json.loads(out)
    result["port"] = port
