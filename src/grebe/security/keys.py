"""API keys: what a caller presents, what the config stores, how the two are compared.

A key is `grb_<id>_<secret>`: the id says which configured key it claims to be (so the
check is one lookup and one comparison, and logs can name the key without its secret);
the secret is 32 random bytes. The config stores only `sha256(key)` as hex: the secret
is high-entropy, so a fast hash is enough (a slow KDF protects guessable passwords, which
these are not), and a leaked config does not leak a usable key. The digests are compared
with `hmac.compare_digest`, so the time taken does not tell how much of a guess matched.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from grebe import constants as C
from grebe.settings_base import Section

Scope = Literal["api", "feed", "thunder", "debug"]
#: A key made without naming scopes may call every surface, but not ask for debug output.
DEFAULT_SCOPES: tuple[Scope, ...] = ("api", "feed", "thunder")
_KEY_ID = r"^[a-z0-9][a-z0-9-]{0,31}$"
_SHA256_HEX = r"^[0-9a-f]{64}$"


class ApiKey(Section):
    """One configured key: its id, the sha256 of the whole key, and what it may do."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(pattern=_KEY_ID)
    sha256: str = Field(pattern=_SHA256_HEX)
    scopes: tuple[Scope, ...] = DEFAULT_SCOPES


class AuthConfig(Section):
    """The `auth:` config section: the keys every surface (serve, feed-serve, thunder)
    accepts. No keys: only loopback binds are allowed, and they are open."""

    keys: list[ApiKey] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> AuthConfig:
        ids = [k.id for k in self.keys]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"auth key ids must be unique; repeated: {', '.join(repeated)}")
        return self


@dataclass(frozen=True)
class Principal:
    """Who a request is from: a key id, or the anonymous caller of a keyless loopback
    server (which may do everything, debug included: it is the host's own user)."""

    key_id: str | None
    scopes: frozenset[str]

    def may(self, scope: Scope) -> bool:
        return scope in self.scopes


ANONYMOUS = Principal(None, frozenset(("api", "feed", "thunder", "debug")))


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key(key_id: str, scopes: Iterable[Scope] = DEFAULT_SCOPES) -> tuple[str, ApiKey]:
    """A fresh key and the config entry that accepts it (the key is shown once)."""
    key = f"{C.API_KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    return key, ApiKey(id=key_id, sha256=digest(key), scopes=tuple(scopes))


class KeyStore:
    """The configured keys, by id. `verify` answers None for anything not a valid key."""

    def __init__(self, keys: Iterable[ApiKey] = ()) -> None:
        self._by_id = {k.id: k for k in keys}

    @classmethod
    def from_config(cls, auth: AuthConfig) -> KeyStore:
        return cls(auth.keys)

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def verify(self, key: str) -> Principal | None:
        if not key.startswith(C.API_KEY_PREFIX):
            return None
        key_id = key[len(C.API_KEY_PREFIX):].split("_", 1)[0]
        entry = self._by_id.get(key_id)
        # Hash even for an unknown id, so a wrong id costs the same time as a wrong secret.
        presented = digest(key)
        expected = entry.sha256 if entry is not None else "0" * 64
        if not hmac.compare_digest(presented, expected) or entry is None:
            return None
        return Principal(entry.id, frozenset(entry.scopes))

    def verify_header(self, authorization: str | None) -> Principal | None:
        """Check an `Authorization` value: `Bearer <key>`, or `Basic` with the key as the
        password (so a browser can open the status page after its login prompt)."""
        key = credential(authorization)
        return None if key is None else self.verify(key)


def credential(authorization: str | None) -> str | None:
    """The key in an Authorization header value, or None when there is none."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return value
    if scheme.lower() == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None
