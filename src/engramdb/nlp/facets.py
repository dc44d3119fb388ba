"""Which side of someone's work a question asks about, and which side a statement says.

Work is one attribute to the classifier (``@job``: :mod:`engramdb.attributes`),
but it has two sides that change on their own: *where* someone works (the
employer: "Sofia joined Larkspur Analytics") and *what* they work as (the
occupation: "Sofia retrained as a paramedic"). Someone who changes employer
keeps their occupation, and the other way round, so the latest work statement
is not always the answer: "Which company does Signe work for?" is answered by
the latest statement that names an employer, even when a newer one says she
now works as a vet.

Cheap rules, read from the words:

- :func:`asked_work_facet`: a question asks about the employer ("Where does
  Talia work?", "Who is Henrik's employer?", "Which company ...") or the
  occupation ("What does Chiara do for a living?", "What did Callum work as
  ...?", "... before becoming a teacher?"), or neither;
- :func:`said_work_facets`: a statement names an employer (a name after "at",
  "joined", "left", ...: "started at Foxglove Foods"; or any name in capitals
  that is not a person's or a date: "The Juniper Health office moved floors"),
  an occupation ("works as a nurse", "became an architect", "I'm a paramedic
  now"), both or neither.

The currency lever (:func:`engramdb.search.latest_of_attribute`) uses them:
asked for the employer, it keeps the work statements that name one (an
employer is always named); asked for the occupation, it drops those that name
only an employer (an occupation is a common noun, often only implied: "another
twelve-hour shift on the ward").
"""

from __future__ import annotations

import re
from typing import Final, Literal

from engramdb.nlp._gazetteer import FIRST_NAMES, TITLES
from engramdb.nlp.entities import CALENDAR_WORDS
from engramdb.nlp.vocative import without_vocatives

__all__ = ["EMPLOYER", "OCCUPATION", "asked_work_facet", "said_work_facets"]

WorkFacet = Literal["employer", "occupation"]

EMPLOYER: Final[WorkFacet] = "employer"
OCCUPATION: Final[WorkFacet] = "occupation"

_ASKS_EMPLOYER = re.compile(
    r"\b(?:employer|employed|employs|company|companies|firm|organi[sz]ation|workplace"
    r"|work(?:s|ed|ing)?\s+(?:for|at))\b",
    re.IGNORECASE,
)
# "Where does Talia work?": "where", then a form of "work" later in the same question
# (two searches, not one pattern with a gap: linear on any input).
_WHERE = re.compile(r"\bwhere\b", re.IGNORECASE)
_WORK = re.compile(r"\bwork(?:s|ed|ing)?\b", re.IGNORECASE)
_ASKS_OCCUPATION = re.compile(
    r"\b(?:occupation|profession|job\s+title|trade|career"
    r"|work(?:s|ed|ing)?\s+as|do(?:es)?\s+for\s+(?:a\s+living|work|money)"
    r"|(?:becoming|become|became)\s+an?\b|retrain(?:ed|ing)?)",
    re.IGNORECASE,
)

# A name after a word that puts it as the place of work: "at Foxglove Foods",
# "joined Kestrel Aviation", "left Quillfeather Press for ...", "employed by ...".
_NAMES_EMPLOYER = re.compile(
    r"\b(?:at|for|joined|join|joining|left|leave|leaving|quit|by|from|to|with)\s+"
    r"(?:the\s+)?(?P<name>(?P<first>[A-Z][\w&'\-]*)(?:\s+(?:&\s+)?[A-Z][\w&'\-]*)*)"
)
# An employer said with a common noun: "at a small bicycle company", "for a
# startup", "joined the city council" (up to three words between).
_UNNAMED_EMPLOYER = re.compile(
    r"\b(?:at|for|joined|join|joining|left|leave|leaving|quit)\s+(?:a|an|the|my|our|his|her|their)\s+"
    r"(?:[\w'\-]+\s+){0,3}?(?:company|firm|startup|start-up|agency|consultancy|bank|hospital"
    r"|clinic|school|university|college|council|ministry|charity|nonprofit|non-profit"
    r"|bakery|studio|lab|laboratory|factory|warehouse|newspaper|magazine|publisher"
    r"|airline|practice)\b",
    re.IGNORECASE,
)
_SAYS_OCCUPATION = re.compile(
    r"\b(?:work(?:s|ed|ing)?\s+as|job\s+as|role\s+as|became|become|becoming"
    r"|retrain(?:ed|ing)?\s+as|trained\s+as|qualified\s+as|promoted\s+to|jobs?\s+from\s+(?:an?\s+)?[a-z]"
    r"|(?:i'm|i\s+am|is|was|am)\s+(?:now\s+)?an?\s+(?!bit\b|lot\b|little\b|few\b|good\b|great\b))",
    re.IGNORECASE,
)


def _where_work(question: str) -> bool:
    """Whether a "where" is followed by a form of "work" in the same question."""
    where = _WHERE.search(question)
    if where is None:
        return False
    work = _WORK.search(question, where.end())
    return work is not None and "?" not in question[where.end() : work.start()]


def asked_work_facet(question: str) -> WorkFacet | None:
    """The side of someone's work ``question`` asks about, or None (both, or neither)."""
    employer = _ASKS_EMPLOYER.search(question) is not None or _where_work(question)
    occupation = _ASKS_OCCUPATION.search(question) is not None
    if employer == occupation:
        return None
    return EMPLOYER if employer else OCCUPATION


# A capitalised word inside a sentence (not its first word).
_INNER_CAPITAL = re.compile(r"(?<![.!?]\s)(?<!^)(?<![.!?])\b[A-Z][\w&'\-]*")


def _names_organisation(text: str) -> bool:
    """Whether ``text`` names something in capitals that is not a person or a date.

    An employer is always named ("The Juniper Health office moved floors"),
    where an occupation is a common noun; "I", a first name ("Hi Bram"), a month,
    a weekday or a title do not count.
    """
    return any(not _not_a_name(m.group(0)) for m in _INNER_CAPITAL.finditer(text))


def _employer_run(m: re.Match[str]) -> bool:
    """Whether the capitalised words after "at", "joined", ... name an employer.

    Two words or more, the first not a first name ("St Mary's", "Kestrel
    Aviation"; not "Sam Jones"), or one word that is no person's, title, month
    or weekday ("at Google"; not "with Sam", "in March").
    """
    if len(m["name"].split()) >= 2:
        return _key(m["first"]) not in FIRST_NAMES
    return not _not_a_name(m["first"])


def _key(word: str) -> str:
    """A capitalised word as the gazetteers spell it: lower case, no quotes or "'s"."""
    return word.strip("'\u2019").casefold().removesuffix("'s")


def _not_a_name(word: str) -> bool:
    """Whether a capitalised word is "I", a first name, a title or a time (a month, ...)."""
    key = _key(word)
    return (
        key in ("i", "i'm", "i've", "i'd", "i'll")
        or key in CALENDAR_WORDS
        or key in FIRST_NAMES
        or key in TITLES
    )


def said_work_facets(text: str, *, strict: bool = False) -> frozenset[WorkFacet]:
    """The sides of someone's work ``text`` says: a named employer, an occupation, both or none.

    An employer: a name after "at", "joined", ... ("started at Foxglove Foods"),
    or (unless ``strict``) any name in capitals that is not a person's or a
    date ("The Juniper Health office moved floors"). An occupation: "works as",
    "became", "I'm a" ... (a common noun: an implicit one, "ward rounds at
    7am", is not seen). ``strict`` is for a text that may be about anything:
    "an LGBTQ+ counseling workshop" names no employer.
    """
    text = without_vocatives(text)  # "Hi Bram, ..." names whom it talks to
    out: set[WorkFacet] = set()
    if (
        any(_employer_run(m) for m in _NAMES_EMPLOYER.finditer(text))
        or _UNNAMED_EMPLOYER.search(text)
        or (not strict and _names_organisation(text))
    ):
        out.add(EMPLOYER)
    if _SAYS_OCCUPATION.search(text):
        out.add(OCCUPATION)
    return frozenset(out)
