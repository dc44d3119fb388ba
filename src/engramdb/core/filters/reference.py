"""The reference semantics: whether a record matches an AST, decided in Python.

Every compiler (:mod:`engramdb.core.filters.sqlite`, :mod:`engramdb.core.filters_pg`)
must select exactly the records :func:`evaluate` accepts.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from engramdb.core.filters.dates import _canonical_timestamp
from engramdb.core.filters.nodes import (
    _COMPLEMENT,
    _ORDERING,
    And,
    Cmp,
    Node,
    Not,
    Or,
    _check_cmp,
    _describe,
    _is_number,
    metadata_key,
)
from engramdb.errors import FilterError

# icontains folds ASCII only: it is the one folding every SQL backend can reproduce
# exactly (SQLite's built-in lower() is ASCII-only).
_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _fold(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def evaluate(node: Node, record: Mapping[str, Any]) -> bool:
    """Decide in Python whether ``record`` matches ``node``: the reference semantics.

    ``record`` holds the core fields (missing or ``None`` = absent; timestamps as
    stored strings or ``datetime``), the memory's text as ``"memory"``, ``"metadata"``
    (a dict, or its JSON text) and the extra scope values in ``"run_ids"`` /
    ``"agent_ids"`` (sets; the primary ``run_id`` / ``agent_id`` are counted whether or
    not the sets repeat them).
    """
    if isinstance(node, And):
        return all(evaluate(child, record) for child in node.children)
    if isinstance(node, Or):
        return any(evaluate(child, record) for child in node.children)
    if isinstance(node, Not):
        return not evaluate(node.child, record)
    if not isinstance(node, Cmp):
        raise FilterError(f"not a filter node: {_describe(node)}")
    kind = _check_cmp(node)
    if node.op in ("ne", "nin"):
        return not evaluate(Cmp(node.field, _COMPLEMENT[node.op], node.value), record)
    if kind == "multi":
        present = _multi_values(record, node.field)
        if node.op == "exists":
            return bool(present)
        wanted = node.value if node.op == "in" else (node.value,)
        assert isinstance(wanted, tuple | list)
        return any(value in present for value in wanted)
    if kind == "metadata":
        key = metadata_key(node.field)
        stored = _metadata(record).get(key) if key is not None else None
    else:
        stored = record.get(node.field)
        if isinstance(stored, datetime):
            stored = _canonical_timestamp(stored)
    return _match(node.op, stored, node.value)


def _multi_values(record: Mapping[str, Any], field: str) -> set[str]:
    values = {value for value in record.get(field + "s") or () if value is not None}
    primary = record.get(field)
    if primary is not None:
        values.add(primary)
    return values


def _metadata(record: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = record.get("metadata")
    if isinstance(metadata, str | bytes):
        metadata = json.loads(metadata)
    return metadata if isinstance(metadata, Mapping) else {}


def _match(op: str, stored: object, wanted: object) -> bool:
    if op == "exists":
        return stored is not None
    if op == "eq":
        return _same(stored, wanted)
    if op == "in":
        assert isinstance(wanted, tuple | list)
        return any(_same(stored, value) for value in wanted)
    if op in _ORDERING:
        if _is_number(wanted):
            if not _is_number(stored):
                return False
        elif not (isinstance(stored, str) and isinstance(wanted, str)):
            return False
        return _ORDER_TESTS[op](stored, wanted)
    if op == "contains":
        if isinstance(stored, str):
            return isinstance(wanted, str) and wanted in stored
        if isinstance(stored, list | tuple):
            return any(_same(item, wanted) for item in stored)
        return False
    if op == "icontains":
        assert isinstance(wanted, str)
        if isinstance(stored, str):
            return _fold(wanted) in _fold(stored)
        if isinstance(stored, list | tuple):
            return any(isinstance(item, str) and _fold(item) == _fold(wanted) for item in stored)
        return False
    raise FilterError(f"operator {op!r} has no evaluation rule")


def _same(stored: object, wanted: object) -> bool:
    # Equality within one JSON type only: True is not 1, "5" is not 5, 1 is 1.0.
    if isinstance(wanted, bool):
        return isinstance(stored, bool) and stored == wanted
    if _is_number(wanted):
        return _is_number(stored) and stored == wanted
    return isinstance(stored, str) and stored == wanted


_ORDER_TESTS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "gt": lambda a, b: bool(a > b),
    "gte": lambda a, b: bool(a >= b),
    "lt": lambda a, b: bool(a < b),
    "lte": lambda a, b: bool(a <= b),
}
