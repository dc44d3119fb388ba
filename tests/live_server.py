"""A real uvicorn server on a free 127.0.0.1 port, in a background thread, for tests.

The server is :mod:`engramdb.bench._serving`'s, shared with the benchmarks.
"""

from __future__ import annotations

from engramdb.bench._serving import LiveServer, live

__all__ = ["LiveServer", "live"]
