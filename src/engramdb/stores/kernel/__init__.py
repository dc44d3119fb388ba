"""The store kernel: what every backend does alike, with no SQL and no I/O.

A backend (``stores/sqlite.py``, ``stores/postgres.py``) keeps its schema,
its statements and its connections, reads what a decision needs and hands
it to these modules:

- :mod:`.candidates`: the candidate pool of a search (vector hits, BM25
  hits, entity links, the entity-degree rule) and the ``Candidate`` records;
- :mod:`.caches`: the per-scope in-process caches, their epoch and their
  eviction (each backend keeps its own catch-up query and its own rule for
  concurrent catch-ups);
- :mod:`.imports`: what an import of exported rows writes and how it refuses;
- :mod:`.dedup`: which sessions a repeat attaches and the outcome records of
  an add.

Erasure planning (``stores/_erasure.py``) and history planning
(``stores/_history.py``) belong here too; they move in when the modules that
import them (``_ops.py``, ``stores/base.py``) are next changed.
"""
