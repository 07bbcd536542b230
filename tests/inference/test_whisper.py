"""faster-whisper tiny.en on speech synthesised by espeak-ng from a known sentence."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from grebe.errors import InferenceError
from grebe.inference.base import Transcriber
from grebe.inference.whisper import WhisperTranscriber

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank"


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words, divided by the reference length."""

    def norm(text: str) -> list[str]:
        return "".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split()

    ref, hyp = norm(reference), norm(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(len(ref), 1)


def test_word_error_rate() -> None:
    assert word_error_rate("a b c d", "a b c d") == 0.0
    assert word_error_rate("a b c d", "a x c") == 0.5
    assert word_error_rate("Hello, world!", "hello world") == 0.0


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is required for the ASR test (apt-get install espeak-ng)")
    path = tmp_path_factory.mktemp("asr") / "sentence.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "120", "-w", str(path), SENTENCE], check=True)
    return path


@pytest.mark.slow
async def test_transcribes_known_sentence_within_15_percent_wer(
    speech_wav: Path, tmp_path: Path
) -> None:
    asr = WhisperTranscriber()
    await asr.start()
    try:
        assert isinstance(asr, Transcriber)
        transcript = await asr.transcribe(speech_wav)
        with pytest.raises(InferenceError, match="not found"):
            await asr.transcribe(tmp_path / "missing.wav")
        garbage = tmp_path / "garbage.wav"
        garbage.write_bytes(b"RIFF....WAVEfmt nonsense")
        with pytest.raises(InferenceError, match="cannot transcribe"):
            await asr.transcribe(garbage)
    finally:
        await asr.stop()
    assert word_error_rate(SENTENCE, transcript.text) <= 0.15, transcript.text
    assert transcript.language == "en"
    assert 3.0 < transcript.duration_s < 8.0
    assert transcript.segments and transcript.segments[0].start >= 0.0


async def test_missing_model_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InferenceError, match=r"model\.bin missing"):
        await WhisperTranscriber(tmp_path).start()
