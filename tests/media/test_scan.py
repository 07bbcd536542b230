"""`grebe media scan`: the command, its JSON report and its exit code."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from grebe.cli import app
from grebe.media.config import MediaConfig, PipelineConfig
from grebe.media.pipeline import STOPPED, ItemReport
from grebe.media.scan import scan


@pytest.fixture
def inbox(tmp_path: Path, photo: Path, silent_clip: Path) -> Path:
    folder = tmp_path / "inbox"
    folder.mkdir()
    shutil.copy(photo, folder / "astronaut.png")
    shutil.copy(photo.parent / "coffee.png", folder / "coffee.png")
    Image.open(photo).convert("RGB").resize((256, 256)).save(folder / "copy.jpg", quality=50)
    shutil.copy(silent_clip, folder / "clip.mp4")
    return folder


def _scan_json(inbox: Path, *options: str, exit_code: int) -> dict:
    """`grebe media scan --json` with the heavy models off: its parsed report."""
    result = CliRunner().invoke(
        app, ["media", "scan", str(inbox), "--json", "--no-asr", "--no-nsfw", "--no-ocr",
              *options])
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def test_scan_json_report(inbox: Path) -> None:
    report = _scan_json(inbox, "--frames", "3", exit_code=0)
    items = {Path(i["url"]).name: i for i in report["items"]}
    assert set(items) == {"astronaut.png", "coffee.png", "copy.jpg", "clip.mp4"}
    assert items["clip.mp4"]["kind"] == "video" and items["clip.mp4"]["frames"] == 3
    assert items["copy.jpg"]["content_type"] == "image/jpeg"
    assert [Path(u).name for u in report["groups"][0]] == ["astronaut.png", "copy.jpg"]
    assert report["stages"]["download"]["processed"] == 4
    assert report["stages"]["dedup"]["errors"] == 0


def test_scan_table_and_failing_item_exit_code(inbox: Path) -> None:
    result = CliRunner().invoke(
        app, ["media", "scan", str(inbox / "astronaut.png"), "http://10.0.0.1/a.png",
              "--no-asr", "--no-nsfw", "--no-ocr"])
    assert result.exit_code == 1
    assert "near-duplicate" not in result.stdout
    assert "refused" in result.stdout and "stages" in result.stdout
    assert "p99 ms" in result.stdout


@pytest.mark.slow
def test_scan_with_whisper(espeak_video: tuple[Path, str], inbox: Path) -> None:
    video, _ = espeak_video
    result = CliRunner().invoke(app, ["media", "scan", str(video), "--json", "--no-nsfw",
                                      "--no-ocr"])
    assert result.exit_code == 0, result.output
    item = json.loads(result.stdout)["items"][0]
    assert "weekly report" in item["transcript"].lower()


@pytest.mark.slow
def test_scan_with_real_nsfw_and_ocr(photo: Path) -> None:
    page = photo.parent / "page.png"
    result = CliRunner().invoke(app, ["media", "scan", str(page), str(photo), "--json",
                                      "--no-asr"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    items = {Path(i["url"]).name: i for i in report["items"]}
    assert "markers" in items["page.png"]["ocr_text"]
    assert all(0 <= i["nsfw"][0] < 0.2 for i in items.values())  # ordinary photos
    assert report["models"] == {"nsfw": "open-nsfw", "ocr": "tesseract-eng"}


class _StallingOCR:
    """Reads the photo's view at once and stalls on every video frame until cancelled:
    the videos can only end by the scan's time cap, whatever the machine's speed."""

    name = "stalling-ocr"

    async def read_text(self, image: object) -> str:
        if Path(str(image)).stem == "view":
            return ""
        await asyncio.Event().wait()
        return ""


def test_scan_stops_at_max_seconds_and_reports_what_finished(
    inbox: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work))  # where per-item dirs go
    inputs = [str(inbox / "astronaut.png"), str(inbox / "clip.mp4")]
    config = MediaConfig(pipeline=PipelineConfig(asr=False, nsfw=False))
    done: list[ItemReport] = []

    # The video can only end by the cap (its OCR never answers); the photo takes well
    # under a second, and the cap leaves it a wide margin on a loaded machine.
    result = asyncio.run(scan(inputs, config, models={"ocr": _StallingOCR()},
                              on_done=done.append, max_seconds=15))

    assert result.timed_out
    photo, video = result.items
    assert photo.error is None and photo.width == 512
    assert video.error == STOPPED
    assert len(done) == 2  # every item reported, the stopped one included
    # The figures of the work done before the cap are kept, not lost with the scan.
    assert result.stages["download"]["processed"] == 2
    assert result.stages["classify"]["processed"] >= 1
    assert result.stages["dedup"]["processed"] == 1
    assert list(work.iterdir()) == []  # the stopped item's files removed too


def test_scan_cli_max_seconds_exits_1_with_the_partial_report(inbox: Path) -> None:
    report = _scan_json(inbox, "--max-seconds", "0.001", exit_code=1)
    assert report["timed_out"] is True
    assert {i["error"] for i in report["items"]} == {STOPPED}
