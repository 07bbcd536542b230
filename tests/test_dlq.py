from grebe.brokers.factory import local_log
from grebe.codec import encode
from grebe.commands.dlq import list_dead_letters, replay
from grebe.config import load_config
from grebe.types import DeadLetter


async def _dead(config, *letters):
    log = local_log(config)
    await log.open()
    await log.topic("dead-letters", 1)
    await log.append("dead-letters", [(None, encode(d)) for d in letters] + [(None, b"junk")])
    await log.close()


def _letter(n, source="posts"):
    return DeadLetter(source=source, reason="max_attempts", attempts=3, last_error="boom",
                      original=f"original-{n}".encode(), key=f"k{n}".encode(), offset=n)


async def test_replay_sends_each_dead_letter_back_once(tmp_path):
    config = load_config(data_dir=tmp_path, streams=[{"name": "posts", "topic": "in"}])
    await _dead(config, _letter(1), _letter(2), _letter(3, source="gone"))
    first = await replay(config)
    assert (first.replayed, first.skipped) == (2, 2)  # unknown stream, unreadable record
    second = await replay(config)
    assert (second.replayed, second.skipped) == (0, 0)

    log = local_log(config)
    await log.open()
    records = await log.read("in", [(p, 0) for p in range(4)], 10)
    await log.close()
    assert sorted(r.value for r in records) == [b"original-1", b"original-2"]

    entries = await list_dead_letters(config, limit=10)
    assert [e.replayed for e in entries] == [True] * 4
    assert entries[0].record.last_error == "boom"
    assert entries[-1].record is None and "unreadable" in entries[-1].error
    assert len(await list_dead_letters(config, limit=2)) == 2
