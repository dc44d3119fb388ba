"""The OpenAI-wire test server, as a pytest fixture.

The server itself lives in :mod:`engramdb_bench._wire` (the benchmarks use it
too); this module re-exports it under the names the tests import and adds the
``openai_server`` fixture. See that module's docstring for how to program it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engramdb_bench._wire import (
    AUTO,
    Handler,
    HandlerResult,
    RecordedRequest,
    Reply,
    WireServer,
    default_handler,
)

__all__ = [
    "AUTO",
    "Handler",
    "HandlerResult",
    "RecordedRequest",
    "Reply",
    "WireServer",
    "default_handler",
    "openai_server",
]


@pytest.fixture
def openai_server() -> Iterator[WireServer]:
    """A running :class:`WireServer`; fails the test if its handler raised."""
    server = WireServer().start()
    try:
        yield server
    finally:
        server.stop()
    if server.errors:
        pytest.fail("the test server's handler raised:\n" + "\n".join(server.errors))
