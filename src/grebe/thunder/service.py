"""The gRPC face of thunder: GetInNetworkPosts, health, metrics, load shedding.

Overload policy: a call that finds `max_concurrent_requests` calls already in flight is
refused at once with RESOURCE_EXHAUSTED rather than queued, so the callers that were
admitted keep their latency and the client can retry elsewhere. Every admitted call
has a time budget (the configured one, shortened by the client's deadline); when it
runs out the call returns the newest posts of the authors scanned so far, flagged
`partial`. Health reports NOT_SERVING until ingest has caught up with the stream, and
again while ingest cannot read it; meanwhile GetInNetworkPosts answers UNAVAILABLE (a
half-loaded or stale store must not pass for a complete one: the caller retries or
falls back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from grebe.errors import ConfigError
from grebe.security.grpc_guard import (
    BearerAuthInterceptor,
    DecodeGuardInterceptor,
    server_credentials,
)
from grebe.security.keys import KeyStore
from grebe.thunder.graph import SocialGraph
from grebe.thunder.ingest import Readiness
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.proto import thunder_pb2, thunder_pb2_grpc
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, InNetworkResult, ThunderStore
from grebe.thunder.wire import ResponseEncoder

log = logging.getLogger(__name__)

SERVICE_NAME = thunder_pb2.DESCRIPTOR.services_by_name["InNetworkPosts"].full_name
REFLECTED_SERVICES = (
    SERVICE_NAME,
    health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
    reflection.SERVICE_NAME,
)
COMPRESSION = {
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
    "none": grpc.Compression.NoCompression,
}
#: Keep this share of the client's remaining deadline for encoding and the network.
DEADLINE_SHARE = 0.8


async def run_scan(store: ThunderStore, query: InNetworkQuery) -> InNetworkResult:
    """Run a store scan, yielding to the event loop between chunks of authors."""
    scan = store.scan(query)
    try:
        while True:
            next(scan)
            await asyncio.sleep(0)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class InNetworkPostsService(thunder_pb2_grpc.InNetworkPostsServicer):
    def __init__(
        self, store: ThunderStore, settings: ThunderSettings | None = None,
        metrics: ThunderMetrics | None = None, ready: asyncio.Event | None = None,
        graph: SocialGraph | None = None,
    ) -> None:
        self.store = store
        self.settings = settings or store.settings
        self.metrics = metrics or ThunderMetrics()
        self.ready = ready  # None: always serve (a store filled before serving)
        self.graph = graph  # asked when a request's following list is empty
        self.encoder = ResponseEncoder(self.settings.encoded_cache_posts)
        self.in_flight = 0

    async def GetInNetworkPosts(  # the gRPC method name
        self, request: thunder_pb2.GetInNetworkPostsRequest, context: grpc.aio.ServicerContext,
    ) -> bytes:
        """The serialised response (see `add_service`: sent as it is)."""
        s, m = self.settings, self.metrics
        if self.ready is not None and not self.ready.is_set():
            m.requests.labels(grpc.StatusCode.UNAVAILABLE.name).inc()
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"thunder is not caught up with its stream ({len(self.store)} posts held)",
            )
        if self.in_flight >= s.max_concurrent_requests:
            m.rejected.inc()
            m.requests.labels(grpc.StatusCode.RESOURCE_EXHAUSTED.name).inc()
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"thunder is at its limit of {s.max_concurrent_requests} concurrent calls",
            )
        problem = self._invalid(request)
        if problem:
            m.requests.labels(grpc.StatusCode.INVALID_ARGUMENT.name).inc()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        self.in_flight += 1
        m.in_flight.inc()
        started = time.perf_counter()
        try:
            budget = s.request_budget_ms / 1000.0
            remaining = context.time_remaining()
            if remaining is not None:
                budget = min(budget, max(0.0, remaining * DEADLINE_SHARE))
            following = list(request.following_user_ids)
            if not following and self.graph is not None:
                following = list(await self.graph.following(request.user_id))[: s.max_following]
                m.graph_lookups.inc()
            query = InNetworkQuery(
                user_id=request.user_id,
                following_user_ids=following,
                exclude_post_ids=set(request.exclude_post_ids),
                max_results=request.max_results or s.default_max_results,
                is_video_request=request.is_video_request,
                budget_s=budget,
            )
            result = await run_scan(self.store, query)
            debug = None
            if request.debug:
                newest = self.store.newest_created_at
                debug = thunder_pb2.DebugInfo(
                    authors_scanned=result.authors_scanned,
                    candidates=result.candidates,
                    elapsed_ms=result.elapsed_s * 1000.0,
                    store_posts=len(self.store),
                    freshness_s=max(0.0, time.time() - newest) if newest else 0.0,
                )
            response = self.encoder.encode(result.posts, result.partial, debug)
            if result.partial:
                m.timeouts.inc()
            m.returned.observe(len(result.posts))
            m.observe_answer(result)
            m.requests.labels(grpc.StatusCode.OK.name).inc()
            return response
        finally:
            self.in_flight -= 1
            m.in_flight.dec()
            m.latency.observe(time.perf_counter() - started)

    def _invalid(self, request: thunder_pb2.GetInNetworkPostsRequest) -> str | None:
        s = self.settings
        if not request.user_id:
            return "user_id is required"
        if len(request.following_user_ids) > s.max_following:
            return (f"following_user_ids has {len(request.following_user_ids)} ids; "
                    f"the limit is {s.max_following}")
        if len(request.exclude_post_ids) > s.max_excluded:
            return (f"exclude_post_ids has {len(request.exclude_post_ids)} ids; "
                    f"the limit is {s.max_excluded}")
        if request.max_results > s.max_results_cap:
            return f"max_results {request.max_results} is above the limit of {s.max_results_cap}"
        return None


def _as_is(response: bytes) -> bytes:
    return response


def add_service(service: InNetworkPostsService, server: grpc.aio.Server) -> None:
    """Register the service as the generated `add_InNetworkPostsServicer_to_server`
    does, but with the identity as response serializer: `GetInNetworkPosts` returns the
    response already serialised (grebe.thunder.wire), so it is not parsed and serialised
    once more per call."""
    handlers = {"GetInNetworkPosts": grpc.unary_unary_rpc_method_handler(
        service.GetInNetworkPosts,
        request_deserializer=thunder_pb2.GetInNetworkPostsRequest.FromString,
        response_serializer=_as_is,
    )}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


class ThunderServer:
    """A grpc.aio server with the InNetworkPosts and Health services.

    `ready` (from ingest) switches health to SERVING; without one it serves at once.
    With `keys`, every call but health needs a bearer key with the thunder scope; with
    `settings.tls`, the port speaks TLS (grebe.security.grpc_guard, docs/security.md)."""

    def __init__(
        self, store: ThunderStore, settings: ThunderSettings | None = None,
        metrics: ThunderMetrics | None = None, ready: asyncio.Event | None = None,
        keys: KeyStore | None = None, graph: SocialGraph | None = None,
    ) -> None:
        self.settings = settings or store.settings
        self.metrics = metrics or ThunderMetrics()
        self.metrics.watch_store(store)
        self.service = InNetworkPostsService(store, self.settings, self.metrics, ready, graph)
        self.health = health.aio.HealthServicer()
        self._ready = ready
        self.keys = keys or KeyStore()
        self._server: grpc.aio.Server | None = None
        self._watch: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self) -> int:
        """Bind and start; returns the port (useful with port 0)."""
        s = self.settings
        try:
            credentials = server_credentials(s.tls)
        except OSError as exc:
            raise ConfigError(f"thunder.tls: cannot read {exc.filename}: {exc.strerror}") from exc
        server = grpc.aio.server(compression=COMPRESSION[s.compression], interceptors=[
            BearerAuthInterceptor(self.keys, "thunder"), DecodeGuardInterceptor()])
        add_service(self.service, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        # Server reflection: a client in any language (grpcurl, Postman, grpc-js) can
        # list and call the services without a copy of thunder.proto.
        reflection.enable_server_reflection(REFLECTED_SERVICES, server)
        address = f"{s.host}:{s.port}"
        self.port = (server.add_secure_port(address, credentials) if credentials
                     else server.add_insecure_port(address))
        if not self.port:
            raise OSError(f"thunder: cannot bind {s.host}:{s.port}")
        await server.start()
        self._server = server
        if self._ready is None:
            await self._set_serving()
        else:
            await self._set_serving(self._ready.is_set())
            self._watch = asyncio.create_task(self._serve_when_ready(self._ready))
        log.info("thunder serving on %s:%d", s.host, self.port)
        return self.port

    async def _serve_when_ready(self, ready: asyncio.Event) -> None:
        """SERVING when ready; NOT_SERVING again when a `Readiness` is cleared."""
        while True:
            await ready.wait()
            await self._set_serving()
            if not isinstance(ready, Readiness):
                return
            await ready.wait_cleared()
            await self._set_serving(False)

    async def _set_serving(self, serving: bool = True) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def stop(self, grace_s: float = 2.0) -> None:
        """Report NOT_SERVING, let in-flight calls finish within `grace_s`, stop."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._server is not None:
            await self.health.enter_graceful_shutdown()
            await self._server.stop(grace_s)
            self._server = None
