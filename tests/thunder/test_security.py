"""Thunder's gRPC port asks who is calling, refuses corrupt protobufs as
INVALID_ARGUMENT, and speaks TLS (optionally mutual) when configured. grpcio's own client
on 127.0.0.1; certificates made here with `cryptography`."""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.security.keys import KeyStore, new_key
from grebe.thunder.client import GrpcThunderClient, ThunderError
from grebe.thunder.events import PostCreate
from grebe.thunder.proto import thunder_pb2
from grebe.thunder.runner import serve as thunder_serve
from grebe.thunder.service import SERVICE_NAME, ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore

METHOD = f"/{SERVICE_NAME}/GetInNetworkPosts"
QUERY = InNetworkQuery(user_id="v", following_user_ids=["u1"], max_results=5)


def store(settings: ThunderSettings) -> ThunderStore:
    s = ThunderStore(settings)
    s.apply(PostCreate(post_id="p1", author_id="u1", created_at=time.time() - 60))
    return s


@pytest.fixture
async def started() -> AsyncIterator:
    servers: list[ThunderServer] = []

    async def start(keys: KeyStore | None = None, **settings: object) -> ThunderServer:
        config = ThunderSettings(port=0, **settings)  # type: ignore[arg-type]
        server = ThunderServer(store(config), config, keys=keys)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop(0)


async def raw_call(port: int, body: bytes, metadata=None) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(METHOD, request_serializer=None,
                                   response_deserializer=None)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(body, timeout=5, metadata=metadata)
    return raised.value


@pytest.mark.parametrize("body", [b"\xff\xff\xff\xff", b"\x0a\x80", b"\x12\x05ab"])
async def test_a_corrupt_protobuf_is_invalid_argument(started, body) -> None:
    server = await started()
    error = await raw_call(server.port, body)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid protobuf" in error.details()


async def test_with_keys_calls_need_a_bearer_key_with_the_thunder_scope(started) -> None:
    good, good_entry = new_key("feed", ("thunder",))
    other, other_entry = new_key("web", ("api",))
    server = await started(keys=KeyStore([good_entry, other_entry]))
    request = thunder_pb2.GetInNetworkPostsRequest(user_id="v", following_user_ids=["u1"])
    raw = request.SerializeToString()
    assert (await raw_call(server.port, raw)).code() == grpc.StatusCode.UNAUTHENTICATED
    wrong = (("authorization", f"Bearer {good[:-3]}xyz"),)
    assert (await raw_call(server.port, raw, wrong)).code() == grpc.StatusCode.UNAUTHENTICATED
    scoped = (("authorization", f"Bearer {other}"),)
    assert (await raw_call(server.port, raw, scoped)).code() == \
        grpc.StatusCode.PERMISSION_DENIED
    # Authentication comes before decoding: a stranger learns nothing about the parser.
    assert (await raw_call(server.port, b"\xff")).code() == grpc.StatusCode.UNAUTHENTICATED

    anonymous = GrpcThunderClient(f"127.0.0.1:{server.port}", timeout_s=5)
    await anonymous.start()
    with pytest.raises(ThunderError) as raised:
        await anonymous.get_in_network_posts(QUERY)
    assert raised.value.code == grpc.StatusCode.UNAUTHENTICATED
    await anonymous.stop()

    client = GrpcThunderClient(f"127.0.0.1:{server.port}", timeout_s=5, key=good)
    await client.start()
    try:
        assert [p.post_id for p in (await client.get_in_network_posts(QUERY)).posts] == ["p1"]
    finally:
        await client.stop()
    # Health stays open to probes that carry no credentials.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def write_pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    now = datetime.datetime.now(datetime.UTC)

    def issue(subject: str, issuer_key, issuer_name, key, *, ca: bool = False,
              server: bool = False) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(issuer_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "grebe test CA")])
    ca_cert = issue("grebe test CA", ca_key, ca_name, ca_key, ca=True)
    paths: dict[str, Path] = {}

    def save(name: str, cert: x509.Certificate, key) -> None:
        paths[f"{name}_cert"] = directory / f"{name}.crt"
        paths[f"{name}_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        paths[f"{name}_key"] = directory / f"{name}.key"
        paths[f"{name}_key"].write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))

    save("ca", ca_cert, ca_key)
    for name, is_server in (("server", True), ("client", False)):
        key = ec.generate_private_key(ec.SECP256R1())
        save(name, issue(name, ca_key, ca_name, key, server=is_server), key)
    return paths


async def fetch(port: int, **tls: Path) -> list[str]:
    client = GrpcThunderClient(f"127.0.0.1:{port}", timeout_s=5, **tls)  # type: ignore[arg-type]
    await client.start()
    try:
        return [p.post_id for p in (await client.get_in_network_posts(QUERY)).posts]
    finally:
        await client.stop()


async def test_tls_and_mutual_tls(started, tmp_path: Path) -> None:
    pki = write_pki(tmp_path)
    server = await started(tls={"cert_file": pki["server_cert"], "key_file": pki["server_key"]})
    assert await fetch(server.port, tls_ca_file=pki["ca_cert"]) == ["p1"]
    with pytest.raises(ThunderError) as plaintext:
        await fetch(server.port)
    assert plaintext.value.code == grpc.StatusCode.UNAVAILABLE

    mutual = await started(tls={"cert_file": pki["server_cert"], "key_file": pki["server_key"],
                                "client_ca_file": pki["ca_cert"]})
    with pytest.raises(ThunderError) as no_client_cert:
        await fetch(mutual.port, tls_ca_file=pki["ca_cert"])
    assert no_client_cert.value.code == grpc.StatusCode.UNAVAILABLE
    assert await fetch(mutual.port, tls_ca_file=pki["ca_cert"], tls_cert_file=pki["client_cert"],
                       tls_key_file=pki["client_key"]) == ["p1"]


async def test_missing_tls_files_and_open_binds_without_keys_are_config_errors(
        started, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"thunder\.tls: cannot read"):
        await started(tls={"cert_file": tmp_path / "no.crt", "key_file": tmp_path / "no.key"})
    with pytest.raises(ValueError, match="both cert_file and key_file"):
        ThunderSettings(tls={"cert_file": tmp_path / "x.crt"})  # type: ignore[arg-type]
    config = load_config(data_dir=tmp_path, thunder={"host": "0.0.0.0", "port": 0})
    with pytest.raises(ConfigError, match=r"thunder\.host"):
        await thunder_serve(config)
