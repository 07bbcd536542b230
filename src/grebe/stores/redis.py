"""Redis: an annotation store, one hash per post.

Annotation store layout, per post `<prefix>:ann:<post id>` (a hash):

    a:<producer>:<version>   the annotation, msgspec JSON
    c:<producer>:<version>   its first created_at (HSETNX: a rewrite never moves it)
    f                        the post's content fingerprint (absent in hashes written
                             before fingerprints: those accept the next one)

An upsert of many annotations is one Lua script, atomic like the MULTI/EXEC it
replaced, so a batch is written whole or not at all and costs one round trip; it
refuses the whole batch with PostIdReusedError when a post id is held under another
fingerprint (a different post under a reused id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from grebe import constants as C
from grebe.errors import StoreError, StoreUnavailableError
from grebe.stores.base import reused_id_error
from grebe.types import Annotation

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Annotation)
_BODY, _CREATED = b"a:", b"c:"
# KEYS: one hash per annotation; ARGV: five per annotation (fingerprint, body field,
# body, created field, created). Returns nil, or {index, stored fingerprint} of the
# first annotation whose post id is held under another fingerprint (nothing written).
_UPSERT_LUA = """
local seen = {}
for i = 1, #KEYS do
  local fp = ARGV[(i - 1) * 5 + 1]
  if fp ~= '' then
    local known = seen[KEYS[i]] or redis.call('HGET', KEYS[i], 'f')
    if known and known ~= '' and known ~= fp then return {i - 1, known} end
    seen[KEYS[i]] = fp
  end
end
for i = 1, #KEYS do
  local b = (i - 1) * 5
  redis.call('HSET', KEYS[i], ARGV[b + 2], ARGV[b + 3])
  redis.call('HSETNX', KEYS[i], ARGV[b + 4], ARGV[b + 5])
  if ARGV[b + 1] ~= '' then redis.call('HSET', KEYS[i], 'f', ARGV[b + 1]) end
end
return nil
"""


class RedisStore:
    """AnnotationStore on Redis hashes (see module doc for the layout)."""

    def __init__(self, url: str, *, prefix: str = C.DEFAULT_REDIS_PREFIX) -> None:
        self.url = url
        self.prefix = prefix
        self._redis: aioredis.Redis | None = None

    async def start(self) -> None:
        try:
            client = aioredis.Redis.from_url(self.url)
        except ValueError as exc:
            raise StoreError(f"invalid Redis URL {self.url!r}: {exc}") from exc
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            await client.aclose()
            raise StoreError(f"cannot reach Redis at {self.url}: {exc}") from exc
        self._redis = client

    async def stop(self) -> None:
        if self._redis is not None:
            client, self._redis = self._redis, None
            await client.aclose()

    def _started(self) -> aioredis.Redis:
        if self._redis is None:
            raise StoreError(f"{type(self).__name__} used before start()")
        return self._redis

    def key(self, post_id: str) -> str:
        return f"{self.prefix}:ann:{post_id}"

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        if not annotations:
            return
        keys: list[str] = []
        args: list[bytes | str] = []
        for a in annotations:
            field = f"{a.producer}:{a.version}".encode()
            keys.append(self.key(a.post_id))
            args += [a.content_fingerprint, _BODY + field, _encoder.encode(a),
                     _CREATED + field, repr(a.created_at)]
        client = self._started()
        try:
            refused = await client.eval(_UPSERT_LUA, len(keys), *keys, *args)  # type: ignore[misc]
        except (RedisError, OSError) as exc:
            # Connection, OOM or read-only replica: Redis, not the post, is at fault.
            raise StoreUnavailableError(
                f"Redis store: upsert of {len(annotations)} failed: {exc}"
            ) from exc
        if refused:
            index, stored = int(refused[0]), refused[1]
            raise reused_id_error(
                annotations[index], stored.decode() if isinstance(stored, bytes) else stored
            )

    async def get(self, post_id: str) -> list[Annotation]:
        try:
            fields = cast(dict[bytes, bytes], await self._started().hgetall(self.key(post_id)))
        except (RedisError, OSError) as exc:
            raise StoreError(f"Redis store: {exc}") from exc
        annotations = []
        for name, body in fields.items():
            if not name.startswith(_BODY):
                continue
            try:
                annotation = _decoder.decode(body)
            except msgspec.DecodeError as exc:
                raise StoreError(f"Redis store: bad annotation in {post_id}/{name!r}") from exc
            created = fields.get(_CREATED + name[len(_BODY):])
            if created is not None:
                annotation.created_at = float(created)
            annotations.append(annotation)
        return sorted(annotations, key=lambda a: (a.producer, a.version))
