from __future__ import annotations

from grebe.flows.author_memory import AuthorMemory
from grebe.flows.text_signals import (
    count_links,
    repetition,
    sentences,
    shouting,
    text_signals,
)


def test_text_signals() -> None:
    assert count_links("see http://a.b/c and www.d.e and https://f") == 3
    assert shouting("BUY NOW THIS IS GREAT", 12) > 0.9
    assert shouting("Hi", 12) == 0.0  # too short to judge
    assert repetition("buy buy buy buy buy buy buy buy", 8) == 1 - 1 / 8
    assert repetition("one two three", 8) == 0.0
    assert sentences("One. Two!  Three?\nFour") == ["One.", "Two!", "Three?", "Four"]


def test_author_memory_counts_copies_not_retries() -> None:
    now = [1000.0]
    memory = AuthorMemory(authors=10, texts_per_author=5, window_s=60, clock=lambda: now[0])
    assert memory.observe("a", "p1", "Win a PRIZE http://x") == 0
    assert memory.observe("a", "p2", "win a prize") == 1  # case, spacing, links ignored
    assert memory.observe("a", "p2", "win a prize") == 1  # a retry of p2 is not a copy
    assert memory.observe("b", "p3", "win a prize") == 0  # other authors are separate
    now[0] += 61
    assert memory.observe("a", "p4", "win a prize") == 0  # outside the window


def test_author_memory_is_bounded() -> None:
    memory = AuthorMemory(authors=2, texts_per_author=3, window_s=60)
    for i in range(10):
        memory.observe("a", f"p{i}", "same")
    assert memory.observe("a", "new", "same") == 3  # only the last 3 are remembered
    for author in "xyz":
        memory.observe(author, "q", "t")
    assert len(memory._recent) == 2


def test_text_signals_bundle() -> None:
    memory = AuthorMemory(authors=10, texts_per_author=5, window_s=60)
    sig = text_signals("FREE!!! http://a http://b", author_id="a", post_id="1", memory=memory,
                       shouting_min_letters=4, repetition_min_tokens=8)
    assert sig.links == 2 and sig.shouting == 1.0 and sig.duplicates == 0


def test_sentence_spans_point_at_the_sentences_in_the_text() -> None:
    from grebe.flows.text_signals import sentence_spans, sentences

    text = "  Hi!!! ok\u00a0.  yes 🎉. \n\n no  "
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == sentences(text) == ["Hi!!!", "ok\u00a0.", "yes 🎉.",
                                                               "no"]
    assert sentence_spans("") == sentence_spans(" \n ") == []
