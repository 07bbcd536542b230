"""The pure scoring functions of the flows."""

from __future__ import annotations

import numpy as np
import pytest

from grebe.flows import banger, embeddings, multimodal, ptos_rules, replies, spam
from grebe.flows.settings import BangerSettings, ReplySettings, SpamSettings
from grebe.flows.text_signals import TextSignals
from grebe.types import Post

QUIET = TextSignals(links=0, shouting=0.0, repetition=0.0, duplicates=0)


def test_spam_noisy_or() -> None:
    settings = SpamSettings()
    score, reason = spam.combine(0.99, QUIET, 0.0, settings)
    assert score == pytest.approx(0.9 * 0.99) and reason == "spam head 0.99"
    dup = TextSignals(links=0, shouting=0.0, repetition=0.0, duplicates=2)
    score, reason = spam.combine(0.0, dup, 0.0, settings)
    assert score == pytest.approx(0.6) and "posted 2 time(s) before" in reason
    both, _ = spam.combine(0.5, dup, 0.5, settings)
    assert both > max(0.9 * 0.5, 0.6)  # independent evidence adds up
    assert spam.combine(0.01, QUIET, 0.0, settings)[1] == "no spam signal"


def test_ptos_lexicon() -> None:
    assert ptos_rules.lexicon_hits("I want to DIE. I want to die", ["want to die"]) == [
        "want to die", "want to die"]
    assert ptos_rules.lexicon_hits("shootings", ["shoot"]) == []  # whole words only
    assert ptos_rules.lexicon_score([], 0.75) == 0.0
    assert ptos_rules.lexicon_score(["a"], 0.75) == 0.75
    assert ptos_rules.lexicon_score(["a", "b"], 0.75) == pytest.approx(0.875)


def test_reply_bins() -> None:
    settings = ReplySettings()
    assert replies.local_score(0.6, 0.0, 0.0, settings)[0] == 3
    assert replies.local_score(0.35, 0.0, 0.0, settings)[0] == 2
    assert replies.local_score(0.2, 0.0, 0.0, settings)[0] == 1
    assert replies.local_score(0.05, 0.0, 0.0, settings)[0] == 0
    assert replies.local_score(0.9, 0.9, 0.0, settings) == (0, "toxic 0.90")
    assert replies.local_score(0.9, 0.0, 0.85, settings) == (0, "spam 0.85")


def test_banger_parts() -> None:
    settings = BangerSettings(min_words=6, max_words=80)
    assert banger.shape_score(3, settings) == 0.5
    assert banger.shape_score(20, settings) == 1.0
    assert banger.shape_score(160, settings) == 0.5
    post = Post(id="1", author_id="a", like_count=5, repost_count=0, view_count=100)
    assert banger.engagement_score(post, 0.1) == 0.5
    assert banger.engagement_score(Post(id="1", author_id="a"), 0.1) == 0.0


def test_central_sentences_pick_the_consensus() -> None:
    vectors = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 0, 1], [0.95, 0, 0.05]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert embeddings.central_sentences(vectors, 2) == [1, 3] or embeddings.central_sentences(
        vectors, 2) == [0, 3]
    assert 2 not in embeddings.central_sentences(vectors, 3)


def test_fuse_weights_and_renormalises() -> None:
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    fused = multimodal.fuse({"text": a, "ocr": b}, {"text": 3, "ocr": 1})
    assert np.linalg.norm(fused) == pytest.approx(1.0)
    assert fused[0] == pytest.approx(3 / np.sqrt(10))
    assert np.allclose(multimodal.fuse({"text": a}, {"text": 0.5, "ocr": 1}), a)
    with pytest.raises(ValueError):
        multimodal.fuse({"x": a}, {"text": 1})
