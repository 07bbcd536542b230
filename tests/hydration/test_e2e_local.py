"""Id-only messages hydrated end to end on the local default: `grebe ingest`, `grebe run`."""

import json

from typer.testing import CliRunner

from grebe import constants as C
from grebe.cli import app

runner = CliRunner()


def test_id_only_messages_are_hydrated_by_grebe_run(tmp_path, monkeypatch):
    """A firehose stream (noop) records full posts in the embedded post table as they
    pass; a request stream then carries only ids: the basic plan annotates the hydrated
    text, and an unknown id is skipped (not_found), never dead-lettered."""
    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("GREBE_METRICS__ENABLED", "false")
    config = tmp_path / "grebe.yaml"
    config.write_text(json.dumps({"streams": [
        {"name": "firehose", "topic": "firehose", "eligibilities": ["noop"]},
        {"name": "requests", "topic": "requests", "eligibilities": ["basic"]},
    ]}))
    firehose, requests = tmp_path / "firehose.jsonl", tmp_path / "requests.jsonl"
    firehose.write_text(json.dumps(
        {"post": {"id": "h1", "author_id": "fred", "text": "LOUD NOISES EVERYWHERE"}}) + "\n")
    requests.write_text("\n".join(json.dumps(m) for m in (
        {"post": {"id": "h1"}}, {"post": {"id": "ghost"}})) + "\n")

    def cli(*args: str) -> str:
        result = runner.invoke(app, [*args, "-c", str(config)])
        assert result.exit_code == 0, result.output
        return result.output

    cli("ingest", str(firehose), "--topic", "firehose")
    cli("run", "--exit-when-done")
    assert (tmp_path / "var" / C.DEFAULT_POST_TABLE_DB).exists()
    assert cli("annotations", "h1", "--json").strip() == "[]"  # noop writes nothing
    cli("ingest", str(requests), "--topic", "requests")
    cli("run", "--exit-when-done")
    (annotation,) = json.loads(cli("annotations", "h1", "--json"))
    assert annotation["producer"] == "basic" and annotation["labels"] == ["shouting"]
    assert json.loads(cli("annotations", "ghost", "--json")) == []
    assert "ghost" not in cli("dlq", "list")
