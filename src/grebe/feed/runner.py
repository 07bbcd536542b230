"""Build the home feed from the configuration, for the CLI and the HTTP server.

The thunder store is replayed from the configured stream (without consuming it); the
annotation store and the text embedder are the configured ones; in-network posts come
from that store, or from a thunder service when `feed.thunder_target` is set."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from grebe.config import GrebeConfig
from grebe.errors import ConfigError
from grebe.feed.home import HomeFeed, build_home_pipeline
from grebe.feed.viewers import MemoryViewerDirectory
from grebe.stores.factory import build_store
from grebe.thunder.client import GrpcThunderClient
from grebe.thunder.runner import replay_store


def thunder_key(env: str | None) -> str | None:
    """The key for thunder from the variable `feed.thunder_key_env` names (keys stay out
    of config files)."""
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise ConfigError(f"feed.thunder_key_env: environment variable {env} is not set")
    return key


@contextlib.asynccontextmanager
async def feed_from_config(
    config: GrebeConfig, viewers_file: Path | None = None
) -> AsyncIterator[HomeFeed]:
    from grebe.inference.minilm import MiniLMEmbedder

    settings = config.feed
    viewers = (MemoryViewerDirectory.from_file(viewers_file) if viewers_file
               else MemoryViewerDirectory())
    store = build_store(config)
    embedder = MiniLMEmbedder(model_dir=config.inference.minilm.model_dir)
    await store.start()
    try:
        await embedder.start()
        thunder_store = await replay_store(config)
        thunder = GrpcThunderClient(
            settings.thunder_target, tls_ca_file=settings.thunder_tls_ca_file,
            key=thunder_key(settings.thunder_key_env),
        ) if settings.thunder_target else None
        feed = build_home_pipeline(config, store, thunder_store, embedder, viewers=viewers,
                                   thunder=thunder)
        await feed.index_posts(list(thunder_store.by_id))
        await feed.start()
        try:
            yield feed
        finally:
            await feed.aclose()
    finally:
        await embedder.stop()
        await store.stop()


async def serve_http(config: GrebeConfig, viewers_file: Path | None = None) -> None:
    """Serve GET /home/{user_id} until SIGINT/SIGTERM (uvicorn handles the signals)."""
    import uvicorn

    from grebe.core.engine_process import tune_gc
    from grebe.feed.blas import use_one_thread
    from grebe.feed.http import build_feed_app
    from grebe.security.keys import KeyStore
    from grebe.security.server import require_keys_beyond_loopback, uvicorn_config

    settings = config.feed
    keys = KeyStore.from_config(config.auth)
    require_keys_beyond_loopback(settings.http_host, keys, "feed.http_host")
    async with feed_from_config(config, viewers_file) as feed:
        # What is loaded now lives as long as the server; a request allocates thousands
        # of short-lived objects, which the default thresholds collect in many passes
        # (~1.3 ms of a ~15 ms home request, docs/benchmarks.md).
        tune_gc()
        use_one_thread()  # the ranker's small products: no BLAS threads (grebe.feed.blas)
        server = uvicorn.Server(uvicorn_config(
            build_feed_app(feed, keys), settings.http, host=settings.http_host,
            port=settings.http_port, log_level="info",
        ))
        await server.serve()
