"""Small integer ids for the memories shown to an LLM.

The LLM never sees a real id. Real ids are long random strings that a
model copies badly and that carry no meaning, and a model that sees them
can be talked into writing an id it read somewhere else (a message, a
memory text). Small ids exist only inside one request: an id the model
writes either names a memory that request showed, or nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator

from engramdb.extract.types import KnownMemory

__all__ = ["IdMap"]

# Only plain decimal digits, optionally wrapped the way the prompt shows ids
# ("[3]") or the way models like to decorate them ("#3", "id 3", "id: 3").
# Signs, hex, exponents and fractions are refused: "-1", "0x1" and "1e3" do
# not name a memory the prompt showed, and guessing would link the wrong one.
_SMALL_ID = re.compile(r"(?:\[\s*([0-9]{1,9})\s*\]|(?:#|id\s*[:=#]?)?\s*([0-9]{1,9}))", re.I)


class IdMap:
    """A two-way map between small ids ("0", "1", …) and real memory ids.

    Built from the memories shown in one prompt, in the order shown;
    a real id given twice keeps its first small id.
    """

    def __init__(self, real_ids: Iterable[str] = (), texts: Iterable[str | None] = ()) -> None:
        """Give ``real_ids`` small ids from 0; ``texts`` may pair each with its shown text."""
        self._reals: list[str] = []
        self._small: dict[str, str] = {}
        self._texts: dict[str, str | None] = {}
        text_iter = iter(texts)
        for real_id in real_ids:
            text = next(text_iter, None)
            if real_id in self._small:
                continue
            self._small[real_id] = str(len(self._reals))
            self._reals.append(real_id)
            self._texts[real_id] = text

    @classmethod
    def from_memories(cls, *groups: Iterable[KnownMemory]) -> IdMap:
        """Build the map of the memories of ``groups``, in order, each real id once."""
        memories = [m for group in groups for m in group]
        return cls((m.id for m in memories), (m.text for m in memories))

    def __len__(self) -> int:
        return len(self._reals)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """Yield ``(small_id, real_id)`` pairs in small-id order."""
        return ((str(i), real) for i, real in enumerate(self._reals))

    def __contains__(self, real_id: object) -> bool:
        return real_id in self._small

    def __repr__(self) -> str:
        return f"IdMap({len(self)} ids)"

    def small(self, real_id: str) -> str:
        """Return the small id of ``real_id``.

        Raises:
            KeyError: ``real_id`` was not shown in this prompt.
        """
        return self._small[real_id]

    def real(self, small_id: object) -> str | None:
        """Return the real id the model meant by ``small_id``, or ``None`` if it names none.

        Accepts an int (``3``), an integral finite float (``3.0``, what some
        JSON writers emit) or a string of decimal digits, possibly written
        ``" 3 "``, ``"[3]"``, ``"#3"`` or ``"id 3"``. Booleans, negative
        numbers, hex, exponents, real ids and anything else return ``None``:
        being lenient there would turn a malformed id into a link to the
        wrong memory.
        """
        index: int | None = None
        if isinstance(small_id, bool):
            return None
        if isinstance(small_id, int):
            index = small_id
        elif isinstance(small_id, float):
            if math.isfinite(small_id) and small_id.is_integer():
                index = int(small_id)
        elif isinstance(small_id, str) and len(small_id) <= 40:
            match = _SMALL_ID.fullmatch(small_id.strip())
            if match:
                index = int(match.group(1) or match.group(2))
        if index is None or not 0 <= index < len(self._reals):
            return None
        return self._reals[index]

    def text(self, real_id: str) -> str | None:
        """Return the text shown for ``real_id``, when the map was built with texts."""
        return self._texts.get(real_id)
