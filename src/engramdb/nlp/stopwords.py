"""Stop words: the function words that carry no search value on their own.

The lists are short on purpose. A keyword index over memories is fused with
vector search, so a missed stop word costs little (BM25 gives it a low idf
anyway), while a content word wrongly listed here can never be found by
keyword. Words that are also common content words or names ("may", "will",
"can", "march", "us" as in the US) are left out of the English list, or
guarded by the acronym rule in :mod:`engramdb.nlp.terms`.

Every list holds case-folded, diacritic-free forms: both the surface form and
the lemma of a token are checked, so inflected auxiliaries ("was", "has")
are caught through their lemmas ("be", "have") as well as directly.

The lists double as the language detector's evidence (see
:func:`engramdb.nlp.terms.detect_language`), which is why each language has
its own set rather than one merged list.
"""

from __future__ import annotations

__all__ = ["CJK_STOP_CHARS", "STOP_WORDS"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# English: articles, pronouns, auxiliaries, prepositions, conjunctions,
# fillers common in chat ("yeah", "okay") and contraction pieces left over
# after splitting at apostrophes ("s", "t", "ll", "re", "ve", "d", "m").
_EN = _words(
    """
    a an the this that these those
    i me my mine myself we us our ours ourselves you your yours yourself yourselves
    he him his himself she her hers herself it its itself they them their theirs
    themselves one
    who whom whose which what whatever whoever whichever
    be am is are was were been being have has had having do does did doing done
    shall should would could might must ought
    not no nor n't never
    and or but if then else so than too very just also only
    of at by for with about against between into through during before after
    above below to from up down in out on off over under again further once
    here there when where why how all any both each few more most other some such
    own same
    as until while because since though although unless whether
    s t d ll m re ve o y
    get got gets getting
    yeah yes yep ok okay oh hey hi hello um uh hmm wow lol haha
    really quite rather pretty much many lot lots
    something anything nothing everything someone anyone everyone somebody
    anybody everybody
    thing things stuff
    """
)

# German, French, Spanish, Italian, Portuguese, Dutch: the languages whose
# lemmatisation is switched on by detection. Articles, pronouns, the commonest
# auxiliaries and prepositions: enough to recognise the language from a
# sentence and to drop the noise.
_DE = _words(
    """
    der die das den dem des ein eine einer einen einem eines
    ich du er sie es wir ihr mich dich sich uns euch mir dir ihm ihnen
    mein meine meinen meinem meiner dein deine sein seine ihre unser unsere
    und oder aber doch denn sondern wenn dass weil ob als wie auch noch schon
    nicht kein keine keinen nur sehr so
    ist sind war waren bin bist seid sein gewesen hat habe hast haben hatte hatten
    wird werden wurde wurden kann konnte muss soll will
    in im an am auf aus bei mit nach von vom zu zum zur uber unter fur gegen ohne
    um durch bis seit vor hinter neben zwischen
    was wer wo wann warum welche welcher dies diese dieser dieses jener
    man hier dort da ja nein
    """
)
_FR = _words(
    """
    le la les un une des du de d l au aux
    je tu il elle nous vous ils elles on me te se moi toi lui leur leurs eux
    mon ma mes ton ta tes son sa ses notre nos votre vos
    ce cet cette ces qui que quoi dont ou
    et mais donc or ni car si comme quand
    ne pas plus jamais rien tres aussi
    est sont etait etaient suis es sommes etes etre ete ai as avons avez ont avait
    avoir fait faire
    dans en sur sous avec pour par sans chez vers entre depuis pendant avant apres
    c j n qu s y
    """
)
_ES = _words(
    """
    el la los las un una unos unas lo al del de
    yo tu el ella nosotros nosotras vosotros ellos ellas usted ustedes
    me te se nos os le les mi mis tu tus su sus nuestro nuestra
    que quien cual cuyo donde cuando como porque
    y e o u pero sino ni si
    no muy tambien ya mas
    es son era eran fue fueron soy eres somos ser estar esta estan estoy estaba
    ha han he has hemos haber habia hay
    en con por para sin sobre entre desde hasta hacia contra
    este esta esto estos estas ese esa eso esos esas
    """
)
_IT = _words(
    """
    il lo la i gli le un uno una del dello della dei degli delle al allo alla ai
    agli alle dal dallo dalla dai dagli dalle nel nello nella nei negli nelle
    io tu lui lei noi voi loro mi ti si ci vi gli ne
    mio mia miei mie tuo tua suo sua nostro nostra vostro vostra
    che chi cui quale dove quando come perche
    e ed o ma se anche non piu molto gia
    e sono era erano sei siamo siete essere stato stata ho hai ha abbiamo avete
    hanno avere aveva
    di a da in con su per tra fra
    questo questa questi queste quello quella
    """
)
_PT = _words(
    """
    o a os as um uma uns umas do da dos das no na nos nas ao aos pelo pela
    eu tu ele ela nos vos eles elas voce voces me te se lhe lhes
    meu minha meus minhas teu tua seu sua seus suas nosso nossa
    que quem qual onde quando como porque
    e ou mas nem se tambem nao muito ja mais
    e sao era eram foi foram sou somos ser estar esta estao estou estava
    tem ter tinha ha havia
    de em com por para sem sobre entre desde ate
    este esta isto esse essa isso aquele aquela
    """
)
_NL = _words(
    """
    de het een der des den
    ik jij je hij zij ze wij we jullie u mij me hem haar ons hen hun zich
    mijn jouw zijn onze uw
    die dat deze dit wie wat welke waar wanneer waarom hoe
    en of maar want dus als omdat dan ook nog al
    niet geen wel zeer heel
    is zijn was waren ben bent heb hebt heeft hebben had hadden wordt worden werd
    kan kon moet wil zal zou
    in op aan bij met naar van voor door over onder uit tot tegen zonder om
    er hier daar
    """
)

STOP_WORDS: dict[str, frozenset[str]] = {
    "en": _EN,
    "de": _DE,
    "fr": _FR,
    "es": _ES,
    "it": _IT,
    "pt": _PT,
    "nl": _NL,
}
"""Stop words per language (ISO 639-1 code), case-folded and diacritic-free."""


# Chinese characters that, standing alone, are grammar rather than content:
# particles, pronouns, the copula, common measure words and prepositions.
# Only single-character index terms are filtered; a bigram containing one of
# them ("我们", "是的") is kept, and its idf sorts out its worth.
CJK_STOP_CHARS: frozenset[str] = frozenset(
    "的了是在我你他她它们这那和与也就都而及着吗呢吧啊呀哦嗯之个把被让给对从到为以于很还又再所得地么"
)
