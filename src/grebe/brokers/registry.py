"""The broker registry: every `BrokerBackend` grebe can use, found, not listed.

Two ways in, neither needs an edit anywhere else:
- a module `grebe/brokers/<name>_backend.py` with a module-level `BACKEND` (the
  package is scanned with pkgutil; only `*_backend` modules are imported, so a laptop
  run never pays for importing the Kafka or RabbitMQ client);
- an installed distribution's entry point in the `grebe.brokers` group whose value is a
  `BrokerBackend` (e.g. `mybroker = "my_pkg.broker:BACKEND"`).

Two backends with one name are a configuration error, not a silent override.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

import grebe.brokers
from grebe.brokers.backend import BrokerBackend, BrokerSettings
from grebe.errors import ConfigError

if TYPE_CHECKING:
    from grebe.config import GrebeConfig

ENTRY_POINT_GROUP = "grebe.brokers"
MODULE_SUFFIX = "_backend"
BACKEND_ATTRIBUTE = "BACKEND"


def _add(found: dict[str, BrokerBackend], backend: object, where: str) -> None:
    if not isinstance(backend, BrokerBackend):
        raise ConfigError(f"{where}: {BACKEND_ATTRIBUTE} is not a BrokerBackend "
                          f"({type(backend).__name__})")
    if backend.name in found:
        raise ConfigError(f"{where}: broker {backend.name!r} is registered twice")
    found[backend.name] = backend


@functools.cache
def backends() -> dict[str, BrokerBackend]:
    """Every registered backend by name (found once per process; `refresh` forgets)."""
    found: dict[str, BrokerBackend] = {}
    for module in sorted(pkgutil.iter_modules(grebe.brokers.__path__), key=lambda m: m.name):
        if module.name.endswith(MODULE_SUFFIX):
            name = f"{grebe.brokers.__name__}.{module.name}"
            _add(found, getattr(importlib.import_module(name), BACKEND_ATTRIBUTE, None), name)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name} = {point.value} ({ENTRY_POINT_GROUP})"
        try:
            loaded = point.load()
        except Exception as exc:  # a broken plugin fails every load, naming itself
            raise ConfigError(f"{where}: cannot load: {type(exc).__name__}: {exc}") from exc
        _add(found, loaded, where)
    return found


def refresh() -> None:
    """Forget what was found, so a module added since is picked up (tests, plugins)."""
    backends.cache_clear()


def names() -> list[str]:
    return sorted(backends())


def backend(name: str, *, what: str = "broker") -> BrokerBackend:
    """The backend called `name`; ConfigError listing the known ones if none is."""
    try:
        return backends()[name]
    except KeyError:
        raise ConfigError(
            f"{what} {name!r} is not a known broker (known: {', '.join(names())})"
        ) from None


def validate_sections(raw: dict[str, Any]) -> dict[str, BrokerSettings]:
    """The `brokers:` sections of brokers that have no top-level section of their own,
    each validated by its backend's settings model (pydantic errors name the field)."""
    sections = {}
    for name, section in raw.items():
        try:
            model = backend(name, what="brokers:").settings
        except ConfigError as exc:
            raise ValueError(str(exc)) from None  # pydantic names the field
        try:
            sections[name] = model.model_validate(section)
        except ValidationError as exc:  # re-raised with the broker's name in the field
            raise ValueError("; ".join(
                f"{'.'.join([name, *(str(p) for p in err['loc'])])}: {err['msg']}"
                for err in exc.errors())) from None
    return sections


def settings_of(config: GrebeConfig, name: str) -> BrokerSettings:
    """The section of broker `name`: its top-level one (`local:`, `kafka:`...), else its
    entry under `brokers:`, else its defaults."""
    model = backend(name).settings
    section = getattr(config, name, None)
    if isinstance(section, model):
        return section
    section = config.brokers.get(name)
    return section if isinstance(section, model) else model()
