"""The web UI at /ui: routes, tenancy and fragments over HTTP, then a real browser.

The first part drives the app in process (Starlette's TestClient, cookies and
all). The second starts a real ``engram serve`` on loopback and drives Debian's
Chromium through Playwright, taking screenshots into a temporary folder (those
of docs/img/, every page light and dark, are taken by
``tests/test_ui_activity_entities.py``). It skips only when no Chromium is
installed here, and fails instead when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from engramdb import Memory
from engramdb.embedders import LocalEmbedder
from engramdb.llms import ScriptedLLM
from engramdb.server import KeyStore, create_app
from engramdb.server.ui import build_filter, metadata_diff, word_diff
from engramdb_bench._serving import free_port

_GARBAGE = "this is not JSON at all"
_EXTRACTED = {
    "memory": [
        {
            "text": "Alice's bike is a green Brompton",
            "attributed_to": "user",
            "linked_memory_ids": [],
        }
    ]
}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF token in the page"
    return found.group(1)


def _plain(page: str) -> str:
    """A page's text without its tags (matched words are wrapped in <mark>)."""
    return re.sub(r"<[^>]+>", "", page)


def _seed(m: Memory) -> dict[str, str]:
    ids = {}
    for text, meta in (
        ("I drink black coffee every morning", {"category": "food"}),
        ("I am allergic to peanuts", {"category": "health"}),
        ("My sister lives in Lisbon", {"category": "family"}),
    ):
        ids[text] = m.add(text, user_id="alice", infer=False, metadata=meta)["results"][0]["id"]
    ids["bob"] = m.add(
        "Bob's secret: the vault code is 4711", user_id="bob", infer=False, metadata={"x": 1}
    )["results"][0]["id"]
    return ids


# -- helpers without a server -----------------------------------------------------------------


def test_word_diff_marks_what_changed() -> None:
    assert word_diff("I like tea", "I like green tea") == [
        ("same", "I like"),
        ("ins", "green"),
        ("same", "tea"),
    ]
    # Words never run together, and spacing alone is no change.
    assert word_diff("I drink three coffees", "I drink four  coffees") == [
        ("same", "I drink"),
        ("del", "three"),
        ("ins", "four"),
        ("same", "coffees"),
    ]
    assert word_diff("a  b", "a b") == [("same", "a b")]
    assert word_diff(None, "new") == [("ins", "new")]
    assert metadata_diff({"a": 1, "b": 2}, {"b": 3, "c": "x"}) == [
        ("removed", "a", "1", None),
        ("changed", "b", "2", "3"),
        ("added", "c", None, "x"),
    ]


def test_build_filter_simple_and_raw() -> None:
    assert build_filter("category", "eq", "food", "") == {"category": "food"}
    assert build_filter("rating", "gte", "4", None) == {"rating": {"gte": 4}}
    assert build_filter("tag", "in", "a, b", None) == {"tag": {"in": ["a", "b"]}}
    assert build_filter("a", "eq", "1", '{"b": 2}') == {"AND": [{"a": 1}, {"b": 2}]}
    assert build_filter("", "eq", "", "") is None
    with pytest.raises(ValueError, match="not valid JSON"):
        build_filter(None, None, None, "{nope")
    with pytest.raises(ValueError, match="operator"):
        build_filter("a", "xor", "1", None)


# -- the app in process -------------------------------------------------------------------------


@pytest.fixture
def open_app(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[tuple[TestClient, Memory]]:
    """A server without keys (loopback): the local user sees everything."""
    memory = Memory(tmp_path / "e.db", embedder=embedder, llm=None, actor="server")
    with TestClient(create_app(memory, close_memory=True)) as client:
        yield client, memory


def test_open_server_pages_and_corrections(open_app: tuple[TestClient, Memory]) -> None:
    client, memory = open_app
    ids = _seed(memory)
    coffee = ids["I drink black coffee every morning"]
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/overview"
    overview = client.get("/ui/overview")
    assert overview.status_code == 200
    assert "Content-Security-Policy" in overview.headers
    assert ">4<" in overview.text  # live memories, every scope
    cookie = overview.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    scopes = client.get("/ui/scopes").text
    assert "alice" in scopes and "bob" in scopes
    page = client.get("/ui/memories", params={"user_id": "alice"}).text
    assert page.index("Lisbon") < page.index("coffee")  # newest first
    assert "category: food" in page
    filtered = client.get(
        "/ui/memories", params={"user_id": "alice", "fk": "category", "fv": "health"}
    ).text
    assert "peanuts" in filtered and "coffee" not in filtered
    raw = client.get(
        "/ui/fragments/memories",
        params={"user_id": "alice", "filters": '{"NOT": {"category": "health"}}'},
    ).text
    assert "peanuts" not in raw and "coffee" in raw and "<html" not in raw
    bad = client.get("/ui/memories", params={"user_id": "alice", "filters": "{oops"})
    assert bad.status_code == 200 and "not valid JSON" in bad.text
    found = client.get("/ui/search", params={"q": "what do I drink?", "user_id": "alice"}).text
    assert "coffee" in found and 'class="fill semantic"' in found and "keyword" in found

    mem_page = client.get(f"/ui/memory/{coffee}")
    assert mem_page.status_code == 200 and "black coffee" in mem_page.text
    token = _csrf(mem_page.text)
    # No token, a wrong token: refused, nothing changed.
    assert client.post(f"/ui/memory/{coffee}/edit", data={"text": "x"}).status_code == 403
    assert (
        client.post(f"/ui/memory/{coffee}/edit", data={"text": "x", "csrf": "no"}).status_code
        == 403
    )
    assert memory.get(coffee)["memory"] == "I drink black coffee every morning"  # type: ignore[index]
    edited = client.post(
        f"/ui/memory/{coffee}/edit",
        data={
            "csrf": token,
            "text": "I drink oat milk coffee every morning",
            "metadata": '{"category": "food", "checked": true}',
            "reason": "typo",
        },
    )
    assert edited.status_code == 200 and "Saved" in edited.text
    assert "<del>black</del> <ins>oat milk</ins>" in edited.text
    history = memory.history(coffee)
    assert history[-1]["actor"] == "ui" and history[-1]["reason"] == "typo"
    assert history[-1]["new_metadata"] == {"category": "food", "checked": True}
    client.post(f"/ui/memory/{coffee}/restore", data={"csrf": token, "version": "1"})
    assert memory.get(coffee)["memory"] == "I drink black coffee every morning"  # type: ignore[index]
    client.post(f"/ui/memory/{coffee}/delete", data={"csrf": token})
    assert memory.get(coffee) is None
    deleted = client.get(f"/ui/memory/{coffee}").text
    assert "This memory is deleted" in deleted and "Restore it" in deleted
    client.post(f"/ui/memory/{coffee}/restore", data={"csrf": token})
    assert memory.get(coffee) is not None
    assert {e["actor"] for e in memory.history(coffee)[1:]} == {"ui"}
    not_confirmed = client.post(
        f"/ui/memory/{coffee}/purge", data={"csrf": token, "confirm": "yes"}
    )
    assert "Not purged" in not_confirmed.text and memory.get(coffee) is not None
    client.post(f"/ui/memory/{coffee}/purge", data={"csrf": token, "confirm": "purge"})
    assert memory.get(coffee) is None and memory.history(coffee) == []
    assert client.get(f"/ui/memory/{coffee}").status_code == 404
    assert client.get("/ui/static/ui.js").status_code == 200


@pytest.fixture
def keyed(
    tmp_path: Path, embedder: LocalEmbedder
) -> Iterator[tuple[TestClient, Memory, KeyStore, ScriptedLLM]]:
    llm = ScriptedLLM([_GARBAGE, _GARBAGE])
    memory = Memory(tmp_path / "e.db", embedder=embedder, llm=llm, actor="server")
    keys = KeyStore(tmp_path / "keys.db")
    with TestClient(create_app(memory, keys=keys, close_memory=True)) as client:
        yield client, memory, keys, llm
    keys.close()


def _sign_in(client: TestClient, key: str) -> None:
    form = client.get("/ui/signin").text
    signed = client.post("/ui/signin", data={"csrf": _csrf(form), "key": key})
    assert signed.status_code == 200, signed.text


def test_superseded_memories_in_the_ui(open_app: tuple[TestClient, Memory]) -> None:
    client, memory = open_app
    old = memory.add(
        "I drink green tea every morning", user_id="carol", infer=False, timestamp="2023-01-05"
    )["results"][0]["id"]
    new = memory.add(
        "I switched from tea to espresso",
        user_id="carol",
        infer=False,
        timestamp="2024-03-01",
        links={old: "updates"},
    )["results"][0]["id"]
    found = client.get("/ui/search", params={"q": "morning drink tea", "user_id": "carol"}).text
    assert _plain(found).index("espresso") < _plain(found).index("green tea")
    assert "superseded by" in found and f"/ui/memory/{new}" in found
    hidden = client.get(
        "/ui/fragments/search",
        params={"q": "morning drink tea", "user_id": "carol", "current": "1"},
    ).text
    hidden = _plain(hidden)
    assert "espresso" in hidden and "green tea" not in hidden
    then = client.get(
        "/ui/fragments/search",
        params={"q": "morning drink tea", "user_id": "carol", "as_of": "2023-06-01"},
    ).text
    then = _plain(then)
    assert "green tea" in then and "espresso" not in then
    page = client.get(f"/ui/memory/{old}").text
    assert "Superseded:" in page and "updated by" in page
    listing = client.get("/ui/memories", params={"user_id": "carol"}).text
    assert 'class="tag superseded"' in listing


def test_a_key_bound_to_one_user_never_sees_another(
    keyed: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, _ = keyed
    ids = _seed(memory)
    bob_id = ids["bob"]
    alice = keys.create(user_id="alice").key
    # Keys exist: nothing without signing in, a bad key is refused.
    first = client.get("/ui/overview", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"].startswith("/ui/signin")
    assert client.get("/ui/fragments/search?q=code", follow_redirects=False).status_code == 303
    form = client.get("/ui/signin").text
    wrong = client.post("/ui/signin", data={"csrf": _csrf(form), "key": "ek_00000000_" + "a" * 43})
    assert wrong.status_code == 401
    _sign_in(client, alice)
    pages = {
        "overview": client.get("/ui/overview"),
        "scopes": client.get("/ui/scopes"),
        "memories": client.get("/ui/memories"),
        "search": client.get("/ui/search", params={"q": "the secret code"}),
        "failures": client.get("/ui/failures"),
        "fragment memories": client.get("/ui/fragments/memories"),
        "fragment search": client.get("/ui/fragments/search", params={"q": "the secret code"}),
        "fragment timeline": client.get(
            f"/ui/fragments/timeline/{ids['My sister lives in Lisbon']}"
        ),
    }
    for name, response in pages.items():
        assert response.status_code == 200, name
        assert "vault" not in response.text and "bob" not in response.text.lower(), name
    assert "Lisbon" in pages["memories"].text and "Lisbon" in pages["fragment memories"].text
    assert "user alice" in pages["overview"].text
    # Naming bob: refused; bob's memory by id: exactly like a missing one.
    for path, params in (
        ("/ui/memories", {"user_id": "bob"}),
        ("/ui/search", {"q": "code", "user_id": "bob"}),
        ("/ui/fragments/memories", {"user_id": "bob"}),
        ("/ui/fragments/search", {"q": "code", "user_id": "bob"}),
        ("/ui/failures", {"user_id": "bob"}),
        ("/ui/memories", {"filters": '{"user_id": "bob"}'}),
    ):
        refused = client.get(path, params=params)
        assert refused.status_code == 403, (path, params)
        assert "vault" not in refused.text
    # The form sends the key's own user_id too: the clash is an error, and nothing shows.
    clash = client.get("/ui/memories", params={"filters": '{"user_id": "bob"}', "user_id": "alice"})
    assert 'class="error"' in clash.text and "vault" not in clash.text
    unknown = client.get("/ui/memory/00000000-0000-0000-0000-000000000000")
    for path in (f"/ui/memory/{bob_id}", f"/ui/fragments/timeline/{bob_id}"):
        hidden = client.get(path)
        assert hidden.status_code == 404 and "vault" not in hidden.text
        assert hidden.text.replace(bob_id, "ID") == unknown.text.replace(
            "00000000-0000-0000-0000-000000000000", "ID"
        )
    token = _csrf(client.get("/ui/overview").text)
    for action, data in (
        ("edit", {"text": "hacked"}),
        ("delete", {}),
        ("restore", {}),
        ("purge", {"confirm": "purge"}),
    ):
        answer = client.post(f"/ui/memory/{bob_id}/{action}", data={"csrf": token, **data})
        assert answer.status_code == 404, action
    assert memory.get(bob_id)["memory"] == "Bob's secret: the vault code is 4711"  # type: ignore[index]
    assert [e["event"] for e in memory.history(bob_id)] == ["ADD"]
    # Revoking the key signs the session out at once.
    keys.revoke(alice)
    assert client.get("/ui/overview", follow_redirects=False).status_code == 303


def test_admin_key_picks_any_scope_and_failures_retry(
    keyed: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, llm = keyed
    _seed(memory)
    with pytest.raises(Exception, match="extract"):
        memory.add("my bike is a green Brompton", user_id="alice")
    admin = keys.create(admin=True).key
    _sign_in(client, admin)
    scopes = client.get("/ui/scopes").text
    assert "alice" in scopes and "bob" in scopes
    assert "vault" in client.get("/ui/memories", params={"user_id": "bob"}).text
    picker = client.get("/ui/memories").text
    assert "Pick a scope" in picker
    failures = client.get("/ui/failures", params={"user_id": "alice"})
    assert "Retry extraction" in failures.text and "no JSON" in failures.text
    failure_id = memory.failures(user_id="alice")[0]["id"]
    llm.add(_EXTRACTED)
    retried = client.post(
        f"/ui/failures/{failure_id}/retry",
        data={"csrf": _csrf(failures.text), "back": "user_id=alice"},
    )
    assert retried.status_code == 200 and "1 new memory" in retried.text
    assert memory.failures(user_id="alice") == []
    added = memory.search("bike", user_id="alice", top_k=1)["results"][0]
    assert "Brompton" in added["memory"]


def test_rest_gains_timeline_failures_and_retry(
    keyed: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, llm = keyed
    ids = _seed(memory)
    alice = {"Authorization": f"Bearer {keys.create(user_id='alice').key}"}
    bob = {"Authorization": f"Bearer {keys.create(user_id='bob').key}"}
    lisbon = ids["My sister lives in Lisbon"]
    timeline = client.get(f"/memories/{lisbon}/timeline", headers=alice)
    assert timeline.status_code == 200
    assert [m["id"] for m in timeline.json()["results"]] == [lisbon]
    assert client.get(f"/memories/{lisbon}/timeline", headers=bob).status_code == 404
    failed = client.post(
        "/memories", json={"messages": "my bike is a green Brompton"}, headers=alice
    )
    assert failed.status_code == 502
    failure_id = failed.json()["error"]["failure_id"]
    listed = client.get("/failures", headers=alice).json()["results"]
    assert [f["id"] for f in listed] == [failure_id] and listed[0]["messages"] == 1
    assert client.get("/failures", headers=bob).json()["results"] == []
    assert client.get("/failures", params={"user_id": "alice"}, headers=bob).status_code == 403
    # Bob cannot retry alice's failure: like an unknown one.
    assert client.post(f"/failures/{failure_id}/retry", headers=bob).status_code == 422
    llm.add(_EXTRACTED)
    retried = client.post(f"/failures/{failure_id}/retry", headers=alice)
    assert retried.status_code == 200, retried.text
    assert retried.json()["results"][0]["event"] == "ADD"
    assert client.get("/failures", headers=alice).json()["results"] == []


def test_source_messages_and_raw_replies_within_the_scope(
    keyed: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, llm = keyed
    said = [{"role": "user", "content": "I <b>love</b> tea"}]
    mid = memory.add(said, user_id="alice", agent_id="coach", infer=False)["results"][0]["id"]
    # alice's own session (no agent) says it again: a repeat, its message a source too
    again = memory.add(said, user_id="alice", run_id="r2", infer=False)["results"][0]
    assert (again["event"], again["id"]) == ("NONE", mid)
    assert [m["content"] for m in memory.source_messages(mid)] == [said[0]["content"]] * 2
    coach = keys.create(user_id="alice", agent_id="coach").key
    bob = {"Authorization": f"Bearer {keys.create(user_id='bob').key}"}
    as_coach = {"Authorization": f"Bearer {coach}"}
    rest = client.get(f"/memories/{mid}/messages", headers=as_coach)
    assert rest.status_code == 200
    [only] = rest.json()["results"]
    assert only["role"] == "user" and only["content"] == "I <b>love</b> tea"
    assert client.get(f"/memories/{mid}/messages", headers=bob).status_code == 404
    _sign_in(client, coach)
    page = client.get(f"/ui/memory/{mid}").text
    assert "Source messages" in page and "<b>love" not in page
    assert page.count('<pre class="raw">I &lt;b&gt;love&lt;/b&gt; tea</pre>') == 1

    # A failed extraction shows its raw reply, escaped and cut to a few KB.
    with pytest.raises(Exception, match="extract"):
        memory.add("my bike is a green Brompton", user_id="alice")
    huge = "<i>" + "x" * 10_000
    llm.add(huge)
    llm.add(huge)
    with pytest.raises(Exception, match="extract"):
        memory.add("my car is blue", user_id="alice")
    replies = [f["reply"] for f in memory.failures(user_id="alice")]
    assert replies == [huge, _GARBAGE]
    _sign_in(client, keys.create(user_id="alice").key)
    failures = client.get("/ui/failures").text
    assert "raw reply" in failures and _GARBAGE in failures
    assert "<i>x" not in failures and "&lt;i&gt;" + "x" * 4093 + "</pre>" in failures
    assert "5907 more characters not shown" in failures


# -- a real browser against a real `engram serve` -------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture
def chromium() -> str:
    path = _chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no chromium is installed (.ci/run installs it)")
        pytest.skip("no chromium installed here (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    return path


def _start_serve(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "llm": {
                    "provider": "scripted",
                    "config": {"responses": [_GARBAGE, _GARBAGE, _EXTRACTED]},
                }
            }
        )
    )
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engramdb.cli",
            "--db",
            str(tmp_path / "e.db"),
            "--config",
            str(config),
            "serve",
            "--port",
            str(port),
            "--keys-db",
            str(tmp_path / "keys.db"),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ENGRAM_LLM": ""},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return process, url
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise
            time.sleep(0.2)


def _rest_seed(url: str, admin: str) -> dict[str, str]:
    h = {"Authorization": f"Bearer {admin}"}
    ids = {}
    with httpx.Client(base_url=url, headers=h, timeout=60) as c:
        for text, meta in (
            ("I drink black coffee every morning", {"category": "food"}),
            ("I am allergic to peanuts", {"category": "health", "severity": "high"}),
            ("My sister Ana lives in Lisbon", {"category": "family"}),
            ("I prefer green tea in the evening", {"category": "food"}),
            ("I run 5 km on Saturdays", {"category": "sport"}),
        ):
            body = {"messages": text, "user_id": "alice", "infer": False, "metadata": meta}
            ids[text] = c.post("/memories", json=body).json()["results"][0]["id"]
        body = {"messages": "Bob's vault code is 4711", "user_id": "bob", "infer": False}
        ids["bob"] = c.post("/memories", json=body).json()["results"][0]["id"]
        failed = c.post(
            "/memories", json={"messages": "my bike is a green Brompton", "user_id": "alice"}
        )
        assert failed.status_code == 502, failed.text
    return ids


def test_browser_end_to_end(tmp_path: Path, chromium: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    keys = KeyStore(tmp_path / "keys.db")
    admin = keys.create(admin=True, name="seed").key
    alice = keys.create(user_id="alice", name="alice").key
    keys.close()
    process, url = _start_serve(tmp_path)
    img = tmp_path / "img"
    img.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    seen_text: list[str] = []
    try:
        ids = _rest_seed(url, admin)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.on(
                "console",
                lambda msg: (
                    problems.append(f"console {msg.type}: {msg.text}")
                    if msg.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))

            def visit(path: str) -> None:
                page.goto(url + path)
                seen_text.append(page.content())

            # Sign in.
            visit("/ui")
            expect(page).to_have_url(re.compile(r"/ui/signin"))
            page.fill("#key", alice)
            page.keyboard.press("Enter")
            expect(page).to_have_url(re.compile(r"/ui/overview"))
            expect(page.locator(".card .big").first).to_have_text("5")
            seen_text.append(page.content())
            page.screenshot(path=str(img / "ui-overview.png"))

            # Browse: scopes, a page of memories, the simple filter and the JSON box.
            visit("/ui/scopes")
            expect(page.locator("table.counts").first).to_contain_text("alice")
            visit("/ui/memories")
            rows = page.locator("li.memory")
            expect(rows).to_have_count(5)
            expect(rows.first).to_contain_text("Saturdays")  # newest first
            page.screenshot(path=str(img / "ui-memories.png"))
            page.click("details.filters summary")
            page.fill("input[name=fk]", "category")
            page.fill("input[name=fv]", "food")
            page.click("form[data-fragment] button[type=submit]")
            expect(rows).to_have_count(2)
            expect(page).to_have_url(re.compile(r"fk=category"))
            seen_text.append(page.content())
            page.fill("input[name=fk]", "")
            page.fill("textarea[name=filters]", '{"severity": "high"}')
            page.click("form[data-fragment] button[type=submit]")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text("peanuts")

            # Search with explain, from the keyboard.
            visit("/ui/search")
            page.keyboard.press("/")
            assert page.evaluate("document.activeElement.id") == "q"
            page.keyboard.type("what do I drink in the morning?")
            page.keyboard.press("Enter")
            results = page.locator("li.result")
            expect(results.first).to_contain_text("coffee")
            expect(results.first.locator(".part")).to_have_count(3)
            expect(results.first.locator(".part .label")).to_have_text(
                ["semantic", "keyword", "entity"]
            )
            seen_text.append(page.content())
            page.screenshot(path=str(img / "ui-search.png"))

            # Open a memory, edit it, see the diff, restore, delete, restore.
            results.first.locator("a.text").click()
            expect(page.locator("blockquote.text")).to_contain_text("black coffee")
            expect(page.locator("li.source pre.raw")).to_have_text(
                ["I drink black coffee every morning"]
            )
            expect(page.locator("#text")).to_be_hidden()  # the edit form starts collapsed
            page.click("details.edit summary")
            page.fill("#text", "I drink oat milk coffee every morning")
            page.fill("#reason", "corrected by hand")
            page.click("#edit-form button[type=submit]")
            expect(page.locator(".flash")).to_contain_text("Saved")
            first = page.locator("li.version").first
            expect(first.locator("del")).to_have_text("black")
            expect(first.locator("ins")).to_have_text("oat milk")
            expect(first.locator(".actor")).to_have_text("ui")
            seen_text.append(page.content())
            page.screenshot(path=str(img / "ui-memory.png"), full_page=True)
            page.click("button:has-text('Restore v1')")
            expect(page.locator("blockquote.text")).to_contain_text("black coffee")
            page.click("details.edit summary")
            page.click("button:has-text('Delete (restorable)')")
            expect(page.locator("section.deleted")).to_contain_text("deleted")
            page.click("button:has-text('Restore it')")
            expect(page.locator("blockquote.text")).to_contain_text("black coffee")

            # Purge: disabled until the word is typed; then it is gone.
            purge = page.locator("section.danger button[type=submit]")
            expect(purge).to_be_disabled()
            page.fill("#confirm", "purge")
            expect(purge).to_be_enabled()
            coffee_url = page.url
            purge.click()
            expect(page.locator(".flash")).to_contain_text("gone for good")
            response = page.goto(coffee_url)
            assert response is not None and response.status == 404
            problems[:] = [p for p in problems if "404" not in p]  # that 404 was asked for

            # Extraction failures: the error, and a retry that extracts.
            visit("/ui/failures")
            expect(page.locator("li.failure")).to_have_count(1)
            expect(page.locator("li.failure pre.why")).to_contain_text("JSON")
            page.click("li.failure details.said summary")
            expect(page.locator("li.failure details.said pre.raw")).to_have_text(
                "my bike is a green Brompton"
            )
            reply = page.locator("li.failure details.reply")
            reply.locator("summary").click()
            expect(reply.locator("pre.raw")).to_have_text(_GARBAGE)
            page.screenshot(path=str(img / "ui-failures.png"))
            page.click("button:has-text('Retry extraction')")
            expect(page.locator(".flash")).to_contain_text("1 new memory")
            visit("/ui/memories")
            expect(page.locator("li.memory").first).to_contain_text("Brompton")

            # Bob's memory through every door: like a missing one.
            for path in (
                f"/ui/memory/{ids['bob']}",
                f"/ui/fragments/timeline/{ids['bob']}",
                "/ui/memories?user_id=bob",
                "/ui/fragments/search?q=secret+code&user_id=bob",
                "/ui/search?q=secret+code",
            ):
                page.goto(url + path)
                seen_text.append(page.content())
            problems[:] = [p for p in problems if "403" not in p and "404" not in p]

            # Phone width: nothing wider than the screen.
            page.set_viewport_size({"width": 390, "height": 800})
            for path in ("/ui/overview", "/ui/memories", "/ui/search?q=coffee"):
                visit(path)
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= 391, (path, width)
            browser.close()
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert not problems, problems
    for text in seen_text:
        assert "vault" not in text and "4711" not in text
    assert "Traceback" not in err, err
    for name in ("overview", "memories", "search", "memory", "failures"):
        assert (img / f"ui-{name}.png").stat().st_size > 5_000
