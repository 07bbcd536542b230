"""One classifier decides whose fault a failure is (errors.is_system_fault), and plans
carry its verdict to the dispatcher: a system fault pauses intake and is retried, never
dead-lettered; the post's own failure is retried, then dead-lettered."""

import errno
import sqlite3

from grebe.core.plan import Plan
from grebe.core.planmaster import PlanMaster
from grebe.errors import (
    BrokerError,
    CircuitOpenError,
    InferenceError,
    ModelUnavailableError,
    StoreError,
    StoreUnavailableError,
    is_system_fault,
)
from grebe.types import Post, TaskPayload


def _chained(outer: Exception, cause: Exception) -> Exception:
    try:
        raise outer from cause
    except Exception as exc:
        return exc


def test_system_faults_are_recognised_where_they_come_from() -> None:
    assert is_system_fault(StoreUnavailableError("disk full"))
    assert is_system_fault(ModelUnavailableError("model server down"))
    assert is_system_fault(CircuitOpenError("circuit open"))
    assert is_system_fault(OSError(errno.ENOSPC, "No space left on device"))
    assert is_system_fault(sqlite3.OperationalError("database or disk is full"))
    # A wrapper that does not say so is still classified by what it was raised from.
    full = sqlite3.OperationalError("database or disk is full")
    assert is_system_fault(_chained(BrokerError("local log: database or disk is full"), full))


def test_the_posts_own_failures_are_not_system_faults() -> None:
    assert not is_system_fault(ValueError("bad post"))
    assert not is_system_fault(InferenceError("model returned garbage for this post"))
    assert not is_system_fault(StoreError("bad annotation"))
    assert not is_system_fault(OSError(errno.ENOENT, "no such media file"))
    assert not is_system_fault(sqlite3.IntegrityError("constraint failed"))


def _payload() -> TaskPayload:
    return TaskPayload(
        payload_id="s:0:0", post=Post(id="p1", author_id="a", text="hi"),
        eligibilities=frozenset({"e"}),
    )


async def test_a_task_failing_for_the_system_marks_the_result() -> None:
    async def classify(ctx):
        return 1

    async def sink(ctx):
        raise StoreUnavailableError("annotation store: database or disk is full")

    plan = Plan("p", {"classify": classify, "sink": sink}, {"sink": ["classify"]},
                eligibility="e")
    result = await PlanMaster([plan]).run(_payload())
    assert not result.success and result.system_fault
    assert "StoreUnavailableError" in (result.error or "")


async def test_a_task_failing_for_the_post_does_not_mark_the_result() -> None:
    async def classify(ctx):
        raise ValueError("cannot classify this text")

    result = await PlanMaster([Plan("p", {"classify": classify}, eligibility="e")]).run(
        _payload()
    )
    assert not result.success and not result.system_fault


async def test_a_model_server_that_is_down_is_a_system_fault() -> None:
    import msgspec
    import pytest

    from grebe.inference.openai_compat import OpenAIChatModel, OpenAICompatClient

    class Verdict(msgspec.Struct):
        spam: bool

    client = OpenAICompatClient(
        "http://127.0.0.1:9/v1", "test-model", max_attempts=2, backoff_initial_s=0.01,
        backoff_max_s=0.02, timeout_s=2.0,
    )
    model = OpenAIChatModel(client)
    await model.start()
    try:
        with pytest.raises(InferenceError) as caught:
            await model.complete_json([{"role": "user", "content": "hi"}], Verdict)
    finally:
        await model.stop()
    assert isinstance(caught.value, ModelUnavailableError) and is_system_fault(caught.value)


def test_a_stopped_batcher_is_a_system_fault() -> None:
    from grebe.inference.batcher import BatcherStoppedError

    assert is_system_fault(BatcherStoppedError("embedder: stopped"))
