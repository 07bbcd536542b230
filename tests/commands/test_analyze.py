"""`grebe analyze` through the CLI, with model doubles (test_real_models.py: real ones)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.conftest import fake_models
from flows.doubles import FakeMedia
from grebe.cli import app
from grebe.commands import analyze
from grebe.flows import models
from grebe.flows.services import MediaFacts


@pytest.fixture
def doubles(monkeypatch: pytest.MonkeyPatch) -> FakeMedia:
    media = FakeMedia(MediaFacts(ocr_text="SALE 50% OFF", nsfw=(0.02,), nsfw_model="fake"))
    monkeypatch.setattr(models, "build_models", lambda config, settings: fake_models())
    monkeypatch.setattr(models, "build_media", lambda config, m, peers=None: media)
    return media


def test_analyze_prints_every_eligible_flow(doubles: FakeMedia) -> None:
    result = CliRunner().invoke(app, ["analyze", "you idiot, buy cheap pills now", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["plan"]: row for row in json.loads(result.output)}
    assert len(rows) == 10
    assert rows["post_safety"]["labels"] == ["offensive"]
    assert rows["reply_ranking"]["status"] == "skipped"
    assert rows["reply_ranking"]["skipped_because"] == "post type not handled by this plan"
    assert rows["post_embedding_with_summary"]["embedding_dims"] == 384
    assert doubles.calls == 0  # no media given: nothing hydrated


def test_analyze_reply_with_image(doubles: FakeMedia, tmp_path: Path) -> None:
    image = tmp_path / "photo.png"
    image.write_bytes(b"\x89PNG")
    result = CliRunner().invoke(app, ["analyze", "great photo of the cafe", "--json",
                                      "--reply-to", "the corner cafe", "--image", str(image)])
    assert result.exit_code == 0, result.output
    rows = {row["plan"]: row for row in json.loads(result.output)}
    assert rows["reply_ranking"]["status"] == "success"
    assert rows["mm_emb_v5_for_reply"]["labels"] == []
    assert doubles.calls == 1


def test_analyze_table_output(doubles: FakeMedia) -> None:
    result = CliRunner().invoke(app, ["analyze", "hello world"])
    assert result.exit_code == 0 and "post_safety" in result.output


def test_local_paths_are_allowed_only_for_the_named_files(tmp_path: Path) -> None:
    payload, roots = analyze.build_payload(
        "x", images=[str(tmp_path / "a.png"), "https://example.com/b.png"], videos=[],
        reply_to=None, plans=["post_safety"])
    assert roots == [tmp_path.resolve()]
    assert payload.post.media[0].url.startswith("file://")
    assert payload.post.media[1].url == "https://example.com/b.png"
