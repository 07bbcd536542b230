"""HTTP hygiene settings shared by `grebe serve` (`api.http`) and `feed-serve`
(`feed.http`): which Host names and browser origins are served, and how long a
connection may take to say what it wants."""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, model_validator

from grebe import constants as C
from grebe.settings_base import Section


class HttpGuardSettings(Section):
    model_config = ConfigDict(frozen=True)

    #: Host header names served besides localhost, 127.0.0.1, [::1] and the bound host.
    #: A name here is one a DNS-rebinding page cannot make a browser send; "*" serves any
    #: (only sensible behind a proxy that checks Host itself).
    allowed_hosts: list[str] = Field(default_factory=list)
    #: Browser origins allowed to call (CORS). Empty: every cross-origin request is refused.
    allowed_origins: list[str] = Field(default_factory=list)
    #: A new or kept-alive connection must send a complete request head within this.
    header_timeout_s: float = Field(default=C.DEFAULT_HTTP_HEADER_TIMEOUT_S, gt=0)
    #: A request body must arrive whole within this (408 otherwise).
    body_timeout_s: float = Field(default=C.DEFAULT_HTTP_BODY_TIMEOUT_S, gt=0)
    #: An idle keep-alive connection is closed after this.
    keep_alive_s: int = Field(default=C.DEFAULT_HTTP_KEEP_ALIVE_S, ge=1)
    #: Open connections past this get 503 at once instead of queueing.
    max_connections: int = Field(default=C.DEFAULT_HTTP_MAX_CONNECTIONS, ge=1)
    #: A request head (line and headers) over this many bytes gets 400.
    max_header_bytes: int = Field(default=C.DEFAULT_HTTP_MAX_HEADER_BYTES, ge=1024)


class TlsSettings(Section):
    """TLS for a gRPC server: PEM files. Both cert and key turn it on; a client CA also
    requires every client to present a certificate it signed (mutual TLS)."""

    model_config = ConfigDict(frozen=True)

    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None

    @model_validator(mode="after")
    def _complete(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls needs both cert_file and key_file")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("tls.client_ca_file needs cert_file and key_file")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None
