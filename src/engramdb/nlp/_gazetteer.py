"""Small word lists that let the entity rules tell a person from a place.

Only the commonest entries: a list cannot be complete, and every miss still
becomes an entity of type THING, which links memories just as well. All
entries are case-folded.
"""

from __future__ import annotations

__all__ = [
    "COMMON_STARTERS",
    "FIRST_NAMES",
    "ORG_WORDS",
    "PLACES",
    "PLACE_WORDS",
    "TITLES",
]


def _lines(text: str) -> frozenset[str]:
    """One entry per comma-separated item (entries may contain spaces)."""
    return frozenset(item.strip() for item in text.replace("\n", ",").split(",") if item.strip())


PLACES = _lines(
    """
    afghanistan, albania, algeria, andorra, angola, argentina, armenia, australia, austria,
    azerbaijan, bahamas, bahrain, bangladesh, barbados, belarus, belgium, belize, benin,
    bhutan, bolivia, bosnia, botswana, brazil, brunei, bulgaria, burkina faso, burundi,
    cambodia, cameroon, canada, chad, chile, china, colombia, congo, costa rica, croatia,
    cuba, cyprus, czechia, czech republic, denmark, djibouti, dominican republic, ecuador,
    egypt, el salvador, england, eritrea, estonia, eswatini, ethiopia, fiji, finland,
    france, gabon, gambia, georgia, germany, ghana, greece, grenada, guatemala, guinea,
    guyana, haiti, honduras, hong kong, hungary, iceland, india, indonesia, iran, iraq,
    ireland, israel, italy, ivory coast, jamaica, japan, jordan, kazakhstan, kenya, korea,
    south korea, north korea, kosovo, kuwait, kyrgyzstan, laos, latvia, lebanon, lesotho,
    liberia, libya, liechtenstein, lithuania, luxembourg, madagascar, malawi, malaysia,
    maldives, mali, malta, mauritania, mauritius, mexico, moldova, monaco, mongolia,
    montenegro, morocco, mozambique, myanmar, namibia, nepal, netherlands, holland,
    new zealand, nicaragua, niger, nigeria, north macedonia, norway, oman, pakistan, palestine,
    panama, papua new guinea, paraguay, peru, philippines, poland, portugal, puerto rico,
    qatar, romania, russia, rwanda, samoa, san marino, saudi arabia, scotland, senegal,
    serbia, seychelles, sierra leone, singapore, slovakia, slovenia, somalia, south africa,
    spain, sri lanka, sudan, suriname, sweden, switzerland, syria, taiwan, tajikistan,
    tanzania, thailand, tibet, togo, tonga, trinidad, tunisia, turkey, turkmenistan, uganda,
    ukraine, united arab emirates, uae, united kingdom, uk, great britain, britain,
    united states, usa, america, uruguay, uzbekistan, vatican, venezuela, vietnam, wales,
    yemen, zambia, zimbabwe,
    europe, asia, africa, north america, south america, latin america, antarctica, oceania,
    middle east, scandinavia, caribbean, the bahamas, hawaii, alaska,
    alabama, arizona, arkansas, california, colorado, connecticut, delaware, florida,
    idaho, illinois, indiana, iowa, kansas, kentucky, louisiana, maine, maryland,
    massachusetts, michigan, minnesota, mississippi, missouri, montana, nebraska, nevada,
    new hampshire, new jersey, new mexico, new york, north carolina, north dakota, ohio,
    oklahoma, oregon, pennsylvania, rhode island, south carolina, south dakota, tennessee,
    texas, utah, vermont, virginia, washington, west virginia, wisconsin, wyoming,
    ontario, quebec, british columbia, alberta, bavaria, catalonia, tuscany, provence,
    london, paris, berlin, madrid, barcelona, rome, milan, venice, florence, naples,
    lisbon, porto, amsterdam, brussels, vienna, prague, budapest, warsaw, krakow, munich,
    hamburg, frankfurt, cologne, zurich, geneva, stockholm, oslo, copenhagen, helsinki,
    dublin, edinburgh, glasgow, manchester, liverpool, athens, istanbul, moscow,
    kyiv, kiev, tokyo, kyoto, osaka, beijing, shanghai, shenzhen, guangzhou, seoul, taipei,
    bangkok, hanoi, manila, jakarta, bali, mumbai, delhi, new delhi, bangalore, dubai,
    cairo, nairobi, lagos, cape town, johannesburg, sydney, melbourne, brisbane, perth,
    auckland, toronto, vancouver, montreal, ottawa, mexico city, havana, rio de janeiro,
    sao paulo, buenos aires, lima, bogota, santiago, new york city, nyc, los angeles,
    san francisco, san diego, seattle, portland, chicago, boston, miami, orlando, atlanta,
    dallas, houston, austin, denver, phoenix, las vegas, philadelphia, detroit,
    nashville, new orleans, minneapolis, pittsburgh, baltimore, honolulu, brooklyn,
    manhattan, queens, the bronx, hollywood, silicon valley, yosemite, yellowstone,
    grand canyon, niagara falls, mount everest, everest, the alps, alps, the rockies,
    rocky mountains, sahara, amazon rainforest, mediterranean, pacific, atlantic
    """
)

# Words that end the name of a place: "Central Park", "Lake Tahoe" (first
# word), "Golden Gate Bridge". Checked against the last or the first word.
PLACE_WORDS = _lines(
    """
    city, town, village, county, state, province, island, islands, beach, bay, lake,
    river, mountain, mountains, mount, mt, hill, hills, valley, canyon, falls, forest,
    park, national park, garden, gardens, street, st, avenue, ave, road, rd, boulevard,
    blvd, lane, square, plaza, bridge, tower, airport, station, harbor, harbour, port,
    coast, desert, peninsula, ocean, sea, trail, zoo, museum, gallery, cathedral, church,
    temple, palace, castle, stadium, arena, mall, market, cafe, restaurant, hotel, resort
    """
)

ORG_WORDS = _lines(
    """
    inc, inc., corp, corp., corporation, company, co, co., ltd, llc, plc, gmbh, ag, group,
    university, college, school, academy, institute, institution, foundation, association,
    society, club, league, union, council, committee, department, ministry, agency, bureau,
    bank, hospital, clinic, center, centre, church, charity, network, studio, studios,
    records, labs, lab, team, fc, party, organization, organisation, shelter, services
    """
)

# Words that name a person when they stand right before a name.
TITLES = _lines(
    """
    mr, mrs, ms, miss, mx, dr, prof, professor, sir, dame, aunt, auntie, uncle,
    grandma, grandpa, granny, cousin, coach, captain, saint, st
    """
)

# Capitalised only because they open a sentence or a greeting; never a name
# on their own at the start.
COMMON_STARTERS = _lines(
    """
    hey, hi, hello, hiya, yo, dear, thanks, thank, congrats, congratulations, sorry, bye,
    goodbye, wow, whoa, woah, aww, awww, omg, lol, haha, hahaha, hehe, yay, ugh, hmm, oops,
    yeah, yep, yup, nope, ok, okay, oh, ah, well, sure, absolutely, definitely, totally,
    exactly, indeed, great, awesome, amazing, cool, nice, good, glad, happy, love, sounds,
    speaking, anyway, btw, by, also, just, so, and, but, or, not, yes, no, please, today,
    yesterday, tomorrow, tonight, recently, lately, last, next, this, that, these, those,
    here, there, what, when, where, why, how, who, which, did, do, does, is, are, was,
    were, have, has, had, can, could, would, will, should, may, might, must, let, let's,
    i, i'm, i've, i'd, i'll, my, we, our, you, your, it, its, it's, that's, there's,
    he, she, they, his, her, their, the, a, an, in, on, at, for, with, from, to, of,
    as, if, after, before, since, while, once, both, all, some, any, every, each, one,
    happy birthday, merry christmas, good morning, good night, take, keep, check,
    enjoy, look, see, hope, guess, maybe, probably, actually, honestly, seriously, really,
    true, right, agreed, same, me, mine, mom, dad, mum, god, jesus, ma'am,
    gonna, wanna, gotta, kinda, sorta, woohoo, woo, yay, yeah, mmm, mm, hmm, nah, gotcha,
    phew, yikes, cheers, kudos, fyi, btw, aha, ahh, ha, heh, hah, ooh, whoa, welp, bravo
    """
)

# Common English given names (a few hundred): enough to type the people of
# everyday conversation; any other name is still found, as THING.
FIRST_NAMES = _lines(
    """
    aaron, abby, abigail, adam, adrian, aiden, alan, albert, alex, alexa, alexander,
    alexandra, alice, alicia, alison, allison, amanda, amber, amelia, amy, andrea, andrew,
    andy, angela, anna, anne, annie, anthony, april, ariana, ashley, audrey, austin, ava,
    barbara, ben, benjamin, beth, betty, bill, billy, bob, bobby, brad, bradley, brandon,
    brenda, brian, brittany, brooke, bruce, bryan, caleb, calvin, cameron, carl, carlos,
    carol, caroline, carter, catherine, charles, charlie, charlotte, chloe, chris,
    christian, christina, christine, christopher, cindy, claire, clara, daisy, dan, daniel,
    danielle, david, dave, deborah, debbie, dennis, derek, diana, diane, dominic, donald,
    donna, dorothy, dylan, ed, eddie, edward, eleanor, elena, eli, elijah, elizabeth,
    ella, ellie, emily, emma, eric, erica, erin, ethan, eva, evan, evelyn, frank, fred,
    gabriel, gabriella, gary, george, gina, grace, greg, gregory, hailey, hannah, harold,
    harry, heather, helen, henry, holly, ian, isaac, isabel, isabella, jack, jackson,
    jacob, jake, james, jamie, jane, janet, jason, jasmine, jeff, jeffrey, jen, jenna,
    jennifer, jenny, jeremy, jerry, jess, jessica, jim, jimmy, joan, joanna, joe, joel,
    john, johnny, jon, jonathan, jordan, jose, joseph, josh, joshua, joy, joyce, juan,
    judy, julia, julian, julie, justin, karen, kate, katherine, kathy, katie, kayla,
    keith, kelly, ken, kevin, kim, kimberly, kyle, laura, lauren, leah, leo, liam, lily,
    linda, lisa, logan, lucas, lucy, luis, luke, lydia, madison, maria, marie, mark,
    martha, martin, mary, mason, matt, matthew, max, megan, mel, melanie, melissa, mia,
    michael, michelle, mike, mila, molly, nancy, naomi, natalie, nate, nathan, nicholas,
    nick, nicole, noah, nora, olivia, oliver, oscar, owen, pam, patricia, patrick, paul,
    peter, phil, philip, rachel, ralph, randy, rebecca, richard, rick, riley, rob, robert,
    roger, ron, ronald, rose, ruby, russell, ruth, ryan, sam, samantha, samuel, sara,
    sarah, scott, sean, sebastian, sophia, sophie, stephanie, stephen, steve, steven,
    susan, taylor, teresa, terry, thomas, tim, timothy, tina, todd, tom, tommy, tony,
    tracy, tyler, valerie, victoria, vincent, walter, wayne, william, zach, zoe,
    jolene, joanne, maya, priya, raj, ahmed, ali, mohammed, muhammad, fatima, yuki, wei,
    li, chen, hiroshi, kenji, sofia, lucia, mateo, diego, pierre, marie, hans, klaus,
    giulia, marco, ivan, olga, anya
    """
)
