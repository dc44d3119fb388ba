"""Text normalisation and the content hash that makes exact repeats impossible."""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["content_hash", "normalize_text"]

_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Return the form of ``text`` that decides whether two memories are equal.

    Unicode NFKC (full-width and compatibility forms fold together), case-folded
    (``ß`` == ``ss``), whitespace runs collapsed to one space, ends stripped.
    """
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def content_hash(text: str) -> str:
    """MD5 hex digest of :func:`normalize_text` (a dedup key, not a security hash)."""
    return hashlib.md5(normalize_text(text).encode("utf-8"), usedforsecurity=False).hexdigest()
