"""The two drivers of a generator of effects: blocking, and awaiting each effect.

One flow, two ways to run it: :func:`run_sync` performs each yielded effect
with a blocking call, :func:`run_async` awaits it. An exception raised while
performing an effect is thrown back into the generator, so its own
``try``/``except`` handles it the same way under both. The API's flows
(:mod:`engramdb._engine` defines their effects) and a backend's transaction
flows (its statements: :mod:`engramdb.stores.postgres._driver`) share these,
which is why they live at the bottom of the layers, knowing no effect type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["Catch", "run_async", "run_sync"]

T = TypeVar("T")
E = TypeVar("E")

Catch = type[BaseException] | tuple[type[BaseException], ...]
"""The exception types a driver throws back into the flow."""


def run_sync(
    flow: Generator[E, Any, T], perform: Callable[[E], Any], *, catch: Catch = Exception
) -> T:
    """Drive ``flow`` to its end, performing each effect with ``perform``.

    An exception of a ``catch`` type raised by ``perform`` is thrown into the
    flow; any other propagates. The same driver runs the API's flows (effects
    of this module) and a backend's transaction flows (its statements).
    """
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = perform(effect), None
        except catch as exc:
            value, error = None, exc


async def run_async(
    flow: Generator[E, Any, T], perform: Callable[[E], Awaitable[Any]], *, catch: Catch = Exception
) -> T:
    """Like :func:`run_sync`, awaiting each effect."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = await perform(effect), None
        except asyncio.CancelledError:
            flow.close()
            raise
        except catch as exc:
            value, error = None, exc
