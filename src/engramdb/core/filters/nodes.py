"""The filter AST, the field and operator tables, and the checks every compiler runs.

:func:`_check_cmp` validates a comparison (possibly built by hand) so that no backend
silently drops or reinterprets a condition it does not understand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, TypeAlias

from engramdb.errors import FilterError

# --------------------------------------------------------------------------- the AST

Scalar: TypeAlias = str | int | float | bool


@dataclass(frozen=True)
class Cmp:
    """One comparison: ``field op value``.

    ``op`` is one of :data:`OPERATORS` or ``"exists"``. After :func:`parse_filters`
    the value is normalised: a scalar (``str``/``int``/``float``/``bool``, never
    ``None``) for single-value operators, a non-empty tuple of scalars for
    ``in``/``nin``, ``None`` for ``exists``; date fields hold canonical UTC strings;
    metadata fields are spelled ``"metadata.<key>"``.
    """

    field: str
    op: str
    value: object


@dataclass(frozen=True)
class And:
    """True when every child is true (an empty ``And`` is true)."""

    children: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    """True when at least one child is true (an empty ``Or`` is false)."""

    children: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    """True when the child is false (two-valued: an absent field is simply false)."""

    child: Node


Node: TypeAlias = Cmp | And | Or | Not

# --------------------------------------------------------------------------- fields and operators

SCOPE_FIELDS: Final = ("user_id", "agent_id", "run_id")
#: Fields with a primary value in ``memories`` plus extra values in ``memory_scope``.
MULTI_VALUED_FIELDS: Final = ("agent_id", "run_id")
TEXT_FIELDS: Final = ("id", "user_id", "actor_id", "role", "attributed_to", "memory_type", "hash")
DATE_FIELDS: Final = ("created_at", "updated_at", "observed_at", "expires_at")
CORE_FIELDS: Final = TEXT_FIELDS + DATE_FIELDS + MULTI_VALUED_FIELDS
#: ``"metadata.<key>"`` names a metadata key explicitly (and is the AST's spelling).
METADATA_PREFIX: Final = "metadata."
#: The memory's text: searchable with ``contains``/``icontains`` only.
MEMORY_FIELD: Final = "memory"
#: The longest substring a ``memory`` condition may search for, in characters.
MAX_TEXT_SEARCH: Final = 1000


OPERATORS: Final = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains")
_AST_OPERATORS: Final = frozenset((*OPERATORS, "exists"))
_ORDERING: Final = frozenset(("gt", "gte", "lt", "lte"))
#: mem0's platform spelling (``AND``), lowercase, and the Mongo-style spelling mem0's
#: vector stores translate to (``$and``) are all accepted, because LLM-written and
#: hand-written filters mix them. Other casings ("And") are not, so they cannot
#: silently become metadata keys (their list value is rejected with a hint instead),
#: and any other bare name starting with ``$`` is an error (see ``_dollar_key``).
LOGICAL_KEYS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "AND": "AND",
        "OR": "OR",
        "NOT": "NOT",
        "and": "AND",
        "or": "OR",
        "not": "NOT",
        "$and": "AND",
        "$or": "OR",
        "$not": "NOT",
    }
)


FieldKind: TypeAlias = Literal["text", "date", "multi", "metadata", "memory"]

_OPS_BY_KIND: Final[dict[FieldKind, frozenset[str]]] = {
    "text": _AST_OPERATORS,
    "metadata": _AST_OPERATORS,
    "date": _AST_OPERATORS - {"contains", "icontains"},
    "multi": frozenset(("eq", "ne", "in", "nin", "exists")),
    "memory": frozenset(("contains", "icontains")),
}


def metadata_key(field: str) -> str | None:
    """Return the metadata key a field name refers to, or ``None`` for a core field.

    ``"metadata.<key>"`` always means the metadata key ``<key>`` (taken literally: dots
    are part of the key, not a path); any other name that is not a core field is a
    metadata key too.
    """
    if field.startswith(METADATA_PREFIX):
        return field[len(METADATA_PREFIX) :]
    return None if field in CORE_FIELDS or field == MEMORY_FIELD else field


def field_kind(field: str) -> FieldKind:
    """Classify a field name: ``"text"``, ``"date"``, ``"multi"``, ``"metadata"`` or ``"memory"``.

    ``memory`` is the memory's text (substring search only); ``multi`` are the scope
    ids a memory can hold several of (``agent_id``, ``run_id``); compilers dispatch on
    this so every backend agrees on which fields are columns.
    """
    if metadata_key(field) is not None:
        return "metadata"
    if field == MEMORY_FIELD:
        return "memory"
    if field in MULTI_VALUED_FIELDS:
        return "multi"
    return "date" if field in DATE_FIELDS else "text"


# --------------------------------------------------------------------------- errors and AST checks


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


_COMPLEMENT: Final = {"eq": "ne", "ne": "eq", "in": "nin", "nin": "in"}


# SQL-style spellings people try first; the error names the operator to use instead.
_SYMBOLS: Final = {
    "=": "eq",
    "==": "eq",
    "!=": "ne",
    "<>": "ne",
    ">": "gt",
    ">=": "gte",
    "<": "lt",
    "<=": "lte",
}


def _unknown_operator(op: object, where: str) -> FilterError:
    hint = ""
    if isinstance(op, str):
        bare = op.lstrip("$").lower()
        if bare in OPERATORS:
            hint = f" (write {bare!r})"
        elif op in _SYMBOLS:
            hint = f" (write {_SYMBOLS[op]!r})"
        elif bare == "exists":
            hint = " (give the plain value '*' for 'is present' and None for 'is absent')"
        elif bare.upper() in LOGICAL_KEYS:
            hint = " (AND/OR/NOT go beside field names: {'OR': [{'a': 1}, {'b': 2}]})"
    return FilterError(
        f"{where}: unknown operator {op!r}{hint}; a field takes a plain value or a dict of "
        f"operators: {', '.join(OPERATORS)}"
    )


def _kind_rule(field: str, kind: FieldKind) -> str:
    if kind == "memory":
        return (
            f"{field!r} is the memory's text; it accepts only a substring search, "
            "{'contains': 'text'} or {'icontains': 'text'}"
        )
    if kind == "multi":
        return (
            f"{field!r} can hold several values (the primary one and the other sessions the "
            "memory was seen in), so it accepts eq, ne, in, nin and the value '*'"
        )
    return (
        f"{field!r} is a timestamp; it accepts eq, ne, gt, gte, lt, lte, in, nin and '*' "
        "(for ranges use gte/lt)"
    )


def _check_cmp(node: Cmp) -> FieldKind:
    """Validate a comparison (possibly built by hand) and return its field kind.

    Compilers and :func:`evaluate` call this so that no backend silently drops or
    reinterprets a condition it does not understand.
    """
    if not isinstance(node.field, str) or not node.field:
        raise FilterError(f"{node!r}: the field must be a non-empty string")
    if node.op not in _AST_OPERATORS:
        raise _unknown_operator(node.op, repr(node))
    kind = field_kind(node.field)
    if node.op not in _OPS_BY_KIND[kind]:
        raise FilterError(f"{node!r}: {_kind_rule(node.field, kind)}")
    if node.op == "exists":
        if node.value is not None:
            raise FilterError(f"{node!r}: 'exists' takes no value (None)")
        return kind
    values = node.value if node.op in ("in", "nin") else (node.value,)
    if not isinstance(values, tuple | list) or not values:
        raise FilterError(f"{node!r}: {node.op!r} needs a non-empty tuple of values")
    for value in values:
        if not _is_scalar(value):
            raise FilterError(f"{node!r}: {value!r} is not a string, number or boolean")
        if kind != "metadata" and not isinstance(value, str):
            raise FilterError(f"{node!r}: {node.field!r} compares strings only")
        if node.op in _ORDERING and isinstance(value, bool):
            raise FilterError(f"{node!r}: booleans have no order")
        if node.op == "icontains" and not isinstance(value, str):
            raise FilterError(f"{node!r}: 'icontains' takes a string")
        if kind == "memory":
            _check_text_search(node.op, value, repr(node))
    return kind


def _check_text_search(op: str, value: object, where: str) -> None:
    """A search of the memory's text needs a non-empty string of bounded length."""
    if not isinstance(value, str) or not value:
        raise FilterError(f"{where}: {op!r} on 'memory' takes a non-empty string")
    if len(value) > MAX_TEXT_SEARCH:
        raise FilterError(
            f"{where}: {op!r} on 'memory' takes at most {MAX_TEXT_SEARCH} characters, "
            f"got {len(value)}"
        )


def _is_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str | int)  # bool is an int


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
