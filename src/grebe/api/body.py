"""Reading a request body safely: JSON only, bounded in size, time and nesting.

Each refusal is a `BodyError` carrying the status to answer, so handlers never turn a
hostile body into a 500 (and a traceback in the log):

    415  the body is not declared `application/json`: a browser may send text/plain or a
         form cross-site without a CORS preflight, so only JSON bodies are taken
    413  more than `api.max_body_bytes` (refused as soon as it passes, never buffered)
    408  the body did not arrive within `api.http.body_timeout_s`
    400  not well-formed JSON, or nested deeper than `api.max_json_depth`
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from starlette.requests import Request

JSON_TYPE = "application/json"


class BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def require_json(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != JSON_TYPE and not (
            media_type.startswith("application/") and media_type.endswith("+json")):
        raise BodyError(415, f"send the body as {JSON_TYPE} (got {media_type or 'no type'!r})")


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refused as soon as it passes `limit` bytes or takes over `timeout_s`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"body over {limit} bytes (api.max_body_bytes)")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyError(413, f"body over {limit} bytes (api.max_body_bytes)")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyError(408, f"the body did not arrive within {timeout_s:g}s "
                             "(api.http.body_timeout_s)") from None
    return b"".join(chunks)


def check_json(body: bytes, max_depth: int) -> None:
    """400 unless `body` is well-formed JSON nested at most `max_depth` deep. Checked
    before the typed decode, so no decoder ever recurses into a hostile body. An empty
    body is left to the handler, which says what it expected."""
    if not body.strip():
        return
    try:
        value = msgspec.json.decode(body)
    except RecursionError:
        raise BodyError(400, f"JSON nested deeper than {max_depth} levels "
                             "(api.max_json_depth)") from None
    except msgspec.DecodeError as exc:
        raise BodyError(400, f"malformed JSON: {exc}") from None
    if json_depth(value) > max_depth:
        raise BodyError(400, f"JSON nested deeper than {max_depth} levels (api.max_json_depth)")


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in a decoded JSON value (iteratively)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest
