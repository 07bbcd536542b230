"""The OpenAI-compatible transcription backend against a real local server that
implements `POST /v1/audio/transcriptions` by running faster-whisper tiny.en."""

from __future__ import annotations

import functools
import importlib.util
import io
import ipaddress
import json
import shutil
import threading
from collections import deque
from collections.abc import Iterator
from email.parser import BytesParser
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from grebe.config import load_config
from grebe.errors import CircuitOpenError, ConfigError, InferenceError
from grebe.inference.breaker import BreakerState, CircuitBreaker
from grebe.inference.factory import build_transcriber
from grebe.inference.openai_audio import OpenAITranscriber
from grebe.inference.openai_compat import OpenAICompatClient
from grebe.inference.settings import InferenceConfig
from grebe.inference.whisper import packaged_tiny_en
from grebe.media.asr import ASRProcessor
from grebe.media.config import ASRConfig, FetchConfig, VideoConfig
from grebe.media.fetch import IPAddress, MediaFetcher

MODEL = "whisper-tiny-en"
KEY = "sk-test-0123456789abcdef"
BECKETT = ("ever", "failed", "better")


def _beckett() -> Path:
    spec = importlib.util.find_spec("moonshine_voice")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "assets" / "beckett.wav"


class TranscriptionServer:
    """OpenAI's transcription endpoint over faster-whisper; `failures` are answered
    first (status, body), one per request."""

    def __init__(self) -> None:
        from faster_whisper import WhisperModel

        self.model = WhisperModel(str(packaged_tiny_en()), device="cpu", compute_type="int8",
                                  local_files_only=True)
        self.failures: deque[tuple[int, str]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                form = _parse_form(self.headers.get("content-type", ""), body)
                with outer.lock:
                    outer.requests.append({"path": self.path, "form": form,
                                           "auth": self.headers.get("Authorization")})
                    failure = outer.failures.popleft() if outer.failures else None
                if failure is not None:
                    status, payload = failure[0], failure[1].encode()
                elif self.path != "/v1/audio/transcriptions" or "file" not in form:
                    status, payload = 404, b'{"error": "no such endpoint"}'
                else:
                    status, payload = 200, json.dumps(outer.transcribe(form)).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def transcribe(self, form: dict[str, Any]) -> dict[str, Any]:
        segments, info = self.model.transcribe(io.BytesIO(form["file"]), beam_size=1,
                                               vad_filter=True)
        rows = [{"start": s.start, "end": s.end, "text": s.text} for s in segments]
        text = " ".join(r["text"].strip() for r in rows)
        if form.get("response_format") == "json":
            return {"text": text}
        return {"text": text, "language": "english", "duration": info.duration,
                "segments": rows}


def _parse_form(content_type: str, body: bytes) -> dict[str, Any]:
    message = BytesParser(policy=email_policy).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    form: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        form[str(name)] = payload if part.get_filename() else payload.decode()
    return form


@pytest.fixture(scope="module")
def server() -> Iterator[TranscriptionServer]:
    srv = TranscriptionServer()
    yield srv
    srv.server.shutdown()
    srv.server.server_close()


@pytest.fixture(autouse=True)
def _fresh(server: TranscriptionServer) -> None:
    server.failures.clear()
    server.requests.clear()


def _transcriber(server: TranscriptionServer, **kw: Any) -> OpenAITranscriber:
    fmt = kw.pop("response_format", "verbose_json")
    client = OpenAICompatClient(server.url, MODEL, backoff_initial_s=0.01, backoff_max_s=0.02,
                                timeout_s=30.0, **kw)
    return OpenAITranscriber(client, response_format=fmt)


async def test_transcribes_real_speech_with_the_configured_model(
    server: TranscriptionServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREBE_TEST_AUDIO_KEY", KEY)
    transcriber = _transcriber(server, api_key_env="GREBE_TEST_AUDIO_KEY")
    await transcriber.start()
    try:
        transcript = await transcriber.transcribe(_beckett())
    finally:
        await transcriber.stop()
    words = transcript.text.lower()
    assert all(w in words for w in BECKETT), transcript.text
    assert transcript.language == "en" and abs(transcript.duration_s - 9.96) < 0.1
    assert transcript.segments and transcriber.name == f"openai-audio:{MODEL}"
    (request,) = server.requests
    assert request["path"] == "/v1/audio/transcriptions"
    assert request["form"]["model"] == MODEL and request["auth"] == f"Bearer {KEY}"
    assert request["form"]["file"][:4] == b"RIFF"


async def test_plain_json_format_still_gives_a_duration(server: TranscriptionServer) -> None:
    transcriber = _transcriber(server, response_format="json")
    await transcriber.start()
    transcript = await transcriber.transcribe(_beckett())
    await transcriber.stop()
    assert "better" in transcript.text.lower() and transcript.language is None
    assert abs(transcript.duration_s - 9.96) < 0.1  # from the WAV header


async def test_5xx_and_429_are_retried(server: TranscriptionServer) -> None:
    server.failures.extend([(503, '{"error": "loading"}'), (429, '{"error": "slow"}')])
    transcriber = _transcriber(server)
    await transcriber.start()
    transcript = await transcriber.transcribe(_beckett())
    await transcriber.stop()
    assert "better" in transcript.text.lower() and len(server.requests) == 3


async def test_4xx_is_not_retried_and_the_key_is_scrubbed(
    server: TranscriptionServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREBE_TEST_AUDIO_KEY", KEY)
    server.failures.append((401, json.dumps({"error": f"bad key {KEY}"})))
    transcriber = _transcriber(server, api_key_env="GREBE_TEST_AUDIO_KEY")
    await transcriber.start()
    with pytest.raises(InferenceError, match="HTTP 401") as caught:
        await transcriber.transcribe(_beckett())
    await transcriber.stop()
    assert KEY not in str(caught.value) and len(server.requests) == 1


async def test_persistent_failures_open_the_circuit(server: TranscriptionServer) -> None:
    server.failures.extend([(500, '{"error": "boom"}')] * 4)
    breaker = CircuitBreaker(minimum_calls=2, failure_rate_threshold=1.0)
    transcriber = _transcriber(server, max_attempts=2, breaker=breaker)
    await transcriber.start()
    try:
        for _ in range(2):
            with pytest.raises(InferenceError, match="HTTP 500"):
                await transcriber.transcribe(_beckett())
        assert breaker.state is BreakerState.OPEN
        with pytest.raises(CircuitOpenError):
            await transcriber.transcribe(_beckett())
    finally:
        await transcriber.stop()
    assert len(server.requests) == 4  # the open circuit sent nothing


async def test_malformed_answer_is_an_inference_error(server: TranscriptionServer) -> None:
    server.failures.append((200, '{"transcript": "wrong field"}'))
    transcriber = _transcriber(server)
    await transcriber.start()
    with pytest.raises(InferenceError, match="malformed transcription response"):
        await transcriber.transcribe(_beckett())
    await transcriber.stop()


def test_selected_in_config() -> None:
    config = InferenceConfig.model_validate({"transcriber": {
        "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": MODEL,
        "response_format": "json"}})
    built = build_transcriber(config)
    assert isinstance(built, OpenAITranscriber)
    assert built.client.model == MODEL and built.response_format == "json"
    with pytest.raises(ConfigError, match=r"inference\.transcriber: backend openai needs base_url"):
        load_config(inference={"transcriber": {"backend": "openai", "model": MODEL}})


async def _local(host: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address("127.0.0.1")]


async def test_streaming_asr_through_the_endpoint(
    server: TranscriptionServer, tmp_path: Path
) -> None:
    """A URL streamed by ffmpeg, each chunk uploaded to the endpoint as a WAV."""
    shutil.copy(_beckett(), tmp_path / "speech.wav")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    media = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    media.daemon_threads = True
    threading.Thread(target=media.serve_forever, args=(0.02,), daemon=True).start()
    transcriber = _transcriber(server)
    await transcriber.start()
    asr = ASRProcessor(ASRConfig(chunk_s=4), VideoConfig(), transcriber=transcriber)
    await asr.start()
    fetcher = MediaFetcher(FetchConfig(), resolver=_local, allow_networks=["127.0.0.1/32"])
    try:
        result = await asr.transcribe_url(
            "s", f"http://media.test:{media.server_address[1]}/speech.wav", fetcher)
    finally:
        await asr.stop()
        await transcriber.stop()
        media.shutdown()
        media.server_close()
    assert result.ok, result.detail
    assert len(server.requests) == 3  # 9.96 s in chunks of 4 s
    assert "better" in result.text.lower() and abs(result.audio_s - 9.96) < 0.1
