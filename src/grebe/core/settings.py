"""What the runtime components need to know, as plain frozen dataclasses.

core/ reads no configuration file and imports no config model: `grebe.app` builds these
from the validated GrebeConfig (`grebe.app.settings`), tests and benches build them
directly. Defaults are the deployment defaults of grebe.constants, so a test names only
what it changes.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from grebe import constants as C


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """One input stream as the dispatcher sees it: its name, the eligibilities its
    payloads carry, its share of the polls, its QPS budget and its per-payload deadline."""

    name: str
    eligibilities: Collection[str] = field(default_factory=tuple)
    weight: float = 1.0
    max_qps: float | None = None  # None: no budget
    deadline_s: float | None = None  # None: no deadline
    mode: str = C.DEFAULT_STREAM_MODE  # what plans read as payload.mode (grebe.selection)


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    """Delivery: in-flight cap, attempts before a dead letter, retry backoff, polling."""

    max_in_flight: int = C.DEFAULT_MAX_IN_FLIGHT
    max_attempts: int = C.DEFAULT_MAX_ATTEMPTS
    backoff_base_s: float = C.DEFAULT_BACKOFF_BASE_S
    backoff_max_s: float = C.DEFAULT_BACKOFF_MAX_S
    poll_batch: int = C.DEFAULT_POLL_BATCH
    poll_timeout_s: float = C.DEFAULT_POLL_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How many engine processes run plans, how many payloads each runs at once, and
    how long a start may take."""

    processes: int = 1  # a number here: the wiring resolves `engine.processes: auto`
    concurrency: int = C.DEFAULT_ENGINE_CONCURRENCY
    # A start is given up after this long without the engine using CPU, or this long
    # in all (grebe.core.engine_start).
    start_stall_s: float = C.ENGINE_START_STALL_S
    start_timeout_s: float = C.DEFAULT_ENGINE_START_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class BundleRecipe:
    """How an engine process builds the plans it runs, as data it can receive over a
    socket: it imports `builder` ("package.module:function") and calls it with
    `argument` (for grebe.app: the config as JSON), which returns a PlanBundle. Strings
    only, so core needs no config model to pass it on and the engine imports the
    wiring only after it has started."""

    builder: str
    argument: str
