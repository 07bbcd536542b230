"""OpenTelemetry traces of the pipeline: one span per post, one child span per plan task.

Off by default (`tracing.enabled`). When on, `instrument(bundle, config)` is applied to
the engine's plan bundle: each task function is wrapped so it runs inside a span named
`plan/task`, and the bundle's PlanMaster opens the post's span around all of its plans,
so a trace shows where one post's time went. Nothing is wrapped when tracing is off, so
the hot path pays nothing for it. Spans carry the post id, payload id, source, plan,
task and outcome (success, skipped, failed); they leave through a batching OTLP/HTTP
exporter, which never blocks a task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Status, StatusCode

from grebe.core.plan import Plan, wrap_tasks
from grebe.core.planmaster import PlanMaster
from grebe.core.task import SKIP, SkipTask, TaskContext, TaskFn
from grebe.types import TaskPayload, TaskResult

if TYPE_CHECKING:
    from grebe.config import TracingConfig
    from grebe.core.bundle import PlanBundle

TRACER_NAME = "grebe"
ATTR_POST_ID = "grebe.post_id"
ATTR_PAYLOAD_ID = "grebe.payload_id"
ATTR_SOURCE = "grebe.source"
ATTR_PLAN = "grebe.plan"
ATTR_TASK = "grebe.task"
ATTR_OUTCOME = "grebe.outcome"
OUTCOME_SUCCESS = "success"
OUTCOME_SKIPPED = "skipped"
OUTCOME_FAILED = "failed"


def provider_for(config: TracingConfig, exporter: SpanExporter | None = None) -> TracerProvider:
    """A tracer provider exporting to the configured OTLP endpoint (or `exporter`)."""
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.endpoint)
    provider = TracerProvider(
        resource=Resource.create({"service.name": config.service_name}),
        sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def traced_task(tracer: trace.Tracer, plan: str, task: str, fn: TaskFn) -> TaskFn:
    name = f"{plan}/{task}"

    async def run(ctx: TaskContext) -> Any:
        with tracer.start_as_current_span(
            name, attributes={ATTR_PLAN: plan, ATTR_TASK: task,
                              ATTR_POST_ID: ctx.payload.post.id},
            record_exception=True, set_status_on_exception=True,
        ) as span:
            try:
                result = fn(ctx)
                if hasattr(result, "__await__"):
                    result = await result
            except SkipTask:
                span.set_attribute(ATTR_OUTCOME, OUTCOME_SKIPPED)
                raise
            except BaseException:
                span.set_attribute(ATTR_OUTCOME, OUTCOME_FAILED)
                raise
            span.set_attribute(ATTR_OUTCOME, OUTCOME_SKIPPED if result is SKIP
                               else OUTCOME_SUCCESS)
            return result

    return run


def traced_plans(plans: Sequence[Plan], tracer: trace.Tracer) -> list[Plan]:
    def wrapper_for(plan: str) -> Callable[[str, TaskFn], TaskFn]:
        return lambda task, fn: traced_task(tracer, plan, task, fn)

    return [wrap_tasks(plan, wrapper_for(plan.name)) for plan in plans]


class TracedPlanMaster(PlanMaster):
    """A PlanMaster that runs each payload inside the post's span."""

    __slots__ = ("tracer",)

    def __init__(self, plans: Sequence[Plan], *, services: Any = None,
                 tracer: trace.Tracer) -> None:
        super().__init__(plans, services=services)
        self.tracer = tracer

    async def run(self, payload: TaskPayload) -> TaskResult:
        with self.tracer.start_as_current_span(
            "post", attributes={ATTR_POST_ID: payload.post.id,
                                ATTR_PAYLOAD_ID: payload.payload_id,
                                ATTR_SOURCE: payload.source},
        ) as span:
            result = await super().run(payload)
            span.set_attribute(ATTR_OUTCOME, OUTCOME_SUCCESS if result.success
                               else OUTCOME_FAILED)
            if not result.success:
                span.set_status(Status(StatusCode.ERROR, result.error or ""))
            return result


class _ProviderLifecycle:
    """Flushes and shuts the exporter down when the bundle stops."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.provider.shutdown()


def instrument(bundle: PlanBundle, config: TracingConfig,
               exporter: SpanExporter | None = None) -> PlanBundle:
    """Trace `bundle` in place: spans per task, a span per post, flushed on stop."""
    provider = provider_for(config, exporter)
    tracer = provider.get_tracer(TRACER_NAME)
    bundle.plans = traced_plans(bundle.plans, tracer)

    def master(plans: Sequence[Plan], services: Any = None) -> PlanMaster:
        return TracedPlanMaster(plans, services=services, tracer=tracer)

    bundle.master_factory = master
    bundle.components = [*bundle.components, _ProviderLifecycle(provider)]
    return bundle
