"""Loopback serving for the benchmarks and the tests: free ports, uvicorn in a thread.

:class:`LiveServer` serves an ASGI app with uvicorn on a free 127.0.0.1
port in a daemon thread (the socket is bound first, so the port is known
before the server starts); :func:`live` is the same as a ``with`` block.
Used by the attack suite, the REST fuzzing of ``engram bench torture``
and the tests (``tests/live_server.py``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["LiveServer", "free_port", "live"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """Serve an ASGI app over real HTTP until :meth:`stop` (or the end of a ``with``)."""

    def __init__(
        self,
        app: Any,
        *,
        log_level: str = "warning",
        start_timeout: float = 30,
        stop_timeout: float = 15,
        name: str | None = None,
    ) -> None:
        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name=name, daemon=True
        )

    def start(self) -> LiveServer:
        """Start serving; returns once uvicorn has started (``RuntimeError`` if it does not)."""
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit, wait for its thread, close the socket."""
        self._server.should_exit = True
        self._thread.join(timeout=self._stop_timeout)
        self._sock.close()

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def live(app: Any, **options: Any) -> Iterator[LiveServer]:
    """Serve ``app`` until the block ends; yields the running :class:`LiveServer`.

    ``options`` go to :class:`LiveServer`. For instance
    ``with live(app) as server: httpx.get(server.url + "/healthz")``.
    """
    server = LiveServer(app, **options).start()
    try:
        yield server
    finally:
        server.stop()
