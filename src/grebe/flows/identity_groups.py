"""Does a text name an identity group (people by race, ethnicity, nationality, religion,
gender, sexuality or disability)? The second signal that lets the hate head's verdict
stand when the target head reads a post as aimed at a person.

Why: the target head learnt from OLID's offensive tweets, which are mostly about one
person, so it reads short group hate ("black people are subhuman") as aimed at an
individual and the hate verdict was dropped (docs/quality.md, "Identity hate"). Naming a
group is not hate by itself ("women's football was great today" has a low hate score);
it only answers *who* the hateful words are about, which is what the target rule asks.
One member named by identity counts too ("a black person", "a Muslim", "an immigrant"):
"I will shoot the next gay man I see" is about the group whatever the target head reads
(docs/quality.md, "A member names the group"), and so does a group adjective before a
word that dehumanises ("Muslim trash", "female vermin") and a group's lives ("gay lives
are worth nothing"). Slurs are left out: a slur names a group too, but reclaimed and
homonym uses ("I'm a proud ...") are common, and the target head already reads slurs as
aimed at a group.
"""

from __future__ import annotations

import re

#: group nouns, plural or collective ("immigrants", "the jews", "muslim women")
_NOUNS = (
    r"women|woman|girls|females|men|males|blacks|whites|asians|latinos|latinas|latinx"
    r"|hispanics|mexicans|africans|arabs|indians|pakistanis|chinese|japanese|koreans"
    r"|jews|jewry|muslims|moslems|islamists|christians|catholics|hindus|sikhs|buddhists"
    r"|atheists|immigrants|migrants|refugees|foreigners|illegals|aliens|gays|lesbians"
    r"|homosexuals|queers|bisexuals|transgenders?|trans|transsexuals|gypsies|roma"
    r"|disabled|handicapped|cripples|autistics|feminists"
)
#: adjectives that make a group with "people", "folk", "community"...
_ADJECTIVES = (
    r"black|white|asian|brown|latino|hispanic|mexican|african|arab|indian|chinese|jewish"
    r"|muslim|islamic|christian|catholic|hindu|gay|lesbian|queer|trans|transgender"
    r"|bisexual|disabled|autistic|deaf|blind|immigrant|foreign|female|indigenous|native"
)
GROUP = re.compile(
    rf"(?<![\w@#])(?:(?:{_ADJECTIVES})\s+(?:people|persons|folks?|community|communities|men"
    rf"|women|kids|children|immigrants|refugees|families|race|guys|girls|lives)|islam|judaism"
    rf"|(?:{_NOUNS}))(?!\w)",
    re.IGNORECASE)
#: one member: a group adjective before a person noun, or a determiner before a noun
#: that names a person by identity (words mostly said as adjectives, "gay", "christian",
#: "mexican", are left to the first form: "a gay bar", "a mexican restaurant" name no one)
MEMBER = re.compile(
    rf"(?<![\w@#])(?:(?:{_ADJECTIVES})\s{{1,3}}(?:person|man|woman|guy|lady"
    r"|immigrant|refugee|family|neighbou?r"
    r"|trash|scum|vermin|filth|garbage|rats?|pigs?|parasites?|cockroach(?:es)?|savages?"
    r"|animals?|apes?|monkeys?|subhumans?)"
    r"|(?:an?|the|that|this|every|any|some|one|no)\s{1,3}(?:muslim|moslem|jew|immigrant|migrant"
    r"|refugee|foreigner|homosexual|transsexual|cripple|hindu|sikh|atheist|feminist))(?!\w)",
    re.IGNORECASE)
#: one group adjective on its own ("gay", "muslim"): a word a spelling may hide
ADJECTIVE = re.compile(rf"(?:{_ADJECTIVES})", re.IGNORECASE)


def names_group(text: str) -> str | None:
    """The first identity group the text names (or a member it names by identity),
    lower-cased, or None."""
    found = GROUP.search(text) or MEMBER.search(text)
    return None if found is None else found.group(0).lower()
