"""The HTTP routes of `grebe serve` (Starlette). Handlers are thin: they read and check
the request, call the ApiService's parts, and shape the answer.

    POST /v1/posts                        one post or an array -> 202 {payload_ids}
    GET  /v1/posts/{post_id}/annotations  stored annotations (404 when none)
    POST /v1/analyze                      every flow on one post, answered now
    GET  /v1/status                       streams, lag, dispatcher, engines, uptime
    GET  /                                the same as a self-refreshing HTML page
    GET  /metrics                         Prometheus: the runtime's and the API's metrics
    GET  /healthz, /readyz                liveness; readiness (503 while draining)

Errors are JSON `{"error": ..., ...}`: 400 for bodies that are not JSON or nest too
deep, 415 for bodies not sent as application/json, 422 for posts that do not decode
(with each item's reason, and nothing appended), 413 for oversized requests, 429 past a
key's analyze budget, 503 while stopping or when a broker or the models are unavailable.
Every route but /healthz and /readyz needs a key when `auth.keys` is set; Host and
Origin are checked on every request (grebe.security, docs/security.md).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from grebe.api.analysis import AnalyzerUnavailableError
from grebe.api.body import BodyError, check_json, read_body, require_json
from grebe.api.intake import SubmissionError, TooManyPostsError, parse_posts
from grebe.api.metrics import REFUSED_INVALID, REFUSED_TOO_LARGE, REFUSED_UNAVAILABLE
from grebe.api.page import render_status
from grebe.api.service import ApiService
from grebe.api.status import snapshot
from grebe.codec import decode_envelope, encode
from grebe.errors import BrokerError, DecodeError, StoreError
from grebe.security.authn import principal_of
from grebe.security.keys import KeyStore
from grebe.security.middleware import guard_stack
from grebe.security.ratelimit import CallerRateLimiter

log = logging.getLogger(__name__)
#: Liveness and readiness stay open with keys set: orchestrators probe them without
#: credentials, and they tell only "ok"/"draining" (no posts, streams or counts).
PUBLIC_PATHS = ("/healthz", "/readyz")


class JSON(Response):
    """JSON through grebe.codec (msgspec), so Annotations and other Structs encode as
    they do on the streams."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return encode(content)


def error(code: int, message: str, headers: dict[str, str] | None = None,
          **extra: Any) -> JSON:
    return JSON({"error": message, **extra}, status_code=code, headers=headers)


def body_error(exc: BodyError) -> JSON:
    # After a timed-out body the connection's state is unknown: do not reuse it.
    headers = {"connection": "close"} if exc.status == 408 else None
    return error(exc.status, str(exc), headers=headers)


async def internal_error(request: Request, exc: Exception) -> Response:
    """A bug answers a plain 500: the traceback goes to the log, never to the caller."""
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error(500, "internal error; see the server log")


def build_app(service: ApiService) -> Starlette:
    limits = service.config.api
    analyze_budget = CallerRateLimiter(limits.analyze_rate)

    async def json_body(request: Request) -> bytes:
        require_json(request)
        body = await read_body(request, limits.max_body_bytes, limits.http.body_timeout_s)
        check_json(body, limits.max_json_depth)
        return body

    async def submit_posts(request: Request) -> Response:
        if not service.accepting or service.intake is None:
            service.metrics.refused(REFUSED_UNAVAILABLE)
            return error(503, f"not accepting posts: {service.state}")
        try:
            posts = parse_posts(await json_body(request), limits.max_batch)
        except BodyError as exc:
            service.metrics.refused(REFUSED_TOO_LARGE if exc.status == 413 else REFUSED_INVALID)
            return body_error(exc)
        except TooManyPostsError as exc:
            service.metrics.refused(REFUSED_TOO_LARGE)
            return error(413, str(exc), problems=exc.problems)
        except SubmissionError as exc:
            service.metrics.refused(REFUSED_INVALID)
            return error(422, "invalid posts; none were accepted", problems=exc.problems)
        try:
            payload_ids = await service.intake.append(posts)
        except BrokerError as exc:
            service.metrics.refused(REFUSED_UNAVAILABLE)
            return error(503, f"the intake stream is unavailable: {exc}")
        service.metrics.accepted(len(posts))
        return JSON({
            "accepted": len(posts), "stream": service.intake.stream.name,
            "topic": service.intake.stream.topic,
            "post_ids": [p.envelope.post.id for p in posts], "payload_ids": payload_ids,
        }, status_code=202)

    async def annotations(request: Request) -> Response:
        post_id: str = request.path_params["post_id"]
        if service.store is None:
            return error(503, f"the store is closed: {service.state}")
        try:
            rows = await service.store.get(post_id)
        except StoreError as exc:
            return error(503, f"the annotation store is unavailable: {exc}")
        if not rows:
            return error(404, f"no annotations for post {post_id!r}", post_id=post_id)
        return JSON({"post_id": post_id, "annotations": rows})

    async def analyze(request: Request) -> Response:
        principal = principal_of(request.state)
        caller = principal.key_id or (request.client.host if request.client else "unknown")
        wait_s = analyze_budget.retry_after_s(caller)
        if wait_s is not None:
            return error(429, f"over the analyze budget of {limits.analyze_rate} "
                              "(api.analyze_rate)", retry_after_s=round(wait_s),
                         headers={"retry-after": str(round(wait_s))})
        try:
            body = await json_body(request)
        except BodyError as exc:
            return body_error(exc)
        if body.lstrip()[:1] == b"[":
            return error(422, "send one post (an Envelope or a bare Post), not an array")
        try:
            envelope = decode_envelope(body)
        except DecodeError as exc:
            return error(422, "invalid post", reason=str(exc))
        if envelope.post.is_stub:  # only the pipeline hydrates by id (docs/hydration.md)
            return error(422, "invalid post", reason="analyze needs the post itself "
                         "(author_id and text); send only ids to POST /v1/posts")
        began = time.perf_counter()
        try:
            result = await service.analysis.analyze(envelope)
        except AnalyzerUnavailableError as exc:
            return error(503, str(exc))
        service.metrics.analysis(time.perf_counter() - began)
        return JSON(result)

    async def status(request: Request) -> Response:
        return JSON(await snapshot(service))

    async def page(request: Request) -> Response:
        html = render_status(await snapshot(service), limits.status_refresh_s)
        return HTMLResponse(html, headers={"cache-control": "no-store"})

    async def metrics(request: Request) -> Response:
        # Rendering walks every metric under the registry's locks: keep it off the loop.
        body = await run_in_threadpool(generate_latest, service.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        reason = service.unready_reason()
        if reason is not None and service.state == "running":  # broken, not just stopping
            return error(503, reason, status="failing")
        return JSON({"status": "ok", "state": service.state})

    async def readyz(request: Request) -> Response:
        reason = service.unready_reason()
        if reason is not None:
            return error(503, reason, status="unready")
        return JSON({"status": "ready"})

    return Starlette(middleware=guard_stack(
        KeyStore.from_config(service.config.auth), "api", limits.host, limits.http,
        PUBLIC_PATHS), exception_handlers={Exception: internal_error}, routes=[
        Route("/v1/posts", submit_posts, methods=["POST"]),
        Route("/v1/posts/{post_id:path}/annotations", annotations, methods=["GET"]),
        Route("/v1/analyze", analyze, methods=["POST"]),
        Route("/v1/status", status, methods=["GET"]),
        Route("/", page, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ])
