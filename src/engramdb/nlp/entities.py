"""Entities by rules, offline: names, places, organisations, dates, amounts.

Why rules and not a model: the store extracts entities on every write, on
any machine, with nothing downloaded; the rules run at thousands of
sentences a second, in plain Python, with no extra package. An entity here
is a key that links memories mentioning the same thing, so what matters most
is that the same mention gives the same normalised key every time; the type
is a hint, and a name the rules cannot type is still an entity (THING).

Rules, applied in this order (a later rule never takes text an earlier one
took):

1. Dates: ISO ``2023-05-07``, ``7 May 2023``, ``May 7th, 2023``,
   ``May 2023``, ``2023年5月7日``, month names, weekdays, holidays, and years
   with a cue ("in 2019"). Normalised to ISO forms (``2023-05-07``,
   ``2023-05``, ``05-07``) or to a lower-case name (``may``, ``monday``).
2. Amounts: currency (``$50`` -> ``50 usd``), percentages, and numbers with a
   unit (``5 km``, ``three years`` -> ``3 year``).
3. ``@handles`` (PERSON) and ``#hashtags`` (THING), quoted titles
   (``"Charlotte's Web"``) and ``《书名》`` (THING).
4. Runs of capitalised words ("Eiffel Tower", "Bank of America"), typed by
   titles (Mr, Dr, Aunt), greetings ("Hey Mel"), place and organisation
   words (Park, University), small gazetteers of places and first names,
   and a preposition cue ("in Sweden"). A capitalised word that opens a
   sentence counts only when it is a known name, is capitalised elsewhere in
   the text, or is not an English word at all ("Melanie" is not; "Yesterday"
   is).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from engramdb.nlp._gazetteer import (
    COMMON_STARTERS,
    FIRST_NAMES,
    ORG_WORDS,
    PLACE_WORDS,
    PLACES,
    TITLES,
)
from engramdb.nlp._lemma import is_english_word, lemmatize
from engramdb.nlp.stopwords import STOP_WORDS
from engramdb.nlp.terms import CJK_CHARS, fold

__all__ = ["CALENDAR_WORDS", "Entity", "extract_entities", "normalize_entity"]

PERSON = "PERSON"
PLACE = "PLACE"
ORG = "ORG"
DATE = "DATE"
NUMBER = "NUMBER"
THING = "THING"


@dataclass(frozen=True)
class Entity:
    """One entity mention.

    Attributes:
        name: the text as written (whitespace collapsed, possessive dropped).
        normalized: the key that links mentions of the same entity:
            case-folded, lemmatised, diacritics and leading articles dropped;
            ISO forms for dates, "<number> <unit>" for amounts.
        type: PERSON, PLACE, ORG, DATE, NUMBER or THING.
    """

    name: str
    normalized: str
    type: str


# --------------------------------------------------------------- dates

_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6,
    "july": 7, "august": 8, "september": 9, "october": 10, "november": 11,
    "december": 12, "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7,
    "aug": 8, "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
_MONTH_NAMES = ("", *(name for name, _ in list(_MONTHS.items())[:12]))
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_HOLIDAYS = (
    "Christmas Eve|Christmas|New Year's Eve|New Year's Day|Easter|Halloween|Thanksgiving|"
    "Valentine's Day|Mother's Day|Father's Day|Independence Day|Hanukkah|Diwali|Ramadan|"
    "Eid|Lunar New Year|Chinese New Year|Pride Month"
)
CALENDAR_WORDS: frozenset[str] = frozenset(
    {*_MONTHS, *_WEEKDAYS, *(h.casefold() for h in _HOLIDAYS.split("|") if " " not in h)}
)
"""Month and weekday names (abbreviations too) and one-word holidays, lower case: a
capitalised word that names a time, not a person or an organisation."""

# Month names start with a capital here: lower-case "may" and "march" are
# far more often a verb. Three-letter abbreviations need a day or year.
_MONTH = (
    r"(?P<mon>January|February|March|April|May|June|July|August|September|October|"
    r"November|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"
)
_DAY = r"(?P<day>3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?(?!\d)"
_YEAR = r"(?P<year>(?:18|19|20|21)\d\d)(?!\d)"

_ISO_DATE = re.compile(
    r"(?<![\d-])(?P<year>(?:18|19|20|21)\d\d)[-/](?P<mon>0?[1-9]|1[0-2])[-/]"
    r"(?P<day>3[01]|[12]\d|0?[1-9])(?![\d-])"
)
_DAY_MONTH = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}(?:,?\s+{_YEAR})?\b")
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s+{_YEAR}\b)?")
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b")
_CJK_DATE = re.compile(
    r"(?<!\d)(?P<year>\d{4})年(?:(?P<mon>1[0-2]|0?[1-9])月(?:(?P<day>3[01]|[12]\d|0?[1-9])[日号])?)?"
    r"|(?<!\d)(?P<mon2>1[0-2]|0?[1-9])月(?P<day2>3[01]|[12]\d|0?[1-9])[日号]"
)
_MONTH_ALONE = re.compile(
    r"\b(?P<mon>January|February|April|June|July|August|September|October|November|"
    r"December)\b|\b(?i:in|of|last|next|this|early|late|mid|since|until|by)\s+"
    r"(?P<mon2>May|March)\b"
)
_DECADE = re.compile(r"\b(?:18|19|20)\d0s\b")
_WEEKDAY = re.compile(
    r"\b(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)s?\b"
    r"|\b(Mon|Tues?|Wed|Thu|Thurs?|Fri)\b\.?"
)
# "Sat" and "Sun" are left out: too often the verb and the star.
_WEEKDAY_ABBR = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4}
_HOLIDAY = re.compile(rf"\b(?:{_HOLIDAYS})\b")
# A year on its own is a date only after a word that announces one: "2000"
# alone is as often a count.
_YEAR_CUED = re.compile(
    r"\b(?i:in|since|until|till|from|to|by|during|of|year|summer|winter|spring|"
    r"autumn|fall|early|late|mid|before|after|around|circa)\s+" + _YEAR
)

# ------------------------------------------------------------- amounts

_NUMBER_WORDS = {
    "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11",
    "twelve": "12", "fifteen": "15", "twenty": "20", "thirty": "30", "forty": "40",
    "fifty": "50", "hundred": "100",
}  # fmt: skip
_UNITS = {
    "km": "km", "kms": "km", "kilometer": "km", "kilometers": "km", "kilometre": "km",
    "kilometres": "km", "mile": "mile", "miles": "mile", "mi": "mile", "m": "m",
    "meter": "m", "meters": "m", "metre": "m", "metres": "m", "cm": "cm", "mm": "mm",
    "ft": "ft", "foot": "ft", "feet": "ft", "inch": "inch", "inches": "inch",
    "kg": "kg", "kgs": "kg", "kilo": "kg", "kilos": "kg", "kilogram": "kg",
    "kilograms": "kg", "g": "g", "gram": "g", "grams": "g", "lb": "lb", "lbs": "lb",
    "pound": "lb", "pounds": "lb", "oz": "oz", "ounce": "oz", "ounces": "oz",
    "l": "l", "liter": "l", "liters": "l", "litre": "l", "litres": "l", "ml": "ml",
    "degree": "degree", "degrees": "degree", "°c": "°c", "°f": "°f",
    "second": "second", "seconds": "second", "sec": "second", "secs": "second",
    "minute": "minute", "minutes": "minute", "min": "minute", "mins": "minute",
    "hour": "hour", "hours": "hour", "hr": "hour", "hrs": "hour", "day": "day",
    "days": "day", "week": "week", "weeks": "week", "month": "month", "months": "month",
    "year": "year", "years": "year", "yr": "year", "yrs": "year", "decade": "decade",
    "decades": "decade", "dollar": "usd", "dollars": "usd", "buck": "usd",
    "bucks": "usd", "usd": "usd", "euro": "eur", "euros": "eur", "eur": "eur",
    "yen": "jpy", "yuan": "cny", "rmb": "cny", "k": "k", "percent": "percent",
    "per cent": "percent", "%": "percent",
}  # fmt: skip
_CURRENCY_SIGNS = {"$": "usd", "€": "eur", "£": "gbp", "¥": "jpy"}
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_MAGNITUDE = r"thousand|million|billion|k|m|bn"
_CURRENCY = re.compile(rf"(?<!\w)(?P<sign>[$€£¥])\s?(?P<num>{_NUM})(?:\s?(?P<mag>{_MAGNITUDE})\b)?")
_UNIT_ALT = "|".join(
    re.escape(unit) for unit in sorted(_UNITS, key=len, reverse=True) if unit != "%"
)
_NUM_UNIT = re.compile(
    rf"(?<![\w.,])(?P<num>{_NUM}|{'|'.join(_NUMBER_WORDS)})(?:\s|-)?"
    rf"(?:(?P<mag>thousand|million|billion)\s)?(?P<unit>{_UNIT_ALT})(?!\w)"
    rf"|(?<![\w.,])(?P<pnum>{_NUM})\s?%",
    re.IGNORECASE,
)

# ------------------------------------------------- handles, titles, names

_HANDLE = re.compile(r"(?<![\w@.])@(?P<tag>[A-Za-z0-9_]{2,30})\b")
_HASHTAG = re.compile(r"(?<![\w#&])#(?P<tag>\w*[^\W\d_]\w*)")
_QUOTED = re.compile(r"\"(?P<q>[^\"\n]{2,80})\"|“(?P<q2>[^”\n]{2,80})”|《(?P<q3>[^》\n]{1,40})》")
# Words of alphabetic scripts only: CJK runs have no capitals to go by.
_LETTER = f"[^\\W\\d_{CJK_CHARS}]"
_WORD = re.compile(f"{_LETTER}(?:{_LETTER}|\\d)*(?:['\u2019\\-](?:{_LETTER}|\\d)+)*")
# Between two capitalised words: a space, or " & " ("Barnes & Noble").
_JOIN_GAP = re.compile(r"[ \t]+(?:&[ \t]+)?")
_BLANK = re.compile(r"[ \t]+")
_MAX_NAME_WORDS = 8
_CONNECTORS = frozenset({"of", "the", "de", "del", "da", "di", "van", "von", "der", "du", "la"})
_SENTENCE_END = frozenset(".!?:;\n…")
_OPENERS = " \t\r\"'\u201c\u2018([*-"
_QUOTE_OPENERS = frozenset('"\u201c\u2018(')
_GREETINGS = frozenset(
    {"hey", "hi", "hello", "hiya", "dear", "thanks", "thank", "congrats",
     "congratulations", "bye", "goodbye", "sorry", "yo"}
)  # fmt: skip
_PLACE_CUES = re.compile(
    r"\b(?:in|near|visit|visited|visiting|moved to|move to|trip to|travel(?:l)?ed to|"
    r"flew to|went to|live in|lives in|lived in|living in|born in|back from)\s+$",
    re.IGNORECASE,
)
_PERSON_AFTER = re.compile(r"^\s+(?:said|says|told|asked|replied|texted)\b")
_ARTICLES = ("the ", "a ", "an ")
_POSSESSIVE = re.compile("['\u2019]s?$")
_SPACES = re.compile(r"\s+")
_DIGIT = re.compile(r"\d")
_APOSTROPHE = re.compile("['\u2019]")
_EN_STOPS = STOP_WORDS["en"]


@lru_cache(maxsize=1 << 14)
def _norm_word(word: str) -> str:
    if word.isupper() or not word.isalpha():
        return fold(word)
    return fold(lemmatize(word, ("en",)))


@lru_cache(maxsize=1 << 14)
def normalize_entity(name: str) -> str:
    """Return the linking key of an entity name (as :class:`Entity.normalized`).

    Case-folded, NFKC, diacritics and a leading English article dropped, a
    possessive ``'s`` dropped, each word lemmatised ("Rocky Mountains" ->
    "rocky mountain"), whitespace collapsed. Use it to look up an entity
    typed by a user ("the eiffel tower" finds "Eiffel Tower").
    """
    text = _SPACES.sub(" ", unicodedata.normalize("NFKC", name)).strip()
    text = _POSSESSIVE.sub("", text) if len(text) > 2 else text
    lowered = text.casefold()
    for article in _ARTICLES:
        if lowered.startswith(article) and len(lowered) > len(article):
            text = text[len(article) :]
            break
    return " ".join(_norm_word(w) for w in text.split())


# ------------------------------------------------------------- the pass


class _Spans:
    """Claimed characters and the entities found so far."""

    def __init__(self, size: int) -> None:
        # One flag per character: a claim check costs the span's length,
        # not the number of claims, so long texts stay linear.
        self.taken = bytearray(size)
        self.found: list[tuple[int, int, Entity]] = []

    def free(self, start: int, end: int) -> bool:
        return not any(self.taken[start:end])

    def add(self, start: int, end: int, name: str, normalized: str, kind: str) -> None:
        if not normalized or not self.free(start, end):
            return
        self.taken[start:end] = b"\x01" * (end - start)
        name = _SPACES.sub(" ", name).strip()
        self.found.append((start, end, Entity(name, normalized, kind)))


def _iso(year: str | None, mon: int | None, day: str | None) -> str:
    """ISO-like key of a full or partial date: 2023-05-07, 2023-05, 05-07, 2023, may."""
    if mon and day:
        month_day = f"{mon:02d}-{int(day):02d}"
        return f"{year}-{month_day}" if year else month_day
    if mon:
        return f"{year}-{mon:02d}" if year else _MONTH_NAMES[mon]
    return year or ""


def _month(name: str) -> int:
    return _MONTHS[name.rstrip(".").casefold()]


def _dates(text: str, spans: _Spans) -> None:
    if _DIGIT.search(text):
        _numeric_dates(text, spans)
    for m in _HOLIDAY.finditer(text):
        spans.add(m.start(), m.end(), m.group(), normalize_entity(m.group()), DATE)
    for m in _MONTH_ALONE.finditer(text):
        month = m["mon"] or m["mon2"]
        start = m.start("mon") if m["mon"] else m.start("mon2")
        spans.add(start, m.end(), month, _MONTH_NAMES[_month(month)], DATE)
    for m in _WEEKDAY.finditer(text):
        day = m.group(1) or _WEEKDAYS[_WEEKDAY_ABBR[m.group(2).casefold()]]
        spans.add(m.start(), m.end(), m.group(), day.casefold(), DATE)


def _numeric_dates(text: str, spans: _Spans) -> None:
    for m in _ISO_DATE.finditer(text):
        spans.add(m.start(), m.end(), m.group(), _iso(m["year"], int(m["mon"]), m["day"]), DATE)
    for pattern in (_DAY_MONTH, _MONTH_DAY):
        for m in pattern.finditer(text):
            key = _iso(m["year"], _month(m["mon"]), m["day"])
            spans.add(m.start(), m.end(), m.group(), key, DATE)
    for m in _MONTH_YEAR.finditer(text):
        spans.add(m.start(), m.end(), m.group(), _iso(m["year"], _month(m["mon"]), None), DATE)
    for m in _CJK_DATE.finditer(text):
        mon_text = m["mon"] or m["mon2"]
        mon = int(mon_text) if mon_text else None
        key = _iso(m["year"], mon, m["day"] or m["day2"])
        spans.add(m.start(), m.end(), m.group(), key, DATE)
    for m in _DECADE.finditer(text):
        spans.add(m.start(), m.end(), m.group(), m.group(), DATE)
    for m in _YEAR_CUED.finditer(text):
        spans.add(m.start("year"), m.end(), m["year"], m["year"], DATE)


def _number(raw: str) -> str:
    word = _NUMBER_WORDS.get(raw.casefold())
    return word if word else raw.replace(",", "")


def _amounts(text: str, spans: _Spans) -> None:
    for m in _CURRENCY.finditer(text):
        mag = f" {m['mag'].casefold()}" if m["mag"] else ""
        key = f"{_number(m['num'])}{mag} {_CURRENCY_SIGNS[m['sign']]}"
        spans.add(m.start(), m.end(), m.group(), key, NUMBER)
    for m in _NUM_UNIT.finditer(text):
        if m["pnum"]:
            key = f"{_number(m['pnum'])} percent"
        else:
            mag = f" {m['mag'].casefold()}" if m["mag"] else ""
            key = f"{_number(m['num'])}{mag} {_UNITS[m['unit'].casefold()]}"
        spans.add(m.start(), m.end(), m.group(), key, NUMBER)


def _tagged(text: str, spans: _Spans) -> None:
    for m in _HANDLE.finditer(text):
        spans.add(m.start(), m.end(), m.group(), m["tag"].casefold(), PERSON)
    for m in _HASHTAG.finditer(text):
        spans.add(m.start(), m.end(), m.group(), fold(m["tag"]), THING)
    for m in _QUOTED.finditer(text):
        inner = m["q"] or m["q2"] or m["q3"]
        if m["q3"] or _looks_like_title(inner):
            spans.add(m.start(), m.end(), inner, normalize_entity(inner), THING)


def _looks_like_title(inner: str) -> bool:
    """Tell a quoted title ("Becoming Nicole") from a quoted remark ("so cool!")."""
    words = inner.split()
    if not 1 <= len(words) <= 8 or inner.rstrip()[-1:] in ".!?,":
        return False
    if words[0] in {"I", "I'm", "I've"} or not words[0][:1].isupper():
        return False
    content = [w for w in words if w.casefold() not in _EN_STOPS]
    capital = sum(1 for w in content if w[:1].isupper() or w[:1].isdigit())
    return not content or capital * 2 >= len(content) + 1


def _sentence_start(text: str, start: int) -> bool:
    """Whether the word at ``start`` opens a sentence (or a quotation)."""
    i = start - 1
    while i >= 0 and text[i] in " \t\r":
        i -= 1
    if i >= 0 and text[i] in _QUOTE_OPENERS:
        return True  # a quotation starts a sentence of its own
    while i >= 0 and text[i] in _OPENERS:
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END


def _capitalised(word: str) -> bool:
    return word[:1].isupper() and word != "I" and not word.startswith(("I'", "I\u2019"))


def _joined(text: str, words: list[re.Match[str]], j: int) -> int:
    """Return how many of the words after ``words[j]`` join its name (0: none)."""
    nxt = words[j + 1]
    gap = text[words[j].end() : nxt.start()]
    if _capitalised(nxt.group()) and (
        _JOIN_GAP.fullmatch(gap)
        or (gap == ". " and words[j].group().casefold() in TITLES)  # "Dr. Smith"
    ):
        return 1
    # Up to two lower-case connectors: "Bank of America", "Lord of the Rings".
    k = j + 1
    while k < len(words) and k - j <= 2 and words[k].group() in _CONNECTORS:
        if not _BLANK.fullmatch(text[words[k - 1].end() : words[k].start()]):
            return 0
        k += 1
    if (
        j + 1 < k < len(words)
        and _BLANK.fullmatch(text[words[k - 1].end() : words[k].start()])
        and _capitalised(words[k].group())
    ):
        return k - j
    return 0


def _names(text: str, spans: _Spans) -> None:
    words = [m for m in _WORD.finditer(text) if spans.free(m.start(), m.end())]
    # Words capitalised somewhere other than a sentence start: there the
    # capital means a name, and it vouches for the same word at a start.
    vouched = {
        m.group() for m in words if _capitalised(m.group()) and not _sentence_start(text, m.start())
    }
    i = 0
    while i < len(words):
        if not _capitalised(words[i].group()):
            i += 1
            continue
        j = i
        while j + 1 < len(words) and (step := _joined(text, words, j)):
            j += step
        _name_run(text, words[i : j + 1], vouched, spans)
        i = j + 1


def _ordinary(word: str) -> bool:
    """Whether ``word`` is an everyday English word (hyphenated: every part is).

    A word whose dictionary lemma is capitalised ("zhang" -> "Zhang",
    "taylor" -> "Taylor") is a proper noun, not an everyday word.
    """
    return all(
        is_english_word(part) and lemmatize(part.casefold(), ("en",)).islower()
        for part in word.split("-")
        if part
    )


def _is_name(words: list[str], at_start: bool, vouched: set[str]) -> bool:
    """Whether a run reduced to one word still names something."""
    word = _POSSESSIVE.sub("", words[0]) or words[0]
    key = word.casefold()
    # "We've", "That's": a pronoun or opener with a contraction.
    base = _APOSTROPHE.split(key, maxsplit=1)[0]
    if len(word) < 2 or {key, base} & COMMON_STARTERS or base in _EN_STOPS:
        return False  # an initial ("J. K."), "R&R", an opener
    if key in FIRST_NAMES or key in PLACES:
        return True
    if word.isupper():
        # An acronym ("LGBTQ", "NYC"), unless it is a shouted word ("INTENSE").
        return len(word) <= 3 or not _ordinary(word)
    return not at_start or word in vouched or not _ordinary(word)


def _name_run(text: str, run: list[re.Match[str]], vouched: set[str], spans: _Spans) -> None:
    """Trim a run of capitalised words, decide whether it is a name, type it."""
    at_start = _sentence_start(text, run[0].start())
    greeting = False
    # Leading sentence openers are not part of a name: "Hey Mel", "The Louvre".
    while run and run[0].group().casefold() in COMMON_STARTERS:
        greeting = greeting or run[0].group().casefold() in _GREETINGS
        run = run[1:]
    while run and run[-1].group().casefold() in _CONNECTORS:
        run = run[:-1]
    if not run:
        return
    words = [m.group() for m in run]
    if len(words) > _MAX_NAME_WORDS:
        return  # a title-cased heading, not a name
    if all(w.isupper() for w in words) and len(words) > 1 and any(map(_ordinary, words)):
        return  # shouting ("JUST DOING IT"), not a name
    if (
        (at_start or greeting)
        and len(words) > 1
        and words[0].casefold() not in FIRST_NAMES
        and words[0] not in vouched
        and _ordinary(words[0])
        and _POSSESSIVE.sub("", words[1]).casefold() in FIRST_NAMES
    ):
        # "Go Jon", "Woohoo Melanie": an opening word before a name.
        greeting, run, words = True, run[1:], words[1:]
    titled = len(words) > 1 and words[0].casefold().rstrip(".") in TITLES and _capitalised(words[1])
    if len(words) == 1 and not _is_name(words, at_start or greeting, vouched):
        return
    name = text[run[0].start() : run[-1].end()]
    name = _POSSESSIVE.sub("", name) if name.endswith(("'s", "\u2019s")) else name
    # A title makes a person but is not part of the key: "Dr. Smith" -> "smith".
    key = normalize_entity(name.split(None, 1)[1] if titled else name)
    kind = _type_of(text, run, key, greeting)
    spans.add(run[0].start(), run[0].start() + len(name), name, key, kind)


def _type_of(text: str, run: list[re.Match[str]], key: str, greeting: bool) -> str:
    words = key.split()
    first = run[0].group().casefold().rstrip(".")
    if (first in TITLES and len(run) > 1 and _capitalised(run[1].group())) or greeting:
        return PERSON
    if _PERSON_AFTER.match(text[run[-1].end() :]):
        return PERSON
    if words[-1] in ORG_WORDS or (len(words) > 2 and words[0] in ORG_WORDS and words[1] == "of"):
        return ORG  # "Stanford University", "Bank of America"
    if key in PLACES or words[-1] in PLACE_WORDS or words[0] in {"lake", "mount", "mt"}:
        return PLACE
    if _PLACE_CUES.search(text[max(0, run[0].start() - 30) : run[0].start()]):
        return PERSON if words[0] in FIRST_NAMES else PLACE
    if words[0] in FIRST_NAMES and len(words) <= 3:
        return PERSON
    return THING


def find_spans(text: str) -> tuple[str, _Spans]:
    """Run the rules; return the NFKC text and its claimed spans (for model merging)."""
    text = unicodedata.normalize("NFKC", text)
    spans = _Spans(len(text))
    if text.strip():
        _dates(text, spans)
        _amounts(text, spans)
        _tagged(text, spans)
        if not text.isupper():
            _names(text, spans)
    return text, spans


def unique_entities(found: list[tuple[int, int, Entity]]) -> list[Entity]:
    """Order ``(start, end, entity)`` by start and keep the first of each key."""
    # One entity per key: a later mention typed differently ("Jordan" the
    # person, then "in Jordan") is the same key, and the first type wins.
    seen: set[str] = set()
    out: list[Entity] = []
    for _, _, entity in sorted(found, key=lambda item: item[0]):
        if entity.normalized not in seen:
            seen.add(entity.normalized)
            out.append(entity)
    return out


def extract_entities(text: str) -> list[Entity]:
    """Find the entities in ``text`` by rules, offline.

    Returns one :class:`Entity` per distinct ``normalized`` key, in order of
    first mention; an empty list for plain text without names, dates or
    amounts. Capitalisation carries the name rules, so an all-capitals text
    yields only dates and amounts.
    """
    _, spans = find_spans(text)
    return unique_entities(spans.found)
