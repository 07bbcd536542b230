"""Show: a new broker is one new module. `toy_broker_module.py` (an in-memory broker,
written as a third party would) is copied into a fresh directory as `toy_broker.py`
with an entry point in the `grebe.brokers` group, or dropped into the `grebe.brokers`
package as `toy2_backend.py`; with no edit to any other file, a stream configured with
its name flows end to end: `grebe ingest`, the Runtime, annotations in the store, dead
letters listed and replayed by `grebe dlq`."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import grebe.brokers
from grebe.brokers import registry
from grebe.cli import app
from grebe.config import GrebeConfig, load_config
from grebe.errors import ConfigError
from grebe.stores.sqlite import SqliteStore
from pipeline_run import run_until_caught_up

MODULE = Path(__file__).with_name("toy_broker_module.py")


def _forget(*modules: str) -> None:
    for name in modules:
        sys.modules.pop(name, None)
    registry.refresh()


@pytest.fixture
def toy_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed third-party distribution: its module and its entry point."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(MODULE, site / "toy_broker.py")
    dist = site / "toy_broker-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-broker\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[grebe.brokers]\ntoy = toy_broker:BACKEND\n")
    monkeypatch.syspath_prepend(str(site))
    _forget("toy_broker")
    yield site
    monkeypatch.undo()
    _forget("toy_broker")


@pytest.fixture
def toy_in_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A module dropped into the grebe.brokers package (a directory of the package's
    path, so the source tree is left untouched)."""
    extra = tmp_path / "extra"
    extra.mkdir()
    text = MODULE.read_text().replace('name="toy"', 'name="toy2"')
    (extra / "toy2_backend.py").write_text(text)
    monkeypatch.setattr(grebe.brokers, "__path__", [*grebe.brokers.__path__, str(extra)])
    _forget("grebe.brokers.toy2_backend")
    yield
    monkeypatch.undo()
    _forget("grebe.brokers.toy2_backend")


def _post(i: int) -> str:
    return json.dumps({"id": f"t{i}", "author_id": "a", "text": f"hello toy {i}"})


async def _run_until_caught_up(config: GrebeConfig) -> tuple[int, str]:
    """Run the pipeline over what is queued; (annotations stored, producer of t3's)."""
    await run_until_caught_up(config)
    store = SqliteStore(config.sqlite_path)
    await store.start()
    try:
        (annotation,) = await store.get("t3")
        return await store.count(), annotation.producer
    finally:
        await store.stop()


def test_a_stream_on_a_new_broker_module_flows_end_to_end(
    toy_entry_point: Path, tmp_path: Path
) -> None:
    topic = f"toy-{uuid.uuid4().hex}"
    settings = {
        "data_dir": str(tmp_path / "data"),
        "streams": [{"name": "posts", "broker": "toy", "topic": topic,
                     "eligibilities": ["basic"]}],
        "output": {"broker": "none"},
        "brokers": {"toy": {"greeting": "hi"}},  # its own settings section, validated
        "engine": {"processes": 1},  # the engine process re-validates the config: finds it too
        "metrics": {"enabled": False},
    }
    config_file = tmp_path / "grebe.yaml"
    config_file.write_text(yaml.safe_dump(settings))
    posts = tmp_path / "posts.jsonl"
    posts.write_text("\n".join([_post(i) for i in range(5)] + ['{"id": 1}']) + "\n")
    cli = CliRunner()

    ingested = cli.invoke(app, ["ingest", str(posts), "--no-validate",
                                "--config", str(config_file)])
    assert ingested.exit_code == 0, ingested.output
    toy = sys.modules["toy_broker"]
    assert len(toy.TOPICS[topic]) == 6  # on the toy broker, nowhere else

    config = load_config(config_file)
    assert config.brokers["toy"].greeting == "hi"
    assert asyncio.run(_run_until_caught_up(config)) == (5, "basic")

    listed = cli.invoke(app, ["dlq", "list", "--config", str(config_file)])
    assert listed.exit_code == 0, listed.output
    assert "toy:0:0" in listed.output and "posts@0:5" in listed.output
    replayed = cli.invoke(app, ["dlq", "replay", "--config", str(config_file)])
    assert replayed.exit_code == 0, replayed.output
    assert "replayed 1 dead letters" in replayed.output
    assert toy.TOPICS[topic][-1] == toy.TOPICS[topic][5]  # back on its stream's topic

    ran = cli.invoke(app, ["run", "--exit-when-done", "--config", str(config_file)])
    assert ran.exit_code == 0, ran.output
    dead = toy.TOPICS[config.dispatcher.dead_letter_topic]
    assert len(dead) == 2 and dead[1] != dead[0]  # the replayed post, still bad, died again


def test_a_module_dropped_into_the_package_is_a_known_broker(
    toy_in_package: None, tmp_path: Path
) -> None:
    assert "toy2" in registry.names()
    config = load_config(data_dir=tmp_path, streams=[{"name": "s", "broker": "toy2"}],
                         output={"broker": "toy2"})
    assert config.output.broker == "toy2"


def test_an_unknown_broker_fails_at_load_listing_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"streams\.0\.broker.*'kafak'.*known: kafka, local"):
        load_config(data_dir=tmp_path, streams=[{"name": "s", "broker": "kafak"}])


def test_a_queue_broker_cannot_carry_output(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"output\.broker.*'rabbitmq' cannot carry output"):
        load_config(data_dir=tmp_path, output={"broker": "rabbitmq"})


def test_a_bad_key_in_a_new_brokers_section_is_named(toy_entry_point: Path) -> None:
    with pytest.raises(ConfigError, match=r"brokers.*toy\.greting"):
        load_config(brokers={"toy": {"greting": "hi"}})
    with pytest.raises(ConfigError, match=r"brokers.*'nope' is not a known broker"):
        load_config(brokers={"nope": {}})


def test_a_built_in_brokers_section_under_brokers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"brokers: kafka take their top-level section"):
        load_config(data_dir=tmp_path, brokers={"kafka": {"partitions": 3}})


def test_finding_the_brokers_imports_no_broker_client() -> None:
    """Every config load asks the registry; it imports only the `*_backend` modules, so
    a laptop run never pays for importing aiokafka or aio_pika."""
    import subprocess

    script = ("import sys; from grebe.config import load_config; from grebe.brokers import "
              "registry; load_config(); registry.names(); "
              "print(sorted(m for m in ('aiokafka', 'aio_pika') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_a_broken_broker_entry_point_fails_the_load_naming_it(
    toy_entry_point: Path,
) -> None:
    dist = toy_entry_point / "toy_broker-1.0.dist-info"
    (dist / "entry_points.txt").write_text("[grebe.brokers]\ntoy = toy_brokr:BACKEND\n")
    registry.refresh()
    with pytest.raises(ConfigError, match=r"entry point toy = toy_brokr:BACKEND.*cannot load"):
        load_config(streams=[{"name": "s", "broker": "local"}])
