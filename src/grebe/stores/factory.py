"""Build the configured annotation store (not started: the caller owns its lifecycle)."""

from __future__ import annotations

from grebe.config import GrebeConfig
from grebe.errors import ConfigError
from grebe.stores.base import AnnotationStore, MemoryStore


def build_store(config: GrebeConfig) -> AnnotationStore:
    backend = config.store.backend
    if backend == "sqlite":
        from grebe.stores.sqlite import SqliteStore

        return SqliteStore(config.sqlite_path, synchronous=config.local.synchronous)
    if backend == "memory":
        return MemoryStore()
    if backend == "postgres":
        from grebe.stores.postgres import PostgresStore

        return PostgresStore(config.store.postgres_dsn, table=config.store.postgres_table)
    if backend == "redis":
        from grebe.stores.redis import RedisStore

        prefix = config.store.redis_prefix or config.redis.namespace
        return RedisStore(config.redis.url, prefix=prefix)
    raise ConfigError(
        f"store.backend {backend!r} is not available in this build "
        "(supported: sqlite, memory, postgres, redis)"
    )
