"""Two-phase shutdown on SIGINT/SIGTERM, shared by `grebe run` and `grebe serve`.

The first signal only sets `requested`: the caller stops intake and drains in-flight work.
A second signal exits at once; whatever was unfinished was never acked, so the broker
redelivers it. Handlers live only inside the `with` block.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from types import TracebackType

from grebe import constants as C

log = logging.getLogger(__name__)

SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ShutdownSignals:
    def __init__(self, draining: str) -> None:
        self.requested = asyncio.Event()
        self._draining = draining  # what the first signal starts, for the log line
        self._seen = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> ShutdownSignals:
        self._loop = asyncio.get_running_loop()
        for signum in SHUTDOWN_SIGNALS:
            self._loop.add_signal_handler(signum, self._on_signal, signum)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._loop is not None:
            for signum in SHUTDOWN_SIGNALS:
                self._loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        self._seen += 1
        if self._seen == 1:
            log.info("%s: %s (again to force)", signal.Signals(signum).name, self._draining)
            self.requested.set()
        else:
            log.warning("second signal: exiting now; unfinished posts will be redelivered")
            os._exit(C.EXIT_FORCED)
