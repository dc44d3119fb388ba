"""Optional: the rules plus a spaCy named-entity model installed as a package.

Opt-in, never automatic: a model changes which entities a store links, so it
must be chosen in configuration, not picked up because a package happens to
be installed. Nothing is downloaded: ``spacy.load`` is given the name of an
installed model package (``en_core_web_sm`` installed with pip), and a
missing package raises :class:`ModelUnavailableError` saying what to install.

Measured on 2,760 LoCoMo chat turns (see docs/nlp.md), spaCy's small English
model ran at about 150 turns/s against several thousand for the rules, and
found few names the rules missed; the rules found 88 % of its names. It
helps most on prose full of names the gazetteers do not know.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import replace
from typing import Any

from engramdb.nlp._gazetteer import COMMON_STARTERS
from engramdb.nlp.entities import (
    ORG,
    PERSON,
    PLACE,
    THING,
    Entity,
    find_spans,
    normalize_entity,
    unique_entities,
)
from engramdb.nlp.stopwords import STOP_WORDS

__all__ = ["ModelEntityExtractor", "ModelUnavailableError"]

# spaCy's OntoNotes labels that name something. Dates, times and quantities
# are left to the rules, which normalise them (ISO dates, "5 km").
_LABELS = {
    "PERSON": PERSON,
    "GPE": PLACE,
    "LOC": PLACE,
    "FAC": PLACE,
    "ORG": ORG,
    "NORP": THING,
    "PRODUCT": THING,
    "EVENT": THING,
    "WORK_OF_ART": THING,
    "LANGUAGE": THING,
}
# Components a named-entity pass does not need; skipping them triples speed.
_UNUSED = ["parser", "tagger", "attribute_ruler", "lemmatizer", "senter", "morphologizer"]


class ModelUnavailableError(ImportError):
    """spaCy or the named model package is not installed."""


class ModelEntityExtractor:
    """Entities from the rules, plus names a spaCy model finds elsewhere.

    Rule entities win where both claim the same text, except that a rule
    entity of type THING takes the model's type when the model saw a name
    starting at the same place; model entities add names over text no rule
    claimed, skipping one-word stop words and openers that small models
    mistake for names ("Glad", "Wanna").

    Args:
        model: the installed spaCy model package, e.g. ``"en_core_web_sm"``.
    """

    def __init__(self, model: str = "en_core_web_sm") -> None:
        self.model = model
        self._lock = threading.Lock()
        self._nlp: Any = None

    def _pipeline(self) -> Any:
        if self._nlp is None:
            with self._lock:
                if self._nlp is None:
                    self._nlp = self._load()
        return self._nlp

    def _load(self) -> Any:
        try:
            spacy = importlib.import_module("spacy")
        except ImportError as exc:
            raise ModelUnavailableError(
                "entity model needs spaCy: pip install spacy, and a model package"
            ) from exc
        try:
            return spacy.load(self.model, exclude=_UNUSED)
        except OSError as exc:
            raise ModelUnavailableError(
                f"spaCy model package {self.model!r} is not installed; install it with pip "
                "(models are never downloaded at run time), or use the rules alone"
            ) from exc

    def __call__(self, text: str) -> list[Entity]:
        """Return the entities of ``text``, like :func:`extract_entities`."""
        nlp = self._pipeline()
        text, spans = find_spans(text)
        if not text.strip():
            return []
        ents = [(ent, _LABELS.get(ent.label_)) for ent in nlp(text).ents]
        by_start = {ent.start_char: kind for ent, kind in ents if kind}
        # Where the rules only knew "a name", the model's type is better.
        spans.found = [
            (start, end, replace(e, type=by_start[start]))
            if e.type == THING and by_start.get(start) not in (None, THING)
            else (start, end, e)
            for start, end, e in spans.found
        ]
        for ent, kind in ents:
            if kind is None:
                continue
            key = normalize_entity(ent.text)
            if len(key.split()) == 1 and (key in COMMON_STARTERS or key in STOP_WORDS["en"]):
                continue
            spans.add(ent.start_char, ent.end_char, ent.text, key, kind)
        return unique_entities(spans.found)
