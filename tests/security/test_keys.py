"""API keys: made, stored as sha256, checked whole, read from the config or the
environment, and created from the command line."""

from __future__ import annotations

import base64

import pytest
import yaml
from typer.testing import CliRunner

from grebe.cli import app
from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.security.keys import KeyStore, credential, digest, new_key


def test_a_key_verifies_only_whole_and_the_config_holds_only_its_hash() -> None:
    key, entry = new_key("ops", ("api", "debug"))
    assert key.startswith("grb_ops_") and len(key) > 40
    assert entry.sha256 == digest(key) and key not in entry.model_dump_json()
    store = KeyStore([entry])
    principal = store.verify(key)
    assert principal is not None and principal.key_id == "ops"
    assert principal.may("debug") and not principal.may("thunder")
    for wrong in (key[:-1], key + "x", key.replace("ops", "opz"), "", "grb_", "grb_ops_",
                  entry.sha256):
        assert store.verify(wrong) is None, wrong
    assert not KeyStore() and store


@pytest.mark.parametrize(("header", "found"), [
    ("Bearer abc", "abc"), ("bearer   abc ", "abc"), ("Token abc", None), ("Bearer", None),
    ("Basic " + base64.b64encode(b"anyone:abc").decode(), "abc"),
    ("Basic " + base64.b64encode(b"no-password").decode(), None),
    ("Basic !!!notbase64", None), (None, None),
])
def test_credentials_from_an_authorization_header(header, found) -> None:
    assert credential(header) == found


def test_keys_come_from_the_config_file_or_the_environment(tmp_path, monkeypatch) -> None:
    key, entry = new_key("envkey")
    monkeypatch.setenv("GREBE_AUTH__KEYS", f"[{entry.model_dump_json()}]")
    config = load_config(data_dir=tmp_path)
    assert KeyStore.from_config(config.auth).verify(key) is not None
    monkeypatch.delenv("GREBE_AUTH__KEYS")
    with pytest.raises(ConfigError, match="unique"):
        load_config(auth={"keys": [entry.model_dump(), entry.model_dump()]})
    with pytest.raises(ConfigError, match=r"auth\.keys\.0\.sha256"):
        load_config(auth={"keys": [{"id": "x", "sha256": "not-a-hash"}]})


def test_grebe_api_key_new_prints_a_key_and_the_entry_that_accepts_it(tmp_path) -> None:
    result = CliRunner().invoke(app, ["api-key", "new", "feeder", "--scope", "feed"])
    assert result.exit_code == 0, result.output
    key = result.output.split("key (shown once): ")[1].split()[0]
    section = yaml.safe_load(result.output.split("add to the config:\n")[1])
    config = load_config(data_dir=tmp_path, **section)
    principal = KeyStore.from_config(config.auth).verify(key)
    assert principal is not None and principal.scopes == {"feed"}
    bad = CliRunner().invoke(app, ["api-key", "new", "Bad Id"])
    assert bad.exit_code == 2 and "id" in bad.output
