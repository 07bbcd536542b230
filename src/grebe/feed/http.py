"""The home timeline over HTTP: one small JSON endpoint (Starlette; run with uvicorn).

    GET /home/{user_id}?max_results=20&safety_level=strict&debug=1
    GET /healthz

With `auth.keys` set, /home needs a key with the `feed` scope, and `debug=1` (which
shows every candidate's labels, score parts and which filter removed which post) needs
the `debug` scope too: 403 otherwise. Without keys the server is loopback-only and its
callers are the host's own users, who may debug. Host and Origin are checked as for
`grebe serve` (grebe.security).

At most `feed.max_concurrent_requests` home requests run at once; beyond that a 503
with `Retry-After: feed.retry_after_s` comes back at once (grebe.feed.admission), so
latency stays bounded under overload. /healthz reports in-flight and rejected counts.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from grebe.errors import ConfigError
from grebe.feed.admission import Admission
from grebe.feed.candidates import FeedCandidate
from grebe.feed.home import HomeFeed, HomeResult
from grebe.security.authn import principal_of
from grebe.security.keys import KeyStore
from grebe.security.middleware import guard_stack

#: Open with keys set: probes carry no credentials, and it tells only a post count.
PUBLIC_PATHS = ("/healthz",)


def candidate_json(c: FeedCandidate, debug: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "post_id": c.post_id,
        "author_id": c.author_id,
        "created_at": c.created_at,
        "in_network": c.in_network,
        "score": round(c.score, 6),
    }
    if c.source_post_id:
        out["retweet_of"] = c.source_post_id
    if debug:
        out.update(source=c.source, labels=c.labels, score_parts=c.score_parts,
                   similarity=c.similarity, explanation=c.explanation)
    return out


def result_json(result: HomeResult, debug: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user_id": result.query.user_id,
        "posts": [candidate_json(c, debug) for c in result.selected],
        "retrieved": len(result.retrieved),
        "filtered": result.filtered_by(),
        "elapsed_ms": round(result.elapsed_s * 1000, 3),
    }
    if debug:  # which post each filter removed, not only how many
        body["filtered_posts"] = [
            {"post_id": f.candidate.post_id, "author_id": f.candidate.author_id,
             "filter": f.filter}
            for f in result.filtered
        ]
    if result.errors:
        body["errors"] = result.errors
    return body


class FastJSONResponse(Response):
    """JSON by msgspec: a 50-post page renders in ~10 µs against ~300 µs through
    Starlette's JSONResponse (json.dumps with its options; one-off, load ~15), out of a
    request budget of a few milliseconds (docs/benchmarks.md, feed)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return _ENCODER.encode(content)


_ENCODER = msgspec.json.Encoder()


def build_feed_app(feed: HomeFeed, keys: KeyStore | None = None) -> Starlette:
    admission = Admission(feed.settings.max_concurrent_requests)
    overloaded = {"Retry-After": str(feed.settings.retry_after_s)}

    async def home(request: Request) -> Response:
        if not admission.try_enter():
            return JSONResponse(
                {"error": f"overloaded: {admission.limit} home requests already running; "
                          f"retry later"}, status_code=503, headers=overloaded)
        try:
            return await admitted_home(request)
        finally:
            admission.leave()

    async def admitted_home(request: Request) -> Response:
        params = request.query_params
        debug = params.get("debug", "").lower() in {"1", "true", "yes"}
        principal = principal_of(request.state)
        if debug and not principal.may("debug"):
            return JSONResponse({"error": f"debug=1 needs a key with the 'debug' scope; "
                                          f"key {principal.key_id!r} lacks it"},
                                status_code=403)
        try:
            max_results = int(params.get("max_results", feed.settings.max_results))
        except ValueError:
            return JSONResponse({"error": "max_results must be an integer"}, status_code=400)
        if not 1 <= max_results <= 1000:
            return JSONResponse({"error": "max_results must be in 1..1000"}, status_code=400)
        try:
            result = await feed.home(request.path_params["user_id"], max_results=max_results,
                                     safety_level=params.get("safety_level"))
        except ConfigError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return FastJSONResponse(result_json(result, debug))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "indexed_posts": len(feed.index),
                             "in_flight": admission.in_flight,
                             "rejected": admission.rejected})

    settings = feed.settings
    return Starlette(middleware=guard_stack(
        keys or KeyStore(), "feed", settings.http_host, settings.http, PUBLIC_PATHS), routes=[
        Route("/home/{user_id}", home, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])
