"""The write flows of the PostgreSQL store, one class over the modules that hold them.

One module per kind of write, each a mixin over :class:`_WriteBase` (the steps
they share: messages, entities, history, locked rows, the epoch):

- ``_adds``: ``add`` (new memories in bulk, repeats), ``attach_session``, ``keep_failed``;
- ``_changes``: ``update``, ``delete``, ``delete_scope``, ``plan_restore`` / ``apply_restore``;
- ``_purge``: ``erasure_facts``, ``plan_purge`` / ``apply_purge``, ``vacuum_statements``;
- ``_bulk``: ``import_rows``, ``rebind_embedder``, ``reset``;
- ``_links``: ``link``, ``unlink`` (links between existing memories).

A new write flow goes into the module of its kind (or a new mixin listed here);
``_store.py`` declares it as an operation of both faces.
"""

from __future__ import annotations

from engramdb.stores.postgres._adds import _AddFlows
from engramdb.stores.postgres._bulk import _BulkFlows
from engramdb.stores.postgres._changes import _ChangeFlows
from engramdb.stores.postgres._links import _LinkFlows
from engramdb.stores.postgres._purge import _PurgeFlows


class _WriteFlows(_AddFlows, _ChangeFlows, _PurgeFlows, _BulkFlows, _LinkFlows):
    """The write transactions: one flow, one transaction."""
