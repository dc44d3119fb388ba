"""Generate tests/data/knowledge_updates.json: engramdb's own knowledge-update data set.

Usage::

    python scripts/gen_knowledge_updates.py            # rewrite the checked-in file
    python scripts/gen_knowledge_updates.py --check    # exit 1 if it is out of date
    python scripts/gen_knowledge_updates.py --seed 7 --out /tmp/ku.json

Everything here (names, places, companies, templates) was written for engramdb;
nothing is taken from another benchmark. The output is a pure function of the
seed: the same seed gives the same bytes (``tests/test_bench_knowledge_update.py``
regenerates the file and compares).

The format (``"format": 1``)::

    {
      "name": "engramdb-knowledge-updates", "format": 1, "seed": 15,
      "generator": "scripts/gen_knowledge_updates.py",
      "conversations": [{
        "id": "ku01", "speakers": ["Maya", "Tomas"],
        "sessions": [{
          "id": "s1", "date": "2023-01-14T18:30:00+00:00",
          "turns": [{"id": "s1t1", "speaker": "Maya", "text": "..."}, ...],
          "facts": [{"turn": "s1t4", "about": "Maya", "text": "Maya lives in Lisbon."}]
        }, ...],
        "chains": [{
          "id": "ku01c01", "subject": "Maya", "kind": "city", "attribute": "lives in",
          "values": [{"value": "Lisbon", "valid_from": "2023-01-14",
                      "turns": ["s1t4", "s5t9"]},
                     {"value": "Porto", "valid_from": "2023-04-02", "turns": ["s8t3"],
                      "implicit": true, "names_previous": true}, ...],
          "questions": [
            {"id": "ku01c01q1", "type": "current", "text": "Where does Maya live?",
             "expected": "Porto"},
            {"id": "ku01c01q2", "type": "as_of", "text": "Where did Maya live in May 2023?",
             "date": "2023-05-15", "expected": "Lisbon"},
            {"id": "ku01c01q3", "type": "previous",
             "text": "Which city did Maya live in before Porto?", "expected": "Lisbon",
             "evidence": ["s1t4", "s5t9", "s8t3"]}]
        }, ...]
      }, ...]
    }

- Turn ids are unique within a conversation. A session's ``date`` is when it
  took place (ISO-8601, UTC); ``add(timestamp=...)`` gets it.
- ``facts`` are the gold fact sentences of the turns that state something: each
  chain value's stating turns, and unrelated one-off facts (distractors). A
  perfect extractor would store these; small talk has none.
- A chain is one attribute of one person and its successive values. A value's
  ``valid_from`` is the day it became true: the session's day, or that day less
  what a relative phrase says ("last month": 30 days, "two weeks ago": 14, ...),
  so it is exact to within a few days. ``turns`` are the turns that state the
  value (its first statement first, then later reaffirmations, possibly by
  another speaker); each of them contains the value's text. ``implicit``: the
  change is stated without saying "I moved" ("we sold the Golf, the Tesla is
  great"); ``names_previous``: the first stating turn also names the old value
  (both keys are left out when false).
- Questions: ``current`` (what holds at the end: the last value), ``as_of``
  (what held on ``date``; the month named in the text, or the exact day, lies
  at least 15 days inside one value's validity), ``previous`` (the value before
  the last one; ``evidence``: its stating turns and a transition turn that
  names it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "knowledge_updates.json"
SEED = 15
CONVERSATIONS = 20
CHAINS_PER_CONVERSATION = 12


def _names(text: str) -> list[str]:
    return text.split()


MONTHS = _names(
    "January February March April May June July August September October November December"
)

# -- people --------------------------------------------------------------------------------

SPEAKER_NAMES = _names("""
Maya Tomas Priya Jonah Leila Bram Sofia Kwame Ines Ravi Hana Felix Amara Dmitri Noor Elias
Yuki Mateo Zara Oskar Chiara Idris Lena Marcus Aiko Rafael Freya Samir Nadia Callum Rosa
Theo Mei Anders Fatima Luca Greta Omar Talia Henrik Ayesha Diego Signe Kofi Mirela Jules
Beatriz Arjun Colette Ewan Paloma Viktor Sunita Milo Ingrid Tariq Olivia Kenji Marta Niall
""")

PARTNER_NAMES = _names("""
Sam Alex Jordan Robin Casey Noa Imran Clara Dev Marisol Pieter Selin Hugo Anouk Ruben
Tess Kai Soren Lucia Jamal Vera Emeka Ilse Tobias Renata Aziz Junie Cormac Esme Hamid
""")

# -- the attributes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One attribute kind: its values and every template that speaks of it.

    Placeholders: ``{v}`` the value, ``{a_v}`` the value after "a"/"an", ``{old}`` the
    previous value, ``{a_old}``, ``{rel}`` a relative date ("last month"), ``{S}`` the
    subject, ``{when}`` the resolved month of a relative date (" in March 2024") in
    facts, ``{d}`` the date in an as-of question.
    """

    name: str
    attribute: str
    values: tuple[str, ...]
    first: tuple[str, ...]
    change_rel: tuple[str, ...]
    change: tuple[str, ...]
    implicit: tuple[str, ...]
    reaffirm: tuple[str, ...]
    asked: tuple[str, ...]
    fact: tuple[str, ...]
    fact_new: tuple[str, ...]
    fact_change: tuple[str, ...]
    q_now: tuple[str, ...]
    q_asof: tuple[str, ...]
    q_before: tuple[str, ...]
    near_miss: tuple[str, ...] = ()
    """Distractors: the kind's vocabulary said of somebody else (``{x}`` a value)."""
    near_miss_fact: tuple[str, ...] = ()


def _t(*items: str) -> tuple[str, ...]:
    return items


KINDS: tuple[Kind, ...] = (
    Kind(
        name="city",
        attribute="lives in",
        values=_t(
            "Lisbon",
            "Porto",
            "Rotterdam",
            "Leeds",
            "Valencia",
            "Gdansk",
            "Montreal",
            "Lyon",
            "Edinburgh",
            "Bologna",
            "Cork",
            "Tallinn",
            "Ghent",
            "Bergen",
            "Seville",
            "Halifax",
            "Brno",
            "Aarhus",
            "Bristol",
            "Ljubljana",
            "Graz",
            "Malmo",
        ),
        first=_t(
            "I've been living in {v} for a few years now and I still love it.",
            "Honestly {v} is the best city I've lived in, the flat is tiny but who cares.",
            "Things in {v} are good, I finally know which bakery to avoid.",
            "My commute across {v} is twenty minutes by tram, can't complain.",
        ),
        change_rel=_t(
            "Big news: I moved to {v} {rel}! Still surrounded by boxes.",
            "I packed everything up and relocated to {v} {rel}.",
            "So I live in {v} now, we signed the lease {rel}.",
            "{rel} home became {v}, the new place has a balcony.",
        ),
        change=_t(
            "We're officially {v} residents as of this week.",
            "I just got the keys to my new flat in {v}!",
            "Moved to {v} on Saturday, my back is still recovering.",
        ),
        implicit=_t(
            "Leaving {old} was harder than I thought, but the first week in {v} has been lovely.",
            "Handed back the keys in {old}; the view from the new place in {v} makes up for it.",
            "No more {old} winters for me, {v} feels like a fresh start.",
        ),
        reaffirm=_t(
            "Walked along the river in {v} this morning, it never gets old.",
            "{v} is growing on me more every week.",
            "The neighbours here in {v} invited us for dinner, so sweet.",
        ),
        asked=_t(
            "{S}, how is life in {v} treating you?",
            "Are you still enjoying {v}, {S}?",
        ),
        fact=_t("{S} lives in {v}.", "{S} is based in {v}."),
        fact_new=_t("{S} moved to {v}{when}.", "{S} relocated to {v}{when}."),
        fact_change=_t("{S} moved from {old} to {v}.", "{S} left {old} and now lives in {v}."),
        q_now=_t(
            "Where does {S} live?",
            "Which city is {S} based in now?",
            "What city does {S} call home these days?",
        ),
        q_asof=_t("Where did {S} live in {d}?", "Which city was {S} living in during {d}?"),
        q_before=_t(
            "Where did {S} live before {v}?",
            "Which city did {S} live in before moving to {v}?",
            "Where did {S} use to live?",
        ),
        near_miss=_t(
            "My brother just moved to {x}, so I guess I'll be visiting a lot.",
            "A friend from school lives in {x}, she keeps telling me to come over.",
        ),
        near_miss_fact=_t("{S}'s brother moved to {x}.", "{S} has a school friend in {x}."),
    ),
    Kind(
        name="job",
        attribute="works as",
        values=_t(
            "nurse",
            "data analyst",
            "primary school teacher",
            "architect",
            "sous chef",
            "physiotherapist",
            "software engineer",
            "accountant",
            "interaction designer",
            "paramedic",
            "translator",
            "electrician",
            "pharmacist",
            "product manager",
            "journalist",
            "lab technician",
            "landscape gardener",
            "veterinarian",
            "copywriter",
            "air traffic controller",
        ),
        first=_t(
            "Work is fine, being {a_v} keeps me busy but I like it.",
            "I've worked as {a_v} for ages, some days are long but it's rewarding.",
            "The best part of being {a_v} is that no two days are the same.",
            "Another twelve-hour shift as {a_v} done, I'm wiped.",
        ),
        change_rel=_t(
            "I switched careers {rel}, I'm working as {a_v} now!",
            "Started my new job as {a_v} {rel}, still learning everyone's names.",
            "Guess who started as {a_v} {rel}? Me!",
            "I finally made the jump {rel}: {a_v}, full time.",
        ),
        change=_t(
            "Today was my first day as {a_v}, I'm exhausted and happy.",
            "I accepted the offer, I'm going to be working as {a_v} from Monday.",
            "Signed the contract this morning, I'm {a_v} now.",
        ),
        implicit=_t(
            "I don't miss being {a_old} at all; the {v} life suits me much better.",
            "After years as {a_old} I handed in my notice, and the {v} role is everything I hoped.",
            "My old colleagues from my {old} days came to my first week as {a_v}, so sweet.",
        ),
        reaffirm=_t(
            "Long day at work again, that's the {v} life for you.",
            "A patient thing, a client thing... being {a_v} is never boring.",
            "I got some lovely feedback at work today, being {a_v} has its moments.",
        ),
        asked=_t(
            "{S}, how's the {v} work going?",
            "Still enjoying working as {a_v}, {S}?",
        ),
        fact=_t("{S} works as {a_v}.", "{S} is {a_v} by profession."),
        fact_new=_t("{S} started working as {a_v}{when}.", "{S} became {a_v}{when}."),
        fact_change=_t(
            "{S} changed jobs from {old} to {v}.",
            "{S} used to be {a_old} and now works as {a_v}.",
        ),
        q_now=_t(
            "What does {S} do for a living?",
            "What is {S}'s job?",
            "What does {S} work as these days?",
        ),
        q_asof=_t("What was {S}'s job in {d}?", "What did {S} work as in {d}?"),
        q_before=_t(
            "What did {S} do before becoming {a_v}?",
            "What was {S}'s job before the {v} one?",
            "What did {S} use to work as?",
        ),
        near_miss=_t(
            "My cousin is training to be {a_x}, she asks me for advice all the time.",
            "My dad was {a_x} for thirty years, he still talks about it.",
        ),
        near_miss_fact=_t("{S}'s cousin is training to be {a_x}.", "{S}'s father was {a_x}."),
    ),
    Kind(
        name="employer",
        attribute="works at",
        values=_t(
            "Larkspur Analytics",
            "Halden & Price",
            "Brightwave Media",
            "Northgate Hospital",
            "Copperleaf Studios",
            "Vesta Robotics",
            "Orchard Lane Bank",
            "Tidewater Logistics",
            "Quillfeather Press",
            "Sable Energy",
            "Marrow & Finch",
            "Kestrel Aviation",
            "Bluepine Software",
            "Greystone Insurance",
            "Juniper Health",
            "Foxglove Foods",
            "Ironbridge Consulting",
            "Lumen Biotech",
            "Harbourside Hotels",
            "Redfern Motors",
        ),
        first=_t(
            "Things at {v} are hectic, we have a big launch coming up.",
            "I've been at {v} for three years, the team is great.",
            "The canteen at {v} has improved, finally some decent soup.",
            "My manager at {v} gave me Friday off, what a legend.",
        ),
        change_rel=_t(
            "I left my old company and joined {v} {rel}.",
            "I joined {v} {rel}, different world entirely.",
            "Started at {v} {rel}, the onboarding was endless.",
            "Quick update: new employer! {v}, I joined {rel}.",
        ),
        change=_t(
            "I signed with {v} today, I start next week!",
            "It's official, I'm joining {v}.",
            "Just got my badge for {v}, first day tomorrow.",
        ),
        implicit=_t(
            "Handed back my {old} laptop on Friday and got a shiny {v} one on Monday.",
            "My {v} colleagues are so much nicer than the crowd at {old}.",
            "Nobody at {v} schedules meetings at 8am, unlike {old}.",
        ),
        reaffirm=_t(
            "Another all-hands at {v} today, so many slides.",
            "We had the summer party at {v} yesterday, I'm still tired.",
            "The {v} office moved floors, I can see the harbour now.",
        ),
        asked=_t(
            "{S}, are they treating you well at {v}?",
            "How's {v} these days, {S}?",
        ),
        fact=_t("{S} works at {v}.", "{S} is employed by {v}."),
        fact_new=_t("{S} joined {v}{when}.", "{S} started at {v}{when}."),
        fact_change=_t("{S} left {old} for {v}.", "{S} moved from {old} to {v}."),
        q_now=_t(
            "Which company does {S} work for?",
            "Where is {S} employed?",
            "Who is {S}'s employer now?",
        ),
        q_asof=_t("Which company did {S} work for in {d}?", "Where was {S} employed in {d}?"),
        q_before=_t(
            "Where did {S} work before {v}?",
            "Which company did {S} work for before joining {v}?",
            "Who was {S}'s previous employer?",
        ),
        near_miss=_t(
            "My flatmate got an interview at {x}, fingers crossed for her.",
            "Did you see {x} is hiring again? My friend applied.",
        ),
        near_miss_fact=_t(
            "{S}'s flatmate had an interview at {x}.", "{S}'s friend applied to {x}."
        ),
    ),
    Kind(
        name="partner",
        attribute="is dating",
        values=tuple(PARTNER_NAMES),
        first=_t(
            "{v} and I have been together for almost two years now.",
            "{v} cooked for me last night, I'm a lucky person.",
            "My partner {v} says hi, by the way.",
            "{v} and I are going to a wedding next weekend, matching outfits and all.",
        ),
        change_rel=_t(
            "I started seeing someone {rel}, their name is {v}.",
            "I met {v} at a friend's party {rel} and we've been inseparable.",
            "Okay don't laugh, I started dating {v} {rel}.",
            "{v} and I made it official {rel}.",
        ),
        change=_t(
            "I have a date with {v} on Friday and I'm nervous!",
            "Meet my new partner: {v}. You'd love them.",
            "{v} asked me out and I said yes.",
        ),
        implicit=_t(
            "After things ended with {old} I wasn't looking, and then {v} happened.",
            "{old} and I split up in the spring; {v} has been a breath of fresh air.",
            "I deleted my photos with {old}. {v} took me hiking on Sunday, it was perfect.",
        ),
        reaffirm=_t(
            "{v} and I finally tried that Georgian restaurant, so good.",
            "{v} surprised me with concert tickets, I nearly cried.",
            "We spent the whole weekend at {v}'s parents' place.",
        ),
        asked=_t(
            "{S}, how are things with {v}?",
            "Is {v} coming to the barbecue, {S}?",
        ),
        fact=_t("{S} is in a relationship with {v}.", "{S}'s partner is {v}."),
        fact_new=_t("{S} started dating {v}{when}.", "{S} began a relationship with {v}{when}."),
        fact_change=_t(
            "{S} broke up with {old} and is now dating {v}.",
            "{S} split from {old}; {S}'s new partner is {v}.",
        ),
        q_now=_t(
            "Who is {S} dating?",
            "Who is {S}'s partner at the moment?",
            "Who is {S} in a relationship with now?",
        ),
        q_asof=_t("Who was {S} dating in {d}?", "Who was {S}'s partner in {d}?"),
        q_before=_t(
            "Who was {S} with before {v}?",
            "Who did {S} date before {v}?",
            "Who was {S}'s previous partner?",
        ),
    ),
    Kind(
        name="pet",
        attribute="has a pet",
        values=_t(
            "beagle",
            "tabby cat",
            "corgi",
            "parrot",
            "rabbit",
            "greyhound",
            "hamster",
            "border collie",
            "Maine Coon",
            "tortoise",
            "dachshund",
            "budgie",
            "ferret",
            "Siamese cat",
            "labrador",
            "guinea pig",
            "whippet",
            "bearded dragon",
        ),
        first=_t(
            "My {v} woke me up at five again, classic.",
            "Having {a_v} at home means I never sleep in, ha.",
            "I took my {v} to the vet for a check-up, all good.",
            "The {v} chewed through a charger cable this week.",
        ),
        change_rel=_t(
            "We adopted {a_v} {rel}, the flat is chaos now.",
            "We brought home {a_v} from the shelter {rel}.",
            "New family member as of {rel}: {a_v}!",
            "I finally got {a_v} {rel}, best decision ever.",
        ),
        change=_t(
            "We're picking up our new {v} on Saturday!",
            "Say hello to the newest member of the household, {a_v}.",
            "I couldn't resist, I adopted {a_v} today.",
        ),
        implicit=_t(
            "It's been quiet since we said goodbye to the {old}, but the {v} is filling the gap.",
            "We rehomed the {old} with my aunt who has a garden; the {v} rules the flat now.",
            "The {v} sleeps in the basket the {old} used to have.",
        ),
        reaffirm=_t(
            "The {v} learned to open the kitchen door, send help.",
            "Took the {v} to the park, total celebrity.",
            "Bought a ridiculous little bed for the {v}.",
        ),
        asked=_t(
            "{S}, how's the {v} doing?",
            "Is your {v} still stealing socks, {S}?",
        ),
        fact=_t("{S} has {a_v}.", "{S} owns {a_v}."),
        fact_new=_t("{S} adopted {a_v}{when}.", "{S} got {a_v}{when}."),
        fact_change=_t(
            "{S} no longer has the {old}; {S} now has {a_v}.",
            "{S}'s {old} is gone and {S} has {a_v} now.",
        ),
        q_now=_t(
            "What pet does {S} have?",
            "What kind of animal does {S} have at home now?",
            "Which pet lives with {S} these days?",
        ),
        q_asof=_t("What pet did {S} have in {d}?", "Which animal did {S} have at home in {d}?"),
        q_before=_t(
            "What pet did {S} have before the {v}?",
            "Which animal did {S} have before getting the {v}?",
            "What pet did {S} use to have?",
        ),
        near_miss=_t(
            "My neighbour has {a_x} that barks at the postman every day.",
            "My sister is thinking about getting {a_x}.",
        ),
        near_miss_fact=_t("{S}'s neighbour has {a_x}.", "{S}'s sister wants {a_x}."),
    ),
    Kind(
        name="diet",
        attribute="follows a diet",
        values=_t(
            "vegetarian",
            "vegan",
            "pescatarian",
            "keto",
            "gluten-free",
            "dairy-free",
            "low-carb",
            "paleo",
            "Mediterranean",
            "intermittent fasting",
        ),
        first=_t(
            "I've been {v} for years, so I'll bring my own dish.",
            "Being {v} is easy here, lots of options.",
            "Don't worry about me at dinner, I'm {v} and I'll find something.",
            "I cook {v} every night, it's second nature now.",
        ),
        change_rel=_t(
            "I changed how I eat {rel}, I'm fully {v} now.",
            "{rel} I went {v}, and I feel great.",
            "My doctor nudged me and {rel} I went {v}.",
            "Quick heads-up for the dinner: I switched to {v} {rel}.",
        ),
        change=_t(
            "Starting today I'm going {v}, wish me luck.",
            "From this week on I'm eating {v}.",
            "I've decided to go {v}, starting now.",
        ),
        implicit=_t(
            "So much for being {old}; I'm eating {v} now and it suits me.",
            "The whole {old} thing wasn't working for me, I feel better on {v}.",
            "I gave away my {old} cookbooks and bought two {v} ones.",
        ),
        reaffirm=_t(
            "Found a great {v} recipe blog, sending you the link.",
            "Sticking to {v} has been easier than I expected.",
            "Meal prep Sunday again, all {v} of course.",
        ),
        asked=_t(
            "{S}, are you still {v}? I'm planning the menu.",
            "Should I order {v} for you, {S}?",
        ),
        fact=_t("{S} follows {a_v} diet.", "{S} eats {v}."),
        fact_new=_t("{S} switched to {a_v} diet{when}.", "{S} went {v}{when}."),
        fact_change=_t(
            "{S} stopped being {old} and now eats {v}.",
            "{S} gave up the {old} diet for {a_v} one.",
        ),
        q_now=_t(
            "What diet does {S} follow?",
            "How does {S} eat these days?",
            "What does {S} eat now?",
        ),
        q_asof=_t("What diet was {S} following in {d}?", "How was {S} eating in {d}?"),
        q_before=_t(
            "What diet did {S} follow before going {v}?",
            "How did {S} eat before switching to {v}?",
            "What diet did {S} use to follow?",
        ),
    ),
    Kind(
        name="hobby",
        attribute="hobby",
        values=_t(
            "pottery",
            "woodworking",
            "baking sourdough",
            "watercolour painting",
            "birdwatching",
            "chess",
            "knitting",
            "film photography",
            "gardening",
            "playing the cello",
            "salsa dancing",
            "calligraphy",
            "rock collecting",
            "stand-up comedy",
            "beekeeping",
            "embroidery",
            "board game design",
            "archery",
        ),
        first=_t(
            "My weekends are all about {v} at the moment.",
            "I spent Saturday on {v} again, it's my therapy.",
            "{v} is my thing, I lose hours to it.",
            "I joined {a_v} group a while ago and I'm hooked.",
        ),
        change_rel=_t(
            "I picked up {v} {rel} and I'm obsessed.",
            "New hobby, started {rel}: {v}.",
            "I signed up for {v} classes {rel}, so much fun.",
            "{rel} a friend dragged me to {v} and now I can't stop.",
        ),
        change=_t(
            "I've got my first {v} class tonight!",
            "I'm trying {v} from this week, bought all the gear already.",
            "Starting {v} this weekend, finally.",
        ),
        implicit=_t(
            "My {old} stuff is gathering dust; {v} takes all my free time now.",
            "I sold my {old} supplies to make room for {v}.",
            "I haven't done any {old} since I discovered {v}.",
        ),
        reaffirm=_t(
            "Spent all of Sunday on {v}, no regrets.",
            "I'm getting better at {v}, slowly.",
            "My {v} teacher said I have a knack for it.",
        ),
        asked=_t(
            "{S}, still into {v}?",
            "How's the {v} going, {S}?",
        ),
        fact=_t("{S}'s hobby is {v}.", "{S} spends free time on {v}."),
        fact_new=_t("{S} took up {v}{when}.", "{S} started {v}{when}."),
        fact_change=_t(
            "{S} dropped {old} and took up {v}.",
            "{S} gave up {old}; {S}'s hobby is now {v}.",
        ),
        q_now=_t(
            "What is {S}'s hobby?",
            "What does {S} do in their free time now?",
            "Which hobby is {S} into these days?",
        ),
        q_asof=_t("What was {S}'s hobby in {d}?", "What was {S} into in {d}?"),
        q_before=_t(
            "What hobby did {S} have before {v}?",
            "What was {S} into before {v}?",
            "What did {S} use to do in their free time?",
        ),
        near_miss=_t(
            "My uncle has been doing {x} for decades, he's really good.",
            "There's {a_x} club near my office, I walk past it every day.",
        ),
        near_miss_fact=_t("{S}'s uncle does {x}.", "There is {a_x} club near {S}'s office."),
    ),
    Kind(
        name="vehicle",
        attribute="drives",
        values=_t(
            "Golf",
            "Tesla Model 3",
            "Toyota Corolla",
            "Vespa",
            "Subaru Outback",
            "Fiat 500",
            "Kia Niro",
            "Volvo XC60",
            "Honda Civic",
            "cargo bike",
            "Mini Cooper",
            "Renault Zoe",
            "camper van",
            "Skoda Octavia",
            "Mazda MX-5",
            "Nissan Leaf",
        ),
        first=_t(
            "My {v} needs new tyres, always something.",
            "Drove the {v} to the coast on Sunday, lovely day.",
            "The {v} has been so reliable, touch wood.",
            "I washed the {v} and it rained an hour later.",
        ),
        change_rel=_t(
            "I bought {a_v} {rel}, still figuring out all the buttons.",
            "I switched to driving {a_v} {rel}.",
            "We traded in for {a_v} {rel}.",
            "Picked up my {v} {rel}, love it.",
        ),
        change=_t(
            "Collecting my new {v} tomorrow, so excited.",
            "I just signed for {a_v}!",
            "Guess what's parked outside: my new {v}.",
        ),
        implicit=_t(
            "We sold the {old}, the new {v} is great.",
            "The {old} finally gave up, so the {v} is my daily ride now.",
            "Said goodbye to the {old} last weekend; the {v} is so much quieter.",
        ),
        reaffirm=_t(
            "Took the {v} on a road trip, it was perfect.",
            "The {v} passed its service with no issues.",
            "I keep finding crumbs in the {v}, kids.",
        ),
        asked=_t(
            "{S}, how do you like the {v}?",
            "Can we take your {v} to the festival, {S}?",
        ),
        fact=_t("{S} drives {a_v}.", "{S}'s vehicle is {a_v}."),
        fact_new=_t("{S} bought {a_v}{when}.", "{S} got {a_v}{when}."),
        fact_change=_t(
            "{S} sold the {old} and now drives {a_v}.",
            "{S} replaced the {old} with {a_v}.",
        ),
        q_now=_t(
            "What does {S} drive?",
            "What vehicle does {S} have now?",
            "What does {S} get around in these days?",
        ),
        q_asof=_t("What did {S} drive in {d}?", "Which vehicle did {S} have in {d}?"),
        q_before=_t(
            "What did {S} drive before the {v}?",
            "Which vehicle did {S} have before getting the {v}?",
            "What did {S} use to drive?",
        ),
        near_miss=_t(
            "My neighbour just got {a_x}, he won't stop talking about it.",
            "My mum rented {a_x} on holiday and hated it.",
        ),
        near_miss_fact=_t("{S}'s neighbour bought {a_x}.", "{S}'s mother rented {a_x}."),
    ),
    Kind(
        name="studies",
        attribute="is studying",
        values=_t(
            "a master's in data science",
            "an evening course in accounting",
            "a nursing degree",
            "a part-time MBA",
            "a diploma in graphic design",
            "a PhD in marine biology",
            "a coding bootcamp",
            "a teaching certificate",
            "a law conversion course",
            "a sommelier course",
            "a degree in architecture",
            "an online course in psychology",
            "a carpentry apprenticeship",
            "a certificate in project management",
        ),
        first=_t(
            "Between work and {v} I barely have time to breathe.",
            "I'm deep into {v} at the moment, exams in a few weeks.",
            "Doing {v} part-time is tough but worth it.",
            "My study group for {v} meets on Thursdays.",
        ),
        change_rel=_t(
            "I enrolled in {v} {rel}, back to being a student!",
            "{rel} I started {v}, evenings only.",
            "I started {v} {rel}, the reading list is brutal.",
            "So, {rel} I began {v}, wish me luck.",
        ),
        change=_t(
            "I just got accepted onto {v}!",
            "Classes for {v} start on Monday.",
            "I've signed up for {v}, starting this term.",
        ),
        implicit=_t(
            "I'm done with {old}, {v} is much more my speed.",
            "I dropped {old} halfway, {v} feels like the right fit.",
            "Finished {old} at last, and I've already started {v}.",
        ),
        reaffirm=_t(
            "Handed in another assignment for {v}, one to go.",
            "Got a great mark in {v}, I'm thrilled.",
            "Late night at the library for {v} again.",
        ),
        asked=_t(
            "{S}, how's {v} going?",
            "Are the exams for {v} coming up, {S}?",
        ),
        fact=_t("{S} is studying {v}.", "{S} is enrolled in {v}."),
        fact_new=_t("{S} started {v}{when}.", "{S} enrolled in {v}{when}."),
        fact_change=_t(
            "{S} moved on from {old} to {v}.",
            "{S} left {old} and is now doing {v}.",
        ),
        q_now=_t(
            "What is {S} studying?",
            "Which course is {S} taking now?",
            "What is {S} enrolled in at the moment?",
        ),
        q_asof=_t("What was {S} studying in {d}?", "Which course was {S} taking in {d}?"),
        q_before=_t(
            "What did {S} study before {v}?",
            "Which course did {S} do before {v}?",
            "What was {S} studying before?",
        ),
    ),
    Kind(
        name="trip",
        attribute="is planning a trip to",
        values=_t(
            "Japan",
            "Iceland",
            "Patagonia",
            "Morocco",
            "New Zealand",
            "Vietnam",
            "Scotland",
            "Peru",
            "Norway",
            "Sicily",
            "Croatia",
            "Canada",
            "Georgia",
            "Sri Lanka",
            "Costa Rica",
            "the Azores",
            "Mongolia",
            "Jordan",
        ),
        first=_t(
            "We're planning a big trip to {v} next year, already saving.",
            "I've been reading everything about {v} for our trip.",
            "The {v} trip is the thing keeping me going this winter.",
            "I bought a guidebook for {v}, our trip is finally taking shape.",
        ),
        change_rel=_t(
            "Change of plans, we decided {rel} to go to {v} instead.",
            "We rebooked everything {rel}: the big trip is {v} now.",
            "{rel} we switched the plan to {v}, the flights were half the price.",
            "{rel} we scrapped the old plan and settled on {v}.",
        ),
        change=_t(
            "We just booked the big trip: {v}!",
            "New plan for the holiday: {v}.",
            "The trip is happening and it's {v}!",
        ),
        implicit=_t(
            "The {old} trip fell through, but {v} might be even better.",
            "We cancelled the {old} bookings; I'm already learning phrases for {v}.",
            "Forget {old}, I'm reading up on hiking routes in {v}.",
        ),
        reaffirm=_t(
            "Found the perfect little guesthouse for our {v} trip.",
            "Only a few months until {v}, I'm counting the days.",
            "I've made a spreadsheet for the {v} itinerary, don't judge.",
        ),
        asked=_t(
            "{S}, is the {v} trip still on?",
            "When are you off to {v}, {S}?",
        ),
        fact=_t("{S} is planning a trip to {v}.", "{S}'s next big trip is to {v}."),
        fact_new=_t("{S} decided to travel to {v}{when}.", "{S} booked a trip to {v}{when}."),
        fact_change=_t(
            "{S} changed the trip plans from {old} to {v}.",
            "{S} is no longer going to {old}; the trip is to {v}.",
        ),
        q_now=_t(
            "Where is {S} planning to travel?",
            "What is {S}'s next big trip?",
            "Which destination is {S}'s trip to now?",
        ),
        q_asof=_t("Where was {S} planning to travel in {d}?", "What trip was {S} planning in {d}?"),
        q_before=_t(
            "Where was {S} going to travel before choosing {v}?",
            "What was {S}'s trip plan before {v}?",
            "Where did {S} originally plan to go?",
        ),
        near_miss=_t(
            "My parents just came back from {x}, they loved it.",
            "A colleague showed me photos from {x}, stunning.",
        ),
        near_miss_fact=_t("{S}'s parents travelled to {x}.", "{S}'s colleague visited {x}."),
    ),
    Kind(
        name="drink",
        attribute="favourite drink",
        values=_t(
            "flat white",
            "oat latte",
            "green tea",
            "matcha",
            "cold brew",
            "espresso",
            "chai",
            "kombucha",
            "rooibos",
            "americano",
            "hot chocolate",
            "cortado",
            "mint tea",
            "iced tea",
        ),
        first=_t(
            "I can't start my day without {a_v}.",
            "My usual order is {a_v}, every single morning.",
            "Nothing beats {a_v} on a cold day.",
            "The barista knows my {v} order by heart.",
        ),
        change_rel=_t(
            "I switched to {v} {rel}, I sleep so much better.",
            "{rel} I made {v} my morning drink.",
            "{rel} I discovered {v} and there's no going back.",
            "My go-to changed to {v} {rel}.",
        ),
        change=_t(
            "New habit starting today: {v} instead of my usual.",
            "From now on it's {v} only for me.",
            "I'm making {v} my morning thing from this week.",
        ),
        implicit=_t(
            "I'm off the {old} completely, the {v} is much gentler.",
            "The café still starts making my {old} when I walk in, but I'm {a_v} person now.",
            "I gave my {old} gadget to my sister, I only need a kettle for {v}.",
        ),
        reaffirm=_t(
            "Sitting here with my {v}, perfect morning.",
            "I found a place that does an amazing {v}.",
            "Three cups of {v} today, is that too many?",
        ),
        asked=_t(
            "{S}, shall I get you {a_v}?",
            "Still on the {v}, {S}?",
        ),
        fact=_t("{S}'s favourite drink is {v}.", "{S} drinks {v} every morning."),
        fact_new=_t("{S} switched to {v}{when}.", "{S} started drinking {v}{when}."),
        fact_change=_t(
            "{S} stopped drinking {old} and now prefers {v}.",
            "{S} swapped {old} for {v}.",
        ),
        q_now=_t(
            "What is {S}'s go-to drink?",
            "What does {S} drink in the morning these days?",
            "What is {S}'s favourite drink now?",
        ),
        q_asof=_t("What was {S}'s favourite drink in {d}?", "What did {S} drink in {d}?"),
        q_before=_t(
            "What did {S} drink before switching to {v}?",
            "What was {S}'s usual drink before {v}?",
            "What did {S} use to drink?",
        ),
    ),
    Kind(
        name="sport",
        attribute="plays",
        values=_t(
            "tennis",
            "five-a-side football",
            "bouldering",
            "swimming",
            "rowing",
            "volleyball",
            "badminton",
            "road cycling",
            "trail running",
            "boxing",
            "pickleball",
            "squash",
            "water polo",
            "ultimate frisbee",
            "netball",
        ),
        first=_t(
            "I do {v} twice a week, it keeps me sane.",
            "{v} this evening, I'm going to be sore tomorrow.",
            "Our {v} team finally won a match!",
            "I've been doing {v} for years now.",
        ),
        change_rel=_t(
            "I started {v} {rel}, my arms hate me.",
            "I joined {a_v} club {rel}.",
            "{rel} I started doing {v} every week.",
            "Switched to {v} {rel}, much more my thing.",
        ),
        change=_t(
            "I've just signed up for {v}, first session on Tuesday.",
            "Starting {v} tonight, nervous!",
            "I'm taking up {v} this month.",
        ),
        implicit=_t(
            "My knees gave up on {old}; {v} is much kinder to them.",
            "I cancelled my {old} membership, {v} is where it's at now.",
            "Haven't touched {old} in months since I found {v}.",
        ),
        reaffirm=_t(
            "Great {v} session this morning.",
            "We've got {a_v} tournament next month.",
            "Bought new gear for {v}, treating myself.",
        ),
        asked=_t(
            "{S}, still doing {v}?",
            "How was {v} this week, {S}?",
        ),
        fact=_t("{S} does {v}.", "{S}'s sport is {v}."),
        fact_new=_t("{S} took up {v}{when}.", "{S} joined {a_v} club{when}."),
        fact_change=_t("{S} switched from {old} to {v}.", "{S} gave up {old} and does {v} now."),
        q_now=_t(
            "What sport does {S} do?",
            "Which sport is {S} into now?",
            "How does {S} keep fit these days?",
        ),
        q_asof=_t("What sport did {S} do in {d}?", "Which sport was {S} playing in {d}?"),
        q_before=_t(
            "What sport did {S} do before {v}?",
            "Which sport did {S} play before taking up {v}?",
            "What sport did {S} use to do?",
        ),
        near_miss=_t(
            "My nephew plays {x} at school, he's fearless.",
            "They're building {x} courts near the station.",
        ),
        near_miss_fact=_t("{S}'s nephew plays {x}.", "{x} courts are being built near {S}."),
    ),
    Kind(
        name="phone",
        attribute="uses a phone",
        values=_t(
            "iPhone 13",
            "Pixel 8",
            "Galaxy S23",
            "Fairphone 5",
            "OnePlus 11",
            "iPhone 15 Pro",
            "Pixel 6a",
            "Xperia 5",
            "Galaxy Z Flip",
            "Moto G84",
            "iPhone SE",
            "Nothing Phone",
        ),
        first=_t(
            "My {v} battery barely lasts a day now.",
            "I took this photo on my {v}, not bad right?",
            "The screen on my {v} cracked again, third time.",
            "I love my {v}, best phone I've had.",
        ),
        change_rel=_t(
            "I got {a_v} {rel}, the camera is unreal.",
            "Started using {a_v} {rel}.",
            "I switched phones {rel}, it's {a_v} now.",
            "Upgraded to the {v} {rel}.",
        ),
        change=_t(
            "My new {v} arrives tomorrow!",
            "Just unboxed {a_v}, so shiny.",
            "I caved and bought {a_v} today.",
        ),
        implicit=_t(
            "I dropped the {old} in the canal, so it's {a_v} now.",
            "Gave my old {old} to my mum; still getting used to the {v}.",
            "Moving all my photos off the {old} onto the {v} took all evening.",
        ),
        reaffirm=_t(
            "The {v} survived a fall down the stairs, impressive.",
            "Figured out a neat trick on my {v} today.",
            "Updating the {v} again, it takes forever.",
        ),
        asked=_t(
            "{S}, is that the {v}?",
            "How's the {v} camera, {S}?",
        ),
        fact=_t("{S} uses {a_v}.", "{S}'s phone is {a_v}."),
        fact_new=_t("{S} got {a_v}{when}.", "{S} switched to {a_v}{when}."),
        fact_change=_t("{S} replaced the {old} with {a_v}.", "{S} swapped the {old} for {a_v}."),
        q_now=_t(
            "What phone does {S} use?",
            "Which phone does {S} have now?",
            "What is {S}'s current phone?",
        ),
        q_asof=_t("What phone did {S} use in {d}?", "Which phone did {S} have in {d}?"),
        q_before=_t(
            "What phone did {S} have before the {v}?",
            "Which phone did {S} use before getting the {v}?",
            "What phone did {S} use to have?",
        ),
    ),
    Kind(
        name="language",
        attribute="is learning",
        values=_t(
            "Japanese",
            "Italian",
            "Portuguese",
            "Korean",
            "German",
            "Arabic",
            "Mandarin",
            "Dutch",
            "Greek",
            "Swahili",
            "Turkish",
            "Polish",
            "Finnish",
            "Hindi",
        ),
        first=_t(
            "My {v} lessons are going well, slowly but surely.",
            "I practise {v} on the bus every morning.",
            "I've been learning {v} for a while, the grammar is wild.",
            "My {v} tutor says my accent is improving.",
        ),
        change_rel=_t(
            "I started learning {v} {rel}.",
            "{rel} I started {v} classes.",
            "{rel} I signed up for {v} lessons, it's so fun.",
            "I switched to {v} {rel}, it just clicked.",
        ),
        change=_t(
            "My first {v} lesson is tonight!",
            "I'm starting {v} this week, any tips?",
            "Just bought {a_v} textbook, I'm doing it.",
        ),
        implicit=_t(
            "I've let my {old} slide; {v} is all I practise now.",
            "Cancelled my {old} app subscription, I'm all in on {v}.",
            "My {old} is getting rusty since I started {v}.",
        ),
        reaffirm=_t(
            "Watched a whole film in {v} without subtitles!",
            "Had a short chat in {v} with a shopkeeper today.",
            "My {v} flashcards are taking over the fridge.",
        ),
        asked=_t(
            "{S}, how's your {v} coming along?",
            "Say something in {v}, {S}!",
        ),
        fact=_t("{S} is learning {v}.", "{S} studies {v}."),
        fact_new=_t("{S} started learning {v}{when}.", "{S} began {v} lessons{when}."),
        fact_change=_t(
            "{S} stopped learning {old} and is learning {v}.",
            "{S} switched from {old} to {v}.",
        ),
        q_now=_t(
            "What language is {S} learning?",
            "Which language is {S} studying now?",
            "What language does {S} practise these days?",
        ),
        q_asof=_t(
            "What language was {S} learning in {d}?", "Which language was {S} studying in {d}?"
        ),
        q_before=_t(
            "What language did {S} learn before {v}?",
            "Which language was {S} studying before {v}?",
            "What language did {S} use to study?",
        ),
        near_miss=_t(
            "My flatmate speaks {x} with her family, it sounds beautiful.",
            "There's {a_x} film festival in town next week.",
        ),
        near_miss_fact=_t("{S}'s flatmate speaks {x}.", "A {x} film festival is in town."),
    ),
)

KIND_BY_NAME = {k.name: k for k in KINDS}

RELATIVE = (
    ("last week", 7),
    ("a couple of weeks ago", 14),
    ("two weeks ago", 14),
    ("three weeks ago", 21),
    ("last month", 30),
    ("about a month ago", 30),
    ("a few weeks ago", 21),
    ("back at the start of the month", 12),
)

# -- the talk around the facts ---------------------------------------------------------------

GREETINGS = (
    "Hey {o}! How's your week been?",
    "Hi {o}, long time! What's new?",
    "Morning {o}! Got a minute to catch up?",
    "{o}! Finally we're both free. How are you?",
    "Hey you. Tell me everything, it's been ages.",
    "Hi {o}, sorry I went quiet, work has been mad.",
)
GREETING_REPLIES = (
    "Pretty good, busy though. You?",
    "Not bad at all! Tired, but good.",
    "All good here, just back from the shops.",
    "Surviving! The week flew by.",
    "Great to hear from you. Things are okay.",
    "Honestly a bit chaotic, but fine. You?",
)
SMALL_TALK = (
    "The weather has been all over the place this week.",
    "Did you watch the match last night? What a finish.",
    "I need more sleep, honestly.",
    "Haha, fair enough.",
    "That reminds me, I still owe you a coffee.",
    "My inbox is a disaster right now.",
    "I tried that new bakery on the corner, the croissants are decent.",
    "Ugh, the trains were late again this morning.",
    "I've been binge-watching a crime series, I'm hooked.",
    "Same here, it's been one of those weeks.",
    "I finally cleaned out the fridge, a proud moment.",
    "Have you heard the new album everyone's talking about?",
    "I keep meaning to call my grandmother back.",
    "It's so dark in the evenings now.",
    "I spent way too long choosing a birthday card today.",
    "Someone at the gym was singing along to their headphones, loudly.",
    "I can't believe it's almost the end of the month already.",
    "Lol, classic.",
    "Oh no, that sounds stressful.",
    "True, true.",
    "My plants are barely surviving, I forget to water them.",
    "We should do a picnic when it warms up.",
    "I burned the rice again, don't ask.",
    "The power went out for an hour yesterday, total chaos.",
    "I'm trying to read more, it's not going well.",
    "Did you get my voice message? Sorry it was so long.",
    "There's a street market on Sunday, might check it out.",
    "I've had that song stuck in my head all day.",
    "My landlord finally fixed the heating.",
    "Honestly, same.",
)
REACT_CHANGE = (
    "Whoa, congrats!",
    "No way! Since when?",
    "That's huge, I'm so happy for you.",
    "Oh wow, I did not see that coming.",
    "Good for you, seriously.",
    "Amazing, tell me more next time!",
    "That's a big change, how do you feel about it?",
)
REACT_FIRST = (
    "Oh nice, I didn't know that.",
    "Ha, sounds like you.",
    "That's lovely.",
    "Love that for you.",
    "Oh cool.",
)
REACT_REAFFIRM = (
    "Glad to hear it.",
    "Aw, that's nice.",
    "Haha, of course.",
    "Sounds about right.",
)
ANSWER_ASKED = (
    "Yes, still loving it!",
    "Really well, thanks for asking.",
    "Good! No complaints.",
    "Yep, going strong.",
)
FOLLOW_UPS = (
    "Yeah, it's been a lot, but good.",
    "Thanks! Still sinking in.",
    "Ha, I know. Me neither.",
    "It is, honestly.",
)
CLOSINGS = (
    "Anyway, I've got to run. Talk soon!",
    "Okay, dinner's ready, speak later!",
    "Let's catch up again soon, yeah?",
    "Right, back to work for me. Bye!",
)
CLOSING_REPLIES = ("Bye! Take care.", "Talk soon!", "See you!", "Later!")

ONE_OFFS = (
    ("I finally fixed the leaking tap in the bathroom.", "{S} fixed the leaking bathroom tap."),
    ("I ran a 10k on Saturday, 52 minutes!", "{S} ran a 10k in 52 minutes."),
    ("My sister is visiting next weekend.", "{S}'s sister is visiting."),
    ("I got my wisdom tooth out on Tuesday, ouch.", "{S} had a wisdom tooth removed."),
    ("I'm reading a biography of a lighthouse keeper.", "{S} is reading a biography."),
    ("I painted the bedroom a deep green.", "{S} painted the bedroom green."),
    ("We're hosting a quiz night at ours on Friday.", "{S} is hosting a quiz night."),
    ("I lost my wallet and got it back the same day.", "{S} lost and recovered a wallet."),
    ("My niece was born last week!", "{S}'s niece was born."),
    ("I won a raffle at the school fair, a whole cheese wheel.", "{S} won a cheese wheel."),
    ("I've been volunteering at the food bank on Wednesdays.", "{S} volunteers at a food bank."),
    ("I passed my driving theory test.", "{S} passed a driving theory test."),
    ("I'm allergic to cashews, found out the hard way.", "{S} is allergic to cashews."),
    ("My birthday is in October, by the way.", "{S}'s birthday is in October."),
    ("I sprained my ankle on the stairs.", "{S} sprained an ankle."),
    ("I'm learning to juggle, three balls so far.", "{S} is learning to juggle."),
    ("My grandad turned ninety on Sunday.", "{S}'s grandfather turned ninety."),
    ("I bought a second-hand piano.", "{S} bought a second-hand piano."),
)

# -- generation ----------------------------------------------------------------------------


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _fill(template: str, **slots: str) -> str:
    extra: dict[str, str] = {}
    for key in ("v", "old", "x"):
        if key in slots:
            extra[f"a_{key}"] = f"{_article(slots[key])} {slots[key]}"
    text = template.format(**slots, **extra)
    return text[:1].upper() + text[1:]


@dataclass
class _Value:
    value: str
    session: int
    valid_from: date
    turns: list[str] = field(default_factory=list)
    implicit: bool = False
    names_previous: bool = False
    reaffirm_sessions: list[int] = field(default_factory=list)


@dataclass
class _Chain:
    id: str
    subject: str
    kind: Kind
    values: list[_Value]


@dataclass
class _Event:
    chain: _Chain | None
    index: int  # value index, or -1 for a one-off / near miss
    what: str  # "state", "reaffirm", "oneoff", "nearmiss"
    speaker: str
    payload: tuple[str, str] = ("", "")


def _session_dates(rng: random.Random, n: int) -> list[datetime]:
    start = datetime(2022, 1, 10) + timedelta(days=rng.randint(0, 540))
    out = []
    current = start
    for _ in range(n):
        hour, minute = rng.randint(8, 21), rng.choice((0, 5, 15, 20, 30, 40, 45, 50))
        out.append(current.replace(hour=hour, minute=minute))
        current += timedelta(days=rng.randint(21, 63))
    return out


def _pick_sessions(rng: random.Random, n_sessions: int, n_values: int) -> list[int]:
    while True:
        picked = sorted(rng.sample(range(n_sessions), n_values))
        if picked[0] <= n_sessions // 2 and all(b - a >= 2 for a, b in itertools.pairwise(picked)):
            return picked


def _month_inside(lo: date, hi: date) -> date | None:
    """The 15th of a month lying wholly in [lo + 15 days, hi - 15 days], if any."""
    first = lo + timedelta(days=15)
    month = date(first.year, first.month, 1)
    if month < first:
        month = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    candidates = []
    while True:
        nxt = date(month.year + month.month // 12, month.month % 12 + 1, 1)
        if nxt - timedelta(days=1) > hi - timedelta(days=15):
            break
        candidates.append(month.replace(day=15))
        month = nxt
    return candidates[len(candidates) // 2] if candidates else None


def _as_of(
    rng: random.Random, chain: _Chain, index: int, end: date, kind: Kind, qid: str
) -> dict[str, Any] | None:
    lo = chain.values[index].valid_from
    hi = chain.values[index + 1].valid_from if index + 1 < len(chain.values) else end
    mid = _month_inside(lo, hi)
    if mid is not None:
        label = f"{MONTHS[mid.month - 1]} {mid.year}"
        when = mid
    elif (hi - lo).days >= 40:
        when = lo + timedelta(days=rng.randint(20, (hi - lo).days - 20))
        label = f"{when.day} {MONTHS[when.month - 1]} {when.year}"
    else:
        return None
    return {
        "id": qid,
        "type": "as_of",
        "text": _fill(rng.choice(kind.q_asof), S=chain.subject, d=label),
        "date": when.isoformat(),
        "expected": chain.values[index].value,
    }


def _conversation(rng: random.Random, number: int, names: list[str]) -> dict[str, Any]:
    cid = f"ku{number:02d}"
    speakers = names
    n_sessions = rng.randint(9, 12)
    dates = _session_dates(rng, n_sessions)
    # Chains: one per (person, kind); kinds repeat across people on purpose.
    pairs: list[tuple[str, Kind]] = []
    per_person = {p: rng.sample(KINDS, len(KINDS)) for p in speakers}
    while len(pairs) < CHAINS_PER_CONVERSATION:
        for person in speakers:
            if len(pairs) < CHAINS_PER_CONVERSATION and per_person[person]:
                pairs.append((person, per_person[person].pop()))
    chains: list[_Chain] = []
    events: dict[int, list[_Event]] = {i: [] for i in range(n_sessions)}
    for c, (subject, kind) in enumerate(pairs, 1):
        n_values = rng.choices((2, 3, 4), weights=(45, 40, 15))[0]
        pool = [v for v in kind.values if v not in speakers]
        values = rng.sample(pool, n_values)
        sessions = _pick_sessions(rng, n_sessions, n_values)
        chain = _Chain(f"{cid}c{c:02d}", subject, kind, [])
        for i, (value, s) in enumerate(zip(values, sessions, strict=True)):
            chain.values.append(_Value(value, s, dates[s].date()))
            events[s].append(_Event(chain, i, "state", subject))
        for i, v in enumerate(chain.values):
            later = chain.values[i + 1].session if i + 1 < len(chain.values) else n_sessions
            between = list(range(v.session + 1, later))
            if between and rng.random() < 0.35:
                s = rng.choice(between)
                v.reaffirm_sessions.append(s)
                others = [p for p in speakers if p != subject]
                who = subject if rng.random() < 0.6 else rng.choice(others)
                events[s].append(_Event(chain, i, "reaffirm", who))
        chains.append(chain)
    for s in range(n_sessions):
        for _ in range(rng.randint(1, 2)):
            who = rng.choice(speakers)
            line, fact = rng.choice(ONE_OFFS)
            events[s].append(_Event(None, -1, "oneoff", who, (line, _fill(fact, S=who))))
        if rng.random() < 0.6:
            kind = rng.choice([k for k in KINDS if k.near_miss])
            who = rng.choice(speakers)
            j = rng.randrange(len(kind.near_miss))
            x = rng.choice(kind.values)
            events[s].append(
                _Event(
                    None,
                    -1,
                    "nearmiss",
                    who,
                    (_fill(kind.near_miss[j], x=x), _fill(kind.near_miss_fact[j], x=x, S=who)),
                )
            )

    sessions_out: list[dict[str, Any]] = []
    for s in range(n_sessions):
        turns: list[dict[str, str]] = []
        facts: list[dict[str, str]] = []
        sid = f"s{s + 1}"

        def say(
            speaker: str, text: str, sid: str = sid, turns: list[dict[str, str]] = turns
        ) -> str:
            tid = f"{sid}t{len(turns) + 1}"
            turns.append({"id": tid, "speaker": speaker, "text": text})
            return tid

        def other(than: str) -> str:
            return rng.choice([p for p in speakers if p != than])

        opener = rng.choice(speakers)
        say(opener, _fill(rng.choice(GREETINGS), o=other(opener)))
        say(other(opener), rng.choice(GREETING_REPLIES))
        todo = events[s]
        rng.shuffle(todo)
        for event in todo:
            for _ in range(rng.choice((0, 0, 0, 1, 1, 2))):
                say(rng.choice(speakers), rng.choice(SMALL_TALK))
            if event.chain is None:
                tid = say(event.speaker, event.payload[0])
                facts.append({"turn": tid, "about": event.speaker, "text": event.payload[1]})
                if rng.random() < 0.5:
                    say(other(event.speaker), rng.choice(REACT_FIRST + REACT_REAFFIRM))
                continue
            chain, kind = event.chain, event.chain.kind
            v = chain.values[event.index]
            subj = chain.subject
            if event.what == "reaffirm":
                if event.speaker == subj:
                    tid = say(subj, _fill(rng.choice(kind.reaffirm), v=v.value))
                    say(other(subj), rng.choice(REACT_REAFFIRM))
                else:
                    tid = say(event.speaker, _fill(rng.choice(kind.asked), v=v.value, S=subj))
                    say(subj, rng.choice(ANSWER_ASKED))
                v.turns.append(tid)
                facts.append(
                    {"turn": tid, "about": subj, "text": _fill(kind.fact[0], v=v.value, S=subj)}
                )
                continue
            if event.index == 0:
                text = _fill(rng.choice(kind.first), v=v.value)
                fact = _fill(rng.choice(kind.fact), v=v.value, S=subj)
                react: tuple[str, ...] = REACT_FIRST
            else:
                old = chain.values[event.index - 1].value
                roll = rng.random()
                session_day = dates[s].date()
                gap = (session_day - chain.values[event.index - 1].valid_from).days
                prev_value = chain.values[event.index - 1]
                last_seen = max([prev_value.session, *prev_value.reaffirm_sessions])
                room = (session_day - dates[last_seen].date()).days
                if roll < 0.3:
                    text = _fill(rng.choice(kind.implicit), v=v.value, old=old)
                    fact = _fill(rng.choice(kind.fact_change), v=v.value, old=old, S=subj)
                    v.implicit = True
                    v.names_previous = old.lower() in text.lower()
                elif roll < 0.7 and gap > 40:
                    fits = [(p, d) for p, d in RELATIVE if d < room - 5]
                    if fits:
                        phrase, days = rng.choice(fits)
                        v.valid_from = session_day - timedelta(days=days)
                        text = _fill(rng.choice(kind.change_rel), v=v.value, rel=phrase)
                        when = f" in {MONTHS[v.valid_from.month - 1]} {v.valid_from.year}"
                        fact = _fill(rng.choice(kind.fact_new), v=v.value, S=subj, when=when)
                    else:
                        text = _fill(rng.choice(kind.change), v=v.value)
                        fact = _fill(rng.choice(kind.fact_new), v=v.value, S=subj, when="")
                else:
                    text = _fill(rng.choice(kind.change), v=v.value)
                    fact = _fill(rng.choice(kind.fact_new), v=v.value, S=subj, when="")
                react = REACT_CHANGE
            tid = say(subj, text)
            v.turns.insert(0, tid)
            facts.append({"turn": tid, "about": subj, "text": fact})
            say(other(subj), rng.choice(react))
            if event.index and rng.random() < 0.3:
                say(subj, rng.choice(FOLLOW_UPS))
        for _ in range(rng.choice((0, 0, 1))):
            say(rng.choice(speakers), rng.choice(SMALL_TALK))
        closer = rng.choice(speakers)
        say(closer, rng.choice(CLOSINGS))
        say(other(closer), rng.choice(CLOSING_REPLIES))
        sessions_out.append(
            {
                "id": sid,
                "date": dates[s].isoformat() + "+00:00",
                "turns": turns,
                "facts": facts,
            }
        )

    end = dates[-1].date()
    chains_out = []
    for chain in chains:
        kind = chain.kind
        last, prev = chain.values[-1], chain.values[-2]
        questions: list[dict[str, Any]] = [
            {
                "id": f"{chain.id}q1",
                "type": "current",
                "text": _fill(rng.choice(kind.q_now), S=chain.subject),
                "expected": last.value,
            }
        ]
        earlier = list(range(len(chain.values) - 1))
        rng.shuffle(earlier)
        asked = 0
        for index in earlier:
            q = _as_of(rng, chain, index, end, kind, f"{chain.id}q{len(questions) + 1}")
            if q is not None:
                questions.append(q)
                asked += 1
            if asked == (2 if len(chain.values) >= 3 else 1):
                break
        before = rng.choice(kind.q_before)
        evidence = list(prev.turns) + (last.turns[:1] if last.names_previous else [])
        questions.append(
            {
                "id": f"{chain.id}q{len(questions) + 1}",
                "type": "previous",
                "text": _fill(before, S=chain.subject, v=last.value),
                "expected": prev.value,
                "evidence": evidence,
            }
        )
        chains_out.append(
            {
                "id": chain.id,
                "subject": chain.subject,
                "kind": kind.name,
                "attribute": kind.attribute,
                "values": [
                    {
                        "value": v.value,
                        "valid_from": v.valid_from.isoformat(),
                        "turns": v.turns,
                        **({"implicit": True} if v.implicit else {}),
                        **({"names_previous": True} if v.names_previous else {}),
                    }
                    for v in chain.values
                ],
                "questions": questions,
            }
        )
    return {"id": cid, "speakers": speakers, "sessions": sessions_out, "chains": chains_out}


def generate(seed: int = SEED) -> dict[str, Any]:
    """The whole data set for ``seed`` (a pure function of it)."""
    rng = random.Random(seed)
    names = list(SPEAKER_NAMES)
    rng.shuffle(names)
    conversations = []
    for n in range(1, CONVERSATIONS + 1):
        size = 3 if n % 3 == 0 else 2
        people, names = names[:size], names[size:]
        conversations.append(_conversation(rng, n, people))
    return {
        "name": "engramdb-knowledge-updates",
        "format": 1,
        "seed": seed,
        "generator": "scripts/gen_knowledge_updates.py",
        "conversations": conversations,
    }


def _dump(value: Any, indent: int = 0) -> str:
    """JSON with every object or list that fits in 180 columns on one line."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(flat) + indent <= 180 or not isinstance(value, dict | list) or not value:
        return flat
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {_dump(v, indent + 1).lstrip()}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _dump(v, indent + 1).lstrip() for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def render(seed: int = SEED) -> str:
    """The JSON text written for ``seed`` (short objects, such as a turn, on one line)."""
    return _dump(generate(seed)) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the data file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out differs")
    args = parser.parse_args(argv)
    text = render(args.seed)
    if args.check:
        current = args.out.read_text("utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run `python {__file__}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, "utf-8")
    print(f"wrote {args.out} ({len(text.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
