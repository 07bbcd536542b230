"""One consumer per (log, group, topic) on the local log, across processes."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

from grebe import constants as C
from grebe.errors import BrokerError


class ConsumerLock:
    """One consumer per (log, group, topic): an flock the kernel drops when the holder
    dies, even by kill -9, so a restart never waits on a dead process."""

    def __init__(self, log_path: Path, group: str, topic: str) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{group}.{topic}")
        self.path = log_path.with_name(f"{log_path.name}.{safe}.lock")
        self._fd: int | None = None

    async def acquire(self, wait_s: float = C.CONSUMER_LOCK_TIMEOUT_S) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        delay = 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # A previous consumer is still exiting; bounded wait with backoff.
                if loop.time() >= deadline:
                    os.close(fd)
                    raise BrokerError(
                        f"another consumer holds {self.path} (is another `grebe run` "
                        "using this data dir?)"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
