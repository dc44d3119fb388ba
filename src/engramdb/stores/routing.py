"""Which store reads a read replica may serve.

A store with a read replica (PostgreSQL's ``read_url``) sends a read there
only inside :func:`replica_reads`: the faces (``Memory``, ``AsyncMemory``)
wrap the calls that only read (search, get, get_all, history, ...) in it.
Every other store call, and so every read a write makes to decide what to
write (dedup, the current version before an update, the plan of a purge),
goes to the primary. A context variable, so it follows a call into the
worker thread or task it runs in, and never leaks to another call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["replica_ok", "replica_reads"]

_REPLICA_OK: ContextVar[bool] = ContextVar("engramdb_replica_ok", default=False)


@contextlib.contextmanager
def replica_reads() -> Iterator[None]:
    """Inside: store reads may go to a read replica (the call only reads)."""
    token = _REPLICA_OK.set(True)
    try:
        yield
    finally:
        _REPLICA_OK.reset(token)


def replica_ok() -> bool:
    """Whether the running call only reads (its reads may go to a read replica)."""
    return _REPLICA_OK.get()
