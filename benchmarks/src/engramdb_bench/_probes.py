"""Purge probes: plant secrets everywhere a purged text can reach, purge, look for them.

A secret is a distinctive word planted in one place a purge must clean: a
verbatim memory and the context terms of the memory after it, an
LLM-extracted memory and its entities, the old text in an update's history,
a memory deleted before it is purged, a failed extraction's kept messages
and reply, raw messages that became no memory, and a memory another one
links to. After the purges each secret is looked for through the library
(search, listings, linked ids) and in raw storage, in every case variant,
token and lemma: the SQLite file and its WAL (free pages included), or on
PostgreSQL every live row and every dead row version of the store's tables
(``pageinspect``, when the server lets us load it).

:func:`run_purge_probes` is what ``engram bench torture`` reports; the test
suite runs it too (tests/test_erasure.py).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engramdb.embedders.base import Embedder
from engramdb.errors import ExtractionError
from engramdb.llms.scripted import ScriptedLLM
from engramdb.memory import Memory
from engramdb.nlp import index_terms
from engramdb.stores.sqlite import SQLiteStore

__all__ = ["raw_pages_hits", "run_purge_probes", "storage_hits", "variants"]


def variants(secret: str) -> list[str]:
    """Every form of ``secret`` a store may hold: case variants, tokens, lemmas.

    Pass a distinctive word or phrase: the tokens of a sentence include
    common words that are everywhere.
    """
    forms = {secret, secret.lower(), secret.upper(), secret.casefold(), secret.title()}
    # Tokens shorter than five characters ("42" of "ZEBRA-42") match random
    # bytes of any file; the whole secret, in every case, still covers them.
    tokens = [t for t in re.findall(r"\w+", secret) + index_terms(secret).split() if len(t) >= 5]
    for token in tokens:
        forms.update({token, token.lower(), token.upper(), token.casefold(), token.title()})
    return sorted(f for f in forms if f)


def storage_hits(store: Any, needles: list[str]) -> list[str]:
    """Where raw storage still holds any of ``needles`` (``"needle in place"``).

    SQLite: the bytes of the file and its WAL, free pages included.
    PostgreSQL: every live row of every table of the store's schema (each
    row as text), and every tuple, live or dead, on every page of its tables
    and their TOAST tables (``pageinspect``; skipped, with a note, when it
    cannot be loaded).
    """
    if isinstance(store, SQLiteStore):
        data = store.path.read_bytes()
        wal = store.path.with_name(store.path.name + "-wal")
        if wal.exists():
            data += wal.read_bytes()
        return [f"{n!r} in {store.path.name}" for n in needles if n.encode() in data]
    from engramdb.stores.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        raise TypeError(f"cannot look under {type(store).__name__}")
    return _pg_hits(store.settings.url, store.schema, needles)


def _pg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _pg_relations(con: Any, schema: str, kinds: str) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT c.oid::regclass::text, c.relkind FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = ANY(%s) "
        "UNION ALL SELECT t.oid::regclass::text, t.relkind FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_class t "
        "ON t.oid = c.reltoastrelid WHERE n.nspname = %s",
        (schema, list(kinds), schema),
    ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _pg_hits(url: str, schema: str, needles: list[str]) -> list[str]:
    import psycopg

    hits: list[str] = []
    with _pg_connect(url) as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        for table in tables:
            for needle in needles:
                row = con.execute(
                    f'SELECT count(*) FROM "{schema}"."{table}" t WHERE strpos(t::text, %s) > 0',
                    (needle,),
                ).fetchone()
                if row and row[0]:
                    hits.append(f"{needle!r} in a live row of {table}")
        try:
            con.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        except psycopg.Error as exc:
            hits.append(f"(dead row versions not checked: pageinspect unavailable: {exc})")
            return hits
        # heap_page_items lists every tuple on a page, dead versions too, until
        # VACUUM prunes them.
        for rel, _kind in _pg_relations(con, schema, "rt"):
            for needle in needles:
                row = con.execute(
                    "SELECT count(*) FROM generate_series(0, (pg_relation_size(%s::regclass) / "
                    "current_setting('block_size')::int) - 1) AS b, "
                    "heap_page_items(get_raw_page(%s, b::int)) AS h "
                    "WHERE position(%s::bytea IN h.t_data) > 0",
                    (rel, rel, needle.encode()),
                ).fetchone()
                if row and row[0]:
                    hits.append(f"{needle!r} in a tuple (live or dead) of {rel}")
    return hits


def raw_pages_hits(store: Any, needles: list[str]) -> list[str]:
    """PostgreSQL only: pages of the store's tables and indexes whose bytes hold a needle.

    This includes what no tuple holds any more: VACUUM frees a dead tuple's
    space without zeroing it, so its bytes stay in the page's free space until
    a new row overwrites them. Reported, not counted (docs/postgres.md).
    """
    from engramdb.stores.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        return []
    out: list[str] = []
    with _pg_connect(store.settings.url) as con:
        con.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        for rel, kind in _pg_relations(con, store.schema, "rti"):
            if kind == "i":
                am = con.execute(
                    "SELECT a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam "
                    "WHERE c.oid = %s::regclass",
                    (rel,),
                ).fetchone()
                if am is None or am[0] != "btree":
                    continue  # HNSW pages hold vectors; get_raw_page reads any, but skip
            pages = con.execute(
                "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                (rel,),
            ).fetchone()[0]
            for needle in needles:
                row = con.execute(
                    "SELECT count(*) FROM generate_series(0, %s - 1) AS b "
                    "WHERE position(%s::bytea IN get_raw_page(%s, b::int)) > 0",
                    (pages, needle.encode(), rel),
                ).fetchone()
                if row and row[0]:
                    out.append(f"{needle!r} in {row[0]} page(s) of {rel}")
    return out


# -- the probes ---------------------------------------------------------------------------


@dataclass
class _Place:
    name: str
    secrets: list[str]
    user: str
    purge: str
    """How the place was purged: ``id`` or ``scope``."""
    found_before: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Why a probe did not plant what it meant to (the probe, not the purge, failed)."""
    found_after: dict[str, list[str]] = field(default_factory=dict)
    """Per secret: where it was still found after the purge."""


def _extracted(*texts: str) -> dict[str, Any]:
    return {
        "memory": [{"text": t, "attributed_to": "user", "linked_memory_ids": []} for t in texts]
    }


def _linking(text: str, target: str) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """An additive reply that links its fact to the listed memory mentioning ``target``."""

    def reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        ids = re.findall(rf"\[(\d+)\] [^\n]*{re.escape(target)}", prompt)
        return {
            "memory": [
                {"text": text, "attributed_to": "user", "linked_memory_ids": ids[:1]},
            ]
        }

    return reply


def _plant(m: Memory, llm: ScriptedLLM) -> tuple[list[_Place], list[dict[str, Any]]]:
    """Write every probe; returns the places and the purges to run (``Memory.purge`` kwargs)."""
    places: list[_Place] = []
    purges: list[dict[str, Any]] = []

    def first_id(result: dict[str, Any]) -> str:
        return str(result["results"][0]["id"])

    # 1. A verbatim memory; the next message's memory borrows its words as context terms.
    u = "probe-verbatim"
    m.add("hello, I have something to tell you", user_id=u, infer=False)
    mid = first_id(m.add("my passport number is QX7781923", user_id=u, infer=False))
    m.add("that is the one I travel with abroad", user_id=u, infer=False)
    places.append(
        _Place("verbatim memory and its neighbour's context terms", ["QX7781923"], u, "id")
    )
    purges.append({"memory_id": mid})

    # 2. An LLM-extracted memory with entities (and a real word, to see its lemma).
    u = "probe-extracted"
    llm.add(_extracted("User plays xylophones with Dr. Zorblatt in Quexton"))
    mid = first_id(m.add("I play xylophones with Dr. Zorblatt in Quexton every week", user_id=u))
    places.append(
        _Place(
            "LLM-extracted memory, its entities and source message",
            ["Zorblatt", "Quexton", "xylophones"],
            u,
            "id",
        )
    )
    purges.append({"memory_id": mid})

    # 3. An update: the old text lives on in history.
    u = "probe-history"
    mid = first_id(m.add("my locker code is LK48213977", user_id=u, infer=False))
    m.update(mid, "my locker code was changed")
    places.append(_Place("update history (old text)", ["LK48213977"], u, "id"))
    purges.append({"memory_id": mid})

    # 4. Deleted first (soft, restorable), then purged.
    u = "probe-deleted"
    mid = first_id(m.add("the wifi password is Vantablorp", user_id=u, infer=False))
    m.delete(mid)
    places.append(_Place("deleted-then-purged memory", ["Vantablorp"], u, "id"))
    purges.append({"memory_id": mid})

    # 5. A failed extraction (kept messages, the reply in the error), retried into a
    # memory; purging that memory must take the failure record with it.
    u = "probe-failure"
    llm.add("not json Crumhorn7731", "still not json Crumhorn7731")
    failure = None
    try:
        m.add("my crumhorn serial is Crumhorn7731", user_id=u)
    except ExtractionError as exc:
        failure = exc.failure_id
    place = _Place("failed extraction: kept messages and reply", ["Crumhorn7731"], u, "id")
    if failure is not None:
        llm.add(_extracted("User's crumhorn serial is Crumhorn7731"))
        mid = first_id(m.retry_extraction(failure))
        purges.append({"memory_id": mid})
    else:
        place.problems.append("the extraction did not fail")
    places.append(place)

    # 6. A whole scope: a system message, a message the LLM found nothing in, an
    # unresolved failure whose reply quotes the words, and a memory.
    u = "probe-scope"
    m.add(
        [
            {"role": "system", "content": "internal note Plimsoll9921"},
            {"role": "user", "content": "my boat is the Plimsoll9921"},
        ],
        user_id=u,
        infer=False,
    )
    llm.add(_extracted())
    m.add("a ghostwhale swam past the Ghostwhale pier", user_id=u)
    llm.add("Kettlewick garbage", "Kettlewick garbage again")
    with contextlib.suppress(ExtractionError):
        m.add("remember Kettlewick", user_id=u)
    places.append(
        _Place(
            "scope: raw messages, unextracted messages, unresolved failure",
            ["Plimsoll9921", "Ghostwhale", "Kettlewick"],
            u,
            "scope",
        )
    )
    purges.append({"user_id": u})

    # 7. A memory another memory links to: the link must go, the linker stay.
    u = "probe-links"
    mid = first_id(m.add("my bank PIN hint is Fandango4471", user_id=u, infer=False))
    llm.add(_linking("User's PIN hint changed", "Fandango4471"))
    linker = m.add("I changed my PIN hint", user_id=u)["results"]
    place = _Place("links to the purged memory", ["Fandango4471"], u, "id")
    if not any(mid in (m.get(r["id"]) or {}).get("linked_memory_ids", []) for r in linker):
        place.problems.append("the linking memory did not link to the secret's memory")
    places.append(place)
    purges.append({"memory_id": mid})

    # 8. The same secret said twice: the repeat is one memory, but two raw messages.
    u = "probe-repeat"
    mid = first_id(m.add("my alarm code is Quokka5518", user_id=u, infer=False))
    m.add("my alarm code is Quokka5518", user_id=u, infer=False)
    places.append(_Place("a repeated message (one memory, two messages)", ["Quokka5518"], u, "id"))
    purges.append({"memory_id": mid})
    return places, purges


def _library_hits(m: Memory, place: _Place, secret: str) -> list[str]:
    """What the library still shows of ``secret``: search hits by keyword or text."""
    hits: list[str] = []
    forms = [v.casefold() for v in variants(secret)]
    found = m.search(secret, user_id=place.user, explain=True, top_k=20)["results"]
    for r in found:
        text = str(r["memory"]).casefold()
        if any(f in text for f in forms):
            hits.append(f"search returns a memory with {secret!r}: {r['memory']!r}")
        elif r["score_details"]["bm25"] > 0 and not r["score_details"].get("attributes"):
            # With attribute terms asked (attributes.py) the keyword part may be theirs
            # alone; the stored terms are probed for the secret by storage_hits.
            hits.append(f"search matches {secret!r} by keyword in {r['memory']!r}")
        elif r["score_details"]["entities"]:
            hits.append(f"search matches {secret!r} by entity in {r['memory']!r}")
    for r in m.get_all(user_id=place.user)["results"]:
        for linked in r.get("linked_memory_ids", []):
            if m.get(linked) is None:
                hits.append(f"{r['memory']!r} still links to a purged memory")
    return hits


def _probe(m: Memory, llm: ScriptedLLM, backend: str) -> dict[str, Any]:
    places, purges = _plant(m, llm)
    store = m.store
    for place in places:
        for secret in place.secrets:
            place.found_before += storage_hits(store, variants(secret))
    for purge in purges:
        m.purge(**purge)
    notes: set[str] = set()
    for place in places:
        for secret in place.secrets:
            raw = storage_hits(store, variants(secret))
            notes.update(h for h in raw if h.startswith("("))
            found = _library_hits(m, place, secret) + [h for h in raw if not h.startswith("(")]
            if found:
                place.found_after[secret] = found
    every = sorted({v for p in places for s in p.secrets for v in variants(s)})
    residue = raw_pages_hits(store, every)
    return {
        "backend": backend,
        "planted": sum(len(p.secrets) for p in places),
        "found_after": sum(len(p.found_after) for p in places),
        "places": [
            {
                "place": p.name,
                "purge": p.purge,
                "secrets": list(p.secrets),
                "seen_before": bool(p.found_before) and not p.problems,
                "found_after": dict(p.found_after),
            }
            for p in places
        ],
        "details": [f"{p.name}: {h}" for p in places for hs in p.found_after.values() for h in hs]
        + [
            f"{p.name}: planting failed (not in storage before the purge)"
            for p in places
            if not p.found_before
        ]
        + [f"{p.name}: planting failed: {problem}" for p in places for problem in p.problems]
        + sorted(notes)
        + [f"free-space residue (no tuple holds it): {r}" for r in residue],
    }


@contextlib.contextmanager
def _pg_schema(url: str) -> Iterator[dict[str, Any]]:
    name = "probe_" + uuid.uuid4().hex[:12]
    try:
        yield {"url": url, "collection_name": name, "min_size": 1, "max_size": 4}
    finally:
        with _pg_connect(url) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def run_purge_probes(
    workdir: Path, *, pg_url: str | None = None, embedder: Embedder | None = None
) -> dict[str, Any]:
    """Plant secrets in every place a purged text reaches, purge, and count what is found.

    Runs on a new SQLite file under ``workdir`` and, when ``pg_url`` is given,
    in a new schema of that PostgreSQL database (dropped afterwards; reading
    dead row versions needs a superuser for ``pageinspect``). ``embedder``
    defaults to the local model. Returns ``{"backend", "planted",
    "found_after", "places", "details", "backends"}``: the totals over the
    backends, and ``backends`` with one such dict per backend.
    """
    if embedder is None:
        from engramdb.embedders import LocalEmbedder

        embedder = LocalEmbedder()
    results = []
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"purge-probes-{uuid.uuid4().hex[:8]}.db"
    llm = ScriptedLLM(model="probe")
    with Memory(path, embedder=embedder, llm=llm) as m:
        results.append(_probe(m, llm, "sqlite"))
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            path.with_name(path.name + suffix).unlink()
    if pg_url is not None:
        with _pg_schema(pg_url) as config:
            llm = ScriptedLLM(model="probe")
            with Memory(
                config={"vector_store": {"provider": "postgres", "config": config}},
                embedder=embedder,
                llm=llm,
            ) as m:
                results.append(_probe(m, llm, "postgres"))
    return {
        "backend": "+".join(r["backend"] for r in results),
        "planted": sum(r["planted"] for r in results),
        "found_after": sum(r["found_after"] for r in results),
        "places": [dict(p, backend=r["backend"]) for r in results for p in r["places"]],
        "details": [f"{r['backend']}: {d}" for r in results for d in r["details"]],
        "backends": results,
    }
