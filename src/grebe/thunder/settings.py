"""Thunder's settings: the `thunder:` section of the config (`GrebeConfig.thunder`),
validated with the rest of the config at load.

Every default lives here (arq-style), so the store, the ingest loop and the gRPC service
read one object instead of scattering numbers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from grebe import constants as C
from grebe.security.settings import TlsSettings
from grebe.settings_base import Section

TWO_DAYS_S = 2 * 24 * 3600.0


class ThunderSettings(Section):
    model_config = ConfigDict(frozen=True)

    # --- store ---
    retention_s: float = Field(default=TWO_DAYS_S, gt=0)
    trim_interval_s: float = Field(default=60.0, gt=0)
    #: How many posts of each kind one author keeps; older ones are evicted on insert.
    max_originals_per_author: int = Field(default=64, ge=1)
    max_secondary_per_author: int = Field(default=64, ge=1)  # replies and retweets
    max_videos_per_author: int = Field(default=32, ge=1)
    #: A video shorter than this is not served to video requests (a GIF-like clip);
    #: a video whose duration the producer did not report is given the benefit.
    min_video_duration_s: float = Field(default=2.0, ge=0)
    #: A create dated further than this into the future is refused: clocks of producers
    #: drift a little, but a post from next week would rank first and pin freshness at 0.
    max_future_skew_s: float = Field(default=300.0, ge=0)
    #: Replies held while their parent (or conversation root) has not arrived, so their
    #: reply context is filled when it does; the oldest waiting parent is dropped beyond.
    max_pending_replies: int = Field(default=100_000, ge=0)

    # --- query (per-author caps applied when serving) ---
    serve_originals_per_author: int = Field(default=5, ge=0)
    serve_secondary_per_author: int = Field(default=3, ge=0)
    serve_videos_per_author: int = Field(default=3, ge=0)
    default_max_results: int = Field(default=800, ge=1)
    max_results_cap: int = Field(default=5000, ge=1)
    max_following: int = Field(default=20_000, ge=1)
    max_excluded: int = Field(default=20_000, ge=0)
    request_budget_ms: float = Field(default=100.0, gt=0)
    #: Of each list of a followed author, only the newest this-many posts are looked at
    #: (the specification's MAX_TINY_POSTS_PER_USER_SCAN): a viewer who excluded an
    #: author's recent posts does not make the query walk that author's whole history.
    max_scan_per_author: int = Field(default=32, ge=1)
    #: Authors scanned between two yields to the event loop (and budget checks).
    scan_chunk: int = Field(default=256, ge=1)

    # --- ingest ---
    topic: str = C.DEFAULT_INPUT_TOPIC
    group: str = "thunder"
    #: The store lives in memory, so a restart must re-read the retained stream. True:
    #: each start consumes under a fresh group (`<group>-<pid>-<time>`), from the
    #: beginning of what the broker retains. False: resume from `group`'s offsets
    #: (only right if something else restores the store).
    replay_on_start: bool = True
    poll_batch: int = Field(default=1024, ge=1)
    poll_timeout_s: float = Field(default=0.5, gt=0)
    #: After a failed poll, wait this long before the next one, doubling per failure up
    #: to `retry_backoff_max_s` (the service reports NOT_SERVING meanwhile).
    retry_backoff_s: float = Field(default=0.2, gt=0)
    retry_backoff_max_s: float = Field(default=10.0, gt=0)
    #: How often the messages-behind gauge asks the source for its partition lag.
    lag_check_interval_s: float = Field(default=5.0, gt=0)
    #: A YAML/JSON file of viewers (`{"u": {"following": [...]}}`, as `grebe feed
    #: --viewers`): the social graph asked when a request's following list is empty.
    following_file: str | None = None

    # --- gRPC service ---
    host: str = "127.0.0.1"
    port: int = Field(default=C.DEFAULT_THUNDER_PORT, ge=0, le=65535)  # 0: a free port
    max_concurrent_requests: int = Field(default=64, ge=1)
    #: Response compression. None by default: gzip costs ~0.8 ms of CPU per 800-post
    #: answer (27 kB -> 9 kB), worth it only on a slow link between client and server.
    compression: Literal["gzip", "deflate", "none"] = "none"
    #: Posts whose encoded protobuf is kept for reuse (thunder/wire.py; ~200 B each).
    encoded_cache_posts: int = Field(default=262_144, ge=0)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    #: Server certificate and key (and a client CA for mutual TLS); off by default.
    tls: TlsSettings = TlsSettings()
