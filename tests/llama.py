"""A real local LLM for tests: llama.cpp's ``llama-server`` on a free loopback port.

``.ci/llm-setup`` builds the server and assembles a pinned model, and prints
``ENGRAM_LLAMA_SERVER`` / ``ENGRAM_LLAMA_MODEL``; ``.ci/run`` exports them.
Without them the real-model tests skip locally and fail under CI (``CI``
set), so a CI run can never pass without having met the real model.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engramdb_bench._serving import free_port

__all__ = ["LlamaServer", "llama_paths", "start_llama"]

MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
"""The name the tests give the model (llama-server serves whatever it loaded)."""
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LlamaServer:
    """A running llama-server: where it listens and how to configure engramdb for it."""

    base_url: str
    model: str
    log: Path

    def llm_config(self, **options: Any) -> dict[str, Any]:
        """The ``llm`` section of an engramdb config for this server (greedy decoding)."""
        config: dict[str, Any] = {
            "model": self.model,
            "base_url": self.base_url,
            "temperature": 0,
            "timeout": 300,
            "max_retries": 0,
        }
        config.update(options)
        return {"provider": "llamacpp", "config": config}


def llama_paths() -> tuple[Path, Path] | None:
    """The server binary and the model file from the environment, if both exist."""
    server = os.environ.get("ENGRAM_LLAMA_SERVER")
    model = os.environ.get("ENGRAM_LLAMA_MODEL")
    if not server or not model:
        return None
    paths = Path(server), Path(model)
    return paths if all(p.is_file() for p in paths) else None


@contextmanager
def start_llama(
    server: Path, model: Path, log: Path, *, context: int = 8192
) -> Iterator[LlamaServer]:
    """Start llama-server on a free 127.0.0.1 port; stop it on exit.

    One slot, ``context`` tokens, two threads (the machine has two cores) or
    ``$ENGRAM_LLAMA_THREADS``: llama.cpp's threads spin while they wait, so
    two servers sharing cores must split them, or both crawl.
    Raises ``RuntimeError`` with the log's tail when it does not come up.
    """
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(server),
                "-m",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-c",
                str(context),
                "-np",
                "1",
                "-t",
                os.environ.get("ENGRAM_LLAMA_THREADS") or str(min(2, os.cpu_count() or 1)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({proc.returncode}):\n{_tail(log)}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not ready in {READY_TIMEOUT_S} s:\n{_tail(log)}")
            time.sleep(0.25)
        yield LlamaServer(f"{base}/v1", MODEL_NAME, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
