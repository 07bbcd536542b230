"""Local log values at rest: zstd against the packaged log dictionary when that makes
them smaller, read back as appended; a log written before compression still reads."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from grebe import codec
from grebe.brokers import local_sql
from grebe.brokers.local import LocalLog, LocalSource
from grebe.core.source import Outcome
from grebe.errors import BrokerError
from grebe.types import Annotation, Post

OLD_LOG = Path(__file__).parent.parent / "data" / "local_log_v1" / "log.db"


def _annotation(post_id: str) -> Annotation:
    """An output-topic message shaped like safety_ptos's: scores, reasons, versions."""
    return Annotation(
        post_id=post_id, producer="safety_ptos", version="3", labels=["not_spam"],
        scores={f"ptos:{name}": 0.01 * i for i, name in enumerate(
            ["violent_speech", "hate", "harassment", "adult", "spam", "self_harm"])},
        reasons={"ptos:spam": "below threshold 0.5 (policy 2026.11.23-3)",
                 "language": "en 0.99 (py3langid)"},
        model_versions={"encoder": "all-MiniLM-L6-v2-int8", "heads": "ptos-2"},
        content_fingerprint="625bd12294a5898915efb40056f4e538", policy_version="2026.11.23-3")


def _stored(path: Path) -> list[tuple[int, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT length(value), codec FROM messages ORDER BY msg_offset"
                            ).fetchall()


async def test_values_are_compressed_at_rest_and_read_back_as_appended(tmp_path):
    log = LocalLog(tmp_path / "log.db", partitions=1)
    await log.open()
    values = [codec.encode_annotation(_annotation(f"p{i}")) for i in range(3)]
    noise = os.urandom(300)  # incompressible: stays raw, never larger at rest
    # one key each: values of one key are stored against each other (test_local_refs.py)
    await log.append("annotations", [(b"k%d" % i, v) for i, v in enumerate([*values, noise])])
    read = await log.read("annotations", [(0, 0)], 10)
    assert [r.value for r in read] == [*values, noise]
    stored = _stored(tmp_path / "log.db")
    assert [c for _, c in stored] == [local_sql.VALUE_ZSTD] * 3 + [local_sql.VALUE_RAW]
    assert all(size < len(v) / 2 for (size, _), v in zip(stored, values, strict=False))
    assert stored[3][0] == 300
    await log.close()


async def test_compression_can_be_switched_off(tmp_path):
    log = LocalLog(tmp_path / "log.db", partitions=1, compress=False)
    await log.open()
    value = codec.encode_annotation(_annotation("p"))
    await log.append("annotations", [(b"k", value)])
    assert _stored(tmp_path / "log.db") == [(len(value), local_sql.VALUE_RAW)]
    assert (await log.read("annotations", [(0, 0)], 1))[0].value == value
    await log.close()


async def test_a_value_this_version_cannot_unpack_is_a_broker_error(tmp_path):
    """A row of a newer version's codec is not a post's fault: the read fails as the
    log's, with the reason, rather than hand the consumer bytes it cannot decode."""
    log = LocalLog(tmp_path / "log.db", partitions=1)
    await log.open()
    await log.append("posts", [(b"k", b"{}")])
    with sqlite3.connect(tmp_path / "log.db") as conn:
        conn.execute("UPDATE messages SET codec = 7")
    with pytest.raises(BrokerError, match="unknown codec 7"):
        await log.read("posts", [(0, 0)], 1)
    await log.close()


async def test_a_log_written_before_compression_reads_and_takes_new_messages(tmp_path):
    """tests/data/local_log_v1/log.db was written by the code before compressed values
    (no `codec` column): opening it adds the column, its rows read back as written and
    its group's offsets hold; new appends are compressed beside them."""
    path = tmp_path / "log.db"
    shutil.copy(OLD_LOG, path)
    source = LocalSource("s", LocalLog(path, partitions=1), topic="posts", group="grebe")
    await source.start()
    messages = await source.poll(10, 1.0)
    assert [m.offset for m in messages] == [1]  # the group had committed offset 1
    assert codec.decode_envelope(messages[0].value).post.text == "second post"
    await source.ack(messages[0], Outcome.DONE)
    await source.stop()

    log = LocalLog(path, partitions=1)
    await log.open()
    first = (await log.read("posts", [(0, 0)], 1))[0]
    assert codec.decode_envelope(first.value).post.id == "p1"
    old = (await log.read("annotations", [(0, 0)], 1))[0]
    annotation = codec.decode_annotation(old.value)
    assert annotation.embedding == [0.60009765625, -0.7998046875, 0.0, 0.0]  # float16
    new = codec.encode_annotation(_annotation("p3"))
    await log.append("annotations", [(b"p3", new)])
    assert [r.value for r in await log.read("annotations", [(0, 0)], 5)] == [old.value, new]
    with sqlite3.connect(path) as conn:
        codecs = conn.execute("SELECT codec FROM messages m JOIN topics t ON t.id = "
                              "m.topic_id WHERE t.name = 'annotations' ORDER BY msg_offset")
        assert [c for (c,) in codecs] == [local_sql.VALUE_RAW, local_sql.VALUE_ZSTD]
    await log.close()


def test_the_log_dictionary_shrinks_real_posts_too():
    """The input topic's bare posts go through the same dictionary: a tweet-sized post
    takes fewer bytes at rest than as JSON."""
    post = codec.encode(Post(id="1790000000000000001", author_id="44196397",
                             text="Just landed in Austin, heading to the factory now"))
    packed, kind = local_sql.pack_value(post, compress=True)
    assert kind == local_sql.VALUE_ZSTD and len(packed) < len(post) * 0.6
    assert local_sql.unpack_value(packed, kind) == post
