"""A loopback HTTP endpoint through which ffmpeg reads one untrusted media URL.

Streaming ASR lets ffmpeg read the URL itself (reconnects, range requests, a duration
cap), but ffmpeg would resolve the host on its own and follow redirects anywhere, which
is an SSRF hole. So ffmpeg is given `http://127.0.0.1:<port>/<token>` instead, and only
the `http,tcp` protocols: every request it makes lands here, and this proxy makes the
upstream request with MediaFetcher's checks — the host resolved and vetted, the
connection pinned to the vetted address, TLS verified for the URL's name — following
redirects itself and vetting every hop again (a redirect to 127.0.0.1 or any private
address is refused). ffmpeg's Range header is forwarded, so seeks and reconnects resume
where they left off.

An upstream failure becomes a 502 for ffmpeg and is kept in `failure` (and `refused`
for an unsafe URL), so the transcript's error names the real reason, not ffmpeg's
"Server returned 5XX".
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from types import TracebackType
from urllib.parse import urljoin, urlsplit

import httpcore

from grebe.errors import MediaError, UnsafeURLError
from grebe.media.fetch import MediaFetcher

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Upstream response headers ffmpeg needs (length, seekability, type); nothing else passes.
_FORWARDED = (b"content-type", b"content-length", b"content-range", b"accept-ranges")
_MAX_REQUEST_HEAD = 16 * 1024
_LOOPBACK = "127.0.0.1"
_RANGE = re.compile(r"bytes=(\d+)-\d*")


class StreamProxy:
    """`async with StreamProxy(fetcher, url) as proxy:` ffmpeg reads `proxy.local_url`.

    Serves exactly one upstream URL at an unguessable path; anything else is a 404."""

    def __init__(self, fetcher: MediaFetcher, url: str, *, read_timeout_s: float) -> None:
        self.fetcher = fetcher
        self.url = url.strip()
        self.read_timeout_s = read_timeout_s
        self.failure: str | None = None  # the first upstream failure, for the result
        self.refused = False  # that failure was an unsafe URL (SSRF check)
        self.requests = 0
        self._path = "/" + secrets.token_urlsafe(16)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def local_url(self) -> str:
        assert self._server is not None, "the proxy is not started"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://{_LOOPBACK}:{port}{self._path}"

    async def __aenter__(self) -> StreamProxy:
        # The URL is vetted up front too, so an unsafe one fails before ffmpeg starts.
        await self.fetcher.vet(self.url)
        self._server = await asyncio.start_server(
            self._accept, _LOOPBACK, 0, limit=_MAX_REQUEST_HEAD)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._handle(reader, writer), name="asr-proxy")
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(self.read_timeout_s):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return
            request_line, *lines = head.decode("latin-1").split("\r\n")
            method, _, rest = request_line.partition(" ")
            target = rest.partition(" ")[0]
            if method != "GET" or target != self._path:
                await _reply(writer, 404, b"not found")
                return
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines if ":" in line)}
            self.requests += 1
            await self._forward(writer, headers.get("range"))
        except (ConnectionError, OSError):
            return  # ffmpeg hung up (it has its `-t` worth of audio): nothing to do
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _forward(self, writer: asyncio.StreamWriter, byte_range: str | None) -> None:
        """One upstream request (redirects followed here, each hop vetted) -> ffmpeg."""
        current = self.url
        try:
            for _hop in range(self.fetcher.config.max_redirects + 1):
                address = await self.fetcher.vet(current)
                pool = self.fetcher.pinned_pool(address)
                async with pool, pool.stream(
                    "GET", _request_url(current), headers=self._headers(current, byte_range),
                    extensions={"timeout": self._timeouts()},
                ) as response:
                    if response.status in _REDIRECTS:
                        location = _header(response.headers, b"location")
                        if not location:
                            raise MediaError(f"HTTP {response.status} without Location: "
                                             f"{current}")
                        current = urljoin(current, location)
                        continue
                    if not 200 <= response.status < 300:
                        raise MediaError(f"HTTP {response.status} fetching {current}")
                    await _relay(writer, response, _range_start(byte_range))
                    return
            raise MediaError(f"too many redirects (more than "
                             f"{self.fetcher.config.max_redirects}): {self.url}")
        except _MidStreamError as exc:  # headers already sent: hang up, ffmpeg reconnects
            self._fail(f"stream of {current} broke off: {exc}")
            return
        except UnsafeURLError as exc:
            self._fail(str(exc), refused=True)
        except MediaError as exc:
            self._fail(str(exc))
        except httpcore.TimeoutException as exc:
            self._fail(f"stream timed out ({type(exc).__name__}): {current}")
        except (httpcore.ConnectError, httpcore.NetworkError, httpcore.ProtocolError) as exc:
            self._fail(f"cannot stream {current}: {type(exc).__name__}: {exc}")
        except (httpcore.UnsupportedProtocol, httpcore.LocalProtocolError) as exc:
            self._fail(f"cannot stream {current}: {exc}", refused=True)
        else:
            return
        await _reply(writer, 502, b"upstream refused or failed")

    def _fail(self, reason: str, *, refused: bool = False) -> None:
        if self.failure is None:
            self.failure, self.refused = reason, refused

    def _headers(self, url: str, byte_range: str | None) -> list[tuple[bytes, bytes]]:
        netloc = urlsplit(url).netloc.rsplit("@", 1)[-1]
        headers = [(b"Host", netloc.encode("idna") if not netloc.isascii() else netloc.encode()),
                   (b"User-Agent", self.fetcher.config.user_agent.encode()),
                   (b"Accept", b"video/*, audio/*;q=0.9, */*;q=0.1")]
        if byte_range and byte_range.isascii():
            headers.append((b"Range", byte_range.encode()))
        return headers

    def _timeouts(self) -> dict[str, float]:
        connect = self.fetcher.config.connect_timeout_s
        return {"connect": connect, "read": self.read_timeout_s,
                "write": self.read_timeout_s, "pool": connect}


def _request_url(url: str) -> httpcore.URL:
    parts = urlsplit(url)
    host = parts.hostname or ""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return httpcore.URL(
        scheme=parts.scheme.lower().encode(),
        host=host.encode("idna") if not host.isascii() else host.encode(),
        port=parts.port, target=target.encode())


def _range_start(byte_range: str | None) -> int:
    """Where ffmpeg asked to start (`bytes=N-`), 0 when it did not ask."""
    match = _RANGE.fullmatch(byte_range or "")
    return int(match[1]) if match else 0


async def _relay(writer: asyncio.StreamWriter, response: httpcore.Response, start: int) -> None:
    """The response to ffmpeg. An MP4 whose moov atom is at the end needs seeks, and
    ffmpeg only seeks a server that says `Accept-Ranges`; a server that does not answers
    a seek with the whole body. So the proxy says it for any body of known length and
    answers a seek the server ignored by skipping to the offset itself (a 206)."""
    status = response.status
    headers = [(name, value) for name, value in response.headers
               if name.lower() in _FORWARDED]
    length = _header(response.headers, b"content-length")
    if length and length.isdigit() and _header(response.headers, b"accept-ranges") is None:
        headers.append((b"Accept-Ranges", b"bytes"))
    skip = 0
    if start > 0 and status == 200:
        if not (length and length.isdigit()):
            raise MediaError("the server ignores HTTP ranges and sends no length: cannot "
                             "seek in the stream")
        total = int(length)
        skip, status = start, 206
        headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
        headers += [(b"Content-Length", str(max(0, total - start)).encode()),
                    (b"Content-Range", f"bytes {start}-{total - 1}/{total}".encode())]
    head = [f"HTTP/1.1 {status} OK".encode(), *(n + b": " + v for n, v in headers),
            b"Connection: close"]
    writer.write(b"\r\n".join(head) + b"\r\n\r\n")
    try:
        async for chunk in response.aiter_stream():  # type: ignore[attr-defined]
            if skip:
                dropped = min(skip, len(chunk))
                chunk, skip = chunk[dropped:], skip - dropped
                if not chunk:
                    continue
            writer.write(chunk)
            await writer.drain()  # backpressure: ffmpeg reads as fast as Whisper consumes
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError) as exc:
        raise _MidStreamError(f"{type(exc).__name__}: {exc}") from exc


class _MidStreamError(Exception):
    """The upstream failed after the response head went to ffmpeg: the only honest
    signal left is closing the connection (ffmpeg then reconnects with a Range)."""


async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(f"HTTP/1.1 {status} Error\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + body)
        await writer.drain()


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None
