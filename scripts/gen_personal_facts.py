"""Generate benchmarks/src/engramdb_bench/data/personal_facts.json: personal facts and questions.

Usage::

    python scripts/gen_personal_facts.py            # rewrite the checked-in file
    python scripts/gen_personal_facts.py --check    # exit 1 if it is out of date
    python scripts/gen_personal_facts.py --seed 7 --out /tmp/pf.json

The shape of memories an assistant app stores about its users, one ``add`` at a
time: short first-person notes as the user said them ("Got promoted to senior
accountant in the spring", "We have a corgi named Mochi"; about three in four)
and third-person summaries ("User's partner is called Sam", "Priya is allergic
to shellfish"). Each user also has distractor facts that share words with the
questions without answering them ("My blood type is O negative" beside "What
type of car ..."; "My manager is allergic to nuts"; "The neighbours' dog barks
all night"). Questions are paraphrased the way a person asks, not with the
fact's key words ("What does Priya do for a living?" for the promotion), half
naming the person, half saying "the user"; about 45 % ask about an attribute
the user has no fact for (``answerable: false``, ``gold: []``).

Everything here (names, values, templates) was written for engramdb. The output
is a pure function of the seed (``tests/test_bench_retrieval.py`` regenerates
and compares).

The format (``"format": 1``)::

    {"name": "engramdb-personal-facts", "format": 1, "seed": 28,
     "generator": "scripts/gen_personal_facts.py",
     "users": [{"id": "pf01", "name": "Priya Raman", "first_name": "Priya",
       "facts": [{"id": "pf01f01", "kind": "job", "voice": "first",
                  "distractor": false, "text": "...",
                  "timestamp": "2024-02-03T09:15:00+00:00"}, ...],
       "questions": [{"id": "pf01q01", "kind": "job", "text": "...",
                      "names_person": true, "answerable": true,
                      "gold": ["pf01f01"]}, ...]}, ...]}

``voice`` is ``first`` or ``third``; a distractor's ``kind`` is the attribute
whose questions it shares words with (it never answers them).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "src" / "engramdb_bench" / "data" / "personal_facts.json"
SEED = 28
USERS = 40
ANSWERABLE_PER_USER = 4

NAMES = [
    "Priya Raman", "Tomasz Nowak", "Aisha Bello", "Liam O'Connor", "Mei Lin Chen",
    "Diego Herrera", "Hannah Fischer", "Kwame Mensah", "Sofia Rossi", "Arjun Mehta",
    "Elena Petrova", "Noah Williams", "Yuki Tanaka", "Fatima Haddad", "Lucas Moreau",
    "Grace Okafor", "Mateo Silva", "Ingrid Larsen", "Omar Farouk", "Chloe Dubois",
    "Ravi Patel", "Zara Ahmed", "Jonas Berg", "Amara Nwosu", "Marco Bianchi",
    "Leila Karimi", "Ethan Brooks", "Nadia Kowalski", "Samuel Adeyemi", "Isabel Navarro",
    "Hiroshi Sato", "Olivia Bennett", "Tariq Aziz", "Freya Lindqvist", "Daniel Cohen",
    "Lucia Fernandez", "Kofi Boateng", "Anya Volkova", "Rhys Morgan", "Mina Park",
]  # fmt: skip

# Each kind: value dicts, first-person templates, third-person templates ({who}: a
# name or "User"/"The user"; {whos}: the possessive), questions ({p}: the person, "the
# user" or a first name; {ps}: the possessive), and how many facts (1 or up to 2).
KINDS: dict[str, dict[str, Any]] = {
    "job": {
        "values": [
            {"v": "senior accountant"},
            {"v": "paediatric nurse"},
            {"v": "backend developer"},
            {"v": "primary school teacher"},
            {"v": "electrician"},
            {"v": "pharmacist"},
            {"v": "architect"},
            {"v": "paramedic"},
            {"v": "graphic designer"},
            {"v": "marketing manager"},
            {"v": "dental hygienist"},
            {"v": "sous chef"},
            {"v": "physiotherapist"},
            {"v": "civil engineer"},
            {"v": "data analyst"},
            {"v": "solicitor"},
            {"v": "air traffic controller"},
            {"v": "vet"},
        ],
        "first": [
            "Got promoted to {v} in the spring",
            "First week as a {v} done, my feet hurt",
            "Six years as a {v} now and I still like it",
            "Passed my probation as a {v} today!",
            "Being a {v} means early shifts again next week",
        ],
        "third": ["{who} works as a {v}.", "{who} is a {v} by profession."],
        "questions": [
            "What does {p} do for a living?",
            "What is {ps} line of work?",
            "How does {p} earn money?",
            "What's {ps} occupation?",
            "Which trade or career is {p} in?",
        ],
    },
    "employer": {
        "values": [
            {"v": "Deloitte"},
            {"v": "St Mary's Hospital"},
            {"v": "Siemens"},
            {"v": "a small bakery on Mill Lane"},
            {"v": "the city council"},
            {"v": "Spotify"},
            {"v": "Unilever"},
            {"v": "a start-up called Brightloop"},
            {"v": "the BBC"},
            {"v": "IKEA"},
            {"v": "Rolls-Royce"},
            {"v": "a family-run law firm"},
        ],
        "first": [
            "Signed the contract with {v} this morning",
            "{V} is sending me to a conference in Lisbon",
            "The canteen at {v} finally has decent coffee",
            "Three years at {v} next month, time flies",
        ],
        "third": ["{who} is employed by {v}.", "{whos} employer is {v}."],
        "questions": [
            "Which company pays {ps} salary?",
            "Who does {p} work for?",
            "What organisation is {p} on the payroll of?",
            "Where does {p} go to the office?",
        ],
    },
    "city": {
        "values": [
            {"v": "Manchester"},
            {"v": "Lyon"},
            {"v": "Rotterdam"},
            {"v": "Porto"},
            {"v": "Edinburgh"},
            {"v": "Vancouver"},
            {"v": "Leipzig"},
            {"v": "Melbourne"},
            {"v": "Bristol"},
            {"v": "Gothenburg"},
            {"v": "Valencia"},
            {"v": "Cork"},
            {"v": "Austin"},
            {"v": "Kraków"},
        ],
        "first": [
            "Just finished unpacking in our new flat in {v}",
            "The trams in {v} are late again",
            "Been living in {v} since 2019 and I love it",
            "Rent in {v} went up again, ugh",
        ],
        "third": ["{who} lives in {v}.", "{whos} home is in {v}."],
        "questions": [
            "Where is {p} based?",
            "Which town does {p} call home?",
            "Where does {p} reside?",
            "In what place is {ps} flat?",
        ],
    },
    "partner": {
        "values": [
            {"v": "Sam"},
            {"v": "Alex"},
            {"v": "Jordan"},
            {"v": "Maria"},
            {"v": "Ben"},
            {"v": "Chidi"},
            {"v": "Lena"},
            {"v": "Hugo"},
            {"v": "Ana"},
            {"v": "Kai"},
            {"v": "Rosa"},
            {"v": "Felix"},
        ],
        "first": [
            "Date night with {v} tonight, we're trying the new Thai place",
            "{v} and I just celebrated five years together",
            "{v} surprised me with breakfast in bed",
            "Moving in with {v} next month, a bit nervous",
        ],
        "third": ["{whos} partner is called {v}.", "{who} is in a relationship with {v}."],
        "questions": [
            "Who is {p} seeing?",
            "Who is {ps} significant other?",
            "Is {p} dating anyone, and who?",
            "Who does {p} share their life with romantically?",
        ],
    },
    "pet": {
        "values": [
            {"s": "corgi", "n": "Mochi"},
            {"s": "tabby cat", "n": "Biscuit"},
            {"s": "rescue greyhound", "n": "Pepper"},
            {"s": "rabbit", "n": "Clover"},
            {"s": "border collie", "n": "Juno"},
            {"s": "parrot", "n": "Kiwi"},
            {"s": "ginger cat", "n": "Marmalade"},
            {"s": "labrador", "n": "Bruno"},
            {"s": "pair of guinea pigs", "n": "Salt and Pepper"},
            {"s": "dachshund", "n": "Frankie"},
            {"s": "tortoise", "n": "Sheldon"},
            {"s": "Siamese cat", "n": "Luna"},
        ],
        "first": [
            "We have a {s} named {n}",
            "{n} (our {s}) chewed through another charger",
            "Adopted a {s} from the shelter, we call her {n}",
            "Took {n} the {s} for a check-up, all fine",
        ],
        "third": ["{who} has a {s} called {n}.", "{whos} {s} is named {n}."],
        "questions": [
            "Does {p} have any animals at home?",
            "What furry or feathered companion lives with {p}?",
            "What's the name of {ps} animal?",
            "Who keeps {p} company at home, four legs or wings?",
        ],
    },
    "allergy": {
        "values": [
            {"v": "shellfish"},
            {"v": "peanuts"},
            {"v": "penicillin"},
            {"v": "tree nuts"},
            {"v": "sesame"},
            {"v": "latex"},
            {"v": "bee stings"},
            {"v": "kiwi fruit"},
        ],
        "first": [
            "Had a reaction to {v} again, always carry my EpiPen now",
            "Can't go near {v}, my throat swells up",
            "Reminder to self: tell the restaurant about the {v} thing",
        ],
        "third": ["{who} is allergic to {v}.", "{who} has a severe {v} allergy."],
        "questions": [
            "What must {p} stay away from medically?",
            "What gives {p} a bad reaction?",
            "Is there anything that could send {p} to A&E if they touched or ate it?",
        ],
    },
    "diet": {
        "values": [
            {"v": "vegetarian", "f": "Five years without meat and I don't miss it at all"},
            {"v": "vegan", "f": "Went fully plant-based in January, no dairy, no eggs"},
            {"v": "pescatarian", "f": "I only eat fish these days, no other meat"},
            {"v": "gluten-free", "f": "Coeliac diagnosis confirmed, so no more bread or pasta"},
            {"v": "halal", "f": "I only eat halal meat, so the barbecue needs checking"},
            {"v": "low-carb", "f": "Cut out bread, rice and potatoes on the doctor's advice"},
            {"v": "dairy-free", "f": "Lactose intolerant, oat milk in everything now"},
        ],
        "first": ["{f}"],
        "third": ["{who} follows a {v} diet.", "{who} eats {v}."],
        "questions": [
            "What should I keep in mind when cooking for {p}?",
            "What are {ps} eating habits?",
            "Is there a way of eating {p} sticks to?",
        ],
    },
    "hobby": {
        "count": 2,
        "values": [
            {"v": "bouldering", "f": "Spent all Saturday at the climbing wall, forearms dead"},
            {"v": "pottery", "f": "My third bowl from the wheel finally didn't collapse"},
            {"v": "birdwatching", "f": "Spotted a kingfisher at the marsh with my binoculars"},
            {"v": "chess", "f": "Reached 1500 on the chess app after a month of puzzles"},
            {"v": "knitting", "f": "Halfway through knitting a jumper for winter"},
            {"v": "woodworking", "f": "Built a bookshelf in the garage workshop this weekend"},
            {"v": "salsa", "f": "Salsa class on Thursday nights, getting better at turns"},
            {"v": "photography", "f": "Bought a second-hand film camera, shooting street photos"},
            {"v": "gardening", "f": "The tomatoes in the allotment are finally ripening"},
            {"v": "baking", "f": "Fed my sourdough starter and baked two loaves"},
            {"v": "cello", "f": "Practised the cello for an hour, the Bach suite is hard"},
            {"v": "watercolours", "f": "Painted the harbour in watercolours this afternoon"},
            {"v": "board games", "f": "Hosted a board game night, six hours of Catan"},
            {"v": "sewing", "f": "Made my first dress on the sewing machine"},
        ],
        "first": ["{f}"],
        "third": ["{who} enjoys {v} in their spare time.", "{whos} hobby is {v}."],
        "questions": [
            "What does {p} do to unwind?",
            "How does {p} like to spend a free afternoon?",
            "What pastimes keep {p} busy?",
            "What is {p} into outside of work?",
        ],
    },
    "car": {
        "values": [
            {"v": "red Mazda 3"},
            {"v": "old Volvo estate"},
            {"v": "Tesla Model Y"},
            {"v": "Toyota Prius"},
            {"v": "VW Golf"},
            {"v": "Fiat 500"},
            {"v": "Ford Ranger"},
            {"v": "Honda Jazz"},
            {"v": "Skoda Octavia"},
            {"v": "Mini Cooper"},
        ],
        "first": [
            "Finally paid off the {v}",
            "The {v} failed its MOT, brakes again",
            "Drove the {v} up to the coast, lovely day",
            "Need new tyres for my {v} before winter",
        ],
        "third": ["{who} drives a {v}.", "{whos} car is a {v}."],
        "questions": [
            "What does {p} drive?",
            "What type of car does {p} own?",
            "What vehicle is parked outside {ps} place?",
            "What make of motor does {p} have?",
        ],
    },
    "sibling": {
        "count": 2,
        "values": [
            {"r": "little brother", "n": "Tom"},
            {"r": "older sister", "n": "Nina"},
            {"r": "twin brother", "n": "Adam"},
            {"r": "big sister", "n": "Julia"},
            {"r": "younger sister", "n": "Maya"},
            {"r": "older brother", "n": "Pavel"},
            {"r": "half-brother", "n": "Leo"},
            {"r": "baby sister", "n": "Rina"},
        ],
        "first": [
            "My {r} {n} is starting university in September",
            "Helped my {r} {n} paint the new flat",
            "Long phone call with my {r} {n} tonight",
        ],
        "third": ["{who} has a {r} named {n}.", "{whos} {r} is called {n}."],
        "questions": [
            "Does {p} have brothers or sisters?",
            "Who did {p} grow up with in the same family?",
            "Tell me about {ps} siblings.",
        ],
    },
    "kids": {
        "values": [
            {"f": "Our son Oscar lost his first tooth today", "v": "a son, Oscar"},
            {"f": "School run with Mia and Theo every morning", "v": "two children, Mia and Theo"},
            {"f": "The twins turn four next week, party planning", "v": "four-year-old twins"},
            {"f": "My daughter Ava just started nursery", "v": "a daughter, Ava"},
            {"f": "Parents' evening for Noor, she's doing great in maths", "v": "a daughter, Noor"},
            {"f": "Took the boys, Ezra and Sami, to the swimming pool", "v": "two sons"},
        ],
        "first": ["{f}"],
        "third": ["{who} has {v}.", "{who} is a parent of {v}."],
        "questions": [
            "Is {p} a mum or dad?",
            "How many little ones does {p} have?",
            "What are the names of {ps} children?",
        ],
    },
    "birthday": {
        "values": [
            {"d": "14 March"},
            {"d": "2 July"},
            {"d": "29 October"},
            {"d": "5 January"},
            {"d": "18 August"},
            {"d": "11 December"},
            {"d": "23 April"},
            {"d": "9 June"},
        ],
        "first": [
            "My birthday is on {d}, thinking about a picnic",
            "Turning 35 on {d}, not ready",
            "Booked a table for my birthday dinner on {d}",
        ],
        "third": ["{whos} birthday is on {d}.", "{who} was born on {d}."],
        "questions": [
            "When does {p} get a year older?",
            "On what day should I send {p} a card and cake?",
            "What's {ps} date of birth?",
        ],
    },
    "food": {
        "values": [
            {"v": "lasagne"},
            {"v": "pad thai"},
            {"v": "ramen"},
            {"v": "jollof rice"},
            {"v": "paella"},
            {"v": "dumplings"},
            {"v": "fish tacos"},
            {"v": "mushroom risotto"},
            {"v": "chicken biryani"},
            {"v": "pierogi"},
        ],
        "first": [
            "Could eat {v} every single day",
            "Nothing beats my mum's {v}",
            "Found the best {v} in town, going back Friday",
        ],
        "third": ["{whos} favourite dish is {v}.", "{who} loves {v} more than any other meal."],
        "questions": [
            "What meal does {p} enjoy most?",
            "What's {ps} go-to comfort food?",
            "If I cook for {p}, what would please them most?",
        ],
    },
    "music": {
        "values": [
            {"v": "Arctic Monkeys", "g": "indie rock"},
            {"v": "Taylor Swift", "g": "pop"},
            {"v": "Miles Davis", "g": "jazz"},
            {"v": "Burna Boy", "g": "afrobeats"},
            {"v": "Radiohead", "g": "alternative rock"},
            {"v": "Bad Bunny", "g": "reggaeton"},
            {"v": "Metallica", "g": "heavy metal"},
            {"v": "Nils Frahm", "g": "ambient piano"},
        ],
        "first": [
            "Got tickets to see {v} in November!",
            "Had {v} on repeat all week",
            "Nothing gets me through a run like {g}",
        ],
        "third": ["{who} is a big fan of {v}.", "{who} mostly listens to {g}."],
        "questions": [
            "What does {p} put on their headphones?",
            "Which artists or bands is {p} keen on?",
            "What sounds does {p} enjoy?",
        ],
    },
    "health": {
        "values": [
            {"v": "type 2 diabetes", "f": "Doctor upped my insulin dose for the diabetes"},
            {"v": "asthma", "f": "Need to refill my inhaler, the asthma is bad in pollen season"},
            {"v": "migraines", "f": "Another migraine, spent the day in a dark room"},
            {"v": "a bad knee", "f": "The physio says my knee needs another six weeks"},
            {"v": "high blood pressure", "f": "Blood pressure pills make me dizzy in the morning"},
            {"v": "coeliac disease", "f": "The gastroenterologist confirmed it is coeliac disease"},
            {"v": "anxiety", "f": "Therapy is helping with the panic attacks"},
        ],
        "first": ["{f}"],
        "third": ["{who} has {v}.", "{who} lives with {v}."],
        "questions": [
            "Does {p} have any ongoing medical conditions?",
            "What illness does {p} manage day to day?",
            "Is there something about {ps} wellbeing I should know?",
        ],
    },
    "travel": {
        "values": [
            {"v": "Japan", "m": "October"},
            {"v": "Iceland", "m": "February"},
            {"v": "Morocco", "m": "April"},
            {"v": "Peru", "m": "August"},
            {"v": "New Zealand", "m": "December"},
            {"v": "Croatia", "m": "June"},
            {"v": "Vietnam", "m": "March"},
            {"v": "Canada", "m": "September"},
        ],
        "first": [
            "Booked flights to {v} for {m}!",
            "Counting down the days until our {v} trip in {m}",
            "Researching hostels in {v} for {m}",
        ],
        "third": ["{who} is planning a trip to {v} in {m}.", "{who} will visit {v} in {m}."],
        "questions": [
            "Where is {p} going on holiday?",
            "Which country is {p} flying to soon?",
            "What's {ps} next getaway destination?",
        ],
    },
    "education": {
        "values": [
            {"v": "a master's in chemistry", "u": "Leeds"},
            {"v": "a history degree", "u": "Trinity College Dublin"},
            {"v": "a PhD in marine biology", "u": "Plymouth"},
            {"v": "an MBA", "u": "INSEAD"},
            {"v": "a nursing diploma", "u": "King's College"},
            {"v": "a computer science degree", "u": "TU Delft"},
            {"v": "a law degree", "u": "Bologna"},
            {"v": "a fine art degree", "u": "Glasgow"},
        ],
        "first": [
            "Graduated with {v} from {u} ages ago",
            "Still paying off the loan for {v} at {u}",
            "Ran into my old tutor from {u}, where I did {v}",
        ],
        "third": ["{who} holds {v} from {u}.", "{who} studied for {v} at {u}."],
        "questions": [
            "What did {p} study?",
            "What's {ps} academic background?",
            "Where did {p} go to university, and for what?",
        ],
    },
    "language": {
        "count": 2,
        "values": [
            {"v": "Spanish"},
            {"v": "Mandarin"},
            {"v": "Portuguese"},
            {"v": "Arabic"},
            {"v": "Japanese"},
            {"v": "German"},
            {"v": "Swahili"},
            {"v": "Italian"},
            {"v": "Korean"},
            {"v": "Polish"},
        ],
        "first": [
            "My Duolingo streak in {v} is at 200 days",
            "Grew up speaking {v} at home with my grandparents",
            "Ordered dinner in {v} without switching to English!",
        ],
        "third": ["{who} speaks {v} fluently.", "{who} is learning {v}."],
        "questions": [
            "Which tongues can {p} converse in?",
            "Can {p} hold a conversation in anything besides English?",
            "What languages does {p} know?",
        ],
    },
    "sport": {
        "values": [
            {"f": "Ran my third half marathon in 1:52", "v": "running"},
            {"f": "Tennis league match tonight, we're top of the table", "v": "tennis"},
            {"f": "Swam 2 km before work, new record", "v": "swimming"},
            {"f": "Five-a-side on Wednesdays, scored twice", "v": "five-a-side football"},
            {"f": "Cycled 80 km with the club on Sunday", "v": "road cycling"},
            {"f": "Got my blue belt in jiu-jitsu", "v": "jiu-jitsu"},
            {"f": "Rowing on the river at 6 am, freezing", "v": "rowing"},
        ],
        "first": ["{f}"],
        "third": ["{who} does {v} every week.", "{whos} sport is {v}."],
        "questions": [
            "How does {p} keep fit?",
            "What exercise does {p} do?",
            "Is {p} part of any team or club for training?",
        ],
    },
    "phone": {
        "values": [
            {"v": "iPhone 13"},
            {"v": "Pixel 7"},
            {"v": "Samsung Galaxy S22"},
            {"v": "Fairphone 4"},
            {"v": "iPhone SE"},
            {"v": "OnePlus 11"},
        ],
        "first": [
            "Cracked the screen on my {v} again",
            "The {v} camera is great for concerts",
            "Upgraded to a {v}, transferring everything took hours",
        ],
        "third": ["{who} uses a {v}.", "{whos} phone is a {v}."],
        "questions": [
            "What mobile does {p} carry?",
            "Which handset does {p} use?",
            "What device does {p} text from?",
        ],
    },
}

# Distractors: they share words with the questions of a kind and answer nothing.
# (kind, first-person text, third-person text)
DISTRACTORS: list[tuple[str, str, str]] = [
    ("car", "My blood type is O negative, found out at the donation centre",
     "{whos} blood type is O negative."),
    ("car", "My brother's car is a Volvo, he keeps offering to sell it to me",
     "{whos} brother drives a Volvo."),
    ("car", "Saw a Tesla with a funny number plate on the way home",
     "{who} saw a Tesla with a funny number plate."),
    ("allergy", "My manager is allergic to nuts so no office cake this year",
     "{whos} manager is allergic to nuts."),
    ("allergy", "Hay fever season for everyone at work, the office sounds like a clinic",
     "{whos} colleagues all have hay fever."),
    ("pet", "The neighbours' dog barks all night, can't sleep",
     "{whos} neighbours have a dog that barks at night."),
    ("pet", "Watched a documentary about elephants, so sad",
     "{who} watched a documentary about elephants."),
    ("travel", "Watched a travel vlog about Japan, looks amazing",
     "{who} watched a travel vlog about Japan."),
    ("city", "Helped my cousin move to Berlin at the weekend",
     "{whos} cousin moved to Berlin."),
    ("partner", "My old school friend just got engaged",
     "{whos} school friend got engaged."),
    ("job", "Work has been crazy this week, too many meetings",
     "{who} has had too many meetings at work."),
    ("job", "My dad was a postman for thirty years",
     "{whos} father was a postman."),
    ("health", "Need to remember to book the dentist",
     "{who} needs to book a dentist appointment."),
    ("kids", "The kids next door play football in the street all evening",
     "{whos} neighbours' kids play football in the street."),
    ("birthday", "Mum's birthday is next Tuesday, need to buy a card",
     "{whos} mother has a birthday next Tuesday."),
    ("phone", "My phone battery dies by lunchtime every day",
     "{whos} phone battery runs out by lunchtime."),
    ("language", "Dad is learning Spanish for his retirement",
     "{whos} father is learning Spanish."),
    ("food", "My sister's favourite food is sushi, booked her a table",
     "{whos} sister's favourite food is sushi."),
    ("music", "The type of music they play at the gym is awful",
     "{who} dislikes the music at the gym."),
    ("sport", "Watched the rugby final at the pub",
     "{who} watched the rugby final at a pub."),
    ("education", "Helping my nephew with his university application",
     "{who} is helping a nephew apply to university."),
    ("employer", "The company that owns our building went bust",
     "{whos} building's owner company went bust."),
    ("hobby", "No free time at all this month, just work and sleep",
     "{who} has had no free time this month."),
    ("diet", "Cooking dinner for eight on Saturday, what a mess the kitchen will be",
     "{who} is cooking dinner for eight guests."),
]  # fmt: skip


def _fill(template: str, value: dict[str, str], who: str, whos: str) -> str:
    fields = dict(value)
    if "v" in fields:
        fields["V"] = fields["v"][:1].upper() + fields["v"][1:]
    text = template.format(who=who, whos=whos, **fields)
    return text[:1].upper() + text[1:]


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def _user(rng: random.Random, index: int, full_name: str) -> dict[str, Any]:
    uid = f"pf{index:02d}"
    first = full_name.split()[0]
    kinds = list(KINDS)
    present = rng.sample(kinds, rng.randint(8, len(kinds) - 4))
    absent = [k for k in kinds if k not in present]
    facts: list[dict[str, Any]] = []
    by_kind: dict[str, list[str]] = {}
    pending: list[tuple[str, str, bool]] = []  # (kind, text, distractor)
    # Third-person summaries name the user ("Priya ...") or say "User"/"The user".
    for kind in present:
        spec = KINDS[kind]
        count = rng.choice([1, 1, 2]) if spec.get("count", 1) == 2 else 1
        for value in rng.sample(spec["values"], count):
            pending.append((kind, json.dumps(value), False))
    total_target = rng.randint(9, 25)
    room = max(9 - len(pending), 2, min(6, total_target - len(pending)))
    chosen = rng.sample(DISTRACTORS, room)
    for kind, first_text, third_text in chosen:
        pending.append((kind, json.dumps({"first": first_text, "third": third_text}), True))
    rng.shuffle(pending)
    pending = pending[:25]
    moment = datetime(2024, 1, 1, 8, 0) + timedelta(days=rng.randint(0, 60))
    for n, (kind, raw, distractor) in enumerate(pending, 1):
        value = json.loads(raw)
        voice = "first" if rng.random() < 0.75 else "third"
        if voice == "third":
            who = first if rng.random() < 0.5 else rng.choice(["User", "The user"])
            whos = _possessive(first) if who == first else "User's"
            if who == "The user":
                whos = "The user's"
        else:
            who = whos = ""
        if distractor:
            template = value["first"] if voice == "first" else value["third"]
            text = _fill(template, {}, who, whos)
        else:
            spec = KINDS[kind]
            template = rng.choice(spec[voice])
            text = _fill(template, value, who, whos)
        fid = f"{uid}f{n:02d}"
        moment += timedelta(days=rng.randint(1, 12), minutes=rng.randint(0, 600))
        facts.append(
            {
                "id": fid,
                "kind": kind,
                "voice": voice,
                "distractor": distractor,
                "text": text,
                "timestamp": moment.strftime("%Y-%m-%dT%H:%M:00+00:00"),
            }
        )
        if not distractor:
            by_kind.setdefault(kind, []).append(fid)
    questions: list[dict[str, Any]] = []
    asked = rng.sample(sorted(by_kind), min(ANSWERABLE_PER_USER, len(by_kind)))
    unasked = rng.sample(absent, 4 if index % 3 == 0 else 3)
    plan = [(k, True) for k in asked] + [(k, False) for k in unasked]
    rng.shuffle(plan)
    for n, (kind, answerable) in enumerate(plan, 1):
        names = rng.random() < 0.5
        p, ps = (first, _possessive(first)) if names else ("the user", "the user's")
        text = rng.choice(KINDS[kind]["questions"]).format(p=p, ps=ps)
        questions.append(
            {
                "id": f"{uid}q{n:02d}",
                "kind": kind,
                "text": text[:1].upper() + text[1:],
                "names_person": names,
                "answerable": answerable,
                "gold": by_kind[kind] if answerable else [],
            }
        )
    return {"id": uid, "name": full_name, "first_name": first, "facts": facts,
            "questions": questions}  # fmt: skip


def generate(seed: int = SEED) -> dict[str, Any]:
    """The data set as a JSON-able dict: a pure function of ``seed``."""
    rng = random.Random(seed)
    names = NAMES[:USERS]
    users = [_user(rng, i, name) for i, name in enumerate(names, 1)]
    return {
        "name": "engramdb-personal-facts",
        "format": 1,
        "seed": seed,
        "generator": "scripts/gen_personal_facts.py",
        "users": users,
    }


def render(seed: int = SEED) -> str:
    """The file's exact text."""
    return json.dumps(generate(seed), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the data file."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
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
    data = generate(args.seed)
    facts = sum(len(u["facts"]) for u in data["users"])
    qs = [q for u in data["users"] for q in u["questions"]]
    answerable = sum(q["answerable"] for q in qs)
    print(
        f"wrote {args.out} ({len(text.encode()):,} bytes): {len(data['users'])} users, "
        f"{facts} facts, {len(qs)} questions ({answerable} answerable)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
