"""A new flow is one new module: written to a package of its own, registered through the
`grebe.flows` entry-point group, it is collected, configured on a stream, run end to end
by the Runtime (local broker, sqlite store) and its settings are validated at config
load — with no edit to any other file."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from grebe import constants as C
from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.flows import catalog, registry
from grebe.stores.sqlite import SqliteStore
from pipeline_run import run_until_caught_up

#: The whole new flow: its settings model, its tasks, its plan and its declaration.
FLOW_MODULE = textwrap.dedent('''
    """Exclamation check: posts with many exclamation marks read as over-excited."""

    from pydantic import Field

    from grebe.core.plan import Plan
    from grebe.core.task import TaskContext
    from grebe.flows import shared
    from grebe.flows.catalog import Flow
    from grebe.flows.settings import PlanSettings
    from grebe.flows.sinks import SinkRules, sink_with

    NAME = "{name}"


    class ExclaimSettings(PlanSettings):
        min_marks: int = Field(default=3, ge=1)


    async def count(ctx: TaskContext) -> int:
        settings: ExclaimSettings = shared.settings_of(ctx)
        marks = ctx.payload.post.text.count("!")
        ctx.output.scores["exclaim.marks"] = float(marks)
        if marks >= settings.min_marks:
            ctx.output.labels.append("over_excited")
        return marks


    PLAN = Plan(NAME, {{"filter": shared.filters, "count": count,
                       "sink": sink_with(SinkRules())}},
                {{"count": ["filter"], "sink": ["count"]}}, eligibility=NAME)

    PROMPT = """## system
    You rate excitement.
    ## user
    $text"""

    FLOW = Flow(plan=PLAN, settings=ExclaimSettings, order=1000, prompts={{NAME: PROMPT}})
''')


@pytest.fixture
def new_flow(install_flow_module: Callable[[str, str], str]) -> str:
    """A package holding one flow module, installed by its dist-info's entry point only."""
    name = f"exclaim_{uuid.uuid4().hex[:8]}"
    return install_flow_module(name, FLOW_MODULE.format(name=name))


def _config(tmp_path: Path, name: str, **plans: object):
    return load_config(
        data_dir=tmp_path / "var",
        streams=[{"name": "posts", "eligibilities": [name]}],
        engine={"processes": 1},  # an engine process: the module is found there too
        metrics={"enabled": False},
        output={"broker": "none"},
        # Only the new flow runs; the models it does not call stay cheap test doubles.
        inference={"embedder": {"backend": "hash"}, "language_id": False,
                   "nsfw": {"backend": "none"}, "ocr": {"backend": "none"},
                   "transcriber": {"backend": "none"}},
        plans={"factory": C.FLOWS_PLANS_FACTORY, "enabled": [name], "heads": False,
               **plans},
    )


@pytest.mark.slow  # an engine process loads the flows
async def test_a_new_flow_module_is_collected_and_annotates_end_to_end(
        new_flow: str, tmp_path: Path) -> None:
    assert new_flow in catalog.eligibilities()
    assert registry.PLANS[-1].name == new_flow  # order 1000: its labels merge last
    config = _config(tmp_path, new_flow, **{new_flow: {"min_marks": 2}})
    producer = LocalProducer(local_log(config))
    await producer.start()
    await producer.publish_many(C.DEFAULT_INPUT_TOPIC, [
        (None, json.dumps({"id": "loud", "author_id": "a", "text": "wow!! so good!"}).encode()),
        (None, json.dumps({"id": "calm", "author_id": "a", "text": "fine, thanks."}).encode()),
    ])
    await producer.stop()

    await run_until_caught_up(config)

    store = SqliteStore(config.sqlite_path)
    await store.start()
    try:
        (loud,) = await store.get("loud")
        (calm,) = await store.get("calm")
    finally:
        await store.stop()
    assert loud.producer == new_flow and "over_excited" in loud.labels
    assert loud.scores["exclaim.marks"] == 3.0
    assert calm.producer == new_flow and "over_excited" not in calm.labels


def test_a_new_flows_settings_are_validated_at_config_load(
        new_flow: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"plans\.{new_flow}\.min_marks"):
        _config(tmp_path, new_flow, **{new_flow: {"min_marks": 0}})
    with pytest.raises(ConfigError, match=rf"plans\.{new_flow}\.min_mraks"):
        _config(tmp_path, new_flow, **{new_flow: {"min_mraks": 2}})


def test_a_new_flows_prompt_ships_in_its_module(new_flow: str) -> None:
    from grebe.flows.llm import PromptBook

    system, user = PromptBook().render(new_flow, text="wow!!!")
    assert system == {"role": "system", "content": "You rate excitement."}
    assert user == {"role": "user", "content": "wow!!!"}


def test_without_the_module_its_eligibility_is_unknown(tmp_path: Path) -> None:
    catalog.refresh()
    assert not any(name.startswith("exclaim_") for name in catalog.eligibilities())
