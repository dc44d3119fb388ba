"""The web UI as a self-hoster's dashboard (issue 30): each fixed item and each new page.

The first part drives the app in process (Starlette's TestClient), as an
admin key and as a key bound to one user; the second drives Chromium with
Playwright over a real ``engram serve``, as both, with dark mode, the
keyboard and, when axe-core is installed (``ENGRAM_AXE_JS``, or
``node_modules/axe-core/axe.min.js`` here or in /tmp/axe), an accessibility
check of every page.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from engramdb import Memory
from engramdb.embedders import LocalEmbedder
from engramdb.errors import MemoryNotFoundError
from engramdb.llms import ScriptedLLM
from engramdb.server import KeyStore, create_app
from engramdb.server.ui import history_rows, matched_words, page_numbers, plain_message
from engramdb_bench._serving import free_port

ROOT = Path(__file__).resolve().parents[1]
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
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page))


def _sign_in(client: TestClient, key: str) -> None:
    form = client.get("/ui/signin").text
    signed = client.post("/ui/signin", data={"csrf": _csrf(form), "key": key})
    assert signed.status_code == 200, signed.text


# -- helpers ----------------------------------------------------------------------------------


def test_helpers() -> None:
    assert page_numbers(1, 1) == [1]
    assert page_numbers(5, 100) == [1, None, 3, 4, 5, 6, 7, None, 100]
    assert page_numbers(2, 3) == [1, 2, 3]
    marked = matched_words("what coffee do I drink?", "I drink black coffee, drinks")
    assert [p for p, hit in marked if hit] == ["drink", "coffee", "drinks"]
    assert "".join(p for p, _ in marked) == "I drink black coffee, drinks"
    wording = plain_message(
        MemoryNotFoundError("x"), "memory 'x' not found; check the id (get_all() lists the ids)"
    )
    assert "get_all" not in wording and "no memory" in wording.lower()


def test_history_rows_one_restore_per_version_and_distinct_labels() -> None:
    def ev(event: str, version: int, old: str | None, new: str | None) -> dict[str, Any]:
        return {"event": event, "version": version, "old_memory": old, "new_memory": new}

    rows = history_rows(
        [
            ev("ADD", 1, None, "I have three cats"),
            ev("ATTACH", 1, "I have three cats", "I have three cats"),
            ev("UPDATE", 2, "I have three cats", "I have four cats"),
            ev("DELETE", 2, "I have four cats", None),
            ev("RESTORE", 2, None, "I have four cats"),
        ]
    )
    labels = [r["label"] for r in rows]
    assert len(set(labels)) == len(labels), labels
    assert [r["version"] for r in rows if r["restorable"]] == [1]  # v2 is current
    assert [r["event"] for r in rows if r["makes_version"]] == ["ADD", "UPDATE"]


# -- in process -------------------------------------------------------------------------------


@pytest.fixture
def dash(
    tmp_path: Path, embedder: LocalEmbedder
) -> Iterator[tuple[TestClient, Memory, KeyStore, ScriptedLLM]]:
    llm = ScriptedLLM([])
    memory = Memory(tmp_path / "e.db", embedder=embedder, llm=llm, actor="server")
    keys = KeyStore(tmp_path / "keys.db")
    with TestClient(create_app(memory, keys=keys, close_memory=True)) as client:
        yield client, memory, keys, llm
    keys.close()


def _seed(memory: Memory) -> dict[str, str]:
    ids = {}
    for text, meta, agent in (
        ("I drink black coffee every morning", {"category": "food"}, "coach"),
        ("I am allergic to peanuts", {"category": "health"}, None),
        ("My sister Ana lives in Lisbon", {"category": "family"}, None),
    ):
        added = memory.add(text, user_id="alice", agent_id=agent, infer=False, metadata=meta)
        ids[text] = added["results"][0]["id"]
    bob = memory.add("Bob's vault code is 4711", user_id="bob", infer=False)
    ids["bob"] = bob["results"][0]["id"]
    return ids


def test_search_explains_itself(dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM]) -> None:
    client, memory, keys, _ = dash
    _seed(memory)
    _sign_in(client, keys.create(user_id="alice").key)
    page = client.get("/ui/search", params={"q": "what coffee do I drink", "k": "5"}).text
    assert "How the score is made" in page and "<mark>coffee</mark>" in page
    assert "matched words: coffee, drink" in page
    assert "agent coach" in page and "category: food" in page and "added" in page
    assert 'option value="5" selected' in page
    one = client.get("/ui/fragments/search", params={"q": "what coffee do I drink", "k": "5"})
    assert one.text.count('class="result"') <= 3
    few = client.get(
        "/ui/fragments/search", params={"q": "what coffee do I drink", "threshold": "0.99"}
    ).text
    assert few.count('class="result"') < one.text.count('class="result"')
    bad = client.get("/ui/fragments/search", params={"q": "coffee", "threshold": "7"}).text
    assert "minimum score must be from 0 to 1" in bad
    # The label wraps its checkbox.
    assert re.search(r'<label class="check" for="current"><input id="current"', page)


def test_admin_sees_every_scope_and_failures_agree(
    dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, llm = dash
    _seed(memory)
    for _ in range(6):
        llm.add(_GARBAGE)
    for user in ("alice", "bob", "carol"):
        with pytest.raises(Exception, match="extract"):
            memory.add(f"{user} rides a red bike", user_id=user)
    _sign_in(client, keys.create(admin=True).key)
    listing = client.get("/ui/memories").text
    assert "vault" in listing and "Lisbon" in listing and "every scope" in listing
    assert "4 memories" in _plain(listing)
    found = client.get("/ui/search", params={"q": "the vault code"}).text
    assert "vault" in found and "across every scope" in found
    failures = client.get("/ui/failures").text
    # carol has no memory at all: only bob and alice are scopes the counts know.
    shown = failures.count('class="failure"')
    assert shown == 2
    overview = _plain(client.get("/ui/overview").text)
    assert f"{shown} extraction failures" in overview
    assert "failed calls" in overview  # the LLM's own error count is named apart


def test_retry_posts_then_redirects_to_the_failure(
    dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, llm = dash
    llm.add(_GARBAGE)
    llm.add(_GARBAGE)
    with pytest.raises(Exception, match="extract"):
        memory.add("my bike is a green Brompton", user_id="alice")
    failure_id = memory.failures(user_id="alice")[0]["id"]
    alice = keys.create(user_id="alice").key
    bob = keys.create(user_id="bob").key
    _sign_in(client, alice)
    page = client.get(f"/ui/failures/{failure_id}").text
    assert "my bike is a green Brompton" in page and "What was said (1 message)" in page
    token = _csrf(page)
    # A retry the LLM fails again: plain words, on the failure's page.
    llm.add(_GARBAGE)
    llm.add(_GARBAGE)
    again = client.post(
        f"/ui/failures/{failure_id}/retry", data={"csrf": token}, follow_redirects=False
    )
    assert again.status_code == 303 and again.headers["location"] == f"/ui/failures/{failure_id}"
    shown = client.get(again.headers["location"]).text
    assert "Retry failed" in shown and "retry_extraction(" not in shown, _plain(shown)[-1500:]
    llm.add(_EXTRACTED)
    done = client.post(f"/ui/failures/{failure_id}/retry", data={"csrf": token})
    assert done.url.path == f"/ui/failures/{failure_id}"
    assert "1 new memory" in done.text and "What the retry remembered" in done.text
    assert "Brompton" in done.text and "retried successfully" in done.text
    # A reload is a GET: nothing runs twice, the outcome was shown once.
    reload = client.get(f"/ui/failures/{failure_id}").text
    assert "What the retry remembered" not in reload and "Retry extraction" not in reload
    # Bob's key: like a failure that does not exist.
    _sign_in(client, bob)
    hidden = client.get(f"/ui/failures/{failure_id}")
    assert hidden.status_code == 404 and "Brompton" not in hidden.text
    assert client.get("/ui/failures/999").status_code == 404


def test_long_lists_count_page_and_find_text(
    dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, _ = dash
    for i in range(120):
        memory.add(
            f"note number {i} about {'tea' if i % 3 else 'coffee'}", user_id="alice", infer=False
        )
    memory.add("this one expired", user_id="alice", infer=False, expiration_date="2020-01-01")
    _sign_in(client, keys.create(user_id="alice").key)
    first = _plain(client.get("/ui/memories").text)
    assert "120 memories" in first and "page 1 of 3" in first
    third = client.get("/ui/memories", params={"page": "3"}).text
    assert 'aria-current="page" data-page>3<' in third and "Older" not in third
    coffee = _plain(client.get("/ui/memories", params={"text": "COFFEE"}).text)
    assert "40 memories containing “COFFEE”" in coffee and "about tea" not in coffee
    filtered = _plain(client.get("/ui/memories", params={"text": "number 11"}).text)
    assert "11 memories" in filtered  # 11, 110..119
    expired = _plain(client.get("/ui/memories", params={"state": "expired"}).text)
    assert "this one expired" in expired and "note number" not in expired
    assert "this one expired" not in first
    nobody = client.get("/ui/fragments/memories", params={"fk": "category", "fv": "x"}).text
    assert "No memories match this filter" in nobody


def test_list_text_search_is_the_stores_and_matches_literally(
    dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, _ = dash
    texts = [f"note {i}: {'Rice' if i % 4 == 0 else 'beans'} at 100% and a_b" for i in range(130)]
    texts += ["plain 100 percent", "aXb here", "back\\slash", 'it\'s "quoted"']
    for text in texts:
        memory.add(text, user_id="alice", infer=False)
    _sign_in(client, keys.create(user_id="alice").key)

    def shown(params: dict[str, str]) -> tuple[list[str], str]:
        page = client.get("/ui/memories", params=params)
        assert page.status_code == 200
        plain = _plain(page.text)
        return [t for t in texts if t in html.unescape(plain)], html.unescape(plain)

    # Ordinary text: what the Python scan found (casefold, newest first), page by page.
    for needle in ("rice", "RICE", "note 1", "beans at"):
        wanted = [t for t in reversed(texts) if needle.casefold() in t.casefold()]
        seen: list[str] = []
        for number in range(1, 4):
            found, plain = shown({"text": needle, "page": str(number)})
            seen += sorted(found, key=lambda t: -texts.index(t))
            if number == 1:
                assert f"{len(wanted)} memories containing" in plain, needle
        assert seen == wanted, needle
    # LIKE wildcards, backslashes and quotes are literal; nothing matches everything.
    for needle, count in (("%", 130), ("_", 130), ("a_b", 130), ("\\", 1), ("'", 1), ('"', 1)):
        found, _ = shown({"text": needle})
        wanted = [t for t in texts if needle in t]
        assert len(wanted) == count and set(found) <= set(wanted), needle
    assert shown({"text": "%%"})[0] == [] and shown({"text": "x_y%"})[0] == []
    # Too long a search, or a NUL: a message in the page, not a 500.
    for needle in ("x" * 5000, "a\x00b"):
        page = client.get("/ui/memories", params={"text": needle})
        assert page.status_code == 200 and "note 1" not in page.text


def test_history_navigation_and_wording(
    dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, _ = dash
    mid = memory.add("I have three cats", user_id="alice", infer=False)["results"][0]["id"]
    memory.add("I have three cats", user_id="alice", run_id="r2", infer=False)  # ATTACH v1
    memory.update(mid, "I have four cats")
    memory.delete(mid)
    memory.restore(mid)
    _sign_in(client, keys.create(user_id="alice").key)
    page = client.get(f"/ui/memory/{mid}").text
    assert page.count("Restore v1") == 1 and "Restore v2" not in page
    labels = re.findall(r'<span class="vlabel">([^<]+)</span>', page)
    assert len(labels) == 5 and len(set(labels)) == 5, labels
    assert "<del>three</del> <ins>four</ins>" in page
    assert re.search(r"<h1>Memory of user alice</h1>", page)
    assert 'href="/ui/memories?user_id=alice"' in page
    assert re.search(r'<details class="edit" id="edit">', page)  # collapsed
    assert "What holds now" in page and "holds now" in page
    token = _csrf(page)
    purged = client.post(
        f"/ui/memory/{mid}/purge", data={"csrf": token, "confirm": "purge"}, follow_redirects=False
    )
    assert purged.headers["location"] == "/ui/memories?user_id=alice"
    gone = client.get(f"/ui/memory/{mid}")
    assert gone.status_code == 404 and "get_all" not in gone.text and "()" not in gone.text
    unknown = _plain(client.get("/ui/memories", params={"agent_id": "nobody"}).text)
    assert "There are no memories for" in unknown and "No memories." not in unknown


def test_sign_out_and_failed_sign_in(
    dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, _memory, keys, _ = dash
    key = keys.create(user_id="alice").key
    first = client.get("/ui/search?q=tea", follow_redirects=False)
    target = first.headers["location"]
    form = client.get(target).text
    assert "next=%2Fui%2Fsearch%3Fq%3Dtea" in form
    wrong = client.post(
        "/ui/signin?next=%2Fui%2Fsearch%3Fq%3Dtea", data={"csrf": _csrf(form), "key": "ek_nope"}
    )
    assert wrong.status_code == 401 and "next=%2Fui%2Fsearch%3Fq%3Dtea" in wrong.text
    ok = client.post(
        "/ui/signin?next=%2Fui%2Fsearch%3Fq%3Dtea",
        data={"csrf": _csrf(wrong.text), "key": key},
    )
    assert ok.url.path == "/ui/search" and ok.url.query == b"q=tea"
    out = client.post("/ui/signout", data={"csrf": _csrf(ok.text)})
    assert out.url.path == "/ui/signin" and "You are signed out." in out.text


def test_keys_page_admin_only_secret_once(
    dash: tuple[TestClient, Memory, KeyStore, ScriptedLLM],
) -> None:
    client, memory, keys, _ = dash
    _seed(memory)
    alice = keys.create(user_id="alice").key
    admin = keys.create(admin=True, name="root").key
    # A bound key: no Keys link, no page, no form.
    _sign_in(client, alice)
    assert "/ui/keys" not in client.get("/ui/overview").text
    token = _csrf(client.get("/ui/overview").text)
    assert client.get("/ui/keys").status_code == 404
    refused = client.post("/ui/keys", data={"csrf": token, "kind": "admin"})
    assert refused.status_code == 404
    assert len(keys.list_keys()) == 2
    # The admin: list, make, see the secret once, revoke.
    _sign_in(client, admin)
    page = client.get("/ui/keys").text
    assert "root" in page and "every scope (admin)" in page and "user alice" in page
    made = client.post(
        "/ui/keys",
        data={
            "csrf": _csrf(page),
            "kind": "scoped",
            "name": "bob's reader",
            "user_id": "bob",
            "can_read": "1",
        },
    )
    secret = re.search(r'class="secret-value" value="(ek_[^"]+)"', made.text)
    assert secret, made.text
    assert "shown this once" in made.text and "bob&#39;s reader" in made.text
    assert "secret-value" not in client.get("/ui/keys").text  # once
    info = keys.verify(secret.group(1))
    assert info is not None and info.user_id == "bob" and info.capabilities == ["read"]
    bad = client.post("/ui/keys", data={"csrf": _csrf(page), "kind": "scoped"})
    assert "Not created" in bad.text
    revoked = client.post(f"/ui/keys/{info.id}/revoke", data={"csrf": _csrf(page)})
    assert f"Revoked key {info.id}" in revoked.text and keys.verify(secret.group(1)) is None
    assert "secret" not in json.dumps([k.as_dict() for k in keys.list_keys()])


# -- a real browser ---------------------------------------------------------------------------


def _axe_js() -> Path | None:
    named = os.environ.get("ENGRAM_AXE_JS")
    if named:  # CI names it (.ci/run installs axe-core): then it must be there
        assert Path(named).is_file(), f"ENGRAM_AXE_JS={named} is not a file"
        return Path(named)
    for candidate in (
        ROOT / "node_modules" / "axe-core" / "axe.min.js",
        Path("/tmp/axe/node_modules/axe-core/axe.min.js"),
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def _axe_run(page: Any, axe: Path) -> tuple[int, list[str]]:
    """axe-core on the page: how many checks passed, and each serious or critical violation."""
    page.add_script_tag(path=str(axe))
    found = page.evaluate(
        "async () => { const r = await axe.run(document);"
        " return [r.passes.length, r.violations"
        ".filter(v => ['serious', 'critical'].includes(v.impact))"
        ".map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))]; }"
    )
    return int(found[0]), list(found[1])


@pytest.fixture
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no chromium is installed")
        pytest.skip("no chromium installed here")
    pytest.importorskip("playwright.sync_api")
    return path


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"llm": {"provider": "scripted", "config": {"responses": [_GARBAGE] * 4}}})
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


def test_browser_dashboard_admin_and_bound_key(tmp_path: Path, chromium: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    keys = KeyStore(tmp_path / "keys.db")
    admin = keys.create(admin=True, name="root").key
    alice = keys.create(user_id="alice", name="alice").key
    keys.close()
    process, url = _serve(tmp_path)
    axe = _axe_js()
    problems: list[str] = []
    violations: list[str] = []
    checked: list[int] = []
    try:
        h = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=url, headers=h, timeout=60) as c:
            ids = {}
            for text, user in (
                ("I drink black coffee every morning", "alice"),
                ("My sister Ana lives in Lisbon", "alice"),
                ("Bob's vault code is 4711", "bob"),
            ):
                body = {"messages": text, "user_id": user, "infer": False}
                ids[text] = c.post("/memories", json=body).json()["results"][0]["id"]
            coffee = ids["I drink black coffee every morning"]
            c.put(f"/memories/{coffee}", json={"text": "I drink three coffees every morning"})
            failed = c.post("/memories", json={"messages": "my bike is red", "user_id": "alice"})
            failure_id = failed.json()["error"]["failure_id"]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])

            def check(page: Any, name: str) -> None:
                if axe is None:
                    return
                passes, serious = _axe_run(page, axe)
                checked.append(passes)
                violations.extend(f"{name}: {v}" for v in serious)

            for scheme in ("light", "dark"):
                context = browser.new_context(
                    color_scheme=scheme, viewport={"width": 1100, "height": 800}, bypass_csp=True
                )
                page = context.new_page()
                page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
                page.goto(url + "/ui/signin")
                page.fill("#key", admin)
                page.keyboard.press("Enter")
                expect(page).to_have_url(re.compile(r"/ui/overview"))
                background = page.evaluate("getComputedStyle(document.body).backgroundColor")
                dark = background not in ("rgb(251, 251, 250)",)
                assert dark == (scheme == "dark"), (scheme, background)
                for path in (
                    "/ui/overview",
                    "/ui/scopes",
                    "/ui/memories",
                    "/ui/memories?user_id=alice&text=coffee",
                    "/ui/search?q=what+do+I+drink",
                    f"/ui/memory/{coffee}",
                    "/ui/failures",
                    f"/ui/failures/{failure_id}",
                    "/ui/keys",
                ):
                    page.goto(url + path)
                    check(page, f"{scheme} admin {path}")
                # The admin's view of every scope.
                page.goto(url + "/ui/memories")
                expect(page.locator("li.memory")).to_have_count(3)
                # The search controls.
                page.goto(url + "/ui/search")
                page.fill("#q", "what do I drink")
                page.select_option("#k", "5")
                page.click("form[role=search] button[type=submit]")
                expect(page.locator("li.result mark").first).to_have_text("drink")
                expect(page).to_have_url(re.compile(r"k=5"))
                # History: the diff keeps its space; the edit form opens from the keyboard.
                page.goto(url + f"/ui/memory/{coffee}")
                expect(page.locator("li.version p.diff").first).to_have_text(
                    "I drink black coffee three coffees every morning"
                )
                expect(page.locator("#text")).to_be_hidden()
                page.focus("details.edit summary")
                outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
                assert outline == "solid"
                page.keyboard.press("Enter")
                expect(page.locator("#text")).to_be_visible()
                # Keys: make one, see it once.
                page.goto(url + "/ui/keys")
                page.fill("#key-name", f"reader {scheme}")
                page.fill("#key-user", "alice")
                page.check("#can-read")
                page.click("form.keyform button[type=submit]")
                expect(page.locator("section.secret")).to_contain_text("shown this once")
                check(page, f"{scheme} admin keys with a secret")
                page.reload()
                expect(page.locator("section.secret")).to_have_count(0)
                context.close()

            # The bound key: its own scope, and never the keys page.
            context = browser.new_context(color_scheme="dark", bypass_csp=True)
            page = context.new_page()
            page.goto(url + "/ui/signin?next=%2Fui%2Fmemories")
            page.fill("#key", "ek_wrong")
            page.keyboard.press("Enter")
            expect(page.locator("p.error")).to_contain_text("unknown or revoked")
            page.fill("#key", alice)
            page.keyboard.press("Enter")
            expect(page).to_have_url(re.compile(r"/ui/memories$"))
            expect(page.locator("li.memory")).to_have_count(2)
            seen = [page.content()]
            for path in (
                "/ui/overview",
                "/ui/search?q=the+secret+code",
                "/ui/failures",
                f"/ui/failures/{failure_id}",
                f"/ui/memory/{coffee}",
            ):
                page.goto(url + path)
                seen.append(page.content())
                check(page, f"bound {path}")
            assert page.locator("a[href='/ui/keys']").count() == 0
            response = page.goto(url + "/ui/keys")
            assert response is not None and response.status == 404
            bob_id = ids["Bob's vault code is 4711"]
            response = page.goto(url + f"/ui/memory/{bob_id}")
            assert response is not None and response.status == 404
            seen.append(page.content())
            page.goto(url + "/ui/overview")
            page.click("button:has-text('Sign out')")
            expect(page.locator(".flash")).to_have_text("You are signed out.")
            for text in seen:
                assert "vault" not in text and "4711" not in text
            context.close()
            browser.close()
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert not problems, problems
    assert "Traceback" not in err, err
    assert not violations, violations
    if axe is not None:
        assert len(checked) >= 20 and min(checked) > 10, checked  # axe ran on every page
