"""Credentials never leave through errors or logs built from upstream data: a real
local HTTP server that echoes every request header and the request URL back in its
error body, called through the OpenAI-compatible client with a URL carrying
`user:pw@` and `?key=`, and a bearer key."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grebe.errors import InferenceError
from grebe.inference.openai_compat import OpenAIChatModel, OpenAICompatClient
from grebe.security.scrub import install_log_scrubbing, scrub_text, scrub_url

BEARER = "sk-live-0123456789abcdefSECRET"
PASSWORD = "hunter2pw"
QUERY_KEY = "qk-987654321"
SECRETS = (BEARER, PASSWORD, QUERY_KEY)


@pytest.fixture(params=[401, 503])
def echo_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A server answering `status` with the request's URL and headers (several times
    over, as a chatty proxy would) in its body."""
    status = request.param

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            echoed = {"url": self.path, "headers": dict(self.headers)}
            body = json.dumps({"error": {"message": "bad credentials", "request": echoed,
                                         "again": echoed, "raw": str(self.headers)}}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    yield f"http://bob:{PASSWORD}@127.0.0.1:{server.server_address[1]}/v1?key={QUERY_KEY}"
    server.shutdown()
    server.server_close()


async def test_upstream_errors_and_logs_carry_no_credentials(echo_url, caplog):
    install_log_scrubbing()
    client = OpenAICompatClient(echo_url, "m", api_key=BEARER, max_attempts=2,
                                backoff_initial_s=0.01, backoff_max_s=0.02, timeout_s=5)
    model = OpenAIChatModel(client)
    await model.start()
    try:
        with caplog.at_level(logging.DEBUG), pytest.raises(InferenceError) as raised:
            await model.complete_json([{"role": "user", "content": "hi"}],
                                      {"type": "object"})
    finally:
        await model.stop()
    message = str(raised.value)
    assert "bad credentials" in message  # the upstream's reason is still there
    assert "127.0.0.1" in message
    shown = [message, client.display_url, client.breaker.name, caplog.text]
    shown += [str(e) for e in (raised.value.__cause__, raised.value.__context__) if e]
    for text in shown:
        for secret in SECRETS:
            assert secret not in text, (secret, text)
    assert "httpx" in caplog.text  # the request line was logged, scrubbed


@pytest.mark.parametrize(("url", "expected"), [
    ("http://u:p@h:1/v1?key=abc&model=x", "http://h:1/v1?key=***&model=x"),
    ("https://h/v1?api_key=1&access_token=2&sig=3&X-Amz-Signature=4&page=2",
     "https://h/v1?api_key=***&access_token=***&sig=***&X-Amz-Signature=***&page=2"),
    ("http://h/plain", "http://h/plain"),
])
def test_scrub_url(url: str, expected: str) -> None:
    assert scrub_url(url) == expected


@pytest.mark.parametrize(("text", "kept"), [
    ('{"Authorization": "Bearer abcdef123456"}', '{"Authorization": "Bearer ***"}'),
    ("authorization: Basic Ym9iOnB3ZDEyMzQ=", "authorization: Basic ***"),
    ("GET amqp://guest:guest@rabbit:5672/ failed", "GET amqp://rabbit:5672/ failed"),
    ("client_secret=s3cr3t&password=x1&ok=1", "client_secret=***&password=***&ok=1"),
    ('{"x-api-key": "k-1"}', '{"x-api-key": "***"}'),
    ("the grebe key grb_ops_AbCdEfGhIjKlMn was refused", "the grebe key *** was refused"),
    ("a monkey keyboard: the key point stays", "a monkey keyboard: the key point stays"),
])
def test_scrub_text(text: str, kept: str) -> None:
    assert scrub_text(text) == kept


def test_known_secrets_are_removed_wherever_they_appear() -> None:
    assert scrub_text("upstream said: hello sk-abcdef-xyz!", ["sk-abcdef-xyz"]) == \
        "upstream said: hello ***!"
