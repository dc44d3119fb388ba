"""Language processing for keyword search and entity links: pure logic, no I/O.

- :func:`index_terms` / :func:`query_terms`: lemmatised keyword terms for the
  BM25 index (any language; Chinese, Japanese and Korean as bigrams);
  :func:`document_terms`: a memory's terms with its context messages'.
- :func:`extract_entities`: people, places, organisations, dates, numbers
  and named things found by rules, offline; :func:`normalize_entity` gives
  the linking key of any name. An optional spaCy model joins the rules
  through :class:`engramdb.nlp.model.ModelEntityExtractor` (opt-in).
"""

from engramdb.nlp.entities import Entity, extract_entities, normalize_entity
from engramdb.nlp.terms import (
    SUPPORTED_LANGUAGES,
    TERMS_VERSION,
    detect_language,
    document_terms,
    index_terms,
    query_terms,
)

__all__ = [
    "SUPPORTED_LANGUAGES",
    "TERMS_VERSION",
    "Entity",
    "detect_language",
    "document_terms",
    "extract_entities",
    "index_terms",
    "normalize_entity",
    "query_terms",
]
