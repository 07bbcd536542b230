"""OpenAI-compatible clients against a real local HTTP server started by the test."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec
import numpy as np
import pytest

from grebe.errors import CircuitOpenError, InferenceError
from grebe.inference.base import ChatModel, Embedder
from grebe.inference.breaker import BreakerState, CircuitBreaker
from grebe.inference.openai_compat import (
    FallbackChatModel,
    OpenAIChatModel,
    OpenAICompatClient,
    OpenAIEmbedder,
)
from grebe.inference.schema import SchemaValidationError


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class FakeOpenAIServer:
    """A threaded HTTP server that answers from a script, then with `default`."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"null")
                with outer.lock:
                    outer.requests.append((self.path, dict(self.headers), body))
                    reply = outer.script.popleft() if outer.script else outer.default(body)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload = (
                    reply.body.encode()
                    if isinstance(reply.body, str)
                    else json.dumps(reply.body).encode()
                )
                try:
                    self.send_response(reply.status)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @staticmethod
    def default(body: Any) -> Reply:
        if "input" in body:  # embeddings: a vector per text, index-shuffled, unnormalised
            data = [
                {"index": i, "embedding": [float(len(t)), 1.0, 2.0]}
                for i, t in enumerate(body["input"])
            ]
            return Reply(body={"data": data[::-1]})
        return Reply(status=500, body={"error": "no scripted answer"})

    def chat(self, content: str, status: int = 200) -> None:
        self.script.append(Reply(status, {"choices": [{"message": {"content": content}}]}))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    srv = FakeOpenAIServer()
    srv.thread.start()
    yield srv
    srv.server.shutdown()
    srv.server.server_close()


def client(url: str, **kw: Any) -> OpenAICompatClient:
    kw.setdefault("backoff_initial_s", 0.01)
    kw.setdefault("backoff_max_s", 0.02)
    kw.setdefault("timeout_s", 2.0)
    return OpenAICompatClient(url, "test-model", **kw)


class Verdict(msgspec.Struct):
    spam: bool
    confidence: float


MESSAGES = [{"role": "user", "content": "Is 'buy now!!!' spam?"}]


async def test_embeddings_are_ordered_normalised_and_batched(server: FakeOpenAIServer) -> None:
    embedder = OpenAIEmbedder(client(server.url), max_wait_ms=20)
    await embedder.start()
    try:
        assert isinstance(embedder, Embedder)  # dim is known once started
        assert embedder.dim == 3  # probed from the endpoint
        texts = ["a" * n for n in range(1, 101)]
        rows = await asyncio.gather(*(embedder.embed([t]) for t in texts))
    finally:
        await embedder.stop()
    matrix = np.concatenate(rows)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-5)
    expected = np.array([[n, 1, 2] for n in range(1, 101)], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(matrix, expected, rtol=1e-5)
    assert len(server.requests) < 20  # 1 probe + a few gathered batches, not 100


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e999"])
async def test_embeddings_that_are_not_finite_are_an_inference_error(
    server: FakeOpenAIServer, value: str
) -> None:
    # Published, such a vector became JSON null that no reader decodes; it must fail the
    # task instead (classified, so the post is retried or dead-lettered with the reason).
    server.script.append(Reply(body=f'{{"data": [{{"index": 0, "embedding": [{value}, 1, 2]}}]}}'))
    embedder = OpenAIEmbedder(client(server.url), dim=3, max_wait_ms=1)
    await embedder.start()
    try:
        with pytest.raises(InferenceError, match="not finite for texts \\[0\\]"):
            await embedder.embed(["a post"])
        assert (await embedder.embed(["a post"])).shape == (1, 3)  # the next call is fine
    finally:
        await embedder.stop()


async def test_chat_returns_a_validated_struct_and_sends_the_schema(
    server: FakeOpenAIServer,
) -> None:
    server.chat('{"spam": true, "confidence": 0.9}')
    model = OpenAIChatModel(client(server.url, api_key="sk-test"))
    assert isinstance(model, ChatModel)
    await model.start()
    try:
        assert await model.complete_json(MESSAGES, Verdict) == Verdict(True, 0.9)
    finally:
        await model.stop()
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["type"] == "object" and set(schema["required"]) == {"spam", "confidence"}


async def test_invalid_answer_is_repaired_once_with_the_error(server: FakeOpenAIServer) -> None:
    server.chat('{"spam": "maybe"}')
    server.chat('```json\n{"spam": false, "confidence": 0.2}\n```')
    model = OpenAIChatModel(client(server.url))
    await model.start()
    try:
        assert await model.complete_json(MESSAGES, Verdict) == Verdict(False, 0.2)
    finally:
        await model.stop()
    repair = server.requests[1][2]["messages"]
    assert repair[-2] == {"role": "assistant", "content": '{"spam": "maybe"}'}
    assert "Expected `bool`" in repair[-1]["content"]


async def test_second_invalid_answer_fails_without_tripping_the_breaker(
    server: FakeOpenAIServer,
) -> None:
    breaker = CircuitBreaker(
        minimum_calls=1, is_failure=lambda e: not isinstance(e, SchemaValidationError)
    )
    model = OpenAIChatModel(client(server.url, breaker=breaker))
    await model.start()
    try:
        for _ in range(2):
            server.chat("not json at all")
            server.chat('{"confidence": 1}')
            with pytest.raises(SchemaValidationError, match="after one repair attempt"):
                await model.complete_json(MESSAGES, Verdict)
    finally:
        await model.stop()
    assert breaker.state is BreakerState.CLOSED


async def test_dict_json_schema_is_checked(server: FakeOpenAIServer) -> None:
    schema = {
        "title": "labels",
        "type": "object",
        "properties": {"label": {"type": "string", "enum": ["ok", "bad"]}},
        "required": ["label"],
    }
    server.chat('{"label": "weird"}')
    server.chat('{"label": "bad"}')
    model = OpenAIChatModel(client(server.url))
    await model.start()
    try:
        assert await model.complete_json(MESSAGES, schema) == {"label": "bad"}
    finally:
        await model.stop()
    assert "not one of" in server.requests[1][2]["messages"][-1]["content"]


async def test_5xx_and_429_are_retried(server: FakeOpenAIServer) -> None:
    server.script.append(Reply(503, {"error": "overloaded"}))
    server.script.append(Reply(429, {"error": "slow down"}, headers={"Retry-After": "0"}))
    server.chat('{"spam": true, "confidence": 1.0}')
    model = OpenAIChatModel(client(server.url))
    await model.start()
    try:
        assert (await model.complete_json(MESSAGES, Verdict)).spam is True
    finally:
        await model.stop()
    assert len(server.requests) == 3


async def test_persistent_5xx_gives_up_after_max_attempts(server: FakeOpenAIServer) -> None:
    for _ in range(5):
        server.script.append(Reply(500, {"error": "boom"}))
    model = OpenAIChatModel(client(server.url, max_attempts=3))
    await model.start()
    try:
        with pytest.raises(InferenceError, match="HTTP 500"):
            await model.complete_json(MESSAGES, Verdict)
    finally:
        await model.stop()
    assert len(server.requests) == 3


async def test_4xx_is_not_retried(server: FakeOpenAIServer) -> None:
    server.script.append(Reply(401, {"error": "bad key"}))
    model = OpenAIChatModel(client(server.url))
    await model.start()
    try:
        with pytest.raises(InferenceError, match="HTTP 401"):
            await model.complete_json(MESSAGES, Verdict)
    finally:
        await model.stop()
    assert len(server.requests) == 1


async def test_timeouts_are_retried_then_open_the_circuit(server: FakeOpenAIServer) -> None:
    for _ in range(4):
        server.script.append(Reply(200, {}, delay_s=1.0))
    breaker = CircuitBreaker(minimum_calls=2, failure_rate_threshold=1.0)
    model = OpenAIChatModel(client(server.url, timeout_s=0.1, max_attempts=2, breaker=breaker))
    await model.start()
    try:
        for _ in range(2):
            with pytest.raises(InferenceError, match="Timeout"):
                await model.complete_json(MESSAGES, Verdict)
        assert breaker.state is BreakerState.OPEN
        sent = len(server.requests)
        with pytest.raises(CircuitOpenError):
            await model.complete_json(MESSAGES, Verdict)
        assert len(server.requests) == sent  # refused without a request
    finally:
        await model.stop()
    assert sent == 4


async def test_fallback_uses_the_next_backend(server: FakeOpenAIServer) -> None:
    second = FakeOpenAIServer()
    second.thread.start()
    try:
        for _ in range(3):
            server.script.append(Reply(500, {"error": "primary down"}))
        second.chat('{"spam": false, "confidence": 0.7}')
        chain = FallbackChatModel(
            [
                OpenAIChatModel(client(server.url, max_attempts=3)),
                OpenAIChatModel(client(second.url)),
            ]
        )
        await chain.start()
        try:
            assert await chain.complete_json(MESSAGES, Verdict) == Verdict(False, 0.7)
            assert "test-model" in chain.name
        finally:
            await chain.stop()
    finally:
        second.server.shutdown()
        second.server.server_close()


async def test_fallback_with_every_circuit_open_says_so(server: FakeOpenAIServer) -> None:
    def opened() -> CircuitBreaker:
        b = CircuitBreaker(minimum_calls=1)
        b.record_failure()
        return b

    chain = FallbackChatModel(
        [OpenAIChatModel(client(server.url, breaker=opened())) for _ in range(2)]
    )
    await chain.start()
    try:
        with pytest.raises(CircuitOpenError, match="every chat backend is unavailable"):
            await chain.complete_json(MESSAGES, Verdict)
    finally:
        await chain.stop()
    assert server.requests == []


async def test_api_key_from_environment(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = client(server.url, api_key_env="GREBE_TEST_MISSING_KEY")
    with pytest.raises(InferenceError, match="GREBE_TEST_MISSING_KEY"):
        await missing.start()
    monkeypatch.setenv("GREBE_TEST_KEY", "sk-env")
    server.chat('{"spam": true, "confidence": 0.5}')
    model = OpenAIChatModel(client(server.url, api_key_env="GREBE_TEST_KEY"))
    await model.start()
    try:
        await model.complete_json(MESSAGES, Verdict)
    finally:
        await model.stop()
    assert server.requests[0][1]["Authorization"] == "Bearer sk-env"


async def test_connection_refused_is_an_inference_error() -> None:
    model = OpenAIChatModel(client("http://127.0.0.1:9/v1", max_attempts=2))
    await model.start()
    try:
        with pytest.raises(InferenceError, match="ConnectError after 2 attempts"):
            await model.complete_json(MESSAGES, Verdict)
    finally:
        await model.stop()


async def test_json_object_format_carries_the_schema(server: FakeOpenAIServer) -> None:
    server.chat('{"spam": true, "confidence": 0.4}')
    model = OpenAIChatModel(client(server.url), response_format="json_object")
    await model.start()
    try:
        assert await model.complete_json(MESSAGES, Verdict) == Verdict(True, 0.4)
    finally:
        await model.stop()
    body = server.requests[0][2]
    assert body["response_format"]["type"] == "json_object"
    assert set(body["response_format"]["schema"]["required"]) == {"spam", "confidence"}
    assert body["messages"] == MESSAGES


async def test_format_none_puts_the_schema_in_a_system_message(
    server: FakeOpenAIServer,
) -> None:
    server.chat('{"spam": false, "confidence": 0.1}')
    model = OpenAIChatModel(client(server.url), response_format="none")
    await model.start()
    try:
        assert await model.complete_json(MESSAGES, Verdict) == Verdict(False, 0.1)
    finally:
        await model.stop()
    body = server.requests[0][2]
    assert "response_format" not in body
    system, *rest = body["messages"]
    assert system["role"] == "system" and '"confidence"' in system["content"]
    assert rest == MESSAGES
    with pytest.raises(ValueError, match="response_format"):
        OpenAIChatModel(client(server.url), response_format="yaml")
