"""Parsing: a mem0-style filter dict to the AST, validated and normalised once.

Every malformed part raises :class:`~engramdb.errors.FilterError` naming where it is
and what is accepted there; :class:`_Budget` bounds the size of a filter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import date
from typing import Any, Final, TypeGuard

from engramdb.core.filters.dates import _date_condition, _date_in, _Day, _parse_when
from engramdb.core.filters.nodes import (
    _COMPLEMENT,
    _OPS_BY_KIND,
    _ORDERING,
    CORE_FIELDS,
    DATE_FIELDS,
    LOGICAL_KEYS,
    MEMORY_FIELD,
    METADATA_PREFIX,
    OPERATORS,
    And,
    Cmp,
    FieldKind,
    Node,
    Not,
    Or,
    Scalar,
    _check_text_search,
    _describe,
    _kind_rule,
    _unknown_operator,
    field_kind,
)
from engramdb.errors import FilterError

#: Names of the memory record that metadata may not use (see core/validate.py) but
#: that are not filterable either: as metadata keys they would silently never match.
#: ``score`` is not among them: it is not stored with a memory, so (as in mem0) it is
#: an ordinary metadata key; the relevance score is bounded with ``threshold=``.
_NOT_FILTERABLE: Final = {
    "deleted_at": "deleted memories are never listed; use history() to see them",
    "linked_memory_ids": "links are not filterable",
}


MAX_DEPTH: Final = 32
MAX_NODES: Final = 500
#: Total values over all ``in``/``nin`` lists: keeps the bound parameters far below
#: SQLite's 32766-variable limit whatever the shape of the filter.
MAX_LIST_VALUES: Final = 5000

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def parse_filters(filters: Mapping[str, Any] | None) -> Node | None:
    """Validate a mem0-style filter dict and return its AST (``None`` matches all).

    ``None`` and ``{}`` give ``None``. Every malformed part raises
    :class:`~engramdb.errors.FilterError` naming where it is (``filters['OR'][1]['rating']``)
    and what is accepted there. See ``docs/filters.md`` for the language.
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise FilterError(
            f"filters must be a dict such as {{'category': 'work'}}, got {_describe(filters)}"
        )
    if not filters:
        return None
    return _parse_mapping(filters, "filters", 1, _Budget())


class _Budget:
    """Counts conditions and list values so hostile or runaway filters fail early."""

    def __init__(self) -> None:
        self.nodes = 0
        self.values = 0

    def node(self, where: str) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise FilterError(
                f"{where}: the filter has more than {MAX_NODES} conditions; "
                "use 'in' lists instead of long OR chains, or split the query"
            )

    def list_values(self, count: int, where: str) -> None:
        self.values += count
        if self.values > MAX_LIST_VALUES:
            raise FilterError(
                f"{where}: the filter's 'in'/'nin' lists hold more than {MAX_LIST_VALUES} "
                "values in total; split the query"
            )


def _at(where: str, key: object) -> str:
    return f"{where}[{key!r}]"


def _is_list(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    return isinstance(value, list | tuple)


def _and(parts: list[Node]) -> Node:
    flat: list[Node] = []
    for part in parts:
        flat.extend(part.children if isinstance(part, And) else (part,))
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def _negate(node: Node) -> Node:
    # Keeps the AST small and readable: NOT eq is ne, NOT NOT x is x.
    if isinstance(node, Not):
        return node.child
    if isinstance(node, Cmp) and node.op in _COMPLEMENT:
        return Cmp(node.field, _COMPLEMENT[node.op], node.value)
    return Not(node)


def _parse_mapping(value: object, where: str, depth: int, budget: _Budget) -> Node:
    if depth > MAX_DEPTH:
        raise FilterError(
            f"{where}: filters nest deeper than {MAX_DEPTH} levels of AND/OR/NOT; "
            "flatten the nesting"
        )
    if not isinstance(value, Mapping):
        raise FilterError(
            f"{where}: expected a filter dict such as {{'category': 'work'}}, "
            f"got {_describe(value)}"
        )
    if not value:
        raise FilterError(f"{where}: empty filter dict; give at least one condition or drop it")
    parts: list[Node] = []
    for key, item in value.items():
        key_where = _at(where, key)
        if not isinstance(key, str):
            raise FilterError(f"{key_where}: field names must be strings, got {_describe(key)}")
        logical = LOGICAL_KEYS.get(key)
        if logical is not None:
            parts.append(_parse_logical(logical, item, key_where, depth, budget))
        elif key.startswith("$"):
            raise _dollar_key(key, key_where)
        else:
            parts.append(_parse_field(key, item, key_where, budget))
    return _and(parts)


def _dollar_key(key: str, where: str) -> FilterError:
    # A bare "$..." name beside field names is a Mongo-style operator ($nor, $gt,
    # $exists...), never a metadata key by accident: taken as one it would silently
    # match nothing. A metadata key that really starts with "$" is spelled explicitly.
    bare = key[1:].lower()
    if bare in ("and", "or", "not"):
        hint = f"write {'$' + bare!r} (or {bare.upper()!r})"
    elif bare in OPERATORS:
        hint = (
            f"operators go inside a field's dict and take no '$': {{'rating': {{{bare!r}: ...}}}}"
        )
    elif bare == "exists":
        hint = "give a field the plain value '*' for 'is present' and None for 'is absent'"
    else:
        hint = "the logical keys are AND, OR and NOT, also spelled and/or/not and $and/$or/$not"
    return FilterError(
        f"{where}: {key!r} is not a logical key or a field ({hint}); a metadata key that "
        f"starts with '$' is written {METADATA_PREFIX + key!r}"
    )


def _parse_logical(logical: str, item: object, where: str, depth: int, budget: _Budget) -> Node:
    budget.node(where)
    if logical == "NOT":
        if isinstance(item, Mapping):
            return _negate(_parse_mapping(item, where, depth + 1, budget))
        if not _is_list(item) or not item:
            raise FilterError(
                f"{where}: NOT takes a filter dict such as {{'NOT': {{'status': 'done'}}}}, "
                "or a non-empty list of filter dicts none of which may match "
                f"({{'NOT': [a, b]}} is NOT (a OR b), as in mem0), got {_describe(item)}"
            )
        # As in mem0: a list means "none of them", NOT (a OR b OR ...).
        negated = [
            _parse_mapping(child, f"{where}[{i}]", depth + 1, budget)
            for i, child in enumerate(item)
        ]
        return _negate(negated[0] if len(negated) == 1 else Or(tuple(negated)))
    if not _is_list(item) or not item:
        raise FilterError(
            f"{where}: {logical} takes a non-empty list of filter dicts, e.g. "
            f"{{'{logical}': [{{'a': 1}}, {{'b': 2}}]}}, got {_describe(item)}"
        )
    children = [
        _parse_mapping(child, f"{where}[{i}]", depth + 1, budget) for i, child in enumerate(item)
    ]
    if logical == "AND":
        return _and(children)
    return children[0] if len(children) == 1 else Or(tuple(children))


def _resolve_field(name: str, where: str) -> str:
    if name in CORE_FIELDS or name == MEMORY_FIELD:
        return name
    if name in _NOT_FILTERABLE:
        raise FilterError(
            f"{where}: {name!r} is not a filterable field ({_NOT_FILTERABLE[name]}); "
            f"a metadata key of that name is reserved"
        )
    if name == "metadata":
        raise FilterError(
            f"{where}: 'metadata' is not a filterable field; filter a metadata key directly "
            "({'category': 'work'}) or as {'metadata.category': 'work'}"
        )
    key = name[len(METADATA_PREFIX) :] if name.startswith(METADATA_PREFIX) else name
    if not key:
        raise FilterError(f"{where}: empty field name; name a core field or a metadata key")
    _check_text(key, where, what="field name")
    return METADATA_PREFIX + key


def _parse_field(name: str, item: object, where: str, budget: _Budget) -> Node:
    field = _resolve_field(name, where)
    if isinstance(item, Mapping):
        if not item:
            raise FilterError(
                f"{where}: empty operator dict; give e.g. {{'eq': value}} "
                f"(operators: {', '.join(OPERATORS)})"
            )
        nodes: list[Node] = []
        for op, operand in item.items():
            op_where = _at(where, op)
            budget.node(op_where)
            nodes.append(_parse_condition(field, op, operand, op_where, budget))
        return _and(nodes)
    budget.node(where)
    if field == MEMORY_FIELD:
        raise FilterError(f"{where}: {_kind_rule(field, 'memory')}, not a plain value")
    if isinstance(item, str) and item == "*":
        return Cmp(field, "exists", None)
    if _is_list(item):
        hint = ""
        if name.isupper() or name.lower() in ("and", "or", "not"):
            hint = " (the logical keys are AND, OR and NOT, also and/or/not and $and/$or/$not)"
        raise FilterError(
            f"{where}: a list is not a plain value{hint}; use {{'in': [...]}} to match any of "
            "several values, or {'contains': x} to test whether a stored list holds x"
        )
    return _parse_condition(field, "eq", item, where, budget)


def _parse_condition(field: str, op: object, operand: object, where: str, budget: _Budget) -> Node:
    if not isinstance(op, str) or op not in OPERATORS:
        raise _unknown_operator(op, where)
    kind = field_kind(field)
    if op not in _OPS_BY_KIND[kind]:
        raise FilterError(f"{where}: {_kind_rule(field, kind)}; {op!r} is not accepted here")
    if op in ("in", "nin"):
        return _parse_list_condition(field, kind, op, operand, where, budget)
    if operand is None:
        # None means "null", and null is the same as absent, so eq/ne None are
        # presence tests; ordering or searching against null means nothing.
        if op == "eq":
            return Not(Cmp(field, "exists", None))
        if op == "ne":
            return Cmp(field, "exists", None)
        raise FilterError(
            f"{where}: {op!r} cannot take None; None works with eq/ne "
            "(is absent / is present), or give the plain value '*' for 'is present'"
        )
    if kind == "date":
        return _date_condition(field, op, _parse_when(operand, where))
    value = _scalar(operand, where)
    if kind != "metadata" and not isinstance(value, str):
        raise FilterError(f"{where}: {field!r} holds text; give a string, got {_describe(value)}")
    if op in _ORDERING and isinstance(value, bool):
        raise FilterError(
            f"{where}: {op!r} orders numbers or strings; booleans have no order, use eq/ne"
        )
    if op == "icontains" and not isinstance(value, str):
        raise FilterError(f"{where}: 'icontains' takes a string, got {_describe(value)}")
    if kind == "memory":
        _check_text_search(op, value, where)
    return Cmp(field, op, value)


def _parse_list_condition(
    field: str, kind: FieldKind, op: str, operand: object, where: str, budget: _Budget
) -> Node:
    if not _is_list(operand) or not operand:
        raise FilterError(
            f"{where}: {op!r} takes a non-empty list of values, e.g. {{'{op}': ['a', 'b']}}, "
            f"got {_describe(operand)}"
        )
    budget.list_values(len(operand), where)
    with_null = False
    parts: list[Node] = []
    if kind == "date":
        whens: list[str | _Day] = []
        for i, item in enumerate(operand):
            if item is None:
                with_null = True
            else:
                whens.append(_parse_when(item, f"{where}[{i}]"))
        if whens:
            parts.append(_date_in(field, whens))
    else:
        values: list[Scalar] = []
        for i, item in enumerate(operand):
            if item is None:
                with_null = True
                continue
            value = _scalar(item, f"{where}[{i}]")
            if kind != "metadata" and not isinstance(value, str):
                raise FilterError(
                    f"{where}[{i}]: {field!r} holds text; give strings, got {_describe(value)}"
                )
            values.append(value)
        if values:
            parts.append(Cmp(field, "in", tuple(values)))
    if with_null:
        parts.append(Not(Cmp(field, "exists", None)))
    positive = parts[0] if len(parts) == 1 else Or(tuple(parts))
    return positive if op == "in" else _negate(positive)


def _scalar(value: object, where: str) -> Scalar:
    # Subclasses (IntEnum, StrEnum...) are reduced to the plain type so the AST
    # compares, hashes and binds exactly like the JSON value it stands for.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise FilterError(
                f"{where}: the integer {value} is outside the signed 64-bit range the stores "
                "compare exactly; give a float if an approximation is fine"
            )
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FilterError(f"{where}: {value!r} cannot be stored in JSON or compared")
        return float(value)
    if isinstance(value, str):
        return _check_text(str.__str__(value), where, what="string")
    if isinstance(value, date):
        raise FilterError(
            f"{where}: dates are only understood for {', '.join(DATE_FIELDS)}; for a "
            "metadata value give the string exactly as it is stored"
        )
    raise FilterError(
        f"{where}: expected a string, number, boolean or None, got {_describe(value)}"
    )


def _check_text(text: str, where: str, *, what: str) -> str:
    # SQLite's JSON functions end strings at NUL, and lone surrogates cannot be
    # encoded as UTF-8 to bind at all: neither can be matched faithfully.
    if "\x00" in text:
        raise FilterError(f"{where}: the {what} contains a NUL character, which is not supported")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FilterError(
            f"{where}: the {what} contains a lone surrogate and is not valid Unicode"
        ) from None
    return text
