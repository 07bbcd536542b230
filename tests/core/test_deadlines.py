import asyncio

import pytest

from grebe.core.deadlines import deadline_at


async def _guarded(delay_s: float, limit_s: float) -> tuple[str, bool]:
    """Await a sleep of `delay_s` under a limit of `limit_s`: what came out, and expired()."""
    loop = asyncio.get_running_loop()
    deadline = deadline_at(loop.time() + limit_s)
    try:
        await asyncio.sleep(delay_s)
    except BaseException as exc:
        outcome = deadline.close(exc)
        return type(outcome).__name__, deadline.expired()
    deadline.close()
    return "done", deadline.expired()


async def test_a_limit_that_passes_becomes_a_timeout_error() -> None:
    assert await _guarded(1.0, 0.01) == ("TimeoutError", True)


async def test_an_await_that_ends_in_time_is_untouched_and_never_cancelled_later() -> None:
    assert await _guarded(0, 0.02) == ("done", False)
    task = asyncio.current_task()
    assert task is not None
    await asyncio.sleep(0.04)  # past the closed limit: nothing cancels us
    assert task.cancelling() == 0


async def test_limits_fire_in_time_order_whatever_order_they_were_opened_in() -> None:
    results = await asyncio.gather(
        _guarded(1.0, 0.2), _guarded(1.0, 0.01), _guarded(0.05, 0.5), _guarded(1.0, 0.1)
    )
    assert results == [
        ("TimeoutError", True), ("TimeoutError", True), ("done", False), ("TimeoutError", True)
    ]


@pytest.mark.parametrize("use_asyncio", [False, True])
async def test_a_cancellation_from_outside_stays_a_cancellation(use_asyncio: bool) -> None:
    # The limit (already past) and somebody else cancel the task in the same loop
    # iteration; asyncio.timeout_at, the reference, lets the CancelledError through.
    seen: list[str] = []

    async def guarded() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        if use_asyncio:
            try:
                async with asyncio.timeout_at(loop.time() - 1):
                    loop.call_soon(task.cancel)
                    await asyncio.sleep(1)
            except BaseException as exc:
                seen.append(type(exc).__name__)
                raise
            return
        deadline = deadline_at(loop.time() - 1)
        loop.call_soon(task.cancel)
        try:
            await asyncio.sleep(1)
        except BaseException as exc:
            seen.append(type(deadline.close(exc)).__name__)
            raise

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(guarded())
    assert seen == ["CancelledError"]


async def test_a_closed_limit_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    deadline = deadline_at(loop.time() + 30)
    deadline.close()
    assert deadline._timer.cancelled()
    await asyncio.sleep(0)
    assert not deadline.expired()


def test_outside_an_asyncio_task_it_refuses() -> None:
    with pytest.raises(RuntimeError):
        deadline_at(0.0)
