"""The filter language compiled to PostgreSQL, from the same AST as SQLite.

:func:`compile_postgres` emits a boolean expression over ``memories AS m``
with psycopg's ``%s`` placeholders. It must select exactly what
:func:`engramdb.core.filters.evaluate` selects; the differences from the
SQLite compiler are only of syntax:

- metadata is ``jsonb``: a key is looked up with ``m.metadata -> %s`` (any
  key, bound as a parameter), and ``eq``/``in``/list membership compare
  ``jsonb`` values, whose equality is already typed the way the reference is
  (``true`` is not ``1``, ``"5"`` is not ``5``, ``1`` is ``1.0``);
- numbers are ordered as exact ``numeric`` values of their JSON text;
- text is ordered with ``COLLATE "C"`` (code point order, as in Python and
  SQLite's BINARY), never with the database's locale;
- ``icontains`` folds ASCII only, with ``translate()``, independent of the
  database's collation and ``lc_ctype``;
- timestamps are ``timestamptz`` columns compared with ``timestamptz``
  parameters.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

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

__all__ = ["compile_postgres"]


@dataclass(frozen=True)
class _Sql:
    text: str
    params: tuple[Any, ...] = ()


def _q(*parts: str | _Sql) -> _Sql:
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


def _p(value: object, cast: str = "") -> _Sql:
    return _Sql(f"%s{cast}", (value,))


_ORDER: Final = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
ELEMENT_TEXT: Final = "(e.v #>> '{}')"
_UPPER: Final = string.ascii_uppercase
_LOWER: Final = string.ascii_lowercase


def _fold(sql: str) -> str:
    # ASCII-only case folding, whatever the database's lc_ctype says.
    return f"translate({sql}, '{_UPPER}', '{_LOWER}')"


def compile_postgres(node: Node, *, scope_table: str = "memory_scope") -> tuple[str, list[Any]]:
    """Compile an AST to a PostgreSQL boolean expression over ``memories AS m``.

    ``scope_table`` names the (schema-qualified) table of attached sessions.
    Returns ``(sql, params)`` with ``%s`` placeholders. Where the filter does
    not match the expression is false or NULL, as ``WHERE`` expects. Raises
    :class:`~engramdb.errors.FilterError` for a node it cannot compile.
    """
    fragment = _Compiler(scope_table).node(node)
    return fragment.text, list(fragment.params)


class _Compiler:
    def __init__(self, scope_table: str) -> None:
        self.scope_table = scope_table

    def node(self, node: Node) -> _Sql:
        if isinstance(node, And):
            if not node.children:
                return _Sql("TRUE")
            return _q("(", _join(" AND ", (self.node(c) for c in node.children)), ")")
        if isinstance(node, Or):
            if not node.children:
                return _Sql("FALSE")
            return _q("(", _join(" OR ", (self.node(c) for c in node.children)), ")")
        if isinstance(node, Not):
            return _not(self.node(node.child))
        if isinstance(node, Cmp):
            return self.cmp(node)
        raise FilterError(f"not a filter node: {_describe(node)}")

    def cmp(self, node: Cmp) -> _Sql:
        kind = _check_cmp(node)
        if node.op in ("ne", "nin"):
            return _not(self.cmp(Cmp(node.field, _COMPLEMENT[node.op], node.value)))
        if kind == "multi":
            return self.multi(node)
        if kind == "metadata":
            key = metadata_key(node.field)
            assert key is not None
            return _metadata(key, node)
        if kind == "memory":
            return _column("m.text", node, cast="")
        if kind == "date":
            return _column(f"m.{node.field}", node, cast="::timestamptz")
        return _column(f"m.{node.field}", node, cast="")

    def multi(self, node: Cmp) -> _Sql:
        column = f"m.{node.field}"

        def extra(condition: str | _Sql) -> _Sql:
            return _q(
                f"EXISTS (SELECT 1 FROM {self.scope_table} AS ms WHERE ms.memory_rowid = m.rowid "
                f"AND ms.kind = '{node.field}' AND ",
                condition,
                ")",
            )

        if node.op == "exists":
            return _q(f"({column} IS NOT NULL OR ", extra("TRUE"), ")")
        values = list(node.value) if isinstance(node.value, tuple | list) else [node.value]
        return _q(
            f"({column} = ANY(",
            _p(values, "::text[]"),
            ") OR ",
            extra(_q("ms.value = ANY(", _p(values, "::text[]"), ")")),
            ")",
        )


def _not(fragment: _Sql) -> _Sql:
    # Comparisons may be NULL for absent values; NOT NULL is NULL, so negation
    # first turns NULL into false to keep two-valued logic.
    return _q("NOT COALESCE(", fragment, ", FALSE)")


def _bind_time(value: object) -> object:
    # The AST holds canonical UTC strings; bind real timestamps.
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _column(column: str, node: Cmp, *, cast: str) -> _Sql:
    op, value = node.op, node.value
    date = cast == "::timestamptz"
    bind = _bind_time if date else (lambda v: v)
    if op == "exists":
        return _Sql(f"{column} IS NOT NULL")
    if op == "eq":
        return _q(f"{column} = ", _p(bind(value), cast or "::text"))
    if op in _ORDERING:
        collate = "" if date else ' COLLATE "C"'
        return _q(f"{column}{collate} {_ORDER[op]} ", _p(bind(value), cast or "::text"))
    if op == "in":
        assert isinstance(value, tuple | list)
        array = "::timestamptz[]" if date else "::text[]"
        return _q(f"{column} = ANY(", _p([bind(v) for v in value], array), ")")
    if op == "contains":
        return _q(f"strpos({column}, ", _p(value, "::text"), ") > 0")
    return _q(f"strpos({_fold(column)}, {_fold('%s::text')}) > 0", _Sql("", (value,)))


def _jsonb(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _numeric(value: object) -> str:
    # repr() of a float is the shortest decimal that reads back as it, which is
    # also what json.dumps wrote for stored floats: equal floats stay equal.
    return repr(value) if isinstance(value, float) else str(value)


def _metadata(key: str, node: Cmp) -> _Sql:
    value_sql = _q("(m.metadata -> ", _p(key, "::text"), ")")
    return _metadata_test(value_sql, node)


def _metadata_test(x: _Sql, node: Cmp) -> _Sql:
    op, value = node.op, node.value
    if op == "exists":
        return _q("jsonb_typeof(", x, ") <> 'null'")
    if op == "eq":
        return _q(x, " = ", _p(_jsonb(value), "::jsonb"))
    if op == "in":
        assert isinstance(value, tuple | list)
        return _q(x, " = ANY(", _p([_jsonb(v) for v in value], "::jsonb[]"), ")")
    if op in _ORDERING:
        if _is_number(value):
            # CASE, not AND: SQL does not promise to test the type before the cast.
            return _q(
                "(CASE WHEN jsonb_typeof(",
                x,
                ") = 'number' THEN (",
                x,
                f")::numeric {_ORDER[op]} ",
                _p(_numeric(value), "::numeric"),
                " END)",
            )
        return _q(
            "(jsonb_typeof(",
            x,
            ") = 'string' AND (",
            x,
            " #>> '{}') COLLATE \"C\" ",
            f"{_ORDER[op]} ",
            _p(value, "::text"),
            ")",
        )
    if op == "contains":
        member = _q(
            "(jsonb_typeof(",
            x,
            ") = 'array' AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(",
            x,
            ") = 'array' THEN ",
            x,
            " ELSE '[]'::jsonb END) AS e(v) WHERE e.v = ",
            _p(_jsonb(value), "::jsonb"),
            "))",
        )
        if not isinstance(value, str):
            return member
        substring = _q(
            "(jsonb_typeof(",
            x,
            ") = 'string' AND strpos(",
            x,
            " #>> '{}', ",
            _p(value, "::text"),
            ") > 0)",
        )
        return _q("(", substring, " OR ", member, ")")
    if op == "icontains":
        assert isinstance(value, str)
        folded = _fold("%s::text")
        substring = _q(
            "(jsonb_typeof(",
            x,
            ") = 'string' AND strpos(",
            _fold_sql(_q(x, " #>> '{}'")),
            f", {folded}) > 0)",
            _Sql("", (value,)),
        )
        member = _q(
            "(jsonb_typeof(",
            x,
            ") = 'array' AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(",
            x,
            ") = 'array' THEN ",
            x,
            " ELSE '[]'::jsonb END) AS e(v) WHERE jsonb_typeof(e.v) = 'string' AND ",
            f"{_fold(ELEMENT_TEXT)} = {folded})",
            _Sql("", (value,)),
            ")",
        )
        return _q("(", substring, " OR ", member, ")")
    raise FilterError(f"operator {op!r} has no PostgreSQL translation")


def _fold_sql(fragment: _Sql) -> _Sql:
    return _q("translate(", fragment, f", '{_UPPER}', '{_LOWER}')")
