"""`grebe eval DATA.jsonl --label FIELD`: labelled posts through the real flows, scored.

This is the check a trust-and-safety team runs before shipping a policy, so it must
measure what production does, not a re-implementation of it: the posts are ingested into
a local-broker topic in a scratch data dir and the real runtime (dispatcher, in-process
engine, the configured plans and models, the SQLite annotation store) processes them
until caught up, exactly as `grebe run --exit-when-done`. The store is always SQLite in
the scratch dir and nothing is published to the output broker, so an eval never writes
into a production store or topic.

Each line is a JSON object: a post (`text` at least; any Post field is honoured, `id`
is replaced so lines never collide) plus the label field, a label or a list of labels
(`[]`: nothing should fire), or a boolean when the field is itself a label
(`{"spam": true}` with `--label spam`). Labels are scored per plan: `spam` expected on a line is
compared with the `spam` label of every selected plan that can emit it.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from grebe import codec
from grebe.config import GrebeConfig, load_config
from grebe.errors import GrebeError
from grebe.flows import banger, ptos, safety, spam
from grebe.flows.language import LABEL_ABSTAIN
from grebe.flows.registry import FACTORY
from grebe.flows.settings import FlowSettings
from grebe.types import Envelope, Post

EVAL_STREAM = "eval"
EVAL_TOPIC = "eval.posts"
EVAL_POST_PREFIX = "eval-"
NO_LABEL = "(none)"
#: "Nothing fired" labels: not scored as claims unless the data expects them by name.
NEGATIVE_LABELS = frozenset({spam.LABEL_NOT_SPAM, safety.LABEL_SAFE, LABEL_ABSTAIN})


class EvalDataError(GrebeError):
    """A line of the eval file cannot be used; the message names the line."""


def plan_labels(settings: FlowSettings) -> dict[str, frozenset[str]]:
    """Every label each classifying plan can emit (topic tags and actions are data)."""
    ptos_settings = settings.plan(ptos.PLAN.name)
    actions = {f"{c}:{r.action}" for c, rules in ptos_settings.policies.items() for r in rules}
    actions |= {f"{c}:{ptos.REVIEW}" for c in ptos.CATEGORIES} | {ptos.LABEL_NEEDS_REVIEW}
    actions |= {f"{c}.{s}" for c, subs in ptos_settings.subtypes.items() for s in subs}
    actions |= {f"sexual.{ptos_settings.media_subtype}"}
    abstain = LABEL_ABSTAIN
    return {
        spam.PLAN.name: frozenset({spam.LABEL_SPAM, spam.LABEL_NOT_SPAM, spam.LABEL_COORDINATED,
                                   abstain}),
        safety.PLAN.name: frozenset({safety.LABEL_SAFE, safety.LABEL_NSFW, safety.LABEL_HATE,
                                     safety.LABEL_OFFENSIVE, safety.LABEL_INSULT,
                                     safety.LABEL_THREAT, abstain}),
        ptos.PLAN.name: frozenset({*ptos.CATEGORIES, *actions, abstain}),
        banger.PLAN.name: frozenset({banger.LABEL_BANGER}),
    }


@dataclass(frozen=True)
class Example:
    line: int
    post: Post
    expected: frozenset[str]


def _labels_of(value: Any, line: int, label_field: str) -> frozenset[str]:
    if isinstance(value, bool):  # {"spam": true}: the field names the label
        return frozenset({label_field}) if value else frozenset()
    if isinstance(value, str) and value:
        return frozenset({value})
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return frozenset(value)
    raise EvalDataError(f"line {line}: {label_field!r} must be a label or a list of labels, "
                        f"got {value!r}")


def read_examples(path: Path, label_field: str, known: frozenset[str]) -> list[Example]:
    """Every line as an Example; the first bad line raises EvalDataError naming it, so a
    typo in a label never silently becomes a false negative."""
    examples: list[Example] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise EvalDataError(f"line {number}: not valid JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise EvalDataError(f"line {number}: expected a JSON object")
            if label_field not in obj:
                raise EvalDataError(f"line {number}: no {label_field!r} field")
            expected = _labels_of(obj.pop(label_field), number, label_field)
            unknown = sorted(expected - known)
            if unknown:
                raise EvalDataError(f"line {number}: unknown label(s) {unknown}; the plans "
                                    f"emit {sorted(known)}")
            if not isinstance(obj.get("text"), str):
                raise EvalDataError(f"line {number}: no 'text' string")
            obj["id"] = f"{EVAL_POST_PREFIX}{number}"
            obj.setdefault("author_id", f"{EVAL_POST_PREFIX}author-{number}")
            try:
                post = msgspec.convert(obj, Post)
            except msgspec.ValidationError as exc:
                raise EvalDataError(f"line {number}: not a post ({exc})") from exc
            examples.append(Example(number, post, expected))
    if not examples:
        raise EvalDataError(f"{path} holds no examples")
    return examples


@dataclass
class LabelStats:
    """One (plan, label) pair's confusion counts and the rates derived from them."""

    plan: str
    label: str
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p is not None and r is not None and p + r else None

    @property
    def fpr(self) -> float | None:
        return self.fp / (self.fp + self.tn) if self.fp + self.tn else None

    def as_dict(self) -> dict[str, Any]:
        return {"plan": self.plan, "label": self.label, "tp": self.tp, "fp": self.fp,
                "fn": self.fn, "tn": self.tn, "precision": self.precision,
                "recall": self.recall, "f1": self.f1, "fpr": self.fpr}


@dataclass
class EvalReport:
    examples: int
    plans: list[str]
    labels: list[LabelStats]
    confusion: dict[str, Counter[tuple[str, str]]]  # plan -> (expected, predicted) -> n
    missing: dict[str, int] = field(default_factory=dict)  # plan -> posts with no annotation
    dead_lettered: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "examples": self.examples, "plans": self.plans,
            "labels": [s.as_dict() for s in self.labels],
            "confusion": {plan: [{"expected": e, "predicted": p, "count": n}
                                 for (e, p), n in sorted(pairs.items())]
                          for plan, pairs in self.confusion.items()},
            "missing_annotations": self.missing, "dead_lettered": self.dead_lettered,
        }


def score(examples: list[Example], predicted: dict[tuple[str, str], list[str]],
          vocab: dict[str, frozenset[str]]) -> EvalReport:
    """Compare expected labels with each plan's annotation labels (`predicted` is keyed by
    (post id, plan); a plan that wrote nothing for a post predicted nothing)."""
    plans = sorted(vocab)
    expected_any = set().union(*(e.expected for e in examples))
    stats: dict[tuple[str, str], LabelStats] = {}
    confusion: dict[str, Counter[tuple[str, str]]] = {p: Counter() for p in plans}
    missing: Counter[str] = Counter()
    for example in examples:
        for plan in plans:
            labels = predicted.get((example.post.id, plan))
            if labels is None:
                missing[plan] += 1
            got = set(labels or ()) & vocab[plan]
            want = example.expected & vocab[plan]
            # The labels the data speaks about; a set with no expected labels at all (a
            # benign set) scores every label that fired, so its FPR is visible.
            scored = expected_any if expected_any else got - NEGATIVE_LABELS
            for label in sorted(scored & vocab[plan]):
                row = stats.setdefault((plan, label), LabelStats(plan, label))
                hit, truth = label in got, label in want
                row.tp += hit and truth
                row.fp += hit and not truth
                row.fn += truth and not hit
            for e in sorted(want) or [NO_LABEL]:
                for p in sorted(got) or [NO_LABEL]:
                    confusion[plan][(e, p)] += 1
    # Negatives are counted at the end: a label first predicted on line 40 is a true
    # negative on the lines before it too.
    for row in stats.values():
        row.tn = len(examples) - row.tp - row.fp - row.fn
    return EvalReport(examples=len(examples), plans=plans,
                      labels=[stats[k] for k in sorted(stats)], confusion=confusion,
                      missing=dict(missing))


def choose_plans(requested: list[str], settings: FlowSettings,
                 expected: frozenset[str] | None) -> dict[str, frozenset[str]]:
    """The plans to run and their label vocabularies: those named, else every plan that
    can emit one of the expected labels (every classifying plan when none is given)."""
    vocab = plan_labels(settings)
    unknown = sorted(set(requested) - set(vocab))
    if unknown:
        raise GrebeError(f"cannot evaluate plan(s) {unknown}: eval scores the labelling "
                         f"plans {sorted(vocab)}")
    if requested:
        return {p: vocab[p] for p in requested}
    chosen = {p: v for p, v in vocab.items() if expected and v & expected}
    return chosen or vocab


def eval_config(base: GrebeConfig, data_dir: Path, plans: list[str]) -> GrebeConfig:
    """The base config's plans, models and media settings, in a scratch runtime: one
    local-broker stream, in-process engine, SQLite store, no output publishing."""
    return load_config(
        data_dir=data_dir,
        streams=[{"name": EVAL_STREAM, "topic": EVAL_TOPIC, "eligibilities": plans}],
        plans={**base.plans, "factory": FACTORY},
        inference=base.inference, media=base.media,
        engine={"processes": 0, "concurrency": base.engine.concurrency,
                "task_timeout_s": base.engine.task_timeout_s},
        dispatcher={"backoff_base_s": 0.05, "backoff_max_s": 0.5},
        store={"backend": "sqlite"}, output={"broker": "none"}, metrics={"enabled": False},
    )


async def run_flows(config: GrebeConfig, examples: list[Example]) -> tuple[
        dict[tuple[str, str], list[str]], int]:
    """Ingest, run the runtime until caught up, read back (post, plan) -> labels and the
    number of dead letters."""
    import asyncio

    from grebe.app.supervisor import Runtime
    from grebe.brokers.factory import local_dead_letter_count, local_log
    from grebe.brokers.local import LocalProducer
    from grebe.stores.sqlite import iter_all

    producer = LocalProducer(local_log(config))
    await producer.start()
    try:
        await producer.publish_many(EVAL_TOPIC, [
            (e.post.id.encode(), codec.encode(Envelope(post=e.post))) for e in examples])
    finally:
        await producer.stop()
    runtime = Runtime(config)
    await runtime.start()
    try:
        await runtime.wait_caught_up()
    finally:
        await runtime.stop()
    dead = await local_dead_letter_count(config)
    rows = await asyncio.to_thread(lambda: list(iter_all(config.sqlite_path)))
    return {(a.post_id, a.producer): list(a.labels) for a in rows}, dead


async def evaluate(path: Path, label_field: str, *, base: GrebeConfig | None = None,
                   plans: list[str] | None = None, data_dir: Path | None = None) -> EvalReport:
    """Read, run through the real flows, score. `base` defaults to the packaged
    default.yaml (the production-shaped config)."""
    from grebe.flows.demo import default_config_raw

    if base is None:
        raw = default_config_raw()
        base = load_config(plans=raw.get("plans", {}), inference=raw.get("inference", {}),
                           media=raw.get("media", {}))
    settings = FlowSettings.from_section(base.plans)
    # A label no plan emits is a typo (an error); one only unselected plans emit is
    # simply not scored.
    every = frozenset().union(*plan_labels(settings).values())
    examples = read_examples(path, label_field, every)
    expected = frozenset().union(*(e.expected for e in examples))
    vocab = choose_plans(plans or [], settings, expected)
    scratch = Path(data_dir or tempfile.mkdtemp(prefix="grebe-eval-"))
    config = eval_config(base, scratch, sorted(vocab))
    predicted, dead = await run_flows(config, examples)
    report = score(examples, predicted, vocab)
    report.dead_lettered = dead
    return report
