"""Names and defaults in one place (arq-style): no magic strings elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Final

DEFAULT_DATA_DIR = Path("var")
DEFAULT_LOG_DB = "log.db"
DEFAULT_STORE_DB = "annotations.db"

# Brokers (grebe.brokers.registry): the default of streams and output, and the
# `output.broker` value that publishes no output.
DEFAULT_BROKER = "local"
NO_OUTPUT_BROKER = "none"

# Topics of the embedded and Kafka brokers.
DEFAULT_INPUT_TOPIC = "posts"
DEFAULT_OUTPUT_TOPIC = "annotations"
DEFAULT_DEAD_LETTER_TOPIC = "dead-letters"
# How the output topic carries an embedding (grebe.codec.WireVector): int8 with a scale;
# float16 bytes as earlier versions sent them still decode.
WIRE_VECTOR_DTYPE = "i8"
WIRE_VECTOR_F16 = "f16"
# How the SQLite store compresses annotation bodies (grebe.stores.bodies): zstd against
# the packaged dictionary `grebe/data/annotation_body.<id>.zdict` with this id.
BODY_DICT_PREFIX = "annotation_body."
BODY_DICT_ID = 7
BODY_ZSTD_LEVEL = 6
# How the local log stores message values (grebe.brokers.local_sql): zstd against
# `grebe/data/log_value.<id>.zdict` (ids apart from the bodies', so a frame names its kind).
LOG_DICT_PREFIX = "log_value."
LOG_DICT_ID = 106
LOG_ZSTD_LEVEL = 3
# A keyed value may be stored against the previous value of its key stored alone, at most
# this many offsets back in its partition (grebe.brokers.local_refs); keys remembered.
LOG_REF_SPAN = 1024
LOG_REF_CACHE_KEYS = 4096
# ...and how the hydration post table stores posts (grebe.hydration.sqlite).
POST_DICT_PREFIX = "post_body."
POST_DICT_ID = 201
POST_ZSTD_LEVEL = 3
DEFAULT_CONSUMER_GROUP = "grebe"

# Dispatcher defaults.
# Admission a real model can serve: 512 posts queued at the ~37 posts/s a shared host
# managed with the real models is ~14 s of queue (2048 was ~55 s, past the 30 s task
# limit: 36% dead-lettered before queue time stopped counting, see core.deadlines); and by
# Little's law 512 still sustains 20,000 posts/s of light plans at 25 ms per round trip.
DEFAULT_MAX_IN_FLIGHT = 512
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_OTLP_ENDPOINT = "http://127.0.0.1:4318/v1/traces"  # OTLP over HTTP, a local collector
# Decode limits (grebe.codec): a message past them is dead-lettered at decode, never fatal.
MAX_MESSAGE_BYTES = 1 << 20  # one post with its context; media travel as URLs
MAX_FREE_FORM_DEPTH = 32  # nesting of a producer's free-form `context.extra`
MAX_FREE_FORM_ITEMS = 10_000  # values in it
MAX_QUOTE_DEPTH = 3  # a quoted post quoting a quoted post...: deeper is refused
DEFAULT_BACKOFF_BASE_S = 0.2
DEFAULT_BACKOFF_MAX_S = 30.0
DEFAULT_POLL_BATCH = 512
DEFAULT_POLL_TIMEOUT_S = 0.1  # how long an idle dispatcher blocks in its sources' poll
SOURCE_ERROR_BACKOFF_MAX_S = 5.0  # a source whose poll raised is left alone up to this long
LAG_REPORT_INTERVAL_S = 1.0  # per source, at most this often
# DeadLetter.reason values.
DEAD_REASON_MAX_ATTEMPTS = "max_attempts"
DEAD_REASON_DECODE = "decode_error"
DEAD_REASON_POST_ID_REUSED = "post_id_reused"  # a different post under an annotated id

# Engine defaults. "auto": two engine processes where two cores are usable (one engine's
# event loop keeps about one core busy), one elsewhere. Posts are routed to engines by
# author and cross-author state is relayed between them (grebe.core.engine, core.peers),
# so two engines give the answers of one (docs/benchmarks.md, "Two engines by default").
DEFAULT_ENGINE_PROCESSES: Final = "auto"
AUTO_ENGINE_PROCESSES_MAX = 2
DEFAULT_ENGINE_CONCURRENCY = 1024
DEFAULT_TASK_TIMEOUT_S = 30.0
# A task's time limit excludes time its payload waited queued for a model, up to this
# much in all: a model that never serves the queue still ends in a timeout.
WAIT_CREDIT_MAX_S = 600.0
DEFAULT_DRAIN_WINDOW_S = 20.0
# Sentences of one text whose token sums an encoder pass keeps for a summary to rank
# (grebe.flows.shared.encoded): bounds the memory one pathological text can hold in the
# cross-post cache (a row of 384 floats per sentence).
SENTENCE_PARTS_MAX = 32
# Texts whose memo key (grebe.flows.shared.digest) is remembered: a few loop turns of posts.
DIGEST_CACHE_SIZE = 4096

# Local broker (SQLite log) and SQLite store.
DEFAULT_LOCAL_PARTITIONS = 4
DEFAULT_DEAD_LETTER_PARTITIONS = 1  # one partition keeps `grebe dlq list` in arrival order
DEFAULT_LOCAL_SYNCHRONOUS: Final = "NORMAL"
DEFAULT_COMMIT_INTERVAL_S = 0.05  # how long finished offsets may wait to be batched
DEFAULT_COMMIT_BATCH = 4096  # commit at once when this many acks are pending
DEFAULT_SQLITE_BUSY_TIMEOUT_S = 30.0
LOCAL_POLL_MIN_S = 0.002  # cross-process wait: first re-check of the log after this...
LOCAL_POLL_MAX_S = 0.1  # ...doubling up to this
DEFAULT_LOCAL_RETENTION_S = 7 * 24 * 3600.0  # a week of the local log, then trimmed
# The output topic on the local log repeats what the annotation store keeps (1.7 KB a
# post of six flows): an hour of it, unless a consumer group has not committed it.
DEFAULT_LOCAL_OUTPUT_RETENTION_S = 3600.0
DEFAULT_LOCAL_RETENTION_INTERVAL_S = 60.0
CONSUMER_LOCK_TIMEOUT_S = 10.0  # wait this long for a previous consumer's lock on start
DLQ_REPLAY_GROUP = "grebe-dlq-replay"

# Plans bundled with grebe.
DEFAULT_PLANS_FACTORY = "grebe.flows.basic:build_bundle"
PACKAGED_DEFAULT_CONFIG = "data/default.yaml"  # `grebe run`/`serve` with no config file
FLOWS_PLANS_FACTORY = "grebe.flows.registry:build_bundle"  # every product flow
NOOP_ELIGIBILITY = "noop"
BASIC_ELIGIBILITY = "basic"

# Hydration by id (grebe.hydration, docs/hydration.md).
DEFAULT_POST_TABLE_DB = "posts.db"  # the embedded post table, beside annotations.db
# The author's latest posts put in the context; 0 (off) until a flow reads them: the
# lookup costs ~15 us of CPU per post on the no-op runtime bench (docs/hydration.md).
DEFAULT_HYDRATION_RECENT_POSTS = 0
DEFAULT_HYDRATION_CACHE_TTL_S = 60.0
DEFAULT_HYDRATION_MISS_TTL_S = 30.0  # a user not found is not looked up again for this long
DEFAULT_HYDRATION_CACHE_MAXSIZE = 50_000
DEFAULT_HYDRATION_HTTP_TIMEOUT_S = 2.0
DEFAULT_POSTGRES_POST_TABLE_PREFIX = "grebe"  # tables <prefix>_posts, <prefix>_users
HYDRATION_SQL_CHUNK = 500  # ids per IN (...) query
HYDRATION_REASON_KEY = "hydration"  # TaskResult.reasons key of a hydration skip
HYDRATION_NOT_FOUND = "not_found"  # the post a message names is in no table
HYDRATION_NO_POST = "no_post"  # a user-only payload: plans that need a post skip

# Engine processes.
ENGINE_IPC_BATCH = 256  # payloads per IPC frame
# Share frames (grebe.core.peers) held for an engine while it starts for the first time
# (the newest kept): what the engines already up saw meanwhile, up to 256 entries each.
ENGINE_HELD_SHARE_FRAMES = 4096
# An engine may take as long as it needs to start while it uses CPU (imports, models: a
# saturated machine stretches them); it is given up after this long without using any
# (grebe.core.engine_start), or after engine.start_timeout_s in all.
ENGINE_START_STALL_S = 60.0
DEFAULT_ENGINE_START_TIMEOUT_S = 600.0
ENGINE_START_POLL_S = 1.0  # how often a starting engine's CPU time is read
ENGINE_RESTART_WINDOW_S = 60.0  # deaths this recent make the next restart wait longer
ENGINE_RESTART_BACKOFF_BASE_S = 0.5  # wait before the 2nd restart in a window, then doubling
ENGINE_RESTART_BACKOFF_MAX_S = 30.0
ENGINE_STOP_TIMEOUT_S = 10.0  # after a Stop frame, engines are killed past this (all together)
# On SIGTERM `grebe run` exits within engine.drain_window_s plus this margin: engines get
# what is left of the window, but at least this, to stop cleanly, then they are killed.
SHUTDOWN_MARGIN_S = 2.0
GC_THRESHOLDS = (20_000, 20, 20)  # gc.set_threshold once a runtime process has started
# An engine process holds hundreds of posts in flight, so each young collection walks
# their live state (~10 ms a pass at 512 in flight); fewer, larger passes cost less.
ENGINE_GC_THRESHOLDS = (100_000, 20, 20)

# Exit codes of `grebe run` (2 is taken by usage errors).
EXIT_OK = 0  # stopped and drained
EXIT_FAILED = 1  # could not start, the dispatcher failed, or a caught-up check failed
EXIT_NOT_DRAINED = 3  # stopped, but the drain window ran out (the rest is redelivered)
EXIT_FORCED = 130  # a second signal: stopped at once

# Real brokers and stores (Kafka, RabbitMQ, PostgreSQL, Redis).
DEFAULT_KAFKA_COMMIT_INTERVAL_S = 0.2
DEFAULT_KAFKA_PARTITIONS = 3  # topics grebe creates, unless kafka.topics.<name> says
DEFAULT_KAFKA_REPLICATION_FACTOR = 1  # one broker by default; 3 on a real cluster
KAFKA_TOPIC_READY_TIMEOUT_S = 30.0  # a created topic has leaders within this
KAFKA_PROBE_TIMEOUT_MS = 5000  # one direct connection to explain a failed bootstrap
KAFKA_KEEPALIVE_FRACTION = 0.25  # keep group membership alive at this share of max_poll_interval
DEFAULT_POSTGRES_TABLE = "annotations"
DEFAULT_REDIS_PREFIX = "grebe"
# Every Redis key grebe writes starts with `<redis.namespace>:`, so deployments sharing one
# Redis never share a QPS budget, a cache entry or an annotation.
DEFAULT_REDIS_NAMESPACE = "grebe"
REDIS_LIMITS_SUFFIX = "limits"  # QPS budgets: <namespace>:limits:... (the limits library)
RABBIT_ATTEMPT_HEADER = "x-grebe-attempt"  # deliveries so far, on retried messages
RABBIT_MAX_PRIORITY_ARG = "x-max-priority"  # the stream queue's one declared argument
RABBIT_RETRY_SUFFIX = ".retry"  # <queue>.retry.<attempt>: the delay queue of one attempt
RABBIT_DRAINED_CHECKS = 3  # --exit-when-done: the queue must look drained this many times...
RABBIT_DRAINED_INTERVAL_S = 0.2  # ...in a row, this far apart
# Priority of a RabbitMQ request by the poster's tier, resolved when it is enqueued.
TIER_PRIORITY = {"viral": 3, "paid": 3, "creator": 2, "hobby": 1, "free": 0, "trial": 0}

DEFAULT_METRICS_PORT = 9464
DEFAULT_API_PORT = 8080
DEFAULT_API_MAX_BATCH = 1000  # posts in one POST /v1/posts
DEFAULT_API_MAX_BODY_BYTES = 8 << 20
DEFAULT_API_ANALYZE_CONCURRENCY = 4  # /v1/analyze calls running at once; the rest wait
DEFAULT_API_STATUS_REFRESH_S = 5  # the status page reloads itself this often
DEFAULT_THUNDER_PORT = 50051
THUNDER_SOURCE_NAME = "thunder"  # the name thunder's reader of thunder.topic goes by
DEFAULT_FEED_PORT = 8090
#: Served posts count as seen (not served again) for this long (feed viewers).
FEED_SEEN_WINDOW_S = 24 * 3600.0
#: feed-serve: home requests running at once; beyond it a fast 503 (grebe.feed.admission).
FEED_MAX_CONCURRENT_REQUESTS = 4
FEED_RETRY_AFTER_S = 1  # the Retry-After of that 503, in seconds
#: A viewer's out-of-network neighbourhood (ANN search results) is reused this long, for
#: at most this many viewers (grebe.feed.sources; 0 s: searched on every request).
FEED_NEIGHBOURHOOD_TTL_S = 30.0
FEED_NEIGHBOURHOOD_VIEWERS = 4096
#: ... and searched again once what is left of it is below this share of what the
#: search gave (the viewer has seen or followed the rest).
FEED_NEIGHBOURHOOD_REFILL = 0.75

# Environment variable prefix for config overrides: GREBE_DISPATCHER__MAX_IN_FLIGHT=...
ENV_PREFIX = "GREBE_"

# --- security (grebe.security; docs/security.md) ---
API_KEY_PREFIX = "grb_"  # every grebe API key starts so; scrubbers and scanners can spot it
DEFAULT_HTTP_HEADER_TIMEOUT_S = 10.0  # a connection must send a whole request head in this
DEFAULT_HTTP_BODY_TIMEOUT_S = 30.0  # and its body in this
DEFAULT_HTTP_KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this
DEFAULT_HTTP_MAX_CONNECTIONS = 256  # past this, requests get 503 at once
DEFAULT_HTTP_MAX_HEADER_BYTES = 16 * 1024  # a request head larger than this gets 400
DEFAULT_API_MAX_JSON_DEPTH = 64  # request bodies nested deeper get 400
DEFAULT_API_ANALYZE_RATE = "60/minute"  # POST /v1/analyze per key (or per client address)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
CONFIG_ENV_VAR = "GREBE_CONFIG"

#: A model loaded on first use (grebe.inference.lazy) that failed to load is tried again
#: only after this long: meanwhile its posts get the same system fault at once, instead of
#: every post paying for (and logging) another failed load.
LAZY_LOAD_RETRY_S = 30.0

# Per-stream selection (grebe.selection, docs/parity.md "Generators").
DEFAULT_STREAM_MODE = "realtime"  # TaskPayload.mode of a stream that names none
SELECTION_REASON_KEY = "selection"  # TaskResult.reasons key of a post a stream did not select
NOT_SELECTED_PREFIX = "not_selected"  # the reason: "not_selected:<rule>"
GROX_FOLLOWER_THRESHOLD = 60_000  # Grox's reply filters: spam <= it, reply ranking > it
