"""The PostgreSQL link flows: ``link`` and ``unlink`` between existing memories."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engramdb._time import utc_now
from engramdb.errors import MemoryNotFoundError, ValidationError
from engramdb.stores.base import HistoryEvent, LinkChange
from engramdb.stores.kernel.history import link_events
from engramdb.stores.postgres._sql import _Q, Tx, _iso
from engramdb.stores.postgres._write_base import _WriteBase


class _LinkFlows(_WriteBase):
    """Links written or removed after the fact (``engram maintain``'s derived supersessions)."""

    def link(self, links: Sequence[LinkChange], actor: str) -> Tx[list[HistoryEvent]]:
        """Link existing memories in one transaction (see ``Store.link``)."""
        return (yield from self._relink(links, actor, add=True))

    def unlink(self, links: Sequence[LinkChange], actor: str) -> Tx[list[HistoryEvent]]:
        """Remove links in one transaction (see ``Store.unlink``)."""
        return (yield from self._relink(links, actor, add=False))

    def _relink(
        self, links: Sequence[LinkChange], actor: str, *, add: bool
    ) -> Tx[list[HistoryEvent]]:
        ts = datetime.fromisoformat(utc_now())
        now = _iso(ts) or ""
        ids = sorted({i for c in links for i in (c.from_id, c.to_id)})
        if not ids:
            return []
        owners = yield _Q(
            f"SELECT DISTINCT owner FROM {self.t('memories')} WHERE id = ANY(%s) ORDER BY owner",
            (ids,),
        )
        for (owner,) in owners:
            yield self.owner_lock(str(owner))
        # Every memory of the call locked at once, in rowid order: two calls never
        # wait on each other's rows in a cycle.
        rows = yield _Q(
            f"SELECT id, rowid, owner, text, version, deleted_at FROM {self.t('memories')} "
            "WHERE id = ANY(%s) ORDER BY rowid FOR NO KEY UPDATE",
            (ids,),
        )
        found = {str(r[0]): r for r in rows}
        events: list[HistoryEvent] = []
        for change in links:
            ends = []
            for memory_id in (change.from_id, change.to_id):
                row = found.get(memory_id)
                if row is None or (add and row[5] is not None):
                    raise MemoryNotFoundError(memory_id)
                ends.append(row)
            (_, a, owner_a, text_a, ver_a, _), (_, b, owner_b, text_b, ver_b, _) = ends
            if add and (owner_a != owner_b or a == b):
                raise ValidationError(
                    f"a link joins two memories of one owner: {change.from_id!r} "
                    f"and {change.to_id!r} are not"
                )
            if add:
                written = yield _Q(
                    f"INSERT INTO {self.t('memory_links')} (from_rowid, to_rowid, kind, "
                    "created_at) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                    (a, b, change.kind, ts),
                    fetch="one",
                )
            else:
                written = yield _Q(
                    f"DELETE FROM {self.t('memory_links')} WHERE from_rowid = %s AND "
                    "to_rowid = %s AND kind = %s RETURNING 1",
                    (a, b, change.kind),
                    fetch="one",
                )
            if written is None:
                continue
            yield _Q(
                f"UPDATE {self.t('memories')} SET txid = pg_current_xact_id() "
                "WHERE rowid = ANY(%s)",
                ([a, b],),
                fetch="none",
            )
            made = link_events(
                change,
                ((text_a, int(ver_a)), (text_b, int(ver_b))),
                "LINK" if add else "UNLINK",
                actor,
                now,
            )
            yield from self.insert_history_many(made)
            events.extend(made)
        return events
