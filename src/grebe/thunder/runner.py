"""Run thunder from the configuration: the ingest loop plus the gRPC service, or a
one-shot replay of the stream into a store (for tools such as `grebe feed`)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time

from prometheus_client import start_http_server

from grebe import constants as C
from grebe.brokers.factory import build_topic_source
from grebe.config import GrebeConfig
from grebe.core.source import Source
from grebe.security.keys import KeyStore
from grebe.security.server import require_keys_beyond_loopback
from grebe.thunder.graph import ViewerFileGraph
from grebe.thunder.ingest import ThunderIngest
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore

log = logging.getLogger(__name__)


def thunder_source(config: GrebeConfig, settings: ThunderSettings, group: str) -> Source:
    """Thunder's reader of `thunder.topic`, on the broker `grebe thunder publish` and
    `grebe ingest` write that topic to (the broker of the stream reading it)."""
    return build_topic_source(config, settings.topic, name=C.THUNDER_SOURCE_NAME, group=group)


async def replay_store(config: GrebeConfig, timeout_s: float = 300.0) -> ThunderStore:
    """A store filled from the stream's retained history, without consuming it."""
    settings = config.thunder
    store = ThunderStore(settings)
    ingest = ThunderIngest(
        thunder_source(config, settings, f"{settings.group}-replay"), store, settings,
        commit=False,
    )
    await ingest.start()
    try:
        await ingest.wait_ready(timeout_s)
    finally:
        await ingest.stop()
    return store


async def serve(config: GrebeConfig, stop: asyncio.Event | None = None) -> None:
    """Ingest and serve until `stop` is set (or SIGINT/SIGTERM)."""
    settings = config.thunder
    keys = KeyStore.from_config(config.auth)
    require_keys_beyond_loopback(settings.host, keys, "thunder.host")
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    metrics = ThunderMetrics()
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port, addr=settings.host, registry=metrics.registry)
    store = ThunderStore(settings)
    group = settings.group
    if settings.replay_on_start:
        group = f"{group}-{os.getpid()}-{int(time.time())}"
    ingest = ThunderIngest(thunder_source(config, settings, group), store, settings, metrics)
    graph = ViewerFileGraph(settings.following_file) if settings.following_file else None
    server = ThunderServer(store, settings, metrics, ready=ingest.ready, keys=keys,
                           graph=graph)
    await ingest.start()
    await server.start()
    caught_up = asyncio.create_task(ingest.ready.wait())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({caught_up, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if caught_up.done():
        # The loaded store is long-lived: keep the GC from re-scanning it on every
        # full collection (fewer latency spikes while serving).
        gc.collect()
        gc.freeze()
    await stopping
    caught_up.cancel()
    log.info("thunder stopping")
    await server.stop()
    await ingest.stop()
