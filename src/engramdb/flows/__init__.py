"""Every operation of the API, written once as a flow of effects.

:class:`Operations` holds configuration only (no connection, no client,
no model): its methods are generators that validate input, yield effects
(:mod:`engramdb._engine`) for the I/O, and return mem0-shaped results.
``Memory`` drives them synchronously, ``AsyncMemory`` asynchronously.

The flows are split by concern, one mixin each, over one base state::

    shared.py      FlowState: configuration, caller scope, visibility checks;
                   result shaping (item, event_dict, history_item, ...)
    read.py        ReadFlows: search (hybrid retrieval, levers) and reads by id
    browse.py      BrowseFlows(ReadFlows): a scope's entities, an entity's
                   memories, a count of a list
    change.py      ChangeFlows: update, delete, delete_all, restore, purge
    extraction.py  ExtractionFlows(ReadFlows, ChangeFlows): the LLM passes
                   and the store write every add ends in
    write.py       WriteFlows(ExtractionFlows): add, verbatim, retry, failures

A module imports only those above it in this list (``read`` and ``change``
are siblings, as are ``browse`` and ``change``), and none imports a face.
What is not here: moving the store to another embedder is a flow of its own
(:mod:`engramdb.reembed`, driven by both faces); the upkeep jobs
(:mod:`engramdb.maintain`) run on a blocking ``Memory`` through its public
methods, not as a flow; export and import are bulk store calls plus file
I/O, kept in the faces (:mod:`engramdb._face`).
"""

from __future__ import annotations

from engramdb.flows.browse import BrowseFlows
from engramdb.flows.change import ChangeFlows
from engramdb.flows.read import ReadFlows
from engramdb.flows.shared import (
    FlowState,
    entities_of,
    event_dict,
    expiration_date,
    expires_at_of,
    history_item,
    item,
    message_item,
)
from engramdb.flows.write import WriteFlows

__all__ = [
    "Operations",
    "entities_of",
    "event_dict",
    "expiration_date",
    "expires_at_of",
    "history_item",
    "item",
    "message_item",
]


class Operations(WriteFlows, BrowseFlows, ReadFlows, ChangeFlows, FlowState):
    """The flows behind every API method, parameterised by configuration only."""
