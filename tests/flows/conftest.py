from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grebe.config import load_config
from grebe.core.planmaster import PlanMaster
from grebe.flows import catalog, registry
from grebe.flows.models import FlowModels, build_models
from grebe.flows.services import FlowServices, MediaFacts
from grebe.flows.settings import FlowSettings
from grebe.inference.fakes import HashEmbedder
from grebe.stores.base import MemoryStore
from grebe.types import Post, TaskPayload, UserContext

from .doubles import (
    HATE_WORDS,
    OFFENSIVE_WORDS,
    DirectionSpamHead,
    FakeMedia,
    RecordingProducer,
    WordsClassifier,
)

ALL = catalog.eligibilities()


def fake_models(chat: Any = None) -> FlowModels:
    embedder = HashEmbedder()
    return FlowModels(
        embedder=embedder,
        offensive=WordsClassifier({"offensive": OFFENSIVE_WORDS}, "words-profanity"),
        hate=WordsClassifier({"hate": HATE_WORDS, "offensive": OFFENSIVE_WORDS}, "words-hate"),
        spam_head=DirectionSpamHead(embedder),
        chat=chat,
    )


def fake_services(plans: dict[str, Any] | None = None, *, chat: Any = None,
                  facts: MediaFacts | None = None) -> FlowServices:
    settings = FlowSettings.from_section(plans)
    return registry.assemble(
        settings, models=fake_models(chat), store=MemoryStore(), producer=RecordingProducer(),
        media=FakeMedia(facts or MediaFacts()),
    )


def payload(text: str, *, eligibilities: frozenset[str] = ALL, parent: str | None = None,
            post_id: str = "p1", author: str = "a1", **post: Any) -> TaskPayload:
    parent_post = Post(id="parent", author_id="a0", text=parent) if parent else None
    return TaskPayload(
        payload_id=f"test:{post_id}",
        post=Post(id=post_id, author_id=author, text=text,
                  reply_to_post_id="parent" if parent else None, **post),
        context=UserContext(parent=parent_post),
        eligibilities=eligibilities,
    )


@contextlib.asynccontextmanager
async def real_text_models_master() -> AsyncIterator[PlanMaster]:
    """Every plan over the real text models (no media backends), started and stopped
    around the block: for the tests that check verdicts on real text."""
    config = load_config(inference={"ocr": "none", "nsfw": "none", "transcriber": "none"})
    settings = FlowSettings.from_section({"defaults": {"dedupe_ttl_s": 0}})
    models = build_models(config, settings)
    services = registry.assemble(settings, models=models, store=MemoryStore())
    for component in models.components():
        await component.start()
    try:
        yield PlanMaster(registry.PLANS, services=services)
    finally:
        for component in reversed(models.components()):
            await component.stop()


@pytest.fixture
def install_flow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                        ) -> Iterator[Callable[[str, str], str]]:
    """`install(name, source)`: a package of its own holding the flow module `source`,
    installed by its dist-info's `grebe.flows` entry point only (as a third-party flow
    is), returning `name`; afterwards the catalog forgets it."""
    packages: list[str] = []

    def install(name: str, source: str) -> str:
        package = f"extra_flows_{uuid.uuid4().hex[:8]}"
        site = tmp_path / package / "site"
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        (site / package / "flow.py").write_text(source)
        dist = site / f"{package}-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text(
            f"[{catalog.ENTRY_POINT_GROUP}]\n{name} = {package}.flow\n")
        monkeypatch.syspath_prepend(str(site))
        packages.append(package)
        catalog.refresh()
        return name

    yield install
    catalog.refresh()
    for module in [m for m in sys.modules if m.startswith(tuple(packages))]:
        del sys.modules[module]


@pytest.fixture
def services() -> FlowServices:
    return fake_services()


@pytest.fixture
def master(services: FlowServices) -> PlanMaster:
    return PlanMaster(registry.PLANS, services=services)
