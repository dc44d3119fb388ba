"""Names used to address someone ("Hi Sofia, ...", "Thanks, Bram!"): not what a text is about.

In a conversation a name is mostly said *to* its bearer: "Sofia, how is life
in Gdansk?" is Bram talking, about Gdansk. :func:`without_vocatives` removes
such names, so that a text can be asked whether it *names* someone as its
subject (:func:`engramdb.speakers.speaker_candidates`). It is a pure
function of the text.

Measured and not used for keyword terms and entities: indexing messages
without their vocatives cost LoCoMo any@10 0.012 and multi-hop all@10 0.043
(the answer turn borrows the name from the greeting before it, which is
what finds it by name); docs/retrieval.md.

The rules are deliberately narrow, one capitalised word in an addressing
position:

- after a greeting or thanks: "Hi Sofia", "Hey Mel!", "Thanks Bram,";
- opening a sentence, followed by "!" ("Sofia! Finally ...") or by "," and a
  word that starts a clause addressed to someone ("Bram, how's ...",
  "Caroline, did you ...", "Jon, I ...");
- closing a sentence after a comma: "..., Bram!" / "Good luck, Melanie."

A list ("Caroline, Melanie and I went ...") or an apposition ("Paris, the
city ...") does not match: the word after the comma is a name or an article.
"""

from __future__ import annotations

import re

__all__ = ["without_vocatives"]

_NAME = r"[A-Z][a-z\u00e0-\u00ff]+(?:-[A-Z][a-z\u00e0-\u00ff]+)?"

# Words that open a sentence with a comma or "!" and are not names.
_NOT_NAME_WORDS = (
    "yes yeah yep no nope well oh ah ok okay so and but sure right wow hey hi hello "
    "thanks thank sorry anyway also still now then honestly seriously actually "
    "basically luckily sadly hopefully wait look listen man dude guys everyone "
    "congrats congratulations cheers great good nice cool awesome amazing totally "
    "absolutely definitely exactly true fair agreed alright lol haha aww aw omg "
    "morning evening afternoon night today tomorrow yesterday however plus"
)
_NOT_NAMES = frozenset(_NOT_NAME_WORDS.split())

_GREETING = (
    r"(?i:hi|hey|hello|heya|hiya|howdy|yo|morning|good\s+(?:morning|evening|afternoon|night)|"
    r"evening|thanks|thank\s+you|cheers|congrats|congratulations|bye|goodbye|"
    r"welcome(?:\s+back)?|dear)"
)

# A clause addressed to the listener: what follows "Name," at a sentence's start.
_ADDRESSED = (
    r"(?i:how|what|when|where|why|who|which|did|do|does|have|has|had|are|is|was|were|can|"
    r"could|would|will|should|you|your|you're|you've|i|i'm|i've|i'd|i'll|we|we're|it's|"
    r"that's|this|that|so|thanks|thank|sorry|congrats|congratulations|long|good|great|"
    r"nice|glad|guess|remember|look|listen|check|tell|let|just|finally|oh|wow|hey|hi|yes|"
    r"no|ok|okay|sure|really|honestly|seriously|welcome|happy|hope|any)\b"
)

_AFTER_GREETING = re.compile(
    rf"(?<![\w'])(?P<lead>{_GREETING})(?P<sep>[\s,]+)(?P<name>{_NAME})(?=\s*(?:[,!?.:;\u2026)]|$))"
)
_OPENING = re.compile(
    rf"(?:^|(?<=[.!?\u2026]\s)|(?<=\n))(?P<name>{_NAME})(?=\s*!|\s*,\s*{_ADDRESSED})",
)
_CLOSING = re.compile(rf",\s*(?P<name>{_NAME})(?=\s*(?:[!?.\u2026]+\s*|\s*$)(?:$|\s|[)\"']))")


def _blank(match: re.Match[str]) -> str:
    whole = match.group(0)
    start, end = match.span("name")
    offset = match.start(0)
    return whole[: start - offset] + whole[end - offset :]


def _blank_a_name(match: re.Match[str]) -> str:
    """:func:`_blank`, unless the word is one that opens a sentence and is no name."""
    return match.group(0) if match.group("name").lower() in _NOT_NAMES else _blank(match)


def without_vocatives(text: str) -> str:
    """``text`` without the names it uses to address someone (see the module docstring).

    >>> without_vocatives("Hi Sofia, sorry I went quiet, work has been mad.")
    'Hi , sorry I went quiet, work has been mad.'
    >>> without_vocatives("Caroline, Melanie and I went hiking.")
    'Caroline, Melanie and I went hiking.'
    """
    if not any(c.isupper() for c in text):
        return text

    text = _AFTER_GREETING.sub(_blank, text)
    text = _OPENING.sub(_blank_a_name, text)
    return _CLOSING.sub(_blank_a_name, text)
