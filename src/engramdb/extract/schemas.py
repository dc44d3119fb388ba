"""JSON schemas of the replies, for a ``json_schema`` response format.

They describe what the prompts ask for. The parsers accept more than the
schemas allow (ids as integers, extra fields, other key casings), because
a server may ignore the schema, or the call may fall back to JSON mode or
plain instructions.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ADDITIVE_SCHEMA", "FACTS_SCHEMA", "PROCEDURAL_SCHEMA", "UPDATE_SCHEMA"]

_ID: dict[str, Any] = {
    "type": "string",
    "description": 'A small id of a memory listed in the request, such as "3".',
}

ADDITIVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memory": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "One self-contained fact."},
                    "attributed_to": {"type": "string", "enum": ["user", "assistant"]},
                    # The kind before the ids: a grammar-constrained model writes the
                    # fields in this order, and deciding "updates" first makes a small
                    # model name the id it updates (measured on the local 1.5B model).
                    "link_kind": {
                        "type": "string",
                        "enum": ["updates", "contradicts", "follows_up", "related"],
                    },
                    "linked_memory_ids": {"type": "array", "items": _ID},
                },
                "required": ["text", "attributed_to", "link_kind", "linked_memory_ids"],
            },
        }
    },
    "required": ["memory"],
}
"""The additive reply: ``{"memory": [{"text", "attributed_to", "linked_memory_ids",
"link_kind"}]}``."""

FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
}
"""The consolidating mode's first reply: ``{"facts": ["…"]}``."""

UPDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memory": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "event": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NONE"]},
                    "id": _ID,
                    "text": {"type": "string"},
                    "old_memory": {"type": "string"},
                },
                "required": ["event"],
            },
        }
    },
    "required": ["memory"],
}
"""The consolidating mode's second reply: ``{"memory": [{"event", "id", "text", …}]}``."""

PROCEDURAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}
"""The procedural reply: ``{"summary": "…"}`` (plain text is accepted too)."""
