import asyncio

import pytest

from grebe.core.executor import Executor, ExecutorUnavailableError, InlineExecutor
from grebe.types import Post, TaskPayload, TaskResult


def _payload(i: int) -> TaskPayload:
    return TaskPayload(payload_id=f"p{i}", post=Post(id=str(i), author_id="u"))


class Runner:
    def __init__(self) -> None:
        self.running = 0
        self.max_running = 0

    async def run(self, payload: TaskPayload) -> TaskResult:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await asyncio.sleep(0.002)
            if payload.payload_id == "p3":
                raise RuntimeError("model fell over")
            return TaskResult(payload_id=payload.payload_id, post_id=payload.post.id, success=True)
        finally:
            self.running -= 1


async def test_runs_with_bounded_concurrency_and_propagates_errors() -> None:
    runner = Runner()
    executor = InlineExecutor(runner, concurrency=4)
    assert isinstance(executor, Executor)
    await executor.start()
    try:
        futures = [executor.submit(_payload(i)) for i in range(20)]
        done = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        await executor.stop()
    assert runner.max_running == 4
    assert isinstance(done[3], RuntimeError)
    assert [r.payload_id for i, r in enumerate(done) if i != 3] == [
        f"p{i}" for i in range(20) if i != 3
    ]


async def test_submit_outside_start_stop_is_refused_and_stop_cancels() -> None:
    executor = InlineExecutor(Runner(), concurrency=1)
    with pytest.raises(ExecutorUnavailableError):
        executor.submit(_payload(0))
    await executor.start()
    futures = [executor.submit(_payload(i)) for i in range(3)]
    await asyncio.sleep(0)
    await executor.stop()
    assert all(f.cancelled() for f in futures)
    with pytest.raises(ExecutorUnavailableError):
        executor.submit(_payload(0))
