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
