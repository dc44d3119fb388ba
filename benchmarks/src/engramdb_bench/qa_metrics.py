"""Answer-overlap metrics for QA benchmarks: token F1 and BLEU-1.

Both compare a predicted answer with a gold answer after the usual
normalisation: lower-case, punctuation removed, the articles "a", "an" and
"the" dropped, whitespace collapsed. They reward wording overlap, not
correctness (a right answer in other words scores low); the LLM judge is
the correctness measure, these are the comparable lexical ones.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter

__all__ = ["bleu1", "normalize_answer", "token_f1", "tokens"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…"}  # noqa: RUF001


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace."""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = "".join(" " if ch in _PUNCT else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def tokens(text: str) -> list[str]:
    """The normalised answer's tokens."""
    return normalize_answer(text).split()


def token_f1(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall (multiset overlap).

    Two empty answers score 1; one empty answer scores 0.
    """
    pred, ref = tokens(prediction), tokens(gold)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred)
    recall = common / len(ref)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, gold: str) -> float:
    """BLEU with unigrams only: clipped unigram precision times the brevity penalty.

    The brevity penalty is 1 when the prediction is longer than the gold
    answer, else ``exp(1 - len(gold) / len(prediction))``. An empty
    prediction scores 0 (1 if the gold answer is empty too).
    """
    pred, ref = tokens(prediction), tokens(gold)
    if not pred:
        return float(not ref)
    if not ref:
        return 0.0
    clipped = sum((Counter(pred) & Counter(ref)).values())
    precision = clipped / len(pred)
    penalty = 1.0 if len(pred) > len(ref) else math.exp(1 - len(ref) / len(pred))
    return penalty * precision
