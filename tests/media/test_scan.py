"""`grebe media scan`: the command, its JSON report and its exit code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from grebe.cli import app


@pytest.fixture
def inbox(tmp_path: Path, photo: Path, silent_clip: Path) -> Path:
    folder = tmp_path / "inbox"
    folder.mkdir()
    shutil.copy(photo, folder / "astronaut.png")
    shutil.copy(photo.parent / "coffee.png", folder / "coffee.png")
    Image.open(photo).convert("RGB").resize((256, 256)).save(folder / "copy.jpg", quality=50)
    shutil.copy(silent_clip, folder / "clip.mp4")
    return folder


def test_scan_json_report(inbox: Path) -> None:
    result = CliRunner().invoke(
        app, ["media", "scan", str(inbox), "--json", "--no-asr", "--no-nsfw", "--no-ocr",
              "--frames", "3"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
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
