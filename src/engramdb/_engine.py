"""Effects and their two drivers: the one place where sync and async differ.

Every operation of the API is written once, as a generator (a *flow*) that
yields effects — "embed these texts", "call this store method", "ask the
LLM" — and receives their results. :func:`run_sync` performs the effects
with blocking calls; :func:`run_async` performs them without blocking the
event loop (native async for the LLM, a worker thread for the SQLite store
and the CPU-bound local model). An exception raised by an effect is thrown
back into the flow, so the flow's own ``try``/``except`` handles it the same
way under both drivers.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from engramdb.core.drive import run_async, run_sync
from engramdb.stores.base import HistoryEvent, Store

__all__ = [
    "Complete",
    "Effect",
    "EmbedDocuments",
    "EmbedQuery",
    "Emit",
    "Flow",
    "StoreCall",
    "run_async",
    "run_sync",
    "store_call",
]

T = TypeVar("T")
R = TypeVar("R")
E = TypeVar("E")
P = ParamSpec("P")


@dataclass(frozen=True)
class EmbedDocuments:
    """Embed texts to be stored; result: ``(n, dim)`` float32."""

    texts: Sequence[str]


@dataclass(frozen=True)
class EmbedQuery:
    """Embed a search query; result: ``(dim,)`` float32."""

    text: str


@dataclass(frozen=True)
class StoreCall:
    """Call ``store.<method>(*args, **kwargs)``; result: its return value.

    Flows do not build it by hand: :func:`store_call` takes the protocol
    method itself, so mypy checks the arguments and the result type, and
    "go to definition" leads to :class:`~engramdb.stores.base.Store`. The
    drivers look the method up by name on the sync or the async store.
    """

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def store_call(
    method: Callable[Concatenate[Store, P], R], /, *args: P.args, **kwargs: P.kwargs
) -> Flow[R]:
    """Perform one store operation, typed by the protocol method it names.

    ``row = yield from store_call(Store.get, mid)``: ``method`` is a method
    of the :class:`~engramdb.stores.base.Store` protocol; the result has its
    return type under either driver (the async driver calls the same name on
    an :class:`~engramdb.stores.base.AsyncStore`).
    """
    result = yield StoreCall(method.__name__, args, dict(kwargs))
    return cast(R, result)


@dataclass(frozen=True)
class Complete:
    """Ask the LLM; result: a :class:`~engramdb.llms.Completion`."""

    messages: list[dict[str, Any]]
    schema: dict[str, Any] | None = None
    schema_name: str = "response"
    max_tokens: int | None = None
    """Cap on the reply's tokens; ``None``: the LLM's configured default."""


@dataclass(frozen=True)
class Emit:
    """Hand committed history events to the subscribers; result: ``None``."""

    events: Sequence[HistoryEvent]


Effect = EmbedDocuments | EmbedQuery | StoreCall | Complete | Emit
Flow = Generator[Effect, Any, T]
