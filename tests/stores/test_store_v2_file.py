"""The SQLite store's compact columns, and a store written by the version before them
(tests/data/store_v2, commit d4efa17: fingerprints as 32 hex characters) still reads
back the same and takes new rows beside the old ones."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from grebe import codec
from grebe import constants as C
from grebe.errors import PostIdReusedError
from grebe.stores.sqlite import SqliteStore, iter_all
from grebe.types import Annotation

V2 = Path(__file__).parent.parent / "data" / "store_v2"
HEX = "9e9e67569c23dba77ecc2a9d220bce96"  # the pinned rows' fingerprint


def _as_json(annotations: list[Annotation]) -> list[dict]:
    return [json.loads(codec.encode(a)) for a in annotations]


@pytest.fixture
def v2_copy(tmp_path: Path) -> Path:
    path = tmp_path / "annotations.db"
    shutil.copy(V2 / "annotations.db", path)
    return path


def test_a_v2_store_reads_back_as_it_did(v2_copy: Path) -> None:
    expected = json.loads((V2 / "annotations.json").read_text())
    assert _as_json(list(iter_all(v2_copy))) == expected


async def test_a_v2_store_takes_new_rows_and_still_refuses_a_reused_id(v2_copy: Path) -> None:
    store = SqliteStore(v2_copy)
    await store.start()
    try:
        same = Annotation(post_id="p-1", producer="safety_ptos", version="1",
                          content_fingerprint=HEX)
        await store.upsert([same])  # the fingerprint held as hex text matches its bytes
        with pytest.raises(PostIdReusedError):
            await store.upsert([Annotation(post_id="p-1", producer="x", version="1",
                                           content_fingerprint="0" * 32)])
        rows = await store.get("p-1")
        assert {a.producer for a in rows} == {
            "spam_comment", "mm_emb_v5", "post_embedding_with_summary", "safety_ptos"}
        assert {a.content_fingerprint for a in rows} == {HEX}
    finally:
        await store.stop()


async def test_a_post_s_fingerprint_is_stored_once_hex_as_16_bytes_and_read_back(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    odd = "not-hex-but-a-fingerprint"
    try:
        await store.upsert([
            Annotation(post_id="a", producer="p", version="1", content_fingerprint=HEX),
            Annotation(post_id="b", producer="p", version="1", content_fingerprint=odd),
            Annotation(post_id="c", producer="p", version="1",
                       content_fingerprint=HEX.upper()),  # not what reads back from bytes
        ])
        with pytest.raises(PostIdReusedError):
            await store.upsert([Annotation(post_id="a", producer="q", version="1",
                                           content_fingerprint="1" * 32)])
        assert [r[0].content_fingerprint for r in
                [await store.get(p) for p in "abc"]] == [HEX, odd, HEX.upper()]
    finally:
        await store.stop()
    with sqlite3.connect(tmp_path / "a.db") as conn:
        per_post = dict(conn.execute("SELECT post_id, fingerprint FROM fingerprints"))
        per_row = dict(conn.execute("SELECT post_id, fingerprint FROM annotations"))
    assert per_post == {"a": bytes.fromhex(HEX), "b": odd, "c": HEX.upper()}
    assert per_row == {"a": b"", "b": b"", "c": b""}  # "the post's": no bytes a row


def test_bodies_written_now_use_the_newer_dictionary_and_the_pinned_ones_still_read(
        v2_copy: Path) -> None:
    """The newest dictionary (3: trained on bodies without the key, fingerprint and
    timestamps; 4: on the reasons of policy 2026.11.28-1; 5: of 2026.11.28-2; 6: of
    2026.11.28-3; 7: of 2026.11.28-5) replaced dictionary 1 for new rows; the pinned rows
    name 1 and read.
    (Dictionary 2 was never on main: it is not shipped. What each saves is measured by
    bench/realflows.py, not here: dictionaries 4 to 7 were not trained on this old
    layout.)"""
    import zstandard

    from grebe.stores import bodies

    with sqlite3.connect(v2_copy) as conn:
        pinned = [bytes(b) for (b,) in conn.execute("SELECT body FROM annotations")]
    for frame in pinned:
        assert zstandard.get_frame_parameters(frame).dict_id == 1
        again = bodies.compress(bodies.decompress(frame))
        assert zstandard.get_frame_parameters(again).dict_id == C.BODY_DICT_ID


async def test_created_at_equal_to_updated_at_takes_no_bytes_and_survives_a_rewrite(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    try:
        first = Annotation(post_id="a", producer="p", version="1", created_at=100.5,
                           updated_at=100.5)
        other = Annotation(post_id="b", producer="p", version="1", created_at=7.25,
                           updated_at=9.5)
        await store.upsert([first, other])
        with sqlite3.connect(tmp_path / "a.db") as conn:
            stored = dict(conn.execute("SELECT post_id, created_at FROM annotations"))
        assert stored == {"a": 0.0, "b": 7.25}  # SQLite writes a 0.0 REAL in no bytes
        assert [(r.created_at, r.updated_at) for r in await store.get("a")] == [(100.5, 100.5)]
        assert [(r.created_at, r.updated_at) for r in await store.get("b")] == [(7.25, 9.5)]
        # a rewrite keeps the first write's time as created_at, as for any row
        again = Annotation(post_id="a", producer="p", version="1", labels=["x"],
                           created_at=200.0, updated_at=200.0)
        await store.upsert([again])
        [row] = await store.get("a")
        assert (row.created_at, row.updated_at, row.labels) == (100.5, 200.0, ["x"])
        await store.upsert([Annotation(post_id="a", producer="p", version="1",
                                       created_at=300.0, updated_at=300.0)])
        assert [(r.created_at, r.updated_at) for r in await store.get("a")] == [(100.5, 300.0)]
    finally:
        await store.stop()


async def test_rows_of_one_post_share_its_fingerprint_and_unknown_stays_unknown(
        v2_copy: Path) -> None:
    """A post's rows hold no fingerprint of their own; a row written with none ('') reads
    back with none, beside rows of the same post that have one; a v2 row keeps its own."""
    store = SqliteStore(v2_copy)
    await store.start()
    try:
        await store.upsert([
            Annotation(post_id="n", producer=f"p{i}", version="1", content_fingerprint=HEX)
            for i in range(6)] + [Annotation(post_id="n", producer="record.post",
                                             version="1")])
        rows = {a.producer: a.content_fingerprint for a in await store.get("n")}
        assert rows == {**{f"p{i}": HEX for i in range(6)}, "record.post": ""}
        # p-2's v2 row had no fingerprint: the next one is taken and kept for the post
        await store.upsert([Annotation(post_id="p-2", producer="x", version="1",
                                       content_fingerprint=HEX)])
        with pytest.raises(PostIdReusedError):
            await store.upsert([Annotation(post_id="p-2", producer="y", version="1",
                                           content_fingerprint="2" * 32)])
    finally:
        await store.stop()
    with sqlite3.connect(v2_copy) as conn:
        assert conn.execute("SELECT count(*) FROM fingerprints").fetchone()[0] == 2
        assert conn.execute("SELECT sum(length(fingerprint)) FROM annotations "
                            "WHERE post_id = 'n'").fetchone()[0] == 0


async def test_a_body_leaves_the_key_to_its_columns(tmp_path: Path) -> None:
    """The post id, producer and version are the row's key columns: the body does not
    repeat them (a 19-digit post id is ~10 bytes a row even compressed)."""
    import msgspec

    from grebe.stores import bodies

    post_id = "1790000000000000001"
    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    try:
        await store.upsert([Annotation(post_id=post_id, producer="spam_comment",
                                       version="1", labels=["not_spam"])])
        [row] = await store.get(post_id)
        assert (row.post_id, row.producer, row.version, row.labels) == (
            post_id, "spam_comment", "1", ["not_spam"])
    finally:
        await store.stop()
    with sqlite3.connect(tmp_path / "a.db") as conn:
        (body,) = conn.execute("SELECT body FROM annotations").fetchone()
    fields = msgspec.msgpack.decode(bodies.decompress(body))
    assert (fields["post_id"], fields["producer"], fields["version"]) == ("", "", "")


async def test_producers_are_stored_as_codes_and_a_v2_row_moves_to_its_code(
        v2_copy: Path) -> None:
    """A new row holds its producer as a 1-byte code (the name once, in `producers`);
    writing a key that a v2 row holds under the plain name moves that row to the code,
    keeping its created_at, so the key never has two rows; rows read in name order."""
    store = SqliteStore(v2_copy)
    await store.start()
    try:
        before = {a.producer: a for a in await store.get("p-1")}
        again = Annotation(post_id="p-1", producer="spam_comment", version="1",
                           labels=["spam"], content_fingerprint=HEX,
                           created_at=1_900_000_000.0, updated_at=1_900_000_000.0)
        await store.upsert([again, Annotation(post_id="p-1", producer="aaa", version="1",
                                               content_fingerprint=HEX)])
        rows = await store.get("p-1")
        assert [a.producer for a in rows] == [
            "aaa", "mm_emb_v5", "post_embedding_with_summary", "spam_comment"]
        spam = rows[-1]
        assert spam.labels == ["spam"] and spam.updated_at == 1_900_000_000.0
        assert spam.created_at == before["spam_comment"].created_at
        assert [a.producer for a in iter_all(v2_copy)][:4] == [a.producer for a in rows]
    finally:
        await store.stop()
    with sqlite3.connect(v2_copy) as conn:
        stored = conn.execute("SELECT producer FROM annotations WHERE post_id = 'p-1' "
                              "ORDER BY producer").fetchall()
        names = dict(conn.execute("SELECT name, id FROM producers"))
    assert stored == [("mm_emb_v5",), ("post_embedding_with_summary",),
                      (bytes([names["spam_comment"]]),), (bytes([names["aaa"]]),)]


async def test_a_new_store_is_marked_codes_only_and_a_v2_store_is_not(
        tmp_path: Path, v2_copy: Path) -> None:
    """Only a store created with producer codes skips looking for rows under plain
    names (PRAGMA user_version 1); opening a v2 store leaves it 0, so its rows move."""
    for path in (tmp_path / "new.db", v2_copy):
        store = SqliteStore(path)
        await store.start()
        await store.stop()
    with sqlite3.connect(tmp_path / "new.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    with sqlite3.connect(v2_copy) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0


async def test_rows_name_vectors_by_rowid_and_v2_rows_by_digest_still_read(
        v2_copy: Path) -> None:
    """A new row names its vector by the `vectors` rowid (2-3 bytes, not a 16-byte
    digest); the v2 rows' digests still find theirs, and an equal vector is kept once."""
    store = SqliteStore(v2_copy)
    await store.start()
    try:
        before = {a.producer: a.embedding for a in await store.get("p-1")}
        await store.upsert([Annotation(post_id="p-1", producer="x", version="1",
                                       content_fingerprint=HEX,
                                       embedding=before["mm_emb_v5"])])
        after = {a.producer: a.embedding for a in await store.get("p-1")}
        assert after == {**before, "x": before["mm_emb_v5"]}
    finally:
        await store.stop()
    with sqlite3.connect(v2_copy) as conn:
        refs = dict(conn.execute("SELECT producer, vector FROM annotations "
                                 "WHERE post_id = 'p-1' AND vector IS NOT NULL"))
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 1
    assert sorted(type(r).__name__ for r in refs.values()) == ["bytes", "bytes", "int"]
