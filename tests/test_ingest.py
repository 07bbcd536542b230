import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.commands.ingest import IngestInterrupted, ingest, message_key
from grebe.config import load_config
from grebe.errors import BrokerError


async def test_bad_lines_are_reported_and_the_rest_go_in(tmp_path):
    lines = tmp_path / "posts.jsonl"
    lines.write_text(
        json.dumps({"id": "a", "author_id": "u", "text": "hi"}) + "\n"
        + "not json\n\n"
        + json.dumps({"post": {"id": "b", "author_id": "u"}}) + "\n"
        + json.dumps({"id": 3}) + "\n"
    )
    config = load_config(data_dir=tmp_path)
    producer = LocalProducer(local_log(config))
    await producer.start()
    batches = []
    report = await ingest(lines, producer, "posts", on_batch=batches.append)
    await producer.stop()
    assert (report.accepted, report.rejected) == (2, 2)
    assert [n for n, _ in report.errors] == [2, 5]  # line numbers as in the file
    assert "malformed" in report.errors[0][1] and "schema" in report.errors[1][1]
    assert sum(batches) == 4

    log = local_log(config)
    await log.open()
    records = await log.read("posts", [(p, 0) for p in range(4)], 10)
    await log.close()
    assert sorted(r.key for r in records) == [b"a", b"b"]


def test_without_validation_only_json_syntax_counts():
    assert message_key(b'{"id": 3}', validate=False) is None
    assert message_key(b'{"post": {"id": "x"}}', validate=False) == b"x"


HOSTILE_LINES = [
    b'{"id": "u8", "author_id": "u", "text": "\xff\xfe"}',  # invalid UTF-8 (B6)
    b'{"post": {"id": "deep", "author_id": "u"}, "context": {"extra": {"x": '
    + b"[" * 5000 + b"]" * 5000 + b"}}}",  # nested 5,000 deep (B6)
    b'{"id": "big", "author_id": "u", "like_count": 100000000000000000000000000}',
]


def _file(tmp_path, lines: list[bytes]):
    path = tmp_path / "posts.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _good(i: int) -> bytes:
    return json.dumps({"id": f"g{i}", "author_id": "u", "text": "hi"}).encode()


async def _topic_keys(config, topic="posts"):
    log = local_log(config)
    await log.open()
    records = await log.read(topic, [(p, 0) for p in range(4)], 10_000)
    await log.close()
    return sorted(r.key for r in records)


@pytest.mark.parametrize("validate", [True, False])
async def test_hostile_lines_are_reported_not_fatal(tmp_path, validate):
    path = _file(tmp_path, [_good(0), *HOSTILE_LINES, _good(1)])
    config = load_config(data_dir=tmp_path)
    producer = LocalProducer(local_log(config))
    await producer.start()
    report = await ingest(path, producer, "posts", validate=validate)
    await producer.stop()
    bad_lines = [n for n, _ in report.errors]
    if validate:
        assert bad_lines == [2, 3, 4] and report.accepted == 2
    else:  # JSON syntax only: the integer is valid JSON, the pipeline dead-letters it
        assert bad_lines == [2, 3] and report.accepted == 3
    assert all("malformed" in reason or "schema" in reason for _, reason in report.errors)
    assert b"g0" in await _topic_keys(config) and b"g1" in await _topic_keys(config)


async def test_strict_appends_nothing_when_any_line_is_bad(tmp_path):
    path = _file(tmp_path, [_good(0), _good(1), HOSTILE_LINES[0]])
    config = load_config(data_dir=tmp_path)
    producer = LocalProducer(local_log(config))
    await producer.start()
    report = await ingest(path, producer, "posts", strict=True)
    await producer.stop()
    assert (report.accepted, report.rejected) == (0, 1)
    assert await _topic_keys(config) == []


class FailingProducer:
    """Fails on its second batch, as a broker that goes away mid-file does."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[bytes | None, bytes]]] = []

    async def publish_many(self, topic, items):
        if self.batches:
            raise BrokerError("broker went away")
        self.batches.append(list(items))


async def test_an_interrupted_ingest_says_where_to_resume_and_resume_appends_the_rest(tmp_path):
    from grebe.commands import ingest as ingest_module

    path = _file(tmp_path, [_good(i) for i in range(ingest_module.INGEST_BATCH + 10)])
    producer = FailingProducer()
    with pytest.raises(IngestInterrupted) as info:
        await ingest(path, producer, "posts")  # type: ignore[arg-type]
    report = info.value.report
    assert report.accepted == report.last_line_appended == ingest_module.INGEST_BATCH
    assert f"start line {ingest_module.INGEST_BATCH + 1}" in str(info.value)
    config = load_config(data_dir=tmp_path)
    real = LocalProducer(local_log(config))
    await real.start()
    rest = await ingest(path, real, "posts", start_line=report.last_line_appended + 1)
    await real.stop()
    assert rest.accepted == 10
    assert await _topic_keys(config) == sorted(
        f"g{i}".encode() for i in range(ingest_module.INGEST_BATCH, ingest_module.INGEST_BATCH + 10)
    )


def test_cli_ingest_reports_hostile_lines_and_strict_exits_1(tmp_path):
    path = _file(tmp_path, [_good(0), *HOSTILE_LINES])
    grebe = str(Path(sys.executable).parent / "grebe")
    base = [grebe, "ingest", str(path), "--topic", "posts"]
    env_dir = {"GREBE_DATA_DIR": str(tmp_path / "data")}


    env = {**os.environ, **env_dir}
    strict = subprocess.run([*base, "--strict"], capture_output=True, text=True, env=env)
    assert strict.returncode == 1, strict.stderr
    assert "appended nothing" in strict.stdout and "line 2:" in strict.stdout
    loose = subprocess.run(base, capture_output=True, text=True, env=env)
    assert loose.returncode == 0, loose.stderr
    assert "ingested 1 posts" in loose.stdout and "rejected 3 bad lines" in loose.stdout
