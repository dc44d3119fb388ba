"""The filter language: SQLite and the Python reference must select the same rows.

(tests/test_postgres.py runs the same property test on PostgreSQL with this module's
generators; the explicit examples near the end run on both backends.)
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb import Memory, MetadataError, ScopeError
from engramdb.core.filters import (
    MAX_DEPTH,
    MAX_NODES,
    OPERATORS,
    SCOPE_FIELDS,
    And,
    Cmp,
    Node,
    Not,
    Or,
    compile_sqlite,
    evaluate,
    parse_filters,
    split_scope,
)
from engramdb.core.filters_pg import compile_postgres
from engramdb.core.validate import RESERVED_METADATA_KEYS, check_metadata
from engramdb.errors import FilterError, ValidationError
from pg import PgServer

# --------------------------------------------------------------------------- database

SCHEMA = """
CREATE TABLE memories (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    text TEXT,
    user_id TEXT,
    agent_id TEXT,
    run_id TEXT,
    actor_id TEXT,
    role TEXT,
    attributed_to TEXT,
    memory_type TEXT,
    hash TEXT,
    created_at TEXT,
    updated_at TEXT,
    observed_at TEXT,
    expires_at TEXT,
    metadata TEXT
);
CREATE TABLE memory_scope (
    memory_rowid INTEGER NOT NULL REFERENCES memories(rowid),
    kind TEXT NOT NULL CHECK (kind IN ('run_id', 'agent_id')),
    value TEXT NOT NULL
);
CREATE INDEX memory_scope_by_memory ON memory_scope (memory_rowid, kind, value);
"""

CORE_COLUMNS = (
    "id",
    "text",
    "user_id",
    "agent_id",
    "run_id",
    "actor_id",
    "role",
    "attributed_to",
    "memory_type",
    "hash",
    "created_at",
    "updated_at",
    "observed_at",
    "expires_at",
)


@dataclass
class Row:
    """One memory as the test stores it and as evaluate() sees it."""

    core: dict[str, str | None]
    metadata: dict[str, Any]
    run_ids: set[str] = field(default_factory=set)
    agent_ids: set[str] = field(default_factory=set)
    ascii_json: bool = True

    def record(self, rowid: int) -> dict[str, Any]:
        return {
            **self.core,
            "id": row_id(rowid, self),
            "memory": self.core.get("text"),
            "metadata": self.metadata,
            "run_ids": self.run_ids,
            "agent_ids": self.agent_ids,
        }


def row_id(rowid: int, row: Row) -> str:
    return row.core.get("id") or f"mem-{rowid}"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    path: Path = tmp_path_factory.mktemp("filters") / "memories.db"
    conn = sqlite3.connect(path)
    # A real file, but without fsyncs: the property tests rewrite it thousands of times.
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA journal_mode = MEMORY")
    conn.executescript(SCHEMA)
    yield conn
    conn.close()


def load(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    with conn:
        conn.execute("DELETE FROM memory_scope")
        conn.execute("DELETE FROM memories")
        for rowid, row in enumerate(rows, start=1):
            core = {**row.core, "id": row_id(rowid, row)}
            conn.execute(
                f"INSERT INTO memories (rowid, {', '.join(CORE_COLUMNS)}, metadata) "
                f"VALUES (?, {', '.join('?' for _ in CORE_COLUMNS)}, ?)",
                (
                    rowid,
                    *(core.get(c) for c in CORE_COLUMNS),
                    json.dumps(row.metadata, ensure_ascii=row.ascii_json),
                ),
            )
            for kind, values in (("run_id", row.run_ids), ("agent_id", row.agent_ids)):
                conn.executemany(
                    "INSERT INTO memory_scope (memory_rowid, kind, value) VALUES (?, ?, ?)",
                    [(rowid, kind, v) for v in sorted(values)],
                )


def sql_rows(conn: sqlite3.Connection, node: Node, *, negate: bool = False) -> set[int]:
    sql, params = compile_sqlite(node)
    where = f"NOT COALESCE(({sql}), 0)" if negate else sql
    return {r[0] for r in conn.execute(f"SELECT rowid FROM memories AS m WHERE {where}", params)}


def ref_rows(rows: Sequence[Row], node: Node) -> set[int]:
    return {i for i, row in enumerate(rows, start=1) if evaluate(node, row.record(i))}


# The logical layer read straight from the filter dict, independently of the parser:
# mem0's meaning of every spelling. Only single-field conditions go through
# parse_filters + evaluate, so a parser that gave a logical key another meaning
# (NOT [a, b] as "not all of", $or as a metadata key...) disagrees with it.
ORACLE_LOGICAL = {
    "AND": "AND", "and": "AND", "$and": "AND",
    "OR": "OR", "or": "OR", "$or": "OR",
    "NOT": "NOT", "not": "NOT", "$not": "NOT",
}  # fmt: skip


def oracle(filters: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """Whether ``record`` matches the filter dict, by mem0's documented grammar.

    Keys of one dict are ANDed; ``AND``/``OR`` lists need all / any of their
    filters; ``NOT`` of a dict negates it and ``NOT`` of a list means none of them
    (mem0's pgvector store writes ``NOT (a OR b)``).
    """
    for key, value in filters.items():
        logical = ORACLE_LOGICAL.get(key)
        if logical == "AND":
            ok = all(oracle(child, record) for child in value)
        elif logical == "OR":
            ok = any(oracle(child, record) for child in value)
        elif logical == "NOT":
            children = [value] if isinstance(value, Mapping) else value
            ok = not any(oracle(child, record) for child in children)
        else:
            node = parse_filters({key: value})
            assert node is not None
            ok = evaluate(node, record)
        if not ok:
            return False
    return True


def oracle_rows(rows: Sequence[Row], filters: Mapping[str, Any]) -> set[int]:
    return {i for i, row in enumerate(rows, start=1) if oracle(filters, row.record(i))}


def select(conn: sqlite3.Connection, rows: Sequence[Row], filters: Mapping[str, Any]) -> set[int]:
    """Rows a filter selects, after checking SQL and the reference agree."""
    node = parse_filters(filters)
    assert node is not None
    got = sql_rows(conn, node)
    assert got == ref_rows(rows, node), (filters, node, compile_sqlite(node))
    return got


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


# --------------------------------------------------------------------------- strategies

TEXT_POOL = [
    "",
    "a",
    "A",
    "abc",
    "aBc",
    "ABC",
    "x%y",
    "x_y",
    "100%",
    "a\\b",
    "Ünïcödé",
    "ünïcödé",
    "straße",
    "STRASSE",
    "İstanbul",
    "日本語",
    "party 🎉",
    "it's",
    'say "hi"',
    "2024-05-01",
    "*",
]
safe_chars = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
texts = st.one_of(st.sampled_from(TEXT_POOL), st.text(safe_chars, max_size=6))
numbers = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, -1.5, 1e-9, 1e15, 2**53, 2**53 + 1, 2**63 - 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**63), 2**63 - 1),
)
# Values that collide across types and spellings, drawn half of the time so that
# filters and rows meet often enough to tell "matches" from "does not".
CONFUSABLE = [0, 1, 1.0, 2.5, True, False, "1", "", "a", "A", "aBc", "abc", "x%y", "Ünï"]
confusable = st.sampled_from(CONFUSABLE)
scalars = st.one_of(confusable, st.one_of(texts, numbers, st.booleans()))
json_values = st.one_of(
    confusable,
    scalars,
    st.none(),
    st.lists(st.one_of(confusable, st.none()), max_size=4),
    st.lists(st.one_of(scalars, st.none()), max_size=4),
    st.dictionaries(st.sampled_from(["a", "b"]), scalars, max_size=2),
)

# Keys that exercise both lookup paths: plain ASCII (json_extract with a quoted
# path) and keys SQLite could not find by path (json_each), plus names that
# shadow core fields and logical keys.
METADATA_KEYS = [
    "category",
    "rating",
    "tags",
    "flag",
    "a.b",
    "with space",
    "it's",
    'quo"te',
    "back\\slash",
    "città",
    "ключ",
    "tab\tkey",
    "role",
    "and",
    "metadata",
    "$x",
    "[0]",
    "score",
]
HOT_KEYS = ["rating", "tags", "città", 'quo"te']
metadata_keys = st.one_of(st.sampled_from(HOT_KEYS), st.sampled_from(METADATA_KEYS))
metadata_dicts = st.dictionaries(metadata_keys, json_values, max_size=5)

USERS = ["alice", "bob", "Alice"]
IDS = ["s1", "s2", "s3"]
DAYS = [date(2024, 4, 30), date(2024, 5, 1), date(2024, 5, 2), date(2024, 5, 31)]
TIMES = [time(0), time(12), time(23, 59, 59, 999999)]
moments = st.one_of(
    st.builds(
        lambda d, t: datetime.combine(d, t, tzinfo=UTC),
        st.sampled_from(DAYS),
        st.sampled_from(TIMES),
    ),
    st.datetimes(
        min_value=datetime(2023, 1, 1), max_value=datetime(2026, 1, 1), timezones=st.just(UTC)
    ),
)
stamps = st.one_of(st.none(), moments.map(stamp))


@st.composite
def rows(draw: st.DrawFn) -> Row:
    core: dict[str, str | None] = {
        "text": draw(texts),
        "user_id": draw(st.sampled_from([*USERS, None])),
        "agent_id": draw(st.sampled_from([*IDS, None])),
        "run_id": draw(st.sampled_from([*IDS, None])),
        "actor_id": draw(st.one_of(st.none(), texts)),
        "role": draw(st.sampled_from(["user", "assistant", "User", None])),
        "attributed_to": draw(st.one_of(st.none(), texts)),
        "memory_type": draw(st.sampled_from(["fact", "preference", "episode", None])),
        "hash": draw(st.one_of(st.none(), texts)),
        "created_at": draw(stamps),
        "updated_at": draw(stamps),
        "observed_at": draw(stamps),
        "expires_at": draw(stamps),
    }
    return Row(
        core=core,
        metadata=draw(metadata_dicts),
        run_ids=draw(st.sets(st.sampled_from(IDS), max_size=2)),
        agent_ids=draw(st.sets(st.sampled_from(IDS), max_size=2)),
        ascii_json=draw(st.booleans()),
    )


def op_dict(pairs: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.lists(pairs, min_size=1, max_size=2).map(dict)


def value_lists(items: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(items, min_size=1, max_size=3)


maybe_none_scalars = st.one_of(scalars, st.none())
metadata_ops = op_dict(
    st.one_of(
        st.tuples(st.sampled_from(["eq", "ne"]), maybe_none_scalars),
        st.tuples(st.sampled_from(["gt", "gte", "lt", "lte"]), st.one_of(texts, numbers)),
        st.tuples(st.sampled_from(["in", "nin"]), value_lists(maybe_none_scalars)),
        st.tuples(st.just("contains"), scalars),
        st.tuples(st.just("icontains"), texts),
    )
)


def metadata_field(key: str, explicit: bool) -> str:
    # Bare names that mean something else: core fields, logical keys, "$..." names.
    shadowed = key in {"role", "and", "metadata"} or key.startswith(("metadata.", "$"))
    return f"metadata.{key}" if explicit or shadowed else key


metadata_conditions = st.builds(
    lambda key, explicit, value: {metadata_field(key, explicit): value},
    metadata_keys,
    st.booleans(),
    st.one_of(maybe_none_scalars, st.just("*"), metadata_ops),
)

text_values = st.one_of(texts, st.sampled_from(["user", "assistant", "fact", "alice", "Alice"]))
text_conditions = st.builds(
    lambda name, value: {name: value},
    st.sampled_from(["id", "user_id", "actor_id", "role", "attributed_to", "memory_type", "hash"]),
    st.one_of(
        st.none(),
        st.just("*"),
        text_values,
        op_dict(
            st.one_of(
                st.tuples(
                    st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "contains"]),
                    text_values,
                ),
                st.tuples(st.sampled_from(["eq", "ne"]), st.none()),
                st.tuples(st.just("icontains"), text_values),
                st.tuples(
                    st.sampled_from(["in", "nin"]), value_lists(st.one_of(text_values, st.none()))
                ),
            )
        ),
    ),
)

ids = st.sampled_from([*IDS, "s4"])
multi_conditions = st.builds(
    lambda name, value: {name: value},
    st.sampled_from(["agent_id", "run_id"]),
    st.one_of(
        ids,
        st.none(),
        st.just("*"),
        op_dict(
            st.one_of(
                st.tuples(st.sampled_from(["eq", "ne"]), st.one_of(ids, st.none())),
                st.tuples(st.sampled_from(["in", "nin"]), value_lists(st.one_of(ids, st.none()))),
            )
        ),
    ),
)


def date_spellings(moment: datetime) -> st.SearchStrategy[Any]:
    """The same instant, or its day, written the ways a caller might."""
    plus_two = moment.astimezone(timezone(timedelta(hours=2)))
    return st.sampled_from(
        [
            moment.date().isoformat(),
            moment.date(),
            moment.date().strftime("%Y%m%d"),
            moment,
            moment.replace(tzinfo=None),
            moment.isoformat().replace("+00:00", "Z"),
            plus_two.isoformat(),
            moment.replace(tzinfo=None).isoformat(sep=" "),
            stamp(moment),
            moment.timestamp(),
            int(moment.timestamp()),
        ]
    )


date_values = moments.flatmap(date_spellings)
date_conditions = st.builds(
    lambda name, value: {name: value},
    st.sampled_from(["created_at", "updated_at", "observed_at", "expires_at"]),
    st.one_of(
        st.none(),
        st.just("*"),
        date_values,
        op_dict(
            st.one_of(
                st.tuples(st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte"]), date_values),
                st.tuples(st.sampled_from(["eq", "ne"]), st.none()),
                st.tuples(
                    st.sampled_from(["in", "nin"]), value_lists(st.one_of(date_values, st.none()))
                ),
            )
        ),
    ),
)

memory_conditions = st.builds(
    lambda op, value: {"memory": {op: value}},
    st.sampled_from(["contains", "icontains"]),
    texts.filter(bool),
)

conditions = st.one_of(
    metadata_conditions, text_conditions, multi_conditions, date_conditions, memory_conditions
)


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    return merged


def combine(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    many = st.lists(children, min_size=1, max_size=3)
    return st.one_of(
        st.tuples(st.sampled_from(["AND", "and", "$and"]), many).map(lambda kv: {kv[0]: kv[1]}),
        st.tuples(st.sampled_from(["OR", "or", "$or"]), many).map(lambda kv: {kv[0]: kv[1]}),
        st.tuples(st.sampled_from(["NOT", "not", "$not"]), children).map(lambda kv: {kv[0]: kv[1]}),
        # NOT of a list: "none of them" (a one-element list is plain NOT).
        st.tuples(st.sampled_from(["NOT", "not", "$not"]), many).map(lambda kv: {kv[0]: kv[1]}),
        st.lists(children, min_size=2, max_size=3).map(merge),
    )


filter_dicts = st.recursive(conditions, combine, max_leaves=8)

# --------------------------------------------------------------------------- properties


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.lists(rows(), max_size=12), filters=st.lists(filter_dicts, min_size=1, max_size=6))
def test_sqlite_selects_what_the_reference_selects(
    db: sqlite3.Connection, data: list[Row], filters: list[dict[str, Any]]
) -> None:
    load(db, data)
    everything = set(range(1, len(data) + 1))
    for filter_dict in filters:
        node = parse_filters(filter_dict)
        assert node is not None
        selected = sql_rows(db, node)
        assert selected == ref_rows(data, node), (filter_dict, node, compile_sqlite(node))
        # The parsed tree means what the dict says in mem0's grammar.
        assert selected == oracle_rows(data, filter_dict), (filter_dict, node)
        # Negating the compiled SQL must give the exact complement: no row may be
        # lost to SQL's NULL logic on either side.
        assert sql_rows(db, node, negate=True) == everything - selected


# A fixed data set for fuzzing the parser with arbitrary junk.
FIXED_ROWS = [
    Row(
        core={
            "user_id": "alice",
            "run_id": "s1",
            "role": "user",
            "created_at": stamp(datetime(2024, 5, 1, 12, tzinfo=UTC)),
        },
        metadata={"category": "work", "rating": 5, "tags": ["a", "B", 1, True], "flag": True},
        run_ids={"s2"},
    ),
    Row(
        core={
            "user_id": "bob",
            "agent_id": "s1",
            "observed_at": stamp(datetime(2024, 5, 2, tzinfo=UTC)),
        },
        metadata={"category": "Work", "rating": 2.5, "flag": False, "città": "x", "eq": None},
        agent_ids={"s3"},
    ),
    Row(core={}, metadata={}),
]

junk_atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
    st.sampled_from(["*", "2024-05-01", "s1", "work", "a"]),
)
junk_keys = st.one_of(
    st.sampled_from(
        [*OPERATORS, "AND", "OR", "NOT", "or", "Not", "$eq", "exists", "metadata", "metadata.",
         "category", "rating", "tags", "flag", "run_id", "user_id", "created_at", "città",
         "$and", "$or", "$not", "$nor", "$x", "metadata.$x", "score"]
    ),
    st.text(max_size=3),
)  # fmt: skip
junk = st.recursive(
    junk_atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(junk_keys, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(candidate=st.dictionaries(junk_keys, junk, max_size=3))
def test_arbitrary_input_is_parsed_or_rejected_with_filter_error(
    db: sqlite3.Connection, candidate: dict[Any, Any]
) -> None:
    try:
        node = parse_filters(candidate)
    except FilterError as error:
        assert str(error)
        return
    if node is not None:
        load(db, FIXED_ROWS)
        assert sql_rows(db, node) == ref_rows(FIXED_ROWS, node)


# Every stored JSON shape against every operator and a pool of filter values: the
# type rules (True is not 1, "1" is not 1, null is absent...) checked exhaustively,
# where random generation would meet each corner only rarely.
ABSENT = object()
GRID_STORED: list[Any] = [
    ABSENT, None, 0, 1, 1.0, -1, 2.5, 2**53 + 1, 2**63 - 1, True, False,
    "", "1", "a", "A", "aBc", "abc", "x%y", "Ünï", "ünï", "2024-05-01",
    [], [1], [1.0], [True], [False], ["a", "B"], ["abc", 2.5, None], [[1]], {"a": 1}, {},
]  # fmt: skip
GRID_VALUES: list[Any] = [
    None, 0, 1, 1.0, -1, 2.5, 2**53, 2**63 - 1, True, False,
    "", "1", "a", "A", "abc", "ABC", "b", "%", "_", "ünï", "2024-05-01",
]  # fmt: skip
GRID_LISTS: list[list[Any]] = [[v] for v in GRID_VALUES] + [
    [1, "1"],
    [True, 1],
    [None, "a"],
    [False, 0, ""],
    ["A", "abc", 2.5],
]


def grid_filters(name: str) -> Iterator[dict[str, Any]]:
    yield {name: "*"}
    for value in GRID_VALUES:
        yield {name: value}
        for op in ("eq", "ne", "gt", "gte", "lt", "lte", "contains", "icontains"):
            yield {name: {op: value}}
    for values in GRID_LISTS:
        yield {name: {"in": values}}
        yield {name: {"nin": values}}


@pytest.mark.parametrize("key", ["k", "città"])  # json_extract path / json_each lookup
def test_every_stored_type_against_every_operator(db: sqlite3.Connection, key: str) -> None:
    data = [Row(core={}, metadata={} if v is ABSENT else {key: v}) for v in GRID_STORED]
    load(db, data)
    checked = 0
    for filters in grid_filters(key):
        try:
            node = parse_filters(filters)
        except FilterError:
            continue  # e.g. gt with a boolean: rejected, tested elsewhere
        assert node is not None
        assert sql_rows(db, node) == ref_rows(data, node), (filters, node)
        checked += 1
    assert checked > 200


def test_core_text_fields_against_every_operator(db: sqlite3.Connection) -> None:
    stored = [None, "", "a", "A", "abc", "aBc", "x%y", "Ünï", "ünï", "b"]
    data = [Row(core={"role": v, "run_id": v}, metadata={}) for v in stored]
    load(db, data)
    for name in ("role", "run_id"):
        for filters in grid_filters(name):
            try:
                node = parse_filters(filters)
            except FilterError:
                continue
            assert node is not None
            assert sql_rows(db, node) == ref_rows(data, node), (filters, node)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"rating": {"between": [1, 2]}}, "filters['rating']['between']: unknown operator"),
        ({"rating": {"$gt": 1}}, "write 'gt'"),
        ({"rating": {">=": 1}}, "write 'gte'"),
        ({"rating": {"exists": True}}, "plain value '*'"),
        ({"rating": {}}, "empty operator dict"),
        ({"AND": []}, "AND takes a non-empty list"),
        ({"OR": {"a": 1}}, "OR takes a non-empty list"),
        ({"AND": [{}]}, "filters['AND'][0]: empty filter dict"),
        ({"AND": [{"a": 1}, "b"]}, "filters['AND'][1]: expected a filter dict"),
        ({"NOT": "a"}, "NOT takes a filter dict"),
        ({"NOT": []}, "or a non-empty list of filter dicts"),
        ({"$not": []}, "filters['$not']: NOT takes a filter dict"),
        ({"NOT": [{"a": 1}, "b"]}, "filters['NOT'][1]: expected a filter dict"),
        ({"NOT": [{"a": 1}, {}]}, "filters['NOT'][1]: empty filter dict"),
        ({"$or": {"a": 1}}, "filters['$or']: OR takes a non-empty list"),
        ({"$and": []}, "AND takes a non-empty list"),
        ({"$nor": [{"a": 1}]}, "'$nor' is not a logical key or a field"),
        ({"$x": 1}, "is written 'metadata.$x'"),
        ({"$OR": [{"a": 1}]}, "write '$or' (or 'OR')"),
        ({"$gt": 1}, "operators go inside a field's dict"),
        ({"$exists": True}, "plain value '*'"),
        ({"OR": [{"$in": ["a"]}]}, "filters['OR'][0]['$in']"),
        ({"rating": {"$or": [1]}}, "AND/OR/NOT go beside field names"),
        ({"XOR": [{"a": 1}]}, "logical keys are AND, OR and NOT"),
        ({"Or": [{"a": 1}]}, "logical keys are AND, OR and NOT"),
        ({"tags": ["a", "b"]}, "use {'in': [...]}"),
        ({"tags": {"in": "a"}}, "'in' takes a non-empty list"),
        ({"tags": {"nin": []}}, "'nin' takes a non-empty list"),
        ({"tags": {"in": [["a"]]}}, "filters['tags']['in'][0]: expected a string, number"),
        ({"created_at": {"gte": "last tuesday"}}, "not an ISO-8601 date"),
        ({"created_at": {"gte": "2024-02-30"}}, "not an ISO-8601 date"),
        ({"created_at": {"gte": True}}, "expected an ISO-8601 date or datetime"),
        ({"created_at": {"gte": 1714521600000}}, "seconds, not milliseconds"),
        ({"created_at": {"gte": "10000-01-01"}}, "not an ISO-8601 date"),
        ({"created_at": {"gte": "0001-01-01T00:00:00+01:00"}}, "out of range"),
        ({"memory": "pizza"}, "'memory' is the memory's text"),
        ({"memory": "*"}, "not a plain value"),
        ({"memory": None}, "not a plain value"),
        ({"memory": {"eq": "pizza"}}, "accepts only a substring search"),
        ({"memory": {"in": ["pizza"]}}, "accepts only a substring search"),
        ({"memory": {"contains": ""}}, "takes a non-empty string"),
        ({"memory": {"icontains": ""}}, "takes a non-empty string"),
        ({"memory": {"icontains": 3}}, "'memory' holds text"),
        ({"memory": {"icontains": None}}, "cannot take None"),
        ({"memory": {"icontains": "x" * 1001}}, "at most 1000 characters"),
        ({"memory": {"icontains": "a\x00b"}}, "NUL character"),
        ({"deleted_at": "*"}, "'deleted_at' is not a filterable field"),
        ({"linked_memory_ids": {"contains": "x"}}, "links are not filterable"),
        ({"observed_at": {"contains": "2024"}}, "is a timestamp"),
        ({"run_id": {"gt": "s1"}}, "'run_id' can hold several values"),
        ({"agent_id": {"contains": "s"}}, "'agent_id' can hold several values"),
        ({"user_id": 7}, "'user_id' holds text; give a string"),
        ({"role": {"in": ["user", 3]}}, "filters['role']['in'][1]"),
        ({"rating": {"gt": True}}, "booleans have no order"),
        ({"rating": {"gt": None}}, "cannot take None"),
        ({"name": {"icontains": 3}}, "'icontains' takes a string"),
        ({"rating": float("nan")}, "cannot be stored in JSON"),
        ({"rating": 2**64}, "outside the signed 64-bit range"),
        ({"rating": b"x"}, "expected a string, number, boolean or None"),
        ({"when": date(2024, 5, 1)}, "dates are only understood for"),
        ({"metadata": {"a": 1}}, "'metadata' is not a filterable field"),
        ({"metadata.": 1}, "empty field name"),
        ({"": 1}, "empty field name"),
        ({1: "a"}, "field names must be strings"),
        ({"nul\x00key": 1}, "NUL character"),
        ({"key": "bad\ud800"}, "lone surrogate"),
        ({"key": {"eq": {"nested": 1}}}, "expected a string, number, boolean or None"),
    ],
)
def test_malformed_filters_raise_filter_error(filters: Any, message: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filters(filters)
    assert message in str(caught.value)
    # mem0 callers catch ValueError; the engramdb hierarchy must keep that working.
    assert isinstance(caught.value, ValidationError)
    assert isinstance(caught.value, ValueError)


def test_non_dict_filters_are_rejected() -> None:
    for bad in ("user_id=alice", ["a"], 3):
        with pytest.raises(FilterError, match="filters must be a dict"):
            parse_filters(bad)  # type: ignore[arg-type]


def test_empty_filters_match_everything() -> None:
    assert parse_filters(None) is None
    assert parse_filters({}) is None


def nest(depth: int) -> dict[str, Any]:
    filters: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        filters = {"NOT": filters}
    return filters


def test_depth_limit() -> None:
    assert parse_filters(nest(MAX_DEPTH)) is not None
    with pytest.raises(FilterError, match=f"deeper than {MAX_DEPTH} levels"):
        parse_filters(nest(MAX_DEPTH + 1))
    with pytest.raises(FilterError, match="deeper than"):
        parse_filters(nest(10_000))  # no RecursionError on absurd input


def test_node_limit() -> None:
    assert parse_filters({"OR": [{"k": i} for i in range(MAX_NODES - 1)]}) is not None
    with pytest.raises(FilterError, match=f"more than {MAX_NODES} conditions"):
        parse_filters({"OR": [{"k": i} for i in range(MAX_NODES)]})


def test_list_value_limit() -> None:
    with pytest.raises(FilterError, match="values in total"):
        parse_filters({"a": {"in": list(range(3000))}, "b": {"nin": list(range(3000))}})


def test_hand_built_nodes_are_checked_by_every_compiler() -> None:
    bad_nodes: list[Node] = [
        Cmp("run_id", "gt", "s1"),
        Cmp("rating", "between", 1),
        Cmp("role", "eq", 3),
        Cmp("rating", "in", ()),
        Cmp("rating", "exists", 1),
        Cmp("rating", "gt", True),
        Or((Cmp("rating", "eq", [1]),)),
        Cmp("memory", "eq", "x"),
        Cmp("memory", "exists", None),
        Cmp("memory", "icontains", ""),
        Cmp("memory", "contains", "x" * 1001),
    ]
    for node in bad_nodes:
        with pytest.raises(FilterError):
            compile_sqlite(node)
        with pytest.raises(FilterError):
            compile_postgres(node)
        with pytest.raises(FilterError):
            evaluate(node, {})


# --------------------------------------------------------------------------- semantics


def md_rows(*metadatas: dict[str, Any], ascii_json: bool = True) -> list[Row]:
    return [Row(core={}, metadata=m, ascii_json=ascii_json) for m in metadatas]


def test_contains_treats_like_wildcards_and_backslash_literally(db: sqlite3.Connection) -> None:
    data = md_rows(
        {"t": "100%"}, {"t": "1000"}, {"t": "a_b"}, {"t": "aXb"}, {"t": "a\\b"}, {"t": "A_B"}
    )
    for row, text in zip(data, ("100%", "1000", "a_b", "aXb", "a\\b", "A_B"), strict=True):
        row.core["actor_id"] = text
    load(db, data)
    for name in ("t", "actor_id"):
        assert select(db, data, {name: {"contains": "%"}}) == {1}
        assert select(db, data, {name: {"contains": "_"}}) == {3, 6}
        assert select(db, data, {name: {"contains": "a_b"}}) == {3}
        assert select(db, data, {name: {"icontains": "a_b"}}) == {3, 6}
        assert select(db, data, {name: {"contains": "\\"}}) == {5}
        assert select(db, data, {name: {"contains": "0%"}}) == {1}


@pytest.mark.parametrize("ascii_json", [True, False])
def test_awkward_metadata_keys_are_found(db: sqlite3.Connection, ascii_json: bool) -> None:
    keys = [
        "a.b",
        "with space",
        "it's",
        'quo"te',
        "back\\slash",
        "città",
        "ключ",
        "new\nline",
        "$.x",
        "[0]",
        "')) OR 1=1 --",
    ]
    data = md_rows(*({key: "hit", "other": key} for key in keys), ascii_json=ascii_json)
    load(db, data)
    for i, key in enumerate(keys, start=1):
        # A bare "$..." name is refused as a Mongo-style operator: spell it out.
        name = f"metadata.{key}" if key.startswith("$") else key
        assert select(db, data, {name: "hit"}) == {i}, key
        assert select(db, data, {f"metadata.{key}": "*"}) == {i}, key
        assert select(db, data, {name: {"ne": "hit"}}) == set(range(1, len(keys) + 1)) - {i}


def test_metadata_prefix_reaches_keys_that_shadow_core_and_logical_names(
    db: sqlite3.Connection,
) -> None:
    data = [
        Row(core={"role": "user"}, metadata={"role": "admin", "and": 1, "metadata": "m"}),
        Row(core={"role": "admin"}, metadata={}),
    ]
    load(db, data)
    assert select(db, data, {"role": "admin"}) == {2}
    assert select(db, data, {"metadata.role": "admin"}) == {1}
    assert select(db, data, {"metadata.and": 1}) == {1}
    assert select(db, data, {"metadata.metadata": "m"}) == {1}
    assert select(db, data, {"metadata.$and": 1}) == set()


def test_types_never_mix(db: sqlite3.Connection) -> None:
    data = md_rows({"v": True}, {"v": 1}, {"v": 1.0}, {"v": "1"}, {"v": False}, {"v": 0}, {})
    load(db, data)
    assert select(db, data, {"v": True}) == {1}
    assert select(db, data, {"v": 1}) == {2, 3}
    assert select(db, data, {"v": "1"}) == {4}
    assert select(db, data, {"v": False}) == {5}
    assert select(db, data, {"v": {"in": [0, True]}}) == {1, 6}
    assert select(db, data, {"v": {"gte": 0}}) == {2, 3, 6}
    assert select(db, data, {"v": {"gte": ""}}) == {4}
    assert select(db, data, {"v": {"ne": 1}}) == {1, 4, 5, 6, 7}


def test_absent_and_null_are_the_same_and_count_as_not_equal(db: sqlite3.Connection) -> None:
    data = md_rows({"k": "x"}, {"k": None}, {}, {"k": "y"}, {"k": []})
    load(db, data)
    assert select(db, data, {"k": "*"}) == {1, 4, 5}
    assert select(db, data, {"k": None}) == {2, 3}
    assert select(db, data, {"k": {"eq": None}}) == {2, 3}
    assert select(db, data, {"k": {"ne": None}}) == {1, 4, 5}
    assert select(db, data, {"k": {"ne": "x"}}) == {2, 3, 4, 5}
    assert select(db, data, {"k": {"nin": ["x", "y"]}}) == {2, 3, 5}
    assert select(db, data, {"k": {"in": ["x", None]}}) == {1, 2, 3}
    assert select(db, data, {"k": {"nin": ["x", None]}}) == {4, 5}
    assert select(db, data, {"k": {"gt": ""}}) == {1, 4}
    assert select(db, data, {"NOT": {"k": {"gt": ""}}}) == {2, 3, 5}
    # "*" is only special as a plain value; inside an operator dict it is literal.
    assert select(db, data, {"k": {"eq": "*"}}) == set()


def test_contains_on_lists_is_membership(db: sqlite3.Connection) -> None:
    data = md_rows(
        {"tags": ["Work", "home", 3, True]}, {"tags": ["workshop"]}, {"tags": "work"}, {"tags": 3}
    )
    load(db, data)
    assert select(db, data, {"tags": {"contains": "home"}}) == {1}
    assert select(db, data, {"tags": {"contains": "work"}}) == {3}
    assert select(db, data, {"tags": {"icontains": "work"}}) == {1, 3}
    assert select(db, data, {"tags": {"contains": 3}}) == {1}
    assert select(db, data, {"tags": {"contains": 3.0}}) == {1}
    assert select(db, data, {"tags": {"contains": True}}) == {1}
    assert select(db, data, {"tags": {"contains": 1}}) == set()
    assert select(db, data, {"tags": "work"}) == {3}


def test_icontains_folds_ascii_only(db: sqlite3.Connection) -> None:
    # The documented rule; this also catches an SQLite build with ICU's lower().
    data = md_rows({"t": "ÉCOLE Normale"}, {"t": "école normale"}, {"t": "STRASSE"})
    load(db, data)
    assert select(db, data, {"t": {"icontains": "NORMALE"}}) == {1, 2}
    assert select(db, data, {"t": {"icontains": "école"}}) == {2}
    assert select(db, data, {"t": {"icontains": "straße"}}) == set()


def test_run_id_and_agent_id_are_multi_valued(db: sqlite3.Connection) -> None:
    data = [
        Row(core={"run_id": "s1", "agent_id": "bot"}, metadata={}, run_ids={"s2"}),
        Row(core={"run_id": "s2"}, metadata={}, agent_ids={"bot", "helper"}),
        Row(core={}, metadata={}, run_ids={"s3"}),
        Row(core={}, metadata={}),
    ]
    load(db, data)
    assert select(db, data, {"run_id": "s2"}) == {1, 2}
    assert select(db, data, {"run_id": {"eq": "s1"}}) == {1}
    assert select(db, data, {"run_id": {"ne": "s2"}}) == {3, 4}
    assert select(db, data, {"run_id": {"in": ["s1", "s3"]}}) == {1, 3}
    assert select(db, data, {"run_id": {"nin": ["s1", "s3"]}}) == {2, 4}
    assert select(db, data, {"run_id": "*"}) == {1, 2, 3}
    assert select(db, data, {"run_id": None}) == {4}
    assert select(db, data, {"agent_id": "bot"}) == {1, 2}
    assert select(db, data, {"agent_id": {"nin": ["helper"]}}) == {1, 3, 4}
    assert select(db, data, {"AND": [{"run_id": "s2"}, {"agent_id": "helper"}]}) == {2}


def test_evaluate_counts_the_primary_scope_value_whether_or_not_the_set_repeats_it() -> None:
    node = parse_filters({"run_id": "s1"})
    assert node is not None
    assert evaluate(node, {"run_id": "s1", "run_ids": set()})
    assert evaluate(node, {"run_id": "s1", "run_ids": {"s1", "s2"}})
    assert evaluate(node, {"run_id": None, "run_ids": {"s1"}})
    assert not evaluate(node, {"run_id": "s2"})


def test_observed_at_between_two_dates_includes_both_whole_days(db: sqlite3.Connection) -> None:
    moments = [
        datetime(2024, 4, 30, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 5, 1, tzinfo=UTC),
        datetime(2024, 5, 15, 12, tzinfo=UTC),
        datetime(2024, 5, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 6, 1, tzinfo=UTC),
    ]
    data = [Row(core={"observed_at": stamp(m)}, metadata={}) for m in moments]
    data.append(Row(core={}, metadata={}))
    load(db, data)
    assert select(db, data, {"observed_at": {"gte": "2024-05-01", "lte": "2024-05-31"}}) == {
        2,
        3,
        4,
    }
    assert select(db, data, {"observed_at": {"gt": "2024-04-30", "lt": "2024-06-01"}}) == {2, 3, 4}
    assert select(db, data, {"observed_at": "2024-05-15"}) == {3}
    assert select(db, data, {"observed_at": {"ne": "2024-05-15"}}) == {1, 2, 4, 5, 6}
    assert select(db, data, {"observed_at": {"in": ["2024-04-30", "2024-06-01"]}}) == {1, 5}
    # Instants in any offset are compared in UTC.
    assert select(db, data, {"observed_at": {"gte": "2024-05-15T14:00:00+02:00"}}) == {3, 4, 5}
    assert select(db, data, {"observed_at": {"gt": "2024-05-15T12:00:00Z"}}) == {4, 5}
    assert select(db, data, {"observed_at": "2024-05-15T12:00:00"}) == {3}
    assert select(db, data, {"observed_at": datetime(2024, 6, 1, 2, tzinfo=timezone(
        timedelta(hours=2)))}) == {5}  # fmt: skip
    assert select(db, data, {"observed_at": {"lt": date(2024, 5, 1)}}) == {1}
    assert select(db, data, {"observed_at": None}) == {6}


def test_dates_are_normalised_once_in_the_ast() -> None:
    assert parse_filters({"created_at": {"gte": "2024-05-01T15:30:00+02:00"}}) == Cmp(
        "created_at", "gte", "2024-05-01T13:30:00.000000+00:00"
    )
    assert parse_filters({"created_at": {"lte": "2024-05-01"}}) == Cmp(
        "created_at", "lte", "2024-05-01T23:59:59.999999+00:00"
    )
    assert parse_filters({"created_at": "2024-05-01"}) == And(
        (
            Cmp("created_at", "gte", "2024-05-01T00:00:00.000000+00:00"),
            Cmp("created_at", "lte", "2024-05-01T23:59:59.999999+00:00"),
        )
    )


def test_ast_shape() -> None:
    assert parse_filters({"category": "work"}) == Cmp("metadata.category", "eq", "work")
    assert parse_filters({"a": 1, "b": {"gt": 2, "lt": 5}}) == And(
        (Cmp("metadata.a", "eq", 1), Cmp("metadata.b", "gt", 2), Cmp("metadata.b", "lt", 5))
    )
    assert parse_filters({"NOT": {"a": 1}}) == Cmp("metadata.a", "ne", 1)
    assert parse_filters({"not": [{"OR": [{"a": 1}, {"b": "*"}]}]}) == Not(
        Or((Cmp("metadata.a", "eq", 1), Cmp("metadata.b", "exists", None)))
    )
    assert parse_filters({"a": {"nin": ["x", "y"]}}) == Cmp("metadata.a", "nin", ("x", "y"))
    assert parse_filters({"user_id": None}) == Not(Cmp("user_id", "exists", None))
    # NOT of a list is "none of them"; a one-element list is plain NOT.
    assert parse_filters({"NOT": [{"a": 1}, {"b": "*", "c": 2}]}) == Not(
        Or(
            (
                Cmp("metadata.a", "eq", 1),
                And((Cmp("metadata.b", "exists", None), Cmp("metadata.c", "eq", 2))),
            )
        )
    )
    assert parse_filters({"NOT": [{"a": 1}]}) == Cmp("metadata.a", "ne", 1)
    # score is a metadata key like any other.
    assert parse_filters({"score": {"gte": 2}}) == Cmp("metadata.score", "gte", 2)


@pytest.mark.parametrize(
    "filters",
    [
        {"AND": [{"a": 1}, {"OR": [{"b": 2}, {"NOT": [{"c": 3}, {"d": "*"}]}]}]},
        {"OR": [{"a": {"in": [1, 2]}}, {"NOT": {"b": None}}], "c": {"ne": "x"}},
        {"NOT": [{"AND": [{"a": 1}, {"b": 2}]}, {"OR": [{"c": 3}]}]},
    ],
)
def test_dollar_and_lowercase_logical_keys_are_exact_synonyms(filters: dict[str, Any]) -> None:
    def respell(value: Any, spelling: dict[str, str]) -> Any:
        if isinstance(value, dict):
            return {spelling.get(k, k): respell(v, spelling) for k, v in value.items()}
        if isinstance(value, list):
            return [respell(v, spelling) for v in value]
        return value

    expected = parse_filters(filters)
    for spelling in (
        {"AND": "$and", "OR": "$or", "NOT": "$not"},
        {"AND": "and", "OR": "or", "NOT": "not"},
    ):
        assert parse_filters(respell(filters, spelling)) == expected


def test_compiled_sql_uses_only_bound_values() -> None:
    node = parse_filters({"k": "'; DROP TABLE memories; --", "role": {"in": ["x'y"]}})
    assert node is not None
    sql, params = compile_sqlite(node)
    assert "DROP" not in sql
    assert "x'y" not in sql
    assert params == ["'; DROP TABLE memories; --", "x'y"]


# --------------------------------------------------------------------------- split_scope


def test_split_scope_pulls_plain_scope_ids() -> None:
    scope, rest = split_scope(
        {"user_id": "alice", "run_id": "*", "agent_id": {"in": ["a"]}, "category": "work"}
    )
    assert scope == {"user_id": "alice"}
    assert rest == {"run_id": "*", "agent_id": {"in": ["a"]}, "category": "work"}
    assert split_scope(None) == ({}, {})
    assert split_scope({}) == ({}, {})
    assert SCOPE_FIELDS == ("user_id", "agent_id", "run_id")


def test_split_scope_lifts_scope_ids_out_of_a_top_level_and() -> None:
    original = {"AND": [{"user_id": "alice"}, {"agent_id": "bot"}, {"category": "work"}]}
    scope, rest = split_scope(original)
    assert scope == {"user_id": "alice", "agent_id": "bot"}
    assert rest == {"AND": [{"category": "work"}]}
    assert original["AND"][0] == {"user_id": "alice"}  # input untouched
    scope, rest = split_scope({"user_id": "a", "AND": [{"user_id": "a"}, {"user_id": "b"}]})
    assert scope == {"user_id": "a"}
    assert rest == {"AND": [{"user_id": "b"}]}
    scope, rest = split_scope({"and": [{"run_id": "s1"}]})
    assert (scope, rest) == ({"run_id": "s1"}, {})
    # Inside OR a scope id is not required, so it stays a filter.
    scope, rest = split_scope({"OR": [{"user_id": "a"}, {"user_id": "b"}]})
    assert scope == {}
    scope, rest = split_scope({"$or": [{"user_id": "a"}], "$not": [{"user_id": "b"}]})
    assert scope == {}


def test_split_scope_lifts_scope_ids_out_of_a_top_level_dollar_and() -> None:
    # mem0's vector stores receive {"$and": [...]}: the same conjunction as AND.
    scope, rest = split_scope({"$and": [{"user_id": "alice"}, {"category": "work"}]})
    assert scope == {"user_id": "alice"}
    assert rest == {"$and": [{"category": "work"}]}
    # "*" is a presence test, not a scope: it stays a filter.
    scope, rest = split_scope({"$and": [{"user_id": "*"}], "agent_id": "*"})
    assert scope == {}
    assert rest == {"$and": [{"user_id": "*"}], "agent_id": "*"}


def test_split_scope_rejects_non_dicts() -> None:
    with pytest.raises(FilterError):
        split_scope(["user_id"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- both backends
#
# The examples below run on SQLite and on the embedded PostgreSQL server (conftest's
# pg_server), each checked against the AST reference and against the dict oracle.

PG_DATES = ("created_at", "updated_at", "observed_at", "expires_at")


@pytest.fixture(scope="module")
def pg_db(pg_server: PgServer) -> Iterator[psycopg.Connection[Any]]:
    with pg_server.schema() as config:
        s = '"' + config["collection_name"] + '"'
        con = psycopg.connect(config["url"], autocommit=True)
        columns = ", ".join(
            f"{c} {'timestamptz' if c in PG_DATES else 'text'}" for c in CORE_COLUMNS
        )
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        con.execute(
            f"CREATE TABLE {s}.memories (rowid bigint PRIMARY KEY, {columns}, metadata jsonb)"
        )
        con.execute(
            f"CREATE TABLE {s}.memory_scope (memory_rowid bigint NOT NULL, kind text NOT NULL, "
            "value text NOT NULL)"
        )
        con.execute(f"SET search_path TO {s}")
        yield con
        con.close()


def pg_load(con: psycopg.Connection[Any], data: Sequence[Row]) -> None:
    with con.transaction():
        con.execute("DELETE FROM memory_scope")
        con.execute("DELETE FROM memories")
        for rowid, row in enumerate(data, start=1):
            core: dict[str, Any] = {**row.core, "id": row_id(rowid, row)}
            for c in PG_DATES:
                if core.get(c) is not None:
                    core[c] = datetime.fromisoformat(core[c])
            con.execute(
                f"INSERT INTO memories (rowid, {', '.join(CORE_COLUMNS)}, metadata) "
                f"VALUES (%s, {', '.join('%s' for _ in CORE_COLUMNS)}, %s::jsonb)",
                (rowid, *(core.get(c) for c in CORE_COLUMNS), json.dumps(row.metadata)),
            )
            for kind, values in (("run_id", row.run_ids), ("agent_id", row.agent_ids)):
                for v in sorted(values):
                    con.execute("INSERT INTO memory_scope VALUES (%s, %s, %s)", (rowid, kind, v))


def pg_rows(con: psycopg.Connection[Any], node: Node, *, negate: bool = False) -> set[int]:
    sql, params = compile_postgres(node)
    where = f"NOT COALESCE(({sql}), FALSE)" if negate else sql
    return {r[0] for r in con.execute(f"SELECT rowid FROM memories AS m WHERE {where}", params)}


@dataclass
class Engine:
    """One backend's filter compiler on a real database."""

    name: str
    load: Callable[[Sequence[Row]], None]
    rows: Callable[..., set[int]]
    data: Sequence[Row] = ()

    def put(self, data: Sequence[Row]) -> None:
        self.data = data
        self.load(data)

    def select(self, filters: Mapping[str, Any]) -> set[int]:
        """Rows ``filters`` selects, after checking the reference, the oracle and NOT."""
        node = parse_filters(filters)
        assert node is not None
        got = self.rows(node)
        assert got == ref_rows(self.data, node), (self.name, filters, node)
        assert got == oracle_rows(self.data, filters), (self.name, filters, node)
        everything = set(range(1, len(self.data) + 1))
        assert self.rows(node, negate=True) == everything - got, (self.name, filters)
        return got


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, db: sqlite3.Connection) -> Engine:
    if request.param == "sqlite":
        return Engine(
            "sqlite",
            lambda data: load(db, data),
            lambda node, negate=False: sql_rows(db, node, negate=negate),
        )
    con: psycopg.Connection[Any] = request.getfixturevalue("pg_db")
    return Engine(
        "postgres",
        lambda data: pg_load(con, data),
        lambda node, negate=False: pg_rows(con, node, negate=negate),
    )


def test_not_of_a_list_means_none_of_them(engine: Engine) -> None:
    engine.put(
        md_rows(
            {"k": "x", "n": 1},
            {"k": "y", "n": 2},
            {"k": "z", "n": 1},
            {"n": 2},
            {"k": "x", "n": 2},
        )
    )
    none_of = engine.select({"NOT": [{"k": "x"}, {"k": "y"}]})
    assert none_of == {3, 4}
    assert none_of == engine.select({"NOT": {"OR": [{"k": "x"}, {"k": "y"}]}})
    assert engine.select({"$not": [{"k": "x"}, {"n": 2}]}) == {3}
    # Each element is one filter: its keys are ANDed, NOT (x AND 2 OR z).
    assert engine.select({"not": [{"k": "x", "n": 2}, {"k": "z"}]}) == {1, 2, 4}
    # A one-element list and a plain dict still mean plain NOT.
    assert engine.select({"NOT": [{"k": "x"}]}) == {2, 3, 4}
    assert engine.select({"NOT": {"k": "x"}}) == {2, 3, 4}
    # Not "not all of them": that is NOT of an AND.
    assert engine.select({"NOT": {"AND": [{"k": "x"}, {"n": 2}]}}) == {1, 2, 3, 4}


def test_dollar_logical_keys_work_like_the_platform_spelling(engine: Engine) -> None:
    engine.put(
        md_rows(
            {"category": "food", "rating": 5},
            {"category": "food", "rating": 2, "tag": "spam"},
            {"category": "health", "rating": 4},
            {"category": "work", "rating": 5},
            {},
        )
    )
    # The shape mem0 hands its vector stores after processing OR/NOT.
    mem0_style = {
        "$or": [{"category": "food"}, {"category": "health"}],
        "$not": [{"tag": "spam"}],
        "rating": {"gte": 3},
    }
    assert engine.select(mem0_style) == {1, 3}
    assert engine.select({"$and": [{"category": "food"}, {"$not": {"rating": {"lt": 3}}}]}) == {1}
    assert engine.select({"$or": [{"$and": [{"category": "work"}]}, {"rating": 2}]}) == {2, 4}
    assert engine.select({"$and": [{"rating": 5}], "AND": [{"category": "work"}]}) == {4}


def test_star_means_present_for_metadata_and_scope_ids(engine: Engine) -> None:
    engine.put(
        [
            Row(core={"user_id": "alice", "agent_id": "bot"}, metadata={"k": "v"}),
            Row(core={"user_id": "bob", "run_id": "s1"}, metadata={"k": None}),
            Row(core={"user_id": "carol"}, metadata={"k": ["*"]}, run_ids={"s2"}),
            Row(core={}, metadata={"k": "*"}, agent_ids={"helper"}),
            Row(core={}, metadata={"k": 0, "other": 1}),
        ]
    )
    assert engine.select({"k": "*"}) == {1, 3, 4, 5}
    assert engine.select({"user_id": "*"}) == {1, 2, 3}
    assert engine.select({"agent_id": "*"}) == {1, 4}
    assert engine.select({"run_id": "*"}) == {2, 3}
    assert engine.select({"user_id": "*", "run_id": "*"}) == {2, 3}
    assert engine.select({"NOT": [{"agent_id": "*"}, {"run_id": "*"}]}) == {5}
    assert engine.select({"$or": [{"agent_id": "*"}, {"metadata.other": "*"}]}) == {1, 4, 5}
    # Only a plain "*" is special; in an operator dict it is the literal string.
    assert engine.select({"k": {"eq": "*"}}) == {4}
    assert engine.select({"k": {"contains": "*"}}) == {3, 4}
    assert engine.select({"user_id": {"eq": "*"}}) == set()


def test_score_is_an_ordinary_metadata_key(engine: Engine) -> None:
    engine.put(md_rows({"score": 3}, {"score": 1.5}, {"score": "high"}, {}, {"score": True}))
    assert engine.select({"score": {"gte": 2}}) == {1}
    assert engine.select({"score": {"lt": 2}}) == {2}
    assert engine.select({"metadata.score": 3}) == {1}
    assert engine.select({"score": "*"}) == {1, 2, 3, 5}
    assert engine.select({"NOT": [{"score": {"gte": 2}}, {"score": "high"}]}) == {2, 4, 5}


def test_score_may_be_stored_as_metadata_and_the_other_names_stay_reserved() -> None:
    assert check_metadata({"score": 3}) == {"score": 3}
    assert "score" not in RESERVED_METADATA_KEYS
    # "memory" is filterable (a search of the text) but stays reserved as a metadata key.
    for name in ("memory", "deleted_at", "linked_memory_ids", "user_id", "created_at"):
        assert name in RESERVED_METADATA_KEYS
        with pytest.raises(MetadataError, match="reserved"):
            check_metadata({name: 1})


def test_memory_stores_and_filters_a_score_metadata_key(mem: Memory) -> None:
    mem.add("I like green tea", user_id="alice", metadata={"score": 3})
    mem.add("I like black coffee", user_id="alice", metadata={"score": 1})
    found = mem.get_all(user_id="alice", filters={"score": {"gte": 2}})["results"]
    assert [(r["memory"], r["metadata"]) for r in found] == [("I like green tea", {"score": 3})]
    hits = mem.search("what do I drink?", user_id="alice", filters={"NOT": [{"score": {"lt": 2}}]})[
        "results"
    ]
    assert [r["memory"] for r in hits] == ["I like green tea"]
    # The relevance score sits beside the metadata, which keeps its own "score".
    assert isinstance(hits[0]["score"], float)
    assert hits[0]["metadata"] == {"score": 3}
    both = mem.get_all(filters={"$or": [{"score": 3}, {"score": 1}], "user_id": "alice"})
    assert len(both["results"]) == 2
    # "*" on a scope id is a condition inside the caller's scope, never a scope itself.
    assert len(mem.get_all(user_id="alice", filters={"user_id": "*"})["results"]) == 2
    assert mem.get_all(user_id="alice", filters={"agent_id": "*"})["results"] == []
    with pytest.raises(ScopeError):
        mem.get_all(filters={"user_id": "*"})


# --------------------------------------------------------------------------- the memory's text


def text_rows(*texts: str) -> list[Row]:
    return [Row(core={"text": t}, metadata={"memory": t}) for t in texts]


def test_memory_text_contains_and_icontains(engine: Engine) -> None:
    engine.put(
        text_rows(
            "I like Rice",
            "rice pudding",
            "RICE",
            "price list",
            "beans",
            "École à Paris",
            "école",
            "straße",
        )
    )
    assert engine.select({"memory": {"icontains": "rice"}}) == {1, 2, 3, 4}
    assert engine.select({"memory": {"contains": "rice"}}) == {2, 4}
    assert engine.select({"memory": {"icontains": "RiCe P"}}) == {2}
    # ASCII folding only, on both engines and in evaluate(): É is not é, ß is not ss.
    assert engine.select({"memory": {"icontains": "école"}}) == {7}
    assert engine.select({"memory": {"icontains": "paris"}}) == {6}
    assert engine.select({"memory": {"icontains": "STRASSE"}}) == set()
    assert engine.select({"memory": {"icontains": "STRAßE"}}) == {8}
    # It is the memory's text, not a metadata key called "memory".
    assert engine.select({"metadata.memory": {"icontains": "beans"}}) == {5}
    assert engine.select({"NOT": {"memory": {"icontains": "rice"}}}) == {5, 6, 7, 8}
    either = {"OR": [{"memory": {"icontains": "bean"}}, {"memory": {"contains": "RICE"}}]}
    assert engine.select(either) == {3, 5}


def test_memory_text_search_attacks_match_literally(engine: Engine) -> None:
    texts = [
        "100% sure",
        "1000 sure",
        "a_b",
        "aXb",
        "a\\b",
        "it's",
        'say "hi"',
        "plain",
        "x" * 2000,
    ]
    engine.put(text_rows(*texts))
    everything = set(range(1, len(texts) + 1))
    for needle, expected in [
        ("%", {1}),
        ("%%", set()),
        ("_", {3}),
        ("a_b", {3}),
        ("A_B", {3}),
        ("\\", {5}),
        ("\\%", set()),
        ("'", {6}),
        ("' OR '1'='1", set()),
        ('"', {7}),
        ("%' OR 1=1 --", set()),
        ("x" * 1000, {9}),
        ("X" * 1000, {9}),
        ("*", set()),
    ]:
        got = engine.select({"memory": {"icontains": needle}})
        assert got == expected, (engine.name, needle, got)
        assert got != everything
        if needle == needle.lower():
            assert engine.select({"memory": {"contains": needle}}) == expected, needle
