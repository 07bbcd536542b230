"""Rude words: profanity, slurs and insult words, the lexical signal beside the offensive
head (grebe.flows.judge).

Why: the offensive head reads the embedding of the whole post, and sentence embeddings
put "that workout killed me" or "I smell like a campfire" near offensive tweets. An
`offensive` label means the post *uses* offensive language, so it needs a rude word as
well as the head (two signals); an insult needs an insult word or slur, or to address
someone ("you"): "fuck yes, I passed" is profane but aimed at no one. A word here never
labels a post by itself.

Deliberately left out: words with an ordinary main sense ("ass" in "Kick Ass", "hell",
"bloody", "pig", "fat"), so they cannot make a post offensive on their own account.
"""

from __future__ import annotations

import re

#: profanity, matched as word stems ("fucking", "shitty", "bitches")
PROFANITY = (
    r"f+u+c+k+\w*|fuk\w*|fck\w*|fcuk\w*|f\*+k\w*|f\*+\w*k|motherf\w*|mf|mfs|wtf|stfu|gtfo|omfg|ffs"
    r"|shit\w*|sh\*t\w*|bullshit\w*|horseshit|damn\w*|goddamn\w*|dammit|bitch\w*|b\*tch\w*"
    r"|bastard\w*|asshole\w*|arsehole\w*|dumbass\w*|jackass\w*|smartass\w*|badass\w*"
    r"|dickhead\w*|dick|dicks|cunt\w*|piss\w*|crap|crappy|prick\w*|twat\w*|wanker\w*"
    r"|bollocks|douche\w*|slut\w*|whore\w*|hoe|hoes|tits|cock|cocks|cocksucker\w*"
)
#: words that insult a person ("idiot", "loser", "clown")
INSULTS = (
    r"idiot\w*|moron\w*|stupid\w*|dumb\w*|loser\w*|pathetic|imbecile\w*|cretin\w*|clowns?"
    r"|scum\w*|worthless|ugly|freak\w*|creep\w*|jerks?|cowards?|dimwit\w*|halfwit\w*"
    r"|nitwit\w*|dipshit\w*|retard\w*|brainless|clueless|vermin|subhuman\w*|degenerate\w*"
    r"|punks?|parasites?|leech(?:es)?|inbred|libtards?|fools?|foolish|buffoons?|hypocrites?"
    r"|liars?|lowlifes?|lunatics?|psychos?|psychopaths?|weirdos?|numbskulls?|boneheads?"
    r"|dunces?|airheads?|douche\w*|dirtbags?|sleazebags?|slimeballs?|simpletons?|ignoramus"
    r"|bigots?|snowflakes?|sheeple|wimps?|thugs?|nutjobs?|nutcases?|maniacs?"
)
#: slurs against identity groups (kept short: the hate head carries group hate)
SLURS = (
    r"nigg\w*|nigga\w*|fag\w*|faggot\w*|dyke\w*|tranny|trannies|kike\w*|spic|spics|chink\w*"
    r"|wetback\w*|towelhead\w*|raghead\w*|paki|pakis|gook\w*|coon|coons|beaner\w*"
)
RUDE = re.compile(rf"(?<![\w@#])(?:{PROFANITY}|{INSULTS}|{SLURS})(?!\w)", re.IGNORECASE)
#: an insult word or slur: what aims rudeness at someone without a "you"
INSULTING = re.compile(rf"(?<![\w@#])(?:{INSULTS}|{SLURS})(?!\w)", re.IGNORECASE)
#: the post speaks to someone: "you", "your", "u", "ur", "ya", "yourself"
ADDRESS = re.compile(r"(?<!\w)(?:you|your|you're|youre|yours|yourself|u|ur|ya|y'all)(?!\w)",
                     re.IGNORECASE)


def rude_word(text: str) -> str | None:
    """The first rude word in the text, lower-cased, or None."""
    found = RUDE.search(text)
    return None if found is None else found.group(0).lower()


def insulting_word(text: str) -> str | None:
    """The first insult word or slur in the text (not mere profanity), or None."""
    found = INSULTING.search(text)
    return None if found is None else found.group(0).lower()


#: the speaker's own predicate right before a word: "I'm such a", "I feel utterly", "makes
#: me look like a" (up to four words between, none ending a clause)
_SELF = re.compile(
    r"(?<!\w)(?:i\s*['’]?\s*m|i\s+am|i\s+was|i\s+feel|i\s+felt|i\s+look|i\s+sound"
    r"|makes?\s+me|made\s+me|call\s+me)(?:\s+[^\s.!?;,]+){0,4}?\s+$", re.IGNORECASE)


#: how far before an insult word its "I'm ..." may start, and how many insult words a
#: text may hold and still be read as self-deprecation: each word is one bounded search,
#: so a crafted text of thousands ("I am an idiot " * 10,000) costs no more than 16
SELF_WINDOW = 120
MAX_SELF_WORDS = 16


def said_of_self(text: str) -> bool:
    """Whether every insult word or slur in the text is said by the speaker of themselves
    ("I'm such a retard sometimes", "I feel utterly stupid"): self-deprecation insults no
    one. Text that speaks to someone is never read this way."""
    if addresses_someone(text):
        return False
    found: list[int] = []
    for match in INSULTING.finditer(text):
        if len(found) == MAX_SELF_WORDS:
            return False
        found.append(match.start())
    return bool(found) and all(_SELF.search(text[max(0, at - SELF_WINDOW):at])
                               for at in found)


def addresses_someone(text: str) -> bool:
    """Whether the text speaks to someone in the second person (an @mention alone does
    not count: it is markup, not words)."""
    return ADDRESS.search(text.replace("\u2019", "'")) is not None
