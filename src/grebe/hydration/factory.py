"""Build the hydration step from the `hydration:` config section, and put it in front
of a bundle's plan master (called by `grebe.app.bundles.build_bundle`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grebe.hydration.base import Loader, PostTable
from grebe.hydration.cache import CachedLoader
from grebe.hydration.hydrator import HydratingMaster, Hydrator

if TYPE_CHECKING:
    from grebe.config import GrebeConfig
    from grebe.core.bundle import PlanBundle


def build_source(config: GrebeConfig) -> tuple[Loader, PostTable | None]:
    """The configured loader, and the table it records into (None: read-only)."""
    settings = config.hydration
    if settings.backend == "http":
        from grebe.hydration.http import HttpLoader

        assert settings.http_url is not None  # checked by HydrationConfig
        return HttpLoader(settings.http_url, timeout_s=settings.http_timeout_s), None
    table: PostTable
    if settings.backend == "postgres":
        from grebe.hydration.postgres import PostgresPostTable

        table = PostgresPostTable(settings.postgres_dsn, settings.postgres_table_prefix)
    else:
        from grebe.hydration.sqlite import SqlitePostTable

        table = SqlitePostTable(config.post_table_path)
    return table, table if settings.record else None


def build_hydrator(config: GrebeConfig) -> tuple[Hydrator, CachedLoader]:
    settings = config.hydration
    source, table = build_source(config)
    cached = CachedLoader(source, ttl_s=settings.cache_ttl_s, maxsize=settings.cache_maxsize,
                          miss_ttl_s=settings.user_miss_ttl_s)
    return Hydrator(cached, table=table, recent_posts=settings.recent_posts), cached


def attach(bundle: PlanBundle, config: GrebeConfig) -> PlanBundle:
    """Hydrate every payload before the bundle's master runs it (in place). With
    hydration off, only the user-only guard is put in front."""
    hydrator: Hydrator | None = None
    if config.hydration.enabled:
        hydrator, cached = build_hydrator(config)
        bundle.components = [*bundle.components, cached]
    bundle.wrap_master(lambda inner: HydratingMaster(inner, hydrator))
    return bundle
