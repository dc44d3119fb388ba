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
import difflib
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

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from engramdb import __version__
from engramdb.errors import EngramError, MemoryNotFoundError, ValidationError
from engramdb.memory import AsyncMemory, Memory
from engramdb.server.errors import describe_error, error_headers
from engramdb.server.keys import KeyStore
from engramdb.server.service import MemoryService, ServerLimits
from engramdb.server.tenancy import SCOPE_KINDS, Caller

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
    """``[(kind, text)]`` with kind ``same``, ``del`` or ``ins``: what a change did to a text."""
    a = re.findall(r"\S+|\s+", old or "")
    b = re.findall(r"\S+|\s+", new or "")
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("same", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(("del", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(("ins", "".join(b[j1:j2])))
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
    ) -> None:
        self.memory = memory
        self.service = MemoryService(memory.acting_as(UI_ACTOR), limits)
        self.keys = keys
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
            who=ctx.caller.describe() if ctx.auth else "local user (no API keys: everything)",
            auth=ctx.auth,
            signed_in=not ctx.auth or ctx.session.key is not None,
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

    def _take_flash(self, ctx: _Ctx) -> str | None:
        flash, ctx.session.flash = ctx.session.flash, None
        return flash

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
            ctx, "error.html", status, title=title, message=body["message"], code=body["code"]
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
        """Counts, memories added per day, LLM use, the store and embedder."""
        cat = await self.catalog(ctx.caller)
        llm = self.memory.llm
        stats_fn = getattr(llm, "stats", None)
        stats = stats_fn() if stats_fn is not None else None
        config = self.memory.config
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

    async def _memories_data(self, ctx: _Ctx) -> dict[str, Any]:
        scope = self._scope(ctx.request)
        args = self._listing_args(ctx)
        try:
            page = max(1, int(ctx.request.query_params.get("page", "1")))
        except ValueError:
            page = 1
        data: dict[str, Any] = {
            "scope": self._effective(ctx, scope),
            "args": args,
            "ops": _OPS,
            "page": page,
            "results": None,
            "more": False,
            "error": None,
            "query_base": _query({**scope, **args}),
        }
        if not any(data["scope"].values()):
            return data
        try:
            filters = build_filter(args["fk"], args["fop"], args["fv"], args["filters"])
            found = await self.service.list_memories(
                ctx.caller,
                user_id=scope["user_id"],
                agent_id=scope["agent_id"],
                run_id=scope["run_id"],
                filters=filters,
                top_k=PAGE_SIZE + 1,
                offset=(page - 1) * PAGE_SIZE,
            )
        except EngramError as exc:
            status, body = describe_error(exc)
            if status in (403, 503):
                raise
            data["error"] = body["message"]
            return data
        results = found["results"]
        data["more"] = len(results) > PAGE_SIZE
        data["results"] = results[:PAGE_SIZE]
        return data

    async def memories(self, ctx: _Ctx) -> Response:
        """A scope's memories, newest first, paged and filtered."""
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
        data: dict[str, Any] = {
            "scope": self._effective(ctx, scope),
            "args": args,
            "ops": _OPS,
            "q": query,
            "as_of": as_of or "",
            "current_only": current_only,
            "results": None,
            "error": None,
        }
        if not query:
            return data
        try:
            filters = build_filter(args["fk"], args["fop"], args["fv"], args["filters"])
            found = await self.service.search(
                ctx.caller,
                query,
                user_id=scope["user_id"],
                agent_id=scope["agent_id"],
                run_id=scope["run_id"],
                filters=filters,
                top_k=20,
                explain=True,
                as_of=as_of,
                include_superseded=not current_only,
            )
        except EngramError as exc:
            status, body = describe_error(exc)
            if status in (403, 503):
                raise
            data["error"] = body["message"]
            return data
        data["results"] = found["results"]
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
        """One memory: text, metadata, scope, history with diffs, timeline; the edit forms."""
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
        versions = []
        for event in history:
            versions.append(
                {
                    **event,
                    "diff": word_diff(event.get("old_memory"), event.get("new_memory")),
                    "meta_diff": metadata_diff(
                        event.get("old_metadata"), event.get("new_metadata")
                    ),
                }
            )
        last = history[-1]
        return self._render(
            ctx,
            "memory.html",
            nav="memories",
            memory_id=memory_id,
            m=found,
            deleted=found is None,
            last_text=last.get("new_memory") or last.get("old_memory") or "",
            versions=list(reversed(versions)),
            current_version=last.get("version"),
            timeline=timeline,
            this_kinds=(found or {}).get("link_kinds", {}),
            sources=sources,
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

    async def failures(self, ctx: _Ctx) -> Response:
        """Extraction failures of a scope, each with its error and a retry button."""
        scope = self._scope(ctx.request)
        shown = self._effective(ctx, scope)
        found: list[dict[str, Any]] | None = None
        error = None
        include = ctx.request.query_params.get("resolved") == "1"
        if any(shown.values()):
            try:
                found = await self.service.failures(ctx.caller, **scope, include_resolved=include)
            except EngramError as exc:
                status, body = describe_error(exc)
                if status in (403, 503):
                    raise
                error = body["message"]
        for failure in found or []:
            reply = failure.get("reply")
            failure["reply_shown"] = None if reply is None else reply[:REPLY_SHOWN_CHARS]
            failure["reply_cut"] = 0 if reply is None else max(0, len(reply) - REPLY_SHOWN_CHARS)
        cat = None if any(shown.values()) else await self.catalog(ctx.caller)
        return self._render(
            ctx,
            "failures.html",
            nav="failures",
            scope=shown,
            failures=found,
            error=error,
            cat=cat,
            include_resolved=include,
            has_llm=self.memory.llm is not None,
            back=_query(scope),
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
        """Erase a memory and its history for good, once the person typed the confirmation."""
        form = await self._form(ctx)
        if form.get("confirm", "").strip().lower() != "purge":
            return self._redirect(
                ctx,
                _memory_url(memory_id),
                "Not purged: type purge in the box to confirm that it cannot be undone.",
            )
        await self.service.purge(ctx.caller, memory_id)
        self._forget_catalog()
        return self._redirect(ctx, "/ui/memories", f"Purged {memory_id}: it is gone for good.")

    async def retry(self, ctx: _Ctx, failure_id: str) -> Response:
        """Run extraction again on a failure's messages."""
        form = await self._form(ctx)
        try:
            number = int(failure_id)
        except ValueError:
            raise ValidationError(f"no extraction failure with id {failure_id}") from None
        back = "/ui/failures" + (f"?{form['back']}" if form.get("back") else "")
        result = await self.service.retry_extraction(ctx.caller, number)
        self._forget_catalog()
        added = sum(1 for r in result.get("results", []) if r.get("event") == "ADD")
        noun = "memory" if added == 1 else "memories"
        return self._redirect(ctx, back, f"Retried failure {number}: {added} new {noun}.")

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
        target = _safe_next(form.get("next"))
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
                error="That API key is unknown or revoked.",
            )
        self.sessions.drop(ctx.sid)
        sid, _ = self.sessions.new(key)
        response = RedirectResponse(target, status_code=303)
        self._set_cookie(response, sid, ctx.request)
        return response

    async def signout(self, ctx: _Ctx) -> Response:
        """End the session."""
        await self._form(ctx)
        self.sessions.drop(ctx.sid)
        response = RedirectResponse("/ui/signin", status_code=303)
        response.delete_cookie(
            COOKIE,
            path="/ui",
            secure=ctx.request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response


def _query(values: Mapping[str, Any]) -> str:
    return urlencode({k: v for k, v in values.items() if v not in (None, "")})


def _memory_url(memory_id: str) -> str:
    return "/ui/memory/" + memory_id


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
) -> None:
    """Serve the web UI at ``/ui`` of ``app``, over ``memory`` with ``keys``' rules."""
    ui = _UI(memory, keys, limits)
    app.state.ui = ui
    app.mount(
        "/ui/static",
        StaticFiles(directory=_package_dir("ui_static"), check_dir=True),
        name="ui-static",
    )

    def route(method: str, path: str, handler: _Handler, *, need_caller: bool = True) -> None:
        async def endpoint(request: Request) -> Response:
            try:
                ctx = ui._context(request, need_caller=need_caller)
            except _Page as page:
                return page.response
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
    route("POST", "/ui/failures/{failure_id}/retry", ui.retry)
    route("GET", "/ui/fragments/memories", ui.memories_fragment)
    route("GET", "/ui/fragments/search", ui.search_fragment)
    route("GET", "/ui/fragments/timeline/{memory_id}", ui.timeline_fragment)
