"""The SSRF suite and the positive paths of the safe fetcher, against real local servers."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from grebe.errors import MediaError, MediaTooLargeError, UnsafeURLError
from grebe.media.config import FetchConfig
from grebe.media.fetch import MediaFetcher, forbidden_reason, parse_ip_literal


def _resolver(table: dict[str, str]):
    async def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        if host not in table:
            raise MediaError(f"cannot resolve host {host!r}")
        return [ipaddress.ip_address(table[host])]

    return resolve


def _files(path: Path) -> list[Path]:
    return list(path.iterdir())


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _resolved(path: Path) -> Path:
    return path.resolve()


def _public_fetcher(**config: object) -> MediaFetcher:
    """'media.example' resolves to the local test server, which the allowlist treats as
    public — and only 127.0.0.1, so every other private address stays refused."""
    return MediaFetcher(
        FetchConfig(**config),  # type: ignore[arg-type]
        resolver=_resolver({"media.example": "127.0.0.1", "evil.example": "127.0.0.2"}),
        allow_networks=["127.0.0.1/32"],
    )


REFUSED = [
    "http://127.0.0.1/",
    "http://localhost/",
    "http://[::1]/",
    "http://0.0.0.0/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://172.31.255.254/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://224.0.0.1/",
    "http://100.64.0.1/",
    "http://[2002:7f00:1::]/",  # 6to4 wrapping 127.0.0.1
    "http://[64:ff9b::a00:1]/",  # NAT64 wrapping 10.0.0.1
    "https://192.168.0.10:8443/x.png",
    "http://[fec0::1]/",  # site-local: Python calls it global (issue 9)
    "http://[3fff::1]/",  # documentation (RFC 9637): Python calls it global
]


@pytest.mark.parametrize("url", REFUSED)
async def test_private_and_special_addresses_are_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(UnsafeURLError, match="refused to fetch"):
        await MediaFetcher().fetch(url, tmp_path)
    assert _files(tmp_path) == []


@pytest.mark.parametrize(
    ("host", "expected"),
    [("2130706433", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"), ("0x7f.1", "127.0.0.1"),
     ("::ffff:10.0.0.1", "::ffff:a00:1"), ("example.com", None), ("1.2.3.4", "1.2.3.4")],
)
def test_ip_literal_forms_are_recognised(host: str, expected: str | None) -> None:
    parsed = parse_ip_literal(host)
    assert (str(parsed) if parsed else None) == expected


# Every special-purpose range, with a word its refusal must name. Each row was checked
# against the IANA IPv4/IPv6 special-purpose registries; the ones marked * are treated
# as global by Python 3.11's ipaddress tables and so need the explicit deny.
DENIED_ADDRESSES = [
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "this-network"), ("10.0.0.1", "private"),
    ("100.64.0.1", "carrier-grade"), ("127.0.0.1", "loopback"), ("169.254.0.1", "link-local"),
    ("172.16.0.1", "private"), ("192.0.0.9", "IETF"),  # *
    ("192.0.0.170", "IETF"), ("192.0.2.1", "documentation"), ("192.88.99.1", "6to4 relay"),  # *
    ("192.168.0.1", "private"), ("198.18.0.1", "benchmarking"), ("198.51.100.1", "documentation"),
    ("203.0.113.1", "documentation"), ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("::", "unspecified"), ("::1", "loopback"), ("::7f00:1", "reserved"),  # v4-compatible
    ("::ffff:10.0.0.1", "private"), ("::ffff:0:a00:1", "reserved"),  # SIIT translated
    ("64:ff9b::a00:1", "private"), ("64:ff9b::7f00:1", "loopback"),
    ("64:ff9b:1::808:808", "local-use NAT64"),  # *
    ("100::1", "discard"), ("2001::1", "embedded"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "documentation"),  # Teredo client 192.0.2.45
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),  # Teredo client 10.0.0.1
    ("2001:1::1", "IETF"), ("2001:2::1", "IETF"), ("2001:3::1", "IETF"),
    ("2001:4:112::1", "IETF"), ("2001:20::1", "IETF"), ("2001:30::1", "IETF"),
    ("2001:db8::1", "documentation"), ("2002:7f00:1::", "loopback"),
    ("2002:808:808::1", "6to4"), ("2620:4f:8000::1", None), ("3fff::1", "documentation"),  # *
    ("3fff:fff::1", "documentation"), ("5f00::1", "SRv6"),  # *
    ("fc00::1", "unique-local"), ("fd12:3456::1", "unique-local"), ("fe80::1", "link-local"),
    ("febf::1", "link-local"), ("fec0::1", "site-local"), ("feff::1", "site-local"),  # *
    ("ff02::1", "multicast"), ("ff0e::1", "multicast"), ("4000::1", "reserved"),
    ("e000::1", "reserved"),
]


@pytest.mark.parametrize(("address", "why"), [r for r in DENIED_ADDRESSES if r[1]])
def test_special_purpose_ranges_are_refused_with_their_name(address: str, why: str) -> None:
    reason = forbidden_reason(ipaddress.ip_address(address))
    assert reason is not None and why in reason, (address, reason)


@pytest.mark.parametrize(
    "address",
    ["1.1.1.1", "8.8.8.8", "93.184.216.34", "192.0.3.1", "192.88.98.1", "198.20.0.1",
     "100.128.0.1", "223.255.255.254", "2606:4700::1111", "2a00:1450:4001::1",
     "2620:4f:8000::1", "2001:200::1", "3ffe::1", "3fff:1000::1", "64:ff9b::808:808",
     "::ffff:8.8.8.8"],
)
def test_globally_routable_unicast_passes(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


async def test_a_name_resolving_to_site_local_is_refused_before_connecting(
    tmp_path: Path,
) -> None:
    fetcher = MediaFetcher(resolver=_resolver({"cdn.example": "fec0::1"}))
    with pytest.raises(UnsafeURLError, match="site-local"):
        await fetcher.fetch("http://cdn.example/a.png", tmp_path)


def test_public_addresses_pass_the_check() -> None:
    assert forbidden_reason(ipaddress.ip_address("93.184.216.34")) is None
    assert forbidden_reason(ipaddress.ip_address("2606:2800:220:1:248:1893:25c8:1946")) is None
    assert forbidden_reason(ipaddress.ip_address("::ffff:93.184.216.34")) is None


@pytest.mark.parametrize(
    "url", ["ftp://example.com/a.png", "gopher://example.com/", "data:image/png;base64,AAAA"]
)
async def test_other_schemes_are_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(UnsafeURLError, match="scheme"):
        await MediaFetcher().fetch(url, tmp_path)


async def test_credentials_in_url_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeURLError, match="credentials"):
        await _public_fetcher().fetch("http://user:pw@media.example/a.png", tmp_path)


async def test_name_resolving_to_loopback_is_refused(tmp_path: Path) -> None:
    fetcher = MediaFetcher(resolver=_resolver({"cdn.example": "127.0.0.1"}))
    with pytest.raises(UnsafeURLError, match=r"'cdn.example' resolves to loopback"):
        await fetcher.fetch("http://cdn.example/a.png", tmp_path)


async def test_mixed_dns_answer_is_refused(tmp_path: Path) -> None:
    async def resolve(host: str, port: int) -> list:
        return [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.5")]

    with pytest.raises(UnsafeURLError, match="private"):
        await MediaFetcher(resolver=resolve).fetch("http://cdn.example/a.png", tmp_path)


async def test_fetches_and_sniffs_a_real_photo(http_server, photo: Path, tmp_path: Path) -> None:
    hostport, served = http_server
    port = hostport.split(":")[1]
    # The server lies about the type; the sniffed type wins.
    served.routes["/p"] = (200, {"Content-Type": "text/html"}, _read(photo))
    result = await _public_fetcher().fetch(f"http://media.example:{port}/p", tmp_path)
    assert result.content_type == "image/png"
    assert result.size == len(_read(photo))
    assert result.path.read_bytes() == _read(photo)
    assert result.path.parent == tmp_path
    assert served.hits == ["/p"]
    # 'media.example' exists in no DNS: the connection went to the vetted, pinned
    # address, while the request kept the name in its Host header.
    assert served.hosts == [f"media.example:{port}"]


async def test_follows_a_safe_redirect(http_server, photo: Path, tmp_path: Path) -> None:
    hostport, served = http_server
    port = hostport.split(":")[1]
    served.routes["/old"] = (302, {"Location": "/new"}, b"")
    served.routes["/new"] = (200, {}, _read(photo))
    result = await _public_fetcher().fetch(f"http://media.example:{port}/old", tmp_path)
    assert result.final_url.endswith("/new") and result.url.endswith("/old")
    assert result.content_type == "image/png"


async def test_redirect_to_private_address_is_refused(
    http_server, secret_server, tmp_path: Path
) -> None:
    hostport, served = http_server
    secret_hostport, secret = secret_server
    secret.routes["/secret"] = (200, {}, b"\x89PNG\r\n\x1a\n" + b"0" * 100)
    port = hostport.split(":")[1]
    served.routes["/r1"] = (302, {"Location": f"http://{secret_hostport}/secret"}, b"")
    served.routes["/r2"] = (
        301, {"Location": f"http://evil.example:{secret_hostport.split(':')[1]}/secret"}, b"")
    fetcher = _public_fetcher()
    with pytest.raises(UnsafeURLError, match=r"loopback address 127\.0\.0\.2"):
        await fetcher.fetch(f"http://media.example:{port}/r1", tmp_path)
    with pytest.raises(UnsafeURLError, match=r"'evil\.example' resolves to loopback"):
        await fetcher.fetch(f"http://media.example:{port}/r2", tmp_path)
    assert served.hits == ["/r1", "/r2"]
    assert secret.hits == []  # never reached


async def test_redirect_loop_is_bounded(http_server, tmp_path: Path) -> None:
    hostport, served = http_server
    served.routes["/loop"] = (302, {"Location": "/loop"}, b"")
    with pytest.raises(MediaError, match="too many redirects"):
        await _public_fetcher(max_redirects=3).fetch(
            f"http://media.example:{hostport.split(':')[1]}/loop", tmp_path)
    assert len(served.hits) == 4


async def test_body_over_the_cap_is_cut_off(http_server, tmp_path: Path) -> None:
    hostport, served = http_server
    port = hostport.split(":")[1]
    body = b"\x89PNG\r\n\x1a\n" + b"x" * 300_000
    # No Content-Length: the cap must be enforced while streaming, not from the header.
    served.routes["/big"] = (200, {"X-No-Length": "1", "Connection": "close"}, body)
    served.routes["/declared"] = (200, {}, body)
    fetcher = _public_fetcher(max_bytes=100_000)
    with pytest.raises(MediaTooLargeError, match="cap of 100000"):
        await fetcher.fetch(f"http://media.example:{port}/declared", tmp_path)
    with pytest.raises(MediaTooLargeError, match="cap of 100000"):
        await fetcher.fetch(f"http://media.example:{port}/big", tmp_path)
    assert _files(tmp_path) == []  # the partial file is removed


async def test_non_media_content_is_refused(http_server, tmp_path: Path) -> None:
    hostport, served = http_server
    served.routes["/page"] = (200, {"Content-Type": "image/png"}, b"<html>hello</html>")
    with pytest.raises(MediaError, match="unrecognised content"):
        await _public_fetcher().fetch(f"http://media.example:{hostport.split(':')[1]}/page",
                                      tmp_path)
    assert _files(tmp_path) == []


async def test_http_error_status_is_a_media_error(http_server, tmp_path: Path) -> None:
    hostport, _ = http_server
    with pytest.raises(MediaError, match="HTTP 404"):
        await _public_fetcher().fetch(f"http://media.example:{hostport.split(':')[1]}/nope",
                                      tmp_path)


async def test_local_files_need_opt_in_and_a_root(photo: Path, tmp_path: Path) -> None:
    with pytest.raises(UnsafeURLError, match="local files are not allowed"):
        await MediaFetcher().fetch(str(photo), tmp_path)
    fetcher = MediaFetcher(FetchConfig(allow_files=True, file_roots=[photo.parent]))
    admitted = await fetcher.fetch(photo.as_uri(), tmp_path)
    assert admitted.path == _resolved(photo) and admitted.content_type == "image/png"
    with pytest.raises(UnsafeURLError, match="outside the allowed roots"):
        await fetcher.fetch("/etc/hostname", tmp_path)
    with pytest.raises(UnsafeURLError, match="outside the allowed roots"):
        await fetcher.fetch(str(photo.parent / ".." / ".." / "numpy" / "__init__.py"), tmp_path)


async def test_dns_is_resolved_once_per_hop_and_pinned(http_server, photo: Path,
                                                       tmp_path: Path) -> None:
    """A rebinding resolver (safe answer first, private after) gets one question per hop:
    the connection uses the vetted answer, never a second lookup."""
    hostport, served = http_server
    port = hostport.split(":")[1]
    served.routes["/p"] = (200, {}, _read(photo))
    calls: list[str] = []

    async def rebinding(host: str, port: int) -> list:
        calls.append(host)
        return [ipaddress.ip_address("127.0.0.1" if len(calls) == 1 else "10.0.0.1")]

    fetcher = MediaFetcher(resolver=rebinding, allow_networks=["127.0.0.1/32"])
    result = await fetcher.fetch(f"http://rebind.example:{port}/p", tmp_path)
    assert result.content_type == "image/png" and calls == ["rebind.example"]
    with pytest.raises(UnsafeURLError, match="private"):
        await fetcher.fetch(f"http://rebind.example:{port}/p", tmp_path)
