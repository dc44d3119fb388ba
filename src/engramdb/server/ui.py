"""The web UI at ``/ui``: see, search and correct what is remembered.

Server-rendered pages (Jinja2 templates in ``ui_templates/``) with one small
script and one style sheet of our own (``ui_static/``), both shipped in the
package: nothing is fetched from elsewhere and nothing is built at install.
Every read and every change goes through :class:`MemoryService` — the same
tenancy rules as the REST API (:mod:`engramdb.server.tenancy`) — over the
server's memory seen :meth:`acting as <engramdb.Memory.acting_as>` ``ui``,
so every change made here is a history event with actor ``ui``.

Signing in: the person pastes an API key into the sign-in form. The key is
kept in this process's memory, under a random session id that the browser
holds in an ``HttpOnly``, ``SameSite=Strict`` cookie; the key is verified
again on every request, so a revoked key signs its sessions out at once.
Every state-changing form carries the session's CSRF token. Without any key
(a loopback server), the person is the local user and sees everything, as the
CLI does.

Fragments (``/ui/fragments/...``) are the parts of a page that the script
swaps in place (search results, a page of memories, a timeline); they obey
the same rules as the pages they belong to.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import hmac
import json
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import anyio.to_thread
import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from engramdb import __version__
from engramdb.core.access import CAPABILITIES
from engramdb.errors import (
    EngramError,
    ExtractionError,
    MemoryNotFoundError,
    ValidationError,
)
from engramdb.flows.browse import ENTITY_TYPES
from engramdb.memory import AsyncMemory, Memory
from engramdb.nlp.terms import index_terms, query_terms
from engramdb.server import activity as activity_log
from engramdb.server.activity import FACES, OPERATIONS, ActivityLog, status_range
from engramdb.server.errors import describe_error, error_headers
from engramdb.server.keys import KeyStore, NewKey
from engramdb.server.service import MemoryService, ServerLimits
from engramdb.server.tenancy import SCOPE_KINDS, Caller, ScopeForbiddenError

__all__ = ["UI_ACTOR", "UiSessions", "install_ui"]

UI_ACTOR = "ui"
"""Who changes made through the web UI are attributed to in history."""

COOKIE = "engram_ui"
PAGE_SIZE = 50
_SESSION_TTL_S = 12 * 3600
_MAX_SESSIONS = 10_000
_CATALOG_TTL_S = 5.0
REPLY_SHOWN_CHARS = 4096
"""How much of a failed extraction's raw LLM reply the failures page shows."""
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
STATES = ("live", "expired")
"""What the memory list shows: live memories, or expired ones."""
SEARCH_SIZES = (5, 10, 20, 50)
"""How many hits the search page offers to show."""
FANOUT_SCOPES = 50
"""An admin's view of every scope reads at most this many (the largest first)."""
FAILURE_SCOPES = 500
"""An admin's list of every failure asks at most this many scopes."""
COUNT_LIMIT = 2000
"""A filtered list is counted up to this many."""
CROSS_LIMIT = 1000
"""An admin's list of every scope pages through at most this many per scope."""
_CHUNK = 200
ACTIVITY_PAGE = 50
"""Rows of the activity log a page shows."""
ENTITY_PAGE = 50
"""Entities (or an entity's memories) a page shows."""
ENTITY_NEWEST = 3
"""Memories the entities page shows under each entity."""
_ACTIONS = {
    "signin": "sign_in",
    "signout": "sign_out",
    "edit": "update",
    "delete": "delete",
    "restore": "restore",
    "purge": "purge",
    "retry": "retry_extraction",
    "key_create": "create_key",
    "key_revoke": "revoke_key",
}
"""The UI's actions (forms posted) and the operation the activity log names for each."""
_OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains")


def _package_dir(name: str) -> Path:
    return Path(str(resources.files("engramdb.server").joinpath(name)))


# -- sessions -------------------------------------------------------------------------------


@dataclass
class _Session:
    csrf: str
    key: str | None = None
    started: float = field(default_factory=time.monotonic)
    flash: str | None = None
    flash_error: bool = False
    new_key: tuple[str, str] | None = None
    """A key just created (id, secret): shown once, on the next page, then forgotten."""
    made: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """What a retry made, per failure id, until the failure's page shows it."""


class UiSessions:
    """Sign-in sessions of this process: a random id (the cookie) to the key and CSRF token.

    Kept in memory only (a restart signs everyone out); the oldest are
    dropped beyond ``limit``, and each lasts ``ttl_s`` at most.
    """

    def __init__(self, limit: int = _MAX_SESSIONS, ttl_s: float = _SESSION_TTL_S) -> None:
        """An empty table."""
        self._table: OrderedDict[str, _Session] = OrderedDict()
        self.limit = limit
        self.ttl_s = ttl_s

    def get(self, sid: str | None) -> _Session | None:
        """The live session with id ``sid``, if any."""
        if not sid:
            return None
        found = self._table.get(sid)
        if found is None:
            return None
        if time.monotonic() - found.started > self.ttl_s:
            del self._table[sid]
            return None
        return found

    def new(self, key: str | None = None) -> tuple[str, _Session]:
        """Start a session (a fresh id and CSRF token)."""
        sid = secrets.token_urlsafe(32)
        session = _Session(csrf=secrets.token_urlsafe(32), key=key)
        self._table[sid] = session
        while len(self._table) > self.limit:
            self._table.popitem(last=False)
        return sid, session

    def drop(self, sid: str | None) -> None:
        """End a session."""
        if sid:
            self._table.pop(sid, None)


# -- helpers the templates use ----------------------------------------------------------------


def word_diff(old: str | None, new: str | None) -> list[tuple[str, str]]:
    """``[(kind, text)]`` with kind ``same``, ``del`` or ``ins``: what a change did to a text.

    Compared word by word (whitespace is not a token, so a run of spaces never
    splits a change in two); each part's words are joined by one space, and the
    page puts one space between parts, so ``three`` → ``four`` never reads
    ``threefour``.
    """
    a = (old or "").split()
    b = (new or "").split()
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("same", " ".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(("del", " ".join(a[i1:i2])))
        if j2 > j1:
            out.append(("ins", " ".join(b[j1:j2])))
    return out


def history_rows(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as the memory page shows it, oldest first.

    Each event gets ``label`` (distinct per event: ``v2``, ``v3 deleted``,
    ``v3 restored``, ``v1 seen again``), ``makes_version`` (the event that made
    its version's text: one per version) and ``restorable`` (a version other
    than the current one, offered once), besides the word and metadata diffs.
    """
    current = history[-1].get("version") if history else None
    made: set[Any] = set()
    rows = []
    for event in history:
        kind = event.get("event")
        version = event.get("version")
        makes = (
            kind in ("ADD", "UPDATE", "RESTORE")
            and bool(event.get("new_memory"))
            and version not in made
        )
        if makes:
            made.add(version)
        suffix = {
            "DELETE": " deleted",
            "RESTORE": " restored",
            "ATTACH": " seen again",
            "DETACH": " detached",
            "LINK": " linked",
            "UNLINK": " unlinked",
        }.get(str(kind), "" if makes else f" {str(kind).lower()}")
        if makes and kind == "RESTORE":
            suffix = " (restored)"
        rows.append(
            {
                **event,
                "label": f"v{version}{suffix}",
                "makes_version": makes,
                "restorable": makes and version != current,
                "diff": word_diff(event.get("old_memory"), event.get("new_memory")),
                "meta_diff": metadata_diff(event.get("old_metadata"), event.get("new_metadata")),
            }
        )
    return rows


def matched_words(query: str, text: str) -> list[tuple[str, bool]]:
    """``text`` cut into ``(piece, matched)``: the words whose keyword term the query has.

    Words are compared as the keyword index compares them (lower-case lemmas,
    stop words dropped: :func:`engramdb.nlp.terms.index_terms`), so "drinks"
    matches a query's "drink".
    """
    wanted = set(query_terms(query))
    out: list[tuple[str, bool]] = []
    if not wanted:
        return [(text, False)]
    for piece in re.findall(r"\w+|\W+", text):
        hit = piece[:1].isalnum() and bool(set(index_terms(piece).split()) & wanted)
        if out and out[-1][1] == hit:
            out[-1] = (out[-1][0] + piece, hit)
        else:
            out.append((piece, hit))
    return out


def plain_message(exc: EngramError, message: str) -> str:
    """What a person reads for a library error: no function names, no call syntax."""
    if isinstance(exc, MemoryNotFoundError):
        return (
            "There is no memory with this id that you may see: it was purged, the link is "
            "mistyped, or it belongs to a scope outside your key."
        )
    if isinstance(exc, ScopeForbiddenError):
        return (
            f"Your key may only see its own {exc.kind.replace('_id', '')}; this page asked "
            f"for {exc.kind.replace('_id', '')} {exc.requested!r}."
        )
    if isinstance(exc, ExtractionError):
        return (
            "The LLM's reply could not be used, so nothing was remembered this time. "
            "The messages are still kept: you can retry again later."
        )
    if "needs an LLM" in message:
        return "Retrying needs an LLM, and this server has none configured."
    if "already resolved" in message:
        return "This failure was already retried successfully."
    if message.startswith("no extraction failure with id"):
        return "There is no extraction failure with this number that you may see."
    # Library hints name its functions ("see get_all()", "call retry_extraction(1)").
    return re.sub(r"\s*\([^()]*\w+\(\)[^()]*\)", "", message)


def page_numbers(page: int, pages: int) -> list[int | None]:
    """The page links to show: first, last and two either side of ``page``; ``None`` is a gap."""
    wanted = sorted({1, pages, *range(max(1, page - 2), min(pages, page + 2) + 1)})
    out: list[int | None] = []
    last = 0
    for n in wanted:
        if last and n - last > 1:
            out.append(None)
        out.append(n)
        last = n
    return out


def metadata_diff(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
) -> list[tuple[str, str, str | None, str | None]]:
    """``[(kind, key, old, new)]`` with kind ``added``, ``removed`` or ``changed``."""
    a, b = dict(old or {}), dict(new or {})
    out: list[tuple[str, str, str | None, str | None]] = []
    for key in sorted(set(a) | set(b)):
        if key not in a:
            out.append(("added", key, None, _show(b[key])))
        elif key not in b:
            out.append(("removed", key, _show(a[key]), None))
        elif a[key] != b[key]:
            out.append(("changed", key, _show(a[key]), _show(b[key])))
    return out


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _when(value: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM`` UTC (what a person reads)."""
    if not value:
        return ""
    return value.replace("T", " ")[:16]


def _when_s(value: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    if not value:
        return ""
    return value.replace("T", " ")[:19]


def _parse_value(raw: str) -> Any:
    """A value typed into the simple filter form: JSON when it reads as JSON, else text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def build_filter(
    key: str | None, op: str | None, value: str | None, raw: str | None
) -> dict[str, Any] | None:
    """The filter of the list and search forms: the simple condition ANDed with the raw JSON.

    Raises:
        ValidationError: the raw JSON is not a JSON object, or the operator is unknown.
    """
    parts: list[dict[str, Any]] = []
    if key and key.strip():
        op = op or "eq"
        if op not in _OPS:
            raise ValidationError(f"unknown filter operator {op!r}")
        text = (value or "").strip()
        operand: Any
        if op in ("in", "nin"):
            operand = [_parse_value(v.strip()) for v in text.split(",") if v.strip()]
        else:
            operand = _parse_value(text)
        parts.append({key.strip(): operand if op == "eq" else {op: operand}})
    if raw and raw.strip():
        try:
            decoded = json.loads(raw)
        except ValueError as exc:
            raise ValidationError(f"the JSON filter is not valid JSON: {exc}") from None
        if not isinstance(decoded, dict):
            raise ValidationError("the JSON filter must be a JSON object")
        if decoded:
            parts.append(decoded)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"AND": parts}


def _bars(per_day: Mapping[str, int], days: int = 30) -> list[dict[str, Any]]:
    """The last ``days`` days ending today (UTC), with counts and bar heights (0-100)."""
    today = datetime.now(UTC).date()
    counts = [((today - timedelta(days=back)).isoformat(), 0) for back in range(days - 1, -1, -1)]
    counts = [(day, per_day.get(day, 0)) for day, _ in counts]
    top = max((n for _, n in counts), default=0) or 1
    return [
        {"day": day, "count": n, "height": round(100 * n / top, 1), "x": i * 10}
        for i, (day, n) in enumerate(counts)
    ]


# -- the app part -----------------------------------------------------------------------------


class _Page(Exception):
    """Stop handling a request and answer ``response`` (a redirect, a refusal)."""

    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass
class _Ctx:
    request: Request
    caller: Caller
    sid: str
    session: _Session
    new_cookie: bool
    auth: bool


class _UI:
    """The UI's routes over one service; see :func:`install_ui`."""

    def __init__(
        self,
        memory: AsyncMemory | Memory,
        keys: KeyStore | None,
        limits: ServerLimits | None,
        activity: ActivityLog | None = None,
    ) -> None:
        self.memory = memory
        self.service = MemoryService(memory.acting_as(UI_ACTOR), limits)
        self.keys = keys
        self.activity = activity if activity is not None else ActivityLog()
        self.sessions = UiSessions()
        self._catalogs: dict[tuple[tuple[str, str], ...], tuple[float, dict[str, Any]]] = {}
        self._refreshing: set[tuple[tuple[str, str], ...]] = set()
        self._tasks: set[asyncio.Task[dict[str, Any]]] = set()
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_package_dir("ui_templates")),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = _when
        self.env.filters["when_s"] = _when_s
        self.env.filters["json"] = lambda v: json.dumps(v, ensure_ascii=False, indent=1)
        self.env.globals["version"] = __version__

    # -- who is asking --

    def _auth_on(self) -> bool:
        return self.keys is not None and self.keys.any_keys()

    def _context(self, request: Request, *, need_caller: bool = True) -> _Ctx:
        sid = request.cookies.get(COOKIE)
        session = self.sessions.get(sid)
        new_cookie = False
        if session is None or sid is None:
            sid, session = self.sessions.new()
            new_cookie = True
        auth = self._auth_on()
        caller = Caller()
        if auth:
            found = self.keys.verify(session.key) if self.keys and session.key else None
            if found is None:
                session.key = None
                if need_caller:
                    target = "/ui/signin?" + urlencode({"next": _next_of(request)})
                    response = RedirectResponse(target, status_code=303)
                    if new_cookie:
                        self._set_cookie(response, sid, request)
                    raise _Page(response)
            else:
                caller = Caller.of_key(found)
        return _Ctx(request, caller, sid, session, new_cookie, auth)

    def _set_cookie(self, response: Response, sid: str, request: Request) -> None:
        # ``Secure`` whenever the request came over https: directly (TLS at
        # uvicorn), or through a proxy that ``engram serve --forwarded-allow-ips``
        # trusts, whose X-Forwarded-Proto uvicorn turns into the request's scheme.
        response.set_cookie(
            COOKIE,
            sid,
            httponly=True,
            samesite="strict",
            path="/ui",
            max_age=_SESSION_TTL_S,
            secure=request.url.scheme == "https",
        )

    async def _form(self, ctx: _Ctx) -> dict[str, str]:
        """The posted form, after checking its CSRF token."""
        body = (await ctx.request.body()).decode("utf-8", "replace")
        form = {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}
        token = form.get("csrf", "")
        if ctx.new_cookie or not hmac.compare_digest(token, ctx.session.csrf):
            raise _Page(
                self._render(
                    ctx,
                    "error.html",
                    403,
                    title="Refused",
                    message=(
                        "this form expired or did not come from this page (CSRF check); "
                        "reload the page and try again"
                    ),
                )
            )
        return form

    # -- answers --

    def _render(self, ctx: _Ctx, template: str, status: int = 200, **values: Any) -> Response:
        page = self.env.get_template(template).render(
            caller=ctx.caller,
            who=_who(ctx.caller) if ctx.auth else "local user, every scope (no API keys)",
            auth=ctx.auth,
            signed_in=not ctx.auth or ctx.session.key is not None,
            key_admin=ctx.auth and ctx.caller.admin and self.keys is not None,
            csrf=ctx.session.csrf,
            flash=self._take_flash(ctx),
            path=ctx.request.url.path,
            **values,
        )
        response = HTMLResponse(page, status_code=status)
        self._secure(response)
        if ctx.new_cookie:
            self._set_cookie(response, ctx.sid, ctx.request)
        return response

    def _take_flash(self, ctx: _Ctx) -> dict[str, Any] | None:
        flash, ctx.session.flash = ctx.session.flash, None
        error, ctx.session.flash_error = ctx.session.flash_error, False
        return None if flash is None else {"text": flash, "error": error}

    @staticmethod
    def _secure(response: Response) -> None:
        response.headers["Content-Security-Policy"] = _CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"

    def _redirect(self, ctx: _Ctx, target: str, flash: str | None = None) -> Response:
        if flash:
            ctx.session.flash = flash
        response = RedirectResponse(target, status_code=303)
        if ctx.new_cookie:
            self._set_cookie(response, ctx.sid, ctx.request)
        return response

    def _error(self, ctx: _Ctx, exc: EngramError) -> Response:
        status, body = describe_error(exc)
        title = "Not found" if status == 404 else "Refused" if status == 403 else "Error"
        if status == 503:
            title = "The memory store is unavailable; try again in a few seconds"
        response = self._render(
            ctx,
            "error.html",
            status,
            title=title,
            message=plain_message(exc, body["message"]),
            code=body["code"],
        )
        response.headers.update(error_headers(exc))
        return response

    # -- shared reads --

    def _scope(self, request: Request) -> dict[str, str | None]:
        return {k: (request.query_params.get(k) or "").strip() or None for k in SCOPE_KINDS}

    def _effective(self, ctx: _Ctx, scope: Mapping[str, str | None]) -> dict[str, str | None]:
        """The scope shown: the one asked for, the key's ids filled in."""
        out = dict(scope)
        for kind, value in ctx.caller.bound.items():
            out[kind] = out.get(kind) or value
        return out

    async def catalog(self, caller: Caller) -> dict[str, Any]:
        """:meth:`MemoryService.catalog` per scope, cached: a few seconds fresh, then refreshed.

        The counts are one aggregate query of the store (``Store.scope_counts``,
        milliseconds for 10,000 memories); the cache spares it on every page
        load. A stale entry is answered at once while a background task
        refreshes it; a change made here drops the cache.
        """
        key = tuple(sorted(caller.bound.items()))
        cached = self._catalogs.get(key)
        now = time.monotonic()
        if cached is not None:
            if now - cached[0] >= _CATALOG_TTL_S and key not in self._refreshing:
                self._refreshing.add(key)
                task = asyncio.get_running_loop().create_task(self._refresh(key, caller))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return cached[1]
        return await self._refresh(key, caller)

    async def _refresh(self, key: tuple[tuple[str, str], ...], caller: Caller) -> dict[str, Any]:
        try:
            found = await self.service.catalog(caller)
        finally:
            self._refreshing.discard(key)
        self._catalogs[key] = (time.monotonic(), found)
        if len(self._catalogs) > 256:
            self._catalogs.pop(next(iter(self._catalogs)))
        return found

    def _forget_catalog(self) -> None:
        self._catalogs.clear()

    # -- pages --

    async def overview(self, ctx: _Ctx) -> Response:
        """Counts, memories added per day, extraction failures, LLM use, the store and embedder."""
        cat = await self.catalog(ctx.caller)
        llm = self.memory.llm
        stats_fn = getattr(llm, "stats", None)
        stats = stats_fn() if stats_fn is not None else None
        config = self.memory.config
        failures, failures_capped = await self._failures_everywhere(ctx, cat, False)
        return self._render(
            ctx,
            "overview.html",
            nav="overview",
            cat=cat,
            bars=_bars(cat["per_day"]),
            llm=None if llm is None else getattr(llm, "provider", type(llm).__name__),
            llm_model=getattr(llm, "model", None),
            stats=stats,
            store=config.vector_store.provider,
            embedder=self.memory.embedder.model,
            dim=self.memory.embedder.dim,
            engine=self.service.engine,
            open_failures=len(failures),
            failures_capped=failures_capped,
        )

    async def scopes(self, ctx: _Ctx) -> Response:
        """Users, agents and runs with their memory counts."""
        cat = await self.catalog(ctx.caller)
        tables = [
            (title, kind, sorted(cat[name].items(), key=lambda kv: (-kv[1], kv[0])))
            for title, kind, name in (
                ("Users", "user_id", "users"),
                ("Agents", "agent_id", "agents"),
                ("Runs", "run_id", "runs"),
            )
        ]
        return self._render(ctx, "scopes.html", nav="scopes", tables=tables, cat=cat)

    def _listing_args(self, ctx: _Ctx) -> dict[str, Any]:
        q = ctx.request.query_params
        return {
            "fk": q.get("fk", ""),
            "fop": q.get("fop", "eq"),
            "fv": q.get("fv", ""),
            "filters": q.get("filters", ""),
        }

    @staticmethod
    def _scopes_of(cat: Mapping[str, Any], kinds: tuple[str, ...]) -> list[dict[str, str | None]]:
        """The scopes of the catalog, largest first (users, then agents, then runs)."""
        out: list[dict[str, str | None]] = []
        for kind, name in (("user_id", "users"), ("agent_id", "agents"), ("run_id", "runs")):
            if kind not in kinds:
                continue
            for value, _ in sorted(cat[name].items(), key=lambda kv: (-kv[1], kv[0])):
                out.append({k: (value if k == kind else None) for k in SCOPE_KINDS})
        return out

    async def _rows(
        self,
        ctx: _Ctx,
        scopes: list[dict[str, str | None]],
        filters: dict[str, Any] | None,
        show_expired: bool,
        upto: int,
    ) -> tuple[list[dict[str, Any]], bool]:
        """The newest ``upto`` memories of the scopes, merged newest first; whether more exist."""
        found: dict[str, dict[str, Any]] = {}
        more = False
        for scope in scopes:
            offset = 0
            while offset < upto:
                want = min(_CHUNK, upto - offset)
                page = await self.service.list_memories(
                    ctx.caller,
                    user_id=scope["user_id"],
                    agent_id=scope["agent_id"],
                    run_id=scope["run_id"],
                    filters=filters,
                    top_k=want,
                    offset=offset,
                    show_expired=show_expired,
                )
                for row in page["results"]:
                    found.setdefault(row["id"], row)
                offset += len(page["results"])
                if len(page["results"]) < want:
                    break
            else:
                more = True
        rows = sorted(found.values(), key=lambda r: r.get("created_at") or "", reverse=True)
        return rows, more

    async def _memories_data(self, ctx: _Ctx) -> dict[str, Any]:
        scope = self._scope(ctx.request)
        args = self._listing_args(ctx)
        params = ctx.request.query_params
        try:
            page = max(1, int(params.get("page", "1")))
        except ValueError:
            page = 1
        state = params.get("state") if params.get("state") in STATES else "live"
        text = (params.get("text") or "").strip()
        shown = self._effective(ctx, scope)
        data: dict[str, Any] = {
            "scope": shown,
            "args": args,
            "ops": _OPS,
            "page": page,
            "state": state,
            "states": STATES,
            "text": text,
            "results": None,
            "more": False,
            "total": None,
            "total_capped": False,
            "pages": [],
            "error": None,
            "all_scopes": False,
            "page_size": PAGE_SIZE,
            "query_base": _query(
                {**scope, **args, "state": "" if state == "live" else state, "text": text}
            ),
        }
        cross = not any(shown.values())
        if cross and not ctx.caller.admin:
            return data
        data["all_scopes"] = cross
        try:
            filters = build_filter(args["fk"], args["fop"], args["fv"], args["filters"])
            if state == "expired":
                now = datetime.now(UTC).isoformat()
                expired = {"expires_at": {"lt": now}}
                filters = expired if filters is None else {"AND": [filters, expired]}
            if text:
                # The store searches the text (ASCII case folded): no memory read into Python.
                found_text = {"memory": {"icontains": text}}
                filters = found_text if filters is None else {"AND": [filters, found_text]}
            show_expired = state == "expired"
            cat = await self.catalog(ctx.caller)
            if cross:
                scopes = self._scopes_of(cat, ("user_id", "agent_id"))[:FANOUT_SCOPES]
            else:
                scopes = [scope]
            offset = (page - 1) * PAGE_SIZE
            if cross:
                upto = min(offset + PAGE_SIZE + 1, CROSS_LIMIT)
                rows, capped = await self._rows(ctx, scopes, filters, show_expired, upto)
                if not capped and not filters and state == "live":
                    data["total"] = cat["live"]
                else:
                    data["total"], data["total_capped"] = len(rows), capped
                results = rows[offset : offset + PAGE_SIZE + 1]
            else:
                found = await self.service.list_memories(
                    ctx.caller,
                    user_id=scope["user_id"],
                    agent_id=scope["agent_id"],
                    run_id=scope["run_id"],
                    filters=filters,
                    top_k=PAGE_SIZE + 1,
                    offset=offset,
                    show_expired=show_expired,
                )
                results = found["results"]
                if len(results) <= PAGE_SIZE:
                    data["total"] = offset + len(results) if results or page == 1 else None
                else:
                    data["total"] = _catalog_total(cat, shown) if not filters else None
                    if data["total"] is None:
                        # One bounded count in the store: no memory read into Python.
                        counted = await self.service.count(
                            ctx.caller,
                            user_id=scope["user_id"],
                            agent_id=scope["agent_id"],
                            run_id=scope["run_id"],
                            filters=filters,
                            show_expired=show_expired,
                            limit=COUNT_LIMIT + 1,
                        )
                        data["total"] = min(counted, COUNT_LIMIT)
                        data["total_capped"] = counted > COUNT_LIMIT
        except EngramError as exc:
            status, body = describe_error(exc)
            if status in (403, 503):
                raise
            data["error"] = plain_message(exc, body["message"])
            return data
        data["more"] = len(results) > PAGE_SIZE
        data["results"] = results[:PAGE_SIZE]
        if data["total"] is not None:
            last = max(1, -(-data["total"] // PAGE_SIZE))
            if cross:
                last = max(1, -(-min(data["total"], len(rows)) // PAGE_SIZE))
            data["last_page"] = last
            data["pages"] = page_numbers(min(page, last), last)
        if not results and page == 1 and not filters and not text:
            data["unknown_scope"] = not cross and not _catalog_total(cat, shown)
        return data

    async def memories(self, ctx: _Ctx) -> Response:
        """A scope's memories (every scope for an admin), newest first, paged and filtered."""
        data = await self._memories_data(ctx)
        cat = None
        if not any(data["scope"].values()):
            cat = await self.catalog(ctx.caller)
        return self._render(ctx, "memories.html", nav="memories", cat=cat, **data)

    async def memories_fragment(self, ctx: _Ctx) -> Response:
        """The table of one page of memories (swapped in by the script)."""
        data = await self._memories_data(ctx)
        return self._render(ctx, "_memory_rows.html", **data)

    async def _search_data(self, ctx: _Ctx) -> dict[str, Any]:
        scope = self._scope(ctx.request)
        args = self._listing_args(ctx)
        params = ctx.request.query_params
        query = (params.get("q") or "").strip()
        as_of = (params.get("as_of") or "").strip() or None
        current_only = params.get("current") == "1"
        raw_k = params.get("k") or str(SEARCH_SIZES[1])
        top_k = int(raw_k) if raw_k in {str(n) for n in SEARCH_SIZES} else SEARCH_SIZES[1]
        raw_threshold = (params.get("threshold") or "").strip()
        shown = self._effective(ctx, scope)
        retrieval = getattr(self.memory.config, "retrieval", None)
        data: dict[str, Any] = {
            "scope": shown,
            "args": args,
            "ops": _OPS,
            "q": query,
            "as_of": as_of or "",
            "current_only": current_only,
            "k": top_k,
            "sizes": SEARCH_SIZES,
            "threshold": raw_threshold,
            "weights": {
                part: getattr(retrieval, f"{part}_weight", None)
                for part in ("semantic", "bm25", "entity", "actor")
            },
            "results": None,
            "error": None,
            "all_scopes": False,
        }
        if not query:
            return data
        cross = not any(shown.values())
        if cross and not ctx.caller.admin:
            return data
        data["all_scopes"] = cross
        try:
            threshold = None
            if raw_threshold:
                try:
                    threshold = float(raw_threshold)
                except ValueError:
                    raise ValidationError(
                        "the minimum score must be a number from 0 to 1, such as 0.3"
                    ) from None
                if not 0 <= threshold <= 1:
                    raise ValidationError("the minimum score must be from 0 to 1")
            filters = build_filter(args["fk"], args["fop"], args["fv"], args["filters"])
            scopes = [scope]
            if cross:
                cat = await self.catalog(ctx.caller)
                scopes = self._scopes_of(cat, ("user_id", "agent_id"))[:FANOUT_SCOPES]
            merged: dict[str, dict[str, Any]] = {}
            for one in scopes:
                found = await self.service.search(
                    ctx.caller,
                    query,
                    user_id=one["user_id"],
                    agent_id=one["agent_id"],
                    run_id=one["run_id"],
                    filters=filters,
                    top_k=top_k,
                    threshold=threshold,
                    explain=True,
                    as_of=as_of,
                    include_superseded=not current_only,
                )
                for hit in found["results"]:
                    merged.setdefault(hit["id"], hit)
        except EngramError as exc:
            status, body = describe_error(exc)
            if status in (403, 503):
                raise
            data["error"] = plain_message(exc, body["message"])
            return data
        results = list(merged.values())
        if cross:
            results.sort(key=lambda r: -(r.get("score") or 0))
            results = results[:top_k]
        for hit in results:
            hit["words"] = matched_words(query, hit.get("memory") or "")
            hit["matched"] = sorted({p.casefold() for p, m in hit["words"] if m})
        data["results"] = results
        return data

    async def search(self, ctx: _Ctx) -> Response:
        """A query over the chosen scope, each result with its score and its parts."""
        data = await self._search_data(ctx)
        return self._render(ctx, "search.html", nav="search", **data)

    async def search_fragment(self, ctx: _Ctx) -> Response:
        """The results of a search (swapped in by the script)."""
        data = await self._search_data(ctx)
        return self._render(ctx, "_search_results.html", **data)

    async def memory_page(self, ctx: _Ctx, memory_id: str) -> Response:
        """One memory: text, metadata, scope, what holds now, history with diffs; the edit forms."""
        history = await self.service.history(ctx.caller, memory_id)
        found: dict[str, Any] | None
        try:
            found = await self.service.get(ctx.caller, memory_id)
        except MemoryNotFoundError:
            found = None  # deleted: its history is still the caller's to see
        timeline: list[dict[str, Any]] = []
        if found is not None:
            timeline = await self.service.timeline(ctx.caller, memory_id)
        sources = await self.service.source_messages(ctx.caller, memory_id)
        rows = history_rows(history)
        last = history[-1]
        back = _scope_of(found) if found is not None else {}
        if not back:
            back = {k: v for k, v in ctx.caller.bound.items() if v}
        return self._render(
            ctx,
            "memory.html",
            nav="memories",
            memory_id=memory_id,
            m=found,
            deleted=found is None,
            last_text=last.get("new_memory") or last.get("old_memory") or "",
            versions=list(reversed(rows)),
            current_version=last.get("version"),
            timeline=timeline,
            this_kinds=(found or {}).get("link_kinds", {}),
            sources=sources,
            back=_query(back),
            back_label=_scope_label(back),
        )

    async def timeline_fragment(self, ctx: _Ctx, memory_id: str) -> Response:
        """A memory's timeline of linked memories."""
        timeline = await self.service.timeline(ctx.caller, memory_id)
        this = next((t for t in timeline if t["id"] == memory_id), {})
        return self._render(
            ctx,
            "_timeline.html",
            memory_id=memory_id,
            timeline=timeline,
            this_kinds=this.get("link_kinds", {}),
        )

    async def _failure_messages(self, failure_id: int) -> tuple[dict[str, Any], list[Any], bool]:
        """A failure's scope, kept messages and whether it is resolved, read from the store.

        Only called for a failure the caller's own ``failures()`` listed (or
        :meth:`_visible_failure` checked), so the store is read for nothing else.
        """
        store = self.memory.store
        found = await anyio.to_thread.run_sync(store.failure, failure_id)
        if found is None:
            raise ValidationError(f"no extraction failure with id {failure_id}")
        scope, messages, resolved = found
        ids = {k: getattr(scope, k) for k in SCOPE_KINDS}
        return ids, [m for _, m in messages], resolved

    async def _failures_everywhere(
        self, ctx: _Ctx, cat: Mapping[str, Any], include_resolved: bool
    ) -> tuple[list[dict[str, Any]], bool]:
        """Failures of every scope the caller may see: its own, or (an admin) every known scope."""
        if ctx.caller.bound:
            found = await self.service.failures(ctx.caller, include_resolved=include_resolved)
            return found, False
        if not ctx.caller.admin:
            return [], False
        scopes = self._scopes_of(cat, SCOPE_KINDS)
        out: dict[int, dict[str, Any]] = {}
        for scope in scopes[:FAILURE_SCOPES]:
            for failure in await self.service.failures(
                ctx.caller, **scope, include_resolved=include_resolved
            ):
                out.setdefault(failure["id"], {**failure, "scope": scope})
        return sorted(out.values(), key=lambda f: -int(f["id"])), len(scopes) > FAILURE_SCOPES

    async def failures(self, ctx: _Ctx) -> Response:
        """Extraction failures of a scope (every scope for an admin), each with its messages."""
        scope = self._scope(ctx.request)
        shown = self._effective(ctx, scope)
        found: list[dict[str, Any]] | None = None
        error = None
        capped = False
        include = ctx.request.query_params.get("resolved") == "1"
        cat = await self.catalog(ctx.caller)
        try:
            if any(scope.values()):
                found = await self.service.failures(ctx.caller, **scope, include_resolved=include)
            else:
                found, capped = await self._failures_everywhere(ctx, cat, include)
        except EngramError as exc:
            status, body = describe_error(exc)
            if status in (403, 503):
                raise
            error = plain_message(exc, body["message"])
        for failure in found or []:
            await self._describe_failure(failure)
        return self._render(
            ctx,
            "failures.html",
            nav="failures",
            scope=shown,
            failures=found,
            error=error,
            cat=cat,
            capped=capped,
            all_scopes=not any(shown.values()),
            include_resolved=include,
            has_llm=self.memory.llm is not None,
        )

    async def _describe_failure(self, failure: dict[str, Any]) -> None:
        reply = failure.get("reply")
        failure["reply_shown"] = None if reply is None else reply[:REPLY_SHOWN_CHARS]
        failure["reply_cut"] = 0 if reply is None else max(0, len(reply) - REPLY_SHOWN_CHARS)
        ids, messages, _ = await self._failure_messages(int(failure["id"]))
        failure["said"] = messages
        failure.setdefault("scope", ids)

    async def _visible_failure(self, ctx: _Ctx, failure_id: str) -> dict[str, Any]:
        """A failure the caller may see, by number; a missing page (404) otherwise."""
        try:
            number = int(failure_id)
            ids, _, _ = await self._failure_messages(number)
            listed = await self.service.failures(ctx.caller, **ids, include_resolved=True)
        except (ValueError, ValidationError, ScopeForbiddenError):
            listed, number, ids = [], 0, {}
        found = next((f for f in listed if f["id"] == number), None)
        if found is None:
            raise _Page(
                self._render(
                    ctx,
                    "error.html",
                    404,
                    title="Not found",
                    message="There is no extraction failure with this number that you may see.",
                )
            )
        found["scope"] = ids
        await self._describe_failure(found)
        return found

    async def failure_page(self, ctx: _Ctx, failure_id: str) -> Response:
        """One extraction failure: what was said, the error, the reply; retry; the outcome."""
        failure = await self._visible_failure(ctx, failure_id)
        made = ctx.session.made.pop(str(failure["id"]), None)
        return self._render(
            ctx,
            "failure.html",
            nav="failures",
            f=failure,
            made=made,
            has_llm=self.memory.llm is not None,
            back=_query(failure["scope"]),
            scope_label=_scope_label(failure["scope"]),
        )

    # -- changes (POST, CSRF-checked) --

    async def edit(self, ctx: _Ctx, memory_id: str) -> Response:
        """Change a memory's text and/or metadata."""
        form = await self._form(ctx)
        current = await self.service.get(ctx.caller, memory_id)
        text = form.get("text", "").strip()
        meta_raw = form.get("metadata", "").strip()
        try:
            metadata = json.loads(meta_raw) if meta_raw else {}
        except ValueError as exc:
            raise ValidationError(f"metadata is not valid JSON: {exc}") from None
        if not isinstance(metadata, dict):
            raise ValidationError("metadata must be a JSON object")
        new_text = text if text and text != current["memory"] else None
        new_meta = metadata if metadata != current.get("metadata", {}) else None
        if new_text is None and new_meta is None:
            return self._redirect(ctx, _memory_url(memory_id), "Nothing changed.")
        await self.service.update(
            ctx.caller,
            memory_id,
            text=new_text,
            metadata=new_meta,
            reason=form.get("reason", "").strip() or None,
        )
        self._forget_catalog()
        return self._redirect(
            ctx, _memory_url(memory_id), "Saved: a new version is in the history."
        )

    async def delete(self, ctx: _Ctx, memory_id: str) -> Response:
        """Delete a memory (restorable)."""
        form = await self._form(ctx)
        done = await self.service.delete(
            ctx.caller, memory_id, reason=form.get("reason", "").strip() or None
        )
        self._forget_catalog()
        if done["message"].startswith("Memory detached"):
            # Another scope's memory this key saw through its attached session.
            return self._redirect(
                ctx, "/ui/memories", "Detached: it belongs to another scope, which keeps it."
            )
        return self._redirect(ctx, _memory_url(memory_id), "Deleted. Restore brings it back.")

    async def restore(self, ctx: _Ctx, memory_id: str) -> Response:
        """Restore a memory to a version (default: the one before the last change)."""
        form = await self._form(ctx)
        raw = form.get("version", "").strip()
        try:
            version = int(raw) if raw else None
        except ValueError:
            raise ValidationError(f"version must be a number, got {raw!r}") from None
        await self.service.restore(ctx.caller, memory_id, version=version)
        self._forget_catalog()
        what = f"version {version}" if version is not None else "the previous version"
        return self._redirect(ctx, _memory_url(memory_id), f"Restored {what}.")

    async def purge(self, ctx: _Ctx, memory_id: str) -> Response:
        """Erase a memory and its history for good, once the person typed the confirmation.

        Afterwards the person lands on the list of the scope the memory was in.
        """
        form = await self._form(ctx)
        if form.get("confirm", "").strip().lower() != "purge":
            activity_log.note_status(400)
            return self._redirect(
                ctx,
                _memory_url(memory_id),
                "Not purged: type purge in the box to confirm that it cannot be undone.",
            )
        back: dict[str, str | None] = {k: None for k in SCOPE_KINDS}
        with contextlib.suppress(MemoryNotFoundError):  # deleted: the caller's own list
            back.update(_scope_of(await self.service.get(ctx.caller, memory_id)))
        await self.service.purge(ctx.caller, memory_id)
        self._forget_catalog()
        target = "/ui/memories" + (f"?{_query(back)}" if any(back.values()) else "")
        return self._redirect(ctx, target, "Purged: that memory and its history are gone for good.")

    async def retry(self, ctx: _Ctx, failure_id: str) -> Response:
        """Retry extraction on a failure's messages, then show the failure (POST-redirect-GET)."""
        await self._form(ctx)
        failure = await self._visible_failure(ctx, failure_id)
        target = f"/ui/failures/{failure['id']}"
        if failure.get("resolved_at"):
            return self._redirect(ctx, target, "This failure was already retried successfully.")
        try:
            result = await self.service.retry_extraction(ctx.caller, int(failure["id"]))
        except EngramError as exc:
            status, body = describe_error(exc)
            if status in (403, 503):
                raise
            activity_log.note_status(status)
            ctx.session.flash_error = True
            return self._redirect(
                ctx, target, "Retry failed: " + plain_message(exc, body["message"])
            )
        self._forget_catalog()
        changed = [r for r in result.get("results", []) if r.get("id")]
        added = sum(1 for r in changed if r.get("event") == "ADD")
        ctx.session.made[str(failure["id"])] = [
            {"id": r["id"], "memory": r.get("memory", ""), "event": r.get("event", "")}
            for r in changed
        ][:50]
        noun = "memory" if added == 1 else "memories"
        return self._redirect(ctx, target, f"Retried: extraction worked, {added} new {noun}.")

    # -- who did what (the activity log) --

    async def activity_page(self, ctx: _Ctx) -> Response:
        """The activity log: an admin sees every row, any other key only its own.

        Filters: key (an admin's choice), face, operation, status (a code, a
        class such as ``4xx``, or ``errors``) and scope ids; newest first,
        paged by row id.
        """
        params = ctx.request.query_params
        admin = ctx.caller.admin
        shown_key = (params.get("key") or "").strip()
        if not admin:
            shown_key = ctx.caller.key_id or "none"
        face = params.get("face") if params.get("face") in FACES else ""
        operation = (params.get("op") or "").strip()
        status = (params.get("status") or "").strip()
        scope = {k: (params.get(k) or "").strip() for k in SCOPE_KINDS}
        try:
            before = int(params["before"]) if params.get("before") else None
        except ValueError:
            before = None
        error = None
        rows: list[dict[str, Any]] = []
        if status:
            try:
                status_range(status)
            except ValueError:
                error = "Status is a code (404), a class (4xx) or the word errors."
        if error is None:
            query = functools.partial(
                self.activity.query,
                key_id=shown_key if shown_key and shown_key != "none" else None,
                no_key=shown_key == "none",
                face=face or None,
                operation=operation or None,
                status=status or None,
                scope=scope,
                before=before,
                limit=ACTIVITY_PAGE + 1,
            )
            rows = await anyio.to_thread.run_sync(query)
        more = len(rows) > ACTIVITY_PAGE
        rows = rows[:ACTIVITY_PAGE]
        names: dict[str, str | None] = {}
        key_choices: list[tuple[str, str]] = []
        if self.keys is not None and ctx.auth:
            listed = await anyio.to_thread.run_sync(self.keys.list_keys)
            if admin:
                names = {k.id: k.name for k in listed}
                key_choices = [(k.id, f"{k.id} {k.name or ''}".strip()) for k in listed]
            else:
                names = {k.id: k.name for k in listed if k.id == ctx.caller.key_id}
        kept = await anyio.to_thread.run_sync(self.activity.size) if admin else None
        base = _query(
            {
                "key": shown_key if admin else "",
                "face": face,
                "op": operation,
                "status": status,
                **scope,
            }
        )
        return self._render(
            ctx,
            "activity.html",
            nav="activity",
            rows=rows,
            more=more,
            older=rows[-1]["id"] if more and rows else None,
            before=before,
            names=names,
            admin=admin,
            key=shown_key,
            key_choices=key_choices,
            face=face,
            faces=FACES,
            op=operation,
            operations=OPERATIONS,
            status_filter=status,
            scope=scope,
            error=error,
            kept=kept,
            bound=self.activity.max_rows,
            enabled=self.activity.enabled,
            base=base,
        )

    # -- entities --

    def _page_of(self, ctx: _Ctx) -> int:
        try:
            return max(1, int(ctx.request.query_params.get("page", "1")))
        except ValueError:
            return 1

    async def entities_page(self, ctx: _Ctx) -> Response:
        """A scope's entities, most mentioned first, each with its newest memories.

        One aggregate read of the store per page (``Memory.entities``: the
        links the store wrote, counted over the scope's live memories), as
        the caller may see them: always current, nothing cached.
        """
        params = ctx.request.query_params
        text = (params.get("q") or "").strip()
        kind = params.get("type") if params.get("type") in ENTITY_TYPES else ""
        page = self._page_of(ctx)
        shown = self._effective(ctx, self._scope(ctx.request))
        values: dict[str, Any] = {
            "scope": shown,
            "q": text,
            "type": kind,
            "types": ENTITY_TYPES,
            "found": None,
            "page": page,
            "scope_query": _query(shown),
        }
        if not any(shown.values()):
            values["cat"] = await self.catalog(ctx.caller)
            return self._render(ctx, "entities.html", nav="entities", **values)

        async def read(page: int) -> dict[str, Any]:
            found: dict[str, Any] = await self.service.entities(
                ctx.caller,
                **shown,
                contains=text or None,
                entity_type=kind or None,
                top_k=ENTITY_PAGE,
                offset=(page - 1) * ENTITY_PAGE,
                newest=ENTITY_NEWEST,
            )
            return found

        found = await read(page)
        last = max(1, -(-found["total"] // ENTITY_PAGE))
        if page > last:
            page = last
            found = await read(page)
        values.update(
            found=found,
            page=page,
            total=found["total"],
            shown=found["results"],
            pages=page_numbers(page, last),
            last_page=last,
            query_base=_query({**shown, "q": text, "type": kind}),
        )
        return self._render(ctx, "entities.html", nav="entities", **values)

    async def entity_page(self, ctx: _Ctx) -> Response:
        """One entity of a scope and the memories that mention it, newest first."""
        name = (ctx.request.query_params.get("name") or "").strip()
        page = self._page_of(ctx)
        shown = self._effective(ctx, self._scope(ctx.request))
        found: dict[str, Any] = {"entity": None, "results": []}
        if name and any(shown.values()):
            found = await self.service.entity_memories(
                ctx.caller, name, **shown, top_k=ENTITY_PAGE, offset=(page - 1) * ENTITY_PAGE
            )
        entity = found["entity"]
        if entity is None:
            return self._render(
                ctx,
                "error.html",
                404,
                title="Not found",
                message=(
                    "This scope's memories mention no such entity: it may have been "
                    "renamed or deleted, or the link is mistyped."
                ),
            )
        last = max(1, -(-entity["memory_count"] // ENTITY_PAGE))
        if page > last:
            page = last
            found = await self.service.entity_memories(
                ctx.caller, name, **shown, top_k=ENTITY_PAGE, offset=(page - 1) * ENTITY_PAGE
            )
        return self._render(
            ctx,
            "entity.html",
            nav="entities",
            scope=shown,
            scope_query=_query(shown),
            scope_label=_scope_label(shown),
            entity=found["entity"] or entity,
            memories=found["results"],
            page=page,
            pages=page_numbers(page, last),
            last_page=last,
            query_base=_query({**shown, "name": name}),
        )

    # -- API keys (an admin key only) --

    def _key_admin(self, ctx: _Ctx) -> KeyStore:
        """The key store, for a session signed in with an admin key; a missing page otherwise."""
        if self.keys is None or not ctx.auth or not ctx.caller.admin or not ctx.caller.key_id:
            raise _Page(
                self._render(
                    ctx,
                    "error.html",
                    404,
                    title="Not found",
                    message="There is no such page.",
                )
            )
        return self.keys

    async def keys_page(self, ctx: _Ctx) -> Response:
        """Every API key (revoked ones too) with its scope and capabilities; the create form."""
        if self.keys is not None and not ctx.auth:
            return self._render(ctx, "keys.html", nav="keys", keys=None, caps=CAPABILITIES)
        store = self._key_admin(ctx)
        listed = await anyio.to_thread.run_sync(store.list_keys)
        new = ctx.session.new_key
        ctx.session.new_key = None
        return self._render(
            ctx,
            "keys.html",
            nav="keys",
            keys=list(reversed(listed)),
            new=new,
            caps=CAPABILITIES,
            mine=ctx.caller.key_id,
        )

    async def key_create(self, ctx: _Ctx) -> Response:
        """Create a key; its secret is shown once, on the next page."""
        store = self._key_admin(ctx)
        form = await self._form(ctx)
        admin = form.get("kind") == "admin"
        can = [c for c in CAPABILITIES if form.get(f"can_{c}") == "1" and c != "admin"]
        users = [u.strip() for u in form.get("users", "").split(",") if u.strip()]

        def make() -> NewKey:
            return store.create(
                user_id=None if admin else (form.get("user_id", "").strip() or None),
                agent_id=None if admin else (form.get("agent_id", "").strip() or None),
                run_id=None if admin else (form.get("run_id", "").strip() or None),
                admin=admin,
                name=form.get("name", "").strip() or None,
                can=None if admin else (can or None),
                users=users,
                any_user=form.get("any_user") == "1",
            )

        try:
            made = await anyio.to_thread.run_sync(make)
        except EngramError as exc:
            activity_log.note_status(describe_error(exc)[0])
            ctx.session.flash_error = True
            return self._redirect(ctx, "/ui/keys", "Not created: " + str(exc).replace("--", ""))
        activity_log.note("create_key", target=made.info.id)
        ctx.session.new_key = (made.info.id, made.key)
        return self._redirect(ctx, "/ui/keys", f"Created key {made.info.id}.")

    async def key_revoke(self, ctx: _Ctx, key_id: str) -> Response:
        """Revoke a key: every session signed in with it ends at once."""
        store = self._key_admin(ctx)
        await self._form(ctx)
        if not re.fullmatch(r"[0-9a-f]{8}", key_id):
            raise ValidationError("there is no key with this id")
        activity_log.note("revoke_key", target=key_id)
        try:
            await anyio.to_thread.run_sync(store.revoke, key_id)
        except EngramError:
            raise ValidationError("there is no key with this id") from None
        if key_id == ctx.caller.key_id:
            return self._redirect(ctx, "/ui/signin", "You revoked your own key: signed out.")
        return self._redirect(ctx, "/ui/keys", f"Revoked key {key_id}: it no longer works.")

    # -- signing in and out --

    async def signin_page(self, ctx: _Ctx) -> Response:
        """The sign-in form."""
        return self._render(
            ctx, "signin.html", nav="signin", next=_safe_next(ctx.request.query_params.get("next"))
        )

    async def signin(self, ctx: _Ctx) -> Response:
        """Check the key; on success start a fresh session (a new id) holding it."""
        form = await self._form(ctx)
        key = form.get("key", "").strip()
        target = _safe_next(form.get("next") or ctx.request.query_params.get("next"))
        if not self._auth_on():
            return self._redirect(ctx, target)
        found = self.keys.verify(key) if self.keys is not None and key else None
        if found is None:
            return self._render(
                ctx,
                "signin.html",
                401,
                nav="signin",
                next=target,
                error="That API key is unknown or revoked. Check that it was pasted whole.",
            )
        activity_log.note_caller(found.id)
        self.sessions.drop(ctx.sid)
        sid, _ = self.sessions.new(key)
        response = RedirectResponse(target, status_code=303)
        self._set_cookie(response, sid, ctx.request)
        return response

    async def signout(self, ctx: _Ctx) -> Response:
        """End the session; the sign-in page then says so."""
        await self._form(ctx)
        self.sessions.drop(ctx.sid)
        sid, session = self.sessions.new()
        session.flash = "You are signed out."
        response = RedirectResponse("/ui/signin", status_code=303)
        self._set_cookie(response, sid, ctx.request)
        return response


def _query(values: Mapping[str, Any]) -> str:
    return urlencode({k: v for k, v in values.items() if v not in (None, "")})


def _memory_url(memory_id: str) -> str:
    return "/ui/memory/" + memory_id


def _scope_of(memory: Mapping[str, Any]) -> dict[str, str | None]:
    """The list a memory belongs in: its user, else its agent, else its run."""
    for kind in SCOPE_KINDS:
        if memory.get(kind):
            return {kind: memory[kind]}
    return {}


def _who(caller: Caller) -> str:
    """Who is signed in, as a person reads it: the key and what it may see."""
    seen = _scope_label(caller.bound) or "every scope"
    return f"key {caller.key_id} · {seen}"


def _scope_label(scope: Mapping[str, str | None]) -> str:
    """``user alice, agent coach``: a scope as a person reads it."""
    return ", ".join(f"{k.removesuffix('_id')} {v}" for k, v in scope.items() if v)


def _catalog_total(cat: Mapping[str, Any], scope: Mapping[str, str | None]) -> int | None:
    """A one-id scope's live memories, from the counts; ``None`` for a scope of several ids."""
    named = [(k, v) for k, v in scope.items() if v]
    if len(named) != 1:
        return None
    kind, value = named[0]
    counts = cat[{"user_id": "users", "agent_id": "agents", "run_id": "runs"}[kind]]
    return int(counts.get(value, 0))


def _next_of(request: Request) -> str:
    path = request.url.path
    if path.startswith("/ui/fragments/"):
        return "/ui/overview"
    return path + (f"?{request.url.query}" if request.url.query else "")


def _safe_next(target: str | None) -> str:
    """Only local UI paths (never another site) to go to after signing in."""
    if target and target.startswith("/ui/") and not target.startswith("/ui//"):
        return target
    return "/ui/overview"


_Handler = Callable[..., Awaitable[Response]]


def install_ui(
    app: FastAPI,
    memory: AsyncMemory | Memory,
    *,
    keys: KeyStore | None = None,
    limits: ServerLimits | None = None,
    activity: ActivityLog | None = None,
) -> None:
    """Serve the web UI at ``/ui`` of ``app``, over ``memory`` with ``keys``' rules.

    ``activity`` is the log the Activity page reads (and the UI's actions go
    to, through :class:`~engramdb.server.activity.ActivityMiddleware`).
    """
    ui = _UI(memory, keys, limits, activity)
    app.state.ui = ui
    app.mount(
        "/ui/static",
        StaticFiles(directory=_package_dir("ui_static"), check_dir=True),
        name="ui-static",
    )

    def route(method: str, path: str, handler: _Handler, *, need_caller: bool = True) -> None:
        action = _ACTIONS.get(handler.__name__) if method == "POST" else None

        async def endpoint(request: Request) -> Response:
            if action is not None:  # a change (or signing in or out): the log keeps it
                activity_log.want()
                activity_log.note(action, fixed=True)
            try:
                ctx = ui._context(request, need_caller=need_caller)
            except _Page as page:
                return page.response
            if action is not None:
                activity_log.note_caller(ctx.caller.key_id)
            try:
                kwargs = dict(request.path_params)
                return await handler(ctx, **kwargs)
            except _Page as page:
                return page.response
            except EngramError as exc:
                return ui._error(ctx, exc)

        endpoint.__name__ = f"ui_{handler.__name__}"
        app.add_api_route(
            path, endpoint, methods=[method], include_in_schema=False, response_class=HTMLResponse
        )

    async def home(request: Request) -> Response:
        return RedirectResponse("/ui/overview", status_code=303)

    app.add_api_route("/ui", home, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/", home, methods=["GET"], include_in_schema=False)
    route("GET", "/ui/signin", ui.signin_page, need_caller=False)
    route("POST", "/ui/signin", ui.signin, need_caller=False)
    route("POST", "/ui/signout", ui.signout, need_caller=False)
    route("GET", "/ui/overview", ui.overview)
    route("GET", "/ui/scopes", ui.scopes)
    route("GET", "/ui/memories", ui.memories)
    route("GET", "/ui/search", ui.search)
    route("GET", "/ui/failures", ui.failures)
    route("GET", "/ui/memory/{memory_id}", ui.memory_page)
    route("POST", "/ui/memory/{memory_id}/edit", ui.edit)
    route("POST", "/ui/memory/{memory_id}/delete", ui.delete)
    route("POST", "/ui/memory/{memory_id}/restore", ui.restore)
    route("POST", "/ui/memory/{memory_id}/purge", ui.purge)
    route("GET", "/ui/failures/{failure_id}", ui.failure_page)
    route("POST", "/ui/failures/{failure_id}/retry", ui.retry)
    route("GET", "/ui/activity", ui.activity_page)
    route("GET", "/ui/entities", ui.entities_page)
    route("GET", "/ui/entity", ui.entity_page)
    route("GET", "/ui/keys", ui.keys_page)
    route("POST", "/ui/keys", ui.key_create)
    route("POST", "/ui/keys/{key_id}/revoke", ui.key_revoke)
    route("GET", "/ui/fragments/memories", ui.memories_fragment)
    route("GET", "/ui/fragments/search", ui.search_fragment)
    route("GET", "/ui/fragments/timeline/{memory_id}", ui.timeline_fragment)
