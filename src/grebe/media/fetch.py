"""Safe fetching of untrusted media URLs.

A post's media URL is attacker-controlled, so a fetch must not become a request to the
machine's own network (SSRF). Each hop: parse the URL ourselves, resolve the host, refuse
any non-public address (also IPv4-mapped / 6to4 / Teredo / NAT64 IPv6 forms and the
decimal, octal and hex IPv4 spellings the C resolver accepts), then connect to exactly
the vetted address — the connection is pinned, so a second DNS answer cannot rebind it —
while the Host header and TLS SNI keep the name. Redirects are followed by hand and every
hop is checked again. Bytes and total time are capped, and the content type is sniffed
from magic bytes, never taken from the server's header.

httpcore is used directly (not httpx) because it takes a custom network backend, and
because it ignores proxy environment variables that would bypass the pinning.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

import filetype
import httpcore
import msgspec

from grebe.errors import MediaError, MediaTooLargeError, UnsafeURLError
from grebe.media.config import FetchConfig

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: (host, port) -> the addresses the host resolves to. Injectable so tests can make a
#: name resolve to a local server that an allowlist treats as "public".
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SNIFF_BYTES = 262  # what filetype needs to recognise every format it knows
_NUMERIC_HOST = re.compile(r"^[0-9a-fx.]+$")  # candidates for inet_aton's legacy forms
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
#: Special-purpose ranges (IANA registries) that no media server lives in, listed because
#: some Python versions' `is_global` tables miss them; checked before those tables.
_DENIED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), why) for net, why in (
        ("0.0.0.0/8", "this-network"),
        ("100.64.0.0/10", "shared (carrier-grade NAT)"),
        ("192.0.0.0/24", "IETF protocol assignment"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("240.0.0.0/4", "reserved"),
        ("fec0::/10", "site-local"),
        ("fc00::/7", "unique-local"),
        ("3fff::/20", "documentation"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "IETF protocol assignment"),
        ("2002::/16", "6to4"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("5f00::/16", "SRv6 SID"),
    )
)
_ALLOWED_MAJOR_TYPES = ("image/", "video/", "audio/")


class FetchedMedia(msgspec.Struct, frozen=True, kw_only=True):
    """A fetched (or admitted local) media file. `content_type` is sniffed from its bytes."""

    path: Path
    content_type: str
    size: int
    url: str
    final_url: str

    @property
    def kind(self) -> str:
        """'image', 'video' or 'audio' (the major type)."""
        return self.content_type.split("/", 1)[0]


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Resolve with the OS resolver (off the event loop, via the loop's executor)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise MediaError(f"cannot resolve host {host!r}: {exc.strerror}") from exc
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address a host string denotes without DNS, or None if it is a name.

    Besides canonical IPv4/IPv6 this accepts what inet_aton does — `2130706433`,
    `0177.0.0.1`, `0x7f.1`, `127.1` — because the system resolver would treat those
    as addresses too; judging them as names would let them slip past the checks."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_HOST.match(host.lower()):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def forbidden_reason(ip: IPAddress) -> str | None:
    """Why a connection to `ip` must be refused, or None if it is a public address.

    An allowlist, not a blocklist: only globally routable unicast passes (IPv6 inside
    2000::/3 only), after explicit denies for the ranges Python's `ipaddress` tables call
    global (fec0::/10, 3fff::/20, 64:ff9b:1::/48, 192.88.99.0/24...). Addresses that embed
    an IPv4 address (mapped, 6to4, Teredo, NAT64) are refused if the embedded one is."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        for inner in embedded:
            reason = forbidden_reason(inner)
            if reason:
                return f"{reason} (embedded in {ip})"
        if ip.ipv4_mapped is not None or ip in _NAT64:
            return None  # judged by its IPv4 address above
    checks = (
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
    )
    for hit, why in checks:
        if hit:
            return f"{why} address {ip}"
    for network, why in _DENIED:
        if ip.version == network.version and ip in network:
            return f"{why} address {ip} (in {network})"
    for hit, why in ((ip.is_private, "private"), (ip.is_reserved, "reserved")):
        if hit:
            return f"{why} address {ip}"
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return f"not global unicast address {ip} (outside {_GLOBAL_UNICAST_V6})"
    if not ip.is_global:
        return f"not globally routable address {ip}"
    return None


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to one vetted address whatever host the request names, so the TCP peer
    is exactly what was checked; TLS still verifies and sends SNI for the URL's name."""

    def __init__(self, address: IPAddress) -> None:
        self._address = str(address)
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_tcp(
            self._address, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options,  # type: ignore[arg-type]
        )

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class MediaFetcher:
    """Fetches media URLs (and, when enabled, local files under allowed roots) safely.

    `resolver` and `allow_networks` exist for tests and for deployments that fetch from
    an internal CDN: an address inside `allow_networks` is accepted even if private."""

    def __init__(
        self,
        config: FetchConfig | None = None,
        *,
        resolver: Resolver | None = None,
        allow_networks: Sequence[str | IPNetwork] = (),
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config or FetchConfig()
        self._resolve = resolver or system_resolver
        self._allow = tuple(ipaddress.ip_network(n) for n in allow_networks)
        self._ssl = ssl_context or ssl.create_default_context()
        self._roots = tuple(Path(r).resolve() for r in self.config.file_roots)

    async def fetch(self, url: str, dest_dir: Path) -> FetchedMedia:
        """Fetch `url` into a new file under `dest_dir` (local files are admitted in place).

        Raises UnsafeURLError (refused), MediaTooLargeError (byte cap) or MediaError
        (network failure, timeout, HTTP error, unsupported content)."""
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme in ("", "file") or (len(scheme) == 1 and scheme.isalpha()):  # C:\ paths
            return await asyncio.to_thread(self._admit_file, url, parts)
        if scheme not in ("http", "https"):
            raise UnsafeURLError(f"scheme {scheme!r} is not allowed (http and https only): {url}")
        try:
            async with asyncio.timeout(self.config.timeout_s):
                return await self._fetch_http(url, dest_dir)
        except TimeoutError as exc:
            raise MediaError(f"fetch timed out after {self.config.timeout_s:g}s: {url}") from exc

    # --- http(s) ---

    async def _fetch_http(self, url: str, dest_dir: Path) -> FetchedMedia:
        current = url
        for _hop in range(self.config.max_redirects + 1):
            parts = urlsplit(current)
            address = await self._vet(current, parts)
            location = await self._request(current, parts, address, dest_dir)
            if isinstance(location, FetchedMedia):
                return msgspec.structs.replace(location, url=url)
            current = urljoin(current, location)
            if urlsplit(current).scheme.lower() not in ("http", "https"):
                raise UnsafeURLError(f"redirect to a non-http(s) URL refused: {current}")
        raise MediaError(f"too many redirects (more than {self.config.max_redirects}): {url}")

    async def _vet(self, url: str, parts: SplitResult) -> IPAddress:
        """Resolve the URL's host and return the one address to connect to."""
        if parts.username is not None or parts.password is not None:
            raise UnsafeURLError(f"credentials in URLs are not allowed: {url}")
        host = parts.hostname
        if not host:
            raise UnsafeURLError(f"URL has no host: {url}")
        try:
            port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        except ValueError as exc:
            raise UnsafeURLError(f"invalid port in URL: {url}") from exc
        literal = parse_ip_literal(host)
        addresses = [literal] if literal is not None else await self._resolve(host, port)
        if not addresses:
            raise MediaError(f"host {host!r} resolved to no address: {url}")
        # Refuse if ANY answer is unsafe: a mixed answer is a rebinding attempt or a
        # misconfiguration, and either way not something to fetch from.
        for address in addresses:
            reason = None if self._allowed(address) else forbidden_reason(address)
            if reason:
                shown = f"{host!r} resolves to {reason}" if literal is None else reason
                raise UnsafeURLError(f"refused to fetch {url}: {shown}")
        first = addresses[0]
        if isinstance(first, ipaddress.IPv6Address) and first.ipv4_mapped is not None:
            return first.ipv4_mapped
        return first

    def _allowed(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self._allow)

    async def _request(
        self, url: str, parts: SplitResult, address: IPAddress, dest_dir: Path
    ) -> FetchedMedia | str:
        """One hop: the fetched file, or the Location of a redirect."""
        cfg = self.config
        host = parts.hostname or ""
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = parts.netloc.rsplit("@", 1)[-1]
        request_url = httpcore.URL(
            scheme=parts.scheme.lower().encode(),
            host=host.encode("idna") if not host.isascii() else host.encode(),
            port=parts.port,
            target=target.encode(),
        )
        headers = [
            (b"Host", host_header.encode("idna") if not host_header.isascii() else
             host_header.encode()),
            (b"User-Agent", cfg.user_agent.encode()),
            (b"Accept", b"image/*, video/*, audio/*;q=0.9, */*;q=0.1"),
        ]
        timeouts = {
            "connect": cfg.connect_timeout_s,
            "read": cfg.timeout_s,
            "write": cfg.timeout_s,
            "pool": cfg.connect_timeout_s,
        }
        pool = httpcore.AsyncConnectionPool(
            ssl_context=self._ssl, max_connections=1, network_backend=_PinnedBackend(address)
        )
        try:
            async with pool, pool.stream(
                "GET", request_url, headers=headers, extensions={"timeout": timeouts}
            ) as response:
                if response.status in _REDIRECTS:
                    location = _header(response.headers, b"location")
                    if not location:
                        raise MediaError(f"HTTP {response.status} without Location: {url}")
                    return location
                if not 200 <= response.status < 300:
                    raise MediaError(f"HTTP {response.status} fetching {url}")
                declared = _header(response.headers, b"content-length")
                if declared and declared.isdigit() and int(declared) > cfg.max_bytes:
                    raise MediaTooLargeError(
                        f"{url} declares {int(declared)} bytes, over the cap of {cfg.max_bytes}"
                    )
                return await self._save(url, response.aiter_stream(), dest_dir)  # type: ignore[arg-type]
        except httpcore.TimeoutException as exc:
            raise MediaError(f"fetch timed out ({type(exc).__name__}): {url}") from exc
        except httpcore.ConnectError as exc:
            raise MediaError(f"cannot connect to {host} ({address}): {exc}") from exc
        except httpcore.ProtocolError as exc:
            raise MediaError(f"bad HTTP response from {url}: {exc}") from exc
        except httpcore.NetworkError as exc:
            raise MediaError(f"network error fetching {url}: {exc}") from exc
        except (httpcore.UnsupportedProtocol, httpcore.LocalProtocolError) as exc:
            raise UnsafeURLError(f"cannot fetch {url}: {exc}") from exc

    async def _save(self, url: str, chunks: object, dest_dir: Path) -> FetchedMedia:
        """Stream the body to a file, cutting off at the byte cap; sniff the head."""
        cap = self.config.max_bytes
        path = dest_dir / "download"
        size = 0
        head = b""
        handle: IO[bytes] = await asyncio.to_thread(path.open, "wb")
        try:
            async for chunk in chunks:  # type: ignore[attr-defined]
                size += len(chunk)
                if size > cap:
                    raise MediaTooLargeError(f"{url} exceeded the cap of {cap} bytes; cut off")
                if len(head) < _SNIFF_BYTES:
                    head += chunk[: _SNIFF_BYTES - len(head)]
                await asyncio.to_thread(handle.write, chunk)
        except BaseException:
            handle.close()
            path.unlink(missing_ok=True)
            raise
        handle.close()
        try:
            content_type = sniff(head, url)
        except MediaError:
            path.unlink(missing_ok=True)
            raise
        return FetchedMedia(
            path=path, content_type=content_type, size=size, url=url, final_url=url
        )

    # --- local files ---

    def _admit_file(self, url: str, parts: SplitResult) -> FetchedMedia:
        if not self.config.allow_files:
            raise UnsafeURLError(f"local files are not allowed (media.fetch.allow_files): {url}")
        raw = unquote(parts.path) if parts.scheme.lower() == "file" else url
        try:
            path = Path(raw).expanduser().resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise MediaError(f"no such file: {raw}") from exc
        if not any(path.is_relative_to(root) for root in self._roots):
            raise UnsafeURLError(f"{path} is outside the allowed roots (media.fetch.file_roots)")
        if not path.is_file():
            raise MediaError(f"not a regular file: {path}")
        size = path.stat().st_size
        if size > self.config.max_bytes:
            raise MediaTooLargeError(f"{path} has {size} bytes, over the cap of "
                                     f"{self.config.max_bytes}")
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
        return FetchedMedia(
            path=path, content_type=sniff(head, str(path)), size=size, url=url,
            final_url=path.as_uri(),
        )


def sniff(head: bytes, what: str = "media") -> str:
    """The MIME type from magic bytes; MediaError unless it is an image, video or audio."""
    kind = filetype.guess(head) if head else None
    if kind is None:
        raise MediaError(f"unrecognised content (no known image/video/audio signature): {what}")
    if not kind.mime.startswith(_ALLOWED_MAJOR_TYPES):
        raise MediaError(f"unsupported content type {kind.mime}: {what}")
    return str(kind.mime)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None
