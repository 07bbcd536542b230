"""Probing, frame sampling and audio extraction on real clips with real ffmpeg."""

from __future__ import annotations

import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

from grebe.errors import MediaError
from grebe.media.video import (
    FFmpegError,
    FFmpegTimeoutError,
    extract_audio,
    probe,
    sample_frames,
    sample_times,
)


def test_probe_reports_streams(bunny: Path, silent_clip: Path) -> None:
    info = probe(bunny)
    assert info.has_video and info.has_audio and info.audio_codec == "aac"
    assert 5.0 < info.duration_s < 5.6 and (info.width, info.height) == (1280, 720)
    silent = probe(silent_clip)
    assert silent.has_video and not silent.has_audio


def test_frames_are_evenly_spaced_and_deterministic(silent_clip: Path) -> None:
    first = sample_frames(silent_clip, 6, max_side=128)
    again = sample_frames(silent_clip, 6, max_side=128)
    assert [f.index for f in first] == list(range(6))
    targets = sample_times(probe(silent_clip).duration_s, 6)
    for frame, target in zip(first, targets, strict=True):
        assert target - 1e-6 <= frame.time_s < target + 0.1  # first frame at/after target
        assert frame.rgb.shape[2] == 3 and max(frame.rgb.shape[:2]) <= 128
    for a, b in zip(first, again, strict=True):
        assert a.time_s == b.time_s and np.array_equal(a.rgb, b.rgb)
    assert not np.array_equal(first[0].rgb, first[-1].rgb)  # the clip moves


def _decoded_straight_through(path: Path, count: int) -> list[tuple[float, np.ndarray]]:
    """The frames `sample_frames` should pick, found by decoding every frame in order."""
    import av

    targets = sample_times(probe(path).duration_s, count)
    expected: list[tuple[float, np.ndarray]] = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            if len(expected) < len(targets) and frame.time >= targets[len(expected)] - 1e-6:
                expected.append((float(frame.time), frame.to_ndarray(format="rgb24")))
    return expected


def test_frames_match_sequential_decode(bunny: Path) -> None:
    """Seeking must pick the very frame that decoding straight through would pick."""

    frames = sample_frames(bunny, 4, max_side=1280)
    expected = _decoded_straight_through(bunny, 4)
    assert len(expected) == len(frames) == 4
    for sample, (time, rgb) in zip(frames, expected, strict=True):
        assert time == sample.time_s
        assert np.array_equal(rgb, sample.rgb)


def test_audio_extraction_to_16k_mono(bunny: Path, tmp_path: Path) -> None:
    result = extract_audio(bunny, tmp_path / "a.wav", timeout_s=30)
    assert not result.no_audio and result.path is not None
    with wave.open(str(result.path)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        assert 5.0 < wav.getnframes() / 16000 < 5.6


def test_no_audio_stream_is_an_outcome_not_an_error(silent_clip: Path, tmp_path: Path) -> None:
    result = extract_audio(silent_clip, tmp_path / "a.wav", timeout_s=30)
    assert result.no_audio and result.path is None
    assert not (tmp_path / "a.wav").exists()


def test_ffmpeg_timeout_is_distinct(bunny: Path, tmp_path: Path) -> None:
    with pytest.raises(FFmpegTimeoutError, match="longer than"):
        extract_audio(bunny, tmp_path / "a.wav", timeout_s=0.001)
    assert not (tmp_path / "a.wav").exists()


def _corrupt(bunny: Path, tmp_path: Path) -> Path:
    data = bytearray(bunny.read_bytes())
    # Keep the ftyp box so it still looks like MP4; scramble the rest.
    rng = np.random.default_rng(7)
    tail = rng.integers(0, 256, size=len(data) - 32, dtype=np.uint8).tobytes()
    path = tmp_path / "corrupt.mp4"
    path.write_bytes(bytes(data[:32]) + tail)
    return path


def test_corrupt_video_gives_clean_errors(bunny: Path, tmp_path: Path) -> None:
    path = _corrupt(bunny, tmp_path)
    with pytest.raises(MediaError):
        probe(path)
    with pytest.raises(MediaError):
        sample_frames(path, 4)
    with pytest.raises(FFmpegError):
        extract_audio(path, tmp_path / "a.wav", timeout_s=30)


def test_truncated_video_is_a_clean_error(bunny: Path, tmp_path: Path) -> None:
    """Half an MP4 (its index lives at the end) must fail cleanly, not hang or crash."""
    path = tmp_path / "half.mp4"
    path.write_bytes(bunny.read_bytes()[: bunny.stat().st_size // 2])
    with pytest.raises(MediaError, match="cannot open video"):
        sample_frames(path, 4, max_side=64)


class _CountingContainer:
    """A PyAV container whose decode() counts the frames the decoder produced."""

    def __init__(self, container: object, counter: list[int]) -> None:
        self._container, self._counter = container, counter

    def __getattr__(self, name: str) -> object:
        return getattr(self._container, name)

    def decode(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        for frame in self._container.decode(*args, **kwargs):  # type: ignore[attr-defined]
            self._counter[0] += 1
            yield frame


def test_one_keyframe_clip_is_not_decoded_again_for_every_sample(
        photo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clip whose only keyframe is its first (x264's default GOP of 250 frames is 25 s
    at 10 fps): each seek lands back on frame 0, so seeking to every sample decoded the
    clip's start over and over (~4x its frames for 8 samples). Once a seek is seen to
    land behind where decoding already was, sampling decodes straight through; the
    frames chosen are the same."""
    import av

    from grebe.media import video

    clip = tmp_path / "one-keyframe.mp4"
    subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-loop", "1", "-framerate", "10",
         "-i", str(photo), "-t", "10", "-vf", "crop=iw/2:ih/2:(iw/2)*t/10:0,scale=128:-2",
         "-c:v", "libx264", "-preset", "ultrafast", "-g", "1000", "-pix_fmt", "yuv420p",
         str(clip)], check=True, timeout=120)
    with av.open(str(clip)) as container:
        keyframes = sum(1 for p in container.demux(video=0) if p.is_keyframe)
    with av.open(str(clip)) as container:
        total = sum(1 for _ in container.decode(video=0))
    assert (total, keyframes) == (100, 1)
    counter = [0]
    opened = video._open
    monkeypatch.setattr(video, "_open", lambda *a, **k: _CountingContainer(opened(*a, **k),
                                                                            counter))
    frames = sample_frames(clip, 8, max_side=128)
    assert counter[0] <= total * 1.5, f"decoded {counter[0]} frames of a {total}-frame clip"
    monkeypatch.undo()
    expected = _decoded_straight_through(clip, 8)
    assert [f.time_s for f in frames] == [t for t, _ in expected]
    for sample, (_, rgb) in zip(frames, expected, strict=True):
        assert np.array_equal(rgb, sample.rgb)
