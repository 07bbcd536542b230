"""One typed config: every section (the runtime's own and those the inference, media,
thunder and feed packages define) is validated once, by `load_config`, so a bad key
anywhere is a ConfigError naming its dotted field before anything starts; environment
variables override nested keys of every section; and every config the repository ships
or shows still loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from grebe.config import GrebeConfig, load_config
from grebe.errors import ConfigError
from grebe.flows.policy import read_policy

REPO = Path(__file__).resolve().parents[1]

# (section as written in the file, text the error must contain)
BAD_SECTIONS: list[tuple[dict[str, Any], str]] = [
    ({"inference": {"embeder": "x"}}, "inference.embeder: Extra inputs are not permitted"),
    ({"inference": {"embedder": {"backend": "bert"}}}, "inference.embedder.backend: Input"),
    ({"inference": {"embedder": {"max_batch_size": 0}}},
     "inference.embedder.max_batch_size: Input should be greater than or equal to 1"),
    ({"inference": {"chat": {"model": "smollm2"}}},
     "inference.chat: backend openai needs base_url and model"),
    ({"inference": {"chat": {"base_url": "http://a/v1", "model": "m",
                             "fallbacks": [{"base_url": "http://b/v1"}]}}},
     "inference.chat.fallbacks.0.model: Field required"),
    ({"inference": {"transcriber": {"backend": "openai"}}},
     "inference.transcriber: backend openai needs base_url and model"),
    ({"inference": {"language_id": "maybe"}}, "inference.language_id: Input should be"),
    ({"media": {"fetch": {"max_bytes": 0}}}, "media.fetch.max_bytes: Input should be"),
    ({"media": {"video": {"framez": 3}}}, "media.video.framez: Extra inputs are not permitted"),
    ({"media": {"dedup": {"hash": "md5"}}}, "media.dedup.hash: Input should be 'phash' or"),
    ({"media": {"image": {"max_tiles": 4}}},  # read by nothing, so no longer accepted
     "media.image.max_tiles: Extra inputs are not permitted"),
    ({"thunder": {"port": "x"}}, "thunder.port: Input should be a valid integer"),
    ({"thunder": {"prot": 1}}, "thunder.prot: Extra inputs are not permitted"),
    ({"thunder": {"tls": {"cert_file": "/x.crt"}}},
     "thunder.tls: tls needs both cert_file and key_file"),
    ({"feed": {"weights": {"nope": 1}}}, "feed.weights.nope: Extra inputs are not permitted"),
    ({"feed": {"max_results": 0}}, "feed.max_results: Input should be greater than or equal"),
    ({"feed": {"default_safety_level": "lax"}},
     "feed: default_safety_level 'lax' is not one of safety_levels (default, off, strict)"),
    ({"feed": {"http": {"max_connections": 0}}}, "feed.http.max_connections: Input should be"),
    ({"inference": []}, "inference: Input should be a valid dictionary"),
]


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "grebe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(("raw", "message"), BAD_SECTIONS,
                         ids=[m.split(":")[0] for _, m in BAD_SECTIONS])
def test_a_bad_key_in_any_section_fails_load_naming_its_field(
        tmp_path: Path, raw: dict[str, Any], message: str) -> None:
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_every_bad_field_is_named_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, {"inference": {"embeder": "x"}, "thunder": {"port": "x"},
                             "feed": {"weights": {"nope": 1}}, "engine": {"processes": -1}})
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    for field in ("inference.embeder", "thunder.port", "feed.weights.nope", "engine.processes"):
        assert field in str(caught.value)


def test_sections_are_typed_objects() -> None:
    config = load_config(inference={"embedder": "hash", "ocr": "none"},
                         feed={"weights": {"similarity": 2}}, thunder={"port": 0})
    assert config.inference.embedder.backend == "hash"
    assert config.inference.ocr.backend == "none"
    assert config.feed.weights.interest == 2.0  # the old spelling still reads
    assert config.thunder.port == 0
    assert config.media.fetch.allow_files is False
    # each config owns its sections: changing one (as `grebe media scan` does) leaves
    # the next config's defaults alone
    config.media.pipeline.asr = False
    assert load_config().media.pipeline.asr is True


@pytest.mark.parametrize(("env", "value", "path", "expected"), [
    ("GREBE_INFERENCE__EMBEDDER__MAX_BATCH_SIZE", "8", "inference.embedder.max_batch_size", 8),
    ("GREBE_INFERENCE__LANGUAGE_ID", "false", "inference.language_id", False),
    ("GREBE_INFERENCE__CHAT__BASE_URL", "http://127.0.0.1:8000/v1", "inference.chat.base_url",
     "http://127.0.0.1:8000/v1"),
    ("GREBE_MEDIA__FETCH__MAX_REDIRECTS", "2", "media.fetch.max_redirects", 2),
    ("GREBE_MEDIA__PIPELINE__ASR", "false", "media.pipeline.asr", False),
    ("GREBE_THUNDER__PORT", "6001", "thunder.port", 6001),
    ("GREBE_THUNDER__TLS__CERT_FILE", "/c.crt", "thunder.tls.cert_file", Path("/c.crt")),
    ("GREBE_FEED__WEIGHTS__RECENCY", "2.5", "feed.weights.recency", 2.5),
    ("GREBE_FEED__SAFETY_LEVELS", '{"default": ["spam"], "off": []}', "feed.safety_levels",
     {"default": ["spam"], "off": []}),
])
def test_environment_overrides_nested_keys_over_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: str, value: str, path: str,
        expected: object) -> None:
    file = _write(tmp_path, {
        "inference": {"embedder": "hash", "chat": {"base_url": "http://file/v1", "model": "m"}},
        "media": {"fetch": {"max_bytes": 1000}},
        "thunder": {"port": 6000, "group": "from-file",
                    "tls": {"cert_file": "/f.crt", "key_file": "/f.key"}},
        "feed": {"weights": {"quality": 0.9}},
    })
    monkeypatch.setenv(env, value)
    config = load_config(file)
    node: Any = config
    for part in path.split("."):
        node = getattr(node, part)
    assert node == expected
    # the rest of the file stays in force beside the override
    assert config.inference.embedder.backend == "hash"  # a shorthand, merged with the env
    assert config.inference.chat.model == "m"
    assert config.media.fetch.max_bytes == 1000
    assert config.thunder.group == "from-file" and config.thunder.tls.key_file == Path("/f.key")
    assert config.feed.weights.quality == 0.9


def test_a_section_passed_as_an_object_keeps_its_values_under_env_overrides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """grebe eval builds its scratch config from the base's typed sections; the
    environment's nested keys merge into them instead of replacing them whole."""
    monkeypatch.setenv("GREBE_INFERENCE__EMBEDDER__MAX_BATCH_SIZE", "8")
    base = load_config(inference={"embedder": "hash", "ocr": "none"},
                       hydration={"backend": "http", "http_url": "http://x", "record": False})
    again = load_config(inference=base.inference, hydration=base.hydration)
    assert again.inference == base.inference
    assert again.inference.embedder.backend == "hash" and again.inference.ocr.backend == "none"
    assert again.inference.embedder.max_batch_size == 8
    assert again.hydration == base.hydration


def test_a_bad_environment_override_names_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREBE_THUNDER__PORT", "x")
    monkeypatch.setenv("GREBE_INFERENCE__EMBEDDER__BACKEND", "bert")
    with pytest.raises(ConfigError) as caught:
        load_config()
    assert "thunder.port: Input should be a valid integer" in str(caught.value)
    assert "inference.embedder.backend" in str(caught.value)


def test_engines_receive_the_typed_sections_intact() -> None:
    """Engine processes get the config as JSON (core/engine.py): the typed sections
    must survive the trip, aliases and shorthands included."""
    config = load_config(REPO / "src/grebe/data/default.yaml",
                         inference={"embedder": "hash", "chat": {"base_url": "http://a/v1",
                                                                 "model": "m"}},
                         feed={"weights": {"similarity": 2}}, thunder={"port": 0})
    assert GrebeConfig.model_validate_json(config.model_dump_json()) == config


# --- every config the repository ships or shows still loads ---

_SKIP_DIRS = {".git", ".venv", "node_modules", "var", "build", "dist", ".mypy_cache",
              ".ruff_cache", ".pytest_cache"}


def _repo_files(suffixes: tuple[str, ...]) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        found += [Path(root) / f for f in files if Path(f).suffix in suffixes]
    return sorted(found)


def test_every_yaml_file_in_the_repo_loads() -> None:
    """A YAML file is either a config (its top-level keys are config sections), loaded
    with load_config, or the packaged policy, read by the policy loader; nothing else."""
    files = _repo_files((".yaml", ".yml"))
    assert REPO / "src/grebe/data/default.yaml" in files
    configs = []
    for path in files:
        raw = yaml.safe_load(path.read_text()) or {}
        if set(raw) <= set(GrebeConfig.model_fields):
            load_config(path)
            configs.append(path)
        else:
            version, plans = read_policy(path)
            assert version and plans, path
    assert configs


def _doc_snippets() -> list[tuple[str, str]]:
    """Fenced ```yaml blocks of README, docs/ and docstrings in src/ (id, text)."""
    sources = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
               *_repo_files((".py",))]
    snippets = []
    for path in sources:
        if REPO / "src" not in path.parents and path.suffix == ".py":
            continue
        for n, match in enumerate(re.finditer(r"```ya?ml\n(.*?)```", path.read_text(), re.S)):
            snippets.append((f"{path.relative_to(REPO)}#{n}", textwrap.dedent(match.group(1))))
    return snippets


SNIPPETS = _doc_snippets()


@pytest.mark.parametrize(("where", "text"), SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_config_snippets_in_docs_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, text: str) -> None:
    """Every config shown in the docs is valid as shown. A line whose key is a
    `<placeholder>` is dropped; the deployment's own files (/etc/grebe/...) are stood
    in for by empty files, and a secret the doc says comes from the environment is set
    there."""
    lines = [line for line in text.splitlines() if not re.match(r"\s*<[^>]+>:", line)]
    raw = yaml.safe_load("\n".join(lines))
    if not isinstance(raw, dict) or not set(raw) <= set(GrebeConfig.model_fields):
        pytest.fail(f"{where} is not a config snippet: {text[:80]!r}")

    def stand_in(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: stand_in(v) for k, v in value.items()}
        if isinstance(value, str) and value.startswith("/etc/grebe/"):
            path = tmp_path / Path(value).name
            path.touch()
            return str(path)
        return value

    if "GREBE_KAFKA__SASL_PASSWORD" in text:
        monkeypatch.setenv("GREBE_KAFKA__SASL_PASSWORD", "from-the-environment")
    load_config(**stand_in(raw))


def test_loading_the_config_imports_no_model_code() -> None:
    """Section models live in light modules: reading a config (every command does)
    must not pay for onnxruntime, torch or numpy, nor import the packages' machinery."""
    code = ("import sys, grebe.config; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('onnxruntime', 'torch', 'numpy', 'grpc', 'PIL', 'av', 'faster_whisper') "
            "or m.startswith(('grebe.inference.factory', 'grebe.media.pipeline', "
            "'grebe.thunder.store', 'grebe.feed.home')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == []
