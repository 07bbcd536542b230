"""A Transcriber over an OpenAI-compatible `POST /audio/transcriptions` endpoint
(OpenAI, vLLM's Whisper serving, faster-whisper-server/speaches, LocalAI...).

It rides on OpenAICompatClient, so it has the chat and embedding clients' breaker,
retries (transport errors, 5xx, 429 with Retry-After) and scrubbing of keys and URLs
from every error. The audio goes up as a multipart upload of the WAV file. Streaming ASR
hands it one chunk (`media.asr.chunk_s`, 60 s = 1.9 MB of 16 kHz WAV) at a time, well
under the 25 MB hosted endpoints accept.
"""

from __future__ import annotations

import asyncio
import contextlib
import wave
from pathlib import Path
from typing import Any

from grebe.errors import InferenceError
from grebe.inference.base import Segment, Transcript
from grebe.inference.openai_compat import OpenAICompatClient

AUDIO_TRANSCRIPTIONS_PATH = "/audio/transcriptions"
#: "verbose_json" also returns language, duration and segments; "json" only the text
#: (some servers know only that one).
TRANSCRIPTION_FORMATS = ("verbose_json", "json")


class OpenAITranscriber:
    """Transcriber protocol: a WAV file -> Transcript, by the configured model name."""

    def __init__(self, client: OpenAICompatClient, *, language: str | None = None,
                 response_format: str = "verbose_json") -> None:
        if response_format not in TRANSCRIPTION_FORMATS:
            raise ValueError(f"response_format must be one of {TRANSCRIPTION_FORMATS}, "
                             f"not {response_format!r}")
        self.client = client
        self.language = language
        self.response_format = response_format

    @property
    def name(self) -> str:
        return f"openai-audio:{self.client.model}"

    async def start(self) -> None:
        await self.client.start()

    async def stop(self) -> None:
        await self.client.stop()

    async def transcribe(self, wav_path: str | Path) -> Transcript:
        path = Path(wav_path)
        try:
            audio = await asyncio.to_thread(path.read_bytes)
        except OSError as exc:
            raise InferenceError(f"audio file not found: {path}") from exc
        form = {"model": self.client.model, "response_format": self.response_format}
        if self.language:
            form["language"] = self.language
        body = await self.client.post_multipart(
            AUDIO_TRANSCRIPTIONS_PATH, form, {"file": (path.name, audio, "audio/wav")})
        return self._parse(body, path)

    def _parse(self, body: Any, path: Path) -> Transcript:
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise InferenceError(f"{self.name}: malformed transcription response "
                                 "(no text field)")
        text = body["text"].strip()
        segments: list[Segment] = []
        for row in body.get("segments") or ():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                segments.append(Segment(start=float(row["start"]), end=float(row["end"]),
                                        text=str(row["text"]).strip()))
        duration = body.get("duration")
        language = body.get("language") if isinstance(body.get("language"), str) else None
        return Transcript(
            text=text, language=_iso_code(language) if text else None,
            segments=tuple(segments),
            duration_s=float(duration) if isinstance(duration, int | float) else _wav_s(path))


def _iso_code(language: str | None) -> str | None:
    """OpenAI's verbose_json names the language ("english"); grebe uses ISO 639-1."""
    if language is None:
        return None
    return _LANGUAGE_NAMES.get(language.lower(), language.lower())


_LANGUAGE_NAMES = {"english": "en", "french": "fr", "german": "de", "spanish": "es",
                   "italian": "it", "portuguese": "pt", "dutch": "nl", "japanese": "ja",
                   "chinese": "zh", "korean": "ko", "russian": "ru", "arabic": "ar",
                   "hindi": "hi", "turkish": "tr", "polish": "pl"}


def _wav_s(path: Path) -> float:
    """The WAV's duration from its header (for servers that do not report it)."""
    try:
        with wave.open(str(path), "rb") as wav:
            return wav.getnframes() / float(wav.getframerate() or 1)
    except (OSError, wave.Error, EOFError):
        return 0.0
