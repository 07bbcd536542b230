"""The one typed configuration: a YAML file, overridden by GREBE_* environment variables.

`GREBE_DISPATCHER__MAX_IN_FLIGHT=64` overrides `dispatcher.max_in_flight` (and
`GREBE_INFERENCE__EMBEDDER__MAX_BATCH_SIZE=8` a nested key). Streams and their
eligibilities are data here, not classes. Every section has working defaults for one
laptop with no servers (local broker, sqlite store, local models).

The runtime's own sections are defined here; each package with knobs of its own keeps
its section model beside its code (`inference/settings.py`, `media/config.py`,
`thunder/settings.py`, `feed/settings.py`) and this module assembles them, so the whole
file is validated once, in `load_config`: a bad key anywhere is a ConfigError naming
its dotted field before anything starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from grebe import constants as C
from grebe.brokers import registry as broker_registry
from grebe.brokers.kafka_backend import KafkaConfig
from grebe.brokers.local_backend import LocalBrokerConfig
from grebe.brokers.rabbitmq_backend import RabbitMQConfig
from grebe.errors import ConfigError
from grebe.feed.settings import FeedSettings
from grebe.flows.section import checked_plans
from grebe.inference.settings import InferenceConfig, expand_shorthands
from grebe.media.config import MediaConfig
from grebe.security.keys import AuthConfig
from grebe.security.ratelimit import valid_rate
from grebe.security.settings import HttpGuardSettings
from grebe.selection import Selection
from grebe.settings_base import Section, validation_problems
from grebe.thunder.settings import ThunderSettings

__all__ = ["GrebeConfig", "Section", "load_config", "validation_problems"]


def known_broker(name: str) -> str:
    """A broker name checked against the registry (`grebe.brokers.registry`), so a new
    broker module is accepted with no edit here and a typo lists the known ones."""
    if name not in broker_registry.backends():
        raise ValueError(f"unknown broker {name!r} (known: {', '.join(broker_registry.names())})")
    return name


def output_broker(name: str) -> str:
    """`none`, or a known broker that can carry output (not a queue broker)."""
    if name == C.NO_OUTPUT_BROKER:
        return name
    if not broker_registry.backend(known_broker(name)).carries_output:
        carriers = [n for n, b in broker_registry.backends().items() if b.carries_output]
        raise ValueError(f"broker {name!r} cannot carry output (use one of: "
                         f"{', '.join([*carriers, C.NO_OUTPUT_BROKER])})")
    return name


class StreamConfig(Section):
    """One input stream: where it comes from and which plans its posts are eligible for."""

    name: str
    broker: Annotated[str, AfterValidator(known_broker)] = C.DEFAULT_BROKER
    topic: str = C.DEFAULT_INPUT_TOPIC
    eligibilities: list[str] = Field(default_factory=list)
    weight: float = Field(default=1.0, gt=0)
    max_qps: float | None = Field(default=None, gt=0)
    deadline_s: float | None = Field(default=None, gt=0)  # per-payload processing deadline
    group: str = C.DEFAULT_CONSUMER_GROUP
    # Which posts of the topic the stream's plans see, and the mode they run in
    # (grebe.selection): Grox's generators as data.
    selection: Selection = Selection()


class DispatcherConfig(Section):
    max_in_flight: int = Field(default=C.DEFAULT_MAX_IN_FLIGHT, ge=1)
    max_attempts: int = Field(default=C.DEFAULT_MAX_ATTEMPTS, ge=1)
    backoff_base_s: float = Field(default=C.DEFAULT_BACKOFF_BASE_S, ge=0)
    backoff_max_s: float = Field(default=C.DEFAULT_BACKOFF_MAX_S, ge=0)
    poll_batch: int = Field(default=C.DEFAULT_POLL_BATCH, ge=1)
    poll_timeout_s: float = Field(default=C.DEFAULT_POLL_TIMEOUT_S, gt=0)
    dead_letter_topic: str = C.DEFAULT_DEAD_LETTER_TOPIC


class EngineConfig(Section):
    # "auto": two engines where two cores are usable, else one; 0: in the dispatcher
    processes: Annotated[int, Field(ge=0)] | Literal["auto"] = C.DEFAULT_ENGINE_PROCESSES
    concurrency: int = Field(default=C.DEFAULT_ENGINE_CONCURRENCY, ge=1)
    task_timeout_s: float = Field(default=C.DEFAULT_TASK_TIMEOUT_S, gt=0)
    drain_window_s: float = Field(default=C.DEFAULT_DRAIN_WINDOW_S, ge=0)
    # An engine start is given up after start_stall_s without it using any CPU, or after
    # start_timeout_s in all: a busy machine makes starts slow, not stuck.
    start_stall_s: float = Field(default=C.ENGINE_START_STALL_S, gt=0)
    start_timeout_s: float = Field(default=C.DEFAULT_ENGINE_START_TIMEOUT_S, gt=0)

    @property
    def process_count(self) -> int:
        """How many engine processes run: `processes`, with "auto" resolved on this
        machine. Two at most for "auto": one engine keeps about one core busy, and two
        are what was measured (docs/benchmarks.md, "Two engines by default")."""
        if self.processes != "auto":
            return self.processes
        return min(C.AUTO_ENGINE_PROCESSES_MAX, usable_cores())


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, as a container's cpuset sets)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


class RedisConfig(Section):
    url: str = "redis://127.0.0.1:6379/0"
    # The deployment's key namespace: every key grebe writes (QPS budgets, cache, store)
    # starts with `<namespace>:`, so two deployments on one Redis share nothing.
    namespace: str = Field(default=C.DEFAULT_REDIS_NAMESPACE, pattern=r"^[A-Za-z0-9_.-]+$")


class StoreConfig(Section):
    backend: Literal["sqlite", "postgres", "redis", "memory"] = "sqlite"
    sqlite_path: Path | None = None  # default: <data_dir>/annotations.db
    postgres_dsn: str = "postgresql://grebe:grebe@127.0.0.1:5432/grebe"
    postgres_table: str = Field(default=C.DEFAULT_POSTGRES_TABLE, pattern=r"^[a-z_][a-z0-9_]*$")
    # The Redis store's keys: <prefix>:ann:<post id>; default: redis.namespace.
    redis_prefix: str | None = None


class HydrationConfig(Section):
    """Hydration by id (docs/hydration.md): before plans run, fill what a message lacks
    (the post of an id-only message, its author, parent, root, the author's recent posts)
    from a post table that every stream fills as posts pass, or from an HTTP lookup."""

    enabled: bool = True
    backend: Literal["sqlite", "postgres", "http"] = "sqlite"
    sqlite_path: Path | None = None  # default: <data_dir>/posts.db
    postgres_dsn: str = "postgresql://grebe:grebe@127.0.0.1:5432/grebe"
    postgres_table_prefix: str = Field(
        default=C.DEFAULT_POSTGRES_POST_TABLE_PREFIX, pattern=r"^[a-z_][a-z0-9_]*$")
    http_url: str | None = None  # backend http: the lookup service (docs/hydration.md)
    http_timeout_s: float = Field(default=C.DEFAULT_HYDRATION_HTTP_TIMEOUT_S, gt=0)
    # Record every post (and user) that passes into the table; the http backend is
    # read-only, so there it must stay off.
    record: bool = True
    recent_posts: int = Field(default=C.DEFAULT_HYDRATION_RECENT_POSTS, ge=0)  # 0: none
    cache_ttl_s: float = Field(default=C.DEFAULT_HYDRATION_CACHE_TTL_S, gt=0)
    cache_maxsize: int = Field(default=C.DEFAULT_HYDRATION_CACHE_MAXSIZE, ge=1)
    user_miss_ttl_s: float = Field(default=C.DEFAULT_HYDRATION_MISS_TTL_S, ge=0)  # 0: no

    @model_validator(mode="after")
    def _http_needs_url(self) -> HydrationConfig:
        if self.backend == "http" and not self.http_url:
            raise ValueError("hydration.backend http needs hydration.http_url")
        if self.backend == "http" and self.record and "record" in self.model_fields_set:
            raise ValueError("hydration.record: the http backend is read-only")
        return self


class OutputConfig(Section):
    """Where results are published besides the annotation store."""

    broker: Annotated[str, AfterValidator(output_broker)] = C.DEFAULT_BROKER
    topic: str = C.DEFAULT_OUTPUT_TOPIC


class RateLimitConfig(Section):
    """Where QPS budgets are counted: in process, or in Redis so replicas share them."""

    storage: Literal["memory", "redis"] = "memory"


class MetricsConfig(Section):
    enabled: bool = True
    host: str = "127.0.0.1"  # loopback by default; set 0.0.0.0 to let a scraper in
    port: int = Field(default=C.DEFAULT_METRICS_PORT, ge=0, le=65535)  # 0: pick a free port


class TracingConfig(Section):
    """OpenTelemetry traces: a span per post and per plan task, sent over OTLP/HTTP to
    `endpoint` (an OpenTelemetry Collector, Jaeger, Tempo...). Off by default: one switch."""

    enabled: bool = False
    endpoint: str = C.DEFAULT_OTLP_ENDPOINT
    service_name: str = "grebe"
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)  # share of posts traced


class ApiConfig(Section):
    """`grebe serve`: the HTTP API and status page, beside the pipeline in one process."""

    host: str = "127.0.0.1"  # loopback by default; set 0.0.0.0 to serve other machines
    port: int = Field(default=C.DEFAULT_API_PORT, ge=0, le=65535)
    stream: str | None = None  # POST /v1/posts goes to this stream's topic (default: first)
    max_batch: int = Field(default=C.DEFAULT_API_MAX_BATCH, ge=1)  # posts per request
    max_body_bytes: int = Field(default=C.DEFAULT_API_MAX_BODY_BYTES, ge=1024)
    analyze_concurrency: int = Field(default=C.DEFAULT_API_ANALYZE_CONCURRENCY, ge=1)
    status_refresh_s: int = Field(default=C.DEFAULT_API_STATUS_REFRESH_S, ge=1)
    max_json_depth: int = Field(default=C.DEFAULT_API_MAX_JSON_DEPTH, ge=2)  # else 400
    # Per key; `limits` syntax, e.g. 10/second.
    analyze_rate: Annotated[str, AfterValidator(valid_rate)] = C.DEFAULT_API_ANALYZE_RATE
    http: HttpGuardSettings = HttpGuardSettings()  # Host/Origin allowlists, timeouts


class GrebeConfig(BaseSettings):
    """The whole configuration, every section typed. `plans` alone stays free-form
    here: the flows validate it against the plans they register."""

    model_config = SettingsConfigDict(
        env_prefix=C.ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    data_dir: Path = C.DEFAULT_DATA_DIR
    streams: list[StreamConfig] = Field(
        default_factory=lambda: [
            StreamConfig(name="posts", eligibilities=["noop"]),
        ]
    )
    dispatcher: DispatcherConfig = DispatcherConfig()
    engine: EngineConfig = EngineConfig()
    local: LocalBrokerConfig = LocalBrokerConfig()
    kafka: KafkaConfig = KafkaConfig()
    rabbitmq: RabbitMQConfig = RabbitMQConfig()
    redis: RedisConfig = RedisConfig()
    store: StoreConfig = StoreConfig()
    output: OutputConfig = OutputConfig()
    hydration: HydrationConfig = HydrationConfig()
    rate_limits: RateLimitConfig = RateLimitConfig()
    metrics: MetricsConfig = MetricsConfig()
    tracing: TracingConfig = TracingConfig()
    api: ApiConfig = ApiConfig()
    auth: AuthConfig = AuthConfig()  # API keys for serve, feed-serve, thunder
    # Sections of brokers without a top-level one (a new broker module's settings),
    # by broker name, each validated by that broker's settings model.
    brokers: Annotated[dict[str, Any], AfterValidator(broker_registry.validate_sections)] = (
        Field(default_factory=dict))
    plans: Annotated[dict[str, Any], AfterValidator(checked_plans)] = Field(default_factory=dict)
    # Each package's own section model (default_factory: a fresh object per config, so
    # a command adjusting its copy, as `grebe media scan` does, changes no other).
    inference: InferenceConfig = Field(default_factory=InferenceConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    thunder: ThunderSettings = Field(default_factory=ThunderSettings)
    feed: FeedSettings = Field(default_factory=FeedSettings)

    @model_validator(mode="after")
    def _unique_stream_names(self) -> GrebeConfig:
        names = [s.name for s in self.streams]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"stream names must be unique; repeated: {', '.join(duplicates)}")
        return self

    @model_validator(mode="after")
    def _broker_sections_once(self) -> GrebeConfig:
        # A broker with a top-level section (`kafka:`) would silently ignore `brokers.kafka`.
        if twice := sorted(set(self.brokers) & set(type(self).model_fields)):
            raise ValueError(f"brokers: {', '.join(twice)} take their top-level section "
                             f"({', '.join(n + ':' for n in twice)}), not one under brokers:")
        return self

    @property
    def log_path(self) -> Path:
        return self.local.path or self.data_dir / C.DEFAULT_LOG_DB

    @property
    def post_table_path(self) -> Path:
        return self.hydration.sqlite_path or self.data_dir / C.DEFAULT_POST_TABLE_DB

    @property
    def sqlite_path(self) -> Path:
        return self.store.sqlite_path or self.data_dir / C.DEFAULT_STORE_DB

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the file (the file arrives as init kwargs).
        return (env_settings, init_settings)


def load_config(path: Path | str | None = None, **overrides: Any) -> GrebeConfig:
    """Load the YAML file at `path` (or $GREBE_CONFIG), apply environment overrides.

    Raises ConfigError naming every invalid field."""
    import os

    raw: dict[str, Any] = {}
    path = path or os.environ.get(C.CONFIG_ENV_VAR)
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        raw.update(loaded)
    raw.update(overrides)
    # Sections given as objects (`load_config(inference=base.inference)`, as grebe eval
    # does) become the mappings they were made from: the environment's nested keys merge
    # into a mapping, but would replace an object whole, dropping what it held.
    raw = {key: value.model_dump(exclude_unset=True) if isinstance(value, BaseModel)
           else value for key, value in raw.items()}
    if isinstance(raw.get("inference"), dict):  # before the environment merges into it
        raw["inference"] = expand_shorthands(raw["inference"])
    try:
        return GrebeConfig(**raw)
    except ValidationError as exc:
        problems = validation_problems(exc)
        raise ConfigError(f"invalid configuration ({path or 'defaults'}): {problems}") from exc
