"""Reading the attribute terms again: :meth:`engramdb.Memory.reindex_attributes`.

A memory's attribute terms (``@home``, ``@vehicle``: :mod:`engramdb.attributes`)
are read from its vector by the shipped classifier when it is stored, and kept
with its keyword terms, where BM25 and the "what holds now" lever find them. A
release that ships a retrained classifier reads new memories its way and leaves
the stored ones as the old one read them: a question read by the new classifier
then misses memories the old one tagged otherwise. Re-reading them needs no
embedding (the vectors are stored): every memory's attribute terms are read
again from its vector and, where they differ, written over the old ones.
``engram reindex-attributes`` is its command-line face.

- **Page by page**: :meth:`Store.term_sources` pages through every memory
  (deleted ones too, so a restore comes back with current terms), and each
  page's changes are one :meth:`Store.retag` transaction. Stopping half-way
  leaves every memory with either its old or its new terms, both valid; run it
  again to finish.
- **Never over a newer write**: a change applies only where the memory's terms
  are still those read (a memory updated meanwhile got its terms from the
  current classifier already).
- **Only where the classifier reads the vectors**: with a store bound to an
  embedder the classifier was not fitted for, or with attribute terms off
  (``attribute_gate`` 0), nothing is read or written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from engramdb._engine import Flow, store_call
from engramdb.attributes import FITTED_FOR, VERSION, AttributeModel
from engramdb.errors import ValidationError
from engramdb.nlp.terms import split_attribute_terms, with_attribute_terms
from engramdb.search import FusionConfig
from engramdb.stores.base import Store, TermChange

__all__ = ["DEFAULT_BATCH_SIZE", "RetagReport", "reindex_attributes_flow"]

DEFAULT_BATCH_SIZE = 1000
"""Memories read, and changes written in one transaction, at a time."""


@dataclass
class RetagReport:
    """What :meth:`Memory.reindex_attributes` did (or, with ``dry_run``, would do)."""

    classifier: str | None
    """The classifier whose reading the terms now hold (None: attribute terms are off)."""
    read: int = 0
    """Memories read (every memory of the store, deleted ones too)."""
    changed: int = 0
    """Memories whose attribute terms were (or would be) rewritten."""
    skipped: int = 0
    """Changes not applied: the memory was written meanwhile (its own terms stay)."""
    dry_run: bool = False
    reason: str | None = None
    """Why nothing was read, when nothing was."""

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able data."""
        return asdict(self)


def reindex_attributes_flow(
    fusion: FusionConfig,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
) -> Flow[RetagReport]:
    """Read every memory's attribute terms again from its stored vector (see the module)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValidationError(f"batch_size must be a positive integer, got {batch_size!r}")
    if fusion.attribute_gate <= 0:
        return RetagReport(None, dry_run=dry_run, reason="attribute terms are off")
    bound = yield from store_call(Store.bound_embedder)
    if bound is None:
        return RetagReport(VERSION, dry_run=dry_run, reason="the store holds no vectors yet")
    if bound[0] not in FITTED_FOR:
        return RetagReport(
            None,
            dry_run=dry_run,
            reason=f"the classifier does not read {bound[0]}'s vectors",
        )
    model = AttributeModel.shipped()
    share = fusion.attribute_share
    report = RetagReport(VERSION, dry_run=dry_run)
    after = 0
    while True:
        page = yield from store_call(Store.term_sources, after, batch_size)
        if not page:
            break
        after = page[-1].key
        report.read += len(page)
        changes = []
        for source in page:
            if source.vector is None:
                continue
            words, _ = split_attribute_terms(source.terms)
            new = with_attribute_terms(words, model.leaning(source.vector, share))
            if new != source.terms:
                changes.append(TermChange(source.key, source.terms, new))
        if changes and not dry_run:
            done = yield from store_call(Store.retag, changes)
            report.changed += done
            report.skipped += len(changes) - done
        else:
            report.changed += len(changes)
    if not dry_run:
        yield from store_call(Store.record_attribute_terms_version, VERSION)
    return report
