"""Tenant isolation: the one place that decides which scope a caller may touch.

A caller is an API key (or the launch configuration of an MCP server). A key
bound to a scope (``user_id`` and/or ``agent_id``) may only read and change
memories of that scope; an admin caller may act on any scope. Everything the
servers do goes through this module:

* :func:`resolve_scope` turns the scope a request names (arguments and the
  scope ids inside ``filters``) into the scope the call runs with. The key's
  ids are always part of it; a request may add ids (narrowing: a ``run_id``
  inside the user's memories) but naming another value for a bound id is
  refused with :class:`ScopeForbiddenError` (HTTP 403). The scope ids lifted
  out of ``filters`` go through the same merge; what remains of the filter is
  ANDed with the scope by the library, so no ``OR``/``NOT`` can widen it.
* everything else — by-id calls, and what the flows read on the caller's
  behalf (the extraction context shown to the LLM, dedup, session attach,
  links, consolidation targets, ``expand_links``, ``timeline``) — runs through
  a scoped view of the library (:meth:`engramdb.Memory.scoped`) bound to the
  key's ids, so the flows themselves never look outside it. A memory outside
  the scope is reported exactly like a missing one
  (:class:`~engramdb.errors.MemoryNotFoundError`, HTTP 404), so ids of other
  tenants cannot be probed.

Why 403 for a foreign scope id but 404 for a foreign memory id: the scope a
key is bound to is known to whoever holds the key, so refusing another one
reveals nothing, and a clear refusal beats a silently empty result for a
misconfigured client. A memory id, in contrast, is a secret of its owner:
answering "exists, but not yours" would confirm it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engramdb.core.access import DATA_CAPABILITIES, FULL_ACCESS, Access
from engramdb.core.filters import split_scope
from engramdb.errors import EngramError, ScopeError
from engramdb.server.keys import ApiKey

__all__ = [
    "SCOPE_KINDS",
    "AdminRequiredError",
    "Caller",
    "ScopeForbiddenError",
    "record_in_scope",
    "resolve_scope",
]

SCOPE_KINDS: tuple[str, ...] = ("user_id", "agent_id", "run_id")


class ScopeForbiddenError(EngramError):
    """A request named a scope id other than the one its key is bound to."""

    def __init__(self, kind: str, requested: str, key_id: str | None) -> None:
        self.kind = kind
        self.requested = requested
        self.key_id = key_id
        who = f"key {key_id}" if key_id else "this server"
        super().__init__(
            f"{who} may only use its own {kind}; the request names {kind}={requested!r}. "
            f"Leave {kind} out (the key's own is used) or use a key for that scope"
        )


class AdminRequiredError(EngramError):
    """The call acts on the whole store: it needs an admin API key (HTTP 403)."""


@dataclass(frozen=True)
class Caller:
    """Who is calling: the scope ids they are bound to (none for an admin) and their access."""

    bound: Mapping[str, str] = field(default_factory=dict)
    """Scope ids every call of this caller runs within; empty for an admin."""
    key_id: str | None = None
    """The public id of the API key, when the caller came with one."""
    access: Access = FULL_ACCESS
    """Capabilities and granted users (:mod:`engramdb.core.access`); a caller with no
    key (a keyless server on loopback, a launch scope) holds every capability."""

    @classmethod
    def of_key(cls, key: ApiKey) -> Caller:
        """The caller a verified API key makes."""
        return cls(bound=key.scope, key_id=key.id, access=key.access)

    @property
    def admin(self) -> bool:
        """Whether the caller may act on the whole store (unbound, ``admin`` capability)."""
        return not self.bound and "admin" in self.access.can

    @property
    def unrestricted(self) -> bool:
        """Whether the caller's calls need no view at all (an admin holding every capability)."""
        return self.admin and self.access.can >= DATA_CAPABILITIES

    def describe(self) -> str:
        """A short description for logs and tool output (never the key itself)."""
        scope = ", ".join(f"{k}={v}" for k, v in self.bound.items()) or "any scope"
        return f"key {self.key_id} ({scope})" if self.key_id else scope


def resolve_scope(
    caller: Caller,
    ids: Mapping[str, str | None],
    filters: Mapping[str, Any] | None = None,
    *,
    require_named: bool = False,
) -> tuple[dict[str, str | None], dict[str, Any] | None]:
    """Return ``(scope ids, rest of the filter)`` a call of ``caller`` runs with.

    ``ids`` are the scope ids the request gives as arguments; ``filters`` may
    carry more (mem0 style). With ``require_named`` the request itself must
    name a scope even when the key is bound to one — for calls that delete a
    whole scope, so that an empty request never wipes a tenant.

    Raises:
        ScopeError: the request gives two different values for one id, or
            names no scope while ``require_named``.
        ScopeForbiddenError: the request names a value for a bound id other
            than the key's.
        FilterError: ``filters`` is not a dict.
    """
    lifted, rest = split_scope(filters)
    requested: dict[str, str] = {}
    for kind in SCOPE_KINDS:
        given = ids.get(kind)
        in_filter = lifted.get(kind)
        if given is not None and in_filter is not None and given != in_filter:
            raise ScopeError(
                f"{kind} is given twice with different values ({given!r} as an argument, "
                f"{in_filter!r} in filters)"
            )
        value = given if given is not None else in_filter
        if value is not None:
            requested[kind] = value
    if require_named and not requested:
        raise ScopeError(
            "name the scope to act on (user_id, agent_id or run_id): this call changes "
            "every memory of a scope, so it is never implied"
        )
    for kind, value in caller.bound.items():
        if requested.get(kind, value) != value:
            raise ScopeForbiddenError(kind, requested[kind], caller.key_id)
        requested[kind] = value
    scope: dict[str, str | None] = {kind: requested.get(kind) for kind in SCOPE_KINDS}
    return scope, (rest or None)


def record_in_scope(record: Mapping[str, Any], scope: Mapping[str, str | None]) -> bool:
    """Whether an export record (a memory dict) lies in ``scope``."""
    for kind, value in scope.items():
        if value is None:
            continue
        if kind == "user_id":
            if record.get("user_id") != value:
                return False
            continue
        plural = "agent_ids" if kind == "agent_id" else "run_ids"
        extra = record.get(plural) or []
        if record.get(kind) != value and value not in extra:
            return False
    return True
