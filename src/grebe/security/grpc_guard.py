"""gRPC hygiene for thunder: who is calling, what they sent, and the channel itself.

`BearerAuthInterceptor` checks `authorization: Bearer <key>` metadata against the same
key store as the HTTP surfaces (UNAUTHENTICATED when missing or wrong, PERMISSION_DENIED
without the `thunder` scope). The standard health service stays open: load balancers and
Kubernetes probe it without credentials, and it tells only SERVING or not.

`DecodeGuardInterceptor` makes the service's handlers receive raw bytes and decodes them
itself, so a corrupt protobuf is INVALID_ARGUMENT naming the problem; grpcio's own
deserializer failing ends the call as UNKNOWN, which reads as a server bug.

`server_credentials` builds TLS (optionally mutual) from `TlsSettings` files.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from grebe.security.keys import KeyStore, Scope
from grebe.security.settings import TlsSettings

HEALTH_PREFIX = "/grpc.health.v1.Health/"
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


def _replace(handler: grpc.RpcMethodHandler, unary: Any, streaming: Any,
             request_deserializer: Any) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler`, with other behaviours."""
    if handler.request_streaming or handler.response_streaming:
        if handler.request_streaming:  # thunder has none; refuse rather than guess
            raise TypeError("client-streaming methods are not guarded")
        return grpc.unary_stream_rpc_method_handler(
            streaming, request_deserializer=request_deserializer,
            response_serializer=handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=request_deserializer,
        response_serializer=handler.response_serializer)


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, keys: KeyStore, scope: Scope,
                 public_prefixes: Iterable[str] = (HEALTH_PREFIX,)) -> None:
        self.keys = keys
        self.scope = scope
        self.public_prefixes = tuple(public_prefixes)

    async def intercept_service(self, continuation: Continuation,
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None or not self.keys or details.method.startswith(self.public_prefixes):
            return handler
        metadata = dict(details.invocation_metadata or ())
        authorization = metadata.get("authorization")
        principal = self.keys.verify_header(
            authorization if isinstance(authorization, str) else None)
        if principal is None:
            code, why = (grpc.StatusCode.UNAUTHENTICATED,
                         "a valid API key is required (metadata authorization: Bearer <key>)")
        elif not principal.may(self.scope):
            code, why = (grpc.StatusCode.PERMISSION_DENIED,
                         f"key {principal.key_id!r} lacks the {self.scope!r} scope")
        else:
            return handler

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(code, why)

        async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(code, why)
            yield  # pragma: no cover - abort raises

        return _replace(handler, refuse, refuse_stream, None)


class DecodeGuardInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation: Continuation,
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None or (
                handler.request_streaming):
            return handler
        decode = handler.request_deserializer
        method = details.method

        async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                return decode(raw)
            except (DecodeError, ValueError, TypeError) as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"{method}: the request is not a valid protobuf ({exc})")

        if handler.response_streaming:
            stream = handler.unary_stream

            async def streaming(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                async for item in stream(await parsed(raw, context), context):
                    yield item

            return _replace(handler, None, streaming, None)
        unary = handler.unary_unary

        async def behaviour(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await unary(await parsed(raw, context), context)

        return _replace(handler, behaviour, None, None)


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials | None:
    """TLS credentials from the configured files; None when TLS is off. With a client
    CA, clients must present a certificate it signed (mutual TLS)."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    client_ca = tls.client_ca_file.read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
        root_certificates=client_ca, require_client_auth=client_ca is not None)
