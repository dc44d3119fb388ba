"""The web UI's Activity and Entities pages (issue 30), and the activity log behind the first.

In process (Starlette's TestClient) as an admin key and as keys bound to one
user: every face leaves rows (REST, mem0's routes, MCP, the UI's actions),
the rows never hold memory text, queries or secrets, the log keeps its bound,
and a bound key sees only its own rows and its own scope's entities. Then in
Chromium over a real ``engram serve`` (the helpers of ``test_ui_dashboard``):
both pages as both keys, light and dark, from the keyboard, with axe-core
when it is installed; the same run takes the screenshots of every page that
docs/ui.md shows (written to docs/img only with ``ENGRAM_UPDATE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from starlette.testclient import TestClient

from engramdb import Memory
from engramdb.embedders import LocalEmbedder
from engramdb.llms import ScriptedLLM
from engramdb.server import KeyStore, MemoryService, create_app
from engramdb.server.activity import ActivityLog, Entry, status_range
from engramdb.server.mcp import build_mcp
from test_ui_dashboard import _axe_js, _axe_run, _csrf, _plain, _serve, _sign_in, chromium  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
DOCS_IMG = ROOT / "docs" / "img"
SECRET_TEXT = "Quixotic zebra 7781 sails to Zanzibar"
SECRET_QUERY = "where does the quixotic zebra sail"


@pytest.fixture
def site(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[tuple[TestClient, Memory, KeyStore]]:
    memory = Memory(tmp_path / "e.db", embedder=embedder, llm=ScriptedLLM([]), actor="server")
    keys = KeyStore(tmp_path / "keys.db")
    with TestClient(create_app(memory, keys=keys, close_memory=True)) as client:
        yield client, memory, keys
    keys.close()


def _seed(memory: Memory) -> dict[str, str]:
    ids = {}
    for text, user in (
        ("My sister Ana lives in Lisbon", "alice"),
        ("Ana and I hike in Sintra every May", "alice"),
        ("I am allergic to peanuts", "alice"),
        ("Carol keeps the vault code in Berlin", "bob"),
    ):
        ids[text] = memory.add(text, user_id=user, infer=False)["results"][0]["id"]
    return ids


def _table(page: str) -> str:
    """The rows of the activity page (not its filter form, which lists every key)."""
    found = re.search(r"<table.*?</table>", page, re.S)
    return found.group(0) if found else ""


def _log(client: TestClient) -> ActivityLog:
    log = client.app.state.activity  # type: ignore[attr-defined]
    assert isinstance(log, ActivityLog)
    return log


# -- the log itself ---------------------------------------------------------------------------


def test_log_keeps_its_bound_and_costs_microseconds(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "activity.db", max_rows=100, batch=16, delay_s=0.05)
    started = time.perf_counter()
    for i in range(1000):
        entry = Entry(face="rest", key_id="0123abcd", operation="get", target=f"id-{i}")
        log.record(entry, 200)
    per_row_us = (time.perf_counter() - started) / 1000 * 1e6
    assert log.size() == 100
    newest = log.query(limit=1)[0]
    assert newest["target"] == "id-999" and newest["status"] == 200
    assert log.query(limit=1000)[-1]["target"] == "id-900"  # the oldest kept
    # A request only appends to a list; the disk is written by another thread.
    assert per_row_us < 500, per_row_us
    log.close()
    assert (tmp_path / "activity.db").stat().st_mode & 0o777 == 0o600
    # 0 rows: the log is off.
    off = ActivityLog(tmp_path / "off.db", max_rows=0)
    off.record(Entry(face="rest", operation="get"), 200)
    assert off.query() == [] and not (tmp_path / "off.db").exists()


def test_status_filters() -> None:
    assert status_range("404") == (404, 404)
    assert status_range("4xx") == (400, 499)
    assert status_range("errors") == (400, 599)
    with pytest.raises(ValueError):
        status_range("bad")


def test_ids_that_are_free_text_are_left_out(tmp_path: Path) -> None:
    from engramdb.server import activity

    log = ActivityLog(tmp_path / "a.db")
    entry, token = activity.begin("rest")
    activity.note("get", target="a memory id with spaces", scope={"user_id": "two words"})
    activity.end(token)
    log.record(entry, 404)
    row = log.query()[0]
    assert row["target"] is None and row["user_id"] is None
    log.close()


# -- in process -------------------------------------------------------------------------------


def test_every_face_is_recorded_and_no_text_or_secret_is(
    site: tuple[TestClient, Memory, KeyStore], tmp_path: Path
) -> None:
    client, memory, keys = site
    ids = _seed(memory)
    alice = keys.create(user_id="alice", name="alice app").key
    bob = keys.create(user_id="bob", name="bob app").key
    admin = keys.create(admin=True, name="root").key
    a = {"Authorization": f"Bearer {alice}"}
    added = client.post(
        "/memories",
        json={"messages": SECRET_TEXT, "user_id": "alice", "infer": False, "metadata": {"k": 1}},
        headers=a,
    )
    mid = added.json()["results"][0]["id"]
    assert client.post("/search", json={"query": SECRET_QUERY}, headers=a).status_code == 200
    assert client.put(f"/memories/{mid}", json={"text": SECRET_TEXT + "!"}, headers=a).is_success
    assert client.get(f"/memories/{mid}/history", headers=a).is_success
    assert client.get("/memories", params={"user_id": "bob"}, headers=a).status_code == 403
    bob_id = ids["Carol keeps the vault code in Berlin"]
    assert client.get(f"/memories/{bob_id}", headers=a).status_code == 404
    assert client.get(f"/memories/{SECRET_TEXT}", headers=a).status_code == 404
    assert (
        client.get(
            "/memories", headers={"Authorization": "Bearer " + alice[:-3] + "xyz"}
        ).status_code
        == 401
    )
    assert client.get("/memories", headers={"Authorization": f"Bearer {bob}"}).is_success
    assert client.get("/healthz").is_success and client.get("/metrics").is_success

    # mem0's routes and MCP tools, into the same log.
    log = _log(client)
    mem0 = create_app(memory, keys=keys, compat="mem0", activity=log)
    with TestClient(mem0) as other:
        found = other.post("/search", json={"query": SECRET_QUERY, "user_id": "alice"}, headers=a)
        assert found.status_code == 200, found.text

    async def tools() -> None:
        server = build_mcp(MemoryService(memory), keys=keys, api_key=alice, activity=log)
        async with Client(server) as mcp:
            await mcp.call_tool("search_memories", {"query": SECRET_QUERY})
            await mcp.call_tool("get_memory", {"memory_id": "no-such-id"})

    anyio.run(tools)

    # A change in the UI, as the admin.
    _sign_in(client, admin)
    page = client.get(f"/ui/memory/{mid}").text
    client.post(f"/ui/memory/{mid}/edit", data={"csrf": _csrf(page), "text": "changed by hand"})
    client.post(f"/ui/memory/{mid}/edit", data={"csrf": "forged", "text": SECRET_TEXT})

    rows = log.query(limit=1000)
    seen = {(r["face"], r["operation"], r["status"]) for r in rows}
    for expected in (
        ("rest", "add", 200),
        ("rest", "search", 200),
        ("rest", "update", 200),
        ("rest", "history", 200),
        ("rest", "list", 403),
        ("rest", "get", 404),
        ("rest", "GET /memories", 401),
        ("rest", "list", 200),
        ("mem0", "search", 200),
        ("mcp", "search", 200),
        ("mcp", "get", 404),
        ("ui", "sign_in", 303),
        ("ui", "update", 303),
        ("ui", "update", 403),
    ):
        assert expected in seen, (expected, sorted(seen))
    assert not any(r["operation"].startswith("GET /healthz") for r in rows)
    assert not any(r["face"] == "ui" and r["operation"].startswith("GET") for r in rows)
    alice_id = keys.verify(alice).id  # type: ignore[union-attr]
    add = next(r for r in rows if r["operation"] == "add")
    assert add["key_id"] == alice_id and add["user_id"] == "alice" and add["target"] is None
    update = next(r for r in rows if r["operation"] == "update" and r["face"] == "rest")
    assert update["target"] == mid and update["user_id"] == "alice"
    assert next(r for r in rows if r["status"] == 401)["key_id"] is None

    # Nothing that was said, searched for or kept; no secret; not in the file either.
    log.flush()
    blob = "\n".join(str(r) for r in rows)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("activity.db*"))
    for needle in ("Quixotic", "quixotic", "Zanzibar", "zebra", "changed by hand", "vault"):
        assert needle not in blob and needle.encode() not in raw, needle
    for key in (alice, bob, admin):
        secret = key.split("_", 2)[2]
        assert secret not in blob and secret.encode() not in raw
    columns = [
        c[1]
        for c in sqlite3.connect(tmp_path / "activity.db").execute("PRAGMA table_info(activity)")
    ]
    assert columns == [
        "id", "at", "key_id", "face", "operation", "user_id", "agent_id", "run_id",
        "target", "status", "ms",
    ]  # fmt: skip


def test_activity_page_admin_sees_all_bound_key_its_own(
    site: tuple[TestClient, Memory, KeyStore],
) -> None:
    client, memory, keys = site
    _seed(memory)
    alice = keys.create(user_id="alice", name="alice app").key
    bob = keys.create(user_id="bob", name="bob app").key
    admin = keys.create(admin=True, name="root").key
    alice_id, bob_id = (keys.verify(k).id for k in (alice, bob))  # type: ignore[union-attr]
    for _ in range(3):
        client.get("/memories", headers={"Authorization": f"Bearer {alice}"})
    client.post("/search", json={"query": SECRET_QUERY}, headers={"X-API-Key": bob})
    client.get("/memories", params={"user_id": "alice"}, headers={"X-API-Key": bob})  # 403

    _sign_in(client, admin)
    everything = client.get("/ui/activity").text
    assert alice_id in everything and bob_id in everything and "bob app" in everything
    assert "rows kept" in everything and 'href="/ui/activity"' in everything
    only_bob = _table(client.get("/ui/activity", params={"key": bob_id}).text)
    assert "search" in only_bob and bob_id in only_bob and alice_id not in only_bob
    refused = client.get("/ui/activity", params={"status": "4xx"}).text
    assert refused.count("<tr>") == 2 and ">403<" in refused  # the header row and bob's 403
    assert "No activity matches" in client.get("/ui/activity", params={"op": "purge"}).text
    by_user = client.get("/ui/activity", params={"user_id": "bob", "op": "search"}).text
    assert by_user.count("<tr>") == 2
    bad = client.get("/ui/activity", params={"status": "many"})
    assert bad.status_code == 200 and "Status is a code" in bad.text

    # A bound key: its own rows only, whatever it asks for.
    _sign_in(client, bob)
    own = client.get("/ui/activity").text
    assert bob_id in own and alice_id not in own and "of your key" in own
    assert "root" not in own and "alice app" not in own
    asked = client.get("/ui/activity", params={"key": alice_id}).text
    assert alice_id not in asked and bob_id in asked
    assert 'name="key"' not in own  # no key to choose


def test_activity_bound_holds_through_the_app(tmp_path: Path, embedder: LocalEmbedder) -> None:
    memory = Memory(tmp_path / "e.db", embedder=embedder, llm=None)
    keys = KeyStore(tmp_path / "keys.db")
    key = keys.create(user_id="alice").key
    log = ActivityLog(tmp_path / "small.db", max_rows=10)
    with TestClient(create_app(memory, keys=keys, activity=log, close_memory=True)) as client:
        for _ in range(35):
            client.get("/memories", headers={"X-API-Key": key})
        assert log.size() == 10
    keys.close()


def test_entities_per_scope_admin_and_bound_key(
    site: tuple[TestClient, Memory, KeyStore],
) -> None:
    client, memory, keys = site
    ids = _seed(memory)
    alice = keys.create(user_id="alice").key
    admin = keys.create(admin=True).key

    _sign_in(client, admin)
    picker = client.get("/ui/entities").text
    assert "Pick a scope" in picker and "/ui/entities?user_id=alice" in picker
    listed = client.get("/ui/entities", params={"user_id": "alice"}).text
    plain = _plain(listed)
    assert "Ana" in plain and "Lisbon" in plain and "Berlin" not in plain
    ana = ids["My sister Ana lives in Lisbon"]
    assert f'href="/ui/memory/{ana}"' in listed
    page = client.get("/ui/entity", params={"user_id": "alice", "name": "ana"}).text
    assert "2 memories of user alice mention it" in _plain(page)
    assert page.count('class="memory"') == 2 and "Sintra" in page
    assert 'href="/ui/entities?user_id=alice"' in page
    only_places = _plain(
        client.get("/ui/entities", params={"user_id": "alice", "type": "PLACE"}).text
    )
    assert "Lisbon" in only_places and "peanuts" not in only_places
    named = _plain(client.get("/ui/entities", params={"user_id": "alice", "q": "lis"}).text)
    assert "1 entity whose name contains" in named
    bobs = client.get("/ui/entities", params={"user_id": "bob"}).text
    assert "Berlin" in bobs and "Lisbon" not in bobs
    # A change made in the UI shows at once (the cache is dropped).
    token = _csrf(page)
    client.post(
        f"/ui/memory/{ana}/edit", data={"csrf": token, "text": "My sister Ana lives in Porto"}
    )
    after = _plain(client.get("/ui/entities", params={"user_id": "alice"}).text)
    assert "Porto" in after and "Lisbon" not in after

    # A change made elsewhere shows at once too: the page reads the store's links.
    memory.delete(ids["Ana and I hike in Sintra every May"])
    gone = _plain(client.get("/ui/entities", params={"user_id": "alice"}).text)
    assert "Sintra" not in gone and "Ana" in gone
    one = _plain(client.get("/ui/entity", params={"user_id": "alice", "name": "Ana"}).text)
    assert "1 memory of user alice mentions it" in one  # a name as written finds the key

    # A bound key: its own scope; another scope's entities are refused or missing.
    _sign_in(client, alice)
    own = client.get("/ui/entities").text
    assert "Ana" in own and "Berlin" not in own and "Carol" not in own
    assert client.get("/ui/entities", params={"user_id": "bob"}).status_code == 403
    theirs = client.get("/ui/entity", params={"user_id": "bob", "name": "berlin"})
    assert theirs.status_code == 403 and "Berlin" not in theirs.text
    missing = client.get("/ui/entity", params={"name": "berlin"})
    assert missing.status_code == 404 and "vault" not in missing.text
    assert 'href="/ui/entities"' in own and 'href="/ui/activity"' in own  # the nav


# -- a real browser ---------------------------------------------------------------------------


def test_browser_activity_and_entities(tmp_path: Path, chromium: str) -> None:  # noqa: F811
    from playwright.sync_api import expect, sync_playwright

    keys = KeyStore(tmp_path / "keys.db")
    admin = keys.create(admin=True, name="root").key
    alice = keys.create(user_id="alice", name="alice app").key
    bob = keys.create(user_id="bob", name="bob app").key
    alice_id, bob_id = (keys.verify(k).id for k in (alice, bob))  # type: ignore[union-attr]
    keys.close()
    process, url = _serve(tmp_path)
    axe = _axe_js()
    refresh = os.environ.get("ENGRAM_UPDATE_SCREENSHOTS") == "1"
    img = DOCS_IMG if refresh else tmp_path / "img"
    img.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    violations: list[str] = []
    checked: list[int] = []
    try:
        ids: dict[str, str] = {}
        with httpx.Client(base_url=url, timeout=60) as c:
            for text, user, key in (
                ("I drink black coffee every morning", "alice", alice),
                ("My sister Ana lives in Lisbon", "alice", alice),
                ("Ana and I hike in Sintra every May", "alice", alice),
                ("I am allergic to peanuts", "alice", alice),
                (SECRET_TEXT, "alice", alice),
                ("Carol keeps the vault code in Berlin", "bob", bob),
            ):
                body = {"messages": text, "user_id": user, "infer": False}
                added = c.post("/memories", json=body, headers={"X-API-Key": key})
                ids[text] = added.json()["results"][0]["id"]
            a = {"X-API-Key": alice}
            coffee = ids["I drink black coffee every morning"]
            c.put(
                f"/memories/{coffee}",
                json={"text": "I drink three coffees every morning"},
                headers=a,
            )
            c.post("/search", json={"query": SECRET_QUERY}, headers=a)
            c.get("/memories", params={"user_id": "bob"}, headers=a)  # 403
            c.get("/memories", headers={"X-API-Key": bob})
            failed = c.post("/memories", json={"messages": "my bike is red"}, headers=a)
            failure_id = failed.json()["error"]["failure_id"]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])

            def check(page: Any, name: str) -> None:
                if axe is None:
                    return
                passes, serious = _axe_run(page, axe)
                checked.append(passes)
                violations.extend(f"{name}: {v}" for v in serious)

            shots = (
                ("overview", "/ui/overview"),
                ("scopes", "/ui/scopes"),
                ("memories", "/ui/memories?user_id=alice"),
                ("search", "/ui/search?q=what+do+I+drink&user_id=alice"),
                ("memory", f"/ui/memory/{coffee}"),
                ("failures", "/ui/failures"),
                ("failure", f"/ui/failures/{failure_id}"),
                ("entities", "/ui/entities?user_id=alice"),
                ("entity", "/ui/entity?user_id=alice&name=ana"),
                ("activity", "/ui/activity"),
                ("keys", "/ui/keys"),
            )
            for scheme in ("light", "dark"):
                suffix = "" if scheme == "light" else "-dark"
                context = browser.new_context(
                    color_scheme=scheme, viewport={"width": 1100, "height": 800}, bypass_csp=True
                )
                page = context.new_page()
                page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
                page.goto(url + "/ui/signin")
                page.screenshot(path=str(img / f"ui-signin{suffix}.png"))
                page.fill("#key", admin)
                page.keyboard.press("Enter")
                expect(page).to_have_url(re.compile(r"/ui/overview"))
                background = page.evaluate("getComputedStyle(document.body).backgroundColor")
                assert (background != "rgb(251, 251, 250)") == (scheme == "dark"), background
                for name, path in shots:
                    page.goto(url + path)
                    page.screenshot(path=str(img / f"ui-{name}{suffix}.png"), full_page=True)
                for path in (
                    "/ui/activity",
                    "/ui/activity?status=4xx",
                    "/ui/entities",
                    "/ui/entities?user_id=alice",
                    "/ui/entity?user_id=alice&name=ana",
                ):
                    page.goto(url + path)
                    check(page, f"{scheme} admin {path}")

                # The keyboard: the nav link, then filter the log by status.
                page.goto(url + "/ui/overview")
                page.focus("nav a[href='/ui/activity']")
                outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
                assert outline == "solid"
                page.keyboard.press("Enter")
                expect(page).to_have_url(re.compile(r"/ui/activity$"))
                expect(page.locator("nav a[aria-current=page]")).to_have_text("Activity")
                expect(page.locator("table.activity")).to_contain_text(alice_id)
                expect(page.locator("table.activity")).to_contain_text(bob_id)
                page.focus("#act-status")
                page.keyboard.type("4xx")
                page.keyboard.press("Enter")
                expect(page).to_have_url(re.compile(r"status=4xx"))
                statuses = page.locator("table.activity td.num .status")
                expect(statuses.first).to_have_text(re.compile(r"^4\d\d$"))
                for text in statuses.all_inner_texts():
                    assert text.startswith("4"), text
                assert "quixotic" not in page.content().lower()
                page.goto(url + "/ui/activity")
                assert "quixotic" not in page.content().lower()
                assert "zanzibar" not in page.content().lower()

                # Entities: name search from the keyboard, then an entity's memories.
                page.goto(url + "/ui/entities?user_id=alice")
                page.focus("#ent-q")
                page.keyboard.type("ana")
                page.keyboard.press("Enter")
                expect(page.locator("li.entity a.name").first).to_have_text("Ana")
                page.focus("li.entity a.name")
                page.keyboard.press("Enter")
                expect(page).to_have_url(re.compile(r"/ui/entity\?"))
                expect(page.locator("li.memory")).to_have_count(2)
                page.locator("li.memory a.text").first.click()
                expect(page).to_have_url(re.compile(r"/ui/memory/"))
                context.close()

            # The bound key: its own rows and its own scope, in the dark.
            context = browser.new_context(color_scheme="dark", bypass_csp=True)
            page = context.new_page()
            page.goto(url + "/ui/signin?next=%2Fui%2Factivity")
            page.fill("#key", bob)
            page.keyboard.press("Enter")
            expect(page).to_have_url(re.compile(r"/ui/activity$"))
            expect(page.locator("table.activity")).to_contain_text(bob_id)
            seen = [page.content()]
            check(page, "bound /ui/activity")
            page.goto(url + f"/ui/activity?key={alice_id}")
            seen.append(page.content())
            page.goto(url + "/ui/entities")
            expect(page.locator("li.entity a.name", has_text="Berlin")).to_have_count(1)
            seen.append(page.content())
            check(page, "bound /ui/entities")
            page.goto(url + "/ui/entity?name=berlin")
            seen.append(page.content())
            check(page, "bound /ui/entity")
            response = page.goto(url + "/ui/entities?user_id=alice")
            assert response is not None and response.status == 403
            seen.append(page.content())
            response = page.goto(url + "/ui/entity?name=ana")
            assert response is not None and response.status == 404
            seen.append(page.content())
            for text in seen:
                assert alice_id not in text and "alice app" not in text
                assert "Lisbon" not in text and "Sintra" not in text and "coffee" not in text
            context.close()
            browser.close()
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert not problems, problems
    assert "Traceback" not in err, err
    assert not violations, violations
    if axe is not None:
        assert len(checked) >= 13 and min(checked) > 10, checked
    expected = {f"ui-{n}{s}.png" for n, _ in shots for s in ("", "-dark")}
    assert expected <= {p.name for p in img.iterdir()}
