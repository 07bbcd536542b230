"""The shipped spam head: weight file, scoring maths, and real corpus messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grebe.errors import InferenceError
from grebe.inference.minilm import MODEL_NAME, MiniLMModel
from grebe.inference.spam_corpus import (
    LEAD_CHARS,
    CorpusMessage,
    body_lead,
    clean_subject,
    email_parts,
    email_text,
    html_to_text,
)
from grebe.inference.spam_head import SpamHead, packaged_weights_path

# Real SpamAssassin messages (bodies shortened), one per group.
SPAM_MAIL = b"""From: "Promo" <deals@example.biz>
Subject: Reach millions on the internet!!
Content-Type: text/html

<html><body><p>Dear Consumers, Increase your Business Sales! How?? By targeting millions
of buyers via e-mail !! 15 MILLION EMAILS + Bulk Mailing Software For Only $100.00 super
low price! ACT NOW !!! Our Fresh Addresses Will Bring You Incredible Results!</p>
<p>To be removed from our list click <a href="http://x">here</a>.</p></body></html>
"""
HAM_MAIL = b"""From: Matthias Saou <matthias@example.net>
Subject: Holidays for freshrpms.net :-)
Content-Type: text/plain; charset=us-ascii

Hi all, I'll be leaving this evening until next Monday, with no access to whatsoever
to a single computer until then, woohoo, real holidays! :-) So don't be worried if
there's a new release of your favorite package and that it's not updated quickly.
Matthias
"""


SANITY_POSTS = Path(__file__).parent / "data" / "spam_sanity_posts.json"


@pytest.fixture(scope="module")
def head() -> SpamHead:
    return SpamHead.load()


@pytest.fixture(scope="module")
def model() -> MiniLMModel:
    return MiniLMModel(intra_op_threads=1)


def test_packaged_weights_are_small_and_described(head: SpamHead) -> None:
    assert packaged_weights_path().stat().st_size < 16_000
    assert head.dim == 384 and head.embedder == MODEL_NAME
    assert 0.0 < head.threshold < 1.0
    held_out = head.metadata["held_out"]
    assert held_out["f1"] > 0.9 and held_out["test_size"] > 1000
    # Trained on short views too: held-out subject lines and body leads are reported.
    assert held_out["short"]["f1"] > 0.8 and held_out["short"]["size"] > 1000
    assert 0 < head.metadata["short_weight"] <= 1


def test_score_is_the_logistic_of_the_linear_model(head: SpamHead) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # like real embeddings
    expected = 1 / (1 + np.exp(-(x.astype(np.float64) @ head.coef + head.intercept)))
    np.testing.assert_allclose(head.score(x), expected, rtol=1e-4, atol=1e-6)
    assert head.score(x[0]).shape == (1,)
    with pytest.raises(InferenceError, match="384-d"):
        head.score(np.zeros((2, 10)))


def test_save_and_load_round_trip_and_bad_files(tmp_path: Path) -> None:
    head = SpamHead(np.arange(4, dtype=np.float32), -1.0, 0.3, {"version": "t"})
    head.save(tmp_path / "h.npz")
    again = SpamHead.load(tmp_path / "h.npz")
    assert again.threshold == pytest.approx(0.3) and again.metadata == {"version": "t"}
    np.testing.assert_array_equal(again.coef, head.coef)
    (tmp_path / "bad.npz").write_bytes(b"nope")
    with pytest.raises(InferenceError, match="cannot load"):
        SpamHead.load(tmp_path / "bad.npz")
    with pytest.raises(InferenceError, match="threshold"):
        SpamHead(np.ones(4), 0.0, 1.5)


def test_email_cleaning_keeps_subject_and_visible_text() -> None:
    spam = email_text(SPAM_MAIL)
    assert spam.startswith("Reach millions on the internet!!")
    assert "15 MILLION EMAILS" in spam and "<p>" not in spam and "\n" not in spam
    assert "From:" not in email_text(HAM_MAIL)
    assert html_to_text("<style>p{}</style><p>a &amp; b</p>").strip() == "a & b"


def test_real_messages_are_scored_on_the_right_side(head: SpamHead, model: MiniLMModel) -> None:
    spam, ham = head.score(model.encode([email_text(SPAM_MAIL), email_text(HAM_MAIL)]))
    assert spam >= head.threshold > ham
    assert json.dumps(head.metadata)  # metadata stays JSON


def test_short_views_drop_email_furniture() -> None:
    assert clean_subject("Re: [SAdev]  RE: Fwd: [ILUG] STOP THE MLM INSANITY") == (
        "STOP THE MLM INSANITY")
    assert clean_subject("[zzzzteana] Moscow bomber") == "Moscow bomber"
    body = ("On Mon, Jim wrote:\n> quoted line\n> more quoted\nI agree with that. "
            "The second sentence is here!\n-- \nsignature")
    assert body_lead(body) == "I agree with that. The second sentence is here!"
    long_body = "A first sentence that runs on for a while. " * 10
    lead = body_lead(long_body)
    assert len(lead) <= LEAD_CHARS and lead.endswith("while.")
    assert body_lead("word " * 100).endswith("word") and len(body_lead("word " * 100)) <= 200
    subject, body = email_parts(HAM_MAIL)
    assert subject.startswith("Holidays") and "\n" in body  # line breaks kept for the lead


def test_short_views_are_distinct_and_long_enough() -> None:
    m = CorpusMessage("spam-1", "x", "t", 1, subject="Cheap pills", lead="Cheap pills")
    assert m.short_views() == ("Cheap pills",)
    assert CorpusMessage("spam-1", "x", "t", 1, subject="hi", lead="").short_views() == ()


def _sanity_posts() -> dict[str, Any]:
    return json.loads(SANITY_POSTS.read_text())


def test_hand_written_short_posts_are_separated(head: SpamHead, model: MiniLMModel) -> None:
    """A hand-written sanity check, not a benchmark (see the data file's description):
    short benign posts, some promotional-sounding, must score low and obvious spam high."""
    posts = _sanity_posts()
    benign = head.score(model.encode([p["text"] for p in posts["benign"]]))
    spam = head.score(model.encode([p["text"] for p in posts["spam"]]))
    assert len(benign) >= 20 and len(spam) >= 10
    assert benign.mean() < 0.5 < spam.mean()
    worst_benign = [posts["benign"][i]["text"] for i in np.argsort(benign)[-3:]]
    assert (benign < 0.5).mean() >= 0.85, (benign.round(2), worst_benign)
    assert (spam > 0.5).mean() >= 0.9, spam.round(2)
    assert spam.min() > np.median(benign)  # even the weakest spam beats a typical post
