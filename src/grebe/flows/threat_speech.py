"""Does a text state an intent or a call to do violence to someone? The second signal of
the `threat` verdict (grebe.flows.judge).

Why a grammar beside the threat head: the head learnt from words, so it fires on
hyperbole ("that workout killed me", "this crossword will be the death of me") and misses
threats in plain words ("I will find where you live and make you pay"). What makes a
threat is its shape, which a word list cannot see:

- **intent**: the speaker (I, we) will, is going to or swears to do harm (a violent verb)
  to someone (you, him, them, your house...): "I'm going to burn your house down";
- **menace**: the addressee's fate or exposure: "you're dead", "watch your back", "I know
  where your kids go to school", "your days are numbered";
- **call**: violence demanded of or for others: "they should all be hanged", "kill them
  all", "death to ...", "someone should shoot him";
- **execution**: a call for an execution ("hang them for treason", "firing squad").

Each pattern needs at least two parts (a violent act and who it is done to, or a fate
and whose), never one word. What it does not know: sarcasm, quotation, games that go unnamed
("we'll destroy them tonight"; a named one, "I'll kill you at chess", is GAME); that is
why the verdict still weighs the head's score.
"""

from __future__ import annotations

import re

#: people a call for violence names by role ("that senator", "the judge", "this cop")
_PERSON = (r"(?:the|that|this|those|these)\s+(?:\w+\s+)?(?:senators?|president|politicians?"
           r"|judges?|cops?|officers?|mayor|governor|ministers?|journalists?|reporters?"
           r"|teachers?|guys?|man|men|woman|women|girls?|boys?|bitch(?:es)?|bastards?"
           r"|traitors?|leaders?|congress(?:wo)?man|lawmakers?|candidates?|prime\s+minister)")
_TARGET = (rf"(?:you|ya|u|y'?all|your|yours|yourself|him|her|his|them|their|these|those"
           rf"|{_PERSON}|every\s+(?:one|last|single)|all\s+of)")
#: violent acts done to someone (base form: they follow "will" / "going to")
_HARM = (r"(?:kill|murder|shoot|stab|hurt|beat|break|burn|hang|lynch|slit|strangle|choke"
         r"|bury|punch|smash|slap|rape|torture|butcher|slaughter|execute|behead|gut|skin"
         r"|bash|kick|cut|maim|firebomb|bomb|cripple|knock|blow|drown|gas|exterminate|eliminate"
         r"|destroy|end|wreck|fuck\s+up|beat\s+up|run\s+over|hunt|track"
         r"|come\s+(?:for|after)|find|make)")
#: the speaker's intent or wish: "I will", "we're going to", "I'm gonna", "I swear I'll",
#: "I want to", "I wish I could"
_INTENT = (r"(?:\bill(?=\s+\w+\s+\w)|\b(?:i|we)\s*(?:'ll|'m\s+going\s+to|'m\s+gonna"
           r"|'re\s+going\s+to|'re\s+gonna"
           r"|\s+will|\s+shall|\s+am\s+going\s+to|\s+am\s+gonna|\s+are\s+going\s+to"
           r"|\s+are\s+gonna|\s+gonna|\s+intend\s+to|\s+plan\s+to|\s+want\s+to|\s+wanna"
           r"|'d\s+love\s+to|\s+would\s+love\s+to|\s+wish\s+(?:i|we)\s+could))")
#: what "find"/"make" must be followed by to be a threat ("I'll find you a seat" is not)
_FIND_MAKE = (r"(?:find\s+(?:where\s+(?:you|u)\s+live|you\s+and|you\b[^.!?]{0,20}\b(?:kill|hurt"
              r"|end|make))|find\s+out\s+where\s+you\s+live"
              r"|make\s+(?:you|u|him|her|them)\s+(?:pay|suffer|bleed|regret|beg|scream|disappear)"
              r"|make\s+sure\s+(?:you|u|he|she|they)\s+(?:never|don't|won't|can't|cannot)\s+"
              r"(?:walk|breathe|wake\s+up|live|see\s+(?:tomorrow|another\s+day|daylight))\b)")
INTENT = re.compile(
    rf"{_INTENT}\s+(?!not\b|never\b)(?:\w+\s+){{0,3}}?"
    rf"(?:{_FIND_MAKE}|(?!find\b|make\b){_HARM}\b(?!\s+(?:it|this|that)\b)"
    rf"[^.!?\n]{{0,40}}?\b{_TARGET}\b"
    rf"|(?:put|pump)\s+(?:a\s+|some\s+)?(?:bullets?|lead|knife|blade)\b"
    rf"|(?:shoot\s+up|bomb|blow\s+up|burn\s+down|torch)\s+(?:the|this|that|your|a|our|my)\s+"
    rf"(?:\w+\s+)?(?:school|church|mosque|synagogue|temple|mall|office|building|house|home"
    rf"|place|store|club|station|party|concert|campus|class|event))"
    rf"|\b(?:i'?m|i\s+am|we'?re|we\s+are)\s+(?:coming|gunning)\s+(?:for|after)\s+"
    rf"(?:you|u|him|her|them|your|ya|y'?all)\b",
    re.IGNORECASE)
MENACE = re.compile(
    r"(?<!when\s)(?<!if\s)(?<!until\s)(?<!once\s)(?<!after\s)"
    r"\b(?:you|u)\s*(?:'re|\s+are|\s+r)\s+(?:so\s+)?dead\b(?!\s+(?:wrong|right|on|tired|serious))"
    r"|\b(?:you|u)\s*(?:'re|\s+are)\s+(?:going\s+to|gonna)\s+(?:die|bleed|pay\s+for|regret\s+(?:this"
    r"|it|that|the\s+day))\b"
    r"|\b(?:you|u)\s*(?:'ll|\s+will)\s+(?:die|bleed|pay\s+for\s+(?:this|that|it|what)"
    r"|regret\s+(?:this|it|that|the\s+day)|be\s+sorry|be\s+next)\b"
    r"|\b(?:you|u)\s*(?:'re|\s+are)\s+next\b(?!\s+(?:in|up|on|to|for|at|after|week|time))"
    r"|\bwatch\s+(?:your|ur)\s+back\b",
    re.IGNORECASE)
#: Menaces that name what will be done or where the speaker will find the addressee
#: ("I know where your kids go to school", "you won't make it home", "your family will
#: pay"): no everyday sense, and no violent word for the head to read (the ThreatGram head
#: scores "I know where you live" 0.14), so the shape alone is the threat.
EXPOSURE = re.compile(
    r"\b(?:i|we)\s+know\s+where\s+(?:you|u|your\s+\w+|ur\s+\w+|he|she|they)\s+(?:live|lives"
    r"|work|works|sleep|sleeps|go\s+to\s+school|goes\s+to\s+school)\b"
    r"|\bfind\s+(?:out\s+)?where\s+(?:you|u)\s+live\b"
    r"|\b(?:your|ur)\s+days\s+are\s+numbered\b|\bsleep\s+with\s+one\s+eye\s+open\b"
    r"|\b(?:you|u)\s+(?:won't|will\s+not|wont)\s+(?:live|survive|see\s+tomorrow|make\s+it"
    r"\s+home)\b"
    r"|\b(?:you|u)\s*(?:'re|\s+are)\s+(?:going\s+to|gonna)\s+get\s+(?:hurt|shot|stabbed|killed)\b"
    r"|\b(?:you|u)\s*(?:'ll|\s+will)\s+(?:never\s+see\s+(?:it|me)\s+coming|not\s+live"
    r"|end\s+up\s+(?:dead|in\s+a\s+(?:ditch|body\s+bag|coffin|grave)|in\s+(?:the\s+)?hospital))\b"
    r"|\byour\s+(?:family|kids|children|wife|husband|mom|mother|dad|father|friends)\s+"
    r"(?:will|'ll|is\s+going\s+to|are\s+going\s+to|are\s+gonna|is\s+gonna)\s+"
    r"(?:pay|suffer|bleed|die|be\s+next)\b",
    re.IGNORECASE)
_DONE_TO = (r"(?:killed|shot|hanged|hung|executed|lynched|murdered|burn(?:ed|t)(?:\s+alive)?"
            r"|gassed|exterminated|wiped\s+out|eradicated|slaughtered|beheaded|put\s+down"
            r"|beaten(?:\s+to\s+death)?|stabbed|tortured|shot\s+dead|strung\s+up)")
CALL = re.compile(
    rf"(?<!n't\s)(?<!not\s)(?<!never\s)"
    rf"\b(?:should|must|need\s+to|needs\s+to|deserve\s+to|deserves\s+to|ought\s+to"
    rf"|have\s+to|has\s+to|gotta)\s+(?:all\s+|just\s+|simply\s+)?(?:be\s+|get\s+)"
    rf"(?:mass\s+|publicly\s+|\w+\s+and\s+)?{_DONE_TO}\b"
    rf"|(?:^|[.!?,;:]\s*|\b(?:just|let'?s|lets|go|someone\s+(?:should|needs\s+to|has\s+to)"
    rf"|somebody\s+(?:should|needs\s+to)|we\s+(?:should|must|need\s+to|have\s+to))\s+)"
    rf"(?:kill|hang|shoot|gas|exterminate|lynch|execute|behead|slaughter|murder|burn|stab)"
    rf"\s+(?:them|him|her|those|these|all|every|the\s+lot|{_PERSON})\b"
    rf"(?!\s+(?:a|an)\s+(?:message|text|dm|line))"
    rf"|(?:^|[.!?,;:]\s*|\b(?:just|let'?s|lets|go)\s+)(?:hang|lynch|execute|behead|gas"
    rf"|exterminate|slaughter|murder|stab)\s+(?:the|this|that|these|those|every|all|his|her"
    rf"|their)\b(?!\s+(?:thought|idea|picture|painting|poster|laundry|clothes|washing))"
    rf"|\bput\s+(?:a\s+)?bullets?\s+(?:in|into|through|between)\b"
    rf"|\b(?:snap|break|slit|cut)\s+(?:his|her|their|your|ur|its)\s+(?:neck|throat)s?\b"
    rf"|(?<!to\s)(?<!of\s)(?<!every\s)(?<!the\s)(?<!a\s)\bdeath\s+to\s+(?:all\s+|the\s+)?\w+"
    rf"|\b(?:should|must|deserves?\s+to|needs?\s+to|ought\s+to)\s+(?:all\s+)?die\b"
    rf"|\bhope\s+(?:someone|somebody)\s+(?:kills|shoots|stabs|rapes|hurts|beats|murders)\s+"
    rf"(?:you|u|him|her|them)\b"
    rf"|\bhope\s+(?:you|u|he|she|they)\s+(?:die|dies|get\s+(?:killed|shot|raped)"
    rf"|gets\s+(?:killed|shot|raped)|burn|burns)\b",
    re.IGNORECASE)
#: Violence words used of the speaker's own day or self ("that workout killed me", "this
#: heat is killing me", "I'm dying of laughter", "you killed it on stage", "some days I
#: just want to die": self-harm, which has its own category): what the head fires on
#: when no one else is threatened. Only the head's verdict alone is checked against these;
#: a threat-shaped text is judged by its shape.
HYPERBOLE = re.compile(
    r"\b(?:kill|kills|killed|killing|murder|murders|murdered|murdering|slay|slays|slayed"
    r"|slaying)\s+(?:me|myself|it)\b"
    r"|\b(?:the\s+)?death\s+of\s+me\b|\b(?:dying|died)\s+(?:of|from|laughing|inside)\b|\bdead\s+(?:laughing|inside)\b"
    r"|\b(?:i'?m|i\s+am|im)\s+(?:so\s+|literally\s+|actually\s+)?(?:dead|dying)\b"
    r"|\bto\s+die\s+for\b|\bcould\s+(?:kill|murder)\s+(?:for|a)\b"
    r"|\b(?:i|me)\s+(?:\w+\s+){0,2}?(?:want|wanna|wish|need)\s+(?:to\s+)?die\b",
    re.IGNORECASE)
#: Violent verbs in their everyday senses, read from what they are done to: a photo or
#: film shoot ("i have a shoot saturday"), shooting hoops, a photo, a message or the
#: breeze; killing time, a mood or the lights; beating the heat or eggs; blowing up a
#: phone. The threat head trained on ThreatGram reads "shoot" as violence whatever
#: follows it; only the head's verdict alone is checked against these, like HYPERBOLE.
EVERYDAY_SENSE = re.compile(
    r"\b(?:a|the|photo|our|my|video|fashion|film|music\s+video)\s+shoot\b(?!\s+(?:you|him|her|them))"
    r"|\bshoot(?:s|ing)?\s+(?:some\s+|a\s+few\s+|the\s+|a\s+|an\s+|me\s+a\s+|you\s+a\s+)?"
    r"(?:hoops|baskets|pool|breeze|photos?|pictures?|pics|video|videos|films?|footage"
    r"|scenes?|movie|episode|message|e-?mail|text|dm|shot|selfies?|portraits?|wedding)\b"
    r"|\bkill(?:s|ed|ing)?\s+(?:some\s+|the\s+)?(?:time|mood|vibe|lights?|engine|battery"
    r"|buzz|game|set)\b"
    r"|\bbeat(?:s|ing)?\s+(?:the\s+)?(?:heat|traffic|rush|record|odds|eggs|deadline|game|level)\b"
    r"|\bblow(?:s|ing|n)?\s+(?:up\s+(?:my|your|his|her)\s+phone|out\s+(?:the\s+)?candles)\b",
    re.IGNORECASE)
#: A report of violence that happened: a count of victims ("16 shot dead in Chicago",
#: "27 reported deaths"), "found dead", "mass shooting", "death toll". News threatens no
#: one; the threat head reads the violent words (0.4-0.5% of ordinary tweets labelled
#: threat, most of them news, docs/quality.md). Only the head's verdict alone is checked
#: against it, like HYPERBOLE: "shoot them dead, all 20 of them" is threat-shaped.
NEWS = re.compile(
    r"\b(?:\d+|two|three|four|five|six|seven|eight|nine|ten|dozens?|hundreds?|thousands?"
    r"|millions?)\s+(?:[\w-]+\s+){0,3}?(?:dead|killed|shot|injured|wounded|deaths?|died"
    r"|murdered|exterminated|slaughtered)\b"
    r"|\bfound\s+dead\b|\bmass\s+shootings?\b|\breported\s+deaths?\b|\bdeath\s+toll\b",
    re.IGNORECASE)
#: Games and sport, where beating, crushing and killing the other side is how the talk
#: goes ("I will beat you at chess", "we will destroy them in the final", "I'll end you at
#: Mario Kart"): the context, not the verb, says nothing violent is meant. Not Minecraft:
#: "(in Minecraft)" is the joke that covers a real threat (ThreatGram's train split).
GAME = re.compile(
    r"\b(?:at|in|on)\s+(?:the\s+|a\s+|our\s+|tonight'?s\s+|this\s+)?(?:final|finals|semis?"
    r"|semi-?final|game|games|match|matches|rematch|derby|playoffs?|tournament"
    r"|chess|poker|scrabble|monopoly|uno|cards|pool|darts|ping\s*pong|tennis|golf|bowling"
    r"|mario\s*kart|smash|fifa|fortnite|cod|call\s+of\s+duty|halo|trivia|quiz"
    r"|karaoke|beer\s+pong|fantasy(?:\s+football)?)\b"
    r"|\b(?:next|this|on)\s+(?:week|weekend|sunday|saturday|monday|tuesday|wednesday|thursday"
    r"|friday)\b[^.!?]{0,30}\b(?:game|match|final|derby)\b",
    re.IGNORECASE)
#: Calls for an execution, ThreatGram's commonest threat ("hang them all", "firing
#: squad", "to the gallows"): the act itself names the violence, so no target is needed
#: beside the words that only an execution means; "hang" itself needs someone to hang
#: ("hang out", "hang in there", "hang the picture" are not).
EXECUTION = re.compile(
    r"\b(?:firing\s+squads?|gallows|nooses?|guillotines?|public\s+(?:hangings?|executions?)"
    r"|electric\s+chair|get\s+(?:the|a)\s+rope|(?:tree|lamp\s*post)s?\s+and\s+(?:a\s+)?rope)\b"
    r"|\b(?:hang|hanged|hung|execute[ds]?)\s+for\s+(?:treason|sedition|war\s+crimes|crimes)\b"
    r"|\bhang\s+(?:him|her|them|'?em|these|those|every|all)\b"
    r"(?!\s+(?:up|out|on\s+the|in\s+the|around|over))",
    re.IGNORECASE)
#: EXPOSURE first: a text with it is a threat whatever else it matches
PATTERNS = {"exposure": EXPOSURE, "intent": INTENT, "menace": MENACE, "call": CALL,
            "execution": EXECUTION}
#: shapes that are a threat whatever the head reads (EXPOSURE says why)
STANDALONE = ("exposure",)


def _plain(text: str) -> str:
    return text.replace("\u2019", "'")  # typographic apostrophes ("I’ll")


def _words(pattern: re.Pattern[str], text: str) -> str | None:
    """The words of `text` that `pattern` finds, or None."""
    found = pattern.search(_plain(text))
    return None if found is None else found.group(0)


#: Words (lower case) that every match of CALL or MENACE holds. Both patterns start
#: with alternations the regex engine tries at every position of a text (~32 of
#: threat_shape's ~56 us on a bench tweet); a substring search rules most posts out in
#: ~2 us.
NEEDS = {
    "call": ("kill", "hang", "hung", "shoot", "shot", "gas", "extermin", "lynch", "execut",
             "behead", "slaughter", "murder", "burn", "stab", "wiped", "eradicat", "down",
             "beaten", "tortur", "strung", "bullet", "neck", "throat", "death", "die",
             "hope"),
    "menace": ("dead", "die", "bleed", "pay", "regret", "sorry", "next", "watch"),
}


#: The only letters outside ASCII that IGNORECASE matches to ASCII letters, and which
#: ones (test_threat_speech checks every code point): the screen reads them as those.
ASCII_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def threat_shape(text: str) -> str | None:
    """Which threat pattern the text has and its words ("intent: 'I will put a
    bullet'"), or None."""
    text = _plain(text)
    low = (text if text.isascii() else text.translate(ASCII_FOLD)).lower()
    for name, pattern in PATTERNS.items():
        needs = NEEDS.get(name)
        if needs is not None and not any(word in low for word in needs):
            continue  # no match can be there
        found = pattern.search(text)
        if found is not None:
            return f"{name}: {found.group(0).strip()!r}"
    return None


def hyperbole(text: str) -> str | None:
    """The violent idiom the text uses of the speaker's own day, or None."""
    return _words(HYPERBOLE, text)


def game_context(text: str) -> str | None:
    """The game or sport the text's violent talk is about ("at chess"), or None."""
    return _words(GAME, text)


def everyday_sense(text: str) -> str | None:
    """The violent verb the text uses in an everyday sense ("shoot some hoops"), or None."""
    return _words(EVERYDAY_SENSE, text)


def news_report(text: str) -> str | None:
    """The words that report violence that happened ("16 shot dead"), or None."""
    return _words(NEWS, text)


#: The threat head's floor for a threat-shaped text: the shape is one signal, the head
#: (violent words) the second; below this the words are not violent at all ("I'll find
#: you a seat" never gets here, "we will destroy them in the final" may). Chosen on the
#: train/val splits (scripts/threat_rule_eval.py, docs/quality.md).
SHAPED_FLOOR = 0.3


def judge_threat(text: str, score: float, threshold: float,
                 floor: float = SHAPED_FLOOR) -> tuple[bool, str]:
    """Whether a text is a threat given the head's score, and what to add to the head's
    reason ("" when the head's own rule says it all: kept short, every annotation
    stores it): threat-shaped with the head at `floor`, or the head at its threshold
    unless the violence is the speaker's hyperbole, a verb's everyday sense or news; game talk
    ("at chess", "in the final") is never a threat, a menace that exposes the addressee
    always is."""
    shape = threat_shape(text)
    if shape is not None and shape.startswith(STANDALONE):
        return True, f"threat-shaped ({shape})"
    game = game_context(text)
    if game is not None and (shape is not None or score >= threshold):
        return False, f"game talk ({game!r})"
    if shape is not None and score >= floor:
        return True, f"threat-shaped ({shape}), head >= {floor:.2f}"
    if score < threshold:
        return False, f"threat-shaped ({shape}), head < {floor:.2f}" if shape else ""
    idiom = hyperbole(text)
    if idiom is not None:
        return False, f"hyperbole ({idiom!r})"
    sense = everyday_sense(text)
    if sense is not None:
        return False, f"everyday sense ({sense!r})"
    news = news_report(text)
    if news is not None:
        return False, f"news of violence ({news!r})"
    return True, ""
