import json

from typer.testing import CliRunner

from grebe.cli import app

runner = CliRunner()


def test_ingest_run_annotations_and_dlq(tmp_path, monkeypatch):
    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("GREBE_ENGINE__PROCESSES", "0")
    monkeypatch.setenv("GREBE_METRICS__ENABLED", "false")
    config = tmp_path / "grebe.yaml"
    config.write_text(json.dumps({"streams": [{"name": "posts", "eligibilities": ["basic"]}]}))
    posts = tmp_path / "posts.jsonl"
    posts.write_text(
        json.dumps({"id": "p1", "author_id": "a", "text": "LOUD NOISES EVERYWHERE"}) + "\n"
        + "garbage\n" + json.dumps({"id": 5}) + "\n"
    )
    result = runner.invoke(app, ["ingest", str(posts), "-c", str(config), "--no-validate"])
    assert result.exit_code == 0, result.output
    assert "ingested 2 posts" in result.output and "line 2" in result.output

    result = runner.invoke(app, ["run", "-c", str(config), "--exit-when-done"])
    assert result.exit_code == 0, result.output

    result = runner.invoke(app, ["annotations", "p1", "--json", "-c", str(config)])
    assert result.exit_code == 0, result.output
    (annotation,) = json.loads(result.output)
    assert annotation["labels"] == ["shouting"]

    result = runner.invoke(app, ["dlq", "list", "-c", str(config)])
    assert "decode_error" in result.output
    result = runner.invoke(app, ["dlq", "replay", "-c", str(config)])
    assert "replayed 1" in result.output


def test_bad_config_is_a_clear_error(tmp_path):
    config = tmp_path / "grebe.yaml"
    config.write_text("engine:\n  processes: -1\n")
    result = runner.invoke(app, ["run", "-c", str(config)])
    assert result.exit_code == 2
    assert "config error" in result.output


def test_annotations_json_renders_an_embedding_as_floats(tmp_path, monkeypatch):
    """The store keeps vectors as int8 with a scale; what a person reads through
    `grebe annotations` stays a list of numbers."""
    import asyncio

    from grebe.stores.sqlite import SqliteStore
    from grebe.types import Annotation

    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path))
    vector = [0.6, -0.8, 0.0]

    async def write() -> None:
        store = SqliteStore(tmp_path / "annotations.db")
        await store.start()
        await store.upsert([Annotation(post_id="p1", producer="mm_emb_v5", version="5",
                                       embedding=vector)])
        await store.stop()

    asyncio.run(write())
    result = runner.invoke(app, ["annotations", "p1", "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert [round(x, 2) for x in row["embedding"]] == vector
