"""One hierarchy for everything grebe raises on purpose.

Catch `GrebeError` to catch them all; each subsystem has its own branch so callers can
tell a bad message from a broken broker from an unsafe URL.

Failures are classified here, in one place (`is_system_fault`): a post's own failure
(bad input, a model error on it) is retried and then dead-lettered; a *system fault*
(engine gone, disk full, store or model server down, a queue full) is not the post's
doing, so the dispatcher pauses intake and retries it without counting an attempt and
never dead-letters it. Code that knows a failure is the system's raises a `SystemFault`
subclass; errors of libraries that say the same (ENOSPC, a refused connection to the
store) are recognised by `is_system_fault` without wrapping.
"""

import errno
import sqlite3

from grebe.constants import DEAD_REASON_POST_ID_REUSED


class GrebeError(Exception):
    """Base of every error grebe raises deliberately."""


class SystemFault(GrebeError):
    """Not the post's fault: grebe or a dependency cannot do its part now. Never a reason
    to dead-letter a post; intake pauses and the post is retried after a backoff."""


class PostRejectedError(GrebeError):
    """The post itself can never succeed (retrying cannot help): it is dead-lettered at
    once, with `reason` as the dead letter's reason."""

    reason = "rejected"


class PostIdReusedError(PostRejectedError):
    """A different post arrived under the id of one already annotated: its annotations
    must not silently replace the first post's."""

    reason = DEAD_REASON_POST_ID_REUSED


class ConfigError(GrebeError):
    """The configuration is invalid; the message says which field and why."""


class PlanError(GrebeError):
    """A plan is malformed: unknown task name, unknown dependency, or a cycle."""


class DecodeError(GrebeError):
    """A message could not be decoded into a payload; it is dead-lettered, never fatal."""


class BrokerError(GrebeError):
    """A broker operation failed (connection, commit, publish)."""


class BrokerUnavailableError(BrokerError, SystemFault):
    """A broker could not take a write (an output or dead-letter publish): a system fault."""


class StoreError(GrebeError):
    """An annotation-store operation failed."""


class StoreUnavailableError(StoreError, SystemFault):
    """The store could not take a write (disk full, database down, locked): a system fault."""


class InferenceError(GrebeError):
    """A model backend failed or returned something unusable."""


class ModelUnavailableError(InferenceError, SystemFault):
    """A model cannot serve now (server down or overloaded, queue full): a system fault."""


class CircuitOpenError(ModelUnavailableError):
    """A backend's circuit breaker is open; the call was not attempted."""


class MediaError(GrebeError):
    """Media could not be fetched, decoded or processed."""


class UnsafeURLError(MediaError):
    """A media URL was refused (scheme, private address, redirect to one)."""


class MediaTooLargeError(MediaError):
    """Media exceeded a byte, pixel or duration cap."""


class ServingError(GrebeError):
    """A serving call failed: thunder unavailable, overloaded, or refused the request."""


class HydrationError(GrebeError):
    """Hydration by id (grebe.hydration) failed."""


class HydrationUnavailableError(HydrationError, SystemFault):
    """The post/user lookup is down (database unreachable, HTTP lookup failing, a bad
    answer from it): the system's fault, not the post's. Intake pauses and the post is
    retried; it is never dead-lettered for it."""


# errno values that mean the machine, not the input, is at fault.
_SYSTEM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ENOMEM})
# sqlite3.OperationalError texts of a full disk, a locked or unreadable database.
_SQLITE_SYSTEM_TEXTS = ("disk is full", "database is locked", "disk i/o error", "unable to open")


def is_system_fault(exc: BaseException) -> bool:
    """True when `exc` (or an exception it was raised from) is a system fault rather
    than the post's own failure: see the module docstring. The one classifier used by
    plans, engines and the dispatcher, so every path agrees."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, SystemFault | MemoryError):
            return True
        if isinstance(current, OSError) and current.errno in _SYSTEM_ERRNOS:
            return True
        if isinstance(current, sqlite3.OperationalError) and any(
            text in str(current).lower() for text in _SQLITE_SYSTEM_TEXTS
        ):
            return True
        current = current.__cause__ or current.__context__
    return False
