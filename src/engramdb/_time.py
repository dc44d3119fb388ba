"""The one clock every layer stamps with (flows, stores, key records)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["utc_now"]


def utc_now() -> str:
    """Current time as the ISO-8601 UTC string every timestamp column uses.

    Microseconds always, so string order is time order in SQL.
    """
    return datetime.now(UTC).isoformat(timespec="microseconds")
