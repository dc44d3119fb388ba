"""The filter language: parsed once into a small AST, compiled per backend.

A filter is a dict in mem0's shape (``{"category": "work", "score": {"gte": 5}}``,
``{"OR": [{...}, {...}]}``, ``{"$not": [{...}, {...}]}``). :func:`parse_filters`
validates it and normalises every value once (dates to the stored UTC format, ``None``
to absence tests, whole days to ranges), so a compiler only has to emit syntax.
:func:`compile_sqlite` is the SQLite compiler; :func:`evaluate` is the reference
semantics every compiler must agree with.
The full language reference is ``docs/filters.md``.

The semantics in one paragraph: values are typed (string, number, boolean) and a
stored value of another type never matches (``True`` is not ``1``, ``"5"`` is not
``5``); ``gt``/``gte``/``lt``/``lte`` order numbers or strings only; a missing key and
a JSON ``null`` are the same thing, "absent"; ``ne`` and ``nin`` are exactly ``NOT eq``
and ``NOT in``, so an absent value counts as "not equal"; ``contains`` is a substring
test on strings and a membership test on lists; ``icontains`` folds ASCII case only.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias, TypeGuard, cast

from engramdb.errors import FilterError

__all__ = [
    "CORE_FIELDS",
    "DATE_FIELDS",
    "LOGICAL_KEYS",
    "MAX_DEPTH",
    "MAX_LIST_VALUES",
    "MAX_NODES",
    "METADATA_PREFIX",
    "MULTI_VALUED_FIELDS",
    "OPERATORS",
    "SCOPE_FIELDS",
    "TEXT_FIELDS",
    "And",
    "Cmp",
    "FieldKind",
    "Node",
    "Not",
    "Or",
    "compile_sqlite",
    "evaluate",
    "field_kind",
    "metadata_key",
    "parse_filters",
    "split_scope",
]

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

# --------------------------------------------------------------------------- fields

SCOPE_FIELDS: Final = ("user_id", "agent_id", "run_id")
#: Fields with a primary value in ``memories`` plus extra values in ``memory_scope``.
MULTI_VALUED_FIELDS: Final = ("agent_id", "run_id")
TEXT_FIELDS: Final = ("id", "user_id", "actor_id", "role", "attributed_to", "memory_type", "hash")
DATE_FIELDS: Final = ("created_at", "updated_at", "observed_at", "expires_at")
CORE_FIELDS: Final = TEXT_FIELDS + DATE_FIELDS + MULTI_VALUED_FIELDS
#: ``"metadata.<key>"`` names a metadata key explicitly (and is the AST's spelling).
METADATA_PREFIX: Final = "metadata."
#: Names of the memory record that metadata may not use (see core/validate.py) but
#: that are not filterable either: as metadata keys they would silently never match.
#: ``score`` is not among them: it is not stored with a memory, so (as in mem0) it is
#: an ordinary metadata key; the relevance score is bounded with ``threshold=``.
_NOT_FILTERABLE: Final = {
    "memory": "the memory text is searched through the query, not filters",
    "deleted_at": "deleted memories are never listed; use history() to see them",
    "linked_memory_ids": "links are not filterable",
}

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

MAX_DEPTH: Final = 32
MAX_NODES: Final = 500
#: Total values over all ``in``/``nin`` lists: keeps the bound parameters far below
#: SQLite's 32766-variable limit whatever the shape of the filter.
MAX_LIST_VALUES: Final = 5000

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

FieldKind: TypeAlias = Literal["text", "date", "multi", "metadata"]

_OPS_BY_KIND: Final[dict[FieldKind, frozenset[str]]] = {
    "text": _AST_OPERATORS,
    "metadata": _AST_OPERATORS,
    "date": _AST_OPERATORS - {"contains", "icontains"},
    "multi": frozenset(("eq", "ne", "in", "nin", "exists")),
}


def metadata_key(field: str) -> str | None:
    """Return the metadata key a field name refers to, or ``None`` for a core field.

    ``"metadata.<key>"`` always means the metadata key ``<key>`` (taken literally: dots
    are part of the key, not a path); any other name that is not a core field is a
    metadata key too.
    """
    if field.startswith(METADATA_PREFIX):
        return field[len(METADATA_PREFIX) :]
    return None if field in CORE_FIELDS else field


def field_kind(field: str) -> FieldKind:
    """Classify a field name: ``"text"``, ``"date"``, ``"multi"`` or ``"metadata"``.

    ``multi`` are the scope ids a memory can hold several of (``agent_id``,
    ``run_id``); compilers dispatch on this so every backend agrees on which fields
    are columns.
    """
    if metadata_key(field) is not None:
        return "metadata"
    if field in MULTI_VALUED_FIELDS:
        return "multi"
    return "date" if field in DATE_FIELDS else "text"


# --------------------------------------------------------------------------- parsing


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


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _at(where: str, key: object) -> str:
    return f"{where}[{key!r}]"


def _is_list(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    return isinstance(value, list | tuple)


def _and(parts: list[Node]) -> Node:
    flat: list[Node] = []
    for part in parts:
        flat.extend(part.children if isinstance(part, And) else (part,))
    return flat[0] if len(flat) == 1 else And(tuple(flat))


_COMPLEMENT: Final = {"eq": "ne", "ne": "eq", "in": "nin", "nin": "in"}


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
    if name in CORE_FIELDS:
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
    return Cmp(field, op, value)


def _kind_rule(field: str, kind: FieldKind) -> str:
    if kind == "multi":
        return (
            f"{field!r} can hold several values (the primary one and the other sessions the "
            "memory was seen in), so it accepts eq, ne, in, nin and the value '*'"
        )
    return (
        f"{field!r} is a timestamp; it accepts eq, ne, gt, gte, lt, lte, in, nin and '*' "
        "(for ranges use gte/lt)"
    )


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


# --------------------------------------------------------------------------- dates


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


# --------------------------------------------------------------------------- AST checks


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
    return kind


def _is_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str | int)  # bool is an int


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# --------------------------------------------------------------------------- reference

# icontains folds ASCII only: it is the one folding every SQL backend can reproduce
# exactly (SQLite's built-in lower() is ASCII-only).
_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _fold(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def evaluate(node: Node, record: Mapping[str, Any]) -> bool:
    """Decide in Python whether ``record`` matches ``node``: the reference semantics.

    ``record`` holds the core fields (missing or ``None`` = absent; timestamps as
    stored strings or ``datetime``), ``"metadata"`` (a dict, or its JSON text) and the
    extra scope values in ``"run_ids"`` / ``"agent_ids"`` (sets; the primary
    ``run_id`` / ``agent_id`` are counted whether or not the sets repeat them).
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

# --------------------------------------------------------------------------- SQLite


@dataclass(frozen=True)
class _Sql:
    """A fragment of SQL with its ``?`` parameters, in the order they appear."""

    text: str
    params: tuple[Any, ...] = ()


def _q(*parts: str | _Sql) -> _Sql:
    # Concatenating text and parameters together is what keeps every ? paired
    # with its value, however the fragments nest.
    texts: list[str] = []
    params: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        else:
            texts.append(part.text)
            params.extend(part.params)
    return _Sql("".join(texts), tuple(params))


def _join(separator: str, fragments: Iterable[_Sql]) -> _Sql:
    items: list[str | _Sql] = []
    for i, fragment in enumerate(fragments):
        if i:
            items.append(separator)
        items.append(fragment)
    return _q(*items)


def _param(value: object) -> _Sql:
    return _Sql("?", (value,))


def _param_list(values: Iterable[object]) -> _Sql:
    items = tuple(values)
    return _Sql(", ".join("?" for _ in items), items)


_SQL_ORDER: Final = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def compile_sqlite(node: Node) -> tuple[str, list[Any]]:
    """Compile an AST to a SQLite boolean expression over ``memories AS m``.

    Returns ``(sql, params)`` with anonymous ``?`` placeholders, to be used as (part
    of) a ``WHERE`` clause; the query must name the memories table ``m`` and have
    ``memory_scope`` reachable. Where the filter does not match, the expression is 0
    or NULL (as in ``WHERE``); wrap it in ``COALESCE(..., 0)`` to select it as a
    value. Raises :class:`~engramdb.errors.FilterError` for a node it cannot compile.
    """
    fragment = _sqlite_node(node)
    return fragment.text, list(fragment.params)


def _sqlite_node(node: Node) -> _Sql:
    if isinstance(node, And):
        if not node.children:
            return _Sql("1")
        return _q("(", _join(" AND ", (_sqlite_node(c) for c in node.children)), ")")
    if isinstance(node, Or):
        if not node.children:
            return _Sql("0")
        return _q("(", _join(" OR ", (_sqlite_node(c) for c in node.children)), ")")
    if isinstance(node, Not):
        return _sqlite_not(_sqlite_node(node.child))
    if isinstance(node, Cmp):
        return _sqlite_cmp(node)
    raise FilterError(f"not a filter node: {_describe(node)}")


def _sqlite_not(fragment: _Sql) -> _Sql:
    # Positive comparisons may yield NULL for absent values (so indexes stay usable);
    # in an AND/OR tree NULL then acts exactly like false, but NOT NULL is NULL, so
    # negation must first turn NULL into 0 to keep two-valued logic.
    return _q("NOT COALESCE(", fragment, ", 0)")


def _sqlite_cmp(node: Cmp) -> _Sql:
    kind = _check_cmp(node)
    if node.op in ("ne", "nin"):
        return _sqlite_not(_sqlite_cmp(Cmp(node.field, _COMPLEMENT[node.op], node.value)))
    if kind == "multi":
        return _sqlite_multi(node)
    if kind == "metadata":
        key = metadata_key(node.field)
        assert key is not None
        return _sqlite_metadata(key, node)
    return _sqlite_column(f"m.{node.field}", node)


def _sqlite_column(column: str, node: Cmp) -> _Sql:
    op, value = node.op, node.value
    if op == "exists":
        return _Sql(f"{column} IS NOT NULL")
    if op in _SQL_ORDER:
        return _q(f"{column} {_SQL_ORDER[op]} ", _param(value))
    if op == "in":
        assert isinstance(value, tuple | list)
        return _q(f"{column} IN (", _param_list(value), ")")
    # instr() rather than LIKE: no wildcards to escape, case-sensitive by nature, and
    # independent of PRAGMA case_sensitive_like.
    if op == "contains":
        return _q(f"instr({column}, ", _param(value), ") > 0")
    return _q(f"instr(lower({column}), lower(", _param(value), ")) > 0")


def _sqlite_multi(node: Cmp) -> _Sql:
    column = f"m.{node.field}"

    def extra(condition: str | _Sql) -> _Sql:
        return _q(
            "EXISTS (SELECT 1 FROM memory_scope AS ms WHERE ms.memory_rowid = m.rowid "
            f"AND ms.kind = '{node.field}' AND ",
            condition,
            ")",
        )

    if node.op == "exists":
        return _q(f"({column} IS NOT NULL OR ", extra("ms.value IS NOT NULL"), ")")
    values = node.value if node.op == "in" else (node.value,)
    assert isinstance(values, tuple | list)
    return _q(
        f"({column} IN (",
        _param_list(values),
        ") OR ",
        extra(_q("ms.value IN (", _param_list(values), ")")),
        ")",
    )


def _path_safe(key: str) -> bool:
    # SQLite (before 3.45) matches a quoted path label against the raw JSON text of
    # the key, escapes included: only keys that JSON writers never escape (printable
    # ASCII without quote and backslash) can be found through a json_extract path.
    return all(" " <= ch <= "~" and ch not in '"\\' for ch in key)


ElementTest = Callable[[Callable[[str, str], _Sql]], _Sql]


def _sqlite_metadata(key: str, node: Cmp) -> _Sql:
    if _path_safe(key):
        # A literal path (not a parameter) so an expression index on
        # json_extract(metadata, '$."key"') can serve the query.
        path = "'" + f'$."{key}"'.replace("'", "''") + "'"

        def path_elements(test: Callable[[str, str], _Sql]) -> _Sql:
            return _q(
                f"EXISTS (SELECT 1 FROM json_each(m.metadata, {path}) AS e WHERE ",
                test("e.type", "e.value"),
                ")",
            )

        return _metadata_test(
            node,
            f"json_type(m.metadata, {path})",
            f"json_extract(m.metadata, {path})",
            path_elements,
        )

    # Any other key is looked up through json_each, whose key column is decoded and
    # compared as a bound parameter: no key is inexpressible this way.
    def each_elements(test: Callable[[str, str], _Sql]) -> _Sql:
        # The CASE keeps json_each from parsing a plain string value as JSON,
        # whatever order SQLite evaluates the surrounding conditions in.
        return _q(
            "EXISTS (SELECT 1 FROM json_each(CASE WHEN j.type = 'array' THEN j.value "
            "ELSE '[]' END) AS e WHERE ",
            test("e.type", "e.value"),
            ")",
        )

    return _q(
        "EXISTS (SELECT 1 FROM json_each(m.metadata) AS j WHERE j.key = ",
        _param(key),
        " AND ",
        _metadata_test(node, "j.type", "j.value", each_elements),
        ")",
    )


def _type_test(type_sql: str, value: Scalar) -> str:
    if isinstance(value, bool):
        return f"{type_sql} = '{'true' if value else 'false'}'"
    if isinstance(value, str):
        return f"{type_sql} = 'text'"
    return f"{type_sql} IN ('integer', 'real')"


def _typed_eq(type_sql: str, value_sql: str, value: Scalar) -> _Sql:
    # json_extract turns true/false into 1/0, so booleans are matched by JSON type
    # alone and every other value only within its own JSON type.
    if isinstance(value, bool):
        return _Sql(_type_test(type_sql, value))
    return _q(f"({_type_test(type_sql, value)} AND {value_sql} = ", _param(value), ")")


def _metadata_test(node: Cmp, type_sql: str, value_sql: str, elements: ElementTest) -> _Sql:
    op, value = node.op, node.value
    if op == "exists":
        return _Sql(f"{type_sql} <> 'null'")
    if op == "in":
        assert isinstance(value, tuple | list)
        return _metadata_in(type_sql, value_sql, value)
    scalar = cast(Scalar, value)  # _check_cmp has vetted it
    if op == "eq":
        return _typed_eq(type_sql, value_sql, scalar)
    if op in _ORDERING:
        return _q(
            f"({_type_test(type_sql, scalar)} AND {value_sql} {_SQL_ORDER[op]} ",
            _param(scalar),
            ")",
        )
    if op == "contains":
        member = _q(
            f"({type_sql} = 'array' AND ",
            elements(lambda t, v: _typed_eq(t, v, scalar)),
            ")",
        )
        if not isinstance(scalar, str):
            return member
        substring = _q(f"({type_sql} = 'text' AND instr({value_sql}, ", _param(scalar), ") > 0)")
        return _q("(", substring, " OR ", member, ")")
    # icontains: ASCII case folding through SQLite's built-in lower().
    substring = _q(
        f"({type_sql} = 'text' AND instr(lower({value_sql}), lower(", _param(scalar), ")) > 0)"
    )
    member = _q(
        f"({type_sql} = 'array' AND ",
        elements(lambda t, v: _q(f"({t} = 'text' AND lower({v}) = lower(", _param(scalar), "))")),
        ")",
    )
    return _q("(", substring, " OR ", member, ")")


def _metadata_in(type_sql: str, value_sql: str, values: Iterable[object]) -> _Sql:
    texts = [v for v in values if isinstance(v, str)]
    numbers = [v for v in values if _is_number(v)]
    flags = sorted({"true" if v else "false" for v in values if isinstance(v, bool)})
    parts: list[_Sql] = []
    if texts:
        parts.append(_q(f"({type_sql} = 'text' AND {value_sql} IN (", _param_list(texts), "))"))
    if numbers:
        parts.append(
            _q(
                f"({type_sql} IN ('integer', 'real') AND {value_sql} IN (",
                _param_list(numbers),
                "))",
            )
        )
    if flags:
        parts.append(_Sql(f"{type_sql} IN ({', '.join(repr(f) for f in flags)})"))
    return _q("(", _join(" OR ", parts), ")")
