"""Which personal attribute a question asks about, from the idiom it asks in.

The attribute classifier (:mod:`engramdb.attributes`) reads a question's
embedding, and the small embedder reads words, not idioms: "What does Amara
get around in these days?" is about a vehicle, "How does Ines keep fit?"
about sport, "What does Marta do in her free time?" about hobbies, "What
does Chiara do for a living?" about work, and none of them says the topic's
word. Everyday English asks about a few attributes mostly in such phrases,
so a short list of them says what the vector misses.

:func:`idiom_attributes` returns the attribute names (:data:`IDIOMS`' keys,
the classifier's names) whose idioms a question uses. Only question idioms
are listed, not topic words: "car", "job" or "vegan" are words the
classifier already reads, and a statement's attribute is always read from
its vector. Every pattern is a bounded alternation with no gap, so any
input is read in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = ["IDIOMS", "idiom_attributes"]

_GET = r"get(?:s|ting)?|got"
_KEEP = r"keep(?:s|ing)?|kept|stay(?:s|ing|ed)?"
_SELF = r"(?:him|her|them|my|your|our)sel(?:f|ves)"

IDIOMS: Final[Mapping[str, str]] = {
    "vehicle": (
        # "get around in", not "get around to" (find the time) nor "forget about"
        rf"\b(?:{_GET})\s+(?:around|about)\b(?!\s+to\b)"
        r"|\bbehind\s+the\s+wheel|\b(?:set|pair)\s+of\s+wheels|\bwhat\s+wheels"
        r"|\bwhat\s+(?:(?:do(?:es)?|did)\s+\w+(?:\s+\w+)?\s+)?driv(?:e|es|ing)\b"
        r"|\bdriv(?:e|es|ing)\s+(?:these\s+days|now(?:adays)?|at\s+the\s+moment)"
        r"|\bmode\s+of\s+transport|\bget\s+to\s+work\s+in\b"
    ),
    "hobby": (
        r"\b(?:free|spare|leisure|down|off)\s*-?time\b|\bfor\s+fun\b|\bpastimes?\b"
        r"|\bunwind(?:s|ing)?\b|\bto\s+relax\b|\bwhen\s+(?:\w+\s+)?(?:is|are|isn't|aren't)\s+"
        r"(?:not\s+)?working\b"
        rf"|\b(?:keep|keeps|keeping)\s+{_SELF}\s+(?:busy|occupied|entertained)\b"
        # "into outside of work", "do outside work": what is not work
        r"|\boutside\s+(?:of\s+)?(?:work|(?:their|his|her|your|my)\s+job)\b"
    ),
    "fitness": (
        rf"\b(?:{_KEEP})\s+(?:fit|in\s+shape|active|healthy)\b"
        # "work out", not "work out how / the answer" (figure out)
        r"|\bwork(?:s|ing)?\s+out\b(?!\s+(?:the|a|an|how|what|why|whether|if|who|where|when"
        r"|that|this|it|its|their|his|her|some|any)\b)|\bworkouts?\b|\bexercis(?:e|es|ing)\b"
        r"|\bget(?:s|ting)?\s+(?:their|his|her|your|my|some)?\s*exercise\b|\bbreak\s+a\s+sweat\b"
    ),
    "job": (
        r"\bfor\s+a\s+living\b|\b(?:earn|make)(?:s|ing)?\s+(?:a|their|his|her|your|my)\s+living\b"
        # "earn money", "how does Ali make his money": not "will this make money"
        r"|\bearn(?:s|ing)?\s+(?:(?:their|his|her|your|my)\s+)?(?:money|an\s+income)\b"
        r"|\bhow\s+(?:do|does|did)\s+\w+(?:\s+\w+)?\s+make\s+(?:(?:their|his|her|your|my)\s+)?"
        r"(?:money|an\s+income)\b"
        r"|\bon\s+the\s+payroll\b"
        r"|\bpays?\s+the\s+bills\b|\bline\s+of\s+work\b|\bdo(?:es)?\s+for\s+work\b"
        r"|\bday\s+job\b|\bnine\s*-?\s*to\s*-?\s*five\b"
        # "works as", "does Hannah work for", "working for": not "which day works for Mel"
        r"|\bwork(?:s|ed|ing)?\s+as\b|\bworking\s+for\b"
        r"|\b(?:do|does|did)\s+\w+(?:\s+\w+)?\s+work\s+for\b"
    ),
    "education": r"\benrol(?:l?s|led|ling|ment)\b|\bsigned\s+up\s+for\s+(?:a|an|the)\s+course\b",
    "diet": (
        r"\bwhat\s+(?:do(?:es)?|can|can't|cannot|won't)\s+\w+(?:\s+\w+)?\s+eat\b"
        r"|\beat(?:s|ing)?\s+meat\b|\beating\s+habits\b|\bway\s+of\s+eating\b"
        r"|\bwhat\s+(?:\w+\s+){0,2}eat(?:s|ing)?\s+(?:these\s+days|now(?:adays)?)"
    ),
    "partner": (
        r"\bseeing\s+(?:anyone|someone|somebody|anybody)\b|\bother\s+half\b"
        r"|\bsignificant\s+other\b|\blove\s+life\b"
        r"|\bwho\s+(?:is|are)\s+\w+\s+(?:seeing|dating)\b"
    ),
    "pet": r"\bfurry\s+(?:friend|companion)s?\b|\bfour-?\s*legged\b|\banimals?\s+at\s+home\b",
    "drink": r"\busual\s+order\b|\bcoffee\s+order\b|\bcaffeine\s+fix\b|\bgo-?\s*to\s+drink\b",
    "home": (
        # "the city Mei calls home", not "did she call home" (a phone call)
        r"\bcalls\s+home\b|\b(?:do|does)\s+\w+(?:\s+\w+)?\s+call\s+home\b|\bwhere\s+(?:is|are)\s+\w+(?:\s+\w+)?\s+based\b|\bwhere\s+(?:\w+\s+){1,2}liv(?:e|es|ing)\b"
    ),
}
"""Each attribute's question idioms, as one regular expression (case-insensitive)."""

_COMPILED: Final = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in IDIOMS.items()}


def idiom_attributes(question: str) -> frozenset[str]:
    """The attributes (classifier names: ``vehicle``, ``hobby``, ...) a question's idioms ask.

    Empty when it uses none of :data:`IDIOMS`: the classifier's reading of its
    vector stands then.
    """
    return frozenset(name for name, pattern in _COMPILED.items() if pattern.search(question))
