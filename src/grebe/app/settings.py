"""GrebeConfig sections -> the small settings dataclasses core components take.

The config models stay pydantic (validated once at load); core gets frozen dataclasses
with only what it reads, so it never imports grebe.config."""

from __future__ import annotations

from grebe.config import DispatcherConfig, EngineConfig, StreamConfig
from grebe.core.settings import DispatcherSettings, EngineSettings, StreamSettings


def stream_settings(stream: StreamConfig) -> StreamSettings:
    return StreamSettings(
        name=stream.name, eligibilities=tuple(stream.eligibilities), weight=stream.weight,
        max_qps=stream.max_qps, deadline_s=stream.deadline_s,
        mode=str(stream.selection.mode),
    )


def dispatcher_settings(dispatcher: DispatcherConfig) -> DispatcherSettings:
    return DispatcherSettings(
        max_in_flight=dispatcher.max_in_flight, max_attempts=dispatcher.max_attempts,
        backoff_base_s=dispatcher.backoff_base_s, backoff_max_s=dispatcher.backoff_max_s,
        poll_batch=dispatcher.poll_batch, poll_timeout_s=dispatcher.poll_timeout_s,
    )


def engine_settings(engine: EngineConfig) -> EngineSettings:
    return EngineSettings(processes=engine.process_count, concurrency=engine.concurrency,
                          start_stall_s=engine.start_stall_s,
                          start_timeout_s=engine.start_timeout_s)
