"""`grebe run` and `grebe serve` say at start which config file they read and, per stream,
its broker, topic, eligibilities and the plans that serve them."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grebe import constants as C
from grebe.cli import app
from grebe.commands import startup
from grebe.config import load_config

runner = CliRunner()
STARTUP_LOGGER = "grebe.commands.startup"


@pytest.fixture
def start_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The start log's lines so far. Its own level: tests before this one in the process
    may leave the grebe logger at ERROR (`grebe analyze` does)."""
    caplog.set_level(logging.INFO, logger=STARTUP_LOGGER)
    return lambda: [r.getMessage() for r in caplog.records if r.name == STARTUP_LOGGER]


@pytest.fixture
def basic_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("GREBE_ENGINE__PROCESSES", "0")
    monkeypatch.setenv("GREBE_METRICS__ENABLED", "false")
    monkeypatch.delenv(C.CONFIG_ENV_VAR, raising=False)
    config = tmp_path / "grebe.yaml"
    config.write_text(json.dumps({"streams": [
        {"name": "posts", "eligibilities": ["basic"]},
        {"name": "loud", "topic": "posts.loud", "eligibilities": ["basic"], "weight": 2},
    ]}))
    return config


def test_run_says_which_file_and_what_each_stream_runs(basic_config: Path, start_log) -> None:
    result = runner.invoke(app, ["run", "-c", str(basic_config), "--exit-when-done"])
    assert result.exit_code == 0, result.output
    assert start_log() == [
        f"config: {basic_config} (--config)",
        "stream posts: local topic posts, eligibilities basic → plans basic",
        "stream loud: local topic posts.loud, eligibilities basic → plans basic",
    ]


def test_serve_says_it_too(basic_config: Path, start_log, monkeypatch) -> None:
    import grebe.api.server

    served = []  # a double for the server: this test is about what is said before it
    monkeypatch.setattr(grebe.api.server, "run", lambda settings: served.append(settings) or 0)
    monkeypatch.setenv(C.CONFIG_ENV_VAR, str(basic_config))
    result = runner.invoke(app, ["serve", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert len(served) == 1 and served[0].api.port == 0
    assert start_log() == [
        f"config: {basic_config} (${C.CONFIG_ENV_VAR})",
        "stream posts: local topic posts, eligibilities basic → plans basic",
        "stream loud: local topic posts.loud, eligibilities basic → plans basic",
    ]


def test_no_config_file_names_the_packaged_defaults_and_their_flows(
        tmp_path: Path, start_log, monkeypatch) -> None:
    import grebe.app.supervisor

    monkeypatch.delenv(C.CONFIG_ENV_VAR, raising=False)
    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path))
    ran = []  # no models loaded: the slow end-to-end run is in test_cli_defaults.py
    monkeypatch.setattr(grebe.app.supervisor, "run",
                        lambda settings, exit_when_done: ran.append(settings) or 0)
    result = runner.invoke(app, ["run"])
    assert result.exit_code == 0, result.output
    lines = start_log()
    packaged = startup.pipeline_config_file(None).path
    assert lines[0] == f"config: {packaged} ({startup.ORIGIN_PACKAGED})"
    assert len(lines) == 1 + len(ran[0].streams) and len(ran[0].streams) >= 16
    assert ("stream unified_posts: local topic posts, eligibilities post_safety, "
            "post_embedding_with_summary, mm_emb_v5 → plans post_safety, "
            "post_embedding_with_summary, mm_emb_v5") in lines
    # Only a stream with no eligibilities at all (Grox's PostStreamDelayed) runs no plan.
    idle = {f"stream {s.name}:" for s in ran[0].streams if not s.eligibilities}
    assert {line.split(":")[0] + ":"
            for line in lines if "→ plans (no plan)" in line} == idle


def test_an_eligibility_no_plan_serves_is_shown_as_such(tmp_path: Path) -> None:
    config = load_config(data_dir=tmp_path, streams=[
        {"name": "a", "topic": "ta", "eligibilities": ["basic", "nothing_serves_this"]},
        {"name": "b", "topic": "tb", "eligibilities": ["nothing_serves_this"]}])
    assert startup.stream_lines(config, [("basic", "basic"), ("shout", "basic")]) == [
        "stream a: local topic ta, eligibilities basic, nothing_serves_this → plans basic, shout",
        "stream b: local topic tb, eligibilities nothing_serves_this → plans (no plan)",
    ]


def test_the_packaged_defaults_are_the_packaged_file_whatever_the_environment(
        tmp_path: Path, monkeypatch) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("streams: []\n")
    monkeypatch.setenv(C.CONFIG_ENV_VAR, str(other))
    assert startup.pipeline_config_file(None) == startup.ConfigFile(other, startup.ORIGIN_ENV)
    raw = startup.packaged_config_raw()
    assert len(raw["streams"]) >= 16 and raw["plans"]["factory"] == C.FLOWS_PLANS_FACTORY
    raw["streams"].clear()  # a fresh copy each call: the demo edits its own
    assert len(startup.packaged_config_raw()["streams"]) >= 16
