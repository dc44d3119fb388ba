"""The hostile-reply corpus now lives in the package: ``engramdb_bench._hostile``.

Kept here for tests that still load this file by path; it only re-exports.
"""

from engramdb_bench._hostile import (  # noqa: F401
    CASES,
    FOREIGN,
    GOOD,
    GOOD_TEXTS,
    KNOWN,
    A,
    B,
    C,
    Case,
)
