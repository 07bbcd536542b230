"""A post's annotations are written together once its plans have finished
(grebe.flows.sinks.PostWrites): one store upsert, then the record flags, then one append
to the output topic, before the payload's result; a failed write fails the plans'
sinks as their own write did."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grebe.core.planmaster import PlanMaster
from grebe.errors import StoreUnavailableError
from grebe.flows import registry
from grebe.stores.base import MemoryStore
from grebe.types import Annotation, TaskStatus

from .conftest import payload
from .test_heads_flows import heads_services
from .test_prelude import DEFAULT_SIX

SPAMMY = "buy cheap pills, click the free offer now"


class LoggingStore(MemoryStore):
    def __init__(self, log: list[str], fail: bool = False) -> None:
        super().__init__()
        self.log, self.fail = log, fail

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        if self.fail:
            raise StoreUnavailableError("annotation store: disk full")
        self.log.append("upsert " + ",".join(sorted(a.producer for a in annotations)))
        await super().upsert(annotations)


class LoggingProducer:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.log.append("publish one")

    async def publish_many(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]
                           ) -> None:
        self.log.append(f"publish {len(records)}")


def services_with(log: list[str], *, fail: bool = False) -> Any:
    services = heads_services({"defaults": {"dedupe_ttl_s": 60}})
    services.store = LoggingStore(log, fail)
    services.records.__init__(services.store)
    services.producer = LoggingProducer(log)
    return services


async def test_six_annotations_one_upsert_then_records_then_one_append() -> None:
    log: list[str] = []
    services = services_with(log)
    result = await PlanMaster(registry.PLANS, services=services).run(
        payload(SPAMMY, eligibilities=DEFAULT_SIX))
    assert result.success, result.error
    assert log == [
        "upsert banger_initial_screen,mm_emb_v5,post_embedding_with_summary,post_safety,"
        "safety_ptos,spam_comment",
        "upsert record.post",  # the spam flags, OR-merged into the post's record
        "publish 5",  # post_safety is not published (Grox)
    ]
    rows = {a.producer for a in await services.store.get("p1")}
    assert {"spam_comment", "post_safety", "record.post"} <= rows
    assert services.dedupe.seen("spam_comment", "p1", 60)  # remembered once written


async def test_a_failed_write_fails_every_sink_it_held_as_a_system_fault() -> None:
    log: list[str] = []
    services = services_with(log, fail=True)
    result = await PlanMaster(registry.PLANS, services=services).run(
        payload(SPAMMY, eligibilities=DEFAULT_SIX))
    assert not result.success and result.system_fault
    assert set(result.plans.values()) == {TaskStatus.FAILED}
    assert "spam_comment/sink: StoreUnavailableError: annotation store: disk full" in (
        result.error or "")
    assert log == []  # nothing published
    assert not services.dedupe.seen("spam_comment", "p1", 60)  # a retry is not deduped
