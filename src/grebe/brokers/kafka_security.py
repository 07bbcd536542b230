"""Kafka security (SASL PLAIN/SCRAM, TLS, mTLS) for every aiokafka client grebe builds.

One place turns the `kafka:` settings into client keyword arguments, so the consumer
sources, producers (output, dead letters, `grebe ingest`, the API intake), the admin
client (`grebe topics`, start-up topic checks) and `grebe dlq` all connect the same way:
a client built without them would reach a secured cluster's PLAINTEXT port or none.

Settings that would silently do nothing, or fail only at the first connection, are
refused when the config loads (`security_problems`, called by `KafkaConfig`): SASL
without a mechanism or credentials, SASL settings on a protocol without SASL, TLS files
on a protocol without TLS, files that do not exist. A broker refusing the login or a
certificate is a ConfigError too (`raise_if_refused`), not an outage to retry.

The password is a `SecretStr`: it never appears in a repr, a dumped config or a
validation error; it is unwrapped only into the keyword argument handed to aiokafka,
whose DEBUG request log would print a PLAIN login in clear (`SaslLogFilter` redacts it).
"""

from __future__ import annotations

import logging
import re
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grebe import constants as C
from grebe.errors import ConfigError

if TYPE_CHECKING:
    from grebe.config import KafkaConfig

_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_TLS_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
#: TLS alerts a broker sends when it refuses the client's certificate, or its absence
#: (TLS 1.2 and 1.3 spellings, as OpenSSL names them).
_CLIENT_CERT_ALERTS = frozenset({
    "SSLV3_ALERT_BAD_CERTIFICATE", "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
})


#: aiokafka logs every request at DEBUG, SASL ones included: a PLAIN login's auth bytes
#: are `\0user\0password` in clear, a SCRAM one's carry the client proof.
_AUTH_BYTES = re.compile(r"(auth_bytes=)b(['\"]).*?(?<!\\)\2")
_AIOKAFKA_LOGGERS = ("aiokafka", "aiokafka.conn", "aiokafka.client")


class SaslLogFilter(logging.Filter):
    """Rewrites aiokafka's records so no SASL auth bytes or password reach a handler.

    Attached to aiokafka's own loggers (a logger's filters see only records logged
    there, and run before every handler, pytest's and the CLI's alike), so it holds
    whatever the log level and handlers of the process are."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = _AUTH_BYTES.sub(r"\1<redacted>", message)
        for secret in self.secrets:
            scrubbed = scrubbed.replace(secret, "<redacted>")
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        return True


_LOG_FILTER = SaslLogFilter()


def _guard_logs(password: str) -> None:
    """Install the filter on aiokafka's loggers (once) and remember the password."""
    if password:
        _LOG_FILTER.secrets.add(password)
    for name in _AIOKAFKA_LOGGERS:
        logger = logging.getLogger(name)
        if _LOG_FILTER not in logger.filters:
            logger.addFilter(_LOG_FILTER)


def uses_sasl(config: KafkaConfig) -> bool:
    return config.security_protocol in _SASL_PROTOCOLS


def uses_tls(config: KafkaConfig) -> bool:
    return config.security_protocol in _TLS_PROTOCOLS


def security_problems(config: KafkaConfig) -> list[str]:
    """Every inconsistent security setting, each naming its `kafka.` field (empty: fine)."""
    problems: list[str] = []
    protocol = config.security_protocol
    if uses_sasl(config):
        if config.sasl_mechanism is None:
            problems.append(f"kafka.sasl_mechanism is required with security_protocol "
                            f"{protocol} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
        if not config.sasl_username:
            problems.append(f"kafka.sasl_username is required with security_protocol {protocol}")
        if config.sasl_password is None or not config.sasl_password.get_secret_value():
            problems.append(f"kafka.sasl_password is required with security_protocol "
                            f"{protocol} (e.g. from GREBE_KAFKA__SASL_PASSWORD)")
    else:
        for field in ("sasl_mechanism", "sasl_username", "sasl_password"):
            if getattr(config, field) is not None:
                problems.append(f"kafka.{field} is set but security_protocol {protocol} does "
                                "not use SASL (SASL_PLAINTEXT or SASL_SSL)")
    if uses_tls(config):
        if config.ssl_keyfile is not None and config.ssl_certfile is None:
            problems.append("kafka.ssl_keyfile is set without kafka.ssl_certfile (the client "
                            "certificate it belongs to)")
        for field in _TLS_FILES:
            path: Path | None = getattr(config, field)
            if path is not None and not path.is_file():
                problems.append(f"kafka.{field}: file {str(path)!r} does not exist")
    else:
        for field in (*_TLS_FILES, "ssl_key_password"):
            if getattr(config, field) is not None:
                problems.append(f"kafka.{field} is set but security_protocol {protocol} does "
                                "not use TLS (SSL or SASL_SSL)")
    return problems


def ssl_context(config: KafkaConfig) -> ssl.SSLContext:
    """A client TLS context: the brokers verified against `ssl_cafile` (or the system
    CAs), hostnames checked unless `ssl_check_hostname` is off, and the client
    certificate presented when `ssl_certfile` is set (mTLS). A file that is not valid
    PEM is a ConfigError naming the field, not a handshake failure later."""
    try:
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH,
            cafile=str(config.ssl_cafile) if config.ssl_cafile else None,
        )
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"kafka.ssl_cafile {str(config.ssl_cafile)!r}: not a usable CA "
                          f"bundle: {exc}") from exc
    context.check_hostname = config.ssl_check_hostname
    if config.ssl_certfile is not None:
        password = config.ssl_key_password
        try:
            context.load_cert_chain(
                str(config.ssl_certfile),
                str(config.ssl_keyfile) if config.ssl_keyfile else None,
                password.get_secret_value() if password else None,
            )
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"kafka.ssl_certfile {str(config.ssl_certfile)!r} / kafka.ssl_keyfile "
                f"{str(config.ssl_keyfile)!r}: not a usable certificate and key: {exc}"
            ) from exc
    return context


def kafka_client_kwargs(config: KafkaConfig) -> dict[str, Any]:
    """The connection keyword arguments of every aiokafka client (consumer, producer,
    admin): bootstrap servers and security. Raises ConfigError for unusable TLS files."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap_servers,
        "security_protocol": config.security_protocol,
    }
    if uses_tls(config):
        kwargs["ssl_context"] = ssl_context(config)
    if uses_sasl(config):
        password = config.sasl_password.get_secret_value() if config.sasl_password else ""
        _guard_logs(password)  # before any client can log a login
        kwargs["sasl_mechanism"] = config.sasl_mechanism
        kwargs["sasl_plain_username"] = config.sasl_username
        kwargs["sasl_plain_password"] = password
    return kwargs


async def raise_if_refused(config: KafkaConfig, exc: BaseException) -> None:
    """Raise a ConfigError naming the fields when the broker refused our credentials,
    our client certificate or its own certificate failed our checks; return (the caller
    raises its BrokerError) otherwise.

    aiokafka reports a failed bootstrap as "Unable to bootstrap from [...]" and only logs
    why, so a wrong password reads like a broker that is down, and a retrying caller
    would retry forever. One direct connection to the first bootstrap server, with the
    same settings, brings the reason back: a refused login or an untrusted certificate
    is a configuration error (retrying cannot fix it), anything else stays a broker
    fault. The password is never part of the message."""
    # aiokafka is imported here, not at module level: `grebe.config` validates with
    # this module, and a laptop run without Kafka should not pay for importing it.
    from aiokafka.conn import create_conn
    from aiokafka.errors import (
        AuthenticationFailedError,
        KafkaConnectionError,
        KafkaError,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
    )

    if not isinstance(exc, KafkaConnectionError) or config.security_protocol == "PLAINTEXT":
        return
    host, _, port = config.bootstrap_servers.split(",")[0].strip().rpartition(":")
    kwargs = kafka_client_kwargs(config)
    del kwargs["bootstrap_servers"]
    try:
        conn = await create_conn(host, int(port), request_timeout_ms=C.KAFKA_PROBE_TIMEOUT_MS,
                                 **kwargs)
    except (SaslAuthenticationFailed, AuthenticationFailedError,
            UnsupportedSaslMechanismError) as refused:
        raise ConfigError(
            f"Kafka at {config.bootstrap_servers} refused the SASL login of "
            f"kafka.sasl_username {config.sasl_username!r} with kafka.sasl_mechanism "
            f"{config.sasl_mechanism} (check kafka.sasl_password): {refused}") from exc
    except ssl.SSLCertVerificationError as untrusted:
        raise ConfigError(
            f"Kafka at {config.bootstrap_servers}: its TLS certificate is not trusted "
            f"(kafka.ssl_cafile {str(config.ssl_cafile) if config.ssl_cafile else 'unset'}, "
            f"kafka.ssl_check_hostname {config.ssl_check_hostname}): "
            f"{untrusted.verify_message}") from exc
    except KafkaConnectionError as closed:
        alert = closed.__cause__
        if isinstance(alert, ssl.SSLError) and alert.reason in _CLIENT_CERT_ALERTS:
            certfile = str(config.ssl_certfile) if config.ssl_certfile else "unset"
            raise ConfigError(
                f"Kafka at {config.bootstrap_servers} refused the TLS client certificate "
                f"(kafka.ssl_certfile {certfile}): the listener wants one signed by a CA "
                f"it trusts (mTLS): {alert.reason}") from exc
        return  # closed on us for another reason: a broker fault, as reported
    except (OSError, KafkaError, TimeoutError, ValueError):
        return  # down or unreachable: a broker fault, as reported
    conn.close()
