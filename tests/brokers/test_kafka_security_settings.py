"""Kafka security settings: refused at load when inconsistent (naming the field), turned
into the same client keyword arguments for every aiokafka client, the password never
shown. The broker side is tests/integration/test_kafka_security.py."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from grebe.brokers.kafka_security import kafka_client_kwargs
from grebe.config import KafkaConfig, load_config
from grebe.errors import ConfigError

PASSWORD = "s3cret-kafka-pw"


def _load(tmp_path: Path, kafka: dict[str, object]) -> KafkaConfig:
    path = tmp_path / "grebe.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"kafka": kafka}))
    return load_config(path).kafka


def _pem_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate and key, made with `cryptography` (a dependency of
    the TLS stack already) so the unit tests need no broker."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "grebe-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_plaintext_by_default_has_no_security_arguments() -> None:
    assert kafka_client_kwargs(KafkaConfig()) == {
        "bootstrap_servers": "127.0.0.1:9092", "security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize(("kafka", "field"), [
    ({"security_protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": PASSWORD},
     "kafka.sasl_mechanism"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
      "sasl_password": PASSWORD}, "kafka.sasl_username"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
      "sasl_username": "u"}, "kafka.sasl_password"),
    ({"sasl_mechanism": "PLAIN"}, "kafka.sasl_mechanism is set but security_protocol "
                                  "PLAINTEXT"),
    ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"},
     "kafka.ssl_cafile: file '/nonexistent/ca.pem' does not exist"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u",
      "sasl_password": PASSWORD, "ssl_cafile": "/x.pem"}, "kafka.ssl_cafile is set but"),
    ({"security_protocol": "SSL", "ssl_keyfile": __file__}, "kafka.ssl_keyfile is set without"),
])
def test_inconsistent_security_is_a_config_error_naming_the_field(
    tmp_path: Path, kafka: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")) as caught:
        _load(tmp_path, kafka)
    assert PASSWORD not in str(caught.value)


def test_unknown_mechanism_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kafka\.sasl_mechanism"):
        _load(tmp_path, {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI",
                         "sasl_username": "u", "sasl_password": PASSWORD})


def test_password_from_the_environment_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREBE_KAFKA__SASL_PASSWORD", PASSWORD)
    config = _load(tmp_path, {"security_protocol": "SASL_PLAINTEXT",
                              "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "grebe"})
    assert config.sasl_password is not None
    assert config.sasl_password.get_secret_value() == PASSWORD
    for shown in (repr(config), str(config), config.model_dump_json(),
                  str(config.model_dump())):
        assert PASSWORD not in shown
    kwargs = kafka_client_kwargs(config)
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "grebe"
    assert kwargs["sasl_plain_password"] == PASSWORD  # unwrapped only for aiokafka
    assert "ssl_context" not in kwargs  # SASL_PLAINTEXT: no TLS


def test_mtls_builds_a_verifying_context_with_the_client_certificate(tmp_path: Path) -> None:
    cert, key = _pem_pair(tmp_path)
    config = _load(tmp_path, {"security_protocol": "SSL", "ssl_cafile": str(cert),
                              "ssl_certfile": str(cert), "ssl_keyfile": str(key)})
    context = kafka_client_kwargs(config)["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == 1  # ours, not the system bundle

    unchecked = config.model_copy(update={"ssl_check_hostname": False})
    assert not kafka_client_kwargs(unchecked)["ssl_context"].check_hostname


def test_a_file_that_is_not_pem_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    config = _load(tmp_path, {"security_protocol": "SSL", "ssl_certfile": str(junk)})
    with pytest.raises(ConfigError, match=r"kafka\.ssl_certfile"):
        kafka_client_kwargs(config)
    config = _load(tmp_path, {"security_protocol": "SSL", "ssl_cafile": str(junk)})
    with pytest.raises(ConfigError, match=r"kafka\.ssl_cafile"):
        kafka_client_kwargs(config)


def test_aiokafka_request_logs_never_carry_the_sasl_login(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiokafka logs each request at DEBUG; a PLAIN login's bytes hold the password."""
    import logging

    config = _load(tmp_path, {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                              "sasl_username": "grebe", "sasl_password": PASSWORD})
    kafka_client_kwargs(config)  # what every client does before connecting
    caplog.set_level(logging.DEBUG)
    request = f"SaslAuthenticateRequest_v1(auth_bytes=b'\\x00grebe\\x00{PASSWORD}')"
    logging.getLogger("aiokafka.conn").debug("Request to %s %d: %s", "broker:9094", 3, request)
    logging.getLogger("aiokafka").error("Unable connect: %s", f"login {PASSWORD} refused")
    assert PASSWORD not in caplog.text
    assert "auth_bytes=<redacted>" in caplog.text and "login <redacted> refused" in caplog.text


def test_every_aiokafka_client_in_grebe_gets_the_security_arguments() -> None:
    """A client built without `**kafka_client_kwargs(config)` would reach a secured
    cluster without its TLS and SASL settings: none may exist in src/."""
    import ast

    import grebe

    clients = {"AIOKafkaConsumer", "AIOKafkaProducer", "AIOKafkaAdminClient"}
    found, bare = [], []
    for path in Path(grebe.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name not in clients:
                continue
            found.append(f"{path.name}:{node.lineno}")
            if not any(kw.arg is None and isinstance(kw.value, ast.Call)
                       and getattr(kw.value.func, "id", None) == "kafka_client_kwargs"
                       for kw in node.keywords):
                bare.append(f"{path.name}:{node.lineno}")
    assert len(found) >= 4  # sources, producers, admin, dlq replay
    assert bare == []
