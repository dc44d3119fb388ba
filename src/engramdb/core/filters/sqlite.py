"""The SQLite compiler: an AST to a boolean expression over ``memories AS m``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, cast

from engramdb.core.filters.nodes import (
    _COMPLEMENT,
    _ORDERING,
    And,
    Cmp,
    Node,
    Not,
    Or,
    Scalar,
    _check_cmp,
    _describe,
    _is_number,
    metadata_key,
)
from engramdb.errors import FilterError


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
    if kind == "memory":
        return _sqlite_column("m.text", node)
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
