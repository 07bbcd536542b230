"""Two ways to ask thunder for in-network posts, behind one small protocol.

The feed uses `InNetworkPostsClient` and does not care whether the store lives in its
own process (`LocalThunderClient`) or behind gRPC (`GrpcThunderClient`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import grpc

from grebe.errors import ServingError
from grebe.thunder.proto import thunder_pb2, thunder_pb2_grpc
from grebe.thunder.service import COMPRESSION, run_scan
from grebe.thunder.store import InNetworkQuery, InNetworkResult, LightPost, ThunderStore


class ThunderError(ServingError):
    """A call to a thunder service failed (unavailable, overloaded, invalid)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


@runtime_checkable
class InNetworkPostsClient(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def get_in_network_posts(self, query: InNetworkQuery) -> InNetworkResult: ...


class LocalThunderClient:
    """The store in this process: no serialisation, same answers as the service."""

    def __init__(self, store: ThunderStore) -> None:
        self.store = store

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def get_in_network_posts(self, query: InNetworkQuery) -> InNetworkResult:
        if query.budget_s is None:
            query.budget_s = self.store.settings.request_budget_ms / 1000.0
        return await run_scan(self.store, query)


def from_proto(post: thunder_pb2.LightPost) -> LightPost:
    """The record a `LightPost` message carries. An unset optional id reads as "" and
    becomes None, without asking `HasField` for each of the eight optional fields
    (that doubled the client's cost of an 800-post answer, ~1.5 of 3 ms: see
    docs/benchmarks.md). So an id sent empty reads as absent too: ingest does not
    refuse empty ids, but an empty id names no post."""
    return LightPost(
        post_id=post.post_id,
        author_id=post.author_id,
        created_at=post.created_at,
        in_reply_to_post_id=post.in_reply_to_post_id or None,
        in_reply_to_author_id=post.in_reply_to_author_id or None,
        conversation_id=post.conversation_id or None,
        source_post_id=post.source_post_id or None,
        source_author_id=post.source_author_id or None,
        quote_of_post_id=post.quote_of_post_id or None,
        has_video=post.has_video,
        conversation_author_id=post.conversation_author_id or None,
        video_eligible=post.video_eligible,
    )


class GrpcThunderClient:
    """A grpc.aio client. The channel is opened in start(), not at construction.

    `key` is sent as `authorization: Bearer <key>` on every call; `tls_ca_file` turns on
    TLS, trusting that CA for the server's certificate; `tls_cert_file`/`tls_key_file`
    are this client's own certificate, for servers that require mutual TLS."""

    def __init__(
        self, target: str, *, timeout_s: float = 0.5, compression: str = "gzip",
        key: str | None = None, tls_ca_file: Path | None = None,
        tls_cert_file: Path | None = None, tls_key_file: Path | None = None,
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.compression = COMPRESSION[compression]
        self._metadata = (("authorization", f"Bearer {key}"),) if key else None
        self._tls = (tls_ca_file, tls_cert_file, tls_key_file)
        self._channel: grpc.aio.Channel | None = None
        self._stub: thunder_pb2_grpc.InNetworkPostsStub | None = None

    async def start(self) -> None:
        ca, cert, key = self._tls
        if ca is None:
            self._channel = grpc.aio.insecure_channel(self.target, compression=self.compression)
        else:
            credentials = grpc.ssl_channel_credentials(
                ca.read_bytes(), key.read_bytes() if key else None,
                cert.read_bytes() if cert else None)
            self._channel = grpc.aio.secure_channel(self.target, credentials,
                                                    compression=self.compression)
        self._stub = thunder_pb2_grpc.InNetworkPostsStub(self._channel)

    async def stop(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None

    async def get_in_network_posts(self, query: InNetworkQuery) -> InNetworkResult:
        response = await self.call(thunder_pb2.GetInNetworkPostsRequest(
            user_id=query.user_id,
            following_user_ids=list(query.following_user_ids),
            exclude_post_ids=list(query.exclude_post_ids),
            max_results=query.max_results,
            is_video_request=query.is_video_request,
        ), timeout_s=query.budget_s * 1.5 if query.budget_s else self.timeout_s)
        return InNetworkResult(
            posts=[from_proto(p) for p in response.posts], partial=response.partial,
        )

    async def call(
        self, request: thunder_pb2.GetInNetworkPostsRequest, timeout_s: float | None = None
    ) -> thunder_pb2.GetInNetworkPostsResponse:
        """The raw RPC; raises ThunderError carrying the status code."""
        if self._stub is None:
            raise ThunderError("GrpcThunderClient used before start()")
        try:
            return await self._stub.GetInNetworkPosts(
                request, timeout=timeout_s or self.timeout_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise ThunderError(
                f"thunder {self.target}: {exc.code().name}: {exc.details()}", exc.code()
            ) from exc
