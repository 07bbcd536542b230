"""Config that cannot silently do nothing: streams, plans and the factory must agree.

A stream whose eligibilities no plan serves consumes and commits every post and writes
nothing; a plan configured (in `plans.enabled` or its own `plans.<name>` section) that the
plans factory does not have is a setting that does nothing. Each is a ConfigError at start
that names every such stream, eligibility and plan, so a typo or a forgotten
`plans.factory` fails loudly instead of running empty; so is a plan listed in
`plans.enabled` that no stream reaches. A plan that only has a `plans.<name>` settings
section and no stream is warned about: one plans file often serves deployments that run
a subset (and `grebe eval` runs a few plans with the full file).

Plans a factory enables by default (every flow of `grebe.flows.registry`) may go
unreached: a deployment runs the streams it needs. Those are listed in the start log.

The bundle is built (never started: no model is loaded, no file opened) to learn which
plans the factory serves, in the supervisor, before any source is opened.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from grebe import constants as C
from grebe.app.bundles import factory_bundle, factory_name
from grebe.config import GrebeConfig
from grebe.errors import ConfigError

log = logging.getLogger(__name__)

#: Keys of the `plans:` section that configure the section itself, not one plan.
PLANS_SECTION_KEYS = frozenset(
    {"factory", "enabled", "classifier", "prompts_dir", "defaults", "author_memory",
     "shared_cache", "language", "policy_file", "policy_version", "heads", "heads_path"}
)


@dataclass(frozen=True)
class Coverage:
    """What runs: each stream's served eligibilities, and plans no stream reaches."""

    served: dict[str, list[str]]  # stream -> eligibilities some plan serves
    unreached: list[str]  # plans of the factory no stream reaches (not configured by name)


def configured_plans(plans_section: dict[str, object]) -> set[str]:
    """Plans the config names explicitly: in `plans.enabled` or as a `plans.<name>` key."""
    named = {key for key in plans_section if key not in PLANS_SECTION_KEYS}
    enabled = plans_section.get("enabled")
    if isinstance(enabled, list):
        named.update(str(name) for name in enabled)
    return named


def check_coverage(config: GrebeConfig, plan_eligibilities: Iterable[tuple[str, str]]) -> Coverage:
    """Raise ConfigError listing every stream eligibility no plan serves and every plan
    configured by name that the factory lacks or no stream reaches.

    `plan_eligibilities`: (plan name, eligibility) of each plan the factory builds."""
    plans = dict(plan_eligibilities)
    served_eligibilities = set(plans.values())
    factory = factory_name(config)
    problems: list[str] = []
    served: dict[str, list[str]] = {}
    for stream in config.streams:
        missing = sorted(set(stream.eligibilities) - served_eligibilities)
        if missing:
            problems.append(
                f"stream {stream.name!r} names eligibilities no plan serves: "
                f"{', '.join(missing)}"
            )
        served[stream.name] = [e for e in stream.eligibilities if e in served_eligibilities]
    named = configured_plans(config.plans)
    # Under another factory, the flows' own sections still configure `grebe serve`'s
    # /v1/analyze (which runs the flows whatever the factory): not settings for nothing.
    if factory == C.FLOWS_PLANS_FACTORY:
        analyzed: set[str] = set()
    else:
        from grebe.flows.catalog import by_name

        analyzed = set(by_name())
    lacking = sorted(named - set(plans) - analyzed)
    if lacking:
        problems.append(f"plans.factory {factory!r} has no plan named {', '.join(lacking)}")
    reached = {e for stream in config.streams for e in stream.eligibilities}
    unreached = sorted(name for name, e in plans.items() if e not in reached)
    enabled = config.plans.get("enabled")
    wanted = {str(n) for n in enabled} if isinstance(enabled, list) else set()
    idle = sorted(set(unreached) & wanted)
    if idle:  # enabled on purpose, yet no stream reaches it
        problems.append(f"no stream reaches the configured plan(s) {', '.join(idle)}")
    if quiet := sorted((set(unreached) & named) - wanted):
        # settings sections for plans this deployment does not run (one shared plans
        # file, grebe eval's subsets): worth a warning, not a refusal to start
        log.warning("no stream reaches the plan(s) configured in plans: %s", ", ".join(quiet))
    if problems:
        hint = ""
        if factory == C.DEFAULT_PLANS_FACTORY and (lacking or any("stream" in p for p in problems)):
            hint = (
                f" (plans.factory {factory!r} serves {', '.join(sorted(plans)) or 'nothing'};"
                f" the flows are in plans.factory: {C.FLOWS_PLANS_FACTORY})"
            )
        raise ConfigError("config does nothing for: " + "; ".join(problems) + hint)
    return Coverage(served=served, unreached=unreached)


def verify(config: GrebeConfig) -> Coverage:
    """Build the configured factory's bundle (not started) and check it against the
    streams; log what each stream runs."""
    bundle = factory_bundle(config)
    coverage = check_coverage(config, [(p.name, p.eligibility) for p in bundle.plans])
    for stream, eligibilities in coverage.served.items():
        log.info("stream %s runs: %s", stream, ", ".join(eligibilities) or "(nothing)")
    if coverage.unreached:
        log.info("plans no stream reaches (idle): %s", ", ".join(coverage.unreached))
    return coverage
