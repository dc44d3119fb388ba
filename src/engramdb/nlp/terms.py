"""Keyword terms for the BM25 index: tokenise, lemmatise, drop stop words.

:func:`index_terms` turns a memory into the space-separated terms stored in
the full-text column; :func:`query_terms` applies the same steps to a query.
The two must agree exactly, so every decision here depends only on the text
itself: no configuration, no state that changes between calls.

The pipeline, and why each step is there:

1. Unicode NFKC, so full-width letters and digits, ligatures and other
   compatibility forms index like their plain forms.
2. Tokens: runs of Chinese, Japanese or Korean characters, and words of any
   other script (letters, digits, combining marks, joined by inner
   apostrophes and hyphens so that "don't", "Caroline's" and "e-mail" reach
   the lemmatiser whole).
3. Language: the stop-word language with the most hits in the text, English
   unless another language clearly wins (:func:`detect_language`). It picks
   the lemmatiser dictionary; counting stop words costs a few set lookups,
   where a statistical detector would cost more than the lemmatising itself.
4. Lemmas from simplemma ("went" -> "go", "dogs" -> "dog"), then case-folded,
   stripped of diacritics and split at any leftover punctuation, so that
   every term is letters and digits only and SQLite's ``unicode61``
   tokenizer, PostgreSQL or a plain ``str.split`` all see the same terms.
5. Stop words dropped (by surface form or lemma); all-capital acronyms are
   kept even when they spell one ("US", "IT").
6. CJK runs become overlapping character bigrams (Lucene's CJK approach: no
   dictionary, no segmentation errors) plus the single Han characters that
   are not grammar words, so that a one-character word such as 猫 (cat) can
   be found too.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from engramdb.nlp._lemma import lemmatize
from engramdb.nlp.stopwords import CJK_STOP_CHARS, STOP_WORDS

__all__ = [
    "ATTRIBUTE_PREFIX",
    "CJK_CHARS",
    "SUPPORTED_LANGUAGES",
    "detect_language",
    "document_terms",
    "index_terms",
    "query_terms",
    "split_attribute_terms",
    "with_attribute_terms",
]

TERMS_VERSION = 1
"""Bumped whenever :func:`index_terms` may give different terms for the same
text (a rule here, a stop word, the simplemma release): stored terms from an
older version must then be rebuilt, or queries stop matching them."""

SUPPORTED_LANGUAGES: tuple[str, ...] = tuple(STOP_WORDS)
"""Languages lemmatised (ISO 639-1); words of any other language are only
case-folded and stripped of diacritics."""

# Han ideographs (with extension A, compatibility and the supplementary
# planes), kana and Hangul syllables: scripts written without spaces between
# words, or (Korean) with particles glued to words.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
CJK_CHARS = _HAN + "\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af"
_CJK = CJK_CHARS
_HAN_RE = re.compile(f"[{_HAN}]")
_CJK_RUN = re.compile(f"[{_CJK}]+")

# Thousands separators inside numbers go before tokenising: "1,000" -> "1000".
_THOUSANDS = re.compile(r"(?<=\d)[,\u202f\u00a0'](?=\d{3}(?!\d))")
# Where _THOUSANDS may match at all (a cheaper search than its look-behind at every place).
_SEPARATED = re.compile(r"\d[,\u202f\u00a0']\d")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")
# Apostrophes and hyphens left inside a lemma.
_JOINERS = re.compile("['\u2019\\-]+")
# What is left of a lemma after folding: letters and digits only.
_PIECES = re.compile(r"[^\W_]+")


@lru_cache(maxsize=1)
def _marks() -> tuple[str, dict[int, None]]:
    """Return the combining marks as a regex class body and as a deletion table.

    Built from the running Python's Unicode database (about 25 ms, once) so
    that it never falls behind the ``str`` methods used beside it. The Basic
    Multilingual Plane plus the variation selectors cover every living
    script's marks.
    """
    ranges: list[str] = []
    table: dict[int, None] = {}
    start = -1
    codepoints = [*range(0x10000), *range(0xE0100, 0xE01F0), 0x10FFFF]
    for i, cp in enumerate(codepoints):
        is_mark = cp != 0x10FFFF and unicodedata.category(chr(cp)).startswith("M")
        if is_mark:
            table[cp] = None
            if start < 0:
                start = cp
        elif start >= 0:
            end = codepoints[i - 1]
            ranges.append(re.escape(chr(start)) + "-" + re.escape(chr(end)))
            start = -1
    return "".join(ranges), table


@lru_cache(maxsize=1)
def _token_re() -> re.Pattern[str]:
    marks, _ = _marks()
    # A word character: letter or digit (not underscore, not CJK) or mark.
    char = f"(?:[^\\W_{_CJK}]|[{marks}])"
    word = f"{char}+(?:['\u2019\\-]{char}+)*"
    return re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<word>{word})")


@lru_cache(maxsize=1)
def _ascii_word_re() -> re.Pattern[str]:
    # What _token_re matches in ASCII text: letters and digits (no CJK, no combining
    # marks), joined only by the apostrophe and the hyphen. findall gives the words.
    return re.compile(r"[A-Za-z0-9]+(?:['\-][A-Za-z0-9]+)*")


def fold(text: str) -> str:
    """Case-fold and drop combining marks: "Café" -> "cafe", "Straße" -> "strasse".

    Input is expected in NFKC (both public entry points normalise first).

    For alphabets this is what ``unicode61 remove_diacritics 2`` does; for
    abugidas (Devanagari, Thai) it leaves one term per word, its consonants,
    where ``unicode61`` would cut the word at every vowel sign.
    """
    text = text.casefold()
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text).translate(_marks()[1])
    # NFC puts Hangul syllables back together after NFKD split them into jamo.
    return unicodedata.normalize("NFC", decomposed)


def detect_language(text: str) -> str:
    """Guess the language of ``text`` from its stop words.

    Returns the code (one of :data:`SUPPORTED_LANGUAGES`) with the most
    stop-word hits, or ``"en"`` unless another language has at least two hits
    and strictly more than English. Deliberately conservative: the answer
    only picks a lemmatiser dictionary, and English is the common case.
    """
    text = unicodedata.normalize("NFKC", text)
    words = [fold(m.group()) for m in _token_re().finditer(text) if m.lastgroup == "word"]
    return _language_of(words)


def _language_of(folded_words: list[str]) -> str:
    # Another language wins with at least two hits and more than English: only the
    # words that are some other language's stop word can make its hits.
    other = [w for w in folded_words if w in _OTHER_STOPS]
    if len(other) < 2:
        return "en"
    english = sum(1 for w in folded_words if w in STOP_WORDS["en"])
    if len(other) <= english:
        return "en"
    best, best_hits = "en", english
    for lang, stops in STOP_WORDS.items():
        if lang == "en":
            continue
        hits = sum(1 for w in other if w in stops)
        if hits > best_hits and hits >= 2:
            best, best_hits = lang, hits
    return best


def _langs_for(lang: str) -> tuple[str, ...]:
    # English is tried second for other languages: English words are common
    # in any chat, and its dictionary is loaded anyway.
    return ("en",) if lang == "en" else (lang, "en")


def _stops_for(lang: str) -> frozenset[str]:
    return STOP_WORDS["en"] if lang == "en" else STOP_WORDS[lang] | STOP_WORDS["en"]


_STOPS_FOR: dict[str, frozenset[str]] = {lang: _stops_for(lang) for lang in STOP_WORDS}
_OTHER_STOPS: frozenset[str] = frozenset().union(
    *(stops for lang, stops in STOP_WORDS.items() if lang != "en")
)


def _number(piece: str) -> str:
    ordinal = _ORDINAL.fullmatch(piece)
    if ordinal:
        piece = ordinal.group(1)
    if piece.isdigit() and len(piece) <= 2:
        # "05" and "5" are the same day or month; longer numbers (postcodes,
        # phone numbers) keep their zeros.
        return piece.lstrip("0") or "0"
    return piece


@lru_cache(maxsize=1 << 16)
def _word_terms(word: str, lang: str, keep_acronym: bool) -> tuple[str, ...]:
    """Index terms of one word token (cached: vocabularies repeat a lot)."""
    stops = _STOPS_FOR[lang]
    acronym = keep_acronym and len(word) > 1 and word.isupper()
    if not acronym and fold(word) in stops:
        return ()
    langs = _langs_for(lang)
    # The whole word first: simplemma knows "e-mail", "don't", "Caroline's".
    parts = _JOINERS.split(lemmatize(word, langs))
    if len(parts) > 1:
        # Still joined ("well-known"): lemmatise each part, so that the parts
        # index like the same words standing alone ("known" -> "know").
        parts = [lemmatize(part, langs) for part in parts if part]
    out: list[str] = []
    for part in parts:
        for piece in _PIECES.findall(fold(part)):
            piece = _number(piece)
            if acronym or piece not in stops:
                out.append(piece)
    return tuple(out)


def _cjk_terms(run: str) -> list[str]:
    """Overlapping bigrams of a CJK run, plus its content-bearing Han characters."""
    if len(run) == 1:
        # A lone kana is a particle; a lone Hangul syllable or Han character
        # is a word.
        is_word = _HAN_RE.match(run) or "\uac00" <= run <= "\ud7af"
        return [run] if is_word and run not in CJK_STOP_CHARS else []
    out: list[str] = []
    for i, char in enumerate(run):
        if char not in CJK_STOP_CHARS and _HAN_RE.match(char):
            out.append(char)
        if i + 1 < len(run):
            out.append(run[i : i + 2])
    return out


def _tokens(text: str) -> tuple[list[str], list[bool] | None, str, bool]:
    """Steps 1-3 of the pipeline: ``text``'s tokens, its CJK runs, language and acronyms.

    Returns the tokens in order, which of them are CJK runs (None when none
    is), the language and whether all-capital words count as acronyms.
    """
    if text.isascii():
        # NFKC leaves ASCII as it is, and fold() of an ASCII word is its casefold, which
        # for ASCII is lower(): one findall each instead of a match object per word.
        if ("," in text or "'" in text) and _SEPARATED.search(text):
            text = _THOUSANDS.sub("", text)
        words: list[str] = _ascii_word_re().findall(text)
        if not words:
            return words, None, "en", True
        lang = _language_of(" ".join(words).lower().split(" "))
        return words, None, lang, not text.isupper()
    text = _THOUSANDS.sub("", unicodedata.normalize("NFKC", text))
    matches = list(_token_re().finditer(text))
    words = [m.group() for m in matches]
    cjk = [m.lastgroup == "cjk" for m in matches]
    lang = _language_of([fold(w) for w, c in zip(words, cjk, strict=True) if not c])
    # In all-capital text every word looks like an acronym; trust none then.
    return words, cjk if any(cjk) else None, lang, not text.isupper()


def _terms(text: str) -> list[str]:
    words, cjk, lang, keep_acronyms = _tokens(text)
    out: list[str] = []
    if cjk is None:
        for word in words:
            out += _word_terms(word, lang, keep_acronyms)
        return out
    for word, is_cjk in zip(words, cjk, strict=True):
        out += _cjk_terms(word) if is_cjk else _word_terms(word, lang, keep_acronyms)
    return out


def index_terms(text: str) -> str:
    """Return the keyword-index form of ``text``: space-separated terms.

    Terms are lower-case lemmas of letters and digits only, stop words
    removed, numbers kept, CJK text as character bigrams; each term survives
    SQLite's ``unicode61`` tokenizer unsplit. Empty when nothing is left.
    """
    return " ".join(_terms(text))


def document_terms(text: str, context: Sequence[str] = ()) -> str:
    """The keyword terms of a memory: its own, then those of its context messages."""
    own = index_terms(text)
    extra = index_terms("\n".join(context)) if context else ""
    return f"{own} {extra}".strip() if extra else own


ATTRIBUTE_PREFIX = "@"
"""Attribute terms (``@vehicle``, :mod:`engramdb.attributes`) start with it: the
tokenizer drops an ``@`` from any text, so no word of a text is ever one."""


def split_attribute_terms(terms: str) -> tuple[str, str]:
    """A stored terms string as its words and its attribute terms (each space-joined)."""
    words: list[str] = []
    attrs: list[str] = []
    for term in terms.split():
        (attrs if term.startswith(ATTRIBUTE_PREFIX) else words).append(term)
    return " ".join(words), " ".join(attrs)


def with_attribute_terms(terms: str, attrs: str | Sequence[str]) -> str:
    """``terms`` followed by the attribute terms ``attrs``."""
    extra = attrs if isinstance(attrs, str) else " ".join(attrs)
    return f"{terms} {extra}".strip() if extra else terms


def query_terms(text: str) -> list[str]:
    """Return the terms of a query, normalised like :func:`index_terms`.

    Duplicates are dropped and first-seen order kept; the caller ORs the
    quoted terms into one full-text match expression.
    """
    return list(dict.fromkeys(_terms(text)))
