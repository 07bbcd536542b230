import asyncio

import pytest

from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.stores.base import AnnotationStore, MemoryStore
from grebe.stores.factory import build_store
from grebe.stores.sqlite import SqliteStore, iter_all
from grebe.types import Annotation


@pytest.fixture
async def store(tmp_path):
    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    yield store
    await store.stop()


def _annotation(post_id: str, producer: str = "basic", **kwargs) -> Annotation:
    return Annotation(post_id=post_id, producer=producer, version="1", **kwargs)


async def test_upsert_is_idempotent_and_keeps_created_at(store):
    first = _annotation("p1", labels=["a"], created_at=100.0, updated_at=100.0)
    await store.upsert([first])
    again = _annotation("p1", labels=["b"], scores={"x": 0.5}, created_at=200.0, updated_at=200.0)
    await store.upsert([again])
    (row,) = await store.get("p1")
    assert row.labels == ["b"]
    assert row.scores == {"x": 0.5}
    assert row.created_at == 100.0
    assert row.updated_at == 200.0
    assert await store.count() == 1


async def test_lookup_by_post_returns_every_producer(store):
    await store.upsert(
        [_annotation("p1", "spam"), _annotation("p1", "basic"), _annotation("p2", "basic")]
    )
    assert [a.producer for a in await store.get("p1")] == ["basic", "spam"]
    assert await store.get("missing") == []


async def test_concurrent_upserts_share_transactions(store, tmp_path):
    await asyncio.gather(
        *(store.upsert([_annotation(f"p{i}", embedding=[0.1, 0.2])]) for i in range(500))
    )
    assert await store.count() == 500
    rows = list(iter_all(tmp_path / "a.db"))
    assert len(rows) == 500
    assert rows[0].embedding == pytest.approx([0.1, 0.2], abs=1e-3)  # stored as float16


async def test_rows_survive_reopen(store, tmp_path):
    await store.upsert([_annotation("p1", reasons={"basic": "ok"})])
    other = SqliteStore(tmp_path / "a.db")
    await other.start()
    try:
        (row,) = await other.get("p1")
        assert row.reasons == {"basic": "ok"}
    finally:
        await other.stop()


def test_factory_builds_configured_backend(tmp_path):
    sqlite = build_store(load_config(data_dir=tmp_path))
    assert isinstance(sqlite, SqliteStore)
    assert isinstance(sqlite, AnnotationStore)
    assert isinstance(build_store(load_config(store={"backend": "memory"})), MemoryStore)
    config = load_config()
    unknown = config.model_copy(update={"store": config.store.model_copy(update={"backend": "x"})})
    with pytest.raises(ConfigError, match="'x'"):
        build_store(unknown)


def _unit(seed: int, dims: int = 384) -> list[float]:
    import numpy as np

    vector = np.random.default_rng(seed).standard_normal(dims)
    return (vector / np.linalg.norm(vector)).tolist()


async def test_vectors_are_int8_shared_and_read_back_within_quantisation(store, tmp_path):
    import sqlite3

    import numpy as np

    text = _unit(1)
    await store.upsert([
        _annotation("p1", "post_embedding_with_summary", embedding=text),
        _annotation("p1", "mm_emb_v5", embedding=text),  # same vector: stored once
        _annotation("p2", "mm_emb_v5", embedding=_unit(2)),
        _annotation("p3", "spam_comment", labels=["not_spam"]),
    ])
    rows = {a.producer: a for a in await store.get("p1")}
    got = np.asarray(rows["mm_emb_v5"].embedding)
    assert got.shape == (384,) and float(got @ np.asarray(text)) > 0.9999
    assert (await store.get("p3"))[0].embedding is None
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 2
        sizes = [n for (n,) in conn.execute("SELECT length(body) FROM annotations")]
        vector_bytes = conn.execute("SELECT sum(length(data)) FROM vectors").fetchone()[0]
    # int8 and a float32 scale: 388 bytes (float16 took 768, JSON ~7.7 KB)
    assert max(sizes) < 400 and vector_bytes == 2 * (384 + 4)


async def test_a_store_written_before_binary_vectors_reads_back_and_takes_new_rows(tmp_path):
    """The migration: the old schema (JSON bodies, no vector column) opens, old rows read
    back exactly (float64 JSON embeddings untouched), and new rows use the new format."""
    import sqlite3

    import msgspec

    path = tmp_path / "old.db"
    old = _annotation("old", "mm_emb_v5", labels=["x"], embedding=[0.123456789, -0.5],
                      created_at=10.0, updated_at=10.0)
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE annotations (post_id TEXT NOT NULL, producer TEXT NOT NULL, "
            "version TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, "
            "body BLOB NOT NULL, PRIMARY KEY (post_id, producer, version)) WITHOUT ROWID;")
        conn.execute("INSERT INTO annotations VALUES (?, ?, ?, ?, ?, ?)",
                     ("old", "mm_emb_v5", "1", 10.0, 10.0, msgspec.json.encode(old)))
    store = SqliteStore(path)
    await store.start()
    try:
        (row,) = await store.get("old")
        assert row.embedding == [0.123456789, -0.5] and row.labels == ["x"]
        await store.upsert([_annotation("new", "mm_emb_v5", embedding=[0.5, -0.5])])
        (new,) = await store.get("new")
        assert new.embedding == pytest.approx([0.5, -0.5], abs=0.5 / 127 / 2)  # int8
        assert [a.post_id for a in iter_all(path)] == ["new", "old"]
    finally:
        await store.stop()


async def test_rows_written_before_policy_versions_still_decode(store, tmp_path):
    # A body exactly as grebe wrote it before annotations carried policy_version.
    old = (b'{"post_id":"old","producer":"spam_comment","version":"1","labels":["spam"],'
           b'"scores":{"spam":0.9},"reasons":{},"embedding":null,"transcript":null,'
           b'"model_versions":{"spam_head":"spam-head:1"},"created_at":1.0,"updated_at":1.0}')
    import sqlite3

    conn = sqlite3.connect(tmp_path / "a.db")
    with conn:
        conn.execute("INSERT INTO annotations (post_id, producer, version, created_at, "
                     "updated_at, body) VALUES ('old', 'spam_comment', '1', 1.0, 1.0, ?)", (old,))
    conn.close()
    (row,) = await store.get("old")
    assert row.labels == ["spam"] and row.policy_version is None
    await store.upsert([_annotation("new", policy_version="2026.11.23-1")])
    (new,) = await store.get("new")
    assert new.policy_version == "2026.11.23-1"


_PTOS_REASONS = {f"ptos.{c}": f"not matched: {c} head 0.0{i} < 0.60 (validation threshold)"
                 for i, c in enumerate(("spam", "hate", "harassment", "sexual", "violence"))}


async def test_bodies_are_compressed_against_the_packaged_dictionary(store, tmp_path):
    import sqlite3

    import msgspec

    from grebe.stores import bodies

    row = _annotation("p1", "safety_ptos", labels=["safe"], reasons=_PTOS_REASONS,
                      scores={k: 0.01 for k in _PTOS_REASONS},
                      model_versions={"embedder": "all-MiniLM-L6-v2", "heads": "heads-v3"},
                      content_fingerprint="625bd12294a5898915efb40056f4e538",
                      created_at=1795461530.402207, updated_at=1795461531.5)
    await store.upsert([row])
    assert await store.get("p1") == [row]
    with sqlite3.connect(tmp_path / "a.db") as conn:
        (body,) = conn.execute("SELECT body FROM annotations").fetchone()
    plain = msgspec.msgpack.encode(row)
    assert bodies.is_compressed(body) and len(body) < len(plain) // 2
    # what the columns hold is not repeated in the body: it is put back on read
    assert msgspec.msgpack.decode(bodies.decompress(body), type=Annotation) == (
        msgspec.structs.replace(row, post_id="", producer="", version="",
                                content_fingerprint="", created_at=0.0, updated_at=0.0))


async def test_plain_msgpack_bodies_of_the_previous_version_still_read(store, tmp_path):
    """Rows written before compressed bodies (msgpack as it is) read back unchanged."""
    import sqlite3

    import msgspec

    old = _annotation("old", labels=["x"], created_at=5.0, updated_at=6.0)
    with sqlite3.connect(tmp_path / "a.db") as conn:
        conn.execute("INSERT INTO annotations (post_id, producer, version, created_at, "
                     "updated_at, body) VALUES ('old', 'basic', '1', 5.0, 6.0, ?)",
                     (msgspec.msgpack.encode(old),))
    assert await store.get("old") == [old]


async def test_a_body_naming_an_unknown_dictionary_is_a_store_error(store, tmp_path):
    import sqlite3

    import msgspec
    import zstandard

    from grebe.errors import StoreError

    foreign = zstandard.train_dictionary(
        1024, [msgspec.msgpack.encode(_annotation(f"p{i}", labels=[str(i) * 5]))
               for i in range(400)], dict_id=999_999)
    body = zstandard.ZstdCompressor(dict_data=foreign).compress(
        msgspec.msgpack.encode(_annotation("x")))
    with sqlite3.connect(tmp_path / "a.db") as conn:
        conn.execute("INSERT INTO annotations (post_id, producer, version, created_at, "
                     "updated_at, body) VALUES ('x', 'basic', '1', 1.0, 1.0, ?)", (body,))
    with pytest.raises(StoreError, match="unknown dictionary 999999"):
        await store.get("x")


async def test_float16_vectors_of_the_previous_version_still_read(store, tmp_path):
    """Rows whose vector the previous version stored as float16 (`f16`, 768 bytes for
    384 dims) read back as it wrote them, beside new int8 rows; a vector int8 cannot
    scale (a value past float32) is still kept, as float16."""
    import sqlite3

    import numpy as np

    from grebe.stores import vectors

    old = _annotation("old", "mm_emb_v5", embedding=[0.5, 0.25])
    await store.upsert([old, _annotation("new", "mm_emb_v5", embedding=_unit(3))])
    half = np.asarray([0.5, 0.25], dtype=np.float16).tobytes()
    with sqlite3.connect(tmp_path / "a.db") as conn:  # as the previous version wrote it
        (ref,) = conn.execute("SELECT vector FROM annotations WHERE post_id = 'old'"
                              ).fetchone()  # a rowid now, a digest then: either finds it
        conn.execute("UPDATE vectors SET dtype = 'f16', data = ? "
                     "WHERE rowid = ? OR digest = ?", (half, ref, ref))
    assert (await store.get("old"))[0].embedding == [0.5, 0.25]
    new = np.asarray((await store.get("new"))[0].embedding)
    assert float(new @ np.asarray(_unit(3))) > 0.9999
    assert vectors.pack([float("inf"), 1.0]).dtype == vectors.DTYPE_F16


async def test_vectors_fill_pages_in_a_new_store_and_a_store_keyed_by_digest_still_works(
        tmp_path):
    """A new store's `vectors` is a rowid table (rows in insertion order fill their
    pages; a random digest key left them ~75% full); a store created with the earlier
    WITHOUT ROWID table keeps it, and shares and reads vectors the same way."""
    import sqlite3

    import numpy as np

    new = SqliteStore(tmp_path / "new.db")
    await new.start()
    await new.upsert([_annotation(f"p{i}", "mm_emb_v5", embedding=_unit(i)) for i in range(50)])
    await new.stop()
    with sqlite3.connect(tmp_path / "new.db") as conn:
        assert conn.execute("SELECT max(rowid) FROM vectors").fetchone()[0] == 50
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE vectors (digest BLOB PRIMARY KEY, dims INTEGER NOT NULL, "
                     "dtype TEXT NOT NULL, data BLOB NOT NULL) WITHOUT ROWID")
    old = SqliteStore(path)
    await old.start()
    try:
        text = _unit(7)
        await old.upsert([_annotation("p", "post_embedding_with_summary", embedding=text),
                          _annotation("p", "mm_emb_v5", embedding=text)])
        rows = await old.get("p")
        assert all(float(np.asarray(r.embedding) @ np.asarray(text)) > 0.9999 for r in rows)
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 1
    finally:
        await old.stop()
