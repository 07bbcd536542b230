"""Local log values stored against the previous value of their key (local_refs.py): the
bytes read back are those appended, retention never strands a value, and a log written
by the version before (tests/data/local_log_v2, no `ref` column) still reads."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import msgspec

from grebe import codec
from grebe import constants as C
from grebe.brokers import local_sql
from grebe.brokers.local import LocalLog
from grebe.brokers.local_refs import ValueRefs
from grebe.brokers.local_retention import RetentionPolicy
from grebe.types import Annotation

V2_LOG = Path(__file__).parent.parent / "data" / "local_log_v2" / "log.db"
VECTOR = [((i * 37) % 101 - 50) / 400.0 for i in range(384)]


def _annotation(post_id: str, producer: str, **kw) -> Annotation:
    return Annotation(post_id=post_id, producer=producer, version="1", labels=[],
                      scores={"lang:en": 0.99}, reasons={"language": "en 0.99 (py3langid)"},
                      model_versions={"embedder": "all-MiniLM-L6-v2-dq8"},
                      content_fingerprint="9e9e67569c23dba77ecc2a9d220bce96",
                      created_at=1795472676.5, updated_at=1795472676.5, **kw)


def _rows(path: Path) -> list[tuple[int, int, int | None, int]]:
    """(offset, codec, ref, bytes at rest) of the annotations topic."""
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT msg_offset, codec, ref, length(value) FROM messages m JOIN topics t "
            "ON t.id = m.topic_id WHERE t.name = 'annotations' ORDER BY msg_offset"
        ).fetchall()


async def test_a_post_s_second_equal_vector_costs_a_fraction_at_rest(tmp_path):
    log = LocalLog(tmp_path / "log.db", partitions=1)
    await log.open()
    first = codec.encode_annotation(_annotation("p1", "mm_emb_v5", embedding=VECTOR))
    second = codec.encode_annotation(
        _annotation("p1", "post_embedding_with_summary", embedding=VECTOR))
    other = codec.encode_annotation(_annotation("p2", "mm_emb_v5", embedding=VECTOR[::-1]))
    await log.append("annotations", [(b"p1", first), (b"p2", other)])  # one transaction
    await log.append("annotations", [(b"p1", second)])  # a later one
    read = await log.read("annotations", [(0, 0)], 10)
    assert [r.value for r in read] == [first, other, second]
    rows = _rows(tmp_path / "log.db")
    assert [(codec_, ref) for _, codec_, ref, _ in rows] == [
        (local_sql.VALUE_ZSTD, None), (local_sql.VALUE_ZSTD, None),
        (local_sql.VALUE_ZSTD_REF, 0)]
    assert rows[2][3] * 4 < rows[0][3]  # the vector is not stored twice
    assert codec.decode_annotation(read[2].value).producer == "post_embedding_with_summary"
    # a read that starts after the row it refers to reads that row apart
    assert [r.value for r in await log.read("annotations", [(0, 2)], 10)] == [second]
    await log.close()


async def test_values_of_one_transaction_refer_to_each_other_and_only_to_kept_rows(tmp_path):
    path = tmp_path / "log.db"
    log = LocalLog(path, partitions=1)
    await log.open()
    values = [codec.encode_annotation(_annotation("p1", f"plan{i}", embedding=VECTOR))
              for i in range(3)]
    await log.append("annotations", [(b"p1", v) for v in values])
    assert [(c, r) for _, c, r, _ in _rows(path)] == [
        (local_sql.VALUE_ZSTD, None), (local_sql.VALUE_ZSTD_REF, 0),
        (local_sql.VALUE_ZSTD_REF, 0)]
    # every row aged out (none stays to need another): all go, and a value appended
    # after is stored alone, not against the row the log remembered and no longer holds
    assert await log.trim(RetentionPolicy(max_age_s=0.0), time.time() + 1) == {
        "annotations": 3}
    await log.append("annotations", [(b"p1", values[0])])
    assert [(c, r) for _, c, r, _ in _rows(path)] == [(local_sql.VALUE_ZSTD, None)]
    assert [r.value for r in await log.read("annotations", [(0, 0)], 10)] == [values[0]]
    await log.close()


async def test_retention_keeps_a_row_another_kept_row_is_stored_against(tmp_path):
    path = tmp_path / "log.db"
    log = LocalLog(path, partitions=1)
    await log.open()
    first = codec.encode_annotation(_annotation("p1", "a", embedding=VECTOR))
    second = codec.encode_annotation(_annotation("p1", "b", embedding=VECTOR))
    await log.append("annotations", [(b"p1", first)])
    await log.append("annotations", [(b"p1", second)])
    with sqlite3.connect(path) as conn:  # the first is old, the second is not
        conn.execute("UPDATE messages SET ts = 0 WHERE msg_offset = 0")
    now = time.time()
    assert await log.trim(RetentionPolicy(max_age_s=60.0), now) == {}
    newest = _rows(path)[1][3] + len(b"p1")  # by size alike: room for the second only
    assert await log.trim(RetentionPolicy(max_bytes=newest), now) == {}
    assert [r.value for r in await log.read("annotations", [(0, 0)], 10)] == [first, second]
    # once the row that refers to it may go too, both go
    assert await log.trim(RetentionPolicy(max_age_s=0.0), now + 1) == {"annotations": 2}
    await log.close()


def test_a_rolled_back_transaction_leaves_nothing_to_refer_to(tmp_path):
    refs = ValueRefs()
    with sqlite3.connect(tmp_path / "x.db") as conn:
        refs.stored_alone((1, 0, b"k"), 0, b"value")
        refs.rollback()
        assert refs.candidate(conn, (1, 0, b"k"), 1) is None


async def test_a_v2_log_reads_as_appended_and_takes_referring_values(tmp_path):
    """tests/data/local_log_v2/log.db, written at d4efa17 (no `ref` column): its values
    read back as they were appended, and new values of its keys refer to its rows."""
    path = tmp_path / "log.db"
    shutil.copy(V2_LOG, path)
    log = LocalLog(path, partitions=1)
    await log.open()
    old = await log.read("annotations", [(0, 0)], 10)
    decoded = [codec.decode_annotation(r.value) for r in old]
    assert [(a.post_id, a.producer) for a in decoded] == [
        ("p-1", "spam_comment"), ("p-1", "mm_emb_v5"), ("p-1", "post_embedding_with_summary"),
        ("p-2", "spam_comment"), ("user:a-1", "record.user")]
    assert decoded[1].embedding == decoded[2].embedding
    assert len(decoded[1].embedding or []) == 384
    post = (await log.read("posts", [(0, 0)], 1))[0]
    assert msgspec.json.decode(post.value)["text"] == "hello there"
    # the log remembers what it wrote itself: a new value of p-1 stands alone first
    new = [codec.encode_annotation(_annotation("p-1", p, embedding=VECTOR)) for p in "xy"]
    await log.append("annotations", [(b"p-1", v) for v in new])
    assert [(c, r) for _, c, r, _ in _rows(path)][-3:] == [
        (local_sql.VALUE_ZSTD, None), (local_sql.VALUE_ZSTD, None),
        (local_sql.VALUE_ZSTD_REF, 5)]
    assert [r.value for r in await log.read("annotations", [(0, 0)], 10)] == [
        *(r.value for r in old), *new]
    await log.close()


async def test_values_written_now_use_the_newer_log_dictionary(tmp_path):
    """The newest dictionary (102: trained on int8-vector annotations; 103: on the
    reasons of policy 2026.11.28-1; 104: of 2026.11.28-2; 105: of 2026.11.28-3; 106: of
    2026.11.28-5) for new
    values; the pinned log's values name 101 and read back (above)."""
    import zstandard

    path = tmp_path / "log.db"
    shutil.copy(V2_LOG, path)
    log = LocalLog(path, partitions=1)
    await log.open()
    value = codec.encode_annotation(_annotation("p-9", "mm_emb_v5", embedding=VECTOR))
    await log.append("annotations", [(b"p-9", value)])
    await log.close()
    with sqlite3.connect(path) as conn:
        frames = [bytes(v) for (v,) in conn.execute(
            "SELECT value FROM messages WHERE codec = 1 ORDER BY topic_id, msg_offset")]
    ids = [zstandard.get_frame_parameters(f).dict_id for f in frames]
    assert ids == [101] * 5 + [C.LOG_DICT_ID]  # the pinned annotations, then the new one
