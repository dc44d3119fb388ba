"""History logic every backend shares.

Which version a restore brings back, and the event each change writes:
pure functions, so the stores only persist them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engramdb.core.records import (
    INCOMING_KIND,
    HistoryEvent,
    LinkChange,
    MemoryRow,
    NewMemory,
    RestorePlan,
)
from engramdb.errors import VersionNotFoundError

__all__ = [
    "add_event",
    "attach_event",
    "delete_event",
    "detach_event",
    "link_events",
    "plan_from_history",
    "restore_event",
    "restore_target",
    "update_event",
]


def restore_target(row: MemoryRow, version: int | None) -> RestorePlan | int:
    """A plain undelete's plan, or the version whose content the history must supply.

    ``version=None`` undeletes a deleted memory, else goes back one version.
    """
    deleted = row.deleted_at is not None
    if version is None:
        if deleted:
            return RestorePlan(
                row.id, row.version, True, row.text, row.metadata, None, row.expires_at
            )
        version = row.version - 1
        if version < 1:
            raise VersionNotFoundError(
                f"memory {row.id!r} is at its first version and not deleted; "
                "there is nothing to restore"
            )
    if not 1 <= version <= row.version:
        raise VersionNotFoundError(
            f"memory {row.id!r} has versions 1 to {row.version}; version {version} does not exist"
        )
    if version == row.version:
        if not deleted:
            raise VersionNotFoundError(f"memory {row.id!r} is already at version {version}")
        return RestorePlan(row.id, row.version, True, row.text, row.metadata, None, row.expires_at)
    return version


def plan_from_history(row: MemoryRow, version: int, events: list[HistoryEvent]) -> RestorePlan:
    """The plan that brings back ``version``'s text, metadata and expiry (undeleting too)."""
    for event in events:
        if event.version == version and event.new_memory is not None:
            return RestorePlan(
                row.id,
                row.version,
                row.deleted_at is not None,
                event.new_memory,
                event.new_metadata or {},
                version,
                event.new_expires_at,
            )
    raise VersionNotFoundError(
        f"the history of memory {row.id!r} holds no content for version {version}"
    )


def add_event(mem: NewMemory, actor: str, now: str) -> HistoryEvent:
    """The ADD event of a memory stored anew (version 1)."""
    return HistoryEvent(
        memory_id=mem.id,
        event="ADD",
        version=1,
        old_memory=None,
        new_memory=mem.text,
        old_metadata=None,
        new_metadata=mem.metadata,
        actor=actor,
        reason=None,
        created_at=now,
        new_expires_at=mem.expires_at,
    )


def update_event(
    old: MemoryRow,
    text: str,
    metadata: dict[str, Any],
    actor: str,
    reason: str | None,
    now: str,
    expires_at: str | None,
) -> HistoryEvent:
    """The UPDATE event of a change of text, metadata and/or expiry (one version up)."""
    return HistoryEvent(
        memory_id=old.id,
        event="UPDATE",
        version=old.version + 1,
        old_memory=old.text,
        new_memory=text,
        old_metadata=old.metadata,
        new_metadata=metadata,
        actor=actor,
        reason=reason,
        created_at=now,
        old_expires_at=old.expires_at,
        new_expires_at=expires_at,
    )


def delete_event(row: MemoryRow, actor: str, reason: str | None, now: str) -> HistoryEvent:
    """The DELETE event of a soft delete (the version does not change)."""
    return HistoryEvent(
        memory_id=row.id,
        event="DELETE",
        version=row.version,
        old_memory=row.text,
        new_memory=None,
        old_metadata=row.metadata,
        new_metadata=None,
        actor=actor,
        reason=reason,
        created_at=now,
        old_expires_at=row.expires_at,
        new_expires_at=row.expires_at,
    )


def restore_event(
    plan: RestorePlan, old: MemoryRow, new_version: int, actor: str, now: str
) -> HistoryEvent:
    """The RESTORE event of a planned restore."""
    reason = f"restored version {plan.to_version}" if plan.to_version is not None else None
    if plan.undelete:
        reason = "undeleted" + (f", {reason}" if reason else "")
    return HistoryEvent(
        memory_id=plan.memory_id,
        event="RESTORE",
        version=new_version,
        old_memory=None if plan.undelete else old.text,
        new_memory=plan.text,
        old_metadata=None if plan.undelete else old.metadata,
        new_metadata=plan.metadata,
        actor=actor,
        reason=reason,
        created_at=now,
        old_expires_at=old.expires_at,
        new_expires_at=plan.expires_at,
    )


def _unchanged_event(
    memory_id: str, event: str, version: int, text: str, actor: str, reason: str, now: str
) -> HistoryEvent:
    """An event that leaves the memory's text, version and metadata as they are."""
    return HistoryEvent(
        memory_id=memory_id,
        event=event,
        version=version,
        old_memory=text,
        new_memory=text,
        old_metadata=None,
        new_metadata=None,
        actor=actor,
        reason=reason,
        created_at=now,
    )


def attach_event(
    memory_id: str,
    text: str,
    version: int,
    attached: Sequence[tuple[str, str]],
    actor: str,
    now: str,
) -> HistoryEvent:
    """The ATTACH event of a repeat seen in new sessions (``attached``: ``(kind, value)``)."""
    seen = ", ".join(f"{kind}={value}" for kind, value in attached)
    return _unchanged_event(memory_id, "ATTACH", version, text, actor, f"seen again in {seen}", now)


def detach_event(
    memory_id: str,
    text: str,
    version: int,
    detached: Sequence[tuple[str, str]],
    actor: str,
    now: str,
    reason: str | None = None,
) -> HistoryEvent:
    """The DETACH event of sessions taken off a memory its owner keeps.

    A caller that sees a memory only through an attached session (its run or
    agent) and deletes or purges it takes its session off instead; the
    memory stays for the scope that owns it.
    """
    what = ", ".join(f"{kind}={value}" for kind, value in detached)
    said = f"detached {what}" + (f": {reason}" if reason else "")
    return _unchanged_event(memory_id, "DETACH", version, text, actor, said, now)


def link_events(
    change: LinkChange,
    ends: tuple[tuple[str, int], tuple[str, int]],
    event: str,
    actor: str,
    now: str,
) -> list[HistoryEvent]:
    """The ``LINK`` or ``UNLINK`` events of one link, one on each memory it joins.

    ``ends``: the ``(text, version)`` of ``change.from_id`` and of ``change.to_id``.
    Neither memory's version, text or metadata changes; the reason says the link
    as read from that memory's side ("derived_update <id>" on the newer one,
    "derived_updated_by <id>" on the older one), then ``change.reason``.
    """
    sides = (
        (change.from_id, change.kind, change.to_id, ends[0]),
        (change.to_id, INCOMING_KIND.get(change.kind, "related"), change.from_id, ends[1]),
    )
    return [
        _unchanged_event(
            memory_id,
            event,
            version,
            text,
            actor,
            f"{label} {other}" + (f": {change.reason}" if change.reason else ""),
            now,
        )
        for memory_id, label, other, (text, version) in sides
    ]
