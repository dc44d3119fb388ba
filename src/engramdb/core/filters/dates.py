"""Date values in filters: instants in the stored UTC format, plain dates as whole days."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

from engramdb.core.filters.nodes import And, Cmp, Node, Not, Or, _describe
from engramdb.errors import FilterError


@dataclass(frozen=True)
class _Day:
    """A plain date: the whole UTC day, from its first to its last stored microsecond."""

    start: str
    end: str


def _canonical_timestamp(moment: datetime) -> str:
    # The stored format: fixed width, UTC, microseconds, so string order is time order.
    if moment.tzinfo is None or moment.utcoffset() is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _parse_when(value: object, where: str) -> str | _Day:
    """Read a filter date value: a whole day (plain date) or an instant (datetime)."""
    try:
        if isinstance(value, datetime):
            return _canonical_timestamp(value)
        if isinstance(value, date):
            return _day(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            # Epoch seconds, as add() accepts for timestamps.
            return _canonical_timestamp(datetime.fromtimestamp(value, UTC))
    except (OverflowError, OSError, ValueError):
        raise FilterError(
            f"{where}: {value!r} is outside the representable dates (epoch values are "
            "seconds, not milliseconds)"
        ) from None
    if not isinstance(value, str):
        raise FilterError(
            f"{where}: expected an ISO-8601 date or datetime such as '2024-05-01' or "
            f"'2024-05-01T13:30:00Z' (or epoch seconds), got {_describe(value)}"
        )
    text = value.strip()
    try:
        return _day(date.fromisoformat(text))
    except ValueError:
        pass
    try:
        return _canonical_timestamp(datetime.fromisoformat(text))
    except (OverflowError, ValueError):
        raise FilterError(
            f"{where}: {value!r} is not an ISO-8601 date or datetime (or is out of range); "
            "give e.g. '2024-05-01', '2024-05-01T13:30:00Z' or '2024-05-01T15:30:00+02:00'"
        ) from None


def _day(day: date) -> _Day:
    stamp = day.isoformat()
    return _Day(f"{stamp}T00:00:00.000000+00:00", f"{stamp}T23:59:59.999999+00:00")


def _date_condition(field: str, op: str, when: str | _Day) -> Node:
    if isinstance(when, str):
        return Cmp(field, op, when)
    # A plain date means the whole UTC day: "lte 2024-05-31" includes the evening of
    # the 31st, "eq 2024-05-01" is any time that day.
    whole_day = And((Cmp(field, "gte", when.start), Cmp(field, "lte", when.end)))
    bounds: dict[str, Node] = {
        "eq": whole_day,
        "ne": Not(whole_day),
        "gt": Cmp(field, "gt", when.end),
        "gte": Cmp(field, "gte", when.start),
        "lt": Cmp(field, "lt", when.start),
        "lte": Cmp(field, "lte", when.end),
    }
    return bounds[op]


def _date_in(field: str, whens: list[str | _Day]) -> Node:
    instants = tuple(w for w in whens if isinstance(w, str))
    parts: list[Node] = [Cmp(field, "in", instants)] if instants else []
    parts.extend(_date_condition(field, "eq", w) for w in whens if isinstance(w, _Day))
    return parts[0] if len(parts) == 1 else Or(tuple(parts))
