"""Clients for OpenAI-compatible endpoints (OpenAI, vLLM, Ollama, llama.cpp server...).

Every request goes through the same path: circuit breaker -> retries with exponential
backoff and jitter (stamina) on transport errors, timeouts, 5xx and 429 (honouring
Retry-After) -> one httpx.AsyncClient built in start(). 4xx other than 429 are not
retried: asking again will not fix a bad request or a wrong key.

`OpenAIChatModel.complete_json` asks for structured output (`response_format` of type
`json_schema`), validates the answer with msgspec and, if it is invalid, makes ONE
repair attempt that sends the validation error back. `FallbackChatModel` tries a chain
of chat models in order. Embedding models are not interchangeable (different vector
spaces), so there is no fallback embedder on purpose.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import httpx
import msgspec
import numpy as np
import stamina

from grebe.errors import CircuitOpenError, InferenceError, ModelUnavailableError
from grebe.inference.base import (
    ChatMessage,
    EncodedText,
    JSONSchema,
    Span,
    encode_parts_separately,
)
from grebe.inference.batcher import MicroBatcher
from grebe.inference.breaker import CircuitBreaker
from grebe.inference.schema import (
    SchemaValidationError,
    repair_messages,
    schema_name,
    to_json_schema,
    validate_json,
)
from grebe.security.scrub import scrub_text, scrub_url

EMBEDDINGS_PATH = "/embeddings"
CHAT_PATH = "/chat/completions"
RESPONSE_FORMATS = ("json_schema", "json_object", "none")
#: At most this much of an upstream error body goes into an error (scrubbed first).
UPSTREAM_ERROR_CHARS = 200
#: The longest backoff between two attempts, and the most of a Retry-After honoured.
BACKOFF_MAX_S = 5.0
RETRY_AFTER_MAX_S = 60.0
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class RetryableHTTPError(ModelUnavailableError):
    """A 5xx or 429 answer: worth retrying after `retry_after_s` (if the server said).
    The server is down or overloaded, not the post's fault: a system fault."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _retry_hook(exc: Exception) -> bool | float:
    """stamina hook: retry transport errors and 5xx/429; a float is the wait to use."""
    if isinstance(exc, RetryableHTTPError):
        return exc.retry_after_s if exc.retry_after_s is not None else True
    return isinstance(exc, httpx.TransportError)  # connect/read errors and timeouts


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(float(value), RETRY_AFTER_MAX_S) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


class OpenAICompatClient:
    """The shared transport: base URL, key, timeouts, retries, breaker.

    Every message built from the URL or from what the upstream answers goes through
    grebe.security.scrub: `user:pw@`, `?key=`, bearer tokens and the key itself never
    reach an error (and so a dead letter, a /v1/analyze answer or a log line)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 3,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = BACKOFF_MAX_S,
        breaker: CircuitBreaker | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.display_url = scrub_url(self.base_url)  # what errors, logs and metrics show
        self.model = model
        self._api_key = api_key
        self._api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.breaker = breaker or CircuitBreaker(
            f"{model}@{self.display_url}",
            is_failure=lambda exc: not isinstance(exc, SchemaValidationError),
        )
        self._transport = transport
        self._key: str | None = api_key
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._client is not None:
            return
        key = self._api_key
        if key is None and self._api_key_env:
            key = os.environ.get(self._api_key_env)
            if key is None:
                raise InferenceError(f"environment variable {self._api_key_env} is not set")
        self._key = key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s),
            transport=self._transport,
        )

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST with breaker and retries; the decoded JSON body of a 2xx answer."""
        if self._client is None:
            raise InferenceError(f"{self.display_url}: request before start()")
        return await self.breaker.call(lambda: self._post_with_retries(path, {"json": body}))

    async def post_multipart(self, path: str, data: dict[str, str],
                             files: dict[str, tuple[str, bytes, str]]) -> Any:
        """POST a multipart form (audio uploads), with the same breaker and retries."""
        if self._client is None:
            raise InferenceError(f"{self.display_url}: request before start()")
        request = {"data": data, "files": files}
        return await self.breaker.call(lambda: self._post_with_retries(path, request))

    async def _post_with_retries(self, path: str, request: dict[str, Any]) -> Any:
        try:
            async for attempt in stamina.retry_context(
                on=_retry_hook,
                attempts=self.max_attempts,
                timeout=None,
                wait_initial=self.backoff_initial_s,
                wait_max=self.backoff_max_s,
                wait_jitter=self.backoff_initial_s,
            ):
                with attempt:
                    return await self._post_once(path, request)
        except httpx.TransportError as exc:  # unreachable server: a system fault
            raise ModelUnavailableError(self._scrubbed(
                f"{self.display_url}{path}: {type(exc).__name__} after "
                f"{self.max_attempts} attempts: {exc}"
            )) from None  # the cause's message may hold the raw URL
        raise AssertionError("unreachable: stamina re-raises the last error")

    async def _post_once(self, path: str, request: dict[str, Any]) -> Any:
        assert self._client is not None
        response = await self._client.post(path, **request)  # json=... or data=/files=
        if response.status_code >= 400:
            message = self._scrubbed(
                f"{self.display_url}{path}: HTTP {response.status_code}: "
                f"{response.text[:UPSTREAM_ERROR_CHARS]}")
            if response.status_code == 429 or response.status_code >= 500:
                raise RetryableHTTPError(message, _retry_after(response))
            raise InferenceError(message)
        try:
            return response.json()
        except ValueError as exc:
            raise InferenceError(f"{self.display_url}{path}: response is not JSON") from exc

    def _scrubbed(self, message: str) -> str:
        return scrub_text(message, secrets=(self._key,))


class OpenAIEmbedder:
    """Embedder over POST /embeddings. Concurrent single requests are gathered into one
    HTTP call (an async MicroBatcher), so 256 tasks cost a handful of requests."""

    def __init__(
        self,
        client: OpenAICompatClient,
        *,
        dim: int | None = None,
        max_batch_size: int = 128,
        max_wait_ms: float = 5.0,
        max_concurrent_batches: int = 4,
    ) -> None:
        self.client = client
        self._dim = dim
        self.batcher: MicroBatcher[str, np.ndarray] = MicroBatcher(
            self._embed_batch,
            max_batch_size=max_batch_size,
            max_wait_ms=max_wait_ms,
            max_concurrent_batches=max_concurrent_batches,
            name="openai-embed",
        )

    @property
    def name(self) -> str:
        return self.client.model

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise InferenceError(f"{self.name}: dim unknown before start()")
        return self._dim

    async def start(self) -> None:
        await self.client.start()
        await self.batcher.start()
        if self._dim is None:  # ask the endpoint once rather than guess
            self._dim = int((await self._embed_batch(["dimension probe"]))[0].shape[0])

    async def stop(self) -> None:
        await self.batcher.stop()
        await self.client.stop()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InferenceError("embed() takes a sequence of strings, not one string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(await self.batcher.submit_many(list(texts)))

    @property
    def pools_parts(self) -> bool:
        return False  # no token vectors over HTTP

    async def embed_parts(self, text: str, spans: Sequence[Span]) -> EncodedText:
        """No token vectors over HTTP: the text and its parts in one request."""
        return await encode_parts_separately(self, text, spans)

    async def _embed_batch(self, texts: list[str]) -> list[np.ndarray]:
        body = await self.client.post_json(
            EMBEDDINGS_PATH, {"model": self.client.model, "input": texts}
        )
        try:
            rows = sorted(body["data"], key=lambda row: row["index"])
            matrix = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise InferenceError(f"{self.name}: malformed embeddings response: {exc}") from exc
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise InferenceError(
                f"{self.name}: got {matrix.shape[0] if matrix.ndim else 0} embeddings "
                f"for {len(texts)} texts"
            )
        if self._dim is not None and matrix.shape[1] != self._dim:
            raise InferenceError(f"{self.name}: expected dim {self._dim}, got {matrix.shape[1]}")
        bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
        if bad.size:  # NaN/Infinity in the JSON, or a value past float32: no vector to keep
            raise InferenceError(
                f"{self.name}: embeddings with values that are not finite for texts "
                f"{bad[:5].tolist()}"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return list(matrix / np.clip(norms, 1e-12, None))


class OpenAIChatModel:
    """ChatModel over POST /chat/completions with JSON-schema structured output."""

    def __init__(
        self,
        client: OpenAICompatClient,
        *,
        temperature: float = 0.0,
        max_tokens: int | None = 512,
        strict_schema: bool = False,
        response_format: str = "json_schema",
    ) -> None:
        self.client = client
        self.temperature = temperature
        self.max_tokens = max_tokens
        # "json_schema": the OpenAI shape (vLLM, Ollama, hosted APIs). "json_object": the
        # older {"type": "json_object", "schema": ...} shape, the only one the
        # llama-cpp-python server accepts (it answers 500 to json_schema). "none": no
        # response_format at all (servers with neither); the schema goes in a system
        # message and validation plus the repair attempt do the enforcing.
        if response_format not in RESPONSE_FORMATS:
            raise ValueError(
                f"response_format must be one of {RESPONSE_FORMATS}, not {response_format!r}"
            )
        self.response_format = response_format
        # OpenAI's strict mode needs every property required and no extra keys;
        # msgspec schemas with defaults do not satisfy it, and local servers ignore it.
        self.strict_schema = strict_schema

    @property
    def name(self) -> str:
        return self.client.model

    async def start(self) -> None:
        await self.client.start()

    async def stop(self) -> None:
        await self.client.stop()

    async def complete_json(
        self, messages: Sequence[ChatMessage], schema: type[msgspec.Struct] | JSONSchema
    ) -> Any:
        conversation = [dict(m) for m in messages]
        answer = await self._complete(conversation, schema)
        try:
            return validate_json(answer, schema)
        except SchemaValidationError as exc:
            repaired = await self._complete(repair_messages(conversation, answer, exc), schema)
            try:
                return validate_json(repaired, schema)
            except SchemaValidationError as again:
                raise SchemaValidationError(
                    f"{self.name}: invalid answer after one repair attempt: {again}"
                ) from again

    async def _complete(
        self, messages: list[dict[str, str]], schema: type[msgspec.Struct] | JSONSchema
    ) -> str:
        json_schema = to_json_schema(schema)
        body: dict[str, Any] = {
            "model": self.client.model,
            "messages": messages,
            "temperature": self.temperature,
        }
        if self.response_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(schema),
                    "schema": json_schema,
                    "strict": self.strict_schema,
                },
            }
        elif self.response_format == "json_object":
            body["response_format"] = {"type": "json_object", "schema": json_schema}
        else:  # "none"
            instruction = (
                "Answer with a single JSON value matching this JSON Schema, and nothing else:\n"
                + msgspec.json.encode(json_schema).decode()
            )
            body["messages"] = [{"role": "system", "content": instruction}, *messages]
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        response = await self.client.post_json(CHAT_PATH, body)
        try:
            message = response["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise InferenceError(f"{self.name}: malformed chat response: {exc}") from exc
        if message.get("refusal"):
            raise InferenceError(f"{self.name}: model refused: {message['refusal']}")
        content = message.get("content")
        if not isinstance(content, str):
            raise SchemaValidationError("answer has no text content")
        fenced = _FENCE.match(content)  # small local models like ```json fences
        return fenced.group(1) if fenced else content


class FallbackChatModel:
    """Tries each chat model in order; the first valid answer wins. A model whose
    circuit is open is skipped at once, so a dead primary costs nothing per call."""

    def __init__(self, models: Sequence[Any]) -> None:
        if not models:
            raise ValueError("FallbackChatModel needs at least one model")
        self.models = list(models)

    @property
    def name(self) -> str:
        return "fallback(" + ",".join(m.name for m in self.models) + ")"

    async def start(self) -> None:
        for model in self.models:
            await model.start()

    async def stop(self) -> None:
        for model in self.models:
            await model.stop()

    async def complete_json(
        self, messages: Sequence[ChatMessage], schema: type[msgspec.Struct] | JSONSchema
    ) -> Any:
        errors: list[InferenceError] = []
        for model in self.models:
            try:
                return await model.complete_json(messages, schema)
            except InferenceError as exc:
                errors.append(exc)
        summary = "; ".join(f"{m.name}: {e}" for m, e in zip(self.models, errors, strict=True))
        if all(isinstance(e, CircuitOpenError) for e in errors):
            raise CircuitOpenError(f"every chat backend is unavailable: {summary}")
        raise InferenceError(f"every chat backend failed: {summary}") from errors[-1]
