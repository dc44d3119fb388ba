"""A LangGraph store backed by engramdb: LangGraph's long-term memory in engramdb.

:class:`EngramStore` implements ``langgraph.store.base.BaseStore``, so a graph
compiled with ``graph.compile(store=EngramStore(Memory("app.db")))`` reads and
writes its memories through engramdb: hybrid search, history, restore, the
REST/MCP servers and the CLI all see the same items. Needs the ``langgraph``
extra (``pip install 'engramdb[langgraph]'``).

How LangGraph's model maps onto engramdb's (docs/integrations.md says the same
for users):

Scope
    One engramdb scope per store: ``user_id`` (default ``"langgraph"``, or the
    user of a :meth:`~engramdb.Memory.scoped` view) and optionally
    ``agent_id``. The whole LangGraph namespace tree lives inside that scope,
    so namespace-prefix search from ``()`` and ``list_namespaces`` see every
    item of the store and nothing else. Tenants are kept apart by giving each
    its own store (another ``user_id`` or ``agent_id``): engramdb never lets
    one scope see another's memories. A store without ``agent_id`` sees only
    the agent-less memories of its user, so it never lists the items of a
    store that has one. Memories of the same user written by anything but a
    store (no ``langgraph.key`` metadata) are invisible to it.

Items
    One LangGraph item is one engramdb memory. Its metadata holds the item:
    ``langgraph.key`` (the key), ``langgraph.namespace`` (the labels joined by
    ``.``, which LangGraph forbids inside labels), ``langgraph.ns.0``,
    ``langgraph.ns.1``, ... (one key per level, for prefix filters),
    ``langgraph.indexed`` (``False`` for ``put(..., index=False)``), and each
    top-level field of the value as ``value.<field>`` (so fields named like
    engramdb's own, e.g. ``memory`` or ``id``, cannot collide, and filters
    reach them). ``created_at``/``updated_at`` are the memory's.

Text
    The memory's text, which engramdb embeds and keyword-indexes, is taken
    from the value: the fields of ``put(..., index=[...])``, else the store's
    ``index={"fields": [...]}`` (LangGraph's path syntax, ``"$"`` for the whole
    value), else the string fields ``text``, ``content`` and ``memory``, else
    the JSON of the value; several texts are joined by newlines and the text
    is cut at the configured ``limits.max_text_chars`` (the value itself is
    kept whole in the metadata). The embedding is always engramdb's own
    embedder: an ``index`` config may name ``fields`` (and ``dims`` only if it
    equals the embedder's); ``embed`` is refused.

Same text, different keys
    engramdb stores a text once per scope (an ``add`` of a repeat returns event
    ``NONE``; an ``update`` onto one raises ``DuplicateMemoryError``). When that
    happens to an item whose key is new, the store writes the text again
    followed by a line naming the item (``[langgraph ns/key]``, and a digest of
    both should even that repeat a memory), so two keys with the same text are
    two memories and two items.

Writes
    ``put`` of a new key is an ``add(infer=False)`` (no LLM, stored verbatim);
    ``put`` of an existing key is an explicit ``Memory.update`` of text and
    metadata, so ``Memory.history`` keeps the old value and ``Memory.restore``
    brings it back (:meth:`EngramStore.memory_id` gives the memory of an
    item); a ``put`` that changes nothing writes nothing. ``put(value=None)``
    / ``delete`` is engramdb's soft delete. Ops of a batch run in order, and
    the writes of one store object are serialised, so two concurrent first
    puts of a key do not make two memories (across processes they can; reads
    then show the newest).

Search
    With a query: engramdb's hybrid search in the scope, narrowed by the
    namespace prefix and the filter, over indexed items (``index=False``
    items are found by filter-only searches and ``get``), each result a
    ``SearchItem`` with engramdb's ``score`` in [0, 1]. Without one: the
    matching items newest first (by creation). LangGraph's filter (top-level
    value fields: a value for equality, or ``$eq $ne $gt $gte $lt $lte``) is
    translated to engramdb's filter language on the ``value.<field>`` keys,
    with engramdb's rules: comparisons never cross JSON types (``1`` is not
    ``True``, ``"10"`` is not greater than ``5``) and an absent field counts as
    not equal. Nested-object and list matches, other operators and logical
    keys cannot be expressed and raise :class:`~engramdb.FilterError` naming
    the part.

list_namespaces
    Reads the namespaces of the store's items (prefix levels that are not
    ``"*"`` narrow the read in the database; wildcards, suffixes, ``max_depth``,
    ``limit`` and ``offset`` are applied to the distinct namespaces, sorted, as
    LangGraph's in-memory store does).

TTL
    Not supported (``supports_ttl = False``, so ``put(..., ttl=...)`` raises
    ``NotImplementedError``): engramdb's ``expiration_date`` is fixed at write
    time and cannot be refreshed by reads.

Sync and async
    On a :class:`~engramdb.Memory`, ``batch`` calls it directly and
    ``abatch`` runs the same batch in a worker thread, so the event loop never
    waits on the model or the database. On an :class:`~engramdb.AsyncMemory`,
    ``abatch`` awaits it natively; ``batch`` (a sync node of a graph run with
    ``ainvoke``) is handed to the event loop the store last ran on and waits
    for it from its worker thread. Calling ``batch`` on the event loop's own
    thread, or with no loop known, raises ``RuntimeError``: use the ``a``
    methods there, or build the store on a ``Memory``. Both faces run the same
    code (each op is a generator of engramdb calls), so they cannot drift.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        validate_op_namespace,
    )
    from langgraph.store.base.embed import get_text_at_path
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "engramdb.integrations.langgraph needs LangGraph: pip install 'engramdb[langgraph]'"
    ) from exc

from engramdb.core.drive import run_async, run_sync
from engramdb.core.validate import check_id
from engramdb.errors import ConfigError, DuplicateMemoryError, FilterError, MetadataError
from engramdb.memory import AsyncMemory, Memory

__all__ = ["DEFAULT_USER_ID", "EngramStore", "translate_filter"]

DEFAULT_USER_ID = "langgraph"
"""The ``user_id`` of a store given none (and not built on a scoped view)."""

KEY = "langgraph.key"
NAMESPACE = "langgraph.namespace"
LEVEL = "langgraph.ns."
INDEXED = "langgraph.indexed"
VALUE = "value."

_DEFAULT_TEXT_FIELDS = ("text", "content", "memory")
_OPERATORS = {"$eq": "eq", "$ne": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
_PAGE = 500

T = TypeVar("T")


@dataclass(frozen=True)
class _Call:
    """One call of a Memory method, which a driver performs (blocking or awaited)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


_Flow = Generator[_Call, Any, T]


def _meta(key: str) -> str:
    """A metadata key spelled explicitly for engramdb's filter language."""
    return "metadata." + key


def translate_filter(filter: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """LangGraph's search ``filter`` as engramdb conditions (to be ANDed).

    ``{"field": value}`` is equality and ``{"field": {"$gt": 3, ...}}`` applies
    LangGraph's operators ``$eq $ne $gt $gte $lt $lte``; both test the
    top-level value field, stored as the metadata key ``value.<field>``.
    Anything engramdb cannot express raises :class:`~engramdb.FilterError`.
    """
    if filter is None:
        return []
    if not isinstance(filter, Mapping):
        raise FilterError(
            f"a LangGraph filter is a dict of value fields, got {type(filter).__name__}"
        )
    out: list[dict[str, Any]] = []
    for name, condition in filter.items():
        if not isinstance(name, str):
            raise FilterError(f"filter keys are value field names (strings), got {name!r}")
        if name.startswith("$"):
            raise FilterError(
                f"filter[{name!r}]: LangGraph filters have no logical operators; name "
                "top-level value fields, each with a value or {'$op': operand}"
            )
        target = _meta(VALUE + name)
        if isinstance(condition, Mapping):
            if not condition:
                raise FilterError(f"filter[{name!r}]: an empty dict matches nothing useful")
            ops: dict[str, Any] = {}
            for op, operand in condition.items():
                if not isinstance(op, str) or not op.startswith("$"):
                    raise FilterError(
                        f"filter[{name!r}]: {dict(condition)!r} matches inside a nested "
                        "object, which engramdb cannot filter (it filters top-level value "
                        "fields); keep the field at the top level of the value"
                    )
                if op not in _OPERATORS:
                    raise FilterError(
                        f"filter[{name!r}]: operator {op!r} is not supported; use one of "
                        + ", ".join(_OPERATORS)
                    )
                ops[_OPERATORS[op]] = _operand(name, op, operand)
            out.append({target: ops})
        else:
            out.append({target: {"eq": _operand(name, "$eq", condition)}})
    return out


def _operand(name: str, op: str, operand: object) -> object:
    where = f"filter[{name!r}]" + ("" if op == "$eq" else f"[{op!r}]")
    if isinstance(operand, list | tuple | Mapping):
        raise FilterError(
            f"{where}: {operand!r} is a list or object; engramdb compares top-level "
            "scalar values only (strings, numbers, booleans, None)"
        )
    ordering = op in ("$gt", "$gte", "$lt", "$lte")
    if operand is None or isinstance(operand, bool):
        if ordering:
            raise FilterError(f"{where}: {op} orders numbers or strings, got {operand!r}")
        return operand
    if isinstance(operand, int):
        if not -(2**63) <= operand < 2**63:
            raise FilterError(f"{where}: {operand} is outside the 64-bit integer range")
        return operand
    if isinstance(operand, float):
        if not math.isfinite(operand):
            raise FilterError(f"{where}: {operand!r} is not a finite number")
        return operand
    if isinstance(operand, str):
        if "\x00" in operand:
            raise FilterError(f"{where}: a string with a NUL character cannot be compared")
        return operand
    raise FilterError(
        f"{where}: {type(operand).__name__} is not a JSON scalar (string, number, boolean, None)"
    )


def _joined(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def _parse_time(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _ours(row: Mapping[str, Any] | None) -> bool:
    return row is not None and isinstance((row.get("metadata") or {}).get(KEY), str)


def _identity(row: Mapping[str, Any]) -> tuple[tuple[str, ...], str]:
    meta = row["metadata"]
    return tuple(str(meta[NAMESPACE]).split(".")), str(meta[KEY])


def _value_of(row: Mapping[str, Any]) -> dict[str, Any]:
    meta: Mapping[str, Any] = row["metadata"]
    return {k[len(VALUE) :]: v for k, v in meta.items() if k.startswith(VALUE)}


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        part = namespace[: len(path)]
    elif condition.match_type == "suffix":
        part = namespace[len(namespace) - len(path) :]
    else:
        raise ValueError(f"unknown namespace match type {condition.match_type!r}")
    return all(p in ("*", n) for p, n in zip(path, part, strict=True))


class EngramStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are engramdb memories of one scope.

    ``memory`` is a :class:`~engramdb.Memory` (sync and async calls) or an
    :class:`~engramdb.AsyncMemory` (async calls, and sync calls from worker
    threads while its event loop runs). ``user_id`` and ``agent_id`` name the
    scope (default: the scope of a scoped view, else ``"langgraph"`` with no
    agent); ``index`` is LangGraph's index config, of which ``fields`` chooses
    the text to embed. See the module docstring for the whole mapping::

        store = EngramStore(Memory("app.db"), user_id="alice")
        graph = builder.compile(store=store)
    """

    supports_ttl = False

    def __init__(
        self,
        memory: Memory | AsyncMemory,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        if not isinstance(memory, Memory | AsyncMemory):
            raise TypeError(
                f"EngramStore needs an engramdb Memory or AsyncMemory, got {type(memory).__name__}"
            )
        within = memory.within
        if user_id is None:
            user_id = within.user_id if within is not None else None
        if agent_id is None and within is not None:
            agent_id = within.agent_id
        self.memory = memory
        self.user_id: str = check_id("user_id", user_id) or DEFAULT_USER_ID
        self.agent_id: str | None = check_id("agent_id", agent_id)
        self.fields: list[str] | None = self._index_fields(index)
        self._max_chars = memory.config.limits.max_text_chars
        self._lock = threading.Lock()
        self._alock: asyncio.Lock | None = None
        self._alock_loop: asyncio.AbstractEventLoop | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def _index_fields(self, index: IndexConfig | None) -> list[str] | None:
        if index is None:
            return None
        if not isinstance(index, Mapping):
            raise ConfigError(f"index must be a dict, got {type(index).__name__}")
        unknown = sorted(set(index) - {"fields", "dims", "embed"})
        if unknown:
            raise ConfigError(
                f"unknown index option(s) {', '.join(unknown)}; EngramStore reads 'fields'"
            )
        if "embed" in index:
            raise ConfigError(
                "EngramStore embeds with the Memory's own embedder; leave 'embed' out of "
                "index (choose the model with Memory(embedder=...) or its config)"
            )
        dims = index.get("dims")
        if dims is not None and dims != self.memory.embedder.dim:
            raise ConfigError(
                f"index dims {dims} differ from the Memory's embedder ({self.memory.embedder.dim}"
                f" dimensions, {self.memory.embedder.model}); leave 'dims' out"
            )
        fields = index.get("fields")
        if fields is None:
            return None
        if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"index fields must be a list of field paths, got {fields!r}")
        return list(fields)

    # -- the two drivers --------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the ops in order and return their results (blocking)."""
        todo = list(ops)
        if isinstance(self.memory, Memory):
            return self._batch_sync(todo)
        return self._bridge(todo)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the ops in order and return their results, without blocking the event loop."""
        todo = list(ops)
        self._loop = asyncio.get_running_loop()
        if isinstance(self.memory, Memory):
            return await asyncio.to_thread(self._batch_sync, todo)
        results: list[Result] = []
        for op in todo:
            flow = self._flow(op)
            if isinstance(op, PutOp):
                async with self._write_lock():
                    results.append(await self._drive_async(flow))
            else:
                results.append(await self._drive_async(flow))
        return results

    def _batch_sync(self, ops: list[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            flow = self._flow(op)
            if isinstance(op, PutOp):
                with self._lock:
                    results.append(self._drive_sync(flow))
            else:
                results.append(self._drive_sync(flow))
        return results

    def _bridge(self, ops: list[Op]) -> list[Result]:
        loop = self._loop_for_sync()
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), loop).result()

    def _loop_for_sync(self) -> asyncio.AbstractEventLoop:
        """The loop that serves a blocking call on an AsyncMemory; raise where none can."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "a synchronous call of an EngramStore built on an AsyncMemory, on the event "
                "loop's thread, would block the loop: use the async methods (aget, aput, "
                "asearch, alist_namespaces) or build the store on a Memory"
            )
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            raise RuntimeError(
                "an EngramStore built on an AsyncMemory answers synchronous calls only from a "
                "worker thread while the event loop it runs on is running (a sync node under "
                "graph.ainvoke; create the store inside that loop). Use the async methods, "
                "or build the store on a Memory"
            )
        return loop

    def _write_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._alock is None or self._alock_loop is not loop:
            self._alock, self._alock_loop = asyncio.Lock(), loop
        return self._alock

    def _drive_sync(self, flow: _Flow[T]) -> T:
        memory = self.memory
        return run_sync(flow, lambda call: getattr(memory, call.method)(*call.args, **call.kwargs))

    async def _drive_async(self, flow: _Flow[T]) -> T:
        memory = self.memory

        async def perform(call: Any) -> Any:
            return await getattr(memory, call.method)(*call.args, **call.kwargs)

        return await run_async(flow, perform)

    # -- the ops, as flows of Memory calls ------------------------------------------------------

    def _flow(self, op: Op) -> _Flow[Result]:
        if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
            raise ValueError(f"unknown LangGraph store operation {type(op).__name__}")
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        return self._list_namespaces(op)

    @property
    def _scope(self) -> dict[str, str | None]:
        return {"user_id": self.user_id, "agent_id": self.agent_id}

    def _base(self) -> list[dict[str, Any]]:
        """The conditions every read of this store carries: its items, in its scope."""
        out: list[dict[str, Any]] = [{_meta(KEY): "*"}]
        if self.agent_id is None:
            # A user-only scope also sees the user's memories with agents: not ours.
            out.append({"agent_id": None})
        return out

    def _holds(self, row: Mapping[str, Any] | None) -> bool:
        """Whether a memory is an item of this store (what ``_base`` selects)."""
        if not _ours(row) or row is None or row.get("user_id") != self.user_id:
            return False
        agents = {row.get("agent_id"), *(row.get("agent_ids") or ())} - {None}
        return self.agent_id in agents if self.agent_id is not None else not agents

    @staticmethod
    def _and(conditions: list[dict[str, Any]]) -> dict[str, Any]:
        return {"AND": conditions}

    def _find(self, namespace: tuple[str, ...], key: str) -> _Flow[dict[str, Any] | None]:
        where = [*self._base(), {_meta(NAMESPACE): _joined(namespace)}, {_meta(KEY): key}]
        found = yield _Call("get_all", (), {"filters": self._and(where), "top_k": 1, **self._scope})
        rows: list[dict[str, Any]] = found["results"]
        return rows[0] if rows else None

    def _get(self, op: GetOp) -> _Flow[Result]:
        row = yield from self._find(tuple(op.namespace), str(op.key))
        return None if row is None else self._item(row)

    def _put(self, op: PutOp) -> _Flow[Result]:
        namespace, key = tuple(op.namespace), op.key
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if namespace[0] == "langgraph":
            raise InvalidNamespaceError(
                f'Root label for namespace cannot be "langgraph". Got: {namespace}'
            )
        if not isinstance(key, str):
            raise ValueError(f"an item key must be a string, got {type(key).__name__}")
        if op.ttl is not None:
            raise NotImplementedError(
                "TTL is not supported by EngramStore (engramdb's expiration dates are not "
                "refreshed by reads); put without ttl"
            )
        existing = yield from self._find(namespace, key)
        if op.value is None:
            if existing is not None:
                yield _Call("delete", (existing["id"],), {"reason": "langgraph delete"})
            return None
        value = self._checked_value(namespace, key, op.value)
        metadata = self._metadata(namespace, key, value, indexed=op.index is not False)
        texts = self._texts(namespace, key, self._text(value, op.index))
        if existing is None:
            yield from self._add(namespace, key, texts, metadata)
        else:
            yield from self._update(existing, texts, metadata)
        return None

    def _add(
        self,
        namespace: tuple[str, ...],
        key: str,
        texts: list[str],
        metadata: dict[str, Any],
    ) -> _Flow[None]:
        for text in texts:
            added = yield _Call(
                "add", (text,), {"metadata": metadata, "infer": False, **self._scope}
            )
            outcome = added["results"][0]
            if outcome["event"] != "NONE":
                return None
            # The scope already holds this text: another item's (or not a store's).
            other = yield _Call("get", (outcome["id"],), {})
            if self._holds(other) and _identity(other) == (namespace, key):
                # The same item, written meanwhile by another process: make it ours.
                yield from self._update(other, [text], metadata)
                return None
        raise DuplicateMemoryError(f"{_joined(namespace)}/{key}", None)

    def _update(
        self, existing: dict[str, Any], texts: list[str], metadata: dict[str, Any]
    ) -> _Flow[None]:
        current = existing["memory"]
        if current in texts:
            # Same content (perhaps already written in a disambiguated form): keep it.
            if existing["metadata"] == metadata:
                return None
            yield _Call("update", (existing["id"],), {"metadata": metadata, "reason": "langgraph"})
            return None
        for text in texts:
            try:
                yield _Call(
                    "update", (existing["id"], text), {"metadata": metadata, "reason": "langgraph"}
                )
            except DuplicateMemoryError:
                continue
            return None
        raise DuplicateMemoryError(existing["id"], None)

    def _search(self, op: SearchOp) -> _Flow[Result]:
        if op.offset < 0:
            raise ValueError(f"offset must be a non-negative integer, got {op.offset}")
        if op.limit <= 0:
            return []
        where = self._base()
        where.extend({_meta(f"{LEVEL}{i}"): label} for i, label in enumerate(op.namespace_prefix))
        where.extend(translate_filter(op.filter))
        query = op.query.strip() if isinstance(op.query, str) else ""
        if query:
            where.append({_meta(INDEXED): True})
            found = yield _Call(
                "search",
                (query,),
                {"filters": self._and(where), "top_k": op.offset + op.limit, **self._scope},
            )
            hits: list[dict[str, Any]] = found["results"][op.offset :]
            return [self._search_item(hit, float(hit["score"])) for hit in hits]
        listed = yield _Call(
            "get_all",
            (),
            {"filters": self._and(where), "top_k": op.limit, "offset": op.offset, **self._scope},
        )
        return [self._search_item(row, None) for row in listed["results"]]

    def _list_namespaces(self, op: ListNamespacesOp) -> _Flow[Result]:
        conditions = tuple(op.match_conditions or ())
        where = self._base()
        for condition in conditions:
            if condition.match_type == "prefix":
                where.extend(
                    {_meta(f"{LEVEL}{i}"): label}
                    for i, label in enumerate(condition.path)
                    if label != "*"
                )
        seen: set[tuple[str, ...]] = set()
        offset = 0
        while True:
            page = yield _Call(
                "get_all",
                (),
                {"filters": self._and(where), "top_k": _PAGE, "offset": offset, **self._scope},
            )
            rows: list[dict[str, Any]] = page["results"]
            seen.update(_identity(row)[0] for row in rows if _ours(row))
            if len(rows) < _PAGE:
                break
            offset += _PAGE
        namespaces = [ns for ns in seen if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            namespaces = list({ns[: op.max_depth] for ns in namespaces})
        namespaces.sort()
        return namespaces[op.offset : op.offset + op.limit]

    # -- items <-> memories ---------------------------------------------------------------------

    @staticmethod
    def _checked_value(
        namespace: tuple[str, ...], key: str, value: Mapping[str, Any]
    ) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise MetadataError(
                f"the value of {_joined(namespace)}/{key} must be a dict, "
                f"got {type(value).__name__}"
            )
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise MetadataError(
                f"the value of {_joined(namespace)}/{key} has a non-string key {bad[0]!r}"
            )
        try:
            json.dumps(dict(value), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise MetadataError(
                f"the value of {_joined(namespace)}/{key} must be JSON-serialisable: {exc}"
            ) from None
        return dict(value)

    @staticmethod
    def _metadata(
        namespace: tuple[str, ...], key: str, value: dict[str, Any], *, indexed: bool
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {VALUE + name: v for name, v in value.items()}
        meta[KEY] = key
        meta[NAMESPACE] = _joined(namespace)
        for i, label in enumerate(namespace):
            meta[f"{LEVEL}{i}"] = label
        meta[INDEXED] = indexed
        return meta

    def _text(self, value: dict[str, Any], index: Any) -> str:
        paths = list(index) if isinstance(index, list | tuple) else self.fields
        if paths is None:
            found = [value[f] for f in _DEFAULT_TEXT_FIELDS if isinstance(value.get(f), str)]
        else:
            found = [text for path in paths for text in get_text_at_path(value, path)]
        texts = [t.strip() for t in found if t.strip()]
        if texts:
            return "\n".join(texts)
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    def _texts(self, namespace: tuple[str, ...], key: str, text: str) -> list[str]:
        """The texts to try, in order: the plain text, then forms that name the item."""
        path = f"{'/'.join(namespace)}/{key}"
        digest = hashlib.sha256(f"{_joined(namespace)}\x00{key}".encode()).hexdigest()[:16]
        tags = [f"\n[langgraph {path}]", f"\n[langgraph {path} #{digest}]"]
        room = self._max_chars - max(len(t) for t in tags)
        if room < 1:
            return [text[: self._max_chars].strip()]
        body = text[:room].strip()
        return [text[: self._max_chars].strip(), *(body + tag for tag in tags)]

    @staticmethod
    def _item(row: Mapping[str, Any]) -> Item:
        namespace, key = _identity(row)
        return Item(
            value=_value_of(row),
            key=key,
            namespace=namespace,
            created_at=_parse_time(row["created_at"]),
            updated_at=_parse_time(row["updated_at"]),
        )

    @staticmethod
    def _search_item(row: Mapping[str, Any], score: float | None) -> SearchItem:
        namespace, key = _identity(row)
        return SearchItem(
            namespace=namespace,
            key=key,
            value=_value_of(row),
            created_at=_parse_time(row["created_at"]),
            updated_at=_parse_time(row["updated_at"]),
            score=score,
        )

    # -- engramdb extras ------------------------------------------------------------------------

    def memory_id(self, namespace: tuple[str, ...], key: str) -> str | None:
        """The id of the engramdb memory holding an item, or ``None``.

        For engramdb's by-id calls: ``store.memory.history(store.memory_id(ns, key))``
        lists the values the item had, ``store.memory.restore(...)`` brings one back.
        """
        if isinstance(self.memory, Memory):
            row = self._drive_sync(self._find(tuple(namespace), str(key)))
            return None if row is None else str(row["id"])
        loop = self._loop_for_sync()
        return asyncio.run_coroutine_threadsafe(self.amemory_id(namespace, key), loop).result()

    async def amemory_id(self, namespace: tuple[str, ...], key: str) -> str | None:
        """See :meth:`memory_id`."""
        self._loop = asyncio.get_running_loop()
        if isinstance(self.memory, Memory):
            return await asyncio.to_thread(self.memory_id, namespace, key)
        row = await self._drive_async(self._find(tuple(namespace), str(key)))
        return None if row is None else str(row["id"])
