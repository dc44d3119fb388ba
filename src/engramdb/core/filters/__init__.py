"""The filter language: parsed once into a small AST, compiled per backend.

A filter is a dict in mem0's shape (``{"category": "work", "score": {"gte": 5}}``,
``{"OR": [{...}, {...}]}``, ``{"$not": [{...}, {...}]}``). :func:`parse_filters`
validates it and normalises every value once (dates to the stored UTC format, ``None``
to absence tests, whole days to ranges), so a compiler only has to emit syntax.
:func:`compile_sqlite` is the SQLite compiler; :func:`evaluate` is the reference
semantics every compiler must agree with.
The full language reference is ``docs/filters.md``.

The package, in the order a filter goes through it: :mod:`.nodes` (the AST, the field
and operator tables, the checks every compiler runs), :mod:`.dates` (date values),
:mod:`.parse` (dict to AST, with the size limits), :mod:`.scope` (the caller's scope
ids split off first), :mod:`.reference` (:func:`evaluate`) and :mod:`.sqlite`
(:func:`compile_sqlite`); PostgreSQL's compiler is :mod:`engramdb.core.filters_pg`.
Every public name is importable from here.

The semantics in one paragraph: values are typed (string, number, boolean) and a
stored value of another type never matches (``True`` is not ``1``, ``"5"`` is not
``5``); ``gt``/``gte``/``lt``/``lte`` order numbers or strings only; a missing key and
a JSON ``null`` are the same thing, "absent"; ``ne`` and ``nin`` are exactly ``NOT eq``
and ``NOT in``, so an absent value counts as "not equal"; ``contains`` is a substring
test on strings and a membership test on lists; ``icontains`` folds ASCII case only;
``memory`` (the memory's text) takes only ``contains``/``icontains``.
"""

from engramdb.core.filters.nodes import (
    CORE_FIELDS,
    DATE_FIELDS,
    LOGICAL_KEYS,
    MAX_TEXT_SEARCH,
    MEMORY_FIELD,
    METADATA_PREFIX,
    MULTI_VALUED_FIELDS,
    OPERATORS,
    SCOPE_FIELDS,
    TEXT_FIELDS,
    And,
    Cmp,
    FieldKind,
    Node,
    Not,
    Or,
    field_kind,
    metadata_key,
)
from engramdb.core.filters.parse import MAX_DEPTH, MAX_LIST_VALUES, MAX_NODES, parse_filters
from engramdb.core.filters.reference import evaluate
from engramdb.core.filters.scope import split_scope
from engramdb.core.filters.sqlite import compile_sqlite

__all__ = [
    "CORE_FIELDS",
    "DATE_FIELDS",
    "LOGICAL_KEYS",
    "MAX_DEPTH",
    "MAX_LIST_VALUES",
    "MAX_NODES",
    "MAX_TEXT_SEARCH",
    "MEMORY_FIELD",
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
