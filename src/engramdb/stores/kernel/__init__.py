"""The store kernel: what every backend does alike, with no I/O.

A backend (``stores/sqlite/``, ``stores/postgres/``) keeps its schema,
its statements and its connections, reads what a decision needs and hands
it to these modules:

- :mod:`.candidates`: the candidate pool of a search (vector hits, BM25
  hits, entity links, the entity-degree rule) and the ``Candidate`` records;
- :mod:`.caches`: the per-scope in-process caches, their epoch and their
  eviction (each backend keeps its own catch-up query and its own rule for
  concurrent catch-ups);
- :mod:`.imports`: what an import of exported rows writes and how it refuses;
- :mod:`.dedup`: which sessions a repeat attaches and the outcome records of
  an add;
- :mod:`.neighbours` and :mod:`.entity_hop`: the session match and order of
  ``Store.neighbours``, the assembly of ``Store.entity_hop`` (search's
  second-stage levers);
- :mod:`.erasure`: what a purge erases and what it re-indexes (planned from
  facts the backend reads, applied by the backend in one transaction);
- :mod:`.history`: the history events of every change and the plan of a
  restore;
- :mod:`.rebind`: what a move to another embedder finds stale, how it checks
  the new vectors and how it refuses;
- :mod:`.rows`: stored columns to :class:`~engramdb.core.records.MemoryRow`
  and :class:`~engramdb.core.records.HistoryEvent`, over each backend's value
  converters;
- :mod:`.sql`: the few statements both dialects write alike, over a
  :class:`~.sql.Dialect` table.
"""
