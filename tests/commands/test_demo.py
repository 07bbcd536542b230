"""The demo job end to end through the real runtime (local broker, dispatcher, SQLite
store); here with model doubles so it is quick — test_real_models.py runs it for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.conftest import fake_models
from flows.doubles import FakeMedia
from grebe.commands import demo
from grebe.flows import models
from grebe.flows.services import MediaFacts
from grebe.stores.sqlite import SqliteStore, iter_all


@pytest.fixture
def doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "build_models", lambda config, settings: fake_models())
    monkeypatch.setattr(models, "build_media",
                        lambda config, m, peers=None: FakeMedia(
                            MediaFacts(ocr_text="", nsfw=(0.01,))))


@pytest.mark.slow
async def test_demo_runs_every_flow_and_writes_a_report(tmp_path: Path, doubles) -> None:
    progress: list[tuple[int, int]] = []
    summary = await demo.run_demo(tmp_path, on_progress=lambda d, t: progress.append((d, t)))
    assert summary.messages == 303 and summary.dead_lettered == 0
    assert progress[-1] == (303, 303)
    assert set(summary.flows) == {p.name for p in __import__(
        "grebe.flows.registry", fromlist=["PLANS"]).PLANS}
    for name, stats in summary.flows.items():
        assert stats.statuses.get("failed", 0) == 0, name
        assert stats.statuses.get("success", 0) > 0, name
    spam = summary.flows["spam_comment"]
    assert spam.labels["spam"] + spam.labels["not_spam"] == spam.statuses["success"]
    # Corpus spam: 80 replies, 4 pasted copies, 40 comments; corpus ham: 40 replies, one of
    # which answers its own author's post (the demo set's seeded draw), and the reply
    # filter skips self-replies.
    c = summary.spam_confusion
    assert (c["tp"] + c["fn"], c["fp"] + c["tn"]) == (124, 39)
    html = summary.report.read_text()
    assert "spam_comment" in html and "reply_ranking" in html and "<script" not in html
    store = SqliteStore(tmp_path / "annotations.db")
    await store.start()
    try:
        # Plan verdicts; the store also holds the post/user records plans write beside them.
        verdicts = [a for a in iter_all(tmp_path / "annotations.db") if a.producer in summary.flows]
        assert len(verdicts) == summary.annotations < await store.count()
        rows = await store.get("written-01")
        assert {a.producer for a in rows} == {"post_safety", "safety_ptos"}
    finally:
        await store.stop()
