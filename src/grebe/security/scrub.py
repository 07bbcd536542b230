"""Credentials removed from text built from upstream data, before it reaches a response
or a log line.

An upstream URL may carry `user:password@` or `?api_key=...`; an upstream error body may
echo our request headers (Authorization) back; an exception message may hold either.
`scrub_url` cleans one URL for display; `scrub_text` cleans free text: the userinfo of any
URL in it, query or form parameters named like a credential, bearer/basic tokens, grebe
API keys, and any exact secret values the caller knows (the configured key itself)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from grebe import constants as C

REDACTED = "***"
#: Parameter or header names whose values are credentials.
SENSITIVE_NAME = re.compile(
    r"(?:api[-_]?key|key|token|secret|password|passwd|pwd|sig|signature|auth|"
    r"authorization|credential|access[-_]?key|session)", re.IGNORECASE)
_NAME_VALUE = re.compile(
    r"""(?P<name>\b(?:[\w.-]*[-_.])?(?:api[-_]?key|key|token|secret|password|passwd|pwd|sig|
          signature|auth|authorization|credentials?|session|access[-_]?key)s?)\b
        (?P<sep>["']?\s*[=:]\s*["']?)
        (?P<value>(?:bearer\s+|basic\s+)?[^\s"'&,;}]+)""",
    re.IGNORECASE | re.VERBOSE)
_SCHEME_TOKEN = re.compile(r"\b(?P<scheme>bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}", re.IGNORECASE)
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/\s@]+@", re.IGNORECASE)
_GREBE_KEY = re.compile(re.escape(C.API_KEY_PREFIX) + r"[A-Za-z0-9_-]{8,}")
#: Secrets shorter than this are not searched for as plain text (too many false hits).
MIN_SECRET_LEN = 6


def scrub_url(url: str) -> str:
    """`url` without userinfo and with credential-like query values replaced."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return scrub_text(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = urlencode(
        [(k, REDACTED if SENSITIVE_NAME.search(k) else v)
         for k, v in parse_qsl(parts.query, keep_blank_values=True)],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with every credential it visibly carries replaced by `***`."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_LEN:
            text = text.replace(secret, REDACTED)
    text = _USERINFO.sub(lambda m: m["scheme"], text)
    text = _SCHEME_TOKEN.sub(lambda m: f"{m['scheme']} {REDACTED}", text)
    text = _GREBE_KEY.sub(REDACTED, text)
    return _NAME_VALUE.sub(
        lambda m: m["name"] + m["sep"] + (
            m["value"] if m["value"] == REDACTED or m["value"].endswith(REDACTED)
            else REDACTED),
        text)


class ScrubFilter(logging.Filter):
    """Rewrites each record's message through `scrub_text`: httpx logs every request's
    full URL (userinfo and query included) at INFO, and exception messages may carry
    upstream text."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = scrub_text(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        return True


_FILTER = ScrubFilter()
#: Loggers that log upstream URLs themselves; filtered at the source, whatever handler.
URL_LOGGERS = ("httpx", "httpcore")


def install_log_scrubbing() -> None:
    """Scrub the URL-logging libraries' records and everything the root handlers emit
    (idempotent: call it after logging is configured)."""
    for name in URL_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    for handler in logging.getLogger().handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
