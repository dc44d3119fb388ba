"""Importers: bring another memory system's data into an engramdb store.

Each importer reads the other system's own storage into records of
engramdb's export format and hands them to :meth:`engramdb.Memory.import_jsonl`,
so an import is validated, re-embedded and written exactly like a restore of
an engramdb export: in one transaction, all or nothing.

- :mod:`engramdb.importers.mem0`: mem0 (its local Qdrant folder, FAISS
  index or pgvector table, and its SQLite history); ``engram import mem0``.
"""
