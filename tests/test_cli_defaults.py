"""`grebe run` with no config file runs the packaged default streams and real flows."""

import json
import logging

import pytest
from typer.testing import CliRunner

from grebe import constants as C
from grebe.cli import app

STARTUP_LOGGER = "grebe.commands.startup"


@pytest.mark.slow
def test_no_config_ingest_then_run_annotates_with_the_default_flows(tmp_path, monkeypatch):
    # Its own handler on the start-log's logger, set with setLevel (which also clears the
    # logger's isEnabledFor cache): tests run before this one in the same process leave
    # logging configured otherwise (grebe analyze sets the grebe logger to ERROR).
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in ("grebe.app.coverage", STARTUP_LOGGER)]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
    try:
        _ingest_and_run(tmp_path, monkeypatch, lines)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def _ingest_and_run(tmp_path, monkeypatch, lines):
    monkeypatch.delenv(C.CONFIG_ENV_VAR, raising=False)
    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("GREBE_METRICS__ENABLED", "false")
    monkeypatch.chdir(tmp_path)
    posts = tmp_path / "posts.jsonl"
    posts.write_text(json.dumps({"post": {
        "id": "d1", "author_id": "ann", "text": "You idiot, I will find you. Total garbage."}})
        + "\n")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(posts)]).exit_code == 0
    result = runner.invoke(app, ["run", "--exit-when-done"])
    assert result.exit_code == 0, result.output
    assert "running the defaults of" in result.output
    assert "stream unified_posts runs: post_safety, post_embedding_with_summary, mm_emb_v5" \
        in lines
    assert ("stream unified_posts: local topic posts, eligibilities post_safety, "
            "post_embedding_with_summary, mm_emb_v5 → plans post_safety, "
            "post_embedding_with_summary, mm_emb_v5") in lines
    assert any(line.startswith("config: ") and line.endswith("(no config file: the packaged "
                                                              "defaults)") for line in lines)
    shown = runner.invoke(app, ["annotations", "d1", "--json"])
    assert shown.exit_code == 0, shown.output
    producers = {row["producer"] for row in json.loads(shown.output)}
    assert {"post_safety", "post_embedding_with_summary"} <= producers
