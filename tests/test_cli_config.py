"""A bad config stops every long-running command before it starts anything: `grebe run`,
`grebe serve`, `grebe feed-serve` and `grebe thunder serve` exit 2 naming the field, and
no data directory, log or store is created."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from grebe.cli import app
from grebe.cli.common import serving_config

runner = CliRunner()

COMMANDS = [["run", "--exit-when-done"], ["serve"], ["feed-serve"], ["thunder", "serve"]]
BAD = [
    ({"inference": {"embeder": "x"}}, "inference.embeder: Extra inputs are not permitted"),
    ({"thunder": {"port": "x"}}, "thunder.port: Input should be a valid integer"),
    ({"feed": {"weights": {"nope": 1}}}, "feed.weights.nope: Extra inputs are not permitted"),
    ({"media": {"fetch": {"max_bytes": 0}}}, "media.fetch.max_bytes: Input should be"),
]


def _one_line(output: str) -> str:
    """Rich wraps long lines at the terminal width; the field and message are one."""
    return " ".join(output.split())


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize(("raw", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_a_bad_key_stops_the_command_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str],
        raw: dict[str, object], message: str) -> None:
    data_dir = tmp_path / "var"
    config = tmp_path / "grebe.yaml"
    config.write_text(yaml.safe_dump({"data_dir": str(data_dir), **raw}))
    monkeypatch.delenv("GREBE_CONFIG", raising=False)
    result = runner.invoke(app, [*command, "-c", str(config)])
    assert result.exit_code == 2, result.output
    assert "config error" in result.output
    assert message in _one_line(result.output)
    assert not data_dir.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grebe.yaml"]


@pytest.mark.parametrize(("command", "field"), [
    (["thunder", "serve", "--port", "70000"], "thunder.port"),
    (["feed-serve", "--port", "-1"], "feed.http_port"),
])
def test_a_bad_port_option_is_a_config_error_too(
        tmp_path: Path, command: list[str], field: str) -> None:
    data_dir = tmp_path / "var"
    config = tmp_path / "grebe.yaml"
    config.write_text(yaml.safe_dump({"data_dir": str(data_dir)}))
    result = runner.invoke(app, [*command, "-c", str(config)])
    assert result.exit_code == 2, result.output
    assert f"{field}: Input should be" in _one_line(result.output)
    assert not data_dir.exists()


def test_command_options_override_the_typed_section_and_keep_the_file(tmp_path: Path) -> None:
    config = tmp_path / "grebe.yaml"
    config.write_text(yaml.safe_dump({"thunder": {"group": "from-file", "port": 6000},
                                      "feed": {"weights": {"similarity": 2}}}))
    thunder = serving_config(config, "thunder", port=6001, metrics_port=None)
    assert (thunder.thunder.port, thunder.thunder.group) == (6001, "from-file")
    assert thunder.thunder.metrics_port is None
    feed = serving_config(config, "feed", http_port=9000)
    assert feed.feed.http_port == 9000 and feed.feed.weights.interest == 2.0
