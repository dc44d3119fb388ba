"""What a bound caller may do: capabilities, granted users, and ownership of a memory.

A view of the library (``Memory.scoped``) and the API key behind a server
request carry an :class:`Access`: the *capabilities* the caller holds and,
for a caller not bound to a user, the *users* it may name. The flows ask
three questions of it, and nothing else decides them:

* **may it do this at all?** — :meth:`Access.require` (``read``, ``write``,
  ``delete``, ``purge``; ``admin`` is whole-store work the servers gate);
* **may it name this user?** — :meth:`Access.check_user`: a caller bound to
  a user names only that user (the scope merge already refuses others); a
  caller bound only to an agent or a run names only the users it was
  granted, or any user with ``users=ANY_USER`` (a service agent);
* **does it own this memory, or only see it?** — :func:`holding`: a memory
  is *owned* when its own ids lie inside the caller's scope (each bound id
  is the memory's own, not an attached session, and its user is granted);
  a memory seen only because the caller's run or agent was attached to it
  (a fact seen again in another session) is *held by attachment*. Changing
  or erasing such a memory would reach into its owner's data, so a delete or
  purge detaches the caller's session instead and an update is refused.

No I/O here: the flows read the row and ask.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from engramdb.core.records import MemoryRow, Scope
from engramdb.errors import AccessDeniedError, ValidationError

__all__ = [
    "ANY_USER",
    "CAPABILITIES",
    "DATA_CAPABILITIES",
    "FULL_ACCESS",
    "Access",
    "Holding",
    "attachment_of",
    "default_capabilities",
    "holding",
    "parse_capabilities",
]

Capability = Literal["read", "write", "delete", "purge", "admin"]

CAPABILITIES: Final[tuple[str, ...]] = ("read", "write", "delete", "purge", "admin")
"""Every capability, in the order listings show them."""

DATA_CAPABILITIES: Final[frozenset[str]] = frozenset({"read", "write", "delete", "purge"})
"""The capabilities over memories (everything but ``admin``)."""

ANY_USER: Final = "*"
"""``users=ANY_USER``: a caller not bound to a user may name any user (a service agent)."""

Holding = Literal["owned", "attached", "foreign"]
"""How a visible memory relates to a caller: its own, seen through an attached
session, or about a user the caller was not granted."""


def default_capabilities(*, admin: bool, user_bound: bool) -> frozenset[str]:
    """The capabilities a key of this shape gets unless ``--can`` says otherwise.

    An admin key: everything. A key bound to a user: ``read``, ``write``,
    ``delete`` and ``purge`` of that user's memories (what such keys always
    could). A key bound only to an agent or a run: ``read``, ``write`` and
    ``delete`` — no irreversible ``purge`` unless granted explicitly.
    """
    if admin:
        return frozenset(CAPABILITIES)
    if user_bound:
        return DATA_CAPABILITIES
    return frozenset({"read", "write", "delete"})


def parse_capabilities(value: str | Iterable[str]) -> frozenset[str]:
    """``"read,write"`` (or a list) as a capability set; unknown names are refused."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out = {n.strip().lower() for n in names if isinstance(n, str) and n.strip()}
    unknown = sorted(out - set(CAPABILITIES))
    if unknown:
        raise ValidationError(
            f"unknown capabilities {', '.join(unknown)}; choose from {', '.join(CAPABILITIES)}"
        )
    if not out:
        raise ValidationError(f"give at least one capability ({', '.join(CAPABILITIES)})")
    return frozenset(out)


@dataclass(frozen=True)
class Access:
    """A caller's capabilities and, when it is not bound to a user, the users it may name."""

    can: frozenset[str] = field(default_factory=lambda: DATA_CAPABILITIES)
    """What the caller may do (:data:`CAPABILITIES`)."""
    users: frozenset[str] | None = frozenset()
    """Users a caller *not* bound to a user may name; ``None``: any user. Ignored for a
    caller bound to a user (it names that user only)."""

    @classmethod
    def of(
        cls, can: str | Iterable[str] | None = None, users: str | Iterable[str] | None = ()
    ) -> Access:
        """An access from loose input.

        ``can``: capability names, or ``None`` for the data capabilities;
        ``users``: a list of user ids, :data:`ANY_USER` (or ``None``) for any, ``()`` for none.
        """
        caps = DATA_CAPABILITIES if can is None else parse_capabilities(can)
        if users is None or users == ANY_USER:
            granted: frozenset[str] | None = None
        elif isinstance(users, str):
            raise ValidationError(
                f"users must be a list of user ids or {ANY_USER!r}, got the string {users!r}"
            )
        else:
            granted = frozenset(users)
            if ANY_USER in granted:
                granted = None
        return cls(can=caps, users=granted)

    @property
    def any_user(self) -> bool:
        """Whether the caller may name any user."""
        return self.users is None

    def require(self, capability: str, what: str) -> None:
        """Raise :class:`AccessDeniedError` unless the caller holds ``capability``."""
        if capability not in self.can:
            held = ", ".join(c for c in CAPABILITIES if c in self.can) or "none"
            raise AccessDeniedError(
                f"{what} needs the {capability!r} capability; this view (key) holds: {held}"
            )

    def user_granted(self, user_id: str | None, within: Scope | None) -> bool:
        """Whether a memory about ``user_id`` (``None``: about no user) is inside the caller."""
        if within is not None and within.user_id is not None:
            return user_id == within.user_id
        if user_id is None or self.users is None:
            return True
        return user_id in self.users

    def check_user(self, user_id: str | None, within: Scope | None, what: str) -> None:
        """Refuse a call that names a user the caller was not granted."""
        if user_id is None or self.user_granted(user_id, within):
            return
        raise AccessDeniedError(
            f"{what} names user_id={user_id!r}, which this view (key) was not granted: a key "
            "bound only to an agent or a run names only the users it was created with "
            "(`engram keys create --user ID` / `--any-user`)"
        )


FULL_ACCESS: Final = Access(can=frozenset(CAPABILITIES), users=None)
"""What an unbound, unrestricted caller (the library itself, an admin key) holds."""


def holding(row: MemoryRow, within: Scope | None, access: Access) -> Holding:
    """Whether a memory the caller sees is its own, held by attachment, or about another user.

    ``owned``: every id the caller is bound to is the memory's own (not an
    attached session) and the memory's user is granted. ``attached``: the
    caller sees it only because its agent or run was attached to the memory.
    ``foreign``: the memory is about a user the caller was not granted (a key
    bound only to an agent sees such memories but may not change them).
    """
    if within is not None and attachment_of(row, within):
        return "attached"
    if not access.user_granted(row.user_id, within):
        return "foreign"
    return "owned"


def attachment_of(row: MemoryRow, within: Scope) -> list[tuple[str, str]]:
    """The ``(kind, value)`` sessions through which ``within`` sees ``row`` by attachment."""
    out: list[tuple[str, str]] = []
    if within.agent_id is not None and row.agent_id != within.agent_id:
        out.append(("agent_id", within.agent_id))
    if within.run_id is not None and row.run_id != within.run_id:
        out.append(("run_id", within.run_id))
    return out
