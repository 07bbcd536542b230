"""One hierarchy for everything grebe raises on purpose.

Catch `GrebeError` to catch them all; each subsystem has its own branch so callers can
tell a bad message from a broken broker from an unsafe URL.
"""


class GrebeError(Exception):
    """Base of every error grebe raises deliberately."""


class ConfigError(GrebeError):
    """The configuration is invalid; the message says which field and why."""


class PlanError(GrebeError):
    """A plan is malformed: unknown task name, unknown dependency, or a cycle."""


class DecodeError(GrebeError):
    """A message could not be decoded into a payload; it is dead-lettered, never fatal."""


class BrokerError(GrebeError):
    """A broker operation failed (connection, commit, publish)."""


class StoreError(GrebeError):
    """An annotation-store operation failed."""


class InferenceError(GrebeError):
    """A model backend failed or returned something unusable."""


class CircuitOpenError(InferenceError):
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


class HydrationUnavailableError(HydrationError):
    """The post/user lookup is down (database unreachable, HTTP lookup failing): the
    system's fault, not the post's. Retried, never a reason to call the post malformed.

    When `errors.SystemFault` lands (branch delivery), this becomes one of its subclasses
    (`class HydrationUnavailableError(HydrationError, SystemFault)`), so the dispatcher
    pauses and retries instead of dead-lettering."""
