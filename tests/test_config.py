import pytest

from grebe.config import load_config
from grebe.errors import ConfigError


def test_defaults_need_no_file():
    config = load_config()
    assert config.store.backend == "sqlite"
    assert config.log_path.name == "log.db"


def test_file_then_environment_override(tmp_path, monkeypatch):
    path = tmp_path / "grebe.yaml"
    path.write_text(
        "engine:\n  processes: 2\nstreams:\n  - name: a\n    eligibilities: [spam_comment]\n"
    )
    monkeypatch.setenv("GREBE_ENGINE__PROCESSES", "4")
    config = load_config(path)
    assert config.engine.processes == 4
    assert config.streams[0].eligibilities == ["spam_comment"]


def test_engine_processes_default_to_two_where_two_cores_are_usable(monkeypatch):
    import grebe.config

    config = load_config()
    assert config.engine.processes == "auto"
    for cores, engines in ((1, 1), (2, 2), (16, 2)):
        monkeypatch.setattr(grebe.config, "usable_cores", lambda cores=cores: cores)
        assert config.engine.process_count == engines
    assert load_config(engine={"processes": 0}).engine.process_count == 0
    monkeypatch.setenv("GREBE_ENGINE__PROCESSES", "3")
    assert load_config().engine.process_count == 3
    monkeypatch.setenv("GREBE_ENGINE__PROCESSES", "many")
    with pytest.raises(ConfigError, match=r"engine\.processes"):
        load_config()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("streams:\n  - name: a\n    weight: -1\n", "streams.0.weight"),
        ("dispatcher:\n  max_inflight: 3\n", "max_inflight"),
        ("streams:\n  - name: a\n  - name: a\n", "repeated: a"),
        ("- 1\n- 2\n", "mapping"),
        ("a: [", "not valid YAML"),
    ],
)
def test_invalid_configs_name_the_problem(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert fragment in str(info.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")
