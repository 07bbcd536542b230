"""The shipped spam head: weight file, scoring maths, and real corpus messages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from grebe.errors import InferenceError
from grebe.inference.minilm import MODEL_NAME, MiniLMModel
from grebe.inference.spam_corpus import email_text, html_to_text
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


@pytest.fixture(scope="module")
def head() -> SpamHead:
    return SpamHead.load()


def test_packaged_weights_are_small_and_described(head: SpamHead) -> None:
    assert packaged_weights_path().stat().st_size < 16_000
    assert head.dim == 384 and head.embedder == MODEL_NAME
    assert 0.0 < head.threshold < 1.0
    held_out = head.metadata["held_out"]
    assert held_out["f1"] > 0.9 and held_out["test_size"] > 1000


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


def test_real_messages_are_scored_on_the_right_side(head: SpamHead) -> None:
    model = MiniLMModel(intra_op_threads=1)
    spam, ham = head.score(model.encode([email_text(SPAM_MAIL), email_text(HAM_MAIL)]))
    assert spam >= head.threshold > ham
    assert json.dumps(head.metadata)  # metadata stays JSON
