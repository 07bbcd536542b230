"""The language of a post, and whether a text model may judge it.

Every model that reads text was trained on some languages only; outside them its scores
are noise (the English-trained spam head gave benign Japanese and Dutch posts 0.9). So
each post's language is detected once (per payload, memoised) and stored in every
annotation, and a model whose languages do not include it **abstains** with the reason
`unsupported_language` instead of guessing: it yields no label and no action.

Short texts make language id unreliable ("lol ok" -> Volapük 0.11; "I hate how
Christmas music starts in October" -> Nigerian Pidgin 0.54). A post whose words are
almost all English words (grebe.flows.english_words) is English whatever the detector
guessed. A guess below `plans.language.min_confidence`, or from fewer than
`min_letters` letters, is *unknown*:
the models still score the post (most short posts on an English platform are English,
and dropping them would blind spam detection to "click here http://..."), but the
policy never takes a remove or limit action on a post of unknown language
(`RESTRICTIVE_ACTIONS` are capped to a label). An unknown text whose letters are mostly
in a script other than Latin ("挺好的", "Как дела?") is no language a Latin-script model
was trained on, however short: such a model abstains on it (the English spam head read
682 of 3,000 short benign non-English chat lines as spam). A declared `post.lang` is
trusted.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from grebe.core.task import TaskContext
from grebe.flows import english_words
from grebe.flows.services import first
from grebe.flows.shared import digest, shared

KEY_LANG_GUESS = "lang_guess"
SOURCE_DECLARED = "declared"
SOURCE_NONE = "no detector"
UNKNOWN = "und"  # ISO 639-2 "undetermined", the score key for unknown languages
SCORE_PREFIX = "lang:"
REASON_KEY = "language"
ABSTAIN_REASON = "unsupported_language"
LABEL_ABSTAIN = "abstain"  # a plan's text models abstained: no verdict on this post
ENGLISH = "en"
#: A post is English when at least this share of its words (and MIN_WORDS of them) are
#: English dictionary words, whatever the detector guessed: on real tweets every
#: non-English post the detector found scored 0.50 or less, English ones 0.75 to 1.0
#: (docs/annotations.md).
ENGLISH_SHARE = 0.8
MIN_WORDS = 4
#: The languages the pre-heads text models (the spam head, alt-profanity-check,
#: HateSonar) were trained and evaluated on.
LEGACY_TEXT_LANGUAGES: tuple[str, ...] = ("en",)
#: Languages written in the Latin script (ISO 639-1), for the script rule above.
LATIN_SCRIPT = frozenset({
    "af", "ca", "cs", "cy", "da", "de", "en", "eo", "es", "et", "eu", "fi", "fr", "ga", "gl",
    "hr", "hu", "id", "is", "it", "lt", "lv", "ms", "mt", "nl", "no", "pl", "pt", "ro", "sk",
    "sl", "sq", "sv", "sw", "tl", "tr", "vi", "yo"})
#: Latin letters: ASCII, Latin-1, Latin Extended-A/B and Additional (accents, "ß", "ł")
LATIN_LETTER = re.compile(r"[A-Za-z\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u024F\u1E00-\u1EFF]")


@dataclass(frozen=True, slots=True)
class LanguageGuess:
    code: str | None  # None: unknown (no text, low confidence, too short, no detector)
    confidence: float
    source: str  # "declared", the detector's name, or "no detector"
    top: str | None = None  # the detector's best guess, even when not trusted
    note: str = ""  # why the guess is unknown
    latin: bool = True  # most letters are Latin (an unknown non-Latin text is no Latin language)

    def describe(self) -> str:
        if self.code is not None:
            return f"{self.code} {self.confidence:.2f} ({self.source})"
        return f"unknown: {self.note} ({self.source})"


def _letters(text: str) -> int:
    return sum(map(str.isalpha, text))  # a C loop: ~4x a generator's speed


def _mostly_latin(text: str, letters: int) -> bool:
    return 2 * len(LATIN_LETTER.findall(text)) >= letters


async def guess(ctx: TaskContext) -> LanguageGuess:
    """The post's language, computed once per payload (every plan of it shares it)."""
    post = ctx.payload.post
    if post.lang:
        return LanguageGuess(post.lang, 1.0, SOURCE_DECLARED, post.lang)
    detector = ctx.services.models.language
    if detector is None:
        return LanguageGuess(None, 0.0, SOURCE_NONE, note="language id is switched off")
    rules = ctx.services.settings.language

    async def compute() -> LanguageGuess:
        scores = first(await detector.classify([post.text])) if post.text.strip() else {}
        if not scores:
            return LanguageGuess(None, 0.0, detector.name, note="no letters")
        top = max(scores, key=scores.__getitem__)
        confidence = float(scores[top])
        letters = _letters(post.text)
        if letters < rules.min_letters or confidence < rules.min_confidence:
            note = (f"too short ({letters} letters), top guess {top} {confidence:.2f}"
                    if letters < rules.min_letters else
                    f"top guess {top} {confidence:.2f} < {rules.min_confidence:.2f}")
            latin = _mostly_latin(post.text, letters)
            if not latin:
                note += ", not Latin script"
            return LanguageGuess(None, confidence, detector.name, top, note, latin)
        if top != ENGLISH:  # the detector misreads short English ("... October" -> pcm)
            english, words = english_words.english_share(post.text)
            if words >= MIN_WORDS and english >= ENGLISH_SHARE * words:
                return LanguageGuess(ENGLISH, english / words,
                                     f"{english} of {words} words English; {detector.name} "
                                     f"said {top} {confidence:.2f}", top)
        return LanguageGuess(top, confidence, detector.name, top)

    return await shared(ctx, f"{KEY_LANG_GUESS}:{digest(post.text)}", compute)


async def abstain_reason(ctx: TaskContext, model: str,
                         languages: Collection[str]) -> str | None:
    """None when `model` (trained on `languages`) may judge this post; else why not.
    Unknown languages are judged (see the module docstring): only a confident guess of
    a language the model never saw, or an unknown text in a script none of its
    languages is written in, makes it abstain."""
    found = await guess(ctx)
    if found.code in languages:
        return None
    if found.code is None and (found.latin or not LATIN_SCRIPT.issuperset(languages)):
        return None
    return (f"{ABSTAIN_REASON}: {found.describe()}; {model} covers "
            f"{', '.join(sorted(languages))}")


async def local_abstain(ctx: TaskContext, model: str,
                        languages: Collection[str] = LEGACY_TEXT_LANGUAGES) -> str | None:
    """abstain_reason for a plan's local models; a plan on the chat model (multilingual,
    asked in the post's own words) never abstains here."""
    if ctx.services.settings.backend(ctx.plan) == "llm":
        return None
    return await abstain_reason(ctx, model, languages)


async def record(ctx: TaskContext) -> LanguageGuess:
    """Write the guess into the plan's output: score `lang:<code>` and reason `language`."""
    found = await guess(ctx)
    ctx.output.scores[f"{SCORE_PREFIX}{found.code or UNKNOWN}"] = round(found.confidence, 4)
    ctx.output.reasons[REASON_KEY] = found.describe()
    if ctx.services.models.language is not None and found.source != SOURCE_DECLARED:
        ctx.output.model_versions["language"] = ctx.services.models.language.name
    return found
