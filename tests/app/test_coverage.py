"""Config that cannot silently do nothing (issue 12 item 8)."""

import json

import pytest
from typer.testing import CliRunner

from grebe import constants as C
from grebe.app.coverage import check_coverage, verify
from grebe.app.supervisor import Runtime
from grebe.cli import app
from grebe.config import load_config
from grebe.errors import ConfigError

BASIC = [("noop", "noop"), ("basic", "basic")]


def _config(tmp_path, **overrides):
    settings = {"data_dir": tmp_path, "engine": {"processes": 0}, "metrics": {"enabled": False}}
    settings.update(overrides)
    return load_config(**settings)


def test_stream_eligibility_no_plan_serves_is_named(tmp_path):
    config = _config(tmp_path, streams=[
        {"name": "a", "eligibilities": ["basic", "typo"]},
        {"name": "b", "eligibilities": ["other"]},
    ])
    with pytest.raises(ConfigError) as err:
        check_coverage(config, BASIC)
    message = str(err.value)
    assert "stream 'a' names eligibilities no plan serves: typo" in message
    assert "stream 'b' names eligibilities no plan serves: other" in message


def test_configured_plan_the_factory_lacks_is_named(tmp_path):
    config = _config(tmp_path, streams=[{"name": "a", "eligibilities": ["basic"]}],
                     plans={"spam_comment": {"threshold": 0.5}, "bsaic": {}})
    with pytest.raises(ConfigError, match="has no plan named bsaic"):
        check_coverage(config, BASIC)


def test_configured_plan_no_stream_reaches_is_named(tmp_path):
    config = _config(
        tmp_path, streams=[{"name": "a", "eligibilities": ["post_safety"]}],
        plans={"factory": C.FLOWS_PLANS_FACTORY, "enabled": ["post_safety", "spam_comment"]},
    )
    with pytest.raises(ConfigError, match=r"reaches the configured plan\(s\) spam_comment"):
        verify(config)


def test_flow_sections_under_another_factory_configure_analyze(tmp_path):
    """`grebe serve`'s /v1/analyze runs the flows whatever the factory: their sections
    are not settings for nothing."""
    config = _config(tmp_path, streams=[{"name": "a", "eligibilities": ["basic"]}],
                     plans={"enabled": ["spam_comment"], "spam_comment": {"threshold": 0.5}})
    assert check_coverage(config, BASIC).served == {"a": ["basic"]}


def test_plans_enabled_by_default_may_idle(tmp_path):
    config = _config(tmp_path, streams=[{"name": "a", "eligibilities": ["post_safety"]}],
                     plans={"factory": C.FLOWS_PLANS_FACTORY})
    coverage = verify(config)
    assert coverage.served == {"a": ["post_safety"]}
    assert "spam_comment" in coverage.unreached and "post_safety" not in coverage.unreached


async def test_runtime_refuses_to_start_before_opening_a_source(tmp_path):
    config = _config(tmp_path, streams=[{"name": "posts", "eligibilities": ["post_safety"]}])
    runtime = Runtime(config)
    with pytest.raises(ConfigError, match="post_safety"):
        await runtime.start()
    assert runtime.sources == []
    assert not (tmp_path / C.DEFAULT_LOG_DB).exists()


def test_readme_feed_recipe_without_factory_fails_at_start(tmp_path, monkeypatch, caplog):
    """The README's feed recipe, minus `plans.factory`: it used to consume and commit
    every post and write no annotation; now `grebe run` exits 1 naming the plans."""
    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("GREBE_METRICS__ENABLED", "false")
    config = tmp_path / "grebe.yaml"
    config.write_text(json.dumps({"streams": [{
        "name": "unified_posts", "topic": "posts",
        "eligibilities": ["post_safety", "post_embedding_with_summary"]}]}))
    posts = tmp_path / "posts.jsonl"
    posts.write_text(json.dumps({"post": {"id": "h1", "author_id": "fred", "text": "hi"}}) + "\n")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(posts), "-c", str(config)]).exit_code == 0
    result = runner.invoke(app, ["run", "-c", str(config), "--exit-when-done"])
    assert result.exit_code == C.EXIT_FAILED, result.output
    text = caplog.text
    assert "post_embedding_with_summary, post_safety" in text
    assert C.FLOWS_PLANS_FACTORY in text


def test_a_settings_section_for_a_plan_no_stream_runs_is_a_warning(tmp_path, caplog):
    """One plans file (default.yaml's) shared by deployments that run a few streams, or
    grebe eval running two plans with it: settings for idle plans are not an error."""
    config = _config(
        tmp_path, streams=[{"name": "a", "eligibilities": ["post_safety"]}],
        plans={"factory": C.FLOWS_PLANS_FACTORY, "reply_ranking": {"relevance_bins": [0.2]}},
    )
    with caplog.at_level("WARNING", logger="grebe.app.coverage"):
        coverage = verify(config)
    assert "reply_ranking" in coverage.unreached
    assert "configured in plans: " in caplog.text and "reply_ranking" in caplog.text
