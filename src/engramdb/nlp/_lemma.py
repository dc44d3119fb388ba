"""The one simplemma lemmatiser of the process, loaded lazily and once.

simplemma keeps a dictionary per language (English: about 0.4 s and 26 MB
to load; German, in simplemma's compact form: 2.5 s and 18 MB). A dictionary loads on
the first word of its language, under a lock so that two threads meeting a
new language together load it once, not twice. After that every call only
reads: simplemma's token cache is a C ``lru_cache``, safe to share.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simplemma import Lemmatizer

__all__ = ["is_english_word", "lemmatize"]

_lock = threading.Lock()
_state: dict[str, Lemmatizer] = {}
_loaded: frozenset[str] = frozenset()


def _build() -> Lemmatizer:
    # Imported here, not at module import, so `import engramdb` stays fast.
    from simplemma import Lemmatizer
    from simplemma.strategies import (
        DEFAULT_DICTIONARY_FACTORY,
        LOW_MEMORY_DICTIONARY_FACTORY,
        DefaultStrategy,
    )

    class _Factory:
        """English in the fast form, other languages in the compact one.

        English is nearly every memory, and the fast form lemmatises new
        words 2.6 times as fast (13,500 against 5,200 unseen sentences/s) for
        22 MB more. Other languages are rarer; their fast forms are large
        (German 110 MB against 18 MB).
        """

        def get_dictionary(self, lang: str) -> Mapping[str, str]:
            if lang == "en":
                return DEFAULT_DICTIONARY_FACTORY.get_dictionary(lang)
            return LOW_MEMORY_DICTIONARY_FACTORY.get_dictionary(lang)

    # greedy=False: greedy affix stripping merges unrelated words more often
    # than it helps search.
    return Lemmatizer(
        cache_max_size=1 << 16,
        lemmatization_strategy=DefaultStrategy(greedy=False, dictionary_factory=_Factory()),
    )


def _ready(langs: tuple[str, ...]) -> Lemmatizer:
    global _loaded
    lemmatizer = _state.get("lemmatizer")
    if lemmatizer is not None and _loaded.issuperset(langs):
        return lemmatizer
    with _lock:
        lemmatizer = _state.get("lemmatizer")
        if lemmatizer is None:
            lemmatizer = _state["lemmatizer"] = _build()
        for lang in langs:
            if lang not in _loaded:
                # Any lookup makes simplemma load and keep that dictionary.
                lemmatizer.lemmatize("a", lang)
                _loaded = _loaded | {lang}
        return lemmatizer


def lemmatize(token: str, langs: tuple[str, ...]) -> str:
    """Return simplemma's lemma of ``token``, trying ``langs`` in order.

    Words no dictionary knows come back as they are (sometimes lower-cased),
    so names and foreign words survive.
    """
    return _ready(langs).lemmatize(token, langs)


@lru_cache(maxsize=1 << 14)
def is_english_word(word: str) -> bool:
    """Whether simplemma's English dictionary knows ``word`` (case-insensitive)."""
    _ready(("en",))
    from simplemma import is_known

    return is_known(word.casefold(), "en")
