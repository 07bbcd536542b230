from __future__ import annotations

import pickle

import pytest

from grebe.core.task import SKIP, PlanOutput, Skip, SkipTask, TaskSpec


def test_skip_is_a_singleton_even_through_pickle() -> None:
    assert Skip() is SKIP
    assert pickle.loads(pickle.dumps(SKIP)) is SKIP
    assert repr(SKIP) == "SKIP"


def test_skip_task_reason() -> None:
    assert SkipTask("no media").reason == "no media"
    assert SkipTask().reason == "SkipTask"


def test_task_spec_is_frozen() -> None:
    async def fn(ctx: object) -> None:
        return None

    spec = TaskSpec(fn, timeout_s=1.0)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        spec.timeout_s = 2.0  # type: ignore[misc]


def test_plan_output_defaults_are_not_shared() -> None:
    a, b = PlanOutput([], {}, {}), PlanOutput([], {}, {})
    a.model_versions["m"] = "1"
    assert b.model_versions == {} and a.embedding is None and a.transcript is None
