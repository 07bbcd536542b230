"""The ASR processor: de-duplication, cache, error taxonomy, drain — and real Whisper."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from grebe.errors import InferenceError, MediaError
from grebe.inference.base import Transcript
from grebe.media.asr import ASRErrorCode, ASRProcessor
from grebe.media.config import ASRConfig, VideoConfig


class SlowTranscriber:
    """Counts calls; takes `delay` seconds (a stand-in whose timing tests can control)."""

    name = "slow"

    def __init__(self, delay: float = 0.2, text: str = "hello there") -> None:
        self.delay = delay
        self.text = text
        self.calls = 0

    async def transcribe(self, wav_path: str | Path) -> Transcript:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return Transcript(text=self.text, language="en", duration_s=5.0)


class BrokenTranscriber(SlowTranscriber):
    async def transcribe(self, wav_path: str | Path) -> Transcript:
        raise InferenceError("model exploded")


async def test_concurrent_requests_for_one_post_run_one_job(bunny: Path) -> None:
    fake = SlowTranscriber(delay=0.3)
    asr = ASRProcessor(transcriber=fake)
    await asr.start()
    results = await asyncio.gather(*(asr.transcribe("post-1", bunny) for _ in range(10)))
    assert fake.calls == 1 and asr.stats.jobs == 1 and asr.stats.deduplicated == 9
    assert {r.text for r in results} == {"hello there"}
    again = await asr.transcribe("post-1", bunny)  # now from the TTL cache
    assert again.text == "hello there" and asr.stats.cache_hits == 1 and fake.calls == 1
    await asr.transcribe("post-2", bunny)
    assert fake.calls == 2
    await asr.stop()


async def test_cancelled_caller_does_not_cancel_the_job(bunny: Path) -> None:
    fake = SlowTranscriber(delay=0.3)
    asr = ASRProcessor(transcriber=fake)
    await asr.start()
    impatient = asyncio.create_task(asr.transcribe("p", bunny))
    patient = asyncio.create_task(asr.transcribe("p", bunny))
    await asyncio.sleep(0.1)
    impatient.cancel()
    assert (await patient).text == "hello there"
    await asr.stop()


async def test_a_job_every_caller_gave_up_on_is_cancelled(bunny: Path) -> None:
    """Issue 9: when a plan gives up, its media jobs stop — the transcription included."""

    class Watched(SlowTranscriber):
        def __init__(self) -> None:
            super().__init__(delay=30)
            self.started = asyncio.Event()
            self.cancelled = False

        async def transcribe(self, wav_path: str | Path) -> Transcript:
            self.started.set()
            try:
                return await super().transcribe(wav_path)
            except asyncio.CancelledError:
                self.cancelled = True
                raise

    fake = Watched()
    asr = ASRProcessor(transcriber=fake)
    await asr.start()
    first = asyncio.create_task(asr.transcribe("p", bunny))
    second = asyncio.create_task(asr.transcribe("p", bunny))
    await asyncio.wait_for(fake.started.wait(), 30)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(0.05)  # room for a wrongly delivered cancellation to show
    assert not fake.cancelled  # one caller left: the job goes on
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    async with asyncio.timeout(5):
        while asr._in_flight:  # noqa: ASYNC110  # the job set has no event
            await asyncio.sleep(0.01)
    assert fake.cancelled
    assert await asr.stop() == 0


async def test_error_taxonomy(bunny: Path, silent_clip: Path, corrupt_video: Path) -> None:
    asr = ASRProcessor(ASRConfig(timeout_s=0.1), transcriber=SlowTranscriber(delay=1.0))
    await asr.start()
    no_audio = await asr.transcribe("silent", silent_clip)
    assert no_audio.error == ASRErrorCode.NO_AUDIO_STREAM and no_audio.text == ""
    timed_out = await asr.transcribe("slow", bunny)
    assert timed_out.error == ASRErrorCode.ASR_TIMEOUT
    broken = await asr.transcribe("corrupt", corrupt_video)
    assert broken.error == ASRErrorCode.FFMPEG_ERROR and broken.detail
    await asr.stop()

    tight = ASRProcessor(video=VideoConfig(ffmpeg_timeout_s=0.001), transcriber=SlowTranscriber())
    await tight.start()
    assert (await tight.transcribe("x", bunny)).error == ASRErrorCode.FFMPEG_TIMEOUT
    await tight.stop()

    failing = ASRProcessor(transcriber=BrokenTranscriber())
    await failing.start()
    result = await failing.transcribe("x", bunny)
    assert result.error == ASRErrorCode.UNKNOWN and "exploded" in (result.detail or "")
    # Transient failures are not cached: the next request tries again.
    await failing.transcribe("x", bunny)
    assert failing.stats.jobs == 2 and failing.stats.failures == 2
    await failing.stop()


async def test_drain_on_shutdown(bunny: Path) -> None:
    asr = ASRProcessor(transcriber=SlowTranscriber(delay=0.3))
    await asr.start()
    job = asyncio.create_task(asr.transcribe("p", bunny))
    await asyncio.sleep(0.05)
    assert await asr.stop(drain_window_s=5) == 0  # finished inside the window
    assert (await job).text == "hello there"
    with pytest.raises(MediaError, match="not running"):
        await asr.transcribe("q", bunny)

    asr = ASRProcessor(transcriber=SlowTranscriber(delay=5))
    await asr.start()
    job = asyncio.create_task(asr.transcribe("p", bunny))
    await asyncio.sleep(0.2)
    assert await asr.stop(drain_window_s=0.1) == 1
    result = await asyncio.wait_for(job, 2)
    assert result.error == ASRErrorCode.UNKNOWN and "stopped" in (result.detail or "")


# --- real Whisper tiny.en in a worker process ----------------------------------------


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def word_error_rate(reference: str, hypothesis: str) -> float:
    ref, hyp = _words(reference), _words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)] / max(1, len(ref))


def test_wer_helper() -> None:
    assert word_error_rate("a b c d", "a b c d") == 0
    assert word_error_rate("a b c d", "a x c") == 0.5


@pytest.mark.slow
async def test_real_whisper_in_worker_processes(
    espeak_video: tuple[Path, str], speech_wav: Path, bunny: Path, silent_clip: Path
) -> None:
    video, script = espeak_video
    asr = ASRProcessor(ASRConfig(workers=1))
    await asr.start()
    try:
        spoken, speech, music, silent, *dups = await asyncio.gather(
            asr.transcribe("espeak", video),
            asr.transcribe("beckett", speech_wav),
            asr.transcribe("bunny", bunny),
            asr.transcribe("silent", silent_clip),
            *(asr.transcribe("espeak", video) for _ in range(5)),
        )
        assert spoken.ok, spoken.detail
        wer = word_error_rate(script, spoken.text)
        assert wer <= 0.15, (wer, spoken.text)
        assert all(d.text == spoken.text for d in dups)
        assert asr.stats.jobs == 4  # the five duplicates joined the first espeak job

        assert speech.ok and speech.language == "en"
        # beckett.wav is a person reading Beckett's "Worstward Ho" line.
        beckett = "ever tried ever failed no matter try again fail again fail better"
        assert word_error_rate(beckett, speech.text) <= 0.2, speech.text

        assert music.ok and len(_words(music.text)) <= 3, music.text  # no speech in bunny
        assert silent.error == ASRErrorCode.NO_AUDIO_STREAM
    finally:
        assert await asr.stop() == 0


@pytest.mark.slow
async def test_real_whisper_timeout_stops_the_worker_job(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.find_spec("moonshine_voice")
    assert spec is not None and spec.origin is not None
    long_wav = Path(spec.origin).parent / "assets" / "two_cities.wav"  # ~2 minutes
    asr = ASRProcessor(ASRConfig(workers=1, timeout_s=1.0))
    await asr.start()
    try:
        result = await asr.transcribe("long", long_wav)
        assert result.error == ASRErrorCode.ASR_TIMEOUT
        assert result.elapsed_s < 15  # stopped at a segment boundary, not after 2 min
    finally:
        await asr.stop()


def test_workers_run_whisper_on_one_thread_by_default() -> None:
    """An ASR worker shares the cores with decoding and classification: CTranslate2's
    default of 4 OpenMP threads (spinning when idle) cost ~15% more CPU per clip."""
    assert ASRProcessor().settings.cpu_threads == 1
    assert ASRProcessor(ASRConfig(cpu_threads=0)).settings.cpu_threads == 0
