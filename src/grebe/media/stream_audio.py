"""16 kHz mono audio streamed by ffmpeg from a URL, read in fixed-size chunks.

Whole-file ASR downloads the video first (the byte cap makes long videos fail, and a
20-minute video is mostly bytes of picture nobody transcribes). Here ffmpeg reads the
URL itself — always the loopback StreamProxy that vets every request, see
grebe.media.stream_proxy — decodes the first audio stream only and writes raw 16-bit
PCM to a pipe. The caps are a duration (`-t max_audio_s`) and a wall clock (the process
is killed at the deadline), not bytes. The reader takes `chunk_s` of audio at a time, so
memory holds one chunk whatever the length of the video, and the pipe's backpressure
keeps ffmpeg from running ahead of Whisper.

PCMStream blocks (a subprocess and its pipe): call it from a worker process or a thread;
`transcribe_stream` drives it from the event loop for an in-process Transcriber.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import threading
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np

from grebe.media.video import (
    _NO_AUDIO_MARKERS,
    ASR_SAMPLE_RATE,
    FFMPEG,
    FFmpegError,
    FFmpegTimeoutError,
)

if TYPE_CHECKING:
    from grebe.inference.base import Transcriber

_SAMPLE_BYTES = 2  # s16le
#: Demuxers ffmpeg may use on a streamed URL: plain containers only. Playlists and
#: references (hls, dash, concat, ...) would open further URLs that skip the proxy.
STREAM_FORMATS = ("mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,mp3,wav,ogg,flac,aac,mpegts,"
                  "flv,avi,asf,amr,caf,aiff,w64")
#: ffmpeg speaks only plain HTTP, and only to the loopback proxy (redirects: none).
STREAM_PROTOCOLS = "http,tcp"
#: Audio within this much of the cap counts as cut off by it (ffmpeg stops on a frame).
CAP_TOLERANCE_S = 0.5


class NoAudioStreamError(FFmpegError):
    """The media has no audio stream: nothing to transcribe (not a failure)."""


@dataclass(frozen=True)
class StreamLimits:
    """Plain data (it crosses into ASR worker processes)."""

    max_audio_s: float  # duration cap: audio beyond it is never read
    chunk_s: float  # audio handed to the model at a time
    timeout_s: float  # wall clock for the whole stream
    read_timeout_s: float  # ffmpeg gives up on a connection silent this long
    reconnect_delay_max_s: int  # ffmpeg's reconnect back-off ceiling


def ffmpeg_stream_args(url: str, limits: StreamLimits) -> list[str]:
    """The ffmpeg command (an argument list, never a shell string)."""
    return [
        FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "error",
        "-protocol_whitelist", STREAM_PROTOCOLS, "-format_whitelist", STREAM_FORMATS,
        "-max_redirects", "0",
        "-reconnect", "1", "-reconnect_streamed", "1",
        "-reconnect_delay_max", str(limits.reconnect_delay_max_s),
        "-rw_timeout", str(int(limits.read_timeout_s * 1_000_000)),
        "-i", url,
        "-map", "0:a:0", "-vn", "-sn", "-dn", "-ac", "1", "-ar", str(ASR_SAMPLE_RATE),
        "-t", f"{limits.max_audio_s:g}", "-f", "s16le", "-c:a", "pcm_s16le", "pipe:1",
    ]


class PCMStream:
    """`with PCMStream(url, limits) as stream: for chunk in stream: ...` — float32 arrays
    of at most `chunk_s` seconds. Raises NoAudioStreamError, FFmpegTimeoutError (the
    deadline passed; ffmpeg was killed) or FFmpegError (ffmpeg failed)."""

    def __init__(self, url: str, limits: StreamLimits, *, deadline: float | None = None) -> None:
        self.url = url
        self.limits = limits
        self.deadline = deadline if deadline is not None else time.monotonic() + limits.timeout_s
        self.samples = 0  # read so far
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self._timer: threading.Timer | None = None
        self._timed_out = False

    @property
    def audio_s(self) -> float:
        return self.samples / ASR_SAMPLE_RATE

    @property
    def capped(self) -> bool:
        """The duration cap cut the audio short (there may have been more)."""
        return self.audio_s >= self.limits.max_audio_s - CAP_TOLERANCE_S

    def __enter__(self) -> PCMStream:
        try:
            self._proc = subprocess.Popen(
                ffmpeg_stream_args(self.url, self.limits), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=self._stderr)
        except OSError as exc:
            self._stderr.close()
            raise FFmpegError(f"cannot run ffmpeg: {exc}") from exc
        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._expire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _expire(self) -> None:
        self._timed_out = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    def close(self) -> None:
        """Kill ffmpeg if it still runs (a cancelled job, a model failure) and clean up."""
        if self._timer is not None:
            self._timer.cancel()
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        self._stderr.close()

    def read_chunk(self) -> np.ndarray | None:
        """The next chunk, or None at the end of the audio (checks how ffmpeg ended)."""
        assert self._proc is not None and self._proc.stdout is not None, "not entered"
        want = int(self.limits.chunk_s * ASR_SAMPLE_RATE) * _SAMPLE_BYTES
        data = self._proc.stdout.read(want)
        usable = len(data) - len(data) % _SAMPLE_BYTES
        if usable:
            self.samples += usable // _SAMPLE_BYTES
            pcm = np.frombuffer(data[:usable], dtype=np.int16)
            return pcm.astype(np.float32) / 32768.0
        self._finish()
        return None

    def __iter__(self) -> Iterator[np.ndarray]:
        while (chunk := self.read_chunk()) is not None:
            yield chunk

    def _finish(self) -> None:
        assert self._proc is not None
        code = self._proc.wait()
        if self._timer is not None:
            self._timer.cancel()
        if self._timed_out:
            raise FFmpegTimeoutError(
                f"streaming audio took longer than {self.limits.timeout_s:g}s; stopped "
                f"after {self.audio_s:.1f}s of audio")
        self._stderr.seek(0)
        stderr = self._stderr.read().decode("utf-8", "replace").strip()
        if code != 0:
            if any(marker in stderr for marker in _NO_AUDIO_MARKERS):
                raise NoAudioStreamError("no audio stream")
            raise FFmpegError(f"ffmpeg failed streaming audio (exit {code}): {stderr[-500:]}")


@dataclass(frozen=True)
class StreamedTranscript:
    text: str
    language: str | None
    audio_s: float
    capped: bool


async def transcribe_stream(transcriber: Transcriber, url: str,
                            limits: StreamLimits) -> StreamedTranscript:
    """Stream `url` into `transcriber` (which takes WAV files): each chunk is written to
    a small WAV and transcribed before the next is read, all within `limits.timeout_s`.
    Cancelling this kills ffmpeg at once. Raises as PCMStream does, TimeoutError, or
    the transcriber's error."""
    parts: list[str] = []
    language: str | None = None
    with tempfile.TemporaryDirectory(prefix="grebe-asr-") as tmp:
        stream = PCMStream(url, limits)
        await asyncio.to_thread(stream.__enter__)
        try:
            while (chunk := await asyncio.to_thread(stream.read_chunk)) is not None:
                wav = Path(tmp) / "chunk.wav"
                await asyncio.to_thread(write_wav, wav, chunk)
                left = max(0.0, stream.deadline - time.monotonic())
                transcript = await asyncio.wait_for(transcriber.transcribe(wav), left)
                if transcript.text:
                    parts.append(transcript.text)
                    language = language or transcript.language
        finally:
            await asyncio.to_thread(stream.close)
    return StreamedTranscript(text=" ".join(parts), language=language,
                              audio_s=stream.audio_s, capped=stream.capped)


def write_wav(path: Path, samples: np.ndarray) -> None:
    """float32 samples in [-1, 1] -> a 16 kHz mono 16-bit WAV file."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(ASR_SAMPLE_RATE)
        out.writeframes(pcm.tobytes())
