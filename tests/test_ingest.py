import json

from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.config import load_config
from grebe.ingest import ingest, message_key, read_lines


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
    report = await ingest(read_lines(lines), producer, "posts", on_batch=batches.append)
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
