"""The PostgreSQL store: the same data model and semantics as SQLite, for many processes.

Every store operation is written once, as a generator (a *transaction
flow*) that yields SQL statements (:class:`_Q`) and receives their rows;
:class:`PostgresStore` drives the flows on a psycopg connection pool with
blocking calls, :class:`AsyncPostgresStore` on an async pool without
blocking the event loop. One flow is one transaction: a write runs in READ
COMMITTED and is retried whole when PostgreSQL breaks a deadlock or a
serialisation conflict; a read runs in REPEATABLE READ READ ONLY, so its
statements see one snapshot.

Concurrency comes from the database, not from read-modify-write in Python:

- exact repeats: a partial unique index on ``(partition, hash) WHERE
  deleted_at IS NULL`` (the caller's visible scope, see
  :func:`~engramdb.stores.base.visible_scope`) and ``INSERT … ON CONFLICT
  DO NOTHING``; a writer that loses the race attaches its session to the
  winner's row;
- entities: ``INSERT … ON CONFLICT DO NOTHING`` on ``(owner, normalized)``;
- lock order: a write takes the owner's advisory lock (shared; purge takes it
  exclusive, because it deletes the owner's orphaned entities), then inserts
  entities in key order, then touches memories in ``(owner, hash)`` order,
  so two writers cannot wait on each other in a cycle;
- updates lock the memory row (``FOR UPDATE``) so versions never fork.

Vectors are a ``vector(dim)`` column searched through an HNSW index
(``vector_cosine_ops``) with pgvector's iterative scans, so scope and filter
conditions cut the candidates without starving the result; an exact query
takes over when the index returns fewer rows than asked.

Keyword search uses the SQLite backend's BM25 formula, computed in SQL
over postings that triggers keep (schema version 5, ``_reads.py``'s
``keyword_ranking``). With ``keyword_index = "process"`` it uses, as before,
the same in-memory :class:`~engramdb.core.bm25.BM25Index` per primary scope
id over the same stored terms. Such a cache catches up by reading rows whose ``txid``
(the ``xid8`` of the transaction that last changed them) belongs to a
transaction that had not ended at the snapshot it last read at (``txid >=
xmax`` or in ``xip``), so nothing committed late can be missed (a plain
sequence would be: numbers are taken in one order and committed in
another) and a long transaction elsewhere does not make every search read
again what it holds back. Purge and reset bump ``meta.epoch``, which drops
every cache.

With ``read_url`` (a hot standby), the reads of calls that only read go to
the replica, with read-your-writes for the store that wrote and the primary
as the fallback; a standby's snapshot lists no running transaction, so a
catch-up there trusts only its ``xmin`` (``_replica.py``, ``_reads.py``).
"""

try:  # the optional dependency: pip install 'engramdb[postgres]'
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'engramdb[postgres]'"
    ) from exc

from engramdb.stores.postgres._store import DEFAULT_SCHEMA, AsyncPostgresStore, PostgresStore

__all__ = ["DEFAULT_SCHEMA", "AsyncPostgresStore", "PostgresStore"]
