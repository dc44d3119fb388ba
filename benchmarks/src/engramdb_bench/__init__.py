"""engramdb's benchmarks: the code of every ``engram bench`` command.

A distribution of its own (``engramdb-bench``, ``benchmarks/`` in the repository),
so the engramdb wheel carries no benchmark code: install it from a checkout with
``pip install -e benchmarks/``. Each module also runs as
``python -m engramdb_bench.<name>``; ``docs/benchmarks.md`` describes them all.
"""
