"""The media pipeline is built by the first post with media, not at bundle build or start.

`grebe run` builds the flows' bundle in its dispatcher only to learn the plans, and every
engine builds it again; text-only posts never touch media. Importing the pipeline (PyAV,
PIL, the ASR and video modules) there cost start-up CPU for nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grebe.config import load_config
from grebe.flows import registry
from grebe.flows.models import MEDIA_PIPELINE, LazyMediaHydrator, build_media
from grebe.inference.fakes import ConstantImageClassifier
from grebe.types import Media, Post

from .conftest import fake_models

BUILD_ONLY = """
import sys
from grebe.config import load_config
from grebe.flows.registry import build_bundle
bundle = build_bundle(load_config(data_dir=sys.argv[1], plans={"factory": sys.argv[2]}))
assert bundle.plans
heavy = sorted(m for m in ("grebe.media.pipeline", "grebe.media.asr", "av", "PIL")
               if m in sys.modules)
print(",".join(heavy))
"""


def test_building_the_bundle_imports_no_media_module(tmp_path: Path) -> None:
    command = [sys.executable, "-c", BUILD_ONLY, str(tmp_path), registry.FACTORY]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()
    assert out == "", f"building the bundle imported {out}"


async def test_the_first_post_with_media_builds_the_pipeline_once(tmp_path: Path) -> None:
    config = load_config(data_dir=tmp_path)
    config.media.pipeline.asr = False
    models = fake_models()
    models.nsfw = ConstantImageClassifier({"nsfw": 0.0, "sfw": 1.0}, name="fake-nsfw")
    hydrator = build_media(config, models)
    assert isinstance(hydrator, LazyMediaHydrator) and hydrator.name == MEDIA_PIPELINE
    await hydrator.start()
    assert not hydrator.loaded  # start() builds nothing
    try:
        post = Post(id="p1", text="look", author_id="a",
                    media=(Media(kind="image", url="http://127.0.0.1:9/a.png"),))
        first, second = [await hydrator.hydrate(post) for _ in range(2)]
        assert hydrator.loaded and hydrator.loads == 1
        # Fail closed as before: a loopback URL is refused and reported unchecked.
        assert len(first.unchecked) == 1 and "127.0.0.1" in first.unchecked[0]
        assert second.unchecked == first.unchecked
    finally:
        await hydrator.stop()
    assert not hydrator.loaded
