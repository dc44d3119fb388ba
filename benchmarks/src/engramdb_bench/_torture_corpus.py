"""The ``corpus`` part of ``engram bench torture``: every hostile reply through a real add."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from engramdb_bench._progress import Progress, quiet


def all_memories(m: Any, user_id: str) -> list[dict[str, Any]]:
    """Every live memory of ``user_id``, read in pages."""
    items: list[dict[str, Any]] = []
    for _ in range(10_000):  # pages of 1,000; bounded
        page = m.get_all(user_id=user_id, top_k=1000, offset=len(items))["results"]
        items.extend(page)
        if len(page) < 1000:
            break
    return items


class _CachedEmbedder:
    """The real local model, with vectors cached by exact text (the corpus repeats itself)."""

    def __init__(self) -> None:
        from engramdb.embedders import LocalEmbedder

        self.inner = LocalEmbedder()
        self.model = self.inner.model
        self.dim = self.inner.dim
        self.cache: dict[str, Any] = {}

    def embed_documents(self, texts: list[str]) -> Any:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            for text, vec in zip(todo, self.inner.embed_documents(todo), strict=True):
                self.cache[text] = vec
        if not texts:
            return np.zeros((0, self.dim), "f4")
        return np.stack([self.cache[t] for t in texts])

    def embed_query(self, text: str) -> Any:
        key = "query: " + text
        if key not in self.cache:
            self.cache[key] = self.inner.embed_query(text)
        return self.cache[key]


_SHOWN = re.compile(r"^\[(\d+)\] (.*?)(?: \(\d{4}-\d{2}-\d{2}\))?$", re.MULTILINE)
_FACT_LINE = re.compile(r"^- (.*)$", re.MULTILINE)


def _block(text: str, tag: str) -> str | None:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return match.group(1) if match else None


def _translate_ids(reply: str, translate: dict[str, str]) -> str:
    """Rename the small ids of an update reply (JSON only) from the corpus' to the prompt's."""
    try:
        data = json.loads(reply)
    except ValueError:
        return reply
    items = data.get("memory") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return reply
    for entry in items:
        if not isinstance(entry, dict) or "id" not in entry:
            continue
        value = entry["id"]
        if isinstance(value, bool) or not isinstance(value, int | str):
            continue
        new = translate.get(str(value).strip())
        if new is not None:
            entry["id"] = int(new) if isinstance(value, int) else new
    return json.dumps(data, ensure_ascii=False)


def _corpus_handler(case: Any, known: dict[str, str], note: dict[str, Any]) -> Any:
    """The wire server's answers for one case: the hostile reply where the case's kind is asked."""
    from engramdb_bench._wire import RecordedRequest

    corpus_order = list(known.values())  # small id i of the corpus is the i-th known text

    def handle(request: RecordedRequest) -> str:
        messages = request.messages
        first = str(messages[1].get("content") or "") if len(messages) > 1 else ""
        if "<existing_memories>" in first:
            call = "update"
        elif "<known_memories>" in first or "<new_messages>" in first:
            call = "additive"
        else:
            call = "facts"
        note.setdefault("calls", []).append(call)
        shown_block = _block(first, "known_memories") or _block(first, "existing_memories") or ""
        shown = {m.group(1): m.group(2) for m in _SHOWN.finditer(shown_block)}
        if call == case.kind:
            mapping = {str(i): text for i, text in enumerate(corpus_order)}
            note["context_as_corpus"] = shown == mapping
            if case.kind == "update" and shown != mapping:
                by_text = {text: small for small, text in shown.items()}
                translate = {
                    corpus_id: by_text[text]
                    for corpus_id, text in mapping.items()
                    if text in by_text
                }
                note["ids_translated"] = True
                return _translate_ids(case.reply, translate)
            return str(case.reply)
        if call == "facts":  # an update case: facts that bring the known memories up
            return json.dumps({"facts": ["Alice likes green and jasmine tea."]})
        if call == "update":  # a facts case: store each fact the parser kept
            facts = _FACT_LINE.findall(_block(first, "new_facts") or "")
            return json.dumps({"memory": [{"event": "ADD", "text": f} for f in facts]})
        return json.dumps({"memory": []})

    return handle


def _judge_case(
    case: Any,
    m: Any,
    user: str,
    seeded: dict[str, str],
    sent: str,
    outcome: dict[str, Any] | BaseException,
    note: dict[str, Any],
) -> dict[str, Any]:
    """Classify one case's outcome: as_expected, failed_clean, mismatched or crashed."""
    from engramdb.errors import ExtractionError

    verdict: dict[str, Any] = {"name": case.name, "kind": case.kind}
    if isinstance(outcome, ExtractionError):
        kept = m.failures(user_id=user)
        row = next((f for f in kept if f["id"] == outcome.failure_id), None)
        stored = m.store.failure(outcome.failure_id)
        contents = [msg.content for _, msg in stored[1]] if stored else []
        verdict["raw_kept"] = row is not None and row["messages"] == 1 and contents == [sent]
        verdict["outcome"] = "as_expected" if case.error else "failed_clean"
        if not case.error:
            verdict["detail"] = str(outcome)[:200]
        return verdict
    if isinstance(outcome, BaseException):
        verdict["outcome"] = "crashed"
        verdict["detail"] = f"{type(outcome).__name__}: {outcome}"[:300]
        return verdict
    if case.error:
        verdict["outcome"] = "mismatched"
        verdict["detail"] = f"expected ExtractionError, got {outcome['results']}"[:300]
        return verdict
    results = outcome["results"]
    real_to_corpus = {real: corpus_id for corpus_id, real in seeded.items()}
    problems: list[str] = []
    if case.kind == "update":
        got = sorted(
            (
                r["event"],
                r["memory"] if r["event"] in ("ADD", "UPDATE") else None,
                real_to_corpus.get(r["id"]),
            )
            for r in results
        )
        want = sorted(case.ops or ())
        if got != want:
            problems.append(f"operations {got} != {want}")
        for event, text, corpus_id in case.ops or ():
            if corpus_id is None:
                continue
            now = m.get(seeded[corpus_id])
            if event == "UPDATE" and (now is None or now["memory"] != text):
                problems.append(f"{corpus_id} not updated")
            if event == "DELETE" and now is not None and now.get("deleted_at") is None:
                problems.append(f"{corpus_id} not deleted")
    else:
        texts = tuple(r["memory"] for r in results if r["event"] in ("ADD", "NONE"))
        if texts != tuple(case.texts):
            problems.append(f"stored {list(texts)[:5]} != expected {list(case.texts)[:5]}")
        if case.kind == "additive" and case.links is not None and note.get("context_as_corpus"):
            for r, want_links in zip(results, case.links, strict=False):
                item = m.get(r["id"])
                have = set(item["linked_memory_ids"]) if item else set()
                if have != {seeded[x] for x in want_links}:
                    problems.append(f"links of {r['memory']!r}: {sorted(have)}")
    everything = json.dumps(all_memories(m, user))
    from engramdb_bench._hostile import FOREIGN

    if FOREIGN in everything:
        problems.append("a foreign id reached the store")
    verdict["outcome"] = "mismatched" if problems else "as_expected"
    if problems:
        verdict["detail"] = "; ".join(problems)[:400]
    return verdict


def part_corpus(workdir: Path, bars: Progress) -> dict[str, Any]:
    """Run every hostile reply through a real add and judge what it left."""
    from engramdb import Memory
    from engramdb.llms import make_llm
    from engramdb_bench import _hostile
    from engramdb_bench._wire import WireServer

    known = {k: _hostile.KNOWN[k] for k in (_hostile.A, _hostile.B, _hostile.C)}
    embedder = _CachedEmbedder()
    verdicts: list[dict[str, Any]] = []
    # Every hostile reply makes the pipeline log what it dropped or retried: expected here.
    with quiet("engramdb"), WireServer() as server:
        llm = make_llm(
            "openai_compatible",
            {"base_url": server.base_url, "model": "torture", "max_retries": 0, "timeout": 60},
        )
        stores = {
            mode: Memory(
                workdir / f"corpus-{mode}.db",
                # The corpus was written for the parser's default text limit.
                config={"extraction": {"mode": mode}, "limits": {"max_text_chars": 2000}},
                embedder=embedder,
                llm=llm,
            )
            for mode in ("additive", "consolidate")
        }
        try:
            with bars.bar("hostile replies through Memory.add", len(_hostile.CASES)) as tick:
                for i, case in enumerate(_hostile.CASES):
                    m = stores["additive" if case.kind == "additive" else "consolidate"]
                    user = f"hostile-{i}"
                    seeded: dict[str, str] = {}
                    # Oldest first: the newest-first context then shows them as 0, 1, 2.
                    for corpus_id in reversed(list(known)):
                        out = m.add(known[corpus_id], user_id=user, infer=False)
                        seeded[corpus_id] = out["results"][0]["id"]
                    note: dict[str, Any] = {}
                    server.handler = _corpus_handler(case, known, note)
                    sent = f"Alice told me something new (case {case.name})."
                    outcome: dict[str, Any] | BaseException
                    try:
                        outcome = m.add(sent, user_id=user)
                    except Exception as exc:  # judged below: clean or not
                        outcome = exc
                    verdict = _judge_case(case, m, user, seeded, sent, outcome, note)
                    verdict["context_as_corpus"] = note.get("context_as_corpus")
                    verdict["ids_translated"] = bool(note.get("ids_translated"))
                    verdict["llm_calls"] = len(note.get("calls", []))
                    verdicts.append(verdict)
                    tick()
        finally:
            for m in stores.values():
                m.close()
    counts = {k: sum(v["outcome"] == k for v in verdicts) for k in OUTCOMES}
    failures = [v for v in verdicts if "raw_kept" in v]
    by_kind: dict[str, dict[str, int]] = {}
    for v in verdicts:
        row = by_kind.setdefault(v["kind"], {"total": 0, "handled": 0})
        row["total"] += 1
        row["handled"] += v["outcome"] in ("as_expected", "failed_clean")
    return {
        "total": len(verdicts),
        "handled": counts["as_expected"] + counts["failed_clean"],
        **counts,
        "failures": len(failures),
        "raw_kept": sum(bool(v["raw_kept"]) for v in failures),
        "by_kind": by_kind,
        # Replies whose prompt showed the known memories in the corpus' order, and
        # update replies whose small ids were renamed to the prompt's order instead.
        "context_as_corpus": sum(bool(v.get("context_as_corpus")) for v in verdicts),
        "ids_translated": sum(v["ids_translated"] for v in verdicts),
        "details": [v for v in verdicts if v["outcome"] != "as_expected"][:40],
    }


OUTCOMES = ("as_expected", "failed_clean", "mismatched", "crashed")
