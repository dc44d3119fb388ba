"""The caller's scope ids (``user_id``/``agent_id``/``run_id``) split off a filter dict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engramdb.core.filters.nodes import LOGICAL_KEYS, SCOPE_FIELDS, _describe
from engramdb.errors import FilterError


def split_scope(filters: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, Any]]:
    """Split the caller's scope (``user_id``/``agent_id``/``run_id``) off a filter dict.

    A scope id is a top-level key whose value is a plain string other than ``"*"``;
    the same shape directly inside a top-level ``AND`` list (mem0's platform style,
    ``{"AND": [{"user_id": "alice"}, ...]}``, or ``and``/``$and``) is lifted too,
    because a conjunct there is just as required. A second, different value for an id
    already lifted stays in the rest (the filter then matches nothing, which is what it
    says). Operator dicts, ``"*"`` and non-strings stay in the rest, where
    :func:`parse_filters` judges them.
    Returns ``(scope, rest)``; the input is not modified.
    """
    if filters is None:
        return {}, {}
    if not isinstance(filters, Mapping):
        raise FilterError(
            f"filters must be a dict such as {{'category': 'work'}}, got {_describe(filters)}"
        )
    scope: dict[str, str] = {}
    rest: dict[str, Any] = {}
    for key, value in filters.items():
        if key in SCOPE_FIELDS and _is_scope_value(value):
            scope[key] = value
        else:
            rest[key] = value
    for key, value in list(rest.items()):
        if LOGICAL_KEYS.get(key) != "AND" or not isinstance(value, list | tuple):
            continue
        kept: list[Any] = []
        for item in value:
            lifted = _single_scope_item(item)
            if lifted is None:
                kept.append(item)
                continue
            name, ident = lifted
            if name not in scope:
                scope[name] = ident
            elif scope[name] != ident:
                kept.append(item)
        if kept:
            rest[key] = kept
        else:
            del rest[key]
    return scope, rest


def _is_scope_value(value: object) -> bool:
    return isinstance(value, str) and value != "*"


def _single_scope_item(item: object) -> tuple[str, str] | None:
    if isinstance(item, Mapping) and len(item) == 1:
        ((name, value),) = item.items()
        if name in SCOPE_FIELDS and _is_scope_value(value):
            return name, value
    return None
