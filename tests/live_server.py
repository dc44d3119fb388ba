"""Real servers on free 127.0.0.1 ports, for tests.

:func:`live` is :mod:`engramdb.bench._serving`'s uvicorn server in a
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
from pathlib import Path
from typing import Any

import httpx

from engramdb.bench._serving import LiveServer, free_port, live

__all__ = ["LiveServer", "engram_serve", "live"]


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
