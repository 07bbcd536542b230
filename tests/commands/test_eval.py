"""`grebe eval`: the data checks name the bad line, the metrics are the textbook ones,
and a small real file goes through the real runtime and real models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grebe.cli import app
from grebe.commands.evaluate import (
    EvalDataError,
    Example,
    choose_plans,
    evaluate,
    plan_labels,
    read_examples,
    score,
)
from grebe.flows.settings import FlowSettings
from grebe.types import Post

# The file stays beside the flows tests: docs/quality.md runs `grebe eval` on it there.
DATA = Path(__file__).parents[1] / "flows" / "data" / "eval_small.jsonl"
SETTINGS = FlowSettings.from_section(None)
KNOWN = frozenset().union(*plan_labels(SETTINGS).values())


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("bad", "message"), [
    ('{"text": "hello"}', "line 2: no 'label' field"),
    ('{"text": "hello", "label": "spamm"}', "line 2: unknown label(s) ['spamm']"),
    ('{"text": "hello", "label": ', "line 2: not valid JSON"),
    ('["text"]', "line 2: expected a JSON object"),
    ('{"label": "spam"}', "line 2: no 'text' string"),
    ('{"text": "hi", "label": 3}', "line 2: 'label' must be a label or a list"),
    ('{"text": "hi", "label": "spam", "like_count": "many"}', "line 2: not a post"),
])
def test_bad_line_is_named(tmp_path: Path, bad: str, message: str) -> None:
    path = write(tmp_path, '{"text": "fine", "label": []}', bad)
    with pytest.raises(EvalDataError) as err:
        read_examples(path, "label", KNOWN)
    assert message in str(err.value)


def test_lines_become_posts_with_unique_ids(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"id": "x", "text": "a", "label": "spam", "lang": "en"}),
                 "", json.dumps({"id": "x", "text": "b", "label": ["hate", "offensive"]}))
    first, second = read_examples(path, "label", KNOWN)
    assert (first.post.id, first.post.lang, first.expected) == ("eval-1", "en",
                                                                frozenset({"spam"}))
    assert (second.line, second.post.id) == (3, "eval-3")
    assert second.expected == {"hate", "offensive"}


def test_metrics_and_confusion() -> None:
    def ex(n: int, *labels: str) -> Example:
        return Example(n, Post(id=f"p{n}", author_id="a", text="t"), frozenset(labels))

    examples = [ex(1, "spam"), ex(2, "spam"), ex(3), ex(4), ex(5)]
    predicted = {("p1", "spam_comment"): ["spam"], ("p2", "spam_comment"): ["not_spam"],
                 ("p3", "spam_comment"): ["spam"], ("p4", "spam_comment"): ["not_spam"]}
    report = score(examples, predicted, {"spam_comment": frozenset({"spam", "not_spam"})})
    (row,) = report.labels  # only the labels the data names are scored
    assert (row.tp, row.fp, row.fn, row.tn) == (1, 1, 1, 2)
    assert (row.precision, row.recall, row.f1) == (0.5, 0.5, 0.5)
    assert row.fpr == pytest.approx(1 / 3)
    assert report.missing == {"spam_comment": 1}
    assert report.confusion["spam_comment"][("spam", "not_spam")] == 1
    assert report.confusion["spam_comment"][("(none)", "(none)")] == 1  # p5: no annotation
    assert report.confusion["spam_comment"][("(none)", "spam")] == 1


def test_plans_default_to_those_emitting_the_expected_labels() -> None:
    assert set(choose_plans([], SETTINGS, frozenset({"offensive"}))) == {"post_safety"}
    assert set(choose_plans([], SETTINGS, frozenset({"spam"}))) == {"spam_comment",
                                                                    "safety_ptos"}
    assert set(choose_plans([], SETTINGS, frozenset())) == set(plan_labels(SETTINGS))
    with pytest.raises(Exception, match="cannot evaluate plan"):
        choose_plans(["reply_ranking"], SETTINGS, None)


def test_cli_names_the_bad_line(tmp_path: Path) -> None:
    path = write(tmp_path, '{"text": "fine", "label": []}', '{"text": "x", "label": "nope"}')
    result = CliRunner().invoke(app, ["eval", str(path), "--label", "label"])
    assert result.exit_code == 2
    assert "line 2" in result.output and "nope" in result.output


@pytest.mark.slow
async def test_real_flows_on_a_small_real_file(tmp_path: Path) -> None:
    report = await evaluate(DATA, "expected", plans=["spam_comment", "post_safety"],
                            data_dir=tmp_path)
    rows = {(s.plan, s.label): s for s in report.labels}
    assert report.examples == 8 and report.dead_lettered == 0 and not report.missing
    spam = rows[("spam_comment", "spam")]
    assert (spam.tp, spam.fn, spam.fp) == (2, 0, 0)
    offensive = rows[("post_safety", "offensive")]
    assert offensive.recall == 1.0 and offensive.fp == 0
    assert (tmp_path / "annotations.db").exists()  # the scratch dir holds the real store


def test_cli_json_output(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", str(DATA), "--label", "expected", "--plan",
                                      "spam_comment", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["examples"] == 8 and out["plans"] == ["spam_comment"]
    assert {r["label"] for r in out["labels"]} == {"spam"}


def test_boolean_field_names_the_label(tmp_path: Path) -> None:
    path = write(tmp_path, '{"text": "a", "spam": true}', '{"text": "b", "spam": false}')
    first, second = read_examples(path, "spam", KNOWN)
    assert (first.expected, second.expected) == (frozenset({"spam"}), frozenset())
    with pytest.raises(EvalDataError, match="line 1: unknown label"):
        read_examples(write(tmp_path, '{"text": "a", "is_bad": true}'), "is_bad", KNOWN)


def test_a_benign_set_scores_every_label_that_fired() -> None:
    examples = [Example(n, Post(id=f"p{n}", author_id="a", text="t"), frozenset())
                for n in (1, 2, 3, 4)]
    predicted = {("p1", "safety_ptos"): ["spam", "spam:remove"],
                 ("p2", "safety_ptos"): ["abstain"], ("p3", "safety_ptos"): []}
    report = score(examples, predicted, {"safety_ptos": plan_labels(SETTINGS)["safety_ptos"]})
    rows = {s.label: s for s in report.labels}
    assert set(rows) == {"spam", "spam:remove"}  # abstain is not a claim
    assert rows["spam:remove"].fpr == 0.25 and rows["spam:remove"].precision == 0.0


def test_eval_runs_the_configured_policy_in_a_scratch_runtime(tmp_path: Path) -> None:
    from grebe.commands.evaluate import EVAL_TOPIC, eval_config
    from grebe.config import load_config
    from grebe.flows.registry import FACTORY

    policy = tmp_path / "policy.yaml"
    policy.write_text("policy_version: strict-9\nspam_comment: {threshold: 0.9}\n")
    base = load_config(plans={"policy_file": str(policy)},
                       store={"backend": "postgres"}, output={"broker": "kafka"})
    config = eval_config(base, tmp_path / "scratch", ["spam_comment"])
    assert config.plans["factory"] == FACTORY
    assert FlowSettings.from_section(config.plans).policy_version == "strict-9"
    # never the production store or output topic
    assert config.store.backend == "sqlite" and config.output.broker == "none"
    assert config.data_dir == tmp_path / "scratch" and config.engine.processes == 0
    assert [(s.topic, s.eligibilities) for s in config.streams] == [(EVAL_TOPIC,
                                                                     ["spam_comment"])]


def test_the_depth_labels_can_be_evaluated() -> None:
    vocab = plan_labels(SETTINGS)
    assert "coordinated_spam" in vocab["spam_comment"]
    assert {"child_safety", "needs_review", "child_safety:review", "illegal_goods.drugs",
            "child_safety:remove_and_report"} <= vocab["safety_ptos"]
