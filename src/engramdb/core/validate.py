"""Input checks shared by every face: they raise before anything is stored."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from engramdb.core.records import Scope
from engramdb.errors import (
    MessagesError,
    MetadataError,
    ScopeError,
    TextTooLongError,
    TimestampError,
    ValidationError,
)

__all__ = [
    "RESERVED_METADATA_KEYS",
    "Message",
    "check_id",
    "check_metadata",
    "check_scope",
    "check_text",
    "check_threshold",
    "check_top_k",
    "parse_messages",
    "parse_timestamp",
]

RESERVED_METADATA_KEYS = frozenset(
    {
        "id",
        "memory",
        "hash",
        "user_id",
        "agent_id",
        "run_id",
        "actor_id",
        "role",
        "attributed_to",
        "memory_type",
        "created_at",
        "updated_at",
        "observed_at",
        "expires_at",
        "deleted_at",
        "linked_memory_ids",
    }
)
"""Keys that name fields of the memory itself; metadata may not shadow them.

A filter names these fields by their bare name, so a metadata key of the same name
could only be reached as ``metadata.<key>`` and would surprise everyone else.
``score`` is not reserved: it is not stored with a memory (search computes it and
returns it beside ``metadata``), so, as in mem0, it is an ordinary metadata key and
``{"score": {"gte": 2}}`` filters it (see docs/filters.md).
"""

MAX_ID_CHARS = 256
_ROLES = ("user", "assistant", "system", "tool")


def check_id(name: str, value: object) -> str | None:
    """Return a valid scope id (or ``None``); raise :class:`ScopeError` otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ScopeError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ScopeError(f"{name} must not be empty or whitespace")
    if len(value) > MAX_ID_CHARS:
        raise ScopeError(f"{name} is {len(value)} characters long; the limit is {MAX_ID_CHARS}")
    if any(ord(c) < 32 for c in value):
        raise ScopeError(f"{name} must not contain control characters")
    return value


def check_scope(
    user_id: object = None,
    agent_id: object = None,
    run_id: object = None,
    *,
    required: bool = True,
    what: str = "this call",
) -> Scope:
    """Validate the three scope ids; with ``required``, at least one must be set."""
    scope = Scope(
        check_id("user_id", user_id),
        check_id("agent_id", agent_id),
        check_id("run_id", run_id),
    )
    if required and not scope.items():
        raise ScopeError(
            f"{what} needs at least one of user_id, agent_id or run_id, so memories of "
            "different users never mix"
        )
    return scope


def check_text(text: object, limit: int, what: str = "memory text") -> str:
    """A non-empty string no longer than ``limit`` characters."""
    if not isinstance(text, str):
        raise ValidationError(f"{what} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValidationError(f"{what} must not be empty or whitespace")
    if len(text) > limit:
        raise TextTooLongError(
            f"{what} is {len(text)} characters long; the limit is {limit} "
            "(config limits.max_text_chars)"
        )
    return text


def check_metadata(metadata: object) -> dict[str, Any]:
    """A JSON object with string keys that does not set reserved keys."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise MetadataError(f"metadata must be a JSON object (dict), got {type(metadata).__name__}")
    bad_keys = [k for k in metadata if not isinstance(k, str)]
    if bad_keys:
        raise MetadataError(f"metadata keys must be strings, got {bad_keys[0]!r}")
    reserved = sorted(RESERVED_METADATA_KEYS.intersection(metadata))
    if reserved:
        raise MetadataError(
            f"metadata may not set reserved key(s) {', '.join(reserved)}: they are fields "
            "of the memory itself; pass scope ids as arguments and rename the others"
        )
    try:
        # Round-trip through JSON: rejects sets, objects, NaN; copies nested values
        # so later changes by the caller cannot reach the stored dict.
        out: dict[str, Any] = json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"metadata must be JSON-serialisable: {exc}") from exc
    _check_json_values(out, "metadata")
    return out


def _check_json_values(value: object, where: str) -> None:
    """Refuse values the stores cannot keep exactly (filters would disagree with them)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise MetadataError(f"{where} contains a NUL character, which cannot be stored")
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise MetadataError(f"{where} holds an integer outside the 64-bit range: {value}")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_json_values(key, f"{where} key")
            _check_json_values(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_values(item, f"{where}[{i}]")


def check_top_k(top_k: object, name: str = "top_k") -> int:
    """A positive integer."""
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise ValidationError(f"{name} must be an integer, got {type(top_k).__name__}")
    if top_k <= 0:
        raise ValidationError(f"{name} must be at least 1, got {top_k}")
    return top_k


def check_threshold(threshold: object) -> float | None:
    """``None`` or a number in [0, 1]."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ValidationError(f"threshold must be a number, got {type(threshold).__name__}")
    if math.isnan(threshold) or not 0.0 <= threshold <= 1.0:
        raise ValidationError(f"threshold must be between 0 and 1, got {threshold}")
    return float(threshold)


def parse_timestamp(value: object, name: str = "timestamp") -> str | None:
    """Accept epoch seconds, ``datetime``, ``date`` or ISO-8601 text; return ISO UTC.

    A naive datetime is taken as UTC (what a server log usually means).
    """
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str) and value.strip().lstrip("-").replace(".", "", 1).isdigit():
            value = float(value)  # epoch seconds given as text (a CLI argument)
        if isinstance(value, int | float):
            dt = datetime.fromtimestamp(float(value), tz=UTC)
        elif isinstance(value, datetime):
            dt = value
        elif isinstance(value, date):
            dt = datetime(value.year, value.month, value.day)
        elif isinstance(value, str):
            text = value.strip()
            dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        else:
            raise TypeError
    except TypeError:
        raise TimestampError(
            f"{name} must be epoch seconds, a datetime or an ISO-8601 string, "
            f"got {type(value).__name__}"
        ) from None
    except (ValueError, OverflowError, OSError) as exc:
        raise TimestampError(
            f"{name} {value!r} is not a valid time; use ISO-8601 like "
            f"'2024-05-01T14:30:00Z' or epoch seconds ({exc})"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass
class Message:
    """One validated conversation message."""

    role: str
    content: str
    name: str | None = None
    timestamp: str | None = None


def parse_messages(messages: object, max_chars: int, max_messages: int) -> list[Message]:
    """Normalise a string, a message dict or a list of them into :class:`Message` objects."""
    if isinstance(messages, str):
        items: list[object] = [{"role": "user", "content": messages}]
    elif isinstance(messages, Mapping):
        items = [messages]
    elif isinstance(messages, list | tuple):
        items = list(messages)
    else:
        raise MessagesError(
            "messages must be a string, a message dict or a list of message dicts, "
            f"got {type(messages).__name__}"
        )
    if not items:
        raise MessagesError("messages is empty; pass at least one message")
    if len(items) > max_messages:
        raise MessagesError(
            f"{len(items)} messages in one call; the limit is {max_messages} "
            "(config limits.max_messages): split the conversation into several adds"
        )
    out: list[Message] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise MessagesError(f"messages[{i}] must be a dict, got {type(item).__name__}")
        role = item.get("role", "user")
        if role not in _ROLES:
            raise MessagesError(
                f"messages[{i}] has role {role!r}; expected one of {', '.join(_ROLES)}"
            )
        if "content" not in item:
            raise MessagesError(f"messages[{i}] has no 'content'")
        content = item["content"]
        if isinstance(content, list):
            # OpenAI-style content parts: keep the text parts; images are described
            # by the extraction pipeline when one is configured, dropped otherwise.
            content = "\n".join(
                p.get("text", "")
                for p in content
                if isinstance(p, Mapping) and p.get("type") == "text"
            )
        if not isinstance(content, str):
            raise MessagesError(
                f"messages[{i}].content must be a string, got {type(content).__name__}"
            )
        if len(content) > max_chars:
            raise TextTooLongError(
                f"messages[{i}].content is {len(content)} characters long; the limit is "
                f"{max_chars} (config limits.max_text_chars)"
            )
        name = item.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise MessagesError(f"messages[{i}].name must be a non-empty string")
        out.append(
            Message(
                role=str(role),
                content=content,
                name=name,
                timestamp=parse_timestamp(item.get("timestamp"), f"messages[{i}].timestamp"),
            )
        )
    if not any(m.content.strip() for m in out):
        raise MessagesError("every message is empty; nothing to remember")
    return out
