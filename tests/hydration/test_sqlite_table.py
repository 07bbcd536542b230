"""The embedded post table: what passes is recorded, found by id, by author."""

import pytest

from grebe.errors import HydrationUnavailableError
from grebe.hydration.sqlite import SqlitePostTable
from grebe.types import Card, Post, User


async def test_record_then_lookup_by_id_and_author(tmp_path):
    table = SqlitePostTable(tmp_path / "posts.db")
    await table.start()
    try:
        posts = [Post(id=f"p{i}", author_id="a", text=f"t{i}", created_at=float(i))
                 for i in range(5)]
        rich = Post(id="q", author_id="b", quoted_post=posts[0], urls=("https://x.y/",),
                    cards=(Card(url="https://x.y/", title="X"),), bookmark_count=4)
        await table.record([*posts, rich], [User(id="a", name="Ann", protected=True)])
        await table.record([Post(id="p0", author_id="a", text="edited")], [])
        found = await table.get_posts(["p0", "q", "nope", "q"])
        assert set(found) == {"p0", "q"}
        assert found["p0"].text == "edited" and found["q"] == rich
        assert [p.id for p in await table.recent_posts("a", 3)] == ["p4", "p3", "p2"]
        assert await table.recent_posts("nobody", 3) == []
        users = await table.get_users(["a", "b"])
        assert list(users) == ["a"] and users["a"].protected
        assert len(await table.get_posts([f"p{i % 5}" for i in range(1200)])) == 5  # chunks
    finally:
        await table.stop()


async def test_a_table_that_cannot_open_is_unavailable_not_a_post_fault(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    table = SqlitePostTable(blocker / "posts.db")  # a file where a directory must be
    with pytest.raises(HydrationUnavailableError):
        await table.start()
    with pytest.raises(HydrationUnavailableError):
        await table.get_posts(["p"])  # never started


async def test_bodies_are_compressed_and_plain_json_rows_of_earlier_versions_still_read(
        tmp_path):
    """Bodies are zstd against the log dictionary (a tweet's JSON to well under half);
    a row as the version before wrote it (plain msgspec JSON) reads back the same."""
    import sqlite3

    import msgspec

    tweet = Post(id="1790000000000000001", author_id="44196397", created_at=1717200000.0,
                 text="Just landed in Austin, heading to the factory now")
    old = Post(id="old", author_id="44196397", text="written before", created_at=1.0)
    old_user = User(id="u-old", name="Old")
    table = SqlitePostTable(tmp_path / "posts.db")
    await table.start()
    try:
        await table.record([tweet], [])
        with sqlite3.connect(tmp_path / "posts.db") as conn:
            (body,) = conn.execute("SELECT body FROM posts").fetchone()
            assert len(body) < len(msgspec.json.encode(tweet)) * 0.5
            conn.execute("INSERT INTO posts VALUES (?, ?, ?, ?)",
                         (old.id, old.author_id, old.created_at, msgspec.json.encode(old)))
            conn.execute("INSERT INTO users VALUES (?, ?)",
                         (old_user.id, msgspec.json.encode(old_user)))
        assert await table.get_posts(["old", tweet.id]) == {"old": old, tweet.id: tweet}
        assert await table.recent_posts("44196397", 5) == [tweet, old]
        assert await table.get_users(["u-old"]) == {"u-old": old_user}
    finally:
        await table.stop()


OLD_SCHEMA = """
CREATE TABLE posts (
    id TEXT PRIMARY KEY, author_id TEXT NOT NULL, created_at REAL NOT NULL, body BLOB NOT NULL
);
CREATE INDEX posts_by_author ON posts (author_id, created_at);
CREATE TABLE users (id TEXT PRIMARY KEY, body BLOB NOT NULL);
"""


@pytest.mark.parametrize("old", [False, True], ids=["new-file", "rowid-file-of-before"])
async def test_new_files_key_rows_by_id_alone_and_older_files_still_work(tmp_path, old):
    """A new file's tables are WITHOUT ROWID (no rowid table plus an index of the ids:
    ~25 bytes a post); a file created before (rowid tables, as the SQL above) works as
    it did."""
    import sqlite3

    path = tmp_path / "posts.db"
    if old:
        with sqlite3.connect(path) as conn:
            conn.executescript(OLD_SCHEMA)
    table = SqlitePostTable(path)
    await table.start()
    try:
        await table.record([Post(id="p1", author_id="a", text="hi", created_at=1.0)],
                           [User(id="a", name="Ann")])
        await table.record([Post(id="p1", author_id="a", text="edited", created_at=1.0)], [])
        assert (await table.get_posts(["p1"]))["p1"].text == "edited"
        assert [p.id for p in await table.recent_posts("a", 3)] == ["p1"]
        assert (await table.get_users(["a"]))["a"].name == "Ann"
    finally:
        await table.stop()
    with sqlite3.connect(path) as conn:
        sql = dict(conn.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'"))
    assert all(("WITHOUT ROWID" in sql[t]) is not old for t in ("posts", "users"))
