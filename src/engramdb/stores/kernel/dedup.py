"""Dedup and attach decisions of an add, for every backend.

A repeat is a live memory with the same content hash that the caller sees
(docs/ARCHITECTURE.md, "Dedup within what the caller sees"); the backend
finds it in SQL. What follows is decided here: which of the caller's
sessions the repeat attaches (:func:`sessions_to_attach`), the outcome
records (:func:`stored`, :func:`repeated`), and the rule for a text that
comes twice in one batch (:func:`first_occurrences`, :func:`in_input_order`):
the first occurrence does the work, the others are a plain NONE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engramdb.core.records import AddOutcome, HistoryEvent, NewMemory, Scope

__all__ = ["first_occurrences", "in_input_order", "repeated", "sessions_to_attach", "stored"]


def sessions_to_attach(
    scope: Scope, agent_id: str | None, run_id: str | None
) -> list[tuple[str, str]]:
    """The ``(kind, value)`` sessions of ``scope`` a repeat may attach, agent first.

    ``agent_id`` and ``run_id`` are the memory's own (primary) ids: a session
    is attached only where the caller's differs from them. The backend
    attaches each unless it is attached already, and writes one ATTACH event
    for those it did attach (:func:`~engramdb.stores.kernel.history.attach_event`).
    """
    return [
        (kind, value)
        for kind, value, primary in (
            ("agent_id", scope.agent_id, agent_id),
            ("run_id", scope.run_id, run_id),
        )
        if value is not None and value != primary
    ]


def stored(mem: NewMemory, event: HistoryEvent | None = None) -> AddOutcome:
    """The outcome of a memory stored anew (``event``: its ADD, once written)."""
    return AddOutcome(mem.id, mem.text, "ADD", event)


def repeated(memory_id: str, text: str, event: HistoryEvent | None = None) -> AddOutcome:
    """The outcome of a repeat of ``memory_id`` (``event``: the ATTACH, if sessions attached)."""
    return AddOutcome(memory_id, text, "NONE", event)


def first_occurrences(memories: Sequence[NewMemory]) -> dict[str, int]:
    """Hash → index of the first memory of the batch with that text."""
    first: dict[str, int] = {}
    for i, mem in enumerate(memories):
        first.setdefault(mem.hash, i)
    return first


def in_input_order(
    memories: Sequence[NewMemory], first: Mapping[str, int], outcomes: Mapping[str, AddOutcome]
) -> list[AddOutcome]:
    """One outcome per memory of the batch, from the outcome of each text.

    A repeat within the batch is a NONE of the memory its first occurrence
    stored or found, with no event: the first occurrence already did the work.
    """
    result: list[AddOutcome] = []
    for i, mem in enumerate(memories):
        outcome = outcomes[mem.hash]
        if i != first[mem.hash]:
            outcome = repeated(outcome.id, outcome.memory)
        result.append(outcome)
    return result
