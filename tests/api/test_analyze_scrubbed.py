"""POST /v1/analyze with an upstream chat model that rejects the call and echoes our
request (URL and headers) back: the answer and the serve log hold no credential. A real
HTTP server on 127.0.0.1; the flows' real local models load (slow)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grebe.security.scrub import install_log_scrubbing

BEARER = "sk-live-echoed-0123456789"
PASSWORD = "pw-in-the-url-42"
QUERY_KEY = "qk-in-the-query-42"


@pytest.fixture
def echoing_upstream() -> Iterator[str]:
    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            echoed = {"url": self.path, "headers": dict(self.headers)}
            body = json.dumps({"error": {"message": "invalid key", "echo": [echoed] * 4}})
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                     daemon=True).start()
    yield f"http://bob:{PASSWORD}@127.0.0.1:{server.server_address[1]}/v1?key={QUERY_KEY}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
async def test_analyze_answer_and_log_hold_no_upstream_credentials(
        make_api, echoing_upstream, monkeypatch, caplog) -> None:
    monkeypatch.setenv("GREBE_TEST_CHAT_KEY", BEARER)
    install_log_scrubbing()
    _, client = await make_api(
        plans={"enabled": ["spam_comment"], "classifier": "llm"},
        inference={"chat": {"base_url": echoing_upstream, "model": "m", "max_attempts": 1,
                            "api_key_env": "GREBE_TEST_CHAT_KEY"}},
    )
    with caplog.at_level(logging.INFO):
        response = await client.post("/v1/analyze", timeout=300, json={
            "id": "r1", "author_id": "u1", "reply_to_post_id": "root",
            "text": "Buy cheap pills now!!! Click to claim your prize"})
    assert response.status_code == 200, response.text
    plan = response.json()["plans"]["spam_comment"]
    assert plan["status"] == "failed" and "invalid key" in plan["error"]
    for secret in (BEARER, PASSWORD, QUERY_KEY):
        assert secret not in response.text
        assert secret not in caplog.text
