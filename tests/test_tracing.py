"""Traces: a span per post and per plan task, with outcomes, in process and across the
real runtime (`grebe run` with engine processes exporting OTLP/HTTP to a local receiver)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grebe.config import TracingConfig
from grebe.core.bundle import PlanBundle
from grebe.core.plan import Plan
from grebe.core.task import SKIP
from grebe.tracing import instrument
from grebe.types import Post, TaskPayload

GREBE = str(Path(sys.executable).with_name("grebe"))


async def _ok(ctx):
    ctx.output.labels.append("ok")


async def _skip(ctx):
    return SKIP


async def _boom(ctx):
    raise ValueError("bad post")


def _bundle() -> PlanBundle:
    return PlanBundle(plans=[
        Plan("a", {"first": _ok, "second": _ok}, {"second": ["first"]}, eligibility="a"),
        Plan("b", {"maybe": _skip, "after": _ok}, {"after": ["maybe"]}, eligibility="b"),
        Plan("c", {"fails": _boom}, eligibility="c"),
    ])


async def test_one_post_gives_a_post_span_with_a_child_per_task_and_outcomes():
    exporter = InMemorySpanExporter()
    bundle = instrument(_bundle(), TracingConfig(enabled=True), exporter=exporter)
    await bundle.start()
    master = bundle.master()
    payload = TaskPayload(payload_id="s:0:7", post=Post(id="p1", author_id="u"), source="s",
                          eligibilities=frozenset({"a", "b", "c"}))
    result = await master.run(payload)
    await bundle.stop()  # flushes the batch processor
    assert result.plans["a"] == "success" and not result.success
    spans = {s.name: s for s in exporter.get_finished_spans()}
    # "b/after" never ran (its predecessor skipped), so it has no span.
    assert set(spans) == {"post", "a/first", "a/second", "b/maybe", "c/fails"}
    post = spans["post"]
    assert post.attributes["grebe.post_id"] == "p1"
    assert post.attributes["grebe.payload_id"] == "s:0:7"
    assert post.attributes["grebe.outcome"] == "failed"
    for name in ("a/first", "a/second", "b/maybe", "c/fails"):
        span = spans[name]
        assert span.parent is not None and span.parent.span_id == post.context.span_id
        assert span.context.trace_id == post.context.trace_id
        assert span.attributes["grebe.post_id"] == "p1"
    outcomes = {n: spans[n].attributes["grebe.outcome"] for n in spans if n != "post"}
    assert outcomes == {"a/first": "success", "a/second": "success", "b/maybe": "skipped",
                        "c/fails": "failed"}
    assert spans["c/fails"].events[0].name == "exception"


def test_tracing_off_wraps_nothing():
    from grebe.app.bundles import build_bundle
    from grebe.config import load_config

    config = load_config(plans={"factory": "grebe.flows.basic:build_bundle"})
    bundle = build_bundle(config)
    master = bundle.master()  # hydration sits in front of the plain PlanMaster
    assert type(master).__name__ == "HydratingMaster"
    assert type(master.inner).__name__ == "PlanMaster"


class _Receiver(BaseHTTPRequestHandler):
    requests: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


PLANS = textwrap.dedent(
    """
    from grebe.core.bundle import PlanBundle
    from grebe.core.plan import Plan

    async def read(ctx):
        return ctx.payload.post.text

    async def label(ctx):
        ctx.output.labels.append("seen")

    def build_bundle(config):
        return PlanBundle(plans=[Plan("traced", {"read": read, "label": label},
                                      {"label": ["read"]}, eligibility="traced")])
    """
)


@pytest.mark.slow
def test_grebe_run_with_engine_processes_exports_each_posts_spans(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "trace_test_plans.py").write_text(PLANS)
    config = tmp_path / "grebe.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path / "var"),
        "streams": [{"name": "posts", "topic": "posts", "eligibilities": ["traced"]}],
        "plans": {"factory": "trace_test_plans:build_bundle"},
        "engine": {"processes": 2},
        "metrics": {"enabled": False},
        "tracing": {"enabled": True,
                    "endpoint": f"http://127.0.0.1:{server.server_port}/v1/traces"},
    }))
    posts = tmp_path / "posts.jsonl"
    posts.write_text("".join(json.dumps({"id": f"p{i}", "author_id": "u", "text": "hi"}) + "\n"
                             for i in range(20)))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([GREBE, "ingest", str(posts), "-c", str(config)], check=True, env=env,
                   capture_output=True)
    run = subprocess.run([GREBE, "run", "-c", str(config), "--exit-when-done"], env=env,
                         capture_output=True, text=True, timeout=120)
    server.shutdown()
    assert run.returncode == 0, run.stderr[-2000:]
    spans = [span for request in _Receiver.requests for rs in request.resource_spans
             for ss in rs.scope_spans for span in ss.spans]

    def attr(span, key):
        return next(a.value.string_value for a in span.attributes if a.key == key)

    posts_spans = {attr(s, "grebe.post_id"): s for s in spans if s.name == "post"}
    assert set(posts_spans) == {f"p{i}" for i in range(20)}
    for post_id, post in posts_spans.items():
        children = sorted(s.name for s in spans
                          if s.parent_span_id == post.span_id and s.trace_id == post.trace_id)
        assert children == ["traced/label", "traced/read"], post_id
        assert attr(post, "grebe.outcome") == "success"
